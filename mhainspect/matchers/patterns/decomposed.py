"""Decomposed attention: softmax(scale · Q·Kᵀ + mask)·V, as every exporter writes it unfused.

Anchored on Softmax. Walks back from the Softmax input through scale/mask/softcap ops to a
product of two activations (Q·Kᵀ), forward from its output to a product with V, then from Q, K
and V back to their projections (separate, packed via Split/Slice/Gather, Einsum kernels,
GQA repeats) and from the result forward to the output projection.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from mhainspect.ir.dataflow import VALUE_PRESERVING_OPS, GraphIndex, passes_value
from mhainspect.ir.graph import Node, Tensor
from mhainspect.ir.symbolic import Dim
from mhainspect.matchers.block import BlockBuilder, RoleInput
from mhainspect.matchers.heads import heads_from_scores, offer_kv_repeat, shape_text
from mhainspect.matchers.masks import folded_masks, mask_term
from mhainspect.matchers.patterns import Pattern
from mhainspect.matchers.projection import TracedProjection, trace_back_to_projection, trace_forward_to_projection
from mhainspect.matchers.scale import offer_scale, operand_chain
from mhainspect.matchers.tables import collect_extras, collect_tables
from mhainspect.results import Evidence, EvidenceSource, Matcher, Miss

NAME = Matcher.DECOMPOSED
_PRODUCTS = {"MatMul", "Einsum", "FusedMatMul"}
# Between Q·Kᵀ and Softmax: scaling, masks, softcapping, bias (ALiBi, relative position), casts.
_SCORE_PATH = {"Add", "Sub", "Mul", "Div", "Where", "Tanh", "Clip", "Reshape", "Squeeze",
               "Unsqueeze", "Max", "Min"} | VALUE_PRESERVING_OPS
# Between Softmax and ·V: casts, dropout, head masks, reshapes, and masking or renormalising the
# probabilities again (Mul by a cast mask plus a masked term, Where(mask, 0, P), P / ReduceSum(P)).
_PROBS_PATH = {"Where", "Reshape", "Mul", "Squeeze", "Unsqueeze", "Add", "Div"} | VALUE_PRESERVING_OPS
_MAX_SCORE_NODES = 24
NO_SCORE_PRODUCT = "no Q·Kᵀ product of two activations before the Softmax"


def match(index: GraphIndex, softmax: Node) -> BlockBuilder | Miss:
    found = _find_score_product(index, softmax.inputs[0])
    if isinstance(found, _WalkEnd):
        # Not this pattern's anchor: scores of another kind (additive ones) are the next pattern's.
        return Miss(NAME, softmax.name, f"{NO_SCORE_PRODUCT} ({found.reason()})", node=found.where(), claimed=False)
    score, score_path = found
    pv = _find_value_product(index, softmax.outputs[0])
    if pv is None:
        return Miss(NAME, softmax.name, f"Softmax after {score.name} does not feed a product with V", node=softmax.name)
    pv_node, probs_tensor, v_first = pv
    swapped = _transposed(score_path)
    operands = _operands(index, score, pv_node, probs_tensor, swapped)
    if isinstance(operands, str):
        return Miss(NAME, softmax.name, operands, node=score.name)
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

    _offer_dims(index, b, score, pv_node, softmax, q_in, k_in, v_in, v_first, swapped)
    offer_kv_repeat(index, b, k_in, stop)
    collect_extras(index, b, score_path)
    b.constants.update(folded_masks(index, score_path))
    if value_side is not None:
        collect_tables(index, b, value_side, f"added to the product with V at {pv_node.name}")
    offer_scale(index, b, score, score_path, q_in, k_in)
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
    path = operand_chain(index, tensor)
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

    def where(self) -> str:
        """The node the walk failed at: the first where it stopped, else the first product with a
        stored tensor ("" when the Softmax input is not computed in the graph)."""
        ends = self.stops or self.weight_products
        return ends[0].name if ends else ""

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
        if (node.op not in _SCORE_PATH and not _keeps_or_swaps_last_two(node)) or (
                node.op in VALUE_PRESERVING_OPS and not passes_value(node, cur)):
            stops.append(node)
            continue
        for x in node.inputs:
            if x and x not in seen and index.is_activation(x):
                seen.add(x)
                queue.append((x, path + (node,)))
    return _WalkEnd(tuple(weight_products), tuple(stops), bool(queue))


def _keeps_or_swaps_last_two(node: Node) -> bool:
    """A Transpose the scores may pass: it keeps their last two axes (queries, keys) or swaps them
    (K·Qᵀ transposed back into Q·Kᵀ, as tf2onnx writes Keras attention)."""
    if node.op != "Transpose":
        return False
    perm = node.attrs.ints("perm")
    if perm is None or len(perm) < 2:
        return False
    r = len(perm)
    return perm[-2:] in ((r - 2, r - 1), (r - 1, r - 2))


def _transposed(path: tuple[Node, ...]) -> bool:
    """Whether the walk from the scores back to their product swapped the last two axes an odd
    number of times: the product is then K·Qᵀ (keys first), its transpose the scores."""
    return sum(1 for n in path if n.op == "Transpose" and _swaps_last_two(n)) % 2 == 1


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
            through = user.op in _PROBS_PATH and _passes_probs(index, user, pos)
            turn = user.op == "Transpose" and _swaps_last_two(user)
            if through or turn:
                step = user.op not in VALUE_PRESERVING_OPS
                for o in user.outputs[:1]:
                    if o and o not in seen:
                        seen.add(o)
                        queue.append((o, depth + step, swapped ^ turn))
    return None


def _passes_probs(index: GraphIndex, node: Node, pos: int) -> bool:
    """Whether a node of _PROBS_PATH passes the probabilities it reads at ``pos`` on as the value: not
    as Where's condition, not as a divisor; an Add only of a mask term (a masked Where lowered to
    arithmetic), never of another value."""
    if node.op == "Where":
        return pos != 0
    if node.op == "Div":
        return pos == 0
    if node.op == "Add":
        return len(node.inputs) == 2 and mask_term(index, node.inputs[1 - pos])
    return True


def _swaps_last_two(node: Node) -> bool:
    perm = node.attrs.ints("perm")
    if perm is None or len(perm) < 2:
        return False
    r = len(perm)
    return perm == (*range(r - 2), r - 1, r - 2)


def _einsum_terms(node: Node) -> tuple[list[str], str] | None:
    eq = node.attrs.str("equation").replace(" ", "")
    if "->" not in eq or "." in eq:
        return None
    lhs, rhs = eq.split("->")
    terms = lhs.split(",")
    return (terms, rhs) if len(terms) == 2 else None


def _operands(index: GraphIndex, score: Node, pv: Node, probs: str, swapped: bool = False
              ) -> tuple[str, str, str] | str:
    """Q, K and V as the attention core reads them; ``swapped``: the product is K·Qᵀ (transposed
    into the scores after it), so its first operand is K."""
    if score.op == "Einsum":
        parsed = _einsum_terms(score)
        if parsed is None:
            return f"cannot read the equation of {score.name}"
        terms, rhs = parsed
        kv_letter = rhs[-2] if swapped and len(rhs) > 1 else rhs[-1]  # Softmax normalises over the key axis, the scores' last
        k_pos = 0 if kv_letter in terms[0] and kv_letter not in terms[1] else 1
        q_in, k_in = score.inputs[1 - k_pos], score.inputs[k_pos]
    elif swapped:
        q_in, k_in = score.inputs[1], score.inputs[0]
    else:
        q_in, k_in = score.inputs[0], score.inputs[1]
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
                q_in: str, k_in: str, v_in: str, v_first: bool = False, swapped: bool = False) -> None:
    # The product's first operand holds the contracted axis last: Q in Q·Kᵀ, K in K·Qᵀ.
    first = score.inputs[0]
    if score.op == "Einsum":
        d_k = _einsum_contracted(index, score)
    elif score.op == "FusedMatMul" and score.attrs.int("transA", 0):
        d_k = _last_dim(index, first, 2)
    else:
        d_k = _last_dim(index, first)
    if d_k is not None and d_k.is_int:
        b.offer("d_k", d_k.coef, EvidenceSource.SHAPE,
                f"last axis of K at {score.name} (K·Qᵀ, transposed into the scores)" if swapped
                else f"last axis of Q at {score.name}")
    if pv.op == "Einsum":
        d_v = _einsum_value_dim(index, pv)
    else:
        d_v = _last_dim(index, v_in, 2 if v_first else 1)  # V·Pᵀ: V's features on its second-last axis
    if d_v is not None and d_v.is_int:
        b.offer("d_v", d_v.coef, EvidenceSource.SHAPE, f"{'second-last' if v_first else 'last'} axis of V at {pv.name}")
    scores = index.shapes.shape(softmax.inputs[0])
    heads = heads_from_scores(scores)
    if heads is not None:
        b.offer("num_heads", heads, EvidenceSource.SCORE_SHAPE, f"head axis of the scores at {softmax.name}: "
                + shape_text(scores))


# Ops between the K/V head split and the attention core (the grouped-query head repeat included).

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
                                           f"{node.name} -> " + shape_text(out)
                                           + ("" if target is not None else " (target computed at run time)")))
        elif node.op in ("Expand", "Tile") and role in ("k", "v"):
            src, dst = index.shapes.shape(node.inputs[0]), index.shapes.shape(node.outputs[0])
            b.evidence.append(Evidence("kv_repeat", None, EvidenceSource.REPEAT,
                                       f"{node.op} {node.name}: {shape_text(src)} -> {shape_text(dst)}"))


PATTERN = Pattern(NAME, frozenset({"Softmax"}), match)
