"""Parameters a block holds besides Q/K/V/O: tables added to its scores (relative-position biases,
T5's and Swin's tables, also where the exporter folded the gather), learned tables multiplied into a
term it adds (VITS's emb_rel_k / emb_rel_v), and learned K/V rows (add_bias_kv)."""

from __future__ import annotations

from collections import deque

from mhainspect.ir.copies import held_params
from mhainspect.ir.dataflow import VALUE_PRESERVING_OPS, GraphIndex, WeightRef
from mhainspect.ir.dtypes import is_float
from mhainspect.ir.graph import Node, Tensor
from mhainspect.matchers.block import BlockBuilder
from mhainspect.results import Evidence, EvidenceSource

_PRODUCTS = {"MatMul", "Einsum", "FusedMatMul"}
_MAX_SIDE_NODES = 24

_BIAS_PATH = {"Transpose", "Unsqueeze", "Squeeze", "Reshape", "Slice", "Expand", "Add",
              "Permute", "Concat", "Mul", "Where"} | VALUE_PRESERVING_OPS


def collect_extras(index: GraphIndex, b: BlockBuilder, score_path: tuple[Node, ...]) -> None:
    """Parameters added to the scores (relative-position tables, ALiBi-like learned biases) and
    learned K/V rows (nn.MultiheadAttention add_bias_kv) belong to the block but not to Q/K/V/O: the
    tables sit outside its total (``extra``), the rows inside it (``kv_rows``: they are K's and V's)."""
    on_path = {n.outputs[0] for n in score_path}
    for node in score_path:
        if node.op != "Add":
            continue
        for x in node.inputs:
            if x in on_path or not x:
                continue
            table = _embedding_table(index, x)
            if table is not None:
                held = table.numel if table.logical is not None else held_params(index.graph, table.tensor)
                b.extras[table.tensor.name] = held
                b.evidence.append(Evidence("extra", held, EvidenceSource.WEIGHT_SHAPE, f"score bias table "
                                           f"{table.tensor.name} {list(table.shape)} added at {node.name}"))
            elif index.is_activation(x):
                collect_tables(index, b, x, f"added to the scores at {node.name}")
            elif (folded := _folded_table(index, x)) is not None and folded.name not in b.extras:
                held = held_params(index.graph, folded)  # what its values show it holds
                b.extras[folded.name] = held
                b.evidence.append(Evidence("extra", held, EvidenceSource.WEIGHT_SHAPE, f"score bias table "
                                           f"{folded.name} {list(folded.shape)} (folded with its index) "
                                           f"added at {node.name}"))
    for role in ("k", "v"):
        r = b.roles.get(role)
        if r is None or r.traced is None:
            continue
        for node in r.traced.path:
            if node.op != "Concat":
                continue
            for x in node.inputs:
                # A stored row, or one broadcast to the batch (bias_k.repeat(1, bsz, 1)): the Tile of a
                # learned tensor is a value of the run, so the broadcast is looked through first.
                ref = _expanded_weight(index, x)
                if ref is None and not index.is_activation(x):
                    wref = index.weight(x)
                    ref = wref.tensor if wref is not None else None
                # Not a parameter: the zeros add_zero_attn appends, folded to a constant by the exporter.
                if ref is not None and ref.may_be_parameter:
                    b.kv_rows[ref.name] = ref.numel
                    b.evidence.append(Evidence("kv_rows", ref.numel, EvidenceSource.WEIGHT_SHAPE,
                                               f"learned {role.upper()} row {ref.name} concatenated at {node.name}"))


# Ops that move or select a learned table's entries (relative-position tables padded and sliced to
# the sequence, broadcast over the batch) without computing with them.
_TABLE_VIEW_OPS = {"Pad", "Slice", "Gather", "Reshape", "Transpose", "Unsqueeze", "Squeeze", "Expand", "Tile",
                   "Concat", "Flatten"} | VALUE_PRESERVING_OPS
# Ops between a product with a table and the scores (or the result) it is added to: the re-indexing
# from relative to absolute positions.
_RELATIVE_PATH = _TABLE_VIEW_OPS | {"Mul", "Div", "Add", "Sub", "Where"}


