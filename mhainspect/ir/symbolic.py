"""Symbolic shape and value folding over the neutral IR.

Head counts hide in shape arithmetic (Shape -> Gather -> Concat -> Reshape, Mul(batch, h)).
We fold it with symbolic dims: every dim is a monomial ``coef * prod(symbols)``, so batch and
sequence stay symbols while head counts and head sizes come out as integers.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeGuard

from mhainspect.ir.graph import ModelGraph, Node, Tensor
from mhainspect.ir.limits import MAX_RANK


@dataclass(frozen=True)
class Dim:
    """``coef * prod(factors)``; a plain integer when ``factors`` is empty."""

    coef: int
    factors: tuple[str, ...] = ()

    @property
    def is_int(self) -> bool:
        return not self.factors

    def __mul__(self, other: Dim) -> Dim:
        if not self.factors and not other.factors:
            return Dim(self.coef * other.coef)
        return Dim(self.coef * other.coef, tuple(sorted(self.factors + other.factors)))

    def div(self, other: Dim) -> Dim | None:
        """Exact division, or None when it does not divide as monomials."""
        if other.coef == 0:
            return None
        rest = list(self.factors)
        for f in other.factors:
            if f not in rest:
                return None
            rest.remove(f)
        if self.coef % other.coef:
            return None
        return Dim(self.coef // other.coef, tuple(rest))

    def __str__(self) -> str:
        if not self.factors:
            return str(self.coef)
        body = "*".join(self.factors)
        return body if self.coef == 1 else f"{self.coef}*{body}"


Scalar = Dim | float
Shape = tuple[Dim, ...]
Value = tuple[Scalar, ...]


_INT_DIMS: dict[int, Dim] = {}  # small integer dims, shared: building a frozen dataclass is slow


def int_dim(v: int) -> Dim:
    i = int(v)
    d = _INT_DIMS.get(i)
    if d is None:
        d = Dim(i)
        if -2 <= i <= 1 << 16 and type(i) is int:
            _INT_DIMS[i] = d
    return d


def sym_dim(name: str) -> Dim:
    return Dim(1, (name,))


def numel(shape: Shape) -> Dim:
    # One Dim at the end instead of one per factor: the product and the sorted factors are the same.
    coef = 1
    factors: list[str] = []
    for d in shape:
        coef = coef * d.coef
        if d.factors:
            factors += d.factors
    return Dim(coef, tuple(sorted(factors))) if factors else Dim(coef)


def ratio(a: Dim, b: Dim) -> Fraction | None:
    """a / b as a number when the symbols cancel."""
    if sorted(a.factors) != sorted(b.factors) or b.coef == 0:
        return None
    return Fraction(a.coef, b.coef)


# Bounds that keep folding linear on hostile files: a shape, value, coefficient or symbol beyond
# them is left unknown instead of growing (Mul(x, x) chains square, Add(x, x) chains double names).
_MAX_VALUE_LEN = 4096
_MAX_ABS_COEF = 1 << 64
_MAX_FACTORS = 16
_MAX_SYMBOL_LEN = 256


def _bounded(d: Scalar) -> bool:
    if not isinstance(d, Dim):
        return True
    return (-_MAX_ABS_COEF <= d.coef <= _MAX_ABS_COEF and len(d.factors) <= _MAX_FACTORS
            and all(len(f) <= _MAX_SYMBOL_LEN for f in d.factors))


def _dims_bounded(dims: Sequence[Scalar]) -> bool:
    """``all(_bounded(d) for d in dims)``, with one-symbol dims tested inline."""
    for d in dims:
        if isinstance(d, Dim):
            if not _MIN_COEF <= d.coef <= _MAX_ABS_COEF:
                return False
            f = d.factors
            if f and (len(f) != 1 or len(f[0]) > _MAX_SYMBOL_LEN) and not _bounded(d):
                return False
    return True


_MIN_COEF = -_MAX_ABS_COEF


def _bounded_shape(shape: Sequence[Scalar], limit: int = MAX_RANK) -> bool:
    return len(shape) <= limit and _dims_bounded(shape)


_ONE = Dim(1)  # shared: Dims are immutable and compared by value


def _ints_of(v: Value) -> tuple[int, ...] | None:
    """The integers of a value, or None unless every element is a plain integer dim."""
    out: list[int] = []
    for x in v:
        if not isinstance(x, Dim) or x.factors:
            return None
        out.append(x.coef)
    return tuple(out)


def _as_int(x: Scalar | None) -> int | None:
    if isinstance(x, Dim) and x.is_int:
        return x.coef
    return None


def _broadcast2(a: Shape, b: Shape) -> Shape:
    """``_broadcast([a, b])`` without its per-position scan over a list of shapes."""
    if a is b or not b:
        return tuple(a)
    if not a:
        return tuple(b)
    la, lb = len(a), len(b)
    n = la if la < lb else lb
    out = list(a[:la - n] if la > lb else b[:lb - n])  # leading axes only one side has
    for x, y in zip(a[la - n:], b[lb - n:]):
        # _broadcast keeps the first side's dim unless it is 1 and the second's is not.
        if x is not y and x.coef == 1 and not x.factors and not (y.coef == 1 and not y.factors):
            out.append(y)
        else:
            out.append(x)
    return tuple(out)


def _broadcast(shapes: Sequence[Shape]) -> Shape | None:
    rank = max(len(s) for s in shapes)
    out: list[Dim] = []
    for i in range(rank):
        chosen: Dim | None = None
        for s in shapes:
            j = i - (rank - len(s))
            if j < 0:
                continue
            d = s[j]
            if d.is_int and d.coef == 1:
                chosen = chosen or d
                continue
            if chosen is None or (chosen.is_int and chosen.coef == 1):
                chosen = d
        out.append(chosen if chosen is not None else Dim(1))
    return tuple(out)


_UNARY_SAME_SHAPE = {
    "Identity", "Cast", "CastLike", "Relu", "Gelu", "FastGelu", "BiasGelu", "Erf", "Sqrt", "Tanh", "Neg",
    "Softmax", "LogSoftmax", "Sigmoid", "Not", "Exp", "Log", "Abs", "Reciprocal", "Floor", "Ceil",
    "Sin", "Cos", "Softplus", "IsNaN", "Round", "Sign", "Clip", "Dropout", "LayerNormalization",
    "SimplifiedLayerNormalization", "RMSNormalization", "HardSigmoid",
    "LeakyRelu", "Elu", "Selu", "Mish", "QuickGelu", "Trilu", "CumSum", "RotaryEmbedding",
    "QuantizeLinear", "DequantizeLinear", "BatchNormalization", "InstanceNormalization", "HardSwish", "Celu",
    "Softsign", "ThresholdedRelu", "Shrink",
}
_ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Pow", "Where", "Equal", "Less", "Greater", "LessOrEqual",
                "GreaterOrEqual", "And", "Or", "Xor", "Max", "Min", "Mod", "BitShift", "Sum", "Mean",
                "PRelu", "BiasAdd"}
# Unary ops whose value (not only shape) is folded; the rest pass the shape through and drop the value.
_VALUE_UNARY = frozenset({"Identity", "Cast", "CastLike", "Sqrt", "Reciprocal"})
_FOLDED_ARITH = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min"})


class ShapeEvaluator:
    """Forward pass over a topologically sorted graph computing shapes and small values."""

    def __init__(self, graph: ModelGraph, order: Sequence[Node]) -> None:
        self.graph = graph
        self.shapes: dict[str, Shape] = {}
        self.values: dict[str, Value] = {}
        self._fresh = 0
        # True while every stored dim is within the bounds (checked once per seed below, and by _set
        # for every computed dim): results made only of stored dims then need just a length check.
        self._trusted = True
        # int_values of a value tuple, by id (the tuple is kept alive beside its answer, so an id is
        # never reused while this evaluator lives): layers share their constants' tuples.
        self._ints_memo: dict[int, tuple[Value, tuple[int, ...] | None]] = {}
        self._seed_weights(graph)
        self._seed_inputs(graph)
        self._fold(order)
        self._fill_declared(graph)

    def _seed_weights(self, graph: ModelGraph) -> None:
        """Every stored tensor's shape, and the values of small integer and float constants."""
        # Layers repeat weight shapes and small constants: build each distinct one once and share the
        # (immutable) tuple.
        cache: dict[tuple[int, ...], tuple[Dim, ...]] = {}
        shapes, values = self.shapes, self.values
        cached = cache.get
        for name, t in graph.weights.items():
            shape = t.shape
            if len(shape) > MAX_RANK:
                continue
            try:
                seed = cached(shape)
            except TypeError:  # an unhashable element: _int_dims builds it the long way
                seed = None
            shapes[name] = seed if seed is not None else self._int_dims(shape, cache)
            iv = t.int_value
            if iv is not None:
                try:
                    seed = cached(iv)
                except TypeError:
                    seed = None
                values[name] = seed if seed is not None else self._int_dims(iv, cache)
            elif t.float_value is not None:
                values[name] = (t.float_value,)

    def _seed_inputs(self, graph: ModelGraph) -> None:
        """The declared shapes of the graph inputs; a dim without a value or name gets a symbol of its own."""
        for vi in graph.inputs:
            if vi.name in self.shapes or vi.shape is None or len(vi.shape) > MAX_RANK:
                continue
            dims: list[Dim] = []
            for axis, d in enumerate(vi.shape):
                if isinstance(d, int):
                    dims.append(int_dim(d))
                elif isinstance(d, str):
                    dims.append(sym_dim(d))
                else:
                    dims.append(sym_dim(f"{vi.name}.{axis}"))
            self.shapes[vi.name] = tuple(dims)
            if not _dims_bounded(dims):
                self._trusted = False

    def _fold(self, order: Sequence[Node]) -> None:
        """Each node's outputs from its inputs, in topological order."""
        dispatch = _DISPATCH
        for node in order:
            handler = dispatch.get(node.op)
            if handler is None:
                continue
            try:
                handler(self, node)
            except (ValueError, IndexError, TypeError, ZeroDivisionError, KeyError, OverflowError):
                # A node we cannot fold leaves its outputs unknown; the matchers then say why.
                continue

    def _fill_declared(self, graph: ModelGraph) -> None:
        """Declared shapes (exporters write value_info) fill what folding could not."""
        for name, vi in graph.value_info.items():
            if name not in self.shapes and vi.shape is not None and len(vi.shape) <= MAX_RANK:
                self.shapes[name] = tuple(
                    int_dim(d) if isinstance(d, int) else sym_dim(d if isinstance(d, str) else self._new_sym())
                    for d in vi.shape)

    def _int_dims(self, ints: tuple[int, ...], cache: dict[tuple[int, ...], tuple[Dim, ...]]) -> tuple[Dim, ...]:
        try:
            dims = cache.get(ints)
        except TypeError:  # an unhashable element: build it the long way
            dims = None
        if dims is None:
            dims = tuple(int_dim(d) for d in ints)
            if not _dims_bounded(dims):
                self._trusted = False
            try:
                cache[ints] = dims
            except TypeError:
                pass
        return dims

    def _new_sym(self) -> str:
        self._fresh += 1
        return f"?{self._fresh}"

    def shape(self, name: str) -> Shape | None:
        return self.shapes.get(name)

    def value(self, name: str) -> Value | None:
        return self.values.get(name)

    def int_values(self, name: str) -> tuple[int, ...] | None:
        v = self.values.get(name)
        if v is None:
            return None
        memo = self._ints_memo
        hit = memo.get(id(v))
        if hit is not None and hit[0] is v:
            return hit[1]
        ints = _ints_of(v)
        memo[id(v)] = (v, ints)
        return ints

    def operand_ints(self, node: Node, pos: int) -> tuple[int, ...] | None:
        """The integer values of ``node``'s operand ``pos`` (1-based after the data input): its input
        when present, else the attribute older opsets held it in (``ATTRIBUTE_FORMS``); None when
        neither says (an omitted optional operand, or values computed at run time)."""
        return operand_ints(node, pos, self.int_values)

    def float_scalar(self, name: str) -> float | None:
        v = self.values.get(name)
        if v is None or len(v) != 1:
            return None
        x = v[0]
        if isinstance(x, float):
            return x
        return float(x.coef) if x.is_int else None

    # -- evaluation -----------------------------------------------------------------------------

    def _eval(self, node: Node) -> None:
        handler = _DISPATCH.get(node.op)
        if handler is not None:
            handler(self, node)

    def _in_shape(self, node: Node, i: int) -> Shape | None:
        inputs = node.inputs
        if i >= len(inputs):
            return None
        name = inputs[i]
        return self.shapes.get(name) if name else None

    def _in_value(self, node: Node, i: int) -> Value | None:
        inputs = node.inputs
        if i >= len(inputs):
            return None
        name = inputs[i]
        return self.values.get(name) if name else None

    def _in_ints(self, node: Node, i: int) -> tuple[int, ...] | None:
        inputs = node.inputs
        if i >= len(inputs):
            return None
        name = inputs[i]
        return self.int_values(name) if name else None

    def _set(self, node: Node, shape: Shape | None, value: Value | None = None, out: int = 0,
             picked: bool = False) -> None:
        """Store output ``out``'s shape and value when within the bounds.

        ``picked``: the result is made only of stored dims, floats or small constants. Stored dims
        passed the bounds already, so while the seeds did too only the lengths can fail.
        """
        outputs = node.outputs
        if out >= len(outputs):
            return
        name = outputs[out]
        if not name:
            return
        if picked and self._trusted:
            if shape is not None and len(shape) <= MAX_RANK:
                self.shapes[name] = shape
            if value is not None and len(value) <= _MAX_VALUE_LEN:
                self.values[name] = value
            return
        if shape is not None and _bounded_shape(shape):
            self.shapes[name] = shape
        if value is not None and _bounded_shape(value, _MAX_VALUE_LEN):
            self.values[name] = value

    def _put(self, node: Node, shape: Shape | None, value: Value | None) -> None:
        """``_set(node, shape, value, picked=True)`` for output 0, the common case, in fewer steps."""
        outputs = node.outputs
        name = outputs[0] if outputs else ""
        if not name:
            return
        if not self._trusted:
            self._set(node, shape, value, picked=True)
            return
        if shape is not None and len(shape) <= MAX_RANK:
            self.shapes[name] = shape
        if value is not None and len(value) <= _MAX_VALUE_LEN:
            self.values[name] = value

    def _same_shape(self, node: Node) -> None:
        inputs = node.inputs
        first = inputs[0] if inputs else ""
        s = self.shapes.get(first) if first else None
        if node.op not in _VALUE_UNARY:
            # Most unary ops carry no value: skip the value lookup and the op checks below.
            if s is not None:
                self._put(node, s, None)
            return
        v = self.values.get(first) if first else None
        self._put(node, s, None if v is None else _unary_value(node, v))



    def _elementwise(self, node: Node) -> None:
        inputs = node.inputs
        out_shape = self._broadcast_inputs(node)
        value = None
        if len(inputs) == 2 and node.op in _FOLDED_ARITH:
            values = self.values
            a = values.get(inputs[0]) if inputs[0] else None
            b = values.get(inputs[1]) if inputs[1] else None
            if a is not None and b is not None:
                value = _fold_arith(node.op, a, b)
        if value is None:
            self._put(node, out_shape, None)  # broadcasting only picks input dims
        else:
            self._set(node, out_shape, value)

    def _broadcast_inputs(self, node: Node) -> Shape | None:
        """The broadcast shape of a node's (non-empty) inputs; None when one is unknown."""
        inputs = node.inputs
        if len(inputs) == 2 and inputs[0] and inputs[1]:
            # The binary case (nearly every node here) without the list building of the general one.
            sa, sb = self.shapes.get(inputs[0]), self.shapes.get(inputs[1])
            return _broadcast2(sa, sb) if sa is not None and sb is not None else None
        shapes = [self._in_shape(node, i) for i in range(len(inputs)) if inputs[i]]
        return _broadcast([s for s in shapes if s is not None]) if shapes and all(
            s is not None for s in shapes) else None


