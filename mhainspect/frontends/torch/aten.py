"""aten graphs -> the neutral IR, without torch: the one converter behind every PyTorch graph.

A traced module's torch.export program or torch.fx trace (mhainspect.frontends.torch.fx), a .pt2
archive's serialized graph and a TorchScript archive's code (mhainspect.frontends.archives) are each
turned into AtenNodes (an op name, arguments referring to earlier nodes, the shape and dtype the
tracer recorded, the module path) and converted here, so the same matchers see the same graph
whichever door the model came through. aten ops are renamed to ONNX ones the matchers know:
linear -> Transpose(W) + MatMul + Add(b); view/reshape -> Reshape whose target is a Concat of
constants and Shape->Gather scalars; transpose/permute -> Transpose(perm); softmax -> Softmax;
masked_fill -> Where; scaled_dot_product_attention -> ONNX Attention. Other ops keep their aten
name (``aten.gelu``): activations flow through them. Imports no torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mhainspect.ir.graph import NO_ATTRS, Attrs, AttrValue, GraphKind, ModelGraph, Node, Tensor, ValueInfo

_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class TensorMeta:
    """A value's shape (ints, or the symbol of a dynamic dim) and canonical dtype, as traced."""

    shape: tuple[int | str, ...]
    dtype: str

    def dim(self) -> int:
        return len(self.shape)


# What a tracer recorded for a node's output: a tensor, a tuple of outputs (None where not a
# tensor), or nothing known (a SymInt, a list of tensors the tracer did not describe).
Value = TensorMeta | tuple[TensorMeta | None, ...] | None


def module_path(path: str) -> str:
    """A module path as torch.export's nn_module_stack writes it -> "layers.0" (torch.fx style
    "L['self'].layers[0]", a "@1" call suffix)."""
    path = re.sub(r"@\d+$", "", path)
    path = re.sub(r"^L\['self'\]\.?", "", path)
    return re.sub(r"\[(\d+)\]", r".\1", path).strip(".")


class AtenNode:
    """One node of a traced graph: ``target`` is the op's name without namespace or overload
    (``linear``, ``view``, ``getitem``); arguments that are other nodes' outputs are those
    AtenNodes. Hashed by identity (the converter maps nodes to tensor names)."""

    __slots__ = ("name", "target", "args", "kwargs", "val", "scope")

    def __init__(self, name: str, target: str, args: tuple[Any, ...] = (), kwargs: Mapping[str, Any] | None = None,
                 val: Value = None, scope: str = "") -> None:
        self.name = name
        self.target = target
        self.args = args
        self.kwargs: Mapping[str, Any] = kwargs if kwargs is not None else {}
        self.val = val
        self.scope = scope

    def __repr__(self) -> str:
        return f"AtenNode({self.name!r}, {self.target!r})"


_UNARY = {"relu": "Relu", "gelu": "Gelu", "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "sqrt": "Sqrt",
          "neg": "Neg", "abs": "Abs", "reciprocal": "Reciprocal", "log": "Log", "sin": "Sin", "cos": "Cos",
          "erf": "Erf", "logical_not": "Not", "bitwise_not": "Not", "silu": "aten.silu", "tril": "Trilu",
          "triu": "Trilu", "clamp": "Clip", "floor": "Floor", "ceil": "Ceil"}
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow", "eq": "Equal", "lt": "Less",
           "gt": "Greater", "le": "LessOrEqual", "ge": "GreaterOrEqual", "maximum": "Max", "minimum": "Min",
           "logical_and": "And", "logical_or": "Or", "bitwise_and": "And", "bitwise_or": "Or",
           "truediv": "Div", "floordiv": "Div", "iadd": "Add", "imul": "Mul", "isub": "Sub", "itruediv": "Div",
           "floor_divide": "Div", "true_divide": "Div", "mod": "Mod", "remainder": "Mod", "and_": "And",
           "or_": "Or"}
_IDENTITY = {"contiguous", "clone", "alias", "detach", "lift_fresh_copy", "_to_copy", "to", "type_as", "float",
             "half", "bfloat16", "type", "_assert_tensor_metadata_passthrough", "dropout_", "cuda", "cpu"}