def collect_tables(index: GraphIndex, b: BlockBuilder, start: str, where: str) -> None:
    """Learned tables multiplied into a term the block adds (VITS's emb_rel_k with Q into the scores,
    emb_rel_v with the probabilities into the result): walk back from ``start`` over re-indexing ops to
    a product with an activation, then from its other operand over view ops to a stored parameter."""
    stack, seen = [start], {start}
    while stack and len(seen) < _MAX_SIDE_NODES:
        node = index.producer.get(stack.pop())
        if node is None:
            continue
        if node.op in _PRODUCTS and len(node.inputs) >= 2:
            for x in node.inputs[:2]:
                if x and not index.is_activation(x):
                    t = _viewed_table(index, x)
                    if t is not None and t.name not in b.extras:
                        held = held_params(index.graph, t)  # an exporter's padded copy: its inner part
                        b.extras[t.name] = held
                        b.evidence.append(Evidence("extra", held, EvidenceSource.WEIGHT_SHAPE,
                                                   f"relative-position table {t.display_name} {list(t.shape)} "
                                                   f"multiplied at {node.name}, {where}"))
            continue
        if node.op not in _RELATIVE_PATH:
            continue
        for x in node.inputs:
            if x and x not in seen and index.is_activation(x):
                seen.add(x)
                stack.append(x)


def _folded_table(index: GraphIndex, name: str) -> Tensor | None:
    """The stored tensor ``name`` is a view of (through ops that only move its entries) when its values
    showed it to be a table the exporter folded with its index (``graph.folded``: Swin's bias gathered
    into [N·N, h] or [1, h, N, N]); None for any other stored tensor (a mask is no table of the block)."""
    folded = index.graph.folded
    if not folded:
        return None
    for _ in range(_MAX_SIDE_NODES):
        if name in folded:
            return index.graph.weights.get(name)
        node = index.producer.get(name)
        if node is None or node.op not in _TABLE_VIEW_OPS or not node.inputs or not node.inputs[0]:
            return None
        name = node.inputs[0]
    return None


def _viewed_table(index: GraphIndex, name: str) -> Tensor | None:
    """The stored float parameter (more than one element) ``name`` is a view of, through ops that only
    move or select its entries; None when anything computes with it."""
    for _ in range(_MAX_SIDE_NODES):
        t = index.graph.weights.get(name)
        if t is not None:
            ok = t.numel > 1 and t.may_be_parameter and is_float(t.dtype)
            return t if ok else None
        node = index.producer.get(name)
        if node is None or node.op not in _TABLE_VIEW_OPS or not node.inputs or not node.inputs[0]:
            return None
        if node.op == "Concat":
            parts = [x for x in node.inputs if x and _viewed_table(index, x) is not None]
            return _viewed_table(index, parts[0]) if len(parts) == 1 else None
        name = node.inputs[0]
    return None


def _expanded_weight(index: GraphIndex, name: str) -> Tensor | None:
    for _ in range(6):
        t = index.graph.weights.get(name)
        if t is not None:
            return t if not t.is_constant_node and t.numel > 1 else None
        node = index.producer.get(name)
        if node is None or node.op not in ("Expand", "Tile", "Reshape", "Unsqueeze", "Cast", "Identity"):
            return None
        name = node.inputs[0]
    return None


def _embedding_table(index: GraphIndex, name: str) -> WeightRef | None:
    """A weight gathered by position indices somewhere behind ``name`` (a few hops)."""
    queue = deque([(name, 0)])
    seen = {name}
    while queue:
        cur, depth = queue.popleft()
        node = index.producer.get(cur)
        if node is None or depth > 8:
            continue
        if node.op == "Gather" and node.inputs:
            t = index.graph.weights.get(node.inputs[0])
            if t is not None and not t.is_constant_node and len(t.shape) == 2:
                return WeightRef(t, False)
        if node.op == "GatherBlockQuantized" and node.inputs:
            ref = index.table_weight(node)  # a quantized table: its logical shape, not the packed bytes
            if ref is not None and len(ref.shape) == 2:
                return ref
        if node.op not in _BIAS_PATH:
            continue
        for x in node.inputs:
            # Position-bias inputs are often computed from shapes only (not activations).
            if x and x not in seen and x in index.producer:
                seen.add(x)
                queue.append((x, depth + 1))
    return None