def _num(x: Scalar) -> float | None:
    """A scalar as a float; None for a symbolic dim."""
    if isinstance(x, float):
        return x
    return float(x.coef) if x.is_int else None


def _unary_value(node: Node, v: Value) -> Value | None:
    """The value of a value-carrying unary op (_VALUE_UNARY) of ``v``: Cast to a float type, Sqrt and
    Reciprocal make floats; Identity, CastLike and other casts pass the dims on."""
    op = node.op
    if op == "Cast":
        if node.attrs.int("to") not in (1, 10, 11, 16):
            return v
        floats = tuple(float(x.coef) if isinstance(x, Dim) and x.is_int else x for x in v)
        return None if any(isinstance(x, Dim) for x in floats) else floats
    if op == "Sqrt":
        fv = [_num(x) for x in v]
        return tuple(math.sqrt(x) for x in fv if x is not None) if None not in fv else None
    if op == "Reciprocal":
        fv = [_num(x) for x in v]
        return tuple(1.0 / x for x in fv if x) if None not in fv and 0 not in fv else None
    return v


def _fold_arith(op: str, a: Value, b: Value) -> Value | None:
    """Elementwise ``op`` of two values (one may be a single element, broadcast); None when an
    element cannot be folded or the lengths do not broadcast."""
    if not (len(a) == len(b) or len(a) == 1 or len(b) == 1):
        return None
    res: list[Scalar] = []
    for i in range(max(len(a), len(b))):
        r = _arith(op, a[0 if len(a) == 1 else i], b[0 if len(b) == 1 else i])
        if r is None:
            return None
        res.append(r)
    return tuple(res)


