"""Masks as the walks meet them: a term made only of masks, constants and shapes.

A mask is whatever combination of a value that does not depend on the model's values reaches the
scores, the probabilities or the attention's result: a boolean mask lowered to arithmetic
(``Mul(Cast(m), S) + Mul(-1e9, Cast(Not(m)))``, a ``Where`` spelled as ``Mul(Cast(m), X) +
Mul(0, Cast(Not(m)))``), a causal mask built from ``Range``/``Less``, a stored 0/1 table. The walks
pass an Add or Mul whose other operand is such a term; a residual connection (the block's input
added back) is a value of the run, and the walk to the output projection stops there.
"""

from __future__ import annotations

from mhainspect.ir.dataflow import VALUE_PRESERVING_OPS, GraphIndex
from mhainspect.ir.dtypes import is_float
from mhainspect.ir.graph import Node, Tensor

# Ops whose output is a value of the model whatever their inputs: products with weights, norms.
_VALUE_OPS = frozenset({"MatMul", "Gemm", "Einsum", "FusedMatMul", "Conv", "MatMulNBits", "MatMulInteger",
                        "QLinearMatMul", "Softmax", "LayerNormalization", "SimplifiedLayerNormalization",
                        "RMSNormalization", "SkipLayerNormalization", "BatchNormalization"})
_SHAPE_OPS = frozenset({"Shape", "Size"})
_MAX_NODES = 48


def mask_term(index: GraphIndex, name: str) -> bool:
    """Whether ``name`` is computed from masks, constants and shapes only: no float graph input, no
    product, norm or embedding lookup (a Gather from a stored float table) among what it is made of."""
    stack, seen = [name], {name}
    inputs = {v.name: v for v in index.graph.inputs}
    weights = index.graph.weights
    while stack:
        cur = stack.pop()
        if not index.is_activation(cur):
            continue  # stored, or computed from stored tensors and shapes: a constant of the run
        node = index.producer.get(cur)
        if node is None:
            declared = inputs.get(cur)
            if declared is None or is_float(declared.dtype):
                return False  # a float input of the graph: the model's values
            continue  # an integer or boolean input: a mask, ids, lengths
        op = node.op
        if op in _SHAPE_OPS:
            continue
        if op in _VALUE_OPS or len(seen) > _MAX_NODES:
            return False
        if op == "Gather" and node.inputs and (t := weights.get(node.inputs[0])) is not None \
                and t.numel > 1 and is_float(t.dtype):
            return False  # an embedding lookup: the model's values
        for x in node.inputs:
            if x and x not in seen:
                seen.add(x)
                stack.append(x)
    return True


# Ops that only move or broadcast a stored mask on its way to the scores.
_VIEWS = frozenset({"Reshape", "Expand", "Unsqueeze", "Squeeze", "Transpose", "Tile", "Slice"}) | VALUE_PRESERVING_OPS
_MASKED_BELOW = -1e4  # an additive mask hides a key with a large negative number (or -inf)


def folded_masks(index: GraphIndex, path: tuple[Node, ...]) -> set[str]:
    """The stored masks ``path`` (the nodes between Q·Kᵀ and the Softmax) applies: a 0/1 table
    multiplied in, or an additive one of 0 and large negative values, that a converter folded from
    the model's causal or padding mask (both values present). Not parameters."""
    on_path = {n.outputs[0] for n in path if n.outputs}
    found: set[str] = set()
    for node in path:
        if node.op not in ("Add", "Sub", "Mul", "Where"):
            continue
        for x in node.inputs:
            if x and x not in on_path and (t := index.stored_through(x, _VIEWS)) is not None and _mask_values(t):
                found.add(t.name)
    return found


def _mask_values(t: Tensor) -> bool:
    values = t.mask_values
    if not values or not is_float(t.dtype):
        return False
    distinct = set(values)
    return distinct == {0.0, 1.0} or (0.0 in distinct and len(distinct) == 2 and min(distinct) <= _MASKED_BELOW)

