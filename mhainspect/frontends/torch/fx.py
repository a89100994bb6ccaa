"""Trace an nn.Module (torch.export, torch.fx fallback) into a ModelGraph in the ONNX op vocabulary.

Tracing runs on fake tensors (torch.export fakifies its inputs; meta-device modules work), so no
real compute is spent. Batch and sequence are exported as dynamic dims, so they stay symbols in
shape arithmetic and head counts come out as integers. The traced graph's nodes become AtenNodes
and mhainspect.frontends.torch.aten converts them, as it converts a .pt2 archive's serialized
graph: one converter, whichever door a graph came through. Parameters become Tensor metadata
named by their module path, with a storage key shared by tied weights.
"""

from __future__ import annotations

import inspect
import math
import operator
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mhainspect.errors import InputError
from mhainspect.frontends.torch.aten import AtenConverter, AtenNode, TensorMeta, Value, module_path
from mhainspect.ir.dtypes import canonical
from mhainspect.ir.graph import ModelGraph


def storage_key(t: torch.Tensor) -> str:
    """Equal for tensors that are the same storage view (tied weights); meta tensors by identity."""
    try:
        ptr = int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        ptr = 0
    if ptr == 0 or t.device.type == "meta":
        return f"id:{id(t)}"
    return f"ptr:{ptr}:{t.storage_offset()}:{tuple(t.shape)}:{tuple(t.stride())}"


