"""Shapes of aten ops from their inputs' shapes, for graphs whose code records none (TorchScript).

A traced torch.export graph carries every value's shape; a TorchScript archive's code does not.
The converter needs ranks (a transpose's negative dims, a flatten's tail) and a few dims (a split's
sizes), so this propagates shapes through the ops attention code uses: a dim is an int or a
symbol (a dynamic batch or sequence); what an op's rule cannot tell is None, and the converter then
keeps the op opaque, as it does for an op it does not know. Scalars (sizes, their arithmetic) are
tracked as ints or symbols so view targets get their dims. Pure and bounded: no tensor is made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import count
from typing import Any

from mhainspect.frontends.torch.aten import AtenNode, TensorMeta, Value
from mhainspect.ir.limits import MAX_RANK

Dim = int | str
_fresh = count(1)
_SAME = frozenset({"contiguous", "clone", "detach", "dropout", "relu", "gelu", "silu", "sigmoid", "tanh", "exp",
                   "sqrt", "rsqrt", "neg", "abs", "reciprocal", "log", "sin", "cos", "erf", "softmax", "_softmax",
                   "log_softmax", "layer_norm", "rms_norm", "masked_fill", "tril", "triu", "clamp", "to",
                   "type_as", "float", "half", "bfloat16", "alias", "lift_fresh_copy", "_to_copy", "pow",
                   "logical_not", "bitwise_not", "scalar_tensor", "fill", "zeros_like", "ones_like", "cumsum",
                   "floor", "ceil", "round", "sign", "hardtanh", "leaky_relu", "elu", "mish", "hardswish",
                   "softplus", "group_norm", "batch_norm", "instance_norm", "dropout_", "feature_dropout"})
_BROADCAST = frozenset({"add", "sub", "mul", "div", "where", "eq", "ne", "lt", "gt", "le", "ge", "maximum", "minimum",
                        "logical_and", "logical_or", "bitwise_and", "bitwise_or", "rsub", "remainder", "floor_divide",
                        "true_divide", "fmod", "atan2", "lerp", "addcmul", "addcdiv"})
_FLOAT_OUT = frozenset({"softmax", "_softmax", "log_softmax", "layer_norm", "rms_norm", "sqrt", "rsqrt", "exp", "div",
                        "true_divide", "reciprocal", "log", "sin", "cos", "gelu", "sigmoid", "tanh", "erf"})
_BOOL_OUT = frozenset({"eq", "ne", "lt", "gt", "le", "ge", "logical_and", "logical_or", "logical_not"})


def new_symbol() -> str:
    return f"?{next(_fresh)}"


def meta(x: Any) -> TensorMeta | None:
    return x.val if isinstance(x, AtenNode) and isinstance(x.val, TensorMeta) else None


def _norm(d: int, rank: int) -> int | None:
    d = d + rank if d < 0 else d
    return d if 0 <= d < rank else None


def broadcast(shapes: Sequence[tuple[Dim, ...]]) -> tuple[Dim, ...] | None:
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        real = [d for d in dims if d != 1]
        out.append(real[0] if real else 1)
    return tuple(out)


def _dtype(args: Sequence[Any], op: str) -> str:
    if op in _BOOL_OUT:
        return "bool"
    dts = [m.dtype for m in (meta(a) for a in args) if m is not None]
    floats = [d for d in dts if d.startswith(("float", "bfloat"))]
    if floats:
        return floats[0]
    if op in _FLOAT_OUT or any(isinstance(a, float) for a in args):
        return "float32"
    return dts[0] if dts else "float32"


def numel_parts(shape: Sequence[Dim]) -> tuple[int, list[str]]:
    coef, syms = 1, []
    for d in shape:
        if isinstance(d, int):
            coef *= d
        else:
            syms.append(d)
    return coef, sorted(syms)


def view_shape(source: Sequence[Dim], target: Sequence[Dim | None]) -> tuple[Dim, ...]:
    """A view/reshape's output: ``target`` with its -1 solved from the source's element count
    when the known dims divide it (else a fresh symbol)."""
    out: list[Dim] = [d if d is not None else new_symbol() for d in target]
    holes = [i for i, d in enumerate(out) if d == -1]
    if len(holes) != 1:
        return tuple(out)
    coef, syms = numel_parts(source)
    known = [d for i, d in enumerate(out) if i != holes[0]]
    k_coef, k_syms = numel_parts(known)
    rest = list(syms)
    for s in k_syms:
        if s in rest:
            rest.remove(s)
        else:
            out[holes[0]] = new_symbol()
            return tuple(out)
    if k_coef == 0 or coef % k_coef:
        out[holes[0]] = new_symbol()
        return tuple(out)
    c = coef // k_coef
    if not rest:
        out[holes[0]] = c
    elif len(rest) == 1 and c == 1:
        out[holes[0]] = rest[0]
    else:
        out[holes[0]] = new_symbol()
    return tuple(out)


Rule = Callable[[tuple[Any, ...], Mapping[str, Any], Callable[[Any], Dim | None]], Value]


def infer(op: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], scalar: Callable[[Any], Dim | None]) -> Value:
    """The shape and dtype of ``op(*args, **kwargs)``'s output(s), None where unknown.
    ``scalar`` gives the value of an int argument (a constant, or a size read from a shape)."""
    rule = _RULES.get(op)
    try:
        if rule is not None:
            out = rule(args, kwargs, scalar)
        elif op in _SAME:
            m = meta(args[0]) if args else None
            out = TensorMeta(m.shape, _dtype(args, op)) if m is not None else None
        elif op in _BROADCAST:
            shapes = [m.shape for m in (meta(a) for a in args) if m is not None]
            tensors = [a for a in args if isinstance(a, AtenNode) and a.val is not None]
            if not shapes or len(shapes) < len(tensors):
                return None
            b = broadcast(shapes)
            out = TensorMeta(b, _dtype(args, op)) if b is not None else None
        else:
            return None
    except (IndexError, TypeError, ValueError, KeyError, ZeroDivisionError):
        return None
    if isinstance(out, TensorMeta) and len(out.shape) > MAX_RANK:
        return None
    return out


def _arg(args: tuple[Any, ...], kwargs: Mapping[str, Any], i: int, name: str, default: Any = None) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


def _ints(values: Any, scalar: Callable[[Any], Dim | None]) -> list[Dim | None] | None:
    if not isinstance(values, (list, tuple)):
        return None
    return [scalar(v) for v in values]


def _linear(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    x, w = meta(a[0]), meta(a[1])
    if x is None or w is None or not w.shape:
        return None
    return TensorMeta(x.shape[:-1] + (w.shape[0],), x.dtype)


def _matmul(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    x, y = meta(a[0]), meta(a[1])
    if x is None or y is None or not x.shape or not y.shape:
        return None
    if len(x.shape) == 1 and len(y.shape) == 1:
        return TensorMeta((), x.dtype)
    if len(y.shape) == 1:
        return TensorMeta(x.shape[:-1], x.dtype)
    if len(x.shape) == 1:
        return TensorMeta(y.shape[:-2] + y.shape[-1:], x.dtype)
    batch = broadcast([x.shape[:-2], y.shape[:-2]]) or ()
    return TensorMeta(batch + (x.shape[-2], y.shape[-1]), x.dtype)


def _view(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    """The target's shape, its -1 solved from the input's when that is known (else a symbol)."""
    x = meta(a[0])
    target = _ints(_arg(a, kw, 1, "size", kw.get("shape")), s)
    if target is None:
        return None
    if x is None:
        return TensorMeta(tuple(new_symbol() if d is None or d == -1 else d for d in target), "unknown")
    return TensorMeta(view_shape(x.shape, target), x.dtype)


def _transpose(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    x = meta(a[0])
    if x is None:
        return None
    r = len(x.shape)
    d0, d1 = _norm(int(a[1]), r), _norm(int(a[2]), r)
    if d0 is None or d1 is None:
        return None
    shape = list(x.shape)
    shape[d0], shape[d1] = shape[d1], shape[d0]
    return TensorMeta(tuple(shape), x.dtype)


def _t(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    x = meta(a[0])
    if x is None:
        return None
    return TensorMeta(tuple(reversed(x.shape)), x.dtype) if len(x.shape) == 2 else x


def _permute(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    x = meta(a[0])
    dims = _arg(a, kw, 1, "dims")
    if x is None or not isinstance(dims, (list, tuple)) or len(dims) != len(x.shape):
        return None
    idx = [_norm(int(d), len(x.shape)) for d in dims]
    if any(i is None for i in idx):
        return None
    return TensorMeta(tuple(x.shape[i] for i in idx if i is not None), x.dtype)


def _unsqueeze(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    x = meta(a[0])
    if x is None:
        return None
    d = _norm(int(_arg(a, kw, 1, "dim")), len(x.shape) + 1)
    if d is None:
        return None
    return TensorMeta(x.shape[:d] + (1,) + x.shape[d:], x.dtype)


def _squeeze(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    x = meta(a[0])
    if x is None:
        return None
    dims = _arg(a, kw, 1, "dim")
    if dims is None:
        return TensorMeta(tuple(d for d in x.shape if d != 1), x.dtype)
    dims = [dims] if isinstance(dims, int) else list(dims)
    drop = {_norm(int(d), len(x.shape)) for d in dims}
    return TensorMeta(tuple(d for i, d in enumerate(x.shape) if not (i in drop and d == 1)), x.dtype)


def _unflatten(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    x = meta(a[0])
    sizes = _ints(_arg(a, kw, 2, "sizes"), s)
    if x is None or sizes is None:
        return None
    d = _norm(int(_arg(a, kw, 1, "dim")), len(x.shape))
    if d is None:
        return None
    part = view_shape((x.shape[d],), sizes)
    return TensorMeta(x.shape[:d] + part + x.shape[d + 1:], x.dtype)


def _flatten(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    x = meta(a[0])
    if x is None:
        return None
    r = len(x.shape)
    start = _norm(int(_arg(a, kw, 1, "start_dim", 0)), max(r, 1))
    end = _norm(int(_arg(a, kw, 2, "end_dim", -1)), max(r, 1))
    if start is None or end is None:
        return None
    merged = x.shape[start:end + 1]
    coef, syms = numel_parts(merged)
    dim: Dim = coef if not syms else (syms[0] if len(syms) == 1 and coef == 1 else new_symbol())
    return TensorMeta(x.shape[:start] + (dim,) + x.shape[end + 1:], x.dtype)


def _select(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    x = meta(a[0])
    if x is None:
        return None
    d = _norm(int(a[1]), len(x.shape))
    return TensorMeta(x.shape[:d] + x.shape[d + 1:], x.dtype) if d is not None else None


def _slice(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    x = meta(a[0])
    if x is None:
        return None
    d = _norm(int(_arg(a, kw, 1, "dim", 0)), len(x.shape))
    if d is None:
        return None
    start, end, step = s(_arg(a, kw, 2, "start", 0)), s(_arg(a, kw, 3, "end")), _arg(a, kw, 4, "step", 1)
    size = x.shape[d]
    length: Dim = new_symbol()
    if (isinstance(start, int) and start == 0 and (end is None or (isinstance(end, int) and end >= 2**62))
            and step == 1):
        length = size
    elif isinstance(size, int) and isinstance(start, int) and isinstance(end, int) and isinstance(step, int) and step > 0:
        lo, hi = (max(0, min(v + size if v < 0 else v, size)) for v in (start, end))
        length = max(0, -(-(hi - lo) // step))
    return TensorMeta(x.shape[:d] + (length,) + x.shape[d + 1:], x.dtype)


def _expand(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    x = meta(a[0])
    sizes = _ints(_arg(a, kw, 1, "size"), s)
    if x is None or sizes is None or len(sizes) < len(x.shape):
        return None
    pad = len(sizes) - len(x.shape)
    out: list[Dim] = []
    for i, d in enumerate(sizes):
        if d is None:
            out.append(new_symbol())
        elif d == -1 and i >= pad:
            out.append(x.shape[i - pad])
        else:
            out.append(d)
    return TensorMeta(tuple(out), x.dtype)


def _cat(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    tensors = _arg(a, kw, 0, "tensors")
    if not isinstance(tensors, (list, tuple)) or not tensors:
        return None
    metas = [meta(t) for t in tensors]
    if any(m is None for m in metas):
        return None
    first = metas[0]
    assert first is not None
    d = _norm(int(_arg(a, kw, 1, "dim", 0)), len(first.shape))
    if d is None:
        return None
    dims = [m.shape[d] for m in metas if m is not None]
    total: Dim = sum(int(x) for x in dims) if all(isinstance(x, int) for x in dims) else new_symbol()
    return TensorMeta(first.shape[:d] + (total,) + first.shape[d + 1:], first.dtype)


def _split(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    """split(x, size_or_sizes, dim) / split_with_sizes / chunk(x, chunks, dim): a tuple of outputs."""
    x = meta(a[0])
    if x is None:
        return None
    d = _norm(int(_arg(a, kw, 2, "dim", 0)), len(x.shape))
    if d is None:
        return None
    size = x.shape[d]
    given = _arg(a, kw, 1, "split_size", kw.get("split_sizes", kw.get("chunks")))
    sizes: list[Dim]
    if isinstance(given, (list, tuple)):
        sizes = [v if (v := s(item)) is not None else new_symbol() for item in given]
    else:
        n = s(given)
        if not isinstance(size, int) or not isinstance(n, int) or n <= 0:
            return None
        step = -(-size // n) if kw.get("_chunk") else n
        sizes = [min(step, size - i) for i in range(0, size, step)]
    if len(sizes) > 4096:
        return None
    return tuple(TensorMeta(x.shape[:d] + (n,) + x.shape[d + 1:], x.dtype) for n in sizes)


def _unbind(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    x = meta(a[0])
    if x is None:
        return None
    d = _norm(int(_arg(a, kw, 1, "dim", 0)), len(x.shape))
    n = x.shape[d] if d is not None else None
    if d is None or not isinstance(n, int) or n > 4096:
        return None
    return tuple(TensorMeta(x.shape[:d] + x.shape[d + 1:], x.dtype) for _ in range(n))


def _embedding(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    w, idx = meta(a[0]), meta(a[1])
    if w is None or idx is None or len(w.shape) != 2:
        return None
    return TensorMeta(idx.shape + (w.shape[1],), w.dtype)


def _sdpa(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    q, v = meta(a[0]), meta(a[2])
    if q is None or v is None or not q.shape or not v.shape:
        return None
    return TensorMeta(q.shape[:-1] + v.shape[-1:], q.dtype)


def _reduce(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    x = meta(a[0])
    if x is None:
        return None
    dims = _arg(a, kw, 1, "dim")
    keep = _arg(a, kw, 2, "keepdim", False) is True
    if dims is None:
        return TensorMeta((), x.dtype)
    dims = [dims] if isinstance(dims, int) else list(dims)
    drop = {_norm(int(d), len(x.shape)) for d in dims}
    shape = tuple((1 if i in drop else d) for i, d in enumerate(x.shape) if keep or i not in drop)
    return TensorMeta(shape, x.dtype)


def _new(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    sizes = _ints(_arg(a, kw, 0, "size"), s)
    if sizes is None:
        return None
    return TensorMeta(tuple(d if d is not None else new_symbol() for d in sizes), "float32")


def _arange(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    args = [s(x) for x in a if not isinstance(x, AtenNode) or x.val is None]
    ints = [x for x in args if isinstance(x, int)]
    n: Dim = ints[0] if len(a) == 1 and len(ints) == 1 else (args[0] if len(a) == 1 and args[0] is not None
                                                           else new_symbol())
    return TensorMeta((n,), "int64")


def _repeat_interleave(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    x = meta(a[0])
    reps, dim = _arg(a, kw, 1, "repeats"), _arg(a, kw, 2, "dim")
    if x is None or not isinstance(reps, int) or not isinstance(dim, int):
        return None
    d = _norm(dim, len(x.shape))
    if d is None:
        return None
    size = x.shape[d]
    grown: Dim = size * reps if isinstance(size, int) else (size if reps == 1 else new_symbol())
    return TensorMeta(x.shape[:d] + (grown,) + x.shape[d + 1:], x.dtype)


def _chunk(a: tuple[Any, ...], kw: Mapping[str, Any], s: Callable[[Any], Dim | None]) -> Value:
    return _split(a, {**kw, "_chunk": True}, s)


_RULES: dict[str, Rule] = {
    "linear": _linear, "matmul": _matmul, "bmm": _matmul, "mm": _matmul, "view": _view, "reshape": _view,
    "_unsafe_view": _view, "transpose": _transpose, "swapaxes": _transpose, "t": _t, "permute": _permute,
    "unsqueeze": _unsqueeze, "squeeze": _squeeze, "unflatten": _unflatten, "flatten": _flatten, "select": _select,
    "slice": _slice, "expand": _expand, "cat": _cat, "concat": _cat, "split": _split, "split_with_sizes": _split,
    "chunk": _chunk, "unbind": _unbind, "embedding": _embedding, "scaled_dot_product_attention": _sdpa,
    "mean": _reduce, "sum": _reduce, "amax": _reduce, "max": _reduce, "zeros": _new, "ones": _new, "empty": _new,
    "full": _new, "arange": _arange, "repeat_interleave": _repeat_interleave,
}
