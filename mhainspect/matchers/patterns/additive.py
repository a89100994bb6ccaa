"""Additive (Bahdanau) attention: softmax(vᵀ·tanh(W·q + U·k))·V, one head, no Q·Kᵀ product.

Anchored on a Softmax; tried after the decomposed pattern, on a Softmax with no Q·Kᵀ product behind it. Walks back
from the Softmax input through reshapes and masks to a product of a Tanh with a weight vector v
(a projection of width 1, or Mul by v and ReduceSum over the feature axis), from the Tanh to a
sum of two activations, each traced to its projection (W for the query, U for the keys; either
may be absent), and forward from the Softmax to the product with the values (MatMul, or Mul and
ReduceSum over the key axis). W and U are the block's Q and K projections, v its score vector
(an extra parameter); the values' projection, when there is one, is V.
"""

from __future__ import annotations

from mhainspect.ir.dataflow import GraphIndex
from mhainspect.ir.graph import Node, Tensor
from mhainspect.matchers.block import BlockBuilder, RoleInput
from mhainspect.matchers.patterns import Pattern
from mhainspect.matchers.projection import recognise_projection, trace_back_to_projection
from mhainspect.results import BlockKind, Evidence, Matcher, Miss

NAME = Matcher.ADDITIVE
# Between the score vector product and the Softmax: reshapes, masks, casts.
_SCORE_PATH = {"Squeeze", "Unsqueeze", "Reshape", "Flatten", "Transpose", "Cast", "Identity", "Add", "Sub", "Where",
               "Mul", "Div", "Dropout"}
_PROBS_PATH = {"Unsqueeze", "Reshape", "Transpose", "Cast", "Identity", "Dropout", "Expand", "Squeeze", "Flatten"}
_VIEWS = {"Cast", "Identity", "Dropout"}
_MAX_NODES = 12
_MAX_PROBS_DEPTH = 6


def match(index: GraphIndex, softmax: Node) -> BlockBuilder | Miss:
    """A builder for an additive attention at ``softmax``; a Miss naming what is missing when the
    scores are vᵀ·tanh(…) but the rest is not found; an unclaimed Miss when they are not additive."""
    found = _score_vector(index, softmax.inputs[0])
    if found is None:
        return Miss(NAME, softmax.name, "no score vector vᵀ·tanh(…) before the Softmax", node=softmax.name,
                    claimed=False)
    v_node, v_weight, v_bias, tanh = found
    summed = index.behind(tanh.inputs[0], _VIEWS, _MAX_NODES)
    add = index.producer.get(summed)
    if add is None or add.op != "Add":
        return Miss(NAME, softmax.name, f"additive scores vᵀ·tanh(…) at {v_node.name}, but the Tanh input is not a "
                                        "sum of a query and a key term", node=tanh.name)
    terms = _terms(index, add)
    if len(terms) != 2:
        return Miss(NAME, softmax.name, f"additive scores vᵀ·tanh(…) at {v_node.name}, but {add.name} does not add "
                                        "two activations (query and key terms)", node=add.name)
    pv = _value_product(index, softmax.outputs[0])
    if pv is None:
        return Miss(NAME, softmax.name, f"additive scores vᵀ·tanh(…) at {v_node.name}, but the Softmax does not "
                                        "feed a product with the values", node=softmax.name)
    pv_node, values = pv
    b = BlockBuilder(index, softmax, NAME, kind=BlockKind.ADDITIVE)
    stop = {softmax.name, add.name, pv_node.name}
    traced = [trace_back_to_projection(index, t, stop) for t in terms]
    # W applies to the query (one row per decoding step), U to the keys: the key term has the
    # sequence axis the Softmax normalises over; with no shapes, take the terms in input order.
    q_pos = _query_term(index, terms, softmax)
    b.roles["q"] = RoleInput("q", traced[q_pos], tensor=terms[q_pos])
    b.roles["k"] = RoleInput("k", traced[1 - q_pos], tensor=terms[1 - q_pos])
    b.roles["v"] = RoleInput("v", trace_back_to_projection(index, values, stop), tensor=values)
    for t in (v_weight, v_bias):
        if t is not None:
            b.extras[t.name] = t.numel
            b.evidence.append(Evidence("extra", t.numel, "weight_shape",
                                       f"score vector {t.name} {list(t.shape)} of vᵀ·tanh(…) at {v_node.name}"))
    b.offer("num_heads", 1, "shape", f"additive scores: one vᵀ·tanh(W·q + U·k) per query-key pair at {v_node.name}")
    b.offer("num_kv_heads", 1, "shape", "additive attention has one head")
    width = _vector_width(v_weight)
    if width is not None:
        b.offer("d_k", width, "weight_shape", f"score vector {v_weight.name} {list(v_weight.shape)}")
    vs = index.shapes.shape(values)
    if vs is not None and vs and vs[-1].is_int:
        b.offer("d_v", vs[-1].coef, "shape", f"last axis of the values at {pv_node.name}")
    b.evidence.append(Evidence("scale", None, "scale", "additive attention: no Q·Kᵀ product to scale"))
    if b.roles["q"].traced is None:
        b.notes.append(f"the query term at {add.name} does not trace back to a projection weight")
    return b