_DROPOUT = {"dropout", "native_dropout", "alpha_dropout", "feature_dropout", "feature_alpha_dropout"}
_SKIP = {"_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size", "sym_constrain_range",
         "_assert_async", "_check", "_check_is_size", "_functional_assert_scalar"}
_SDPA = {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
         "_scaled_dot_product_attention_math", "_scaled_dot_product_efficient_attention",
         "_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention"}



class AtenConverter:
    """Builds a ModelGraph from AtenNodes in graph order: a source binds its placeholders
    (add_weight + bind, add_input), then hands every call to convert_call."""

    def __init__(self, source: str, producer: str) -> None:
        self.source = source
        self.producer = producer
        self.nodes: list[Node] = []
        self.weights: dict[str, Tensor] = {}
        self.inputs: list[ValueInfo] = []
        self.value_info: dict[str, ValueInfo] = {}
        self.names: dict[AtenNode, str] = {}  # node -> tensor name
        self.multi: dict[AtenNode, list[str]] = {}  # node -> names of its outputs (tuples)
        self.notes: list[str] = []
        self._n = 0
        self._scope = ""
        self._unsqueezed: dict[str, str] = {}

    # -- helpers ---------------------------------------------------------------------------------

    def _fresh(self, base: str) -> str:
        self._n += 1
        return f"{base}__{self._n}"

    def emit(self, op: str, inputs: Sequence[str], outputs: Sequence[str] | None = None, base: str = "",
             domain: str = "", **attrs: AttrValue) -> str:
        name = self._fresh(base or op.lower())
        outs = tuple(outputs) if outputs is not None else (name,)
        kept = Attrs({k: v for k, v in attrs.items() if v is not None}) if attrs else NO_ATTRS
        self.nodes.append(Node(name, op, tuple(inputs), outs, kept, self._scope, domain))
        return outs[0]

    def const_ints(self, values: Sequence[int], scalar: bool = False) -> str:
        name = self._fresh("const")
        vals = tuple(int(v) for v in values)
        self.weights[name] = Tensor(name, () if scalar else (len(vals),), "int64", name, int_value=vals,
                                    is_constant_node=True)
        return name

    def const_float(self, value: float) -> str:
        name = self._fresh("const")
        self.weights[name] = Tensor(name, (), "float32", name, float_value=float(value), is_constant_node=True)
        return name

    def scalar(self, x: Any) -> str | None:
        """Tensor name for a scalar argument (python number, SymInt node, 0-d tensor node)."""
        if isinstance(x, bool):
            return self.const_ints([int(x)], scalar=True)
        if isinstance(x, int):
            return self.const_ints([x], scalar=True)
        if isinstance(x, float):
            return self.const_float(x)
        if isinstance(x, AtenNode):
            return self.names.get(x)
        return None

    def operand(self, x: Any) -> str | None:
        if isinstance(x, AtenNode):
            return self.names.get(x)
        return self.scalar(x)

    def operands(self, values: Sequence[Any]) -> list[str] | None:
        """The graph names of these arguments; None when one has none (its handler then leaves the
        node opaque)."""
        names: list[str] = []
        for v in values:
            name = self.operand(v)
            if name is None:
                return None
            names.append(name)
        return names

    def shape_tensor(self, dims: Sequence[Any]) -> str | None:
        """A 1-D int tensor for a size list mixing ints and SymInt nodes (Concat of Unsqueeze'd scalars)."""
        if all(isinstance(d, int) for d in dims):
            return self.const_ints(dims)
        parts: list[str] = []
        run: list[int] = []
        for d in dims:
            if isinstance(d, int):
                run.append(d)
                continue
            if run:
                parts.append(self.const_ints(run))
                run = []
            s = self.scalar(d)
            if s is None:
                return None
            if s not in self._unsqueezed:
                self._unsqueezed[s] = self.emit("Unsqueeze", [s, self.const_ints([0])])
            parts.append(self._unsqueezed[s])
        if run:
            parts.append(self.const_ints(run))
        return self.emit("Concat", parts, axis=0)

    def rank(self, x: Any) -> int | None:
        if isinstance(x, AtenNode):
            v = x.val
            if isinstance(v, TensorMeta):
                return v.dim()
        return None

    def record_value_info(self, fx_node: AtenNode, name: str) -> None:
        v = fx_node.val
        if isinstance(v, TensorMeta):
            self.value_info[name] = ValueInfo(name, v.shape, v.dtype)

    def add_weight(self, name: str, shape: tuple[int, ...], dtype: str, key: str, *, constant: bool = False) -> None:
        """A stored tensor (parameter, buffer, constant) named by its module path; ``key``: its
        storage (equal for tied weights)."""
        if name not in self.weights:
            self.weights[name] = Tensor(name, shape, dtype, key, is_constant_node=constant)

    def bind(self, node: AtenNode, name: str) -> None:
        """``node`` (a placeholder or attribute read) stands for tensor ``name``."""
        self.names[node] = name

    def add_input(self, node: AtenNode, meta: TensorMeta | None) -> None:
        """``node`` is a graph input (a user input) of this shape and dtype (None: not known)."""
        self.names[node] = node.name
        self.inputs.append(ValueInfo(node.name, meta.shape, meta.dtype) if meta is not None
                           else ValueInfo(node.name, None, "unknown"))

    def graph(self) -> ModelGraph:
        return ModelGraph(source=self.source, kind=GraphKind.TORCH, nodes=tuple(self.nodes), weights=dict(self.weights),
                          inputs=tuple(self.inputs), value_info=dict(self.value_info),
                          producer=self.producer, warnings=tuple(self.notes))

    # -- ops -----------------------------------------------------------------------------------------

    def _single(self, fx_node: AtenNode, op: str, inputs: Sequence[str | None], domain: str = "",
                **attrs: AttrValue) -> None:
        name = fx_node.name
        self.emit(op, [i or "" for i in inputs], [name], base=name, domain=domain, **attrs)
        self.names[fx_node] = name
        self.record_value_info(fx_node, name)

    def _alias(self, fx_node: AtenNode, src: str | None) -> None:
        if src is None:
            return
        self._single(fx_node, "Identity", [src])

    def _linear(self, fx_node: AtenNode, x: str | None, w: str | None, b: str | None) -> None:
        if x is None or w is None:
            self._generic(fx_node, "linear")
            return
        wt = self.emit("Transpose", [w], perm=(1, 0))
        if b is None:
            self._single(fx_node, "MatMul", [x, wt])
            return
        mm = self.emit("MatMul", [x, wt], base=fx_node.name + "_matmul")
        self._single(fx_node, "Add", [mm, b])

    def _generic(self, fx_node: AtenNode, name: str) -> None:
        ins = [self.names[a] for a in _flat_nodes((fx_node.args, fx_node.kwargs)) if a in self.names]
        val = fx_node.val
        if isinstance(val, tuple):
            outs = [f"{fx_node.name}:{i}" for i in range(len(val))]
            self.emit(f"aten.{name}", ins, outs, base=fx_node.name)
            self.multi[fx_node] = outs
            for o, v in zip(outs, val):
                if isinstance(v, TensorMeta):
                    self.value_info[o] = ValueInfo(o, v.shape, v.dtype)
            return
        self._single(fx_node, f"aten.{name}", ins)

    def convert_call(self, fx_node: AtenNode) -> None:
        """One call, by its op name: a handler, a unary / binary / identity / dropout op, else an
        ``aten.<name>`` node that activations flow through."""
        name, a, kw = fx_node.target, fx_node.args, fx_node.kwargs
        self._scope = fx_node.scope
        handler = _HANDLERS.get(name)
        if name in _SKIP:
            return
        if handler is not None:
            try:
                done = handler(self, fx_node, a, kw)
            except (IndexError, ValueError, TypeError, KeyError, AttributeError, OverflowError):
                done = False  # arguments no tracer writes (a hostile archive's): the op stays opaque
            if done:
                return
        elif name in _UNARY:
            src = self.operand(a[0]) if a else None
            if src is not None:
                self._single(fx_node, _UNARY[name], [src])
                return
        elif name in _BINARY:
            x, y = (self.operand(a[0]), self.operand(a[1])) if len(a) >= 2 else (None, None)
            if x is not None and y is not None:
                alpha = kw.get("alpha", a[2] if len(a) > 2 and name in ("add", "sub") else 1)
                if alpha not in (1, 1.0) and isinstance(alpha, (int, float)):
                    y = self.emit("Mul", [y, self.const_float(float(alpha))])
                self._single(fx_node, _BINARY[name], [x, y])
                return
        elif name in _IDENTITY:
            src = self.operand(a[0]) if a else None
            if src is not None:
                self._alias(fx_node, src)
                return
        elif name in _DROPOUT:
            src = self.operand(a[0]) if a else None
            if src is not None:
                val = fx_node.val
                if isinstance(val, tuple):  # native_dropout: (output, mask)
                    out = self.emit("Dropout", [src], [f"{fx_node.name}:0"], base=fx_node.name)
                    self.multi[fx_node] = [out, ""]
                else:
                    self._single(fx_node, "Dropout", [src])
                return
        self._generic(fx_node, name)


