"""Decomposed attention: softmax(scale · Q·Kᵀ + mask)·V, as every exporter writes it unfused.

Anchored on Softmax. Walks back from the Softmax input through scale/mask/softcap ops to a
product of two activations (Q·Kᵀ), forward from its output to a product with V, then from Q, K
and V back to their projections (separate, packed via Split/Slice/Gather, Einsum kernels,
GQA repeats) and from the result forward to the output projection.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from mhainspect.ir.copies import held_params, module_path
from mhainspect.ir.dataflow import VALUE_PRESERVING_OPS, GraphIndex, WeightRef, passes_value
from mhainspect.ir.dtypes import is_float
from mhainspect.ir.graph import Node, Tensor
from mhainspect.ir.symbolic import Dim, Shape
from mhainspect.matchers.block import BlockBuilder, RoleInput, inverse_sqrt_dim
from mhainspect.matchers.projection import TracedProjection, trace_back_to_projection, trace_forward_to_projection
from mhainspect.results import Evidence, EvidenceSource, Miss

NAME = "decomposed"
_PRODUCTS = {"MatMul", "Einsum", "FusedMatMul"}
# Between Q·Kᵀ and Softmax: scaling, masks, softcapping, bias (ALiBi, relative position), casts.
_SCORE_PATH = {"Add", "Sub", "Mul", "Div", "Where", "Tanh", "Clip", "Reshape", "Squeeze",
               "Unsqueeze", "Max", "Min"} | VALUE_PRESERVING_OPS
# Between Softmax and ·V: casts, dropout, head masks, reshapes.
_PROBS_PATH = {"Where", "Reshape", "Mul", "Squeeze", "Unsqueeze"} | VALUE_PRESERVING_OPS
_MAX_SCORE_NODES = 24
NO_SCORE_PRODUCT = "no Q·Kᵀ product of two activations before the Softmax"
NO_SCORE_PRODUCT_CODE = "no_score_product"  # Miss.code of that miss: scores of another kind (additive?)


_NORMALISERS = {"ReduceLogSumExp", "ReduceMax"}


def written_softmax(index: GraphIndex, exp: Node) -> Node | None:
    """A softmax written out, as the Softmax node it computes (named as the Exp, reading the scores,
    making the normalised probabilities), or None: Exp(x − ReduceLogSumExp(x)) (Keras over several
    attention axes, where no Softmax op normalises them at once), or Exp(x [− ReduceMax(x)]) divided
    by its ReduceSum."""
    if exp.op != "Exp" or not exp.inputs or not exp.inputs[0] or not exp.outputs or not exp.outputs[0]:
        return None
    scores = exp.inputs[0]
    sub = index.producer.get(index.value_source(scores))
    if sub is not None and sub.op == "Sub" and len(sub.inputs) == 2:
        red = index.producer.get(index.value_source(sub.inputs[1]))
        if red is not None and red.op in _NORMALISERS and red.inputs \
                and index.value_source(red.inputs[0]) == index.value_source(sub.inputs[0]):
            if red.op == "ReduceLogSumExp":
                return Node(exp.name, "Softmax", (sub.inputs[0],), (exp.outputs[0],))
            scores = sub.inputs[0]
    for user, pos in index.value_users(exp.outputs[0]):
        if user.op != "Div" or pos != 0 or len(user.inputs) != 2 or not user.outputs:
            continue
        red = index.producer.get(index.value_source(user.inputs[1]))
        if red is not None and red.op == "ReduceSum" and red.inputs \
                and index.value_source(red.inputs[0]) == index.value_source(exp.outputs[0]):
            return Node(exp.name, "Softmax", (scores,), (user.outputs[0],))
    return None


def match(index: GraphIndex, softmax: Node) -> BlockBuilder | Miss:
    found = _find_score_product(index, softmax.inputs[0])
    if isinstance(found, _WalkEnd):
        return Miss(NAME, softmax.name, f"{NO_SCORE_PRODUCT} ({found.reason()})", code=NO_SCORE_PRODUCT_CODE)
    score, score_path = found
    pv = _find_value_product(index, softmax.outputs[0])
    if pv is None:
        return Miss(NAME, softmax.name, f"Softmax after {score.name} does not feed a product with V")
    pv_node, probs_tensor, v_first = pv
    operands = _operands(index, score, pv_node, probs_tensor)
    if isinstance(operands, str):
        return Miss(NAME, softmax.name, operands)
    q_in, k_in, v_in = operands

    b = BlockBuilder(index, softmax, NAME)
    stop = {softmax.name, score.name, pv_node.name}
    for role, tensor in (("q", q_in), ("k", k_in), ("v", v_in)):
        traced = trace_back_to_projection(index, tensor, stop)
        b.roles[role] = RoleInput(role, traced, tensor=tensor)
    result, value_side = _attention_result(index, pv_node, softmax)
    out = trace_forward_to_projection(index, result)
    if out is not None:
        b.output = out[0]
    else:
        b.evidence.append(Evidence("o", None, EvidenceSource.MISSING, f"no output projection after {pv_node.name}"))

    _offer_dims(index, b, score, pv_node, softmax, q_in, k_in, v_in, v_first)
    _offer_kv_repeat(index, b, k_in, stop)
    _collect_extras(index, b, score_path)
    if value_side is not None:
        _collect_tables(index, b, value_side, f"added to the product with V at {pv_node.name}")
    _offer_scale(index, b, score, score_path, q_in, k_in)
    for role in ("q", "k", "v"):
        r = b.roles[role]
        if r.traced is not None:
            _offer_path_evidence(index, b, role, r.traced)
    if b.roles["q"].traced is None:
        b.notes.append(f"Q at {score.name} does not trace back to a projection weight")
    _offer_folded_projections(index, b)
    return b


def _stored_behind(index: GraphIndex, tensor: str) -> Tensor | None:
    """The stored tensor an attention input is read from, through layout and scaling nodes."""
    path = _operand_chain(index, tensor)
    source = path[0].inputs[0] if path else tensor
    w = index.weight(source)
    return None if w is None else w.tensor


def _offer_folded_projections(index: GraphIndex, b: BlockBuilder) -> None:
    """A role with no projection in the graph whose input the exporter computed from several
    parameters (its provenance names them: learned tokens, a norm's weight, the projection's weight)
    had its projection folded at export: not in the file, so not counted, said as missing."""
    for role in ("q", "k", "v"):
        r = b.roles[role]
        if r.traced is not None or not r.tensor:
            continue
        t = _stored_behind(index, r.tensor)
        if t is not None and t.folded_params:
            b.evidence.append(Evidence(role, None, EvidenceSource.MISSING, (
                f"{role.upper()} is the stored {t.name} {list(t.shape)}, computed at export from "
                f"{', '.join(t.folded_params)} (the exporter's provenance): its projection is folded into "
                "those values, not in the file, and not counted")))


_MAX_NAMED = 3
_MAX_SIDE_NODES = 24


def _attention_result(index: GraphIndex, pv: Node, softmax: Node) -> tuple[str, str | None]:
    """The attention's result: the product with V, or that plus a term the same probabilities make
    (VITS adds probs re-indexed by relative position times a learned value table): the Add's output
    and that term. A residual Add (its other input not made from these probabilities) is not part of it."""
    out = pv.outputs[0]
    users = index.value_users(out)
    if len(users) != 1:
        return out, None
    user, pos = users[0]
    if user.op != "Add" or len(user.inputs) != 2 or not user.outputs or not user.outputs[0]:
        return out, None
    other = user.inputs[1 - pos]
    return (user.outputs[0], other) if _made_from(index, other, softmax.outputs[0]) else (out, None)


def _made_from(index: GraphIndex, tensor: str, source: str) -> bool:
    """Whether ``source`` is among the activations ``tensor`` is computed from, within a few nodes."""
    stack, seen = [tensor], {tensor}
    while stack and len(seen) < _MAX_SIDE_NODES:
        cur = stack.pop()
        if cur == source:
            return True
        node = index.producer.get(cur)
        if node is None:
            continue
        for x in node.inputs:
            if x and x not in seen and index.is_activation(x):
                seen.add(x)
                stack.append(x)
    return False


@dataclass(frozen=True)
class _WalkEnd:
    """Where the walk back from a Softmax ended without a Q·Kᵀ: products with a stored weight, ops
    that are not on a score path (where it stopped), and whether it ran out of nodes."""

    weight_products: tuple[Node, ...]
    stops: tuple[Node, ...]
    exhausted: bool

    def reason(self) -> str:
        if self.weight_products and not self.stops and not self.exhausted:
            return "a classifier or router softmax, not attention"
        parts: list[str] = []
        if self.weight_products:
            parts.append("products with a stored weight or constant at " + _named(self.weight_products))
        if self.stops:
            parts.append("the walk back from it stopped at " + _named(self.stops)
                         + ", not an op between Q·Kᵀ and its Softmax")
        if self.exhausted:
            parts.append(f"no product within {_MAX_SCORE_NODES} nodes")
        return "; ".join(parts) if parts else "its input is not computed in the graph"


def _named(nodes: tuple[Node, ...]) -> str:
    shown = ", ".join(f"{n.op} {n.name}" for n in nodes[:_MAX_NAMED])
    return shown + (f" and {len(nodes) - _MAX_NAMED} more" if len(nodes) > _MAX_NAMED else "")


def _find_score_product(index: GraphIndex, start: str) -> tuple[Node, tuple[Node, ...]] | _WalkEnd:
    queue: deque[tuple[str, tuple[Node, ...]]] = deque([(start, ())])
    seen = {start}
    visited = 0
    weight_products: list[Node] = []
    stops: list[Node] = []
    while queue and visited < _MAX_SCORE_NODES:
        cur, path = queue.popleft()
        node = index.producer.get(cur)
        if node is None:
            continue
        visited += node.op not in VALUE_PRESERVING_OPS  # Q/DQ pairs do not use up the budget
        if node.op in _PRODUCTS and _two_activations(index, node):
            return node, path
        if node.op in _PRODUCTS:
            weight_products.append(node)
            continue
        if node.op not in _SCORE_PATH or (node.op in VALUE_PRESERVING_OPS and not passes_value(node, cur)):
            stops.append(node)
            continue
        for x in node.inputs:
            if x and x not in seen and index.is_activation(x):
                seen.add(x)
                queue.append((x, path + (node,)))
    return _WalkEnd(tuple(weight_products), tuple(stops), bool(queue))


def _two_activations(index: GraphIndex, node: Node) -> bool:
    return len(node.inputs) >= 2 and all(x and index.is_run_value(x) for x in node.inputs[:2])


def _find_value_product(index: GraphIndex, start: str) -> tuple[Node, str, bool] | None:
    """The product of the probabilities with V: (node, the probabilities as it reads them, whether it
    reads them transposed). P·V reads them first; V·Pᵀ (a VAE's bmm(v, attnᵀ): channels first)
    reads them second, after a Transpose of their last two axes."""
    queue: deque[tuple[str, int, bool]] = deque([(start, 0, False)])
    seen = {start}
    while queue:
        cur, depth, swapped = queue.popleft()
        if depth > 6:
            continue
        for user, pos in index.users(cur):
            if user.op in _PRODUCTS and _two_activations(index, user):
                if user.op == "Einsum" or (pos == 0 and not swapped) or (pos == 1 and swapped and user.op == "MatMul"):
                    return user, cur, swapped
            through = user.op in _PROBS_PATH and (user.op != "Where" or pos != 0)
            turn = user.op == "Transpose" and _swaps_last_two(user)
            if through or turn:
                step = user.op not in VALUE_PRESERVING_OPS
                for o in user.outputs[:1]:
                    if o and o not in seen:
                        seen.add(o)
                        queue.append((o, depth + step, swapped ^ turn))
    return None


def _swaps_last_two(node: Node) -> bool:
    perm = node.attrs.get("perm")
    if not isinstance(perm, tuple) or len(perm) < 2:
        return False
    r = len(perm)
    return tuple(perm) == (*range(r - 2), r - 1, r - 2)


def _einsum_terms(node: Node) -> tuple[list[str], str] | None:
    eq = str(node.attrs.get("equation", "")).replace(" ", "")
    if "->" not in eq or "." in eq:
        return None
    lhs, rhs = eq.split("->")
    terms = lhs.split(",")
    return (terms, rhs) if len(terms) == 2 else None


def _operands(index: GraphIndex, score: Node, pv: Node, probs: str) -> tuple[str, str, str] | str:
    if score.op == "Einsum":
        parsed = _einsum_terms(score)
        if parsed is None:
            return f"cannot read the equation of {score.name}"
        terms, rhs = parsed
        kv_letter = rhs[-1]  # Softmax normalises over the key axis, the last of the scores
        k_pos = 0 if kv_letter in terms[0] and kv_letter not in terms[1] else 1
        q_in, k_in = score.inputs[1 - k_pos], score.inputs[k_pos]
    else:
        q_in, k_in = score.inputs[0], score.inputs[1]
        if score.op == "FusedMatMul" and score.attrs.get("transA"):
            pass
    if pv.op == "Einsum":
        v_in = pv.inputs[1] if pv.inputs[0] == probs else pv.inputs[0]
    else:
        v_in = pv.inputs[1] if pv.inputs[0] == probs else pv.inputs[0]
    return q_in, k_in, v_in


def _last_dim(index: GraphIndex, tensor: str, from_end: int = 1) -> Dim | None:
    s = index.shapes.shape(tensor)
    if s is None or len(s) < from_end:
        return None
    return s[-from_end]


def _offer_dims(index: GraphIndex, b: BlockBuilder, score: Node, pv: Node, softmax: Node,
                q_in: str, k_in: str, v_in: str, v_first: bool = False) -> None:
    if score.op == "Einsum":
        d_k = _einsum_contracted(index, score)
    elif score.op == "FusedMatMul" and score.attrs.get("transA"):
        d_k = _last_dim(index, q_in, 2)
    else:
        d_k = _last_dim(index, q_in)
    if d_k is not None and d_k.is_int:
        b.offer("d_k", d_k.coef, EvidenceSource.SHAPE, f"last axis of Q at {score.name}")
    if pv.op == "Einsum":
        d_v = _einsum_value_dim(index, pv)
    else:
        d_v = _last_dim(index, v_in, 2 if v_first else 1)  # V·Pᵀ: V's features on its second-last axis
    if d_v is not None and d_v.is_int:
        b.offer("d_v", d_v.coef, EvidenceSource.SHAPE, f"{'second-last' if v_first else 'last'} axis of V at {pv.name}")
    scores = index.shapes.shape(softmax.inputs[0])
    heads = _heads_from_scores(scores)
    if heads is not None:
        b.offer("num_heads", heads, EvidenceSource.SCORE_SHAPE, f"head axis of the scores at {softmax.name}: "
                + _shape_text(scores))


# Ops between the K/V head split and the attention core (the grouped-query head repeat included).
_REPEAT_PATH = {"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Expand", "Tile", "Concat", "Slice",
                "Mul", "Div"} | VALUE_PRESERVING_OPS
_MAX_REPEAT_HOPS = 12


def _offer_kv_repeat(index: GraphIndex, b: BlockBuilder, k_in: str, stop: set[str]) -> None:
    """K/V heads from a grouped-query head repeat on K's way to Q·Kᵀ: an Expand or Tile that grows
    a size-1 axis after the KV head axis ([B, g, 1, S, d] -> [B, g, h/g, S, d]: repeat_kv, the ONNX
    Attention body, torch's repeat_interleave), or a Tile that multiplies the head axis. Needs no
    projection weight. A Concat joins K to other rows along the sequence (a cache, nn.MultiheadAttention's
    ``bias_k``): every part is followed, and a part that is a stored parameter broadcast to the batch
    is not K, so its Tile is no head repeat."""
    frontier = [k_in]
    for _ in range(_MAX_REPEAT_HOPS):
        nxt: list[str] = []
        for cur in frontier:
            node = index.producer.get(cur)
            if node is None or node.name in stop or node.op not in _REPEAT_PATH or not node.inputs:
                continue
            if node.op in ("Expand", "Tile"):
                if index.weight(node.inputs[0]) is not None:
                    continue  # a learned row broadcast to the batch, not the projected K
                src, dst = index.shapes.shape(node.inputs[0]), index.shapes.shape(node.outputs[0])
                g = _repeated_heads(src, dst, node.op)
                if g is not None:
                    b.offer("num_kv_heads", g, EvidenceSource.SHAPE, f"KV head axis before the head repeat at "
                            f"{node.name} ({node.op} {_shape_text(src)} -> {_shape_text(dst)})")
                return
            # The value is input 0 (Concat: the cache or a learned bias row grows the sequence, the heads stay).
            nxt.extend(reversed([x for x in node.inputs if x]) if node.op == "Concat" else node.inputs[:1])
        if not nxt:
            return
        frontier = nxt


def _repeated_heads(src: Shape | None, dst: Shape | None, op: str) -> int | None:
    if src is None or dst is None or len(src) != len(dst):
        return None
    grown = [i for i, (a, c) in enumerate(zip(src, dst)) if a != c]
    if len(grown) != 1:
        return None
    i = grown[0]
    a, c = src[i], dst[i]
    if a.is_int and a.coef == 1 and c.is_int and c.coef > 1:
        # A size-1 axis grown by broadcast (Expand) or by repeats (Tile): the same values.
        if len(src) == 4:
            return 1  # [B, 1, S, d] -> [B, h, S, d]: one K/V head broadcast to all (multi-query)
        if len(src) >= 5 and i >= 1 and src[i - 1].is_int:
            return src[i - 1].coef  # [B, g, 1, S, d] -> [B, g, n_rep, S, d]: heads = g · n_rep, g outer
        return None
    if op == "Tile" and a.is_int and c.is_int and c.coef > a.coef:
        return a.coef  # [B, g, S, d] -> [B, h, S, d]: the head axis multiplied
    return None


def _heads_from_scores(scores: Shape | None) -> int | None:
    if scores is None:
        return None
    if len(scores) == 4 and scores[-3].is_int:
        return scores[-3].coef
    if len(scores) == 3 and not scores[0].is_int and scores[0].coef > 1:
        return scores[0].coef  # batch and heads folded: (B·h, L, S)
    return None


def _einsum_contracted(index: GraphIndex, node: Node) -> Dim | None:
    parsed = _einsum_terms(node)
    if parsed is None:
        return None
    (a, c), rhs = parsed
    shape = index.shapes.shape(node.inputs[0])
    if shape is None or len(shape) != len(a):
        return None
    letters = [ch for ch in a if ch in c and ch not in rhs]
    if len(letters) != 1:
        return None
    return shape[a.index(letters[0])]


def _einsum_value_dim(index: GraphIndex, node: Node) -> Dim | None:
    parsed = _einsum_terms(node)
    if parsed is None:
        return None
    terms, rhs = parsed
    for pos in (0, 1):
        other = terms[1 - pos]
        shape = index.shapes.shape(node.inputs[pos])
        own = [ch for ch in terms[pos] if ch not in other and ch in rhs]
        if shape is not None and len(own) == 1 and len(shape) == len(terms[pos]):
            # V is the operand whose private axis is the last output axis.
            if rhs[-1] == own[0]:
                return shape[terms[pos].index(own[0])]
    return None


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


def _operand_chain(index: GraphIndex, tensor: str) -> tuple[Node, ...]:
    """Layout and scaling nodes right behind an attention input, source first (when Q or K has no
    traced projection, its scale still sits there)."""
    chain: list[Node] = []
    cur = tensor
    for _ in range(_MAX_SCORE_NODES):
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


def _offer_scale(index: GraphIndex, b: BlockBuilder, score: Node, score_path: tuple[Node, ...],
                 q_in: str = "", k_in: str = "") -> None:
    """One scale from every factor between the projections and the Softmax: on Q, on K or Kᵀ, on the
    scores (split between them multiplies), FusedMatMul's alpha; unknown, with the reason, when a
    factor does not fold to a number."""
    scale = 1.0
    sources: list[str] = []
    unknown: list[str] = []

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

    cur = score.outputs[0]
    for node in reversed(score_path):
        take(node, cur)
        cur = node.outputs[0]
    if score.op == "FusedMatMul":
        alpha = score.attrs.get("alpha")
        if isinstance(alpha, float) and alpha != 1.0:
            scale *= alpha
            sources.append(f"{score.name}.alpha")
    for role, tensor in (("q", q_in), ("k", k_in)):
        r = b.roles.get(role)
        if r is not None and r.traced is not None:
            prev, path = r.traced.hit.output, r.traced.path
        else:
            path = _operand_chain(index, tensor) if tensor else ()
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
    else:
        b.evidence.append(Evidence("scale", 1.0, EvidenceSource.SCALE, "no scaling between Q·Kᵀ and Softmax"))


def _offer_path_evidence(index: GraphIndex, b: BlockBuilder, role: str, traced: TracedProjection) -> None:
    hit = traced.hit
    if hit.head_split is not None:
        heads, head_dim = hit.head_split
        field = "num_heads" if role == "q" else "num_kv_heads"
        b.offer(field, heads, EvidenceSource.KERNEL_SHAPE, f"{role.upper()} kernel {hit.weight.tensor.name} "
                f"{list(hit.weight.tensor.shape)}")
        b.offer("d_k" if role in ("q", "k") else "d_v", head_dim, EvidenceSource.KERNEL_SHAPE,
                f"{role.upper()} kernel {hit.weight.tensor.name} {list(hit.weight.tensor.shape)}")
    for node in traced.path:
        if node.op == "Reshape":
            target = index.shapes.value(node.inputs[1]) if len(node.inputs) > 1 else None
            out = index.shapes.shape(node.outputs[0])
            if out is not None:
                b.evidence.append(Evidence(f"{role}_reshape", None, EvidenceSource.RESHAPE,
                                           f"{node.name} -> " + _shape_text(out)
                                           + ("" if target is not None else " (target computed at run time)")))
        elif node.op in ("Expand", "Tile") and role in ("k", "v"):
            src, dst = index.shapes.shape(node.inputs[0]), index.shapes.shape(node.outputs[0])
            b.evidence.append(Evidence("kv_repeat", None, EvidenceSource.REPEAT,
                                       f"{node.op} {node.name}: {_shape_text(src)} -> {_shape_text(dst)}"))


def _shape_text(shape: Shape | None) -> str:
    """"[2, 32, s, 128]" as evidence prints a shape; most dims are plain integers (str(Dim) is slow)."""
    return "[" + ", ".join([str(d.coef) if not d.factors else str(d) for d in shape or ()]) + "]"


_BIAS_PATH = {"Transpose", "Unsqueeze", "Squeeze", "Reshape", "Slice", "Expand", "Add",
              "Permute", "Concat", "Mul", "Where"} | VALUE_PRESERVING_OPS


def _collect_extras(index: GraphIndex, b: BlockBuilder, score_path: tuple[Node, ...]) -> None:
    """Parameters added to the scores (relative-position tables, ALiBi-like learned biases) and
    learned K/V rows (nn.MultiheadAttention add_bias_kv) belong to the block but not to Q/K/V/O."""
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
                _collect_tables(index, b, x, f"added to the scores at {node.name}")
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
                    b.extras[ref.name] = ref.numel
                    b.evidence.append(Evidence("extra", ref.numel, EvidenceSource.WEIGHT_SHAPE,
                                               f"learned {role.upper()} row {ref.name} concatenated at {node.name}"))


# Ops that move or select a learned table's entries (relative-position tables padded and sliced to
# the sequence, broadcast over the batch) without computing with them.
_TABLE_VIEW_OPS = {"Pad", "Slice", "Gather", "Reshape", "Transpose", "Unsqueeze", "Squeeze", "Expand", "Tile",
                   "Concat", "Flatten"} | VALUE_PRESERVING_OPS
# Ops between a product with a table and the scores (or the result) it is added to: the re-indexing
# from relative to absolute positions.
_RELATIVE_PATH = _TABLE_VIEW_OPS | {"Mul", "Div", "Add", "Sub", "Where"}


def _collect_tables(index: GraphIndex, b: BlockBuilder, start: str, where: str) -> None:
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
