"""Dataflow index over a ModelGraph: order, producers, consumers, activations, weights, shapes."""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cached_property

from mhainspect.errors import InputError
from mhainspect.ir.dtypes import Family, is_float, lookup
from mhainspect.ir.graph import ModelGraph, Node, Tensor
from mhainspect.ir.symbolic import ShapeEvaluator, gathered_table_shape, operand_given

# Ops that pass a value on unchanged but for its dtype or its quantization (the first output only:
# DynamicQuantizeLinear's other outputs are its scale and zero point). Every walk of the matchers
# looks through them, so a quantized or cast graph meets the same patterns as the float one.
VALUE_PRESERVING_OPS = frozenset({"Identity", "Cast", "CastLike", "QuantizeLinear", "DequantizeLinear",
                                  "DynamicQuantizeLinear", "Dropout", "Contiguous"})
# Ops through which a weight keeps its identity (layout, dtype or quantization changes only).
_WEIGHT_VIEW_OPS = VALUE_PRESERVING_OPS | {"Transpose", "Reshape", "Squeeze", "Unsqueeze"}
# Ops that cut a part out of a stored weight (nn.MultiheadAttention slices its packed in_proj_weight
# into Q and K/V when the query is not the key, with bounds computed from shapes at run time).
_WEIGHT_PART_OPS = frozenset({"Slice", "Split"})
_MAX_VALUE_HOPS = 8
# Elementwise affine arithmetic a weight-only quantized weight is dequantized by without a
# DequantizeLinear (Cast, then Mul by a scale, Sub a zero point, in any order): applied to a stored
# integer tensor with a smaller stored tensor (the scale, the zero point), it keeps the weight's identity.
AFFINE_OPS = frozenset({"Mul", "Div", "Sub", "Add"})
_MAX_DEQUANT_BITS = 16  # integer weights are at most 16 bits wide; wider integers are shapes and indices
_NAME_SEPARATORS = frozenset("_./:")  # where a deployment tool's suffix may begin (X_quantized, X.qweight)


@dataclass(frozen=True)
class ProductOperands:
    """Where a matrix-product op reads its activation, its weight and (optionally) its bias.

    ``packed_shape``: the weight is stored packed (4-bit blocks) and its logical [K, N] comes from
    the op's K and N attributes. ``integer_result``: the op yields integer accumulators that a
    Cast and a rescaling Mul turn back into the float product.
    """

    activation: int
    weight: int
    bias: int | None = None
    packed_shape: bool = False
    integer_result: bool = False


# Products whose second operand is the weight, as deployment tools write them (onnxruntime's
# quantizers and contrib ops). Scales and zero points are inputs too, but never parameters.
QUANTIZED_PRODUCTS: dict[str, ProductOperands] = {
    "MatMulInteger": ProductOperands(0, 1, integer_result=True),
    "MatMulIntegerToFloat": ProductOperands(0, 1, bias=6),
    "DynamicQuantizeMatMul": ProductOperands(0, 1, bias=4),
    "QLinearMatMul": ProductOperands(0, 3),
    "MatMulNBits": ProductOperands(0, 1, bias=5, packed_shape=True),
    "MatMulBnb4": ProductOperands(0, 1, packed_shape=True),
}


def passes_value(node: Node, output: str) -> bool:
    """True when ``output`` of ``node`` is its first input's value, only cast or (de)quantized."""
    return node.op in VALUE_PRESERVING_OPS and bool(node.outputs) and node.outputs[0] == output