def _flat_nodes(obj: Any) -> list[AtenNode]:
    out: list[AtenNode] = []
    if isinstance(obj, AtenNode):
        out.append(obj)
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            out.extend(_flat_nodes(x))
    elif isinstance(obj, Mapping):
        for x in obj.values():
            out.extend(_flat_nodes(x))
    return out


def _norm(axis: int, rank: int | None) -> int:
    return axis + rank if axis < 0 and rank is not None else axis


# -- handlers: return True when the node was converted -------------------------------------------

Handler = Callable[[AtenConverter, AtenNode, tuple[Any, ...], Mapping[str, Any]], bool]


def _h_linear(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    b = a[2] if len(a) > 2 else kw.get("bias")
    c._linear(n, c.operand(a[0]), c.operand(a[1]), c.operand(b) if b is not None else None)
    return True


def _h_matmul(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    xy = c.operands(a[:2])
    if xy is None:
        return False
    c._single(n, "MatMul", xy)
    return True


def _h_addmm(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    ops = c.operands(a[:3])
    if ops is None:
        return False
    bias, x, y = ops
    mm = c.emit("MatMul", [x, y], base=n.name + "_matmul")
    c._single(n, "Add", [mm, bias])
    return True


def _h_t(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x = c.operand(a[0])
    r = c.rank(a[0])
    if x is None:
        return False
    if r is not None and r < 2:
        c._alias(n, x)
    else:
        c._single(n, "Transpose", [x], perm=(1, 0))
    return True


def _h_transpose(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x, r = c.operand(a[0]), c.rank(a[0])
    if x is None or r is None or len(a) < 3:
        return False
    d0, d1 = _norm(int(a[1]), r), _norm(int(a[2]), r)
    perm = list(range(r))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    c._single(n, "Transpose", [x], perm=tuple(perm))
    return True


def _h_permute(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x, r = c.operand(a[0]), c.rank(a[0])
    dims = a[1] if len(a) > 1 else kw.get("dims")
    if x is None or r is None or not isinstance(dims, (list, tuple)):
        return False
    c._single(n, "Transpose", [x], perm=tuple(_norm(int(d), r) for d in dims))
    return True


def _h_view(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x = c.operand(a[0])
    shape = a[1] if len(a) > 1 else kw.get("shape", kw.get("size"))
    if x is None or not isinstance(shape, (list, tuple)):
        return False
    target = c.shape_tensor(list(shape))
    if target is None:
        return False
    c._single(n, "Reshape", [x, target])
    return True


def _h_flatten(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x, r = c.operand(a[0]), c.rank(a[0])
    if x is None or r is None:
        return False
    start = _norm(int(a[1]) if len(a) > 1 else int(kw.get("start_dim", 0)), r)
    end = _norm(int(a[2]) if len(a) > 2 else int(kw.get("end_dim", -1)), r)
    val = a[0].val
    tail = list(val.shape[end + 1:]) if isinstance(val, TensorMeta) else []
    if not all(isinstance(d, int) for d in tail):
        return False
    target = c.const_ints([0] * start + [-1] + [int(d) for d in tail])
    c._single(n, "Reshape", [x, target])
    return True


def _h_unflatten(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    """unflatten(x, dim, sizes) -> Reshape keeping every other dim (0: copy the input's)."""
    x, r = c.operand(a[0]), c.rank(a[0])
    dim = a[1] if len(a) > 1 else kw.get("dim")
    sizes = a[2] if len(a) > 2 else kw.get("sizes")
    if x is None or r is None or not isinstance(dim, int) or not isinstance(sizes, (list, tuple)):
        return False
    d = _norm(dim, r)
    if not 0 <= d < r:
        return False
    target = c.shape_tensor([0] * d + list(sizes) + [0] * (r - d - 1))
    if target is None:
        return False
    c._single(n, "Reshape", [x, target])
    return True


def _h_expand(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x = c.operand(a[0])
    sizes = a[1] if len(a) > 1 else kw.get("size")
    if x is None or not isinstance(sizes, (list, tuple)):
        return False
    target = c.shape_tensor([1 if isinstance(s, int) and s == -1 else s for s in sizes])
    if target is None:
        return False
    c._single(n, "Expand", [x, target])
    return True


def _h_unsqueeze(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x = c.operand(a[0])
    dim = a[1] if len(a) > 1 else kw.get("dim")
    if x is None or not isinstance(dim, int):
        return False
    c._single(n, "Unsqueeze", [x, c.const_ints([dim])])
    return True


def _h_squeeze(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x = c.operand(a[0])
    if x is None:
        return False
    dims = a[1] if len(a) > 1 else kw.get("dim")
    if dims is None:
        c._single(n, "Squeeze", [x])
    else:
        c._single(n, "Squeeze", [x, c.const_ints(list(dims) if isinstance(dims, (list, tuple)) else [int(dims)])])
    return True


def _h_softmax(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x = c.operand(a[0])
    dim = a[1] if len(a) > 1 else kw.get("dim", -1)
    if x is None or not isinstance(dim, int):
        return False
    c._single(n, "Softmax", [x], axis=int(dim))
    return True


def _h_masked_fill(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x, mask = c.operand(a[0]), c.operand(a[1])
    value = c.operand(a[2]) if len(a) > 2 else c.operand(kw.get("value"))
    if x is None or mask is None or value is None:
        return False
    c._single(n, "Where", [mask, value, x])
    return True


def _h_where(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    if len(a) < 3:
        return False
    ins = c.operands(a[:3])
    if ins is None:
        return False
    c._single(n, "Where", ins)
    return True


def _h_ne(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    xy = c.operands(a[:2])
    if xy is None:
        return False
    eq = c.emit("Equal", xy)
    c._single(n, "Not", [eq])
    return True


def _h_rsub(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    xy = c.operands(a[:2])
    if xy is None:
        return False
    c._single(n, "Sub", xy[::-1])
    return True


def _h_rsqrt(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x = c.operand(a[0])
    if x is None:
        return False
    s = c.emit("Sqrt", [x])
    c._single(n, "Reciprocal", [s])
    return True


def _h_sdpa(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    qkv = c.operands(a[:3])
    if qkv is None:
        return False
    q, k, v = qkv
    mask = a[3] if len(a) > 3 else kw.get("attn_mask")
    ins = [q, k, v] + ([c.operand(mask) or ""] if isinstance(mask, AtenNode) else [])
    given = kw.get("scale")
    scale = float(given) if isinstance(given, (int, float)) and not isinstance(given, bool) else None
    causal = 1 if kw.get("is_causal") or (len(a) > 5 and a[5] is True) else None
    val = n.val
    if isinstance(val, tuple):
        out = c.emit("Attention", ins, [f"{n.name}:0"], base=n.name, scale=scale, is_causal=causal)
        c.multi[n] = [out] + [""] * (len(val) - 1)
        first = val[0] if val else None
        if isinstance(first, TensorMeta):
            c.value_info[out] = ValueInfo(out, first.shape, first.dtype)
    else:
        c._single(n, "Attention", ins, scale=scale, is_causal=causal)
    return True


def _h_split(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x, r = c.operand(a[0]), c.rank(a[0])
    val = n.val
    if x is None or r is None or not isinstance(val, tuple):
        return False
    dim = a[2] if len(a) > 2 else kw.get("dim", 0)
    if not isinstance(dim, int):
        return False
    dim = _norm(dim, r)
    metas = [t for t in val if isinstance(t, TensorMeta)]
    if any(not 0 <= dim < t.dim() for t in metas):
        return False
    sizes = [t.shape[dim] for t in metas]
    outs = [f"{n.name}:{i}" for i in range(len(val))]
    if all(isinstance(s, int) for s in sizes):
        c.emit("Split", [x, c.const_ints([int(s) for s in sizes])], outs, base=n.name, axis=dim)
    else:
        c.emit("Split", [x], outs, base=n.name, axis=dim, num_outputs=len(outs))
    c.multi[n] = outs
    for o, t in zip(outs, val):
        if isinstance(t, TensorMeta):
            c.value_info[o] = ValueInfo(o, t.shape, t.dtype)
    return True


def _h_unbind(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x, r = c.operand(a[0]), c.rank(a[0])
    val = n.val
    if x is None or r is None or not isinstance(val, tuple):
        return False
    dim = _norm(int(a[1]) if len(a) > 1 else int(kw.get("dim", 0)), r)
    parts = [f"{n.name}:split{i}" for i in range(len(val))]
    c.emit("Split", [x, c.const_ints([1] * len(val))], parts, base=n.name, axis=dim)
    outs = [c.emit("Squeeze", [p, c.const_ints([dim])], [f"{n.name}:{i}"]) for i, p in enumerate(parts)]
    c.multi[n] = outs
    return True


def _h_select(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x = c.operand(a[0])
    if x is None or len(a) < 3 or not isinstance(a[1], int):
        return False
    idx = c.scalar(a[2])
    if idx is None:
        return False
    c._single(n, "Gather", [x, idx], axis=int(a[1]))
    return True


def _h_slice(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x = c.operand(a[0])
    if x is None:
        return False
    dim = a[1] if len(a) > 1 else kw.get("dim", 0)
    start = a[2] if len(a) > 2 else kw.get("start")
    end = a[3] if len(a) > 3 else kw.get("end")
    step = a[4] if len(a) > 4 else kw.get("step", 1)
    if not isinstance(dim, int) or not isinstance(step, int):
        return False
    starts = c.shape_tensor([0 if start is None else start])
    ends = c.shape_tensor([_INT64_MAX if end is None or (isinstance(end, int) and end >= _INT64_MAX) else end])
    if starts is None or ends is None:
        return False
    c._single(n, "Slice", [x, starts, ends, c.const_ints([dim]), c.const_ints([step])])
    return True


def _h_cat(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    tensors = a[0] if a else kw.get("tensors")
    dim = a[1] if len(a) > 1 else kw.get("dim", 0)
    if not isinstance(tensors, (list, tuple)) or not isinstance(dim, int):
        return False
    ins = c.operands(tensors)
    if ins is None:
        return False
    c._single(n, "Concat", ins, axis=dim)
    return True


def _h_stack(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    tensors = a[0] if a else kw.get("tensors")
    dim = a[1] if len(a) > 1 else kw.get("dim", 0)
    if not isinstance(tensors, (list, tuple)) or not isinstance(dim, int):
        return False
    ins = c.operands(tensors)
    if ins is None:
        return False
    axes = c.const_ints([dim])
    c._single(n, "Concat", [c.emit("Unsqueeze", [i, axes]) for i in ins], axis=dim)
    return True


def _h_repeat(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x, r = c.operand(a[0]), c.rank(a[0])
    reps = a[1] if len(a) > 1 else kw.get("repeats")
    if x is None or not isinstance(reps, (list, tuple)) or r is None or len(reps) != r:
        return False
    target = c.shape_tensor(list(reps))
    if target is None:
        return False
    c._single(n, "Tile", [x, target])
    return True


def _h_repeat_interleave(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    """repeat_interleave(x, r, dim) as exporters write GQA's repeat_kv: Unsqueeze, Expand, Reshape.

    Only a Python-int ``r`` (a tensor of per-element repeats is data-dependent) and an output whose
    shape has at most one symbolic dim after ``dim`` (it becomes the Reshape's -1).
    """
    x, rank = c.operand(a[0]), c.rank(a[0])
    reps = a[1] if len(a) > 1 else kw.get("repeats")
    dim = a[2] if len(a) > 2 else kw.get("dim")
    out = n.val
    if x is None or rank is None or not isinstance(reps, int) or not isinstance(dim, int) \
            or not isinstance(out, TensorMeta):
        return False
    d = _norm(dim, rank)
    tail = list(out.shape[d:])  # the merged dim, then the dims after it
    symbolic = [i for i, s in enumerate(tail) if not isinstance(s, int)]
    if len(symbolic) > 1:
        return False
    target = [0] * d + [s if isinstance(s, int) else -1 for s in tail]
    grown = c.emit("Unsqueeze", [x, c.const_ints([d + 1])])
    expanded = c.emit("Expand", [grown, c.const_ints([1] * (d + 1) + [reps] + [1] * (rank - d - 1))])
    c._single(n, "Reshape", [expanded, c.const_ints(target)])
    return True


def _h_einsum(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    eq = a[0] if a else kw.get("equation")
    operands = a[1] if len(a) > 1 and isinstance(a[1], (list, tuple)) else a[1:]
    ins = c.operands(operands)
    if not isinstance(eq, str) or ins is None:
        return False
    c._single(n, "Einsum", ins, equation=eq.replace(" ", ""))
    return True


def _h_layer_norm(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x = c.operand(a[0])
    w = a[2] if len(a) > 2 else kw.get("weight")
    b = a[3] if len(a) > 3 else kw.get("bias")
    if x is None:
        return False
    ins = [x] + [c.operand(t) or "" for t in (w, b) if isinstance(t, AtenNode)]
    c._single(n, "LayerNormalization", ins, axis=-1)
    return True


def _h_rms_norm(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x = c.operand(a[0])
    w = a[2] if len(a) > 2 else kw.get("weight")
    if x is None:
        return False
    ins = [x] + ([c.operand(w) or ""] if isinstance(w, AtenNode) else [])
    c._single(n, "RMSNormalization", ins, axis=-1)
    return True


def _h_conv(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    """conv1d/conv2d/conv3d(x, w, b, stride, padding, dilation, groups) and convolution(x, w, b,
    stride, padding, dilation, transposed, output_padding, groups) -> Conv (transposed ones stay aten)."""
    x, w = (c.operand(a[0]), c.operand(a[1])) if len(a) >= 2 else (None, None)
    if x is None or w is None:
        return False
    b = a[2] if len(a) > 2 else kw.get("bias")
    general = n.target == "convolution"
    if general and (a[6] if len(a) > 6 else kw.get("transposed", False)):
        return False
    groups = a[8] if general and len(a) > 8 else a[6] if not general and len(a) > 6 else kw.get("groups", 1)
    weight = a[1].val if isinstance(a[1], AtenNode) else None
    kernel = (tuple(int(d) for d in weight.shape[2:])
              if isinstance(weight, TensorMeta) and all(isinstance(d, int) for d in weight.shape[2:]) else None)
    ins = [x, w] + ([c.operand(b) or ""] if isinstance(b, AtenNode) else [])
    c._single(n, "Conv", ins, group=int(groups) if isinstance(groups, int) else None, kernel_shape=kernel)
    return True


def _h_pad(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    """pad / constant_pad_nd(x, [last_lo, last_hi, prev_lo, prev_hi, ...], value) -> Pad with ONNX's
    [begins..., ends...] over every axis."""
    x = c.operand(a[0]) if a else None
    pads = a[1] if len(a) > 1 else kw.get("pad")
    rank = c.rank(a[0]) if a else None
    mode = a[2] if len(a) > 2 and isinstance(a[2], str) else kw.get("mode", "constant")
    if x is None or rank is None or not isinstance(pads, (list, tuple)) or len(pads) % 2 or len(pads) > 2 * rank:
        return False
    begins: list[Any] = [0] * rank
    ends: list[Any] = [0] * rank
    for i in range(len(pads) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = pads[2 * i], pads[2 * i + 1]
    target = c.shape_tensor(begins + ends)
    if target is None:
        return False
    c._single(n, "Pad", [x, target], mode=mode if isinstance(mode, str) else None)
    return True


def _h_embedding(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    w, idx = c.operand(a[0]), c.operand(a[1])
    if w is None or idx is None:
        return False
    c._single(n, "Gather", [w, idx], axis=0)
    return True


def _h_sym_size(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x = c.operand(a[0])
    if x is None:
        return False
    shape = c.emit("Shape", [x])
    if len(a) < 2:
        c.names[n] = shape
        return True
    c._single(n, "Gather", [shape, c.const_ints([int(a[1])], scalar=True)], axis=0)
    return True


def _h_sym_numel(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x = c.operand(a[0])
    if x is None:
        return False
    c._single(n, "Size", [x])
    return True


def _h_getitem(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    src, idx = a[0], a[1]
    if isinstance(src, AtenNode) and src in c.multi and isinstance(idx, int):
        outs = c.multi[src]
        if 0 <= idx < len(outs) and outs[idx]:
            c.names[n] = outs[idx]
            c.record_value_info(n, outs[idx])
        return True
    if isinstance(src, AtenNode) and src in c.names and isinstance(idx, int):
        # Indexing a shape (torch.fx: x.size()[0]) or a tensor's first axis.
        c._single(n, "Gather", [c.names[src], c.const_ints([idx], scalar=True)], axis=0)
        return True
    return False


def _h_getattr(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    if len(a) == 2 and a[1] == "shape":
        x = c.operand(a[0])
        if x is not None:
            c.names[n] = c.emit("Shape", [x])
    return True  # dtype, device, ...: not tensors


def _h_sqrt_scalar(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    x = c.operand(a[0]) if a else None
    if x is None:
        return False
    c._single(n, "Sqrt", [x])
    return True


def _h_baddbmm(c: AtenConverter, n: AtenNode, a: tuple[Any, ...], kw: Mapping[str, Any]) -> bool:
    ops = c.operands(a[:3])
    if ops is None:
        return False
    base, x, y = ops
    prod = c.emit("MatMul", [x, y], base=n.name + "_matmul")
    alpha = kw.get("alpha", 1)
    if isinstance(alpha, (int, float)) and alpha != 1:
        prod = c.emit("Mul", [prod, c.const_float(float(alpha))])
    c._single(n, "Add", [base, prod])
    return True


_HANDLERS: dict[str, Handler] = {
    "linear": _h_linear, "matmul": _h_matmul, "bmm": _h_matmul, "mm": _h_matmul, "addmm": _h_addmm,
    "baddbmm": _h_baddbmm, "t": _h_t, "transpose": _h_transpose, "swapaxes": _h_transpose,
    "permute": _h_permute, "view": _h_view, "reshape": _h_view, "_unsafe_view": _h_view, "_reshape_alias": _h_view,
    "flatten": _h_flatten, "unflatten": _h_unflatten, "expand": _h_expand, "unsqueeze": _h_unsqueeze, "squeeze": _h_squeeze,
    "softmax": _h_softmax, "_softmax": _h_softmax, "_safe_softmax": _h_softmax, "masked_fill": _h_masked_fill,
    "where": _h_where, "ne": _h_ne, "rsub": _h_rsub, "rsqrt": _h_rsqrt, "split": _h_split,
    "split_with_sizes": _h_split, "chunk": _h_split, "tensor_split": _h_split, "unbind": _h_unbind,
    "select": _h_select, "slice": _h_slice, "cat": _h_cat, "concat": _h_cat, "stack": _h_stack,
    "repeat": _h_repeat, "tile": _h_repeat, "repeat_interleave": _h_repeat_interleave, "einsum": _h_einsum, "layer_norm": _h_layer_norm,
    "rms_norm": _h_rms_norm, "embedding": _h_embedding, "sym_size": _h_sym_size, "size": _h_sym_size,
    "sym_numel": _h_sym_numel, "numel": _h_sym_numel, "getitem": _h_getitem, "sqrt_scalar": _h_sqrt_scalar,
    "getattr": _h_getattr, "conv1d": _h_conv, "conv2d": _h_conv, "conv3d": _h_conv, "convolution": _h_conv,
    "pad": _h_pad, "constant_pad_nd": _h_pad,
    **{name: _h_sdpa for name in _SDPA},
}