def _score_vector(index: GraphIndex, start: str) -> tuple[Node, Tensor, Tensor | None, Node] | None:
    """(node applying v, v, v's bias, the Tanh) behind the Softmax input, or None."""
    cur_list, seen = [start], {start}
    visited = 0
    while cur_list and visited < _MAX_NODES:
        cur = cur_list.pop(0)
        node = index.producer.get(cur)
        if node is None:
            continue
        visited += 1
        found = _applies_vector(index, node)
        if found is not None:
            return found
        if node.op in _SCORE_PATH:
            for x in node.inputs:
                if x and x not in seen and index.is_activation(x):
                    seen.add(x)
                    cur_list.append(x)
    return None


def _applies_vector(index: GraphIndex, node: Node) -> tuple[Node, Tensor, Tensor | None, Node] | None:
    """``node`` as v·tanh(…): a projection of width 1 (with its bias Add) or ReduceSum(Mul(tanh, v))."""
    if node.op == "Add" and len(node.inputs) == 2:  # the bias Add after the v projection
        for x in node.inputs:
            inner = index.producer.get(x)
            if inner is not None and inner.op in ("MatMul", "Gemm"):
                found = _applies_vector(index, inner)
                if found is not None:
                    return found
        return None
    if node.op in ("MatMul", "Gemm"):
        hit = recognise_projection(index, node)
        if hit is None or hit.out_features != 1:
            return None
        tanh = index.producer.get(index.behind(hit.activation, _VIEWS, _MAX_NODES))
        if tanh is None or tanh.op != "Tanh":
            return None
        return node, hit.weight.tensor, hit.bias, tanh
    if node.op == "ReduceSum" and node.inputs:
        mul = index.producer.get(node.inputs[0])
        if mul is None or mul.op != "Mul" or len(mul.inputs) != 2:
            return None
        for pos in (0, 1):
            ref = index.weight(mul.inputs[1 - pos])
            t = ref.tensor if ref is not None else index.graph.weights.get(mul.inputs[1 - pos])
            tanh = index.producer.get(index.behind(mul.inputs[pos], _VIEWS, _MAX_NODES))
            if t is not None and t.numel > 1 and tanh is not None and tanh.op == "Tanh":
                return node, t, None, tanh
    return None


def _terms(index: GraphIndex, add: Node, depth: int = 0) -> list[str]:
    """The two activation terms of W·q + U·k; an Add of one activation and a bias is looked into."""
    acts = [x for x in add.inputs if x and index.is_activation(x)]
    if len(acts) == 1 and depth < 3:
        inner = index.producer.get(acts[0])
        if inner is not None and inner.op == "Add":
            return _terms(index, inner, depth + 1)
    return acts


def _query_term(index: GraphIndex, terms: list[str], softmax: Node) -> int:
    """Which term is the query's: the one without the key axis the Softmax normalises over."""
    scores = index.shapes.shape(softmax.inputs[0])
    axis = softmax.attrs.int("axis", -1)
    if scores is None or not -len(scores) <= axis < len(scores):
        return 0
    key_len = scores[axis]
    for i, t in enumerate(terms):
        s = index.shapes.shape(t)
        if s is not None and len(s) >= 2 and key_len not in s[:-1]:
            return i
    return 0


def _vector_width(t: Tensor) -> int | None:
    dims = [d for d in t.shape if d != 1]
    return dims[0] if len(dims) == 1 else None


def _value_product(index: GraphIndex, start: str) -> tuple[Node, str] | None:
    """(product node, values tensor): MatMul(probs, values), or ReduceSum(Mul(probs, values))."""
    queue: list[tuple[str, int]] = [(start, 0)]
    seen = {start}
    while queue:
        cur, depth = queue.pop(0)
        if depth > _MAX_PROBS_DEPTH:
            continue
        for user, pos in index.users(cur):
            other = user.inputs[1 - pos] if len(user.inputs) == 2 else ""
            if user.op in ("MatMul", "Einsum") and pos == 0 and other and index.is_activation(other):
                return user, other
            if user.op == "Mul" and other and index.is_activation(other):
                if any(u.op == "ReduceSum" for u, _ in index.users(user.outputs[0])):
                    return user, other
            if user.op in _PROBS_PATH:
                for o in user.outputs:
                    if o and o not in seen:
                        seen.add(o)
                        queue.append((o, depth + 1))
    return None


PATTERN = Pattern(NAME, frozenset({"Softmax"}), match)
