"""Linear projections: recognise a node that applies a weight, and walk the dataflow to one.

A projection is MatMul / Gemm / FusedMatMul / MatMulNBits / Einsum with one activation input
and one weight input (initializer, possibly behind Transpose/Cast/DequantizeLinear), optionally
followed by a bias Add. Walking backward from Q/K/V (or forward from the attention output) passes
through the head-plumbing ops exporters write between projections and the attention core.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from fractions import Fraction

from mhainspect.dataflow import GraphIndex, WeightRef
from mhainspect.graph import Node, Tensor
from mhainspect.symbolic import numel, ratio

_PROJECTION_OPS = {"MatMul", "Gemm", "FusedMatMul", "Einsum", "MatMulNBits", "MatMulInteger"}

# Ops a Q/K/V value passes through between its projection and the attention core, with the
# input positions that carry the value (None: every activation input).
_BACKWARD_THROUGH: dict[str, tuple[int, ...] | None] = {
    "Reshape": (0,), "Transpose": (0,), "Squeeze": (0,), "Unsqueeze": (0,), "Cast": (0,), "CastLike": (0,),
    "Identity": (0,), "Flatten": (0,), "Dropout": (0,), "Contiguous": (0,), "Expand": (0,), "Tile": (0,),
    "Split": (0,), "Slice": (0,), "Gather": (0,), "GatherND": (0,), "GatherElements": (0,), "Concat": None, "Mul": None, "Div": (0,), "Add": None,
    "Sub": None, "Neg": (0,), "Where": (1, 2), "LayerNormalization": (0,), "SimplifiedLayerNormalization": (0,),
    "RMSNormalization": (0,), "RotaryEmbedding": (0,), "Pow": (0,), "ReduceMean": (0,), "Sqrt": (0,),
    "Reciprocal": (0,), "Abs": (0,),
}
_FORWARD_THROUGH = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Cast", "CastLike", "Identity", "Flatten",
                    "Dropout", "Contiguous"}
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

    @property
    def bias_params(self) -> int:
        if self.bias is None:
            return 0
        return self.bias_slice if self.bias_slice is not None else self.bias.numel


@dataclass(frozen=True)
class TracedProjection:
    """A projection reached from an attention input, with the nodes in between."""

    hit: ProjectionHit
    path: tuple[Node, ...]  # nodes from the projection (exclusive) to the attention input
    split_fraction: Fraction | None  # share of a packed projection that reaches this input


def recognise_projection(index: GraphIndex, node: Node, via_input: str | None = None) -> ProjectionHit | None:
    """A ProjectionHit when ``node`` applies a weight to an activation (``via_input`` if given)."""
    if node.op not in _PROJECTION_OPS or len(node.inputs) < 2:
        return None
    a, b = node.inputs[0], node.inputs[1]
    if node.op == "Einsum":
        return _einsum_projection(index, node, via_input)
    if node.op == "MatMulNBits":
        k, n = node.attrs.get("K"), node.attrs.get("N")
        if isinstance(k, int) and isinstance(n, int) and index.is_activation(a):
            wt = index.graph.weights.get(b)
            if wt is None:
                return None
            bias = _bias_input(index, node, 5 if len(node.inputs) > 5 else -1, n)
            return ProjectionHit(node, WeightRef(wt, False), a, k, n, k * n, bias, node.outputs[0])
        return None
    wb = index.weight(b)
    if wb is not None and index.is_activation(a) and (via_input in (None, a)):
        w, act, weight_first = wb, a, False
    elif (wa := index.weight(a)) is not None and index.is_activation(b) and node.op in ("MatMul", "FusedMatMul") \
            and via_input in (None, b):
        w, act, weight_first = wa, b, True
    else:
        return None
    shape = w.tensor.shape
    if len(shape) != 2 or min(shape) <= 0:
        return None
    rows, cols = shape
    transposed = w.transposed
    if node.op == "Gemm" and node.attrs.get("transB"):
        transposed = not transposed
    if node.op == "FusedMatMul" and node.attrs.get("transB" if not weight_first else "transA"):
        transposed = not transposed
    if weight_first:
        # W @ x: the weight is [out, in] as seen by the op.
        out_f, in_f = (cols, rows) if transposed else (rows, cols)
    else:
        in_f, out_f = (cols, rows) if transposed else (rows, cols)
    bias = None
    output = node.outputs[0]
    if node.op == "Gemm" and len(node.inputs) > 2 and node.inputs[2]:
        bias = _bias_tensor(index, node.inputs[2], out_f)
        bias_slice = None
    else:
        bias_slice = None
        add = _bias_add(index, output, out_f)
        if add is not None:
            bias, output, bias_slice = add
    return ProjectionHit(node, w, act, in_f, out_f, w.tensor.numel, bias, output, bias_slice=bias_slice)


def _bias_input(index: GraphIndex, node: Node, pos: int, width: int) -> Tensor | None:
    if pos < 0 or pos >= len(node.inputs) or not node.inputs[pos]:
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


def _bias_add(index: GraphIndex, output: str, width: int) -> tuple[Tensor, str, int | None] | None:
    """(bias tensor, output after the Add, slice size if the bias is part of a packed vector)."""
    users = index.users(output)
    if len(users) != 1:
        return None
    user, pos = users[0]
    if user.op != "Add" or len(user.inputs) != 2:
        return None
    other = user.inputs[1 - pos]
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
    eq = str(node.attrs.get("equation", "")).replace(" ", "")
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
        shape = w.tensor.shape
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
        return ProjectionHit(node, w, act, in_f, out_f, w.tensor.numel, bias, output, head_split, bias_slice)
    return None


def trace_back_to_projection(index: GraphIndex, tensor: str, stop: set[str] | None = None) -> TracedProjection | None:
    """Breadth-first walk from an attention input back to the nearest projection."""
    stop = stop or set()
    producer, activations = index.producer, index.activations
    # The queue as two lists read front to back (a BFS never revisits): tensor, nodes walked to reach it.
    queue: list[str] = [tensor]
    paths: list[tuple[Node, ...]] = [()]
    seen = {tensor}
    visited = 0
    i = 0
    while i < len(queue) and visited < _MAX_BACKWARD_NODES:
        cur, path = queue[i], paths[i]
        i += 1
        node = producer.get(cur)
        if node is None or node.name in stop:
            continue
        visited += 1
        op = node.op
        inputs = node.inputs
        if op == "Add" and len(inputs) == 2:
            # A bias Add right after a projection: the projection owns it.
            for pos in (0, 1):
                inner = producer.get(inputs[pos])
                if inner is not None and inner.op in _PROJECTION_OPS and inputs[1 - pos] not in activations:
                    hit = recognise_projection(index, inner)
                    if hit is not None and hit.output == cur:
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
        for p in range(len(inputs)) if through is None else through:
            if p < len(inputs):
                nxt = inputs[p]
                if nxt and nxt not in seen and nxt in activations:
                    seen.add(nxt)
                    queue.append(nxt)
                    paths.append(path)
    return None


def _traced(index: GraphIndex, hit: ProjectionHit, path: tuple[Node, ...]) -> TracedProjection:
    return TracedProjection(hit, path, _split_fraction(index, hit, path))


def _split_fraction(index: GraphIndex, hit: ProjectionHit, path: tuple[Node, ...]) -> Fraction | None:
    """Share of the projection output that flows into this path at its first split op."""
    for node in path:
        if node.op in _SPLIT_OPS:
            src = node.inputs[0]
            out = next((o for o in node.outputs if _feeds(index, o, path)), node.outputs[0])
            s_in, s_out = index.shapes.shape(src), index.shapes.shape(out)
            if s_in is None or s_out is None:
                return None
            return ratio(numel(s_out), numel(s_in))
    return WHOLE


def _feeds(index: GraphIndex, tensor: str, path: tuple[Node, ...]) -> bool:
    return any(tensor in n.inputs for n in path)


def trace_forward_to_projection(index: GraphIndex, tensor: str) -> tuple[ProjectionHit, tuple[Node, ...]] | None:
    """Walk from the attention output through head-merge ops to the output projection."""
    queue: deque[tuple[str, tuple[Node, ...], int]] = deque([(tensor, (), 0)])
    seen = {tensor}
    while queue:
        cur, path, depth = queue.popleft()
        if depth > _MAX_FORWARD_DEPTH:
            continue
        for user, _pos in index.users(cur):
            hit = recognise_projection(index, user, via_input=cur)
            if hit is not None:
                return hit, path
            if user.op in _FORWARD_THROUGH:
                for o in user.outputs:
                    if o and o not in seen:
                        seen.add(o)
                        queue.append((o, path + (user,), depth + 1))
    return None
