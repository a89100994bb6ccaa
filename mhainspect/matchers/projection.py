"""Linear projections: recognise a node that applies a weight, and walk the dataflow to one.

A projection is MatMul / Gemm / FusedMatMul / Einsum, or a quantized product (dataflow's
QUANTIZED_PRODUCTS: MatMulInteger, MatMulNBits, QLinearMatMul, ...), with one activation input and
one weight input (an initializer, possibly behind Transpose/Cast/DequantizeLinear), read at its
logical shape. A convolution whose kernel is one position wide on every spatial axis (Conv1d
kernel 1, Conv2d 1x1, any rank) and that mixes all channels (one group) computes the same: a
projection of the channel axis, from its weight's input to its output channels. Its epilogue belongs to it: the dequantizing Cast/Mul of an integer product, a bias
(an input, an Add after the product, or a following SkipLayerNormalization's bias input) and a
BatchNorm over its channels. Walking backward from Q/K/V (or forward from the attention output)
passes through the head-plumbing ops exporters write between projections and the attention core,
and through casts and Q/DQ pairs (dataflow.VALUE_PRESERVING_OPS) everywhere.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from mhainspect.ir.dataflow import (
    QUANTIZED_PRODUCTS,
    VALUE_PRESERVING_OPS,
    GraphIndex,
    ProductOperands,
    WeightRef,
    passes_value,
)
from mhainspect.ir.graph import Node, Tensor
from mhainspect.ir.symbolic import numel, ratio, slice_bounds
from mhainspect.matchers.masks import mask_term

_PROJECTION_OPS = {"MatMul", "Gemm", "FusedMatMul", "Einsum", "Conv"} | set(QUANTIZED_PRODUCTS)

# Ops a Q/K/V value passes through between its projection and the attention core, with the
# input positions that carry the value (None: every activation input).
_FIRST = (0,)  # the value is the first input (one shared tuple: the walk tests it by identity)
_BACKWARD_THROUGH: dict[str, tuple[int, ...] | None] = {
    **{op: _FIRST for op in VALUE_PRESERVING_OPS},  # casts, Q/DQ, Identity, Dropout
    "Reshape": _FIRST, "Transpose": _FIRST, "Squeeze": _FIRST, "Unsqueeze": _FIRST,
    "Flatten": _FIRST, "Expand": _FIRST, "Tile": _FIRST,
    "Split": _FIRST, "Slice": _FIRST, "Gather": _FIRST, "GatherND": _FIRST, "GatherElements": _FIRST, "Concat": None,
    "Mul": None, "Div": _FIRST, "Add": None, "Sub": None, "Neg": _FIRST, "Where": (1, 2), "LayerNormalization": _FIRST,
    "SimplifiedLayerNormalization": _FIRST, "RMSNormalization": _FIRST, "RotaryEmbedding": _FIRST, "Pow": _FIRST,
    "ReduceMean": _FIRST, "Sqrt": _FIRST, "Reciprocal": _FIRST, "Abs": _FIRST, "BatchNormalization": _FIRST,
}
# Activations some vision models apply between the merged heads and the output projection (LeViT).
_FORWARD_ACTIVATIONS = {"HardSwish", "Relu", "Gelu", "Sigmoid", "HardSigmoid"}
_FORWARD_THROUGH = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten"} | VALUE_PRESERVING_OPS \
    | _FORWARD_ACTIVATIONS
_SPLIT_OPS = {"Split", "Slice", "Gather", "GatherND", "GatherElements"}
_MAX_BACKWARD_NODES = 60
WHOLE = Fraction(1)  # the share of an unsplit projection; shared, as a Fraction is immutable
_MAX_FORWARD_DEPTH = 8


@dataclass(frozen=True)
class ProjectionHit:
    node: Node
    weight: WeightRef
    activation: str  # the tensor the weight is applied to
    in_features: int
    out_features: int
    weight_params: int
    bias: Tensor | None
    output: str  # projection output (after the bias Add when there is one)
    head_split: tuple[int, int] | None = None  # (heads, head_dim) read from a 3-D kernel
    bias_slice: int | None = None  # bias elements used when the bias is a slice of a packed vector
    norm: Node | None = None  # a BatchNormalization right after the product (Linear + BN, LeViT)
    norm_params: int = 0  # its learned scale and shift (the running statistics are buffers)

    @property
    def bias_params(self) -> int:
        """The projection's learned per-output terms: its bias and a following BatchNorm's scale/shift."""
        if self.bias is None:
            return self.norm_params
        return (self.bias_slice if self.bias_slice is not None else self.bias.numel) + self.norm_params

    @property
    def bias_name(self) -> str | None:
        if self.bias is not None:
            return self.bias.name
        return self.norm.inputs[2] if self.norm is not None else None


@dataclass(frozen=True)
class TracedProjection:
    """A projection reached from an attention input, with the nodes in between."""

    hit: ProjectionHit
    path: tuple[Node, ...]  # nodes from the projection (exclusive) to the attention input
    split_fraction: Fraction | None  # share of a packed projection that reaches this input
    # A learned vector added on this path alone, after the split of a bias-free packed projection
    # (DeBERTa's q_bias / v_bias): this role's bias.
    path_bias: Tensor | None = None
    # The learned scale (and shift) of a norm on this path, between the projection and the attention
    # core (Qwen3's per-head q_norm/k_norm, OLMo 2's whole-width ones): candidates the block keeps
    # when their width is one head's or the role's (``BlockBuilder._projections``).
    path_norm: tuple[Tensor, ...] = ()


def recognise_projection(index: GraphIndex, node: Node, via_input: str | None = None) -> ProjectionHit | None:
    """A ProjectionHit when ``node`` applies a weight to an activation (``via_input`` if given)."""
    if node.op not in _PROJECTION_OPS or len(node.inputs) < 2:
        return None
    if node.op == "Einsum":
        return _einsum_projection(index, node, via_input)
    if node.op == "Conv":
        return _pointwise_conv_projection(index, node, via_input)
    quantized = QUANTIZED_PRODUCTS.get(node.op)
    if quantized is not None:
        return _quantized_projection(index, node, quantized, via_input)
    a, b = node.inputs[0], node.inputs[1]
    wb = index.weight(b)
    if wb is not None and index.is_activation(a) and (via_input in (None, a)):
        w, act, weight_first = wb, a, False
    elif (wa := index.weight(a)) is not None and index.is_activation(b) and node.op in ("MatMul", "FusedMatMul") \
            and via_input in (None, b):
        w, act, weight_first = wa, b, True
    else:
        return None
    shape = w.shape
    if len(shape) != 2 or min(shape) <= 0:
        return None
    rows, cols = shape
    transposed = w.transposed
    if node.op == "Gemm" and node.attrs.int("transB", 0):
        transposed = not transposed
    if node.op == "FusedMatMul" and node.attrs.int("transB" if not weight_first else "transA", 0):
        transposed = not transposed
    if weight_first:
        # W @ x: the weight is [out, in] as seen by the op.
        out_f, in_f = (cols, rows) if transposed else (rows, cols)
    else:
        in_f, out_f = (cols, rows) if transposed else (rows, cols)
    bias_pos = 2 if node.op == "Gemm" else None
    hit = _with_bias(index, node, w, act, in_f, out_f, bias_pos, integer_result=False)
    split = _kernel_heads(w.tensor.shape, in_f, out_f) if w.logical is not None else None
    return hit if split is None else dataclasses.replace(hit, head_split=split)


def _kernel_heads(stored: tuple[int, ...], in_f: int, out_f: int) -> tuple[int, int] | None:
    """(heads, head size) of a 3-D kernel read as a matrix: [d, h, k] whose last two axes make one
    side of the product, or [h, k, d] whose first two do (a Keras EinsumDense kernel keeps its head axis)."""
    if len(stored) != 3:
        return None
    a, b, c = stored
    if a in (in_f, out_f) and b * c == (out_f if a == in_f else in_f):
        return b, c
    if c in (in_f, out_f) and a * b == (out_f if c == in_f else in_f):
        return a, b
    return None


def _pointwise_conv_projection(index: GraphIndex, node: Node, via_input: str | None) -> ProjectionHit | None:
    """A Conv whose kernel covers one position (every spatial axis 1) over all channels (one group):
    weight [out, in, 1, ...] applied to the channel axis at every position, a projection of width out."""
    act = node.inputs[0]
    if not index.is_activation(act) or via_input not in (None, act) or node.attrs.int("group", 1) != 1:
        return None
    w = index.weight(node.inputs[1])
    if w is None or w.transposed or len(w.shape) < 3 or min(w.shape) <= 0 or any(d != 1 for d in w.shape[2:]):
        return None
    kernel = node.attrs.ints("kernel_shape")
    if kernel is not None and any(k != 1 for k in kernel):
        return None
    out_f, in_f = w.shape[0], w.shape[1]
    return _with_bias(index, node, w, act, in_f, out_f, 2, integer_result=False)


def _quantized_projection(index: GraphIndex, node: Node, operands: ProductOperands,
                          via_input: str | None) -> ProjectionHit | None:
    """A product whose weight is stored quantized: the logical weight, as the float graph has it."""
    if operands.activation >= len(node.inputs):
        return None
    act = node.inputs[operands.activation]
    if not index.is_activation(act) or via_input not in (None, act):
        return None
    w = index.product_weight(node, operands)
    if w is None or len(w.shape) != 2 or min(w.shape) <= 0:
        return None
    rows, cols = w.shape
    in_f, out_f = (cols, rows) if w.transposed else (rows, cols)
    return _with_bias(index, node, w, act, in_f, out_f, operands.bias, operands.integer_result)


def _with_bias(index: GraphIndex, node: Node, w: WeightRef, act: str, in_f: int, out_f: int,
               bias_pos: int | None, integer_result: bool) -> ProjectionHit:
    """The hit with its bias: an input of the op, or an Add after the (dequantized) product."""
    output = dequantized_output(index, node.outputs[0], integer_result)
    bias = _bias_input(index, node, bias_pos, out_f) if bias_pos is not None else None
    bias_slice = None
    if bias is None:
        users = index.value_users(output)  # read once for both places a bias may sit
        add = _bias_add(index, output, out_f, users)
        if add is not None:
            bias, output, bias_slice = add
        elif (skip := _skip_norm_bias(index, users, out_f)) is not None:
            bias = skip
    norm, norm_params = None, 0
    found = _batch_norm_after(index, output, out_f) if index.has_op("BatchNormalization") else None
    if found is not None:
        norm, norm_params = found
        output = norm.outputs[0]
    return ProjectionHit(node, w, act, in_f, out_f, w.numel, bias, output, bias_slice=bias_slice, norm=norm,
                         norm_params=norm_params)


_BN_LAYOUT = {"Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze"}


def _batch_norm_after(index: GraphIndex, output: str, width: int) -> tuple[Node, int] | None:
    """A BatchNormalization over the product's channels (Linear + BatchNorm as one projection, the
    tokens folded into its batch axis by a Flatten/Reshape): the node and its scale + shift size."""
    cur = output
    for _ in range(3):
        users = index.value_users(cur)
        if len(users) != 1:
            return None
        user, pos = users[0]
        if user.op == "BatchNormalization" and pos == 0 and len(user.inputs) >= 3:
            params = [index.weight(x) for x in user.inputs[1:3]]
            if all(p is not None and p.numel == width for p in params):
                return user, sum(p.numel for p in params if p is not None)
            return None
        if user.op not in _BN_LAYOUT or not user.outputs:
            return None
        cur = user.outputs[0]
    return None


def dequantized_output(index: GraphIndex, output: str, integer_result: bool) -> str:
    """The float value of a product: past casts and (de)quantization, and for integer accumulators
    (MatMulInteger) the Mul that rescales them by the input and weight scales."""
    for _ in range(4):
        users = index.users(output)
        if len(users) != 1:
            return output
        user = users[0][0]
        if passes_value(user, user.outputs[0] if user.outputs else ""):
            output = user.outputs[0]
        elif integer_result and user.op == "Mul" and len(user.inputs) == 2 and user.outputs:
            output = user.outputs[0]  # the rescale: int32 accumulator x (input scale x weight scale)
            integer_result = False
        else:
            return output
    return output


# onnxruntime's fused residual + norm ops take the preceding projection's bias as an input.
_SKIP_NORM_BIAS = {"SkipLayerNormalization": 4, "SkipSimplifiedLayerNormalization": 3}


def _skip_norm_bias(index: GraphIndex, users: list[tuple[Node, int]], width: int) -> Tensor | None:
    """The bias a fused residual + norm op takes for the product whose value ``users`` read."""
    if len(users) != 1:
        return None
    user, pos = users[0]
    bias_pos = _SKIP_NORM_BIAS.get(user.op)
    if bias_pos is None or pos > 1 or user.domain not in ("com.microsoft", ""):
        return None
    return _bias_input(index, user, bias_pos, width)


def _bias_input(index: GraphIndex, node: Node, pos: int, width: int) -> Tensor | None:
    if pos >= len(node.inputs) or not node.inputs[pos]:
        return None
    return _bias_tensor(index, node.inputs[pos], width)


def _bias_tensor(index: GraphIndex, name: str, width: int) -> Tensor | None:
    ref = index.weight(name)
    if ref is None:
        t = index.graph.weights.get(name)
        if t is None:
            return None
        ref = WeightRef(t, False)
    if ref.tensor.numel == width:
        return ref.tensor
    return None


def _bias_add(index: GraphIndex, output: str, width: int, users: list[tuple[Node, int]] | None = None
              ) -> tuple[Tensor, str, int | None] | None:
    """(bias tensor, output after the Add, slice size if the bias is part of a packed vector);
    ``users``: index.value_users(output), when the caller has it."""
    if users is None:
        users = index.value_users(output)
    if len(users) != 1:
        return None
    user, pos = users[0]
    if user.op != "Add" or len(user.inputs) != 2:
        return None
    other = index.value_source(user.inputs[1 - pos])
    if index.is_activation(other):
        return None
    t = index.graph.weights.get(other)
    if t is None:
        ref = index.weight(other)
        t = ref.tensor if ref else None
    if t is not None and t.numel == width:
        return t, user.outputs[0], None
    # nn.MultiheadAttention with kdim/vdim slices one packed in_proj_bias into Q/K/V parts.
    producer = index.producer.get(other)
    if producer is not None and producer.op in ("Slice", "Split", "Gather") and producer.inputs:
        packed = index.graph.weights.get(producer.inputs[0])
        if packed is not None and not packed.is_constant_node and packed.numel > width:
            return packed, user.outputs[0], width
    return None


def _einsum_projection(index: GraphIndex, node: Node, via_input: str | None) -> ProjectionHit | None:
    eq = node.attrs.str("equation").replace(" ", "")
    if "->" not in eq or len(node.inputs) != 2:
        return None
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != 2:
        return None
    for wpos in (1, 0):
        apos = 1 - wpos
        w = index.weight(node.inputs[wpos])
        act = node.inputs[apos]
        if w is None or not index.is_activation(act) or via_input not in (None, act):
            continue
        wterm, aterm = terms[wpos], terms[apos]
        shape = w.shape
        if len(shape) != len(wterm) or w.transposed:
            return None
        dims = dict(zip(wterm, shape))
        contracted = [c for c in wterm if c in aterm and c not in out]
        produced = [c for c in wterm if c in out and c not in aterm]
        if not contracted or not produced:
            return None
        in_f = 1
        for c in contracted:
            in_f *= dims[c]
        out_f = 1
        for c in produced:
            out_f *= dims[c]
        head_split = (dims[produced[0]], dims[produced[1]]) if len(produced) == 2 else None
        output = node.outputs[0]
        bias = None
        bias_slice = None
        add = _bias_add(index, output, out_f)
        if add is not None:
            bias, output, bias_slice = add
        return ProjectionHit(node, w, act, in_f, out_f, w.numel, bias, output, head_split, bias_slice)
    return None


_NO_STOP: frozenset[str] = frozenset()


def trace_back_to_projection(index: GraphIndex, tensor: str, stop: set[str] | None = None) -> TracedProjection | None:
    """Breadth-first walk from an attention input back to the nearest projection."""
    stops: set[str] | frozenset[str] = stop or _NO_STOP
    producer_of, activations = index.producer.get, index.activations
    # The queue read front to back (a BFS never revisits; a list iterator sees what is appended):
    # tensor, nodes walked to reach it.
    queue: list[tuple[str, tuple[Node, ...]]] = [(tensor, ())]
    seen = {tensor}
    visited = 0
    for cur, path in queue:
        if visited >= _MAX_BACKWARD_NODES:
            break
        node = producer_of(cur)
        if node is None or node.name in stops:
            continue
        op = node.op
        inputs = node.inputs
        if op in VALUE_PRESERVING_OPS:  # Q/DQ pairs do not use up the budget
            if node.outputs[0] != cur:
                continue  # a quantization scale or zero point, not the value
        else:
            visited += 1
        if op == "Add" and len(inputs) == 2:
            hit = _projection_adding_bias(index, node, cur)
            if hit is not None:
                return _traced(index, hit, path)
        elif op in _PROJECTION_OPS:
            hit = recognise_projection(index, node)
            if hit is not None:
                return _traced(index, hit, path)
            continue  # an unrelated product: do not walk through it
        # Attention cores (Softmax, fused ops) and other ops not listed end the walk here.
        through = _BACKWARD_THROUGH.get(op, ())
        if through == ():
            continue
        path = (node,) + path
        for nxt in _walked_inputs(inputs, through):
            if nxt and nxt not in seen and nxt in activations:
                seen.add(nxt)
                queue.append((nxt, path))
    return None


def _projection_adding_bias(index: GraphIndex, add: Node, cur: str) -> ProjectionHit | None:
    """The projection a bias ``add`` (making ``cur``) comes right after, through a dequantization:
    the projection owns the bias."""
    producer_of = index.producer.get
    for pos in (0, 1):
        inner = producer_of(add.inputs[pos])
        if inner is not None and inner.op in VALUE_PRESERVING_OPS:
            inner = producer_of(index.value_source(add.inputs[pos]))
        if inner is not None and inner.op in _PROJECTION_OPS and add.inputs[1 - pos] not in index.activations:
            hit = recognise_projection(index, inner)
            if hit is not None and hit.output == cur:
                return hit
    return None


def _walked_inputs(inputs: Sequence[str], through: tuple[int, ...] | None) -> Sequence[str]:
    """The inputs of a node the backward walk goes on through (``_BACKWARD_THROUGH``'s entry)."""
    if through is None:
        return inputs
    if through is _FIRST:
        return inputs[:1]
    return [inputs[p] for p in through if p < len(inputs)]


def _traced(index: GraphIndex, hit: ProjectionHit, path: tuple[Node, ...]) -> TracedProjection:
    # The walk may have come through the projection's own epilogue (dequantizing Cast/Mul, bias
    # Add): those nodes belong to the projection, not to the path after it.
    for i, node in enumerate(path):
        if hit.output in node.outputs:
            path = path[i + 1:]
            break
    share = _split_fraction(index, hit, path)
    return TracedProjection(hit, path, share, _path_bias(index, hit, path, share), _path_norm(index, path))


# Normalisation ops whose inputs after the first are the norm's learned scale and shift.
_NORM_OPS = frozenset({"LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization"})
# A norm written out divides (or multiplies) the value by a statistic of itself: a reduction, then
# these ops (eps added, square root, reciprocal, casts).
_REDUCTIONS = frozenset({"ReduceMean", "ReduceSumSquare", "ReduceL2", "ReduceSum"})
_STATISTIC_OPS = frozenset({"Add", "Sqrt", "Reciprocal", "Pow", "Cast", "Max", "Clip", "Div", "Sub", "Mul"})
_MAX_STATISTIC_HOPS = 6


def _path_norm(index: GraphIndex, path: tuple[Node, ...]) -> tuple[Tensor, ...]:
    """The stored parameters a norm on ``path`` applies: a normalisation op's scale and shift, or
    after a written-out norm (the value times or over a statistic of itself) the stored vectors it
    is then multiplied by and added to (Gemma's ``1 + weight`` read through its Add)."""
    found: list[Tensor] = []
    expect = ""  # after a written-out norm: "Mul" (its scale), then "Add" (its shift); "": neither
    for node in path:
        if node.op in _NORM_OPS:
            found.extend(t for x in node.inputs[1:3] if x and (t := _stored_parameter(index, x)) is not None)
            expect = ""
            continue
        if node.op not in ("Mul", "Div", "Add") or len(node.inputs) != 2:
            continue
        run = [x for x in node.inputs if index.is_activation(x)]
        if node.op != "Add" and len(run) == 2 and any(_statistic(index, x) for x in node.inputs):
            expect = "Mul"
            continue
        t = None
        if node.op == expect and len(run) == 1:
            t = _stored_parameter(index, node.inputs[1] if node.inputs[0] in run else node.inputs[0])
        if t is not None:
            found.append(t)
        # The scale, then a shift; what follows (a rotary product) is not the norm's.
        expect = "Add" if t is not None and expect == "Mul" else ""
    return tuple(found)


def _statistic(index: GraphIndex, name: str) -> bool:
    """Whether ``name`` is computed from a reduction of a value (a norm's mean square or variance)."""
    frontier = [name]
    for _ in range(_MAX_STATISTIC_HOPS):
        nxt: list[str] = []
        for cur in frontier:
            node = index.producer.get(cur)
            if node is None:
                continue
            if node.op in _REDUCTIONS:
                return True
            if node.op in _STATISTIC_OPS:
                nxt.extend(x for x in node.inputs if x and index.is_activation(x))
        frontier = nxt
    return False


def _stored_parameter(index: GraphIndex, name: str) -> Tensor | None:
    """A stored float parameter read at ``name``, directly, through casts, or through one Add of a
    constant (Gemma's RMSNorm scales by ``1 + weight``)."""
    for _ in range(3):
        t = index.graph.weights.get(name)
        if t is not None:
            return t if t.may_be_parameter and t.dtype.startswith(("float", "bfloat")) and t.numel > 1 else None
        node = index.producer.get(name)
        if node is None or node.op not in ("Cast", "Add") or index.is_activation(name):
            return None
        stored = [x for x in node.inputs if x in index.graph.weights and index.graph.weights[x].numel > 1]
        if len(stored) != 1:
            return None
        name = stored[0]
    return None


def _path_bias(index: GraphIndex, hit: ProjectionHit, path: tuple[Node, ...], share: Fraction | None) -> Tensor | None:
    """A stored parameter vector as wide as this role, added to the value on its way from a
    bias-free projection to the attention core (an Add whose other input is no activation)."""
    if hit.bias is not None or share is None or not index.has_op("Add"):
        return None
    width = None  # hit.out_features * share, computed once a candidate needs it (Fraction arithmetic is slow)
    for node in path:
        if node.op != "Add" or len(node.inputs) != 2:
            continue
        for pos in (0, 1):
            other = node.inputs[1 - pos]
            if not other or index.is_activation(other) or not index.is_activation(node.inputs[pos]):
                continue
            ref = index.weight(other)
            t = ref.tensor if ref is not None else index.graph.weights.get(other)
            if t is not None and width is None:
                width = hit.out_features * share
            if t is not None and t.numel == width and t.may_be_parameter and _is_vector(t.shape):
                return t
    return None


def _is_vector(shape: tuple[int, ...]) -> bool:
    """One axis of features, or features split over heads ([1, h, 1, d]): at most two axes above 1."""
    return sum(1 for d in shape if d > 1) <= 2


def _split_fraction(index: GraphIndex, hit: ProjectionHit, path: tuple[Node, ...]) -> Fraction | None:
    """Share of the projection output that flows into this path at its first split op: from the
    shapes around the split, else from the split's own constants on the projection's last axis.
    None when the graph does not say (never an equal division by the number of users)."""
    for node in path:
        if node.op in _SPLIT_OPS:
            src = node.inputs[0]
            out = next((o for o in node.outputs if _feeds(index, o, path)), node.outputs[0])
            s_in, s_out = index.shapes.shape(src), index.shapes.shape(out)
            share = ratio(numel(s_out), numel(s_in)) if s_in is not None and s_out is not None else None
            if share is None:
                share = _share_from_constants(index, hit, node, out)
            return share
    return WHOLE


def _share_from_constants(index: GraphIndex, hit: ProjectionHit, node: Node, out: str) -> Fraction | None:
    """Without shapes: the split's own constants, when it cuts the projection's output directly."""
    if index.value_source(node.inputs[0]) != index.value_source(hit.output):
        return None
    return _constant_share(index, node, out, hit.out_features)


def _constant_share(index: GraphIndex, node: Node, out: str, width: int) -> Fraction | None:
    """The share ``out`` takes of a ``width``-wide last axis, read from Split/Slice constants (the
    rank is unknown here, so only axis -1 is sure to be that axis)."""
    ints = index.shapes.int_values
    if node.op == "Slice":
        bounds = slice_bounds(node, ints)
        if bounds is None:
            return None
        starts, ends, axes, steps = bounds
        if axes != (-1,) or steps != (1,) or len(starts) != 1 or len(ends) != 1:
            return None
        lo, hi = (x + width if x < 0 else x for x in (starts[0], ends[0]))
        size = min(hi, width) - max(lo, 0)
        return Fraction(size, width) if 0 < size <= width else None
    split_axis = node.attrs.int("axis", 0)
    if node.op == "Split" and split_axis == -1:
        pos = node.outputs.index(out)
        has_input = len(node.inputs) > 1 and bool(node.inputs[1])
        sizes = index.shapes.operand_ints(node, 1)  # the sizes input, or the opset < 13 attribute
        if sizes is not None and sum(sizes) == width and pos < len(sizes):
            return Fraction(int(sizes[pos]), width)
        if sizes is None and not has_input and width % len(node.outputs) == 0:
            return Fraction(1, len(node.outputs))  # no sizes at all: equal parts, by the op's definition
    return None


def _feeds(index: GraphIndex, tensor: str, path: tuple[Node, ...]) -> bool:
    return any(tensor in n.inputs for n in path)


_REDUCTIONS = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"})


def _reduces_ones(index: GraphIndex, node: Node) -> bool:
    """Whether a reduction only drops axes of size 1 (Aimv2's pooling head averages its one query):
    a view of the value, not a pooling over tokens."""
    shape = index.shapes.shape(node.inputs[0]) if node.inputs else None
    axes = node.attrs.ints("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        axes = index.shapes.int_values(node.inputs[1])
    if shape is None or not axes:
        return False
    rank = len(shape)
    return all(-rank <= a < rank and shape[a].is_int and shape[a].coef == 1 for a in axes)


def _masks(index: GraphIndex, node: Node, pos: int) -> bool:
    """Whether ``node`` masks the attention's result it reads at ``pos`` (and passes it on): a Where
    selecting it (not its condition), or a Mul or Add whose other operand is a mask term (a Where
    lowered to arithmetic, Mul(Cast(m), X) + Mul(0, Cast(Not(m)))). A residual Add is no mask."""
    if node.op == "Where":
        return pos != 0
    if node.op in ("Mul", "Add") and len(node.inputs) == 2:
        return mask_term(index, node.inputs[1 - pos])
    return False


_GATE_VIEWS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Cast", "Expand"})


def _gates(index: GraphIndex, node: Node, pos: int) -> bool:
    """Whether ``node`` gates the attention's result it reads at ``pos``: a Mul by a Sigmoid (through
    views), gated attention's output gate (AFMoE, HunYuan-V4, Qwen3-Next): the result goes on to O."""
    if node.op != "Mul" or len(node.inputs) != 2:
        return False
    producer = index.producer.get(index.behind(node.inputs[1 - pos], _GATE_VIEWS, 3))
    return producer is not None and producer.op == "Sigmoid"


def trace_forward_to_projection(index: GraphIndex, tensor: str) -> tuple[ProjectionHit, tuple[Node, ...]] | None:
    """Walk from the attention output through head-merge ops to the output projection."""
    queue: deque[tuple[str, tuple[Node, ...], int]] = deque([(tensor, (), 0)])
    seen = {tensor}
    while queue:
        cur, path, depth = queue.popleft()
        if depth > _MAX_FORWARD_DEPTH:
            continue
        for user, _pos in index.users(cur):
            hit = recognise_projection(index, user, via_input=cur) if user.op in _PROJECTION_OPS else None
            if hit is not None:
                return hit, path
            if user.op in _FORWARD_THROUGH or _masks(index, user, _pos) or _gates(index, user, _pos) or (
                    user.op in _REDUCTIONS and _reduces_ones(index, user)):
                # The value only: not a quantizer's scale, zero point or a dropout mask.
                step = 0 if user.op in VALUE_PRESERVING_OPS else 1  # Q/DQ pairs do not use up the depth
                for o in user.outputs[:1]:
                    if o and o not in seen:
                        seen.add(o)
                        queue.append((o, path + (user,), depth + step))
    return None
