"""ONNX loader: protobuf -> ModelGraph, reading graph structure and weight metadata only.

Tensor data is never read or copied, except the values of tiny integer/float constants that
drive shape arithmetic and attention scaling, and of small bool/float tensors of rank >= 2 (a mask
an exporter folded to a constant). External data files are never opened.

``read_onnx`` is the one read of a file, local or remote (a ``Blob``); ``load_onnx`` reads a local
path through it. The graph is exactly the one ``model_to_graph(read_model_proto(path))`` returns, but:

- it never imports the ``onnx`` package (numpy, onnx.helper, ... are most of a short run's time):
  the ModelProto message class is built from the descriptor the installed onnx ships
  (``onnx/onnx_ml_pb2.py``) in a private protobuf pool; constant values are decoded with ``struct``;
- it never materialises weight payloads of a large file: a wire-format scanner copies the model
  minus the data fields of every tensor whose value the loader would never read (more than
  ``_MAX_INT_VALUE_ELEMENTS`` elements, save small masks), then protobuf parses that much smaller
  buffer. Pages of the skipped payloads of a mapped file are never touched; those of a remote
  file are never fetched.

Any failure of the fast path (unusual file, corrupt protobuf, missing descriptor) falls back to
onnx's own parser over the same bytes, so errors and results stay those of ``onnx.load``.

Progress: ``read_onnx``, ``load_onnx`` and ``model_to_graph`` accept ``progress(stage, done, total)``,
called with stage "read" (bytes) and "graph" (nodes); ``reporting_progress`` sets a callback for the
calls made inside a ``with`` block (for callers that reach the loader through other code).
The library never prints.
"""

from __future__ import annotations

import contextlib
import math
import os
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import Any

from mhainspect.errors import ErrorKind, InputError, read_error
from mhainspect.frontends.onnx.provenance import apply_provenance, constant_node_kind, folded_away_note, string_list
from mhainspect.frontends.onnx.wire import (
    FAST_PATH_ERRORS,
    MASK_TYPE_CODES,
    MAX_INT_VALUE_ELEMENTS,
    MAX_MASK_ELEMENTS,
    MAX_SUBGRAPH_DEPTH,
    model_proto_class,
    raw_attribute_classes,
    read_bytes,
)
from mhainspect.ir.dtypes import ONNX_CODES, ONNX_FLOAT_CODES, ONNX_INTEGER_CODES, STRUCT_CODES, onnx_name
from mhainspect.ir.graph import NO_ATTRS, Attrs, AttrValue, GraphKind, ModelGraph, Node, Tensor, TensorKind, ValueInfo
from mhainspect.sources.blob import Blob, FileView, LocalBlob, MappedView, local_path

# Values of integer constants up to this many elements are read (shape arithmetic).
_MAX_INT_VALUE_ELEMENTS = MAX_INT_VALUE_ELEMENTS
_MAX_SUBGRAPH_DEPTH = MAX_SUBGRAPH_DEPTH

# Element types whose small constants are read: integers (shape arithmetic), float scalars (scale).
_INT_TYPES = ONNX_INTEGER_CODES
_FLOAT_TYPES = ONNX_FLOAT_CODES

# AttributeProto.AttributeType values
_A_FLOAT, _A_INT, _A_STRING, _A_TENSOR, _A_FLOATS, _A_INTS, _A_STRINGS = 1, 2, 3, 4, 6, 7, 8