_INT_ARITH: dict[str, Callable[[int, int], int]] = {"Add": operator.add, "Sub": operator.sub, "Max": max, "Min": min}
_FLOAT_ARITH: dict[str, Callable[[float, float], float]] = {
    "Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "Max": max, "Min": min}


def _arith(op: str, a: Scalar, b: Scalar) -> Scalar | None:
    """``op`` (one of _FOLDED_ARITH) of two scalars: dims stay dims (symbols where not both known),
    anything with a float is a float."""
    if isinstance(a, Dim) and isinstance(b, Dim):
        return _dim_arith(op, a, b)
    fa, fb = _num(a), _num(b)
    if fa is None or fb is None:
        return None
    if op == "Div":
        return fa / fb if fb else None
    return _FLOAT_ARITH[op](fa, fb)


def _dim_arith(op: str, a: Dim, b: Dim) -> Dim | None:
    if op == "Mul":
        return a * b
    if op == "Div":
        if a.is_int and b.is_int:
            return Dim(a.coef // b.coef) if b.coef else None
        return a.div(b)
    if a.is_int and b.is_int:
        return Dim(_INT_ARITH[op](a.coef, b.coef))
    if op in ("Add", "Sub"):
        if b.is_int and b.coef == 0:
            return a
        return sym_dim(f"({a}{'+' if op == 'Add' else '-'}{b})")
    return None


def _norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _h_shape(ev: ShapeEvaluator, node: Node) -> None:
    s = ev._in_shape(node, 0)
    if s is None:
        return
    start = node.attrs.int("start", 0)
    end = node.attrs.int("end", len(s))
    start = max(0, _norm_axis(start, len(s)))
    end = min(len(s), _norm_axis(end, len(s)))
    dims = s[start:end]
    ev._put(node, (int_dim(len(dims)),), tuple(dims))


def _h_size(ev: ShapeEvaluator, node: Node) -> None:
    s = ev._in_shape(node, 0)
    if s is not None:
        ev._set(node, (), (numel(s),))


def _h_constant(ev: ShapeEvaluator, node: Node) -> None:
    return None  # Constant nodes with tensor values are turned into weights by the loader


def _h_constant_of_shape(ev: ShapeEvaluator, node: Node) -> None:
    v = ev._in_value(node, 0)
    if v is not None and all(isinstance(x, Dim) for x in v):
        shape = tuple(x for x in v if isinstance(x, Dim))
        value: Value | None = None
        fill = node.attrs.tensor("value") if "value" in node.attrs else 0.0
        if len(shape) == 1 and shape[0].is_int and shape[0].coef <= 64 and isinstance(fill, (int, float)):
            value = tuple(Dim(fill) if isinstance(fill, int) else float(fill) for _ in range(shape[0].coef))
        ev._set(node, shape, value)


def _h_equal(ev: ShapeEvaluator, node: Node) -> None:
    ev._elementwise(node)
    a, b = ev._in_value(node, 0), ev._in_value(node, 1)
    if a is None or b is None or not (len(a) == len(b) or len(b) == 1):
        return
    out: list[Scalar] = []
    for i, x in enumerate(a):
        y = b[0 if len(b) == 1 else i]
        if isinstance(x, Dim) and isinstance(y, Dim):
            if x == y:
                out.append(Dim(1))
            elif x.is_int and y.is_int:
                out.append(Dim(0))
            elif (y.is_int and y.coef <= 0) or (x.is_int and x.coef <= 0):
                out.append(Dim(0))  # a symbolic dim is a positive size, never 0 or -1
            else:
                return
        else:
            return
    ev._set(node, ev.shapes.get(node.outputs[0]), tuple(out))


def _logic(op: str, a: int, b: int) -> int | None:
    if op == "And":
        return int(bool(a and b))
    if op == "Or":
        return int(bool(a or b))
    if op == "Xor":
        return int(bool(a) != bool(b))
    return a % b if b else None  # Mod


_LOGIC = ("And", "Or", "Xor", "Mod")


def _h_logic(ev: ShapeEvaluator, node: Node) -> None:
    """Not/And/Or/Xor/Mod of small integer constants (the head-repeat condition of the ONNX Attention body)."""
    if node.op == "Not":
        ev._same_shape(node)
        v = ev._in_ints(node, 0)
        if v is not None:
            ev._set(node, ev.shapes.get(node.outputs[0]), tuple(Dim(int(not x)) for x in v))
        return
    ev._elementwise(node)
    a, b = ev._in_ints(node, 0), ev._in_ints(node, 1)
    if a is None or b is None or not a or not b or (len(a) != len(b) and 1 not in (len(a), len(b))):
        return
    out: list[Scalar] = []
    for i in range(max(len(a), len(b))):
        r = _logic(node.op, a[0 if len(a) == 1 else i], b[0 if len(b) == 1 else i])
        if r is None:
            return
        out.append(Dim(r))
    ev._set(node, ev.shapes.get(node.outputs[0]), tuple(out))


def _h_where(ev: ShapeEvaluator, node: Node) -> None:
    ev._elementwise(node)
    c, a, b = ev._in_value(node, 0), ev._in_value(node, 1), ev._in_value(node, 2)
    if c is None or a is None or b is None:
        return
    n = max(len(c), len(a), len(b))
    if any(len(v) not in (1, n) for v in (c, a, b)):
        return
    out: list[Scalar] = []
    for i in range(n):
        cond = c[0 if len(c) == 1 else i]
        if not isinstance(cond, Dim) or not cond.is_int:
            return
        out.append((a if cond.coef else b)[0 if len(a if cond.coef else b) == 1 else i])
    ev._set(node, ev.shapes.get(node.outputs[0]), tuple(out))


def _h_gather(ev: ShapeEvaluator, node: Node) -> None:
    data = ev._in_shape(node, 0)
    idx_shape = ev._in_shape(node, 1)
    axis = node.attrs.int("axis", 0)
    value = None
    dv = ev._in_value(node, 0)
    iv = ev._in_ints(node, 1)
    if dv is not None and iv is not None and data is not None and len(data) == 1:
        value = tuple(dv[i] for i in iv)
    if data is not None and idx_shape is not None:
        a = _norm_axis(axis, len(data))
        ev._put(node, data[:a] + idx_shape + data[a + 1:], value)


def _h_gather_elements(ev: ShapeEvaluator, node: Node) -> None:
    """GatherElements (relative-position lookups, DeBERTa): the output has the indices' shape."""
    data, idx_shape = ev._in_shape(node, 0), ev._in_shape(node, 1)
    if data is not None and idx_shape is not None and len(data) == len(idx_shape):
        ev._set(node, idx_shape, picked=True)


def gathered_table_shape(node: Node, stored: Tensor) -> tuple[int, ...] | None:
    """The logical [rows, width] of a GatherBlockQuantized table: uint8 storage packs 8/bits
    elements per byte along the quantized axis (int4/uint4 storage is already logical)."""
    bits = node.attrs.int("bits", 4)
    axis = node.attrs.int("quantize_axis", len(stored.shape) - 1)
    if bits not in (2, 4, 8) or not stored.shape:
        return None
    axis = axis + len(stored.shape) if axis < 0 else axis
    if stored.dtype != "uint8" or not 0 <= axis < len(stored.shape):
        return stored.shape
    shape = list(stored.shape)
    shape[axis] *= 8 // bits
    return tuple(shape)


def _h_gather_block_quantized(ev: ShapeEvaluator, node: Node) -> None:
    """GatherBlockQuantized (a quantized embedding lookup): Gather on the table's logical shape."""
    stored = ev.graph.weights.get(node.inputs[0]) if node.inputs else None
    idx_shape = ev._in_shape(node, 1)
    data = gathered_table_shape(node, stored) if stored is not None else None
    if data is None or idx_shape is None:
        return
    a = _norm_axis(node.attrs.int("gather_axis", 0), len(data))
    ev._set(node, tuple(int_dim(d) for d in data[:a]) + idx_shape + tuple(int_dim(d) for d in data[a + 1:]))


def _h_unsqueeze(ev: ShapeEvaluator, node: Node) -> None:
    inputs = node.inputs
    first = inputs[0] if inputs else ""
    s = ev.shapes.get(first) if first else None
    if s is None:
        return
    if len(inputs) > 1:
        axes = ev.int_values(inputs[1]) if inputs[1] else None
    else:
        axes = node.attrs.ints("axes")
    if axes is None:
        return
    value = ev.values.get(first)
    if type(axes) is tuple and len(axes) == 1 and type(axes[0]) is int:
        # One axis in range (nearly always): a tuple splice. Out-of-range axes take the list.insert
        # path below, which clamps them or overflows exactly as before.
        a = axes[0]
        if a < 0:
            a += len(s) + 1
        if 0 <= a <= len(s):
            ev._put(node, s[:a] + (_ONE,) + s[a:], value)
            return
    rank = len(s) + len(axes)
    norm = sorted(_norm_axis(int(a), rank) for a in axes)
    out = list(s)
    for a in norm:
        out.insert(a, Dim(1))
    ev._set(node, tuple(out), value, picked=True)


def _h_squeeze(ev: ShapeEvaluator, node: Node) -> None:
    s = ev._in_shape(node, 0)
    if s is None:
        return
    axes = ev.operand_ints(node, 1)
    if axes is None:
        out = tuple(d for d in s if not (d.is_int and d.coef == 1))
    else:
        drop = {_norm_axis(int(a), len(s)) for a in axes}
        out = tuple(d for i, d in enumerate(s) if i not in drop)
    ev._put(node, out, ev._in_value(node, 0))


def _h_concat(ev: ShapeEvaluator, node: Node) -> None:
    inputs = node.inputs
    axis = node.attrs.int("axis", 0)
    get_shape, get_value = ev.shapes.get, ev.values.get
    shapes: list[Shape] = []
    value: Value | None = ()  # the inputs' values end to end, while every one is known
    known = True  # every input's shape is known
    for x in inputs:
        s = get_shape(x) if x else None
        if s is None:
            known = False
        else:
            shapes.append(s)
        if value is not None:
            v = get_value(x) if x else None
            value = None if v is None else value + v
    if not known or not shapes:
        if value is not None:
            ev._put(node, (int_dim(len(value)),), value)
        return
    first = shapes[0]
    a = _norm_axis(axis, len(first))
    # The sum stays a plain int until a symbolic dim joins; then it is the same string as before.
    coef = 0
    total: Dim | None = None
    for s in shapes:
        d = s[a]
        if total is None:
            if not d.factors:
                coef = coef + d.coef
                continue
            total = d if coef == 0 else sym_dim(f"({Dim(coef)}+{d})")
        else:
            total = sym_dim(f"({total}+{d})")
    if total is None:
        total = int_dim(coef)
    # The sum is the one new dim: an out-of-bounds sum drops the shape (as _set would), not the value.
    ok = _MIN_COEF <= total.coef <= _MAX_ABS_COEF and (not total.factors or _bounded(total))
    ev._put(node, first[:a] + (total,) + first[a + 1:] if ok else None, value)


# Operands older opsets held as attributes, by the input position they moved to: Slice (opset <= 9),
# Pad (<= 10), Split/Squeeze/Unsqueeze/ReduceSum (<= 12), Reshape (<= 4), Upsample's scales.
ATTRIBUTE_FORMS: dict[str, dict[int, str]] = {
    "Slice": {1: "starts", 2: "ends", 3: "axes", 4: "steps"}, "Pad": {1: "pads"}, "Split": {1: "split"},
    "Squeeze": {1: "axes"}, "Unsqueeze": {1: "axes"}, "Reshape": {1: "shape"},
    **{op: {1: "axes"} for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd")},
}


def operand_ints(node: Node, pos: int, int_values: Callable[[str], tuple[int, ...] | None]
                 ) -> tuple[int, ...] | None:
    """``ShapeEvaluator.operand_ints`` with the values of a tensor read by ``int_values``."""
    inputs = node.inputs
    if pos < len(inputs):
        return int_values(inputs[pos]) if inputs[pos] else None
    attr = ATTRIBUTE_FORMS.get(node.op, {}).get(pos)
    return node.attrs.ints(attr) if attr is not None else None


def operand_given(node: Node, pos: int) -> bool:
    """Whether ``node`` has operand ``pos``, as an input or (older opsets) as its attribute."""
    if pos < len(node.inputs):
        return bool(node.inputs[pos])
    attr = ATTRIBUTE_FORMS.get(node.op, {}).get(pos)
    return attr is not None and attr in node.attrs


def slice_bounds(node: Node, int_values: Callable[[str], tuple[int, ...] | None]
                 ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """(starts, ends, axes, steps) of a Slice, from its inputs or (opset <= 9) its attributes, with
    the defaults of omitted axes and steps; None when starts or ends are not constants."""
    starts, ends = operand_ints(node, 1, int_values), operand_ints(node, 2, int_values)
    if starts is None or ends is None:
        return None
    axes = operand_ints(node, 3, int_values) if operand_given(node, 3) else tuple(range(len(starts)))
    steps = operand_ints(node, 4, int_values) if operand_given(node, 4) else tuple(1 for _ in starts)
    if axes is None or steps is None:
        return None
    return starts, ends, axes, steps


_Ints = tuple[int, ...] | None


def _h_slice(ev: ShapeEvaluator, node: Node) -> None:
    s = ev._in_shape(node, 0)
    if s is None:
        return
    starts = ev.operand_ints(node, 1)
    ends = ev.operand_ints(node, 2)
    axes = ev.operand_ints(node, 3) if operand_given(node, 3) else tuple(range(len(starts or ())))
    steps = ev.operand_ints(node, 4) if operand_given(node, 4) else tuple(1 for _ in (starts or ()))
    if ends is None and starts is not None and len(node.inputs) >= 3 and all(x == 0 for x in starts):
        _slice_to_symbolic_ends(ev, node, s, axes, steps)
        return
    if starts is None or ends is None or axes is None or steps is None:
        return
    sliced = _sliced(s, ev._in_value(node, 0), starts, ends, axes, steps)
    if sliced is None:
        return
    out, value, from_ends = sliced
    if from_ends:  # a length computed from the ends can be out of bounds; the rest are not
        ev._set(node, out, value if len(s) == 1 else None)
    else:
        ev._put(node, out, value if len(s) == 1 else None)


def _slice_to_symbolic_ends(ev: ShapeEvaluator, node: Node, s: Shape, axes: _Ints, steps: _Ints) -> None:
    """x[:, :seq] with seq read from another tensor's shape: the length is that symbol."""
    sym_ends = ev._in_value(node, 2)
    if sym_ends is None or not (steps is None or all(x == 1 for x in steps)) or axes is None:
        return
    out_sym = list(s)
    for en_dim, ax in zip(sym_ends, axes):
        if not isinstance(en_dim, Dim):
            return
        out_sym[_norm_axis(ax, len(s))] = en_dim
    ev._set(node, tuple(out_sym))


def _sliced(s: Shape, value: Value | None, starts: tuple[int, ...], ends: tuple[int, ...], axes: tuple[int, ...],
            steps: tuple[int, ...]) -> tuple[Shape, Value | None, bool] | None:
    """(shape, value of a 1-D input, whether a length came from the ends of a symbolic dim) of a
    slice with known bounds; None when a symbolic dim is sliced from a negative end."""
    out = list(s)
    from_ends = False
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        a = _norm_axis(ax, len(s))
        d = s[a]
        if not d.is_int:
            if st == 0 and en >= 2**31 - 1 and sp == 1:
                continue
            if en < 0 or st < 0:
                return None
            # Bounded slice of a symbolic dim: length known when both ends are small constants.
            out[a] = int_dim(max(0, (en - st + sp - 1) // sp))
            from_ends = True
            value = None
            continue
        rng = range(d.coef)[slice(st, en, sp)]
        out[a] = int_dim(len(rng))  # at most the stored dim
        if value is not None and len(s) == 1:
            value = tuple(value[i] for i in rng)
    return tuple(out), value, from_ends


def _resolve_reshape(in_shape: Shape | None, target: Value, allowzero: bool) -> Shape | None:
    dims: list[Dim | None] = []
    for i, t in enumerate(target):
        if not isinstance(t, Dim):
            return None
        if t.is_int and t.coef == 0 and not allowzero:
            if in_shape is None or i >= len(in_shape):
                return None
            dims.append(in_shape[i])
        elif t.is_int and t.coef == -1:
            dims.append(None)
        else:
            dims.append(t)
    if dims.count(None) == 1:
        if in_shape is None:
            return None
        known = Dim(1)
        for d in dims:
            if d is not None:
                known = known * d
        rest = numel(in_shape).div(known)
        if rest is None:
            return None
        dims[dims.index(None)] = rest
    if any(d is None for d in dims):
        return None
    return tuple(d for d in dims if d is not None)


def _stated_dims(target: Value) -> TypeGuard[Shape]:
    """Whether a reshape target is all stated dims: no 0 (copy) or -1 (infer) entry, no float."""
    for t in target:
        if type(t) is not Dim or (t.coef <= 0 and not t.factors):
            return False
    return True


def _h_reshape(ev: ShapeEvaluator, node: Node) -> None:
    target = ev._in_value(node, 1)
    if target is None and len(node.inputs) < 2:
        held = ev.operand_ints(node, 1)  # opset <= 4: the target shape is an attribute
        target = tuple(int_dim(x) for x in held) if held is not None else None
    if target is None:
        tshape = ev._in_shape(node, 1)
        # Unknown target values but known rank: keep the rank with fresh symbols.
        if tshape is not None and len(tshape) == 1 and tshape[0].is_int and 0 <= tshape[0].coef <= MAX_RANK:
            ev._set(node, tuple(sym_dim(ev._new_sym()) for _ in range(tshape[0].coef)))
        return
    if _stated_dims(target):
        # No 0 (copy) or -1 (infer) entry: the target itself, made of stored (bounded) dims.
        ev._put(node, target, ev._in_value(node, 0) if len(target) <= 1 else None)
        return
    out = _resolve_reshape(ev._in_shape(node, 0), target, bool(node.attrs.int("allowzero", 0)))
    if out is None:
        # Keep what the target says, with unknown parts as fresh symbols.
        out = tuple(t if isinstance(t, Dim) and not (t.is_int and t.coef <= 0) else sym_dim(ev._new_sym())
                    for t in target)
    ev._set(node, out, ev._in_value(node, 0) if len(out) <= 1 else None)


def _h_flatten(ev: ShapeEvaluator, node: Node) -> None:
    s = ev._in_shape(node, 0)
    if s is None:
        return
    a = _norm_axis(node.attrs.int("axis", 1), len(s))
    ev._set(node, (numel(s[:a]), numel(s[a:])))


def _h_transpose(ev: ShapeEvaluator, node: Node) -> None:
    s = ev._in_shape(node, 0)
    if s is None:
        return
    perm = node.attrs.ints("perm") or tuple(reversed(range(len(s))))
    ev._put(node, tuple([s[p] for p in perm]), None)


def matmul_shape(a: Shape, b: Shape) -> Shape | None:
    if not a or not b:
        return None
    a2 = a if len(a) > 1 else (_ONE,) + a
    b2 = b if len(b) > 1 else b + (_ONE,)
    ab, bb = a2[:-2], b2[:-2]
    batch = _broadcast2(ab, bb) if (ab or bb) else ()
    out = tuple(batch) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _h_matmul(ev: ShapeEvaluator, node: Node) -> None:
    inputs = node.inputs
    if len(inputs) == 2 and inputs[0] and inputs[1]:
        shapes = ev.shapes
        a, b = shapes.get(inputs[0]), shapes.get(inputs[1])
    else:
        a, b = ev._in_shape(node, 0), ev._in_shape(node, 1)
    if a is not None and b is not None:
        ev._put(node, matmul_shape(a, b), None)


def _h_fused_matmul(ev: ShapeEvaluator, node: Node) -> None:
    a, b = ev._in_shape(node, 0), ev._in_shape(node, 1)
    if a is None or b is None or len(a) < 2 or len(b) < 2:
        return
    if node.attrs.int("transA", 0):
        a = a[:-2] + (a[-1], a[-2])
    if node.attrs.int("transB", 0):
        b = b[:-2] + (b[-1], b[-2])
    ev._set(node, matmul_shape(a, b))


def _h_gemm(ev: ShapeEvaluator, node: Node) -> None:
    a, b = ev._in_shape(node, 0), ev._in_shape(node, 1)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return
    m = a[1] if node.attrs.int("transA", 0) else a[0]
    n = b[0] if node.attrs.int("transB", 0) else b[1]
    ev._set(node, (m, n))


def _h_matmul_at(a_pos: int, b_pos: int) -> Callable[[ShapeEvaluator, Node], None]:
    """Quantized products (MatMulInteger, QLinearMatMul, ...): the MatMul shape of two of their inputs."""
    def handler(ev: ShapeEvaluator, node: Node) -> None:
        a, b = ev._in_shape(node, a_pos), ev._in_shape(node, b_pos)
        if a is not None and b is not None:
            ev._set(node, matmul_shape(a, b), picked=True)
    return handler


def _h_matmul_nbits(ev: ShapeEvaluator, node: Node) -> None:
    """MatMulNBits / MatMulBnb4: x[..., K] times a packed weight of logical shape [K, N] (attribute N)."""
    a, n = ev._in_shape(node, 0), node.attrs.int("N", 0)
    if a is not None and a and n > 0:
        ev._set(node, a[:-1] + (int_dim(n),))


def _h_dynamic_quantize(ev: ShapeEvaluator, node: Node) -> None:
    """DynamicQuantizeLinear: the quantized value keeps its shape; scale and zero point are scalars."""
    s = ev._in_shape(node, 0)
    if s is not None:
        ev._set(node, s, picked=True)
    ev._set(node, (), out=1, picked=True)
    ev._set(node, (), out=2, picked=True)


def _h_skip_norm(ev: ShapeEvaluator, node: Node) -> None:
    """Skip(Simplified)LayerNormalization: the normalised sum, and (output 3) the sum itself."""
    s = ev._in_shape(node, 0)
    if s is not None:
        ev._set(node, s, picked=True)
        ev._set(node, s, out=3, picked=True)


def _h_qlinear_conv(ev: ShapeEvaluator, node: Node) -> None:
    """QLinearConv: a Conv of input 0 and the weight at input 3."""
    if len(node.inputs) > 3:
        _h_conv(ev, node._replace(inputs=(node.inputs[0], node.inputs[3])))


def _h_expand(ev: ShapeEvaluator, node: Node) -> None:
    s = ev._in_shape(node, 0)
    target = ev._in_value(node, 1)
    if s is None or target is None or not all(isinstance(t, Dim) for t in target):
        return
    out = _broadcast2(s, tuple([t for t in target if isinstance(t, Dim)]))
    ev._put(node, out, None)


def _h_tile(ev: ShapeEvaluator, node: Node) -> None:
    s = ev._in_shape(node, 0)
    reps = ev._in_value(node, 1)
    if s is None or reps is None or len(reps) != len(s):
        return
    ev._set(node, tuple(d * r for d, r in zip(s, reps) if isinstance(r, Dim)))


def _h_split(ev: ShapeEvaluator, node: Node) -> None:
    s = ev._in_shape(node, 0)
    if s is None:
        return
    a = _norm_axis(node.attrs.int("axis", 0), len(s))
    sizes = ev.operand_ints(node, 1)
    n_out = len(node.outputs)
    if sizes is None and len(node.inputs) > 1 and node.inputs[1]:
        return  # sizes computed at run time: not an equal split
    if sizes is None:
        d = s[a]
        if d.is_int and n_out:
            num = node.attrs.int("num_outputs", n_out) or n_out
            chunk = -(-d.coef // num)
            sizes = tuple(min(chunk, d.coef - i * chunk) for i in range(min(num, n_out)))
        else:
            return
    for i, size in enumerate(sizes):
        ev._set(node, s[:a] + (int_dim(size),) + s[a + 1:], out=i)


def _h_einsum(ev: ShapeEvaluator, node: Node) -> None:
    eq = node.attrs.str("equation").replace(" ", "")
    if "->" not in eq or "." in eq:
        return
    lhs, rhs = eq.split("->")
    terms = lhs.split(",")
    letters: dict[str, Dim] = {}
    for i, t in enumerate(terms):
        s = ev._in_shape(node, i)
        if s is None or len(s) != len(t):
            return
        for ch, d in zip(t, s):
            if ch not in letters or (letters[ch].is_int and letters[ch].coef == 1):
                letters[ch] = d
    if all(ch in letters for ch in rhs):
        ev._set(node, tuple(letters[ch] for ch in rhs))


def _h_range(ev: ShapeEvaluator, node: Node) -> None:
    st, lim, dl = ev._in_value(node, 0), ev._in_value(node, 1), ev._in_value(node, 2)
    if st and lim and dl:
        a, b, c = _as_int(st[0]), lim[0], _as_int(dl[0])
        if a == 0 and c == 1 and isinstance(b, Dim):
            ev._set(node, (b,))
            return
    ev._set(node, (sym_dim(ev._new_sym()),))


def _h_reduce(ev: ShapeEvaluator, node: Node) -> None:
    s = ev._in_shape(node, 0)
    if s is None:
        return
    axes_attr = node.attrs.ints("axes")
    axes: tuple[int, ...] | None
    if len(node.inputs) > 1 and node.inputs[1]:
        axes = ev._in_ints(node, 1)
        if axes is None:
            return
    elif axes_attr is not None:
        axes = axes_attr
    else:
        axes = () if node.attrs.int("noop_with_empty_axes", 0) else tuple(range(len(s)))
    rank = len(s)
    norm = {a + rank if a < 0 else a for a in axes}
    keep = node.attrs.int("keepdims", 1) != 0
    out = tuple([_ONE if i in norm else d for i, d in enumerate(s) if keep or i not in norm])
    value: Value | None = None
    if node.op == "ReduceProd" and rank == 1 and norm == {0}:
        # The product of a shape's dims (a reshape target computed from a weight's own shape:
        # Concat(-1, ReduceProd(Gather(Shape(W), axes)))), folded with the symbolic dims.
        dims = ev._in_value(node, 0)
        if dims is not None and all(type(d) is Dim for d in dims):
            value = (numel(tuple(d for d in dims if type(d) is Dim)),)
    if value is None:
        ev._put(node, out, None)
    else:
        ev._set(node, out, value)


def _h_pad(ev: ShapeEvaluator, node: Node) -> None:
    """Pad: each padded axis grows by its begin and end pads (inputs, or the opset <= 10 attribute);
    a symbolic axis padded by a nonzero amount becomes a fresh symbol (a sum is no monomial)."""
    s = ev._in_shape(node, 0)
    if s is None:
        return
    pads = ev.operand_ints(node, 1)
    given_axes = len(node.inputs) > 3 and bool(node.inputs[3])
    axes = ev._in_ints(node, 3) if given_axes else tuple(range(len(s)))
    if axes is None:  # the axes computed at run time: any axis may grow
        ev._set(node, tuple(sym_dim(ev._new_sym()) for _ in s))
        return
    if pads is not None and len(pads) != 2 * len(axes):
        return
    out = list(s)
    for i, ax in enumerate(axes):
        a = _norm_axis(ax, len(s))
        if not 0 <= a < len(s):
            return
        d = s[a]
        if pads is None:  # amounts computed at run time (a mask padded to the keys): a new length
            out[a] = sym_dim(ev._new_sym())
            continue
        grow = pads[i] + pads[i + len(axes)]
        out[a] = d if grow == 0 else int_dim(d.coef + grow) if d.is_int else sym_dim(ev._new_sym())
    ev._set(node, tuple(out))


def _h_conv(ev: ShapeEvaluator, node: Node) -> None:
    x, w = ev._in_shape(node, 0), ev._in_shape(node, 1)
    if x is None or w is None or len(x) != len(w) or len(x) < 3:
        return
    k = len(x) - 2
    attr = node.attrs

    def ints(name: str, default: int, n: int) -> tuple[int, ...]:
        v = attr.get(name)
        return tuple(int(i) for i in v) if isinstance(v, tuple) and len(v) == n else (default,) * n

    strides, dilations, pads = ints("strides", 1, k), ints("dilations", 1, k), ints("pads", 0, 2 * k)
    auto_pad = attr.get("auto_pad", "NOTSET")
    spatial: list[Dim] = []
    for i in range(k):
        d, kern = x[2 + i], w[2 + i]
        if kern.is_int and kern.coef == 1 and strides[i] == 1 and pads[i] == pads[i + k] == 0 \
                and auto_pad in ("NOTSET", "VALID"):
            spatial.append(d)  # one position wide, unit stride, no padding: the axis is unchanged
        elif not (d.is_int and kern.is_int):
            spatial.append(sym_dim(ev._new_sym()))
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            spatial.append(Dim(-(-d.coef // strides[i])))
        else:
            span = dilations[i] * (kern.coef - 1) + 1
            spatial.append(Dim((d.coef + pads[i] + pads[i + k] - span) // strides[i] + 1))
    ev._set(node, (x[0], w[0], *spatial))


_HANDLERS: dict[str, Callable[[ShapeEvaluator, Node], None]] = {
    "Shape": _h_shape,
    "Size": _h_size,
    "Constant": _h_constant,
    "ConstantOfShape": _h_constant_of_shape,
    "Gather": _h_gather,
    "GatherElements": _h_gather_elements,
    "Unsqueeze": _h_unsqueeze,
    "Squeeze": _h_squeeze,
    "Concat": _h_concat,
    "Slice": _h_slice,
    "Reshape": _h_reshape,
    "Flatten": _h_flatten,
    "Transpose": _h_transpose,
    "MatMul": _h_matmul,
    "FusedMatMul": _h_fused_matmul,
    "Gemm": _h_gemm,
    "Expand": _h_expand,
    "Tile": _h_tile,
    "Split": _h_split,
    "MatMulInteger": _h_matmul_at(0, 1),
    "MatMulIntegerToFloat": _h_matmul_at(0, 1),
    "DynamicQuantizeMatMul": _h_matmul_at(0, 1),
    "QLinearMatMul": _h_matmul_at(0, 3),
    "MatMulNBits": _h_matmul_nbits,
    "MatMulBnb4": _h_matmul_nbits,
    "DynamicQuantizeLinear": _h_dynamic_quantize,
    "GatherBlockQuantized": _h_gather_block_quantized,
    "SkipLayerNormalization": _h_skip_norm,
    "SkipSimplifiedLayerNormalization": _h_skip_norm,
    "Einsum": _h_einsum,
    "Range": _h_range,
    "Equal": _h_equal,
    "Conv": _h_conv,
    "Pad": _h_pad,
    "ConvInteger": _h_conv,
    "QLinearConv": _h_qlinear_conv,
    "Where": _h_where,
    **{op: _h_reduce for op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
                                "ReduceSumSquare", "ReduceLogSumExp")},
}

# One lookup per node. Precedence as before: a dedicated handler, then same-shape unary, then elementwise.
_DISPATCH: dict[str, Callable[[ShapeEvaluator, Node], None]] = {
    **{op: ShapeEvaluator._elementwise for op in _ELEMENTWISE},
    **{op: ShapeEvaluator._same_shape for op in _UNARY_SAME_SHAPE},
    **_HANDLERS,
    **{op: _h_logic for op in ("Not", *_LOGIC)},
}