def normalise_inputs(example_inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(args, kwargs) from a tensor, a tuple/list of inputs, or a mapping of keyword inputs."""
    if example_inputs is None:
        return (), {}
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,), {}
    if isinstance(example_inputs, Mapping):
        return (), dict(example_inputs)
    if isinstance(example_inputs, (tuple, list)):
        if (len(example_inputs) == 2 and isinstance(example_inputs[0], (tuple, list))
                and isinstance(example_inputs[1], Mapping)):
            return tuple(example_inputs[0]), dict(example_inputs[1])
        return tuple(example_inputs), {}
    return (example_inputs,), {}


def export_program(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list[str]]:
    """torch.export with dynamic batch/sequence dims, then static; returns (program, notes)."""
    notes: list[str] = []
    errors: list[str] = []
    with warnings.catch_warnings():
        # Tracing warns about user code (attributes set in forward, deprecated calls): not ours to print.
        warnings.simplefilter("ignore")
        return _export(model, args, kwargs, notes, errors)


def _export(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], notes: list[str],
            errors: list[str]) -> tuple[Any, list[str]]:
    from torch.export import Dim, ShapesCollection

    try:
        shapes = ShapesCollection()  # type: ignore[no-untyped-call]
        for t in _tensors((args, kwargs)):
            shapes[t] = {i: Dim.AUTO for i in range(t.dim())}
        dynamic = shapes.dynamic_shapes(model, args, kwargs)  # type: ignore[no-untyped-call]
        return torch.export.export(model, args, kwargs, dynamic_shapes=dynamic, strict=False), notes
    except Exception as exc:  # any tracing failure: try the next strategy
        errors.append(_one_line(exc))
    try:
        program = torch.export.export(model, args, kwargs, strict=False)
        notes.append("traced with static shapes (dynamic export failed: " + errors[0] + ")")
        return program, notes
    except Exception as exc:
        errors.append(_one_line(exc))
    raise InputError("torch.export could not trace the module: " + errors[-1])


def _tensors(obj: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            out.extend(_tensors(x))
    elif isinstance(obj, Mapping):
        for x in obj.values():
            out.extend(_tensors(x))
    seen: set[int] = set()
    unique = []
    for t in out:
        if id(t) not in seen:
            seen.add(id(t))
            unique.append(t)
    return unique


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first[:200]}"


def trace_module(model: nn.Module, example_inputs: Any, *, source: str = "", method: str = "export") -> ModelGraph:
    """Trace ``model`` on ``example_inputs`` into a ModelGraph (torch.export, else torch.fx;
    ``method="fx"`` goes straight to torch.fx)."""
    args, kwargs = normalise_inputs(example_inputs)
    params = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers(remove_duplicate=False))
    try:
        if method == "fx":
            raise InputError("torch.fx requested")
        program, notes = export_program(model, args, kwargs)
    except InputError as export_error:
        try:
            gm = _fx_trace(model, args, kwargs)
        except Exception as exc:
            raise InputError(f"{export_error}; torch.fx could not trace it either ({_one_line(exc)})") from None
        conv = _Converter(source or type(model).__name__, params, buffers)
        conv.notes.append("traced with torch.fx" if method == "fx" else
                          f"traced with torch.fx (torch.export failed: {export_error})")
        return conv.convert_fx(gm)
    conv = _Converter(source or type(model).__name__, params, buffers)
    conv.notes.extend(notes)
    return conv.convert_export(program)


def _fx_trace(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    # Optional arguments the caller did not give stay constants (``mask=None`` branches fold away).
    concrete: dict[str, Any] = {}
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    for i, p in enumerate(params):
        if i >= len(args) and p.name not in kwargs and p.default is not p.empty:
            concrete[p.name] = p.default
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm = torch.fx.symbolic_trace(model, concrete_args=concrete or None)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values: list[Any] = list(args)
    for ph in placeholders[len(args):]:
        values.append(kwargs.get(ph.target, ph.args[0] if ph.args else None))
    from torch._subclasses.fake_tensor import FakeTensorMode

    # Shapes on fake tensors: parameters stay real (or meta), nothing is computed.
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake = [mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for v in values]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fake)
    return gm


# -- fx graphs as AtenNodes --------------------------------------------------------------------------


def _op_name(target: Any) -> str:
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return str(getattr(packet, "__name__", str(target))).split(".")[-1]
    return str(getattr(target, "__name__", str(target))).split(".")[-1]


def _scope(fx_node: Any) -> str:
    stack = fx_node.meta.get("nn_module_stack")
    if not stack:
        return ""
    return module_path(str(list(stack.values())[-1][0]))


def _dim(d: Any) -> int | str:
    """An int, or the symbol of a dynamic dim (never int() a SymInt: that would specialise it)."""
    if isinstance(d, torch.SymInt):
        expr = d.node.expr
        if getattr(expr, "is_number", False):
            return int(expr)
        return str(expr)
    return int(d)


def _dtype(dtype: Any) -> str:
    return canonical(str(dtype))


def _meta(t: torch.Tensor) -> TensorMeta:
    return TensorMeta(tuple(_dim(d) for d in t.shape), _dtype(t.dtype))


def _value(val: Any) -> Value:
    if isinstance(val, torch.Tensor):
        return _meta(val)
    if isinstance(val, (tuple, list)):
        return tuple(_meta(v) if isinstance(v, torch.Tensor) else None for v in val)
    return None


def _get_attr(root: Any, target: str) -> Any:
    obj = root
    for part in target.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


class _Nodes:
    """fx nodes -> AtenNodes, in graph order (arguments refer to earlier nodes)."""

    def __init__(self) -> None:
        self.of: dict[Any, AtenNode] = {}

    def arg(self, x: Any) -> Any:
        if isinstance(x, torch.fx.Node):
            return self.of[x]
        if isinstance(x, tuple):
            return tuple(self.arg(v) for v in x)
        if isinstance(x, list):
            return [self.arg(v) for v in x]
        if isinstance(x, Mapping):
            return {k: self.arg(v) for k, v in x.items()}
        if isinstance(x, slice):
            return slice(self.arg(x.start), self.arg(x.stop), self.arg(x.step))
        return x

    def add(self, fx_node: Any, target: str, args: Sequence[Any], kwargs: Mapping[str, Any], scope: str) -> AtenNode:
        node = AtenNode(fx_node.name, target, tuple(self.arg(a) for a in args),
                        {k: self.arg(v) for k, v in kwargs.items()}, _value(fx_node.meta.get("val")), scope)
        self.of[fx_node] = node
        return node


# -- conversion ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """A call normalised to aten-like (name, args, kwargs), whatever tracer produced it."""

    name: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]


class _Converter(AtenConverter):
    """The shared converter, with a live module's tensors (storage keys) and torch.fx's module calls."""

    def __init__(self, source: str, params: Mapping[str, torch.Tensor], buffers: Mapping[str, torch.Tensor]) -> None:
        super().__init__(source, f"torch {torch.__version__}")
        self.params = params
        self.buffers = buffers

    def add_tensor(self, name: str, t: torch.Tensor, *, constant: bool = False) -> None:
        self.add_weight(name, tuple(int(d) for d in t.shape), _dtype(t.dtype), storage_key(t), constant=constant)

    # -- torch.export --------------------------------------------------------------------------------

    def convert_export(self, program: Any) -> ModelGraph:
        from torch.export.graph_signature import InputKind

        kinds: dict[str, tuple[Any, str | None]] = {}
        for spec in program.graph_signature.input_specs:
            kinds[spec.arg.name] = (spec.kind, spec.target)
        consts = getattr(program, "constants", {})
        nodes = _Nodes()
        for fx_node in program.graph.nodes:
            if fx_node.op == "placeholder":
                node = nodes.add(fx_node, "placeholder", (), {}, "")
                kind, target = kinds.get(fx_node.name, (InputKind.USER_INPUT, None))
                val = fx_node.meta.get("val")
                if kind == InputKind.PARAMETER and target is not None:
                    t = self.params.get(target)
                    self.add_tensor(target, t if t is not None else val)
                    self.bind(node, target)
                elif kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR) and target is not None:
                    t = self.buffers.get(target)
                    if t is None:
                        t = consts.get(target, val)
                    if isinstance(t, torch.Tensor):
                        self.add_tensor(target, t, constant=True)
                        self.bind(node, target)
                elif isinstance(val, torch.Tensor):
                    self.add_input(node, _meta(val))
            elif fx_node.op == "call_function":
                scope = _scope(fx_node)
                node = nodes.add(fx_node, _op_name(fx_node.target), fx_node.args, fx_node.kwargs, scope)
                self._scope = scope
                self.convert_call(node)
            elif fx_node.op == "get_attr":
                node = nodes.add(fx_node, "get_attr", (), {}, "")
                t = _get_attr(program.graph_module, str(fx_node.target))
                if isinstance(t, torch.Tensor):
                    self.add_tensor(str(fx_node.target), t, constant=True)
                    self.bind(node, str(fx_node.target))
            else:
                nodes.add(fx_node, fx_node.op, (), {}, "")
        return self.graph()

    # -- torch.fx ------------------------------------------------------------------------------------

    def convert_fx(self, gm: Any) -> ModelGraph:
        modules = dict(gm.named_modules())
        nodes = _Nodes()
        for fx_node in gm.graph.nodes:
            val = fx_node.meta.get("val")
            if fx_node.op == "placeholder":
                node = nodes.add(fx_node, "placeholder", (), {}, "")
                if isinstance(val, torch.Tensor):
                    self.add_input(node, _meta(val))
            elif fx_node.op == "get_attr":
                node = nodes.add(fx_node, "get_attr", (), {}, "")
                target = str(fx_node.target)
                t = _get_attr(gm, target)
                if isinstance(t, torch.Tensor):
                    self.add_tensor(target, t, constant=target not in self.params)
                    self.bind(node, target)
            elif fx_node.op == "call_module":
                self._scope = str(fx_node.target)
                node = nodes.add(fx_node, str(fx_node.target), fx_node.args, fx_node.kwargs, self._scope)
                self._call_module(node, modules.get(str(fx_node.target)))
            elif fx_node.op in ("call_method", "call_function"):
                self._scope = ""
                call = (_method_call(str(fx_node.target), fx_node.args, fx_node.kwargs) if fx_node.op == "call_method"
                        else _function_call(fx_node.target, fx_node.args, fx_node.kwargs))
                self.convert_call(nodes.add(fx_node, call.name, call.args, call.kwargs, ""))
            else:
                nodes.add(fx_node, fx_node.op, (), {}, "")
        return self.graph()

    def _call_module(self, fx_node: AtenNode, module: nn.Module | None) -> None:
        path = fx_node.target
        args = tuple(fx_node.args)
        x = args[0] if args else None
        if isinstance(module, nn.Linear):
            self.add_tensor(f"{path}.weight", module.weight)
            if module.bias is not None:
                self.add_tensor(f"{path}.bias", module.bias)
            self._linear(fx_node, self.operand(x), f"{path}.weight",
                         f"{path}.bias" if module.bias is not None else None)
        elif isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)) and module.padding_mode == "zeros":
            self.add_tensor(f"{path}.weight", module.weight)
            conv_inputs: list[str | None] = [self.operand(x), f"{path}.weight"]
            if module.bias is not None:
                self.add_tensor(f"{path}.bias", module.bias)
                conv_inputs.append(f"{path}.bias")
            self._single(fx_node, "Conv", conv_inputs, group=module.groups, kernel_shape=tuple(module.kernel_size))
        elif isinstance(module, nn.Dropout):
            self._single(fx_node, "Dropout", [self.operand(x)])
        elif isinstance(module, nn.Softmax):
            self._single(fx_node, "Softmax", [self.operand(x)], axis=int(module.dim if module.dim is not None else -1))
        elif isinstance(module, nn.LayerNorm) and module.weight is not None:
            self.add_tensor(f"{path}.weight", module.weight)
            ins = [self.operand(x), f"{path}.weight"]
            if module.bias is not None:
                self.add_tensor(f"{path}.bias", module.bias)
                ins.append(f"{path}.bias")
            self._single(fx_node, "LayerNormalization", ins, axis=-1)
        elif isinstance(module, nn.Embedding):
            self.add_tensor(f"{path}.weight", module.weight)
            self._single(fx_node, "Gather", [f"{path}.weight", self.operand(x)], axis=0)
        else:
            ins = [self.operand(a) for a in args if isinstance(a, AtenNode)]
            if module is not None:
                for pname, p in module.named_parameters():
                    self.add_tensor(f"{path}.{pname}", p)
                    ins.append(f"{path}.{pname}")
            self._single(fx_node, f"module.{type(module).__name__}", ins)


# -- torch.fx (symbolic_trace) calls normalised to aten-like calls -----------------------------------


def _method_call(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> _Call:
    a = tuple(args)
    if name in ("view", "reshape", "expand", "permute", "repeat") and len(a) > 1 and not isinstance(a[1], (list, tuple)):
        return _Call(name, (a[0], list(a[1:])), kwargs)
    if name == "size":
        return _Call("size", a, kwargs)
    if name == "dim":
        return _Call("aten.dim", a, kwargs)
    return _Call(name, a, kwargs)


def _function_call(target: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> _Call:
    a = tuple(args)
    if target is math.sqrt:
        return _Call("sqrt_scalar", a, kwargs)
    if target is operator.getitem:
        return _Call("getitem", a, kwargs)
    name = _op_name(target)
    if name in ("softmax",) and "dim" in kwargs and len(a) == 1:
        return _Call(name, (a[0], kwargs["dim"]), {})
    if name in ("dropout",):
        return _Call("dropout", a[:1], {})
    if name in ("scaled_dot_product_attention",):
        return _Call(name, a, kwargs)
    return _Call(name, a, kwargs)