ProgressCallback = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: stage "read" counts bytes, "graph" counts nodes."""

_PROGRESS: ContextVar[ProgressCallback | None] = ContextVar("mhainspect_onnx_progress", default=None)
_PROGRESS_EVERY = 2048  # nodes between two "graph" progress calls

# Extensions that onnx.load reads as text/JSON instead of binary protobuf.
_TEXT_SUFFIXES = frozenset({".txtpb", ".textproto", ".prototxt", ".pbtxt", ".json", ".onnxjson",
                            ".onnxtxt", ".onnxtext"})


@contextlib.contextmanager
def reporting_progress(callback: ProgressCallback | None) -> Iterator[None]:
    """Within the block, loader calls without an explicit ``progress`` report to ``callback``."""
    token = _PROGRESS.set(callback)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def load_onnx(path: str | os.PathLike[str], progress: ProgressCallback | None = None) -> ModelGraph:
    """Parse an ONNX file into a ModelGraph (``read_onnx`` of a local file). Raises InputError with a
    one-line reason."""
    graph, view = read_onnx(LocalBlob(Path(path)), str(path), progress)
    view.close()
    return graph


def read_onnx(blob: Blob, name: str | None = None, progress: ProgressCallback | None = None
              ) -> tuple[ModelGraph, FileView]:
    """The one read of an ONNX file, on this machine or remote: its graph (named ``name``, else
    ``blob.name``) and
    the view of the file that its stored values are read through later, if a copy check asks
    (``values.folded_copies``; the caller closes it). Raises InputError with a one-line reason.

    The bytes handed to protobuf are the model minus the weight payloads the loader never reads:
    a file on this machine is mapped and read whole when small, else copied minus those payloads
    (``wire.read_bytes``: their pages are never touched); a remote file is walked by ranges, the
    payloads skipped unfetched (``landings.remote_model_view``). Text forms (.json, .txtpb, ...)
    are parsed by onnx, from a file on this machine.
    """
    source = blob.name if name is None else name
    progress = progress or _PROGRESS.get()
    path = local_path(blob)
    text = os.path.splitext(source)[1] in _TEXT_SUFFIXES
    if path is None:
        if text:
            raise InputError(f"{source}: an ONNX model in text form is read on local disk only")
        from mhainspect.frontends.onnx.landings import remote_model_view  # a remote walk: only for a remote file

        size = blob.size()
        if progress:
            progress("read", 0, size)
        data, view = remote_model_view(blob)
        if progress:
            progress("read", size, size)
        return _load(data, source, progress), view
    check_readable_file(path, source)
    size = path.stat().st_size
    if progress:
        progress("read", 0, size)
    if text:
        data = _whole(path, source)
    else:
        try:
            data = read_bytes(path, size, progress)
        except FAST_PATH_ERRORS:  # a corrupt file the scan cannot walk: protobuf says what is wrong
            data = _whole(path, source)
    if progress:
        progress("read", size, size)
    graph = _model_to_graph(_proto_from_bytes(data, source, _text_format(source)), source, progress, True) \
        if text else _load(data, source, progress)
    return graph, MappedView(path, source)


def _whole(path: Path, source: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise read_error(source, exc) from None


def _text_format(source: str) -> str:
    """The serialization onnx.load reads a file of this name in (by its suffix)."""
    from onnx import serialization

    return serialization.registry.get_format_from_file_extension(os.path.splitext(source)[1]) or "protobuf"


def _load(data: bytes, source: str, progress: ProgressCallback | None) -> ModelGraph:
    """The graph of the serialized model ``data`` (weight payloads left out), named ``source``."""
    graph = _load_without_onnx(data, source, progress)
    if graph is not None:
        return graph
    model, name_scopes = _read_model_metadata(data, source, progress)
    try:
        return _model_to_graph(model, source, progress, name_scopes)
    except (TypeError, AttributeError):
        # onnx.proto is proto2: a string field with non-UTF-8 bytes parses, and comes back as bytes.
        if _has_byte_strings(model):
            raise InputError(f"{source}: not a valid ONNX model (a name or string field is not UTF-8)") from None
        raise


def _has_byte_strings(model: Any) -> bool:
    graph = model.graph
    fields: list[Any] = [model.producer_name, model.producer_version, model.domain, graph.name]
    for node in graph.node:
        fields.extend((node.name, node.op_type, node.domain, *node.input, *node.output))
    fields.extend(t.name for t in graph.initializer)
    fields.extend(v.name for v in (*graph.input, *graph.output, *graph.value_info))
    return any(isinstance(f, bytes) for f in fields)


def read_model_proto(path: str | os.PathLike[str]) -> onnx.ModelProto:  # type: ignore[name-defined]  # noqa: F821
    """The full ModelProto (inline weights included; external data not loaded), as onnx.load reads it."""
    p = Path(path)
    check_readable_file(p, str(p))
    return _proto_from_bytes(_whole(p, str(p)), str(p), _text_format(str(p)))


def _check_has_graph(model: Any, p: str | Path) -> None:
    if not model.HasField("graph") or (len(model.graph.node) == 0 and len(model.graph.initializer) == 0
                                        and len(model.graph.input) == 0):
        raise InputError(f"{p}: not an ONNX model (no graph in the file)")


def check_readable_file(p: Path, name: str) -> None:
    """InputError naming the file ``name`` unless ``p`` is a non-empty file that can be opened."""
    try:
        if not p.exists():
            raise InputError(f"{name}: no such file", ErrorKind.NOT_FOUND)
        if p.is_dir():
            raise InputError(f"{name}: is a directory, expected a model file")
        if p.stat().st_size == 0:
            raise InputError(f"{name}: file is empty")
        with open(p, "rb"):
            pass
    except PermissionError:
        raise InputError(f"{name}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{name}: cannot open: {exc.strerror or exc}") from None


# ----------------------------------------------------------------------------------------------
# Fast metadata read: no `import onnx`, weight payloads skipped
# ----------------------------------------------------------------------------------------------

class _Unsupported(Exception):
    """Something _load_without_onnx leaves to the general path."""


# What sends a file from _load_without_onnx to the general path (which then gives the result or error).
_NOT_FAST: tuple[type[BaseException], ...] = (InputError, _Unsupported, *FAST_PATH_ERRORS)


def _load_without_onnx(data: bytes, source: str, progress: ProgressCallback | None) -> ModelGraph | None:
    """_load with NodeProto attributes parsed from their bytes, once per distinct attribute;
    None on anything else than a plain success, and _load then starts over on the general path
    (which gives every error, and the result of every unusual file, as before).

    Exactness: every attribute's bytes are parsed (its first occurrence) by the same AttributeProto
    parser the general path's ModelProto parse would use, so the bytes that parse here parse there.
    Subgraphs ('g', 'graphs'), types ('tp', 'type_protos') and model functions are left to the
    general path: those nest without bound, and upb's depth limit counts from the model.
    """
    try:
        model_proto_class()  # what decides whether the fast path is on at all
        model_cls, attr_cls = raw_attribute_classes()
        model, name_scopes = _parse(data, model_cls)
        _check_has_graph(model, source)
        if model.functions:
            return None
        return _model_to_graph(model, source, progress, name_scopes, attr_cls)
    except _NOT_FAST:
        return None


def _read_model_metadata(data: bytes, source: str, progress: ProgressCallback | None) -> tuple[Any, bool]:
    """A ModelProto with everything model_to_graph reads, and whether any node may carry a torch
    name-scope entry in its metadata_props (False only when the key is nowhere in the bytes parsed:
    then the builder never touches metadata_props). A file the fast parse refuses is parsed by onnx,
    which gives the error."""
    try:
        model, name_scopes = _parse(data, model_proto_class())
    except FAST_PATH_ERRORS:  # corrupt or unusual file: onnx decides, with its own error
        return _proto_from_bytes(data, source), True
    _check_has_graph(model, source)
    return model, name_scopes


def _proto_from_bytes(data: bytes, source: str, fmt: str = "protobuf") -> Any:
    """The ModelProto onnx reads from ``data`` (serialized as ``fmt``), with its errors as one line."""
    import onnx
    from google.protobuf import json_format, text_format
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load_model_from_string(data, format=fmt)
    except DecodeError as exc:
        raise InputError(f"{source}: not a valid ONNX model (protobuf decode failed: {exc})") from None
    except (json_format.ParseError, text_format.ParseError) as exc:  # the .json / .txtpb forms onnx reads
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{source}: not a valid ONNX model in text form ({first_line})") from None
    except (OSError, ValueError, RuntimeError) as exc:
        raise InputError(f"{source}: cannot read ONNX model: {exc}") from None
    _check_has_graph(model, source)
    return model


def _parse(data: bytes, model_cls: Any) -> tuple[Any, bool]:
    """``data`` parsed as ``model_cls``, and whether any node may carry a torch name-scope entry
    (False only when the key is nowhere in the bytes parsed)."""
    model = model_cls()
    model.ParseFromString(data)
    # The search (~4 GB/s) only pays where nodes are dense in the file (~0.5 us saved per node).
    name_scopes = len(data) > len(model.graph.node) << 10 or _NAME_SCOPES_KEY_BYTES in data
    return model, name_scopes


# ----------------------------------------------------------------------------------------------
# ModelProto -> ModelGraph
# ----------------------------------------------------------------------------------------------


def model_to_graph(model: onnx.ModelProto, source: str,  # type: ignore[name-defined]  # noqa: F821
                   progress: ProgressCallback | None = None) -> ModelGraph:
    return _model_to_graph(model, source, progress, True)


def _model_to_graph(model: Any, source: str, progress: ProgressCallback | None, name_scopes: bool,
                    attr_cls: Any = None) -> ModelGraph:
    opset = None
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            opset = int(imp.version)
    functions = {(f.domain, f.name): f for f in model.functions}
    graph = model.graph
    builder = _GraphBuilder(functions, progress or _PROGRESS.get(), len(graph.node), name_scopes, attr_cls,
                            constant_node_kind(model.producer_name))
    builder.add_graph(graph, prefix="", depth=0)
    builder.report_progress(final=True)
    read_value_info = _ValueInfoReader()
    inputs = tuple(read_value_info(v) for v in graph.input if v.name not in builder.weights)
    outputs = tuple(read_value_info(v) for v in graph.output)
    value_info: dict[str, ValueInfo] = {}
    value_metadata: list[tuple[str, dict[str, str]]] = []  # for apply_provenance; one pass over value_info
    for v in graph.value_info:
        value_info[v.name] = read_value_info(v)
        if v.metadata_props:
            value_metadata.append((v.name, {p.key: p.value for p in v.metadata_props}))
    builder.check_dangling()
    producer = " ".join(x for x in (model.producer_name, model.producer_version) if x)
    signature = next((p.value for p in graph.metadata_props if p.key.endswith("ExportedProgram.graph_signature")), "")
    # No producer name: the builder gave every Constant-node tensor its kind as it made it.
    weights = apply_provenance(builder.weights, value_metadata, signature)
    folded_away = folded_away_note(weights)
    if folded_away is not None:
        builder.warnings.append(folded_away)
    return ModelGraph(
        source=source,
        kind=GraphKind.ONNX,
        nodes=tuple(builder.nodes),
        weights=weights,
        inputs=inputs,
        outputs=outputs,
        value_info=value_info,
        opset=opset,
        producer=producer,
        warnings=tuple(builder.warnings),
    )


class _ValueInfoReader:
    """_value_info(v), decoded once per distinct type: exporters declare thousands of values with a
    few dozen types."""

    def __init__(self) -> None:
        self._types: dict[bytes, tuple[tuple[int | str | None, ...] | None, str]] = {}

    def __call__(self, v: Any) -> ValueInfo:
        key = v.type.SerializeToString()  # _value_info reads v.type and v.name only
        hit = self._types.get(key)
        if hit is None:
            info = _value_info(v)
            self._types[key] = (info.shape, info.dtype)
            return info
        return ValueInfo(v.name, hit[0], hit[1])


def _value_info(v: onnx.ValueInfoProto) -> ValueInfo:  # type: ignore[name-defined]  # noqa: F821
    t = v.type
    if not t.HasField("tensor_type"):
        return ValueInfo(v.name, None, "unknown")
    tt = t.tensor_type
    if not tt.HasField("shape"):
        return ValueInfo(v.name, None, onnx_name(tt.elem_type))
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return ValueInfo(v.name, tuple(dims), onnx_name(tt.elem_type))


def _external_key(t: onnx.TensorProto) -> tuple[str, str, int | None]:  # type: ignore[name-defined]  # noqa: F821
    """(storage key, location, stated length) of external data: identity is (file, offset), so shared
    data counts once; the length is the 'length' entry when it is a plain number."""
    location, offset, length = "", "0", ""
    for e in t.external_data:  # a later entry of a key wins, as in a dict built from them
        key = e.key
        if key == "location":
            location = e.value
        elif key == "offset":
            offset = e.value
        elif key == "length":
            length = e.value
    return f"external:{location}:{offset}:{length}", location, int(length) if length.isdigit() else None


# Decoding of small constants, as onnx.numpy_helper.to_array does it (little-endian raw_data, or
# the typed field with numpy's wrap-around casts), without importing numpy.
# struct formats of raw_data by ONNX type code (ir.dtypes.STRUCT_CODES); a bool is read as its byte, a
# bfloat16 as its 16 bits (widened to float32 where read).
_RAW_FORMATS = {code: STRUCT_CODES[name] for code, name in ONNX_CODES.items() if name in STRUCT_CODES} | {9: "B", 16: "H"}
_TYPED_FIELDS = {1: "float_data", 11: "double_data", 10: "int32_data", 16: "int32_data", 6: "int32_data", 9: "int32_data",
                 7: "int64_data", 2: "int32_data", 3: "int32_data", 4: "int32_data", 5: "int32_data",
                 12: "uint64_data", 13: "uint64_data"}
_WRAP_BITS = {2: (8, False), 3: (8, True), 4: (16, False), 5: (16, True), 12: (32, False)}


def _reshapes(count: int, dims: Iterable[int]) -> bool:
    """Whether numpy would reshape ``count`` elements to ``dims`` (one -1 allowed)."""
    known = 1
    unknown = 0
    for d in dims:
        if d == -1:
            unknown += 1
        elif d < 0:
            return False
        else:
            known *= d
    if unknown == 0:
        return known == count
    return unknown == 1 and known != 0 and count % known == 0


def _tensor_values(t: Any) -> list[int] | list[float] | None:
    """Flat values of an int/float tensor, or None where numpy_helper.to_array would raise."""
    dt = t.data_type
    fmt = _RAW_FORMATS.get(dt)
    if fmt is None or t.HasField("segment"):
        return None
    if t.HasField("raw_data"):
        raw = t.raw_data
        size = struct.calcsize(fmt)
        if len(raw) % size:
            return None
        count = len(raw) // size
        if not _reshapes(count, t.dims):
            return None
        values: list[Any] = list(struct.unpack(f"<{count}{fmt}", raw))
        if dt == 16:  # bfloat16: the high half of a float32
            values = [struct.unpack("<f", struct.pack("<I", v << 16))[0] for v in values]
        return values
    data = list(getattr(t, _TYPED_FIELDS[dt]))
    if not _reshapes(len(data), t.dims):
        return None
    if dt == 10:
        return [struct.unpack("<e", struct.pack("<H", v & 0xFFFF))[0] for v in data]
    if dt == 16:
        return [struct.unpack("<f", struct.pack("<I", (v & 0xFFFF) << 16))[0] for v in data]
    if dt == 1:
        return [struct.unpack("<f", struct.pack("<f", v))[0] for v in data]
    wrap = _WRAP_BITS.get(dt)
    if wrap is not None:
        bits, signed = wrap
        mask, half = (1 << bits) - 1, 1 << (bits - 1)
        data = [(v & mask) - ((1 << bits) if signed and v & mask >= half else 0) for v in data]
    return data


# Decoded values of small raw_data constants: exporters repeat the same few ([0], [1], head_dim, ...).
_VALUE_CACHE: dict[tuple[Any, ...], tuple[tuple[int, ...] | None, float | None]] = {}


def _small_values(t: Any, dt: int) -> tuple[tuple[int, ...] | None, float | None]:
    """(int_value, float_value) candidates of a small int/float tensor; None where unreadable."""
    key: tuple[Any, ...] | None = None
    if not t.HasField("segment"):
        if t.HasField("raw_data"):
            raw = t.raw_data
            if len(raw) <= 1024:
                key = (dt, tuple(t.dims), raw)
        else:
            typed = getattr(t, _TYPED_FIELDS[dt])
            if len(typed) <= 128:
                key = (dt, tuple(t.dims), None, tuple(typed))
        if key is not None:
            hit = _VALUE_CACHE.get(key)
            if hit is not None:
                return hit
    try:
        values = _tensor_values(t)
    except Exception:  # malformed constant: its value just stays unknown
        values = None
    if values is None:
        result: tuple[tuple[int, ...] | None, float | None] = (None, None)
    elif dt in _INT_TYPES:
        result = (tuple(int(x) for x in values), None)
    else:
        result = (None, float(values[0]) if values else None)
    if key is not None and len(_VALUE_CACHE) < 4096:
        _VALUE_CACHE[key] = result
    return result


def tensor_from_proto(t: onnx.TensorProto, name: str, is_constant_node: bool = False) -> Tensor:  # type: ignore[name-defined]  # noqa: F821
    shape = tuple(t.dims[:])  # a list slice, then a tuple: cheaper than iterating the container
    dt = t.data_type
    external = t.data_location == 1
    int_value = float_value = mask_values = location = external_length = None
    if not external:  # values are read from inline data only
        numel = 1
        for d in shape:
            numel *= max(d, 0)
        if dt in _INT_TYPES:
            if numel <= _MAX_INT_VALUE_ELEMENTS:
                int_value = _small_values(t, dt)[0]
        elif dt in _FLOAT_TYPES and numel == 1:
            float_value = _small_values(t, dt)[1]
        if dt in MASK_TYPE_CODES and len(shape) >= 2 and 1 < numel <= MAX_MASK_ELEMENTS:
            mask_values = _mask_values(t)
    if is_constant_node:
        storage_key = f"const:{name}"
    elif external:
        storage_key, location, external_length = _external_key(t)
    else:
        storage_key = f"name:{name}"  # name: the tensor's name in its scope (a subgraph's own are prefixed)
    return Tensor(name, shape, onnx_name(dt), storage_key, int_value, float_value, is_constant_node,
                  location=location, external_length=external_length, mask_values=mask_values)


def _mask_values(t: Any) -> tuple[float, ...] | None:
    try:
        values = _tensor_values(t)
    except Exception:  # malformed constant: its value just stays unknown
        return None
    return tuple(float(v) for v in values) if values else None


def _attr_value(a: onnx.AttributeProto) -> AttrValue:  # type: ignore[name-defined]  # noqa: F821
    at = a.type
    if at == _A_INT:
        return int(a.i)
    if at == _A_FLOAT:
        return float(a.f)
    if at == _A_STRING:
        return str(a.s.decode("utf-8", errors="replace"))
    if at == _A_INTS:
        return tuple(int(x) for x in a.ints)
    if at == _A_FLOATS:
        return tuple(float(x) for x in a.floats)
    if at == _A_STRINGS:
        return tuple(s.decode("utf-8", errors="replace") for s in a.strings)
    if a.name == "value" and a.HasField("t") and len(a.t.dims) <= 1 and math.prod(a.t.dims) == 1:
        # ConstantOfShape's fill value: a one-element tensor, needed to fold shape arithmetic.
        try:
            ints, flt = _small_values(a.t, a.t.data_type)
        except (KeyError, ValueError):  # an exotic dtype: the fill value stays unknown
            return None
        if ints is not None and len(ints) == 1:
            return ints[0]
        return flt
    return None


_NAME_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
_NAME_SCOPES_KEY_BYTES = _NAME_SCOPES_KEY.encode()


def scope_from_metadata(props: Iterable[tuple[str, str]]) -> str | None:
    """The module path the torch dynamo exporter records in node metadata, if any."""
    for key, value in props:
        if key == _NAME_SCOPES_KEY:
            scopes = string_list(value)
            if scopes:
                # Cumulative module paths ('', 'm', 'm.layer.0', ...) end with the op's own name.
                path = ""
                for entry in scopes:
                    if entry and (not path or entry.startswith(path + ".")):
                        path = entry
                return path or None
    return None


def scope_from_node_name(name: str) -> str:
    """TorchScript names nodes '/encoder/layer.0/attention/self/query/MatMul', tf2onnx 'model/mha/MatMul'."""
    parts = [p for p in name.split("/")[:-1] if p]
    return ".".join(parts)


_CONSTANT_CACHE_MAX_BYTES = 4096  # larger Constant values are decoded each time, never kept
_INPUTS = attrgetter("inputs")
_NO_SUBGRAPHS: tuple[Any, ...] = ()
_OUTPUTS = attrgetter("outputs")


class _GraphBuilder:
    def __init__(self, functions: dict[tuple[str, str], onnx.FunctionProto],  # type: ignore[name-defined]  # noqa: F821
                 progress: ProgressCallback | None = None, total_nodes: int = 0, name_scopes: bool = True,
                 attr_cls: Any = None, constant_kind: TensorKind | None = None) -> None:
        self.functions = functions
        # Tensor.kind of every Constant-node tensor (provenance.constant_node_kind): given as each is
        # made, where apply_provenance would copy thousands of them through __init__ (~30 ms on 70B).
        self._constant_kind = constant_kind
        self.nodes: list[Node] = []
        self.weights: dict[str, Tensor] = {}
        self.warnings: list[str] = []
        # Initializers and inputs; check_dangling adds the weights and the outputs of self.nodes.
        self.known_names: set[str] = set()
        self._inlining: list[tuple[str, str]] = []
        self._progress = progress
        self._total = total_nodes
        self._seen = 0
        # False when no node can carry a name-scope entry: metadata_props is then never read.
        self._name_scopes = name_scopes
        self._scopes: dict[str, str] = {}  # node-name directory ('/model/layers.0/mlp') -> scope
        # Serialized 'value' attribute of a Constant -> the Tensor it made first (another name), or
        # None where it makes no constant; exporters repeat a few ([1], [-1], 0.5, ...) per layer.
        self._constants: dict[bytes, Tensor | None] = {}
        # Set by _load_without_onnx: NodeProto.attribute then holds bytes, parsed with this class.
        self._attr_cls = attr_cls
        self._attrs: dict[bytes, tuple[str, AttrValue]] = {}  # attribute bytes -> (name, value)
        # Names local to the subgraphs being read -> their scoped names ("{parent}/body{i}/{name}"):
        # sibling branches of an If may reuse a name, and each must stay its own tensor. Outer names
        # (the weights both branches read) are not in the map and keep their identity. Empty at top level.
        self._rename: dict[str, str] = {}

    def report_progress(self, final: bool = False) -> None:
        if self._progress is not None:
            total = max(self._total, self._seen)
            self._progress("graph", total if final else self._seen, total)

    def add_graph(self, graph: onnx.GraphProto, prefix: str, depth: int) -> None:  # type: ignore[name-defined]  # noqa: F821
        if depth > _MAX_SUBGRAPH_DEPTH:
            raise InputError(f"subgraphs nested deeper than {_MAX_SUBGRAPH_DEPTH} levels")
        outer = self._rename
        if depth > 0:
            local = chain((i.name for i in graph.initializer), (sp.values.name for sp in graph.sparse_initializer),
                          (v.name for v in graph.input), chain.from_iterable(n.output for n in graph.node))
            self._rename = {**outer, **{n: prefix + n for n in local if n}}
        try:
            self._add_graph(graph, prefix, depth)
        finally:
            self._rename = outer

    def _add_graph(self, graph: onnx.GraphProto, prefix: str, depth: int) -> None:  # type: ignore[name-defined]  # noqa: F821
        weights, known = self.weights, self.known_names
        rename = self._rename
        # Weight names need not go into known_names: check_dangling adds every weight's.
        for init in graph.initializer:
            name = init.name
            if rename:
                name = rename.get(name, name)
            weights[name] = tensor_from_proto(init, name)
        for sp in graph.sparse_initializer:
            values = sp.values
            name = rename.get(values.name, values.name)
            shape = tuple(int(d) for d in sp.dims)
            weights[name] = Tensor(name, shape, onnx_name(values.data_type), f"name:{name}")
        for v in graph.input:
            known.add(rename.get(v.name, v.name))
        nodes = graph.node
        if depth == 0 and not prefix and self._progress is not None:
            for start in range(0, len(nodes), _PROGRESS_EVERY):
                chunk = nodes[start:start + _PROGRESS_EVERY]
                self._add_nodes(chunk, prefix, depth)
                self._seen += len(chunk)
                if self._seen % _PROGRESS_EVERY == 0:
                    self.report_progress()
        else:
            self._add_nodes(nodes, prefix, depth)

    def _add_nodes(self, nodes: Iterable[Any], prefix: str, depth: int) -> None:
        """Each NodeProto: a Constant that makes a tensor becomes a weight, any other a Node."""
        rename = self._rename
        for node in nodes:
            # Each field read of a upb message builds a new object: every field is read once.
            op_type, domain, outputs = node.op_type, node.domain, node.output
            if rename:
                outputs = tuple([rename.get(o, o) for o in outputs])
            if op_type == "Constant" and len(outputs) == 1 and domain in ("", "ai.onnx"):
                out = outputs[0]
                tensor = self._constant(node.attribute, out)
                if tensor is not None:
                    self.weights[out] = tensor  # check_dangling adds every weight name to known_names
                    continue
            self._add_node(node, op_type, domain, outputs, prefix, depth)

    def _constant(self, attributes: Any, out: str) -> Tensor | None:
        """The tensor a Constant node with these attributes makes (named ``out``), or None.

        Exporters repeat a few values ([1], [-1], 0.5, ...) per layer: a single attribute's bytes
        key the tensor it made first, which only its name and storage key tell apart."""
        raw = self._attr_cls is not None
        key = None
        if len(attributes) == 1:
            key = attributes[0] if raw else attributes[0].SerializeToString()
            if key in self._constants:
                template = self._constants[key]
                return None if template is None else _same_constant(template, out)
        tensor = _constant_tensor([self._parse_attribute(b) for b in attributes] if raw else attributes, out)
        if tensor is not None and self._constant_kind is not None:
            tensor = tensor._replace(kind=self._constant_kind)
        if key is not None and len(key) <= _CONSTANT_CACHE_MAX_BYTES:
            self._constants[key] = tensor
        return tensor

    def _add_node(self, node: Any, op_type: str, domain: str, outputs: Sequence[str], prefix: str,
                  depth: int) -> None:
        node_name = node.name
        attrs, subgraphs = self._attributes(node.attribute)
        name = prefix + (node_name or f"{op_type}_{len(self.nodes)}")
        scope = self._scope(node_name, node.metadata_props if self._name_scopes else ())
        if self.functions:
            func = self.functions.get((domain, op_type))
            if func is not None and (domain, op_type) not in self._inlining:
                self._inline_function(node, func, name, depth)
                return
        inputs = node.input
        if self._rename:
            inputs = [self._rename.get(i, i) for i in inputs]
        self.nodes.append(Node(name, op_type, tuple(inputs), tuple(outputs), attrs, scope, domain))
        for i, g in enumerate(subgraphs):
            self.add_graph(g, prefix=f"{name}/body{i}/", depth=depth + 1)

    def _attributes(self, attributes: Any) -> tuple[Attrs, Sequence[Any]]:
        """A node's attribute values by name, and the subgraphs its attributes hold (in order)."""
        if not attributes:  # most nodes (three in four on a Llama export): nothing to build
            return NO_ATTRS, _NO_SUBGRAPHS
        attrs: dict[str, AttrValue] = {}
        subgraphs: list[Any] = []
        if self._attr_cls is not None:  # serialized attributes: each distinct one parsed once
            cache = self._attrs
            for a in attributes:
                hit = cache.get(a)
                if hit is None:
                    parsed = self._parse_attribute(a)
                    hit = cache[a] = (parsed.name, _attr_value(parsed))
                attrs[hit[0]] = hit[1]
            return Attrs(attrs), subgraphs
        for a in attributes:
            if a.HasField("g"):
                subgraphs.append(a.g)
            if a.graphs:
                subgraphs.extend(a.graphs)
            attrs[a.name] = _attr_value(a)
        return Attrs(attrs), subgraphs

    def _scope(self, node_name: str, metadata: Iterable[Any]) -> str:
        """The module path of a node: the exporter's name-scope metadata, else its name's directory."""
        if metadata:
            scope = scope_from_metadata((p.key, p.value) for p in metadata)
            if scope:
                return scope
        directory, slash, _ = node_name.rpartition("/")
        if not slash:
            return ""
        # scope_from_node_name reads only what precedes the last '/': shared by a layer's nodes.
        scope = self._scopes.get(directory)
        if scope is None:
            scope = self._scopes[directory] = scope_from_node_name(node_name)
        return scope

    def _parse_attribute(self, raw: bytes) -> Any:
        """The AttributeProto in raw (bytes of a raw-attribute NodeProto); _Unsupported for the
        fields _load_without_onnx leaves to the general path."""
        a = self._attr_cls.FromString(raw)
        if a.HasField("g") or a.graphs or a.HasField("tp") or a.type_protos:
            raise _Unsupported(a.name)
        return a

    def _inline_function(self, call: Any, func: onnx.FunctionProto, name: str, depth: int) -> None:  # type: ignore[name-defined]  # noqa: F821
        if depth > _MAX_SUBGRAPH_DEPTH:
            raise InputError(f"functions nested deeper than {_MAX_SUBGRAPH_DEPTH} levels")
        rename: dict[str, str] = {"": ""}
        for formal, actual in zip(func.input, call.input):
            rename[formal] = actual
        for formal, actual in zip(func.output, call.output):
            rename[formal] = actual
        call_attrs = {a.name: a for a in call.attribute}  # AttributeProtos: functions take the general path
        call_metadata = call.metadata_props
        local = f"{name}/"
        self._inlining.append((func.domain, func.name))
        try:
            for inner in func.node:
                clone = _function_node(inner, lambda n: rename.get(n, local + n), call_attrs)
                if not clone.metadata_props:  # the call's name scope, where the body has none
                    clone.metadata_props.extend(call_metadata)
                self._add_nodes((clone,), local, depth + 1)
        finally:
            self._inlining.pop()

    def check_dangling(self) -> None:
        """InputError naming the first node input that no node, graph input or initializer provides."""
        known = self.known_names
        nodes = self.nodes
        known.update(self.weights)
        known.update(chain.from_iterable(map(_OUTPUTS, nodes)))
        known.add("")  # an empty input is an absent optional one: never looked up
        if known.issuperset(chain.from_iterable(map(_INPUTS, nodes))):  # the usual case, all in C
            return
        for node in nodes:
            for i in node.inputs:
                if i and i not in known:
                    raise InputError(f"graph is inconsistent: node '{node.name}' ({node.op}) reads '{i}', "
                                     "which no node, input or initializer provides")


