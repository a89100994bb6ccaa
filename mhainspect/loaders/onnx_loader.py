"""ONNX loader: protobuf -> ModelGraph, reading graph structure and weight metadata only.

Tensor data is never read or copied, except the values of tiny integer/float constants that
drive shape arithmetic and attention scaling. External data files are never opened.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable
from pathlib import Path

from mhainspect.errors import InputError
from mhainspect.graph import AttrValue, ModelGraph, Node, Tensor, ValueInfo

# Values of integer constants up to this many elements are read (shape arithmetic).
_MAX_INT_VALUE_ELEMENTS = 64
_MAX_SUBGRAPH_DEPTH = 32

_INT_TYPES = {6: "int32", 7: "int64", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 12: "uint32", 13: "uint64"}
_FLOAT_TYPES = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}
_OTHER_TYPES = {9: "bool", 8: "string", 14: "complex64", 15: "complex128",
                17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz",
                21: "uint4", 22: "int4", 23: "float4e2m1"}


def dtype_name(elem_type: int) -> str:
    return _INT_TYPES.get(elem_type) or _FLOAT_TYPES.get(elem_type) or _OTHER_TYPES.get(elem_type, f"type{elem_type}")


def load_onnx(path: str | os.PathLike[str]) -> ModelGraph:
    """Parse an ONNX file into a ModelGraph. Raises InputError with a one-line reason."""
    model = read_model_proto(path)
    return model_to_graph(model, source=str(path))


def read_model_proto(path: str | os.PathLike[str]) -> onnx.ModelProto:  # type: ignore[name-defined]  # noqa: F821
    import onnx
    from google.protobuf.message import DecodeError

    p = Path(path)
    check_readable_file(p)
    try:
        model = onnx.load(str(p), load_external_data=False)
    except DecodeError as exc:
        raise InputError(f"{p}: not a valid ONNX model (protobuf decode failed: {exc})") from None
    except (OSError, ValueError, RuntimeError) as exc:
        raise InputError(f"{p}: cannot read ONNX model: {exc}") from None
    if not model.HasField("graph") or (len(model.graph.node) == 0 and len(model.graph.initializer) == 0
                                        and len(model.graph.input) == 0):
        raise InputError(f"{p}: not an ONNX model (no graph in the file)")
    return model


def check_readable_file(p: Path) -> None:
    try:
        if not p.exists():
            raise InputError(f"{p}: no such file")
        if p.is_dir():
            raise InputError(f"{p}: is a directory, expected a model file")
        if p.stat().st_size == 0:
            raise InputError(f"{p}: file is empty")
        with open(p, "rb"):
            pass
    except PermissionError:
        raise InputError(f"{p}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot open: {exc.strerror or exc}") from None


def model_to_graph(model: onnx.ModelProto, source: str) -> ModelGraph:  # type: ignore[name-defined]  # noqa: F821
    opset = None
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            opset = int(imp.version)
    functions = {(f.domain, f.name): f for f in model.functions}
    builder = _GraphBuilder(functions)
    builder.add_graph(model.graph, prefix="", depth=0)
    graph = model.graph
    inputs = tuple(_value_info(v) for v in graph.input if v.name not in builder.weights)
    outputs = tuple(_value_info(v) for v in graph.output)
    value_info = {v.name: _value_info(v) for v in graph.value_info}
    builder.check_dangling({v.name for v in graph.input})
    producer = " ".join(x for x in (model.producer_name, model.producer_version) if x)
    return ModelGraph(
        source=source,
        kind="onnx",
        nodes=tuple(builder.nodes),
        weights=builder.weights,
        inputs=inputs,
        outputs=outputs,
        value_info=value_info,
        opset=opset,
        producer=producer,
        warnings=tuple(builder.warnings),
    )


def _value_info(v: onnx.ValueInfoProto) -> ValueInfo:  # type: ignore[name-defined]  # noqa: F821
    t = v.type
    if not t.HasField("tensor_type"):
        return ValueInfo(v.name, None, "unknown")
    tt = t.tensor_type
    if not tt.HasField("shape"):
        return ValueInfo(v.name, None, dtype_name(tt.elem_type))
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return ValueInfo(v.name, tuple(dims), dtype_name(tt.elem_type))


def _storage_key(t: onnx.TensorProto) -> str:  # type: ignore[name-defined]  # noqa: F821
    if t.data_location == 1:  # EXTERNAL: identity is (file, offset), so shared data counts once
        entries = {e.key: e.value for e in t.external_data}
        return f"external:{entries.get('location', '')}:{entries.get('offset', '0')}:{entries.get('length', '')}"
    return f"name:{t.name}"


def _small_int_value(t: onnx.TensorProto, numel: int) -> tuple[int, ...] | None:  # type: ignore[name-defined]  # noqa: F821
    if t.data_type not in _INT_TYPES or numel > _MAX_INT_VALUE_ELEMENTS or t.data_location == 1:
        return None
    from onnx import numpy_helper

    try:
        arr = numpy_helper.to_array(t)
    except Exception:  # malformed constant: its value just stays unknown
        return None
    return tuple(int(x) for x in arr.reshape(-1).tolist())


def _small_float_value(t: onnx.TensorProto, numel: int) -> float | None:  # type: ignore[name-defined]  # noqa: F821
    if t.data_type not in _FLOAT_TYPES or numel != 1 or t.data_location == 1:
        return None
    from onnx import numpy_helper

    try:
        arr = numpy_helper.to_array(t)
    except Exception:
        return None
    return float(arr.reshape(-1)[0])


def tensor_from_proto(t: onnx.TensorProto, name: str, is_constant_node: bool = False) -> Tensor:  # type: ignore[name-defined]  # noqa: F821
    shape = tuple(int(d) for d in t.dims)
    numel = 1
    for d in shape:
        numel *= max(d, 0)
    return Tensor(
        name=name,
        shape=shape,
        dtype=dtype_name(t.data_type),
        storage_key=_storage_key(t) if not is_constant_node else f"const:{name}",
        int_value=_small_int_value(t, numel),
        float_value=_small_float_value(t, numel),
        is_constant_node=is_constant_node,
    )


def _attr_value(a: onnx.AttributeProto) -> AttrValue:  # type: ignore[name-defined]  # noqa: F821
    from onnx import AttributeProto

    if a.type == AttributeProto.INT:
        return int(a.i)
    if a.type == AttributeProto.FLOAT:
        return float(a.f)
    if a.type == AttributeProto.STRING:
        return str(a.s.decode("utf-8", errors="replace"))
    if a.type == AttributeProto.INTS:
        return tuple(int(x) for x in a.ints)
    if a.type == AttributeProto.FLOATS:
        return tuple(float(x) for x in a.floats)
    if a.type == AttributeProto.STRINGS:
        return tuple(s.decode("utf-8", errors="replace") for s in a.strings)
    return None


def scope_from_metadata(props: Iterable[tuple[str, str]]) -> str | None:
    """The module path the torch dynamo exporter records in node metadata, if any."""
    for key, value in props:
        if key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                return None
            if isinstance(scopes, (list, tuple)) and scopes:
                # Cumulative module paths ('', 'm', 'm.layer.0', ...) end with the op's own name.
                path = ""
                for entry in scopes:
                    entry = str(entry)
                    if entry and (not path or entry.startswith(path + ".")):
                        path = entry
                return path or None
    return None


def scope_from_node_name(name: str) -> str:
    """TorchScript names nodes '/encoder/layer.0/attention/self/query/MatMul', tf2onnx 'model/mha/MatMul'."""
    parts = [p for p in name.split("/")[:-1] if p]
    return ".".join(parts)


class _GraphBuilder:
    def __init__(self, functions: dict[tuple[str, str], onnx.FunctionProto]) -> None:  # type: ignore[name-defined]  # noqa: F821
        self.functions = functions
        self.nodes: list[Node] = []
        self.weights: dict[str, Tensor] = {}
        self.warnings: list[str] = []
        self.known_names: set[str] = set()
        self._inlining: list[tuple[str, str]] = []

    def add_graph(self, graph: onnx.GraphProto, prefix: str, depth: int) -> None:  # type: ignore[name-defined]  # noqa: F821
        if depth > _MAX_SUBGRAPH_DEPTH:
            raise InputError(f"subgraphs nested deeper than {_MAX_SUBGRAPH_DEPTH} levels")
        for init in graph.initializer:
            self.weights[init.name] = tensor_from_proto(init, init.name)
            self.known_names.add(init.name)
        for sp in graph.sparse_initializer:
            name = sp.values.name
            shape = tuple(int(d) for d in sp.dims)
            self.weights[name] = Tensor(name, shape, dtype_name(sp.values.data_type), f"name:{name}")
            self.known_names.add(name)
        for v in graph.input:
            self.known_names.add(v.name)
        for node in graph.node:
            self._add_node(node, prefix, depth)

    def _add_node(self, node: onnx.NodeProto, prefix: str, depth: int) -> None:  # type: ignore[name-defined]  # noqa: F821
        attrs: dict[str, AttrValue] = {}
        subgraphs: list[onnx.GraphProto] = []  # type: ignore[name-defined]  # noqa: F821
        for a in node.attribute:
            if a.HasField("g"):
                subgraphs.append(a.g)
            subgraphs.extend(a.graphs)
            if a.name == "value" and a.HasField("t"):
                continue
            attrs[a.name] = _attr_value(a)
        name = prefix + (node.name or f"{node.op_type}_{len(self.nodes)}")
        scope = scope_from_metadata((p.key, p.value) for p in node.metadata_props) or scope_from_node_name(node.name)
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
            tensor = _constant_tensor(node, node.output[0])
            if tensor is not None:
                self.weights[node.output[0]] = tensor
                self.known_names.add(node.output[0])
                return
        func = self.functions.get((node.domain, node.op_type))
        if func is not None and (node.domain, node.op_type) not in self._inlining:
            self._inline_function(node, func, name, depth)
            return
        self.nodes.append(Node(name=name, op=node.op_type, inputs=tuple(node.input), outputs=tuple(node.output),
                               attrs=attrs, scope=scope, domain=node.domain))
        self.known_names.update(o for o in node.output if o)
        for i, g in enumerate(subgraphs):
            self.add_graph(g, prefix=f"{name}/body{i}/", depth=depth + 1)

    def _inline_function(self, call: onnx.NodeProto, func: onnx.FunctionProto, name: str, depth: int) -> None:  # type: ignore[name-defined]  # noqa: F821
        import onnx

        if depth > _MAX_SUBGRAPH_DEPTH:
            raise InputError(f"functions nested deeper than {_MAX_SUBGRAPH_DEPTH} levels")
        rename: dict[str, str] = {"": ""}
        for formal, actual in zip(func.input, call.input):
            rename[formal] = actual
        for formal, actual in zip(func.output, call.output):
            rename[formal] = actual
        call_attrs = {a.name: a for a in call.attribute}
        local = f"{name}/"

        def mapped(n: str) -> str:
            return rename.get(n, local + n)

        self._inlining.append((func.domain, func.name))
        try:
            for inner in func.node:
                clone = onnx.NodeProto()
                clone.CopyFrom(inner)
                del clone.input[:]
                clone.input.extend(mapped(i) for i in inner.input)
                del clone.output[:]
                clone.output.extend(mapped(o) for o in inner.output)
                clone.name = inner.name or inner.op_type
                resolved = []
                for a in clone.attribute:
                    if a.ref_attr_name:
                        if a.ref_attr_name in call_attrs:
                            ref = onnx.AttributeProto()
                            ref.CopyFrom(call_attrs[a.ref_attr_name])
                            ref.name = a.name
                            resolved.append(ref)
                    else:
                        resolved.append(a)
                del clone.attribute[:]
                clone.attribute.extend(resolved)
                if not clone.metadata_props and call.metadata_props:
                    clone.metadata_props.extend(call.metadata_props)
                self._add_node(clone, local, depth + 1)
        finally:
            self._inlining.pop()

    def check_dangling(self, graph_inputs: set[str]) -> None:
        for node in self.nodes:
            for i in node.inputs:
                if i and i not in self.known_names:
                    raise InputError(f"graph is inconsistent: node '{node.name}' ({node.op}) reads '{i}', "
                                     "which no node, input or initializer provides")


def _constant_tensor(node: onnx.NodeProto, out: str) -> Tensor | None:  # type: ignore[name-defined]  # noqa: F821
    from onnx import AttributeProto

    for a in node.attribute:
        if a.name == "value" and a.type == AttributeProto.TENSOR:
            return tensor_from_proto(a.t, out, is_constant_node=True)
        if a.name == "value_int":
            return Tensor(out, (), "int64", f"const:{out}", int_value=(int(a.i),), is_constant_node=True)
        if a.name == "value_ints":
            vals = tuple(int(x) for x in a.ints)
            return Tensor(out, (len(vals),), "int64", f"const:{out}",
                          int_value=vals if len(vals) <= _MAX_INT_VALUE_ELEMENTS else None, is_constant_node=True)
        if a.name == "value_float":
            return Tensor(out, (), "float32", f"const:{out}", float_value=float(a.f), is_constant_node=True)
        if a.name == "value_floats":
            vals_f = tuple(float(x) for x in a.floats)
            return Tensor(out, (len(vals_f),), "float32", f"const:{out}",
                          float_value=vals_f[0] if len(vals_f) == 1 else None, is_constant_node=True)
    return None