# Outputs of these ops describe shapes, not activations.
_SHAPE_OPS = {"Shape", "Size"}
_LOOK_FORWARD = VALUE_PRESERVING_OPS | _SHAPE_OPS  # consumers value_users looks past
# Input positions that are read for their shape or as shape arguments only.
SHAPE_INPUTS: dict[str, frozenset[int]] = {
    "Shape": frozenset({0}), "Size": frozenset({0}), "Reshape": frozenset({1}), "Expand": frozenset({1}),
    "Slice": frozenset({1, 2, 3, 4}), "ConstantOfShape": frozenset({0}), "Range": frozenset({0, 1, 2}),
    "Tile": frozenset({1}), "Unsqueeze": frozenset({1}), "Squeeze": frozenset({1}), "Split": frozenset({1}),
    "Resize": frozenset({1, 2, 3}), "Pad": frozenset({1, 3}), "TopK": frozenset({1}),
    "ReduceSum": frozenset({1}), "ReduceMean": frozenset({1}), "ReduceMax": frozenset({1}),
    "CumSum": frozenset({1}), "OneHot": frozenset({1}),
}


def _first_only_limit(shape_only: frozenset[int]) -> int:
    """The most inputs a node may have with only its first read as a value (1 + the run 1, 2, ...
    of shape-only positions); 0 when its first input is shape-only too."""
    if 0 in shape_only:
        return 0
    k = 1
    while k in shape_only:
        k += 1
    return k


# Op -> input count up to which only input 0 carries a value (the activation scan then tests one name).
_VALUE_IN_FIRST_ONLY = {op: _first_only_limit(s) for op, s in SHAPE_INPUTS.items()}


@dataclass(frozen=True)
class WeightRef:
    """A weight reached from a node input, possibly through a transpose or cast."""

    tensor: Tensor  # the stored tensor (its storage key, dtype and bytes)
    transposed: bool  # the op sees the weight with its last two axes swapped
    # The shape the op sees when storage packs it (4-bit blocks) or when it reads a part of it.
    logical: tuple[int, ...] | None = None
    part: str | None = None  # which part of the stored tensor (a Slice's bounds, a Split's output)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.logical if self.logical is not None else self.tensor.shape

    @property
    def numel(self) -> int:
        return self.tensor.numel if self.logical is None else math.prod(self.logical)


def topological_order(graph: ModelGraph) -> list[Node]:
    """Kahn's algorithm; raises InputError naming a node on a cycle. (GraphIndex gets the same order
    in one pass when the file is already in dependency order.)"""
    return _kahn(graph, _producer_positions(graph))


def _producer_positions(graph: ModelGraph) -> dict[str, int]:
    """Tensor name -> position in the file of its (last) producer."""
    producer: dict[str, int] = {}
    for i, n in enumerate(graph.nodes):
        for o in n.outputs:
            if o:
                producer[o] = i
    return producer


def _self_loop(n: Node) -> None:
    # Kahn's check and the one-pass index scan both stop at the first such node in file order.
    raise InputError(f"graph has a cycle: node '{n.name}' ({n.op}) reads its own output")


