"""A sparse-attention indexer beside a block (DeepSeek-V3.2's lightning indexer, GLM-MoE-DSA's,
HunYuan-V4's): what a name-grouped ``IndexerParts`` is once the block's input width is known.

The indexer is a sub-module of the attention module with a K projection of its own and no V: it
scores the keys to choose the ones the attention reads, so its weights make what the attention
computes and count in the block's total (``params.indexer``), and its key, one vector per token
whatever its heads, is cached beside the block's K/V. Its K must read the block's input (the
tokens whose keys it scores); its query heads are its widest other projection's width over the
key's (the indexer's Q, from the input or Q's latent). Pure: no torch, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mhainspect.ir.dtypes import is_float
from mhainspect.matchers.grouping import IndexerParts, linear_dims
from mhainspect.results import AttentionBlock, Evidence, EvidenceSource, SparseIndexer, projection_tensor_names

if TYPE_CHECKING:  # a checkpoint's indexer is assembled without the graph reader's modules
    from mhainspect.ir.dataflow import GraphIndex, WeightRef
    from mhainspect.ir.graph import Node


def assemble_indexer(parts: IndexerParts | None, d_model: int | None
                     ) -> tuple[SparseIndexer | None, int, tuple[Evidence, ...]]:
    """(the indexer, its parameters, the evidence) of a block whose input is ``d_model`` wide;
    (None, 0, ()) when there is none, or when its key does not read that input (then it is not
    taken for the block's indexer: its weights stay out of the total, as any other tensor)."""
    if parts is None or d_model is None:
        return None, 0, ()
    dims = linear_dims(parts.key.weight, parts.key.module)
    if dims is None or dims[0] != d_model:
        return None, 0, ()
    width = dims[1]
    key = parts.key.weight
    evidence = [Evidence("indexer", width, EvidenceSource.WEIGHT_SHAPE,
                         f"{parts.module}: a K projection {key.name} {list(key.shape)} from the block's input "
                         f"({d_model}) and no V: a sparse-attention indexer, its key {width} values per token")]
    heads = None
    widest = max(((linear_dims(p.weight, p.module) or (0, 0))[1], p.weight.name) for p in parts.projections) \
        if parts.projections else (0, "")
    if widest[0] > width and widest[0] % width == 0:
        heads = widest[0] // width
        evidence.append(Evidence("indexer_heads", heads, EvidenceSource.WEIGHT_SHAPE,
                                 f"{widest[1]} {widest[0]} wide over the indexer's key {width}"))
    params = sum(t.numel for t in parts.tensors)
    return SparseIndexer(parts.module, width, heads, tuple(t.name for t in parts.tensors)), params, tuple(evidence)


# ----------------------------------------------------------------------------- graphs

_MAX_WALK = 400  # nodes visited looking back from one block's scores, or from one TopK


def graph_indexer(index: GraphIndex, anchor: Node, block: AttentionBlock) -> AttentionBlock:
    """A graph's block with its indexer: a ``TopK`` whose result reaches the block's scores (the keys
    the attention reads, chosen by the indexer's scores: DeepSeek-V3.2 exported, ``TopK`` ->
    ``ScatterElements`` -> ``Where`` into the scores). Its parameters are the stored weights behind the
    TopK's scores back to the block's own inputs (the tokens and Q's latent its projections read),
    none of them the block's own; its key is the widest of those read from the block's input that
    divides its query's width. The block as it is when the graph has no TopK before its scores."""
    if not index.has_op("TopK"):
        return block
    own = set(projection_tensor_names(block))
    # The walks stop at the inputs of the block's projections (its input, Q's latent) and do not go
    # past a node that reads one of the block's own weights (a latent's down-projection or norm).
    by_name = index.by_name
    stop = {i for p in block.projections if (node := by_name.get(p.node)) is not None
            for i in node.inputs if i and index.is_activation(i)}
    topks = [n for n in _behind(index, anchor.inputs[:1], stop, own) if n.op == "TopK"]
    if not topks:
        return block
    weights: dict[str, tuple[WeightRef, Node]] = {}
    for topk in topks:
        for node in _behind(index, topk.inputs[:1], stop, own):
            for pos, name in enumerate(node.inputs):
                # a product's matrix, a norm's scale and shift: not a table the scores are masked or rotated by
                if not name or index.is_activation(name) or not (
                        node.op in _PRODUCTS or (node.op in _NORMS and pos in (1, 2))):
                    continue
                ref = index.weight(name)
                if ref is None or ref.tensor.name in own or ref.tensor.numel <= 1 or not is_float(ref.tensor.dtype) \
                        or (node.op in _PRODUCTS and len(ref.shape) != 2):
                    continue
                weights.setdefault(ref.tensor.name, (ref, node))
    if not weights:
        return block
    params = sum(ref.tensor.numel for ref, _ in weights.values())
    # A MatMul's stored [in, out] weight (seen transposed: [out, in]): its output width.
    products = [(ref.shape[0], node, ref.shape[1]) if ref.transposed else (ref.shape[1], node, ref.shape[0])
                for ref, node in weights.values() if node.op == "MatMul" and len(ref.shape) == 2]
    read_input = sorted({w for w, node, rows in products if rows == block.d_model})  # the block's input
    widest = max((w for w, _, _ in products), default=0)
    keys = [w for w in read_input if 1 < w < widest and widest % w == 0]
    width = keys[-1] if keys else None
    names = tuple(sorted(weights))
    evidence = Evidence("indexer", width, EvidenceSource.WEIGHT_SHAPE,
                        f"{', '.join(t.name for t in topks)}: a TopK whose choice reaches the scores, its scores made "
                        f"with {len(names)} stored weights ({params} parameters) none of the block's: a sparse-attention "
                        f"indexer" + (f", its key {width} values per token" if width else ", its key width not shown"))
    found = SparseIndexer(topks[0].name, width, widest // width if width else None, names) if width else None
    return dataclasses.replace(
        block, params=dataclasses.replace(block.params, indexer=block.params.indexer + params,
                                          total=block.params.total + params),
        evidence=block.evidence + (evidence,), indexer=found or block.indexer)


_PRODUCTS = frozenset({"MatMul"})
_NORMS = frozenset({"LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization"})
def _behind(index: GraphIndex, starts: Sequence[str], stop: set[str], own: set[str]) -> list[Node]:
    """The nodes that compute ``starts``, looking back until a tensor in ``stop`` or a node reading one
    of the weights ``own`` (at most _MAX_WALK)."""
    seen: set[int] = set()
    out: list[Node] = []
    frontier = [s for s in starts if s and s not in stop]
    while frontier and len(out) < _MAX_WALK:
        name = frontier.pop()
        node = index.producer.get(name)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if any(i and not index.is_activation(i) and (ref := index.weight(i)) is not None and ref.tensor.name in own
               for i in node.inputs):
            continue
        out.append(node)
        frontier.extend(i for i in node.inputs if i and i not in stop and index.is_activation(i))
    return out
