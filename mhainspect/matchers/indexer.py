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

from mhainspect.matchers.grouping import IndexerParts, linear_dims
from mhainspect.results import Evidence, EvidenceSource, SparseIndexer


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