def _kahn(graph: ModelGraph, producer: dict[str, int]) -> list[Node]:
    indegree = [0] * len(graph.nodes)
    users: list[list[int]] = [[] for _ in graph.nodes]
    for i, n in enumerate(graph.nodes):
        deps = {producer[x] for x in n.inputs if x in producer and producer[x] != i}
        indegree[i] = len(deps)
        for d in deps:
            users[d].append(i)
        if any(x in producer and producer[x] == i for x in n.inputs):
            _self_loop(n)
    # A heap keyed by file position keeps the exporter's order wherever dependencies allow.
    ready = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            indegree[u] -= 1
            if indegree[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(graph.nodes):
        stuck = next(i for i, d in enumerate(indegree) if d > 0)
        n = graph.nodes[stuck]
        raise InputError(f"graph has a cycle through node '{n.name}' ({n.op})")
    return [graph.nodes[i] for i in order]


# A learned tensor broadcast to the batch (SigLIP's pooling probe, Perceiver latents, Q-Former
# query tokens): one copy per sample, so a value of the run like any activation, though no graph
# input reaches it.
_BROADCAST_OPS = frozenset({"Expand", "Tile"})


# The same tokens in a static-shape export: the broadcast to the batch folded away, the parameter
# stored as a batch of token sequences ([1, N, d], [N, B, d]: SigLIP's probe repeated and transposed
# into ``transpose_5``; Aimv2's class token expanded, split into heads and scaled, [1, h, 1, d_k];
# BLIP-2's query tokens expanded, [B, N, d]) and read as data: the rows of a product (projected by a
# weight, or scored against the run's keys as they are), what a normalisation normalises, or a part
# of a Concat (Idefics2's latents joined to the context its K/V are projected from). A
# weight is a matrix, the second operand of its product; a stored tensor of rank 3 or more read so
# is the tokens themselves.
_MIN_FOLDED_TOKENS_RANK = 3
_TOKEN_READERS = frozenset({"MatMul", "LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization",
                            "Concat"})


def _learned_tokens(graph: ModelGraph, inputs: Sequence[str], min_rank: int = 2) -> bool:
    """Whether ``inputs[0]`` is a stored float parameter of rank >= ``min_rank`` (not a Constant node's value)."""
    t = graph.weights.get(inputs[0]) if inputs else None
    return t is not None and not t.is_constant_node and len(t.shape) >= min_rank and t.may_be_parameter \
        and is_float(t.dtype)


def _take_folded_tokens(graph: ModelGraph, op: str, inputs: Sequence[str], act: set[str], tokens: set[str]) -> None:
    """Folded learned tokens read by ``op`` (``_TOKEN_READERS``: the first input, any part of a
    Concat): a value of the run, as what they make."""
    for j in range(len(inputs) if op == "Concat" else min(1, len(inputs))):
        if _learned_tokens(graph, inputs[j:j + 1], _MIN_FOLDED_TOKENS_RANK):
            act.add(inputs[j])
            tokens.add(inputs[j])


class GraphIndex:
    order: list[Node]
    by_name: dict[str, Node]
    producer: dict[str, Node]
    consumers: dict[str, list[tuple[Node, int]]]
    activations: set[str]
    # Stored tensors that are learned tokens folded by a static-shape export (_MIN_FOLDED_TOKENS_RANK):
    # values of the run, though stored.
    tokens: set[str]
    shapes: ShapeEvaluator

    def __init__(self, graph: ModelGraph) -> None:
        self.graph = graph
        self._ops: set[str] | None = None
        if not self._index_in_order(graph.nodes, True):
            # Out of dependency order in the file: sort (raising on a cycle), then the same pass.
            self._index_in_order(_kahn(graph, _producer_positions(graph)), False)
        self.shapes = ShapeEvaluator(graph, self.order)

    def _index_in_order(self, nodes: Sequence[Node], check: bool) -> bool:
        """One pass building order, producers, consumers and activations, for nodes in dependency order.

        ``check``: find out on the way whether ``nodes`` is in dependency order, i.e. whether no
        tensor is produced by a node at or after one of its readers (the file's last producer of a
        name is the one that counts, as in Kahn's edges). A node's inputs are indexed before its
        outputs, so that is exactly "an output already has a consumer". Returns False, with nothing
        set, at the first such output; the caller then sorts, and raises on a cycle or a node
        reading its own output, naming the same node as before. Without ``check`` the order is
        trusted (Kahn's), and a name produced twice has its last producer in that order.
        """
        graph = self.graph
        producer: dict[str, Node] = {}
        consumers: dict[str, list[tuple[Node, int]]] = {}
        act = {v.name for v in graph.inputs if v.name not in graph.weights}
        tokens: set[str] = set()
        shape_ops, shape_inputs, first_only = _SHAPE_OPS, SHAPE_INPUTS, _VALUE_IN_FIRST_ONLY
        users_of = consumers.setdefault
        by_name: dict[str, Node] = {}
        for n in nodes:
            inputs = n.inputs
            idx = 0
            for x in inputs:
                users_of(x, []).append((n, idx))  # "" (an omitted optional input) is dropped below
                idx += 1
            outputs = n.outputs
            for o in outputs:
                if o:
                    if check and o in consumers:
                        return False
                    producer[o] = n
            # Activations: anything computed from a graph input, except through shape-only inputs.
            op = n.op
            if op in _TOKEN_READERS:  # tested here: one set lookup per node, a call only for these ops
                _take_folded_tokens(graph, op, inputs, act, tokens)
            if op not in shape_ops:
                limit = first_only.get(op)
                if limit is None:
                    reads = not act.isdisjoint(inputs)
                elif idx <= limit:  # idx: the number of inputs; only the first carries a value
                    reads = idx > 0 and inputs[0] in act
                else:
                    shape_only = shape_inputs[op]
                    reads = any(x in act for j, x in enumerate(inputs) if j not in shape_only)
                if reads or (not inputs and op != "Constant" and op.startswith("Random")) \
                        or (op in _BROADCAST_OPS and _learned_tokens(graph, inputs)):
                    act.update(outputs if "" not in outputs else [o for o in outputs if o])
            by_name[n.name] = n
        # Deleting a key keeps the others in insertion order: the dict is the one "if x:" would build.
        consumers.pop("", None)
        self.order = list(nodes)
        self.by_name = by_name
        self.producer = producer
        self.consumers = consumers
        self.activations = act
        self.tokens = tokens
        return True

    def is_activation(self, name: str) -> bool:
        return name in self.activations

    def is_run_value(self, name: str) -> bool:
        """Whether ``name`` is a value of the run that is no weight: an activation not read from a
        stored tensor, or one read from stored learned tokens (``tokens``)."""
        if name not in self.activations:
            return False
        w = self.weight(name)
        return w is None or w.tensor.name in self.tokens

    @cached_property
    def position(self) -> dict[int, int]:
        """id(node) -> index in order (built on first use: no pass of the tool needs it)."""
        return {id(n): i for i, n in enumerate(self.order)}

    def pos(self, node: Node) -> int:
        return self.position[id(node)]

    def weight(self, name: str, max_hops: int = 6) -> WeightRef | None:
        """The parameter tensor behind a node input, looking through views and casts, and through
        one Slice/Split of it (a part of a packed weight, read at the part's resolved shape)."""
        transposed = False
        reshaped = False  # a view that changes the rank lies between the op and ``cur``
        part: tuple[tuple[int, ...], str] | None = None
        cur = name
        for _ in range(max_hops):
            t = self.graph.weights.get(cur)
            if t is not None:
                if t.is_constant_node and len(t.shape) < 2:
                    return None
                if part is None:
                    return WeightRef(t, transposed, self._matrix_view(name, t) if reshaped else None)
                return WeightRef(t, transposed, part[0], part[1]) if math.prod(part[0]) < t.numel else None
            node = self.producer.get(cur)
            if node is None or not node.inputs:
                return None
            op = node.op
            if op in _WEIGHT_PART_OPS:
                if part is not None or reshaped or node.inputs[0] in self.activations:
                    return None  # one part of a stored weight, read as it is cut (not a slice of a value)
                part = self._weight_part(node, cur)
                if part is None:
                    return None
            elif op in AFFINE_OPS:
                pos = self.affine_operand(node)
                if pos is None:
                    return None
                cur = node.inputs[pos]
                continue
            elif op not in _WEIGHT_VIEW_OPS:
                return None
            elif part is None and op == "Transpose":
                perm = node.attrs.ints("perm")
                if perm is None or (len(perm) >= 2 and perm[-1] != len(perm) - 1):
                    transposed = not transposed
            elif op in ("Reshape", "Squeeze", "Unsqueeze"):
                reshaped = True
            cur = node.inputs[0]
        return None

    def _matrix_view(self, name: str, t: Tensor) -> tuple[int, ...] | None:
        """The matrix a weight of another rank is read as through a reshape whose shape folds (a Keras
        EinsumDense kernel [d, h, k] reshaped to [d, h·k], its target computed from the kernel's own
        shape); None when it is read at its own shape."""
        if len(t.shape) == 2:
            return None
        s = self.shapes.shape(name)
        if s is None or len(s) != 2 or not all(d.is_int for d in s):
            return None
        view = (s[0].coef, s[1].coef)
        return view if view[0] * view[1] == t.numel else None

    def affine_operand(self, node: Node) -> int | None:
        """The input position of ``node`` (Mul/Div/Sub/Add) that carries a stored integer weight being
        dequantized by plain arithmetic, the other input being a stored scale or zero point with fewer
        elements (a Div divides the weight, a Sub takes the zero point off it); None when it is no such step."""
        inputs = node.inputs
        if node.op not in AFFINE_OPS or len(inputs) != 2 or not inputs[0] or not inputs[1]:
            return None
        activations = self.activations
        if inputs[0] in activations or inputs[1] in activations:
            return None
        for pos in ((0,) if node.op in ("Div", "Sub") else (0, 1)):
            root = self.integer_root(inputs[pos])
            if root is None:
                continue
            other = self._stored_behind(inputs[1 - pos])
            if other is not None and other.numel < root.numel:
                return pos
        return None

    def integer_root(self, name: str, max_hops: int = 8) -> Tensor | None:
        """The stored integer tensor (at most 16 bits, rank >= 2) that ``name`` is a dequantization of
        by casts, views and affine arithmetic with smaller stored tensors (``affine_operand``); None
        when it is not one."""
        cur = name
        for _ in range(max_hops):
            t = self.graph.weights.get(cur)
            if t is not None:
                found = lookup(t.dtype)
                ok = (found is not None and found.family is Family.INTEGER and found.bits_per_element <= _MAX_DEQUANT_BITS
                      and len(t.shape) >= 2 and not t.is_constant_node)
                return t if ok else None
            node = self.producer.get(cur)
            if node is None or not node.inputs or cur in self.activations:
                return None
            if node.op in AFFINE_OPS:
                pos = self.affine_operand(node)
                if pos is None:
                    return None
                cur = node.inputs[pos]
            elif node.op in _WEIGHT_VIEW_OPS:
                cur = node.inputs[0]
            else:
                return None
        return None

    def _stored_behind(self, name: str) -> Tensor | None:
        """The stored tensor ``name`` is, behind casts and views (a scale or a zero point)."""
        return self.stored_through(name, _WEIGHT_VIEW_OPS)

    def behind(self, name: str, ops: Collection[str], hops: int) -> str:
        """The value ``name`` is read from through at most ``hops`` nodes of ``ops`` (first inputs):
        ``name`` itself when its producer is none of them."""
        for _ in range(hops):
            node = self.producer.get(name)
            if node is None or node.op not in ops or not node.inputs:
                return name
            name = node.inputs[0]
        return name

    def stored_through(self, name: str, ops: frozenset[str]) -> Tensor | None:
        """The stored tensor ``name`` is read from through a chain of ``ops`` (first inputs), or None."""
        cur = name
        for _ in range(_MAX_VALUE_HOPS):
            t = self.graph.weights.get(cur)
            if t is not None:
                return t
            node = self.producer.get(cur)
            if node is None or node.op not in ops or not node.inputs:
                return None
            cur = node.inputs[0]
        return None

    def _weight_part(self, node: Node, output: str) -> tuple[tuple[int, ...], str] | None:
        """(resolved shape, which part) of a Slice/Split output cut from a weight; None unless both
        the shape and the bounds are constants of the graph (they name the part: a module applied
        twice reads the same part, Q and K/V read different ones)."""
        shape = self.shapes.shape(output)
        if shape is None or any(d.factors for d in shape):
            return None
        dims = tuple(d.coef for d in shape)
        if node.op == "Split":
            return dims, f"split {node.outputs.index(output)} of {node.attrs.int('axis', 0)!r}"
        if len(node.inputs) >= 3:
            bounds = [self.shapes.int_values(x) if x else None for x in node.inputs[1:]]
        else:  # opset <= 9: the bounds are attributes
            bounds = [self.shapes.operand_ints(node, pos) for pos in range(1, 5) if operand_given(node, pos)]
        if len(bounds) < 2 or any(b is None for b in bounds):
            return None
        return dims, "slice " + " ".join(map(str, bounds))

    def quantized_from(self, t: Tensor, numel: int) -> Tensor | None:
        """The stored float weight a stored quantized weight was made from, when the file keeps both
        (a quantizer that rewrote one use of a shared weight and left another on the float copy:
        onnxruntime writes X_quantized beside X). Only the graph's own evidence: a float weight
        whose name is the quantized one's up to a separator, with as many elements."""
        if is_float(t.dtype):
            return None
        name, weights = t.name, self.graph.weights
        for i in range(len(name) - 1, 0, -1):
            if name[i] in _NAME_SEPARATORS:
                base = weights.get(name[:i])
                if base is not None and base.numel == numel and is_float(base.dtype) and not base.is_constant_node:
                    return base
        return None

    def weight_identity(self, ref: WeightRef) -> str:
        """The storage a weight reference reads, as the model's parameter: a quantized copy of a
        float weight the file also keeps is that weight (the part, for a part of a packed weight)."""
        base = self.quantized_from(ref.tensor, ref.tensor.numel if ref.part is not None else ref.numel)
        key = (base or ref.tensor).storage_key
        return key if ref.part is None else f"{key}[{ref.part}]"

    def users(self, name: str) -> list[tuple[Node, int]]:
        return self.consumers.get(name, [])

    def has_op(self, op: str) -> bool:
        """Whether any node of the graph is ``op`` (a set built on first use: lets rare patterns be
        skipped at no cost per node)."""
        ops = self._ops
        if ops is None:
            ops = self._ops = {n.op for n in self.order}
        return op in ops

    def value_source(self, name: str) -> str:
        """The tensor whose value ``name`` is, looking back through casts and (de)quantization."""
        producer = self.producer
        for _ in range(_MAX_VALUE_HOPS):
            node = producer.get(name)
            if node is None or not node.inputs or not node.inputs[0] or not passes_value(node, name):
                return name
            name = node.inputs[0]
        return name

    def value_users(self, name: str) -> list[tuple[Node, int]]:
        """Consumers of ``name``'s value, looking forward through casts and (de)quantization (readers
        of its shape only, Shape and Size, are not consumers of the value)."""
        direct = self.consumers.get(name)
        if not direct:
            return []
        for user, _pos in direct:
            if user.op in _LOOK_FORWARD:
                break
        else:
            return direct  # the common case: nothing to look through (callers never mutate it)
        out: list[tuple[Node, int]] = []
        frontier = [name]
        for _ in range(_MAX_VALUE_HOPS):
            nxt: list[str] = []
            for cur in frontier:
                for user, pos in self.consumers.get(cur, ()):
                    if user.op in _SHAPE_OPS:
                        continue
                    if pos == 0 and user.op in VALUE_PRESERVING_OPS and user.outputs and user.outputs[0]:
                        nxt.append(user.outputs[0])
                    else:
                        out.append((user, pos))
            if not nxt:
                return out
            frontier = nxt
        return out

    def table_weight(self, node: Node) -> WeightRef | None:
        """The embedding table a GatherBlockQuantized reads, with its logical shape."""
        t = self.graph.weights.get(node.inputs[0]) if node.inputs else None
        if t is None:
            return None
        shape = gathered_table_shape(node, t)
        return WeightRef(t, False, shape if shape != t.shape else None) if shape is not None else None

    def product_weight(self, node: Node, operands: ProductOperands) -> WeightRef | None:
        """The logical weight a quantized product applies: its stored tensor, and for packed
        storage the [K, N] shape from the op's attributes."""
        if operands.weight >= len(node.inputs):
            return None
        if not operands.packed_shape:
            return self.weight(node.inputs[operands.weight])
        k, n = node.attrs.int("K", 0), node.attrs.int("N", 0)
        t = self.graph.weights.get(node.inputs[operands.weight])
        if t is None or k <= 0 or n <= 0:
            return None
        return WeightRef(t, False, (k, n))