def _function_node(inner: Any, mapped: Callable[[str], str], call_attrs: dict[str, Any]) -> Any:
    """A copy of a function body's NodeProto with its value names mapped into the caller and its
    attribute references resolved from the call's attributes (an unresolved one is dropped)."""
    clone = type(inner)()  # same message class as the model (onnx's or the private pool's)
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
                ref = type(a)()
                ref.CopyFrom(call_attrs[a.ref_attr_name])
                ref.name = a.name
                resolved.append(ref)
        else:
            resolved.append(a)
    del clone.attribute[:]
    clone.attribute.extend(resolved)
    return clone


def _same_constant(template: Tensor, out: str) -> Tensor:
    """The Constant-node tensor ``template`` as the output ``out`` of another Constant node with the
    same value: a Constant's tensor has no origin and no external data (dataclasses.replace would
    do the same at about three times the cost, on thousands of constants)."""
    return Tensor(out, template.shape, template.dtype, f"const:{out}", template.int_value, template.float_value,
                  is_constant_node=True, kind=template.kind, mask_values=template.mask_values)


def _constant_tensor(attributes: Iterable[Any], out: str) -> Tensor | None:
    """The tensor a Constant node with these attributes makes, or None."""
    for a in attributes:
        if a.name == "value" and a.type == _A_TENSOR:
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
