"""The scale of a written-out attention: one number composed of every factor between the
projections and the Softmax (on Q, on K or Kᵀ, on the scores, FusedMatMul's alpha), each factor a
scalar folded from constants and symbolic shape dims (Sqrt(Cast(Gather(Shape(q)))) and the like).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mhainspect.ir.copies import module_path
from mhainspect.ir.dataflow import VALUE_PRESERVING_OPS, GraphIndex
from mhainspect.ir.graph import Node, Tensor
from mhainspect.matchers.block import BlockBuilder, inverse_sqrt_dim
from mhainspect.results import Evidence, EvidenceSource

_MAX_CHAIN_NODES = 24  # nodes of layout and scaling between a projection and the score product

class _NotScalar:
    """The factor is not a scalar of the arithmetic (an activation, a table, a mask)."""


_NOT_SCALAR = _NotScalar()
_ScalarFold = float | None | _NotScalar  # a value; None: computed at run time from a symbolic shape
_SCALAR_VIEWS = {"Squeeze", "Unsqueeze", "Reshape", "Flatten", "Expand"} | VALUE_PRESERVING_OPS  # Q/DQ'd constants too
_MAX_FOLD_DEPTH = 12
# Between a projection (or the tensor Q/K are read from) and the score product: where a scale sits.
_OPERAND_CHAIN = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Mul", "Div", "Expand",
                  "Tile"} | VALUE_PRESERVING_OPS


def _fold_scalar(index: GraphIndex, name: str, depth: int = 0) -> _ScalarFold:
    """The value of a one-element tensor built by scalar arithmetic (Sqrt(Cast(Gather(Shape(q))))
    and the like) from constants and shape dims, folded with the symbolic shapes; None when a
    dimension it reads is symbolic (or a constant's value was not read); _NOT_SCALAR when it is not
    such a scalar."""
    if depth > _MAX_FOLD_DEPTH:
        return _NOT_SCALAR
    t = index.graph.weights.get(name)
    if t is not None:
        return _stored_scalar(t)
    known = index.shapes.float_scalar(name)
    if known is not None:
        return known
    node = index.producer.get(name)
    if node is None or not node.inputs:
        return _NOT_SCALAR
    op = node.op
    if op in ("DequantizeLinear", "QuantizeLinear") and len(node.inputs) > 1:
        return _fold_quantized(index, node, depth)
    if op in _SCALAR_VIEWS:
        return _fold_scalar(index, node.inputs[0], depth + 1)
    if op in ("Gather", "Slice"):
        source = index.producer.get(node.inputs[0])
        return None if source is not None and source.op == "Shape" else _NOT_SCALAR  # a symbolic dim
    if op in _UNARY:
        x = _fold_scalar(index, node.inputs[0], depth + 1)
        return _UNARY[op](x) if isinstance(x, float) else x
    if op in _BINARY and len(node.inputs) == 2:
        a, b = (_fold_scalar(index, x, depth + 1) for x in node.inputs)
        if isinstance(a, _NotScalar) or isinstance(b, _NotScalar):
            return _NOT_SCALAR
        if a is None or b is None:
            return None
        try:
            result = _BINARY[op](a, b)
        except (ZeroDivisionError, OverflowError):
            return _NOT_SCALAR
        return result if isinstance(result, float) else _NOT_SCALAR  # a complex root is no scale
    return _NOT_SCALAR


def _stored_scalar(t: Tensor) -> _ScalarFold:
    if t.numel != 1:
        return _NOT_SCALAR
    if t.float_value is not None:
        return t.float_value
    return float(t.int_value[0]) if t.int_value else None  # a one-element constant whose value is not read


# Scalar arithmetic _fold_scalar folds: a result that is no real number is _NOT_SCALAR.
_UNARY: dict[str, Callable[[float], _ScalarFold]] = {
    "Sqrt": lambda x: math.sqrt(x) if x >= 0 else _NOT_SCALAR,
    "Reciprocal": lambda x: 1.0 / x if x else _NOT_SCALAR,
    "Neg": lambda x: -x,
}
_BINARY: dict[str, Callable[[float, float], object]] = {
    "Mul": lambda a, b: a * b, "Div": lambda a, b: a / b, "Add": lambda a, b: a + b, "Sub": lambda a, b: a - b,
    "Pow": lambda a, b: a ** b,
}


def _factor(index: GraphIndex, node: Node, on_tensor: str) -> tuple[float | None, str] | None:
    """The scalar factor a Mul/Div on the path applies to ``on_tensor``: (value, how it was read),
    (None, why) when it is a scalar computed at run time that does not fold, None when the node is
    no scaling (an elementwise product with an activation or a table: rotary, a mask)."""
    if node.op not in ("Mul", "Div") or len(node.inputs) != 2 or on_tensor not in node.inputs:
        return None
    pos = 0 if node.inputs[0] == on_tensor else 1
    other = node.inputs[1 - pos]
    value = _fold_scalar(index, other)
    if isinstance(value, _NotScalar):
        return None
    if value is None:
        return None, (f"the factor {other} at {node.name} does not fold to a number (computed at run time from a "
                      "dimension that is not a constant, or a constant whose value is not read)")
    if node.op == "Div":
        if pos == 1:
            return None, f"{node.name} divides a constant by the scores"
        if value == 0:
            return None, f"{node.name} divides by 0"
        return 1.0 / value, node.name
    return value, node.name


def _fold_quantized(index: GraphIndex, node: Node, depth: int) -> _ScalarFold:
    """A scalar through (De)QuantizeLinear is its value mapped by the scale and zero point, not the
    stored integer (a QOperator or QDQ graph quantizes the constant of the score scaling too)."""
    x, scale = (_fold_scalar(index, name, depth + 1) for name in node.inputs[:2])
    zero = _fold_scalar(index, node.inputs[2], depth + 1) if len(node.inputs) > 2 and node.inputs[2] else 0.0
    if isinstance(x, _NotScalar) or isinstance(scale, _NotScalar) or isinstance(zero, _NotScalar):
        return _NOT_SCALAR
    if x is None or scale is None or zero is None:
        return None
    if node.op == "DequantizeLinear":
        return (x - zero) * scale
    return float(round(x / scale) + zero) if scale else _NOT_SCALAR


def operand_chain(index: GraphIndex, tensor: str) -> tuple[Node, ...]:
    """Layout and scaling nodes right behind an attention input, source first (when Q or K has no
    traced projection, its scale still sits there)."""
    chain: list[Node] = []
    cur = tensor
    for _ in range(_MAX_CHAIN_NODES):
        node = index.producer.get(cur)
        if node is None or node.op not in _OPERAND_CHAIN:
            break
        chain.append(node)
        acts = [x for x in node.inputs[:2] if x and index.is_activation(x)] if node.op in ("Mul", "Div") else []
        cur = acts[0] if len(acts) == 1 else node.inputs[0]
    return tuple(reversed(chain))


def _folded_tokens(index: GraphIndex, tensor: str) -> str | None:
    """How to name ``tensor`` when it is learned tokens an exporter stored already computed (folded
    from a parameter, or named by no module), read with no projection in between; None otherwise."""
    if tensor not in index.tokens:
        return None
    t = index.graph.weights.get(tensor)
    if t is None or (t.origin is None and module_path(t.name)):
        return None
    sources = t.folded_params or ((t.origin,) if t.origin else ())
    return f"the stored {t.name}, learned tokens the exporter folded" + (f" from {', '.join(sources)}" if sources else "")


def _scalar_leaves(index: GraphIndex, name: str) -> list[str]:
    """The one-element stored tensors a folded scalar factor is computed from."""
    out: list[str] = []
    stack, seen = [name], {name}
    while stack and len(seen) <= _MAX_FOLD_DEPTH * 2:
        cur = stack.pop()
        t = index.graph.weights.get(cur)
        if t is not None:
            if t.numel == 1:
                out.append(cur)
            continue
        node = index.producer.get(cur)
        for x in node.inputs if node is not None else ():
            if x and x not in seen:
                seen.add(x)
                stack.append(x)
    return out


def offer_scale(index: GraphIndex, b: BlockBuilder, score: Node, score_path: tuple[Node, ...],
                 q_in: str = "", k_in: str = "") -> None:
    """One scale from every factor between the projections and the Softmax: on Q, on K or Kᵀ, on the
    scores (split between them multiplies), FusedMatMul's alpha; unknown, with the reason, when a
    factor does not fold to a number."""
    scale = 1.0
    sources: list[str] = []
    unknown: list[str] = []
    stored: list[str] = []  # one-element stored tensors the known factors are made of

    def take(node: Node, cur: str) -> None:
        nonlocal scale
        found = _factor(index, node, cur)
        if found is None:
            return
        value, how = found
        if value is None:
            unknown.append(how)
        else:
            scale *= value
            sources.append(how)
            stored.extend(_scalar_leaves(index, node.inputs[1 - node.inputs.index(cur)]))

    cur = score.outputs[0]
    for node in reversed(score_path):
        take(node, cur)
        cur = node.outputs[0]
    if score.op == "FusedMatMul":
        alpha = score.attrs.float("alpha", 1.0)
        if alpha != 1.0:
            scale *= alpha
            sources.append(f"{score.name}.alpha")
    for role, tensor in (("q", q_in), ("k", k_in)):
        r = b.roles.get(role)
        if r is not None and r.traced is not None:
            prev, path = r.traced.hit.output, r.traced.path
        else:
            path = operand_chain(index, tensor) if tensor else ()
            prev = path[0].inputs[0] if path else ""
            folded = _folded_tokens(index, prev or tensor)
            if folded is not None:
                unknown.append(f"{role.upper()} is {folded}: a factor on {role.upper()} would be inside its values")
        for node in path:
            if node.op in ("Mul", "Div"):
                on = prev if prev in node.inputs else next((x for x in node.inputs if index.is_activation(x)), "")
                take(node, on)
            prev = node.outputs[0]
    if unknown:
        b.scale = None
        b.scale_known = False
        b.evidence.append(Evidence("scale", None, EvidenceSource.SCALE, "unknown: " + "; ".join(unknown)
                                   + (f" (known factors: {', '.join(sources)})" if sources else "")))
        return
    b.scale = scale
    b.scale_known = True
    if sources:
        detail = f"scale {scale:.6g} from " + ", ".join(sources)
        b.evidence.append(Evidence("scale", scale, EvidenceSource.SCALE, detail))
        d = inverse_sqrt_dim(scale)
        if d is not None:
            b.offer("d_k", d, EvidenceSource.SCALE, f"scale 1/sqrt({d}) from " + ", ".join(sources))
            b.constants.update(stored)  # 1/√d from the head size: the converter's number, no parameter
    else:
        b.evidence.append(Evidence("scale", 1.0, EvidenceSource.SCALE, "no scaling between Q·Kᵀ and Softmax"))
