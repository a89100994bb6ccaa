"""ONNX protobuf without the onnx package: the message classes from the installed descriptor, and a
wire-format scanner that drops the weight payloads the loader never reads.

- ``model_proto_class``: onnx.ModelProto if onnx is imported already, else the same message built
  from the serialized FileDescriptorProto in the installed ``onnx/onnx_ml_pb2.py`` in a private
  pool (importing onnx costs ~300 ms a process on the 70B benchmark row; this ~nothing).
- ``raw_attribute_classes``: a private schema where ``NodeProto.attribute`` is ``repeated bytes``,
  so each distinct attribute is parsed once (~6-14 ms on the 70B row).
- ``read_bytes`` / ``stripped``: a file from ``SCAN_MIN_FILE_BYTES`` on is memory-mapped and copied
  minus the data fields of every tensor with more than ``MAX_INT_VALUE_ELEMENTS`` elements, save
  possible masks (bool/float, rank >= 2, at most ``MAX_MASK_ELEMENTS``) (inline
  weights: the pages of the payloads are never touched).

Field numbers are named below (``onnx/onnx.proto``, ``google/protobuf/descriptor.proto``); a test
checks every one against the installed descriptors. Errors here are the narrow ``FAST_PATH_ERRORS``:
the loader then starts over on ``onnx.load``, which gives the real error or result.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import mmap
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from google.protobuf import message
from google.protobuf.internal import api_implementation
from google.protobuf.message import DecodeError

if TYPE_CHECKING:
    from mhainspect.frontends.onnx.landings import Landings
    from mhainspect.sources.blob import SparseView

ProgressCallback = Callable[[str, int, int], None]

# Values of integer constants up to this many elements are read (shape arithmetic): their data is kept.
MAX_INT_VALUE_ELEMENTS = 64
# Values of bool/float tensors of rank >= 2 up to this many elements are read: an attention mask
# an exporter folded to a constant (a 32 x 32 causal or sliding-window mask), read to tell causal
# from bidirectional. Their data is kept.
MAX_MASK_ELEMENTS = 1024
MASK_TYPE_CODES = frozenset((1, 9, 10, 11, 16))  # float32, bool, float16, float64, bfloat16
TENSOR_DATA_TYPE = 2
MAX_SUBGRAPH_DEPTH = 32
# Files from this size on are memory-mapped and scanned so that weight payloads are skipped;
# smaller ones are read whole (their payloads cost less than the scan).
SCAN_MIN_FILE_BYTES = 16 << 20
# Submessages up to this size are copied as they are: they cannot hold a payload worth skipping.
SCAN_MIN_MESSAGE_BYTES = 4096
_ADVANCE_EVERY = 4 << 20  # bytes of scanned file between two advance() calls (page cache folios are up to 2 MiB)

# Wire types (protobuf encoding).
WIRE_VARINT, WIRE_FIXED64, WIRE_LEN, WIRE_FIXED32 = 0, 1, 2, 5

# onnx.proto field numbers.
MODEL_GRAPH, MODEL_TRAINING_INFO, MODEL_FUNCTIONS = 7, 20, 25
GRAPH_NODE, GRAPH_INITIALIZER, GRAPH_SPARSE_INITIALIZER = 1, 5, 15
NODE_ATTRIBUTE = 5
ATTR_T, ATTR_G, ATTR_TENSORS, ATTR_GRAPHS, ATTR_SPARSE_TENSOR, ATTR_SPARSE_TENSORS = 5, 6, 10, 11, 22, 23
FUNCTION_NODE, FUNCTION_ATTRIBUTE_PROTO = 7, 11
TRAINING_INITIALIZATION, TRAINING_ALGORITHM = 1, 2
SPARSE_VALUES, SPARSE_INDICES = 1, 2
TENSOR_DIMS, TENSOR_NAME = 1, 8
TENSOR_DATA_FIELDS = {"float_data": 4, "int32_data": 5, "string_data": 6, "int64_data": 7, "raw_data": 9,
                      "double_data": 10, "uint64_data": 11}

# google/protobuf/descriptor.proto field numbers.
FILE_MESSAGE_TYPE = 4
MESSAGE_NAME, MESSAGE_FIELD = 1, 2
FIELD_NAME, FIELD_TYPE, FIELD_TYPE_NAME = 1, 5, 6
TYPE_BYTES = 12  # FieldDescriptorProto.Type.TYPE_BYTES


# What the fast path may raise on an unusual or corrupt file (then onnx.load decides).
FAST_PATH_ERRORS: tuple[type[BaseException], ...] = (
    DecodeError, struct.error, ValueError, LookupError, TypeError, AttributeError, ImportError, OSError, RuntimeError,
    ArithmeticError, BufferError, EOFError, StopIteration, SyntaxError)


_MODEL_CLASS: Any = None


def model_proto_class() -> Any:
    """onnx.ModelProto if onnx is imported already, else the same message from a private pool.

    The descriptor is the serialized FileDescriptorProto in the installed ``onnx/onnx_ml_pb2.py``,
    read as a literal, so the class always matches the installed onnx; importing ``onnx`` itself
    (numpy, helper, checker, ...) is what this avoids.
    """
    global _MODEL_CLASS
    onnx_mod = sys.modules.get("onnx")
    if onnx_mod is not None and hasattr(onnx_mod, "ModelProto"):
        return onnx_mod.ModelProto
    if _MODEL_CLASS is None:
        _MODEL_CLASS = _message_class(_onnx_file_descriptor(), "onnx.ModelProto")
    return _MODEL_CLASS


_FILE_DESCRIPTOR: bytes | None = None


def _onnx_file_descriptor() -> bytes:
    """The serialized FileDescriptorProto of onnx.proto in the installed ``onnx/onnx_ml_pb2.py``."""
    global _FILE_DESCRIPTOR
    if _FILE_DESCRIPTOR is None:
        spec = importlib.util.find_spec("onnx")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("onnx is not installed")
        source = Path(next(iter(spec.submodule_search_locations)), "onnx_ml_pb2.py").read_text("utf-8")
        line = next(ln for ln in source.splitlines() if "AddSerializedFile(" in ln)
        blobs = [n.value for n in ast.walk(ast.parse(line.strip()))
                 if isinstance(n, ast.Constant) and isinstance(n.value, bytes)]
        _FILE_DESCRIPTOR = blobs[0]
    return _FILE_DESCRIPTOR


_RAW_CLASSES: tuple[Any, Any] | None = None

# Where the private schema holds a field as its serialized bytes: (message, field) in onnx.proto.
RAW_ATTRIBUTES = (("NodeProto", "attribute"),)


def raw_attribute_classes() -> tuple[Any, Any]:
    """(ModelProto, AttributeProto) of a private schema where NodeProto.attribute is ``repeated bytes``.

    Upb then hands each attribute over as its serialized bytes: a Constant's value is its own
    cache key (no wrapper object, no SerializeToString) and a repeated attribute (axes=[0], ...)
    is parsed once.
    """
    global _RAW_CLASSES
    if _RAW_CLASSES is None:
        raw = _bytes_fields_descriptor(_onnx_file_descriptor(), RAW_ATTRIBUTES)
        if raw is None:
            raise ValueError("unexpected onnx.proto descriptor")
        _RAW_CLASSES = (_message_class(raw, "onnx.ModelProto"), _message_class(raw, "onnx.AttributeProto"))
    return _RAW_CLASSES


def _fields(buf: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, start, end) of each field of a message; end is past the value."""
    view = memoryview(buf)
    pos = 0
    while pos < len(buf):
        start = pos
        key, pos = read_varint(view, pos)
        wire = key & 7
        if wire == WIRE_LEN:
            length, pos = read_varint(view, pos)
            pos += length
        else:
            pos = _skip_scalar(view, pos, wire)
        yield key >> 3, wire, start, pos


def _length_delimited(field: int, body: bytes) -> bytes:
    return _encode_varint(field << 3 | WIRE_LEN) + _encode_varint(len(body)) + body


def _payload(buf: bytes, start: int, end: int) -> bytes:
    """The value of the length-delimited field buf[start:end]."""
    view = memoryview(buf)
    pos = read_varint(view, start)[1]
    pos = read_varint(view, pos)[1]
    return buf[pos:end]


def _bytes_fields_descriptor(file_descriptor: bytes, raw_fields: tuple[tuple[str, str], ...]) -> bytes | None:
    """file_descriptor with each (message, field) of raw_fields made ``repeated bytes``; None unless
    every one is found exactly once."""
    wanted = {(m.encode(), f.encode()) for m, f in raw_fields}
    out: list[bytes] = []
    found = 0
    for num, wire, start, end in _fields(file_descriptor):
        piece = file_descriptor[start:end]
        if num == FILE_MESSAGE_TYPE and wire == WIRE_LEN:
            message = _payload(file_descriptor, start, end)
            names = [_payload(message, s, e) for n, w, s, e in _fields(message) if n == MESSAGE_NAME and w == WIRE_LEN]
            fields_here = {f for m, f in wanted if [m] == names}
            if fields_here:
                parts: list[bytes] = []
                for n, w, s, e in _fields(message):
                    sub = message[s:e]
                    if n == MESSAGE_FIELD and w == WIRE_LEN:
                        field = _payload(message, s, e)
                        entries = list(_fields(field))
                        fname = [_payload(field, fs, fe) for fn, fw, fs, fe in entries
                                 if fn == FIELD_NAME and fw == WIRE_LEN]
                        if len(fname) == 1 and fname[0] in fields_here:
                            body = b"".join(field[fs:fe] for fn, fw, fs, fe in entries
                                            if fn not in (FIELD_TYPE, FIELD_TYPE_NAME))
                            as_bytes = _encode_varint(FIELD_TYPE << 3 | WIRE_VARINT) + _encode_varint(TYPE_BYTES)
                            sub = _length_delimited(MESSAGE_FIELD, body + as_bytes)
                            found += 1
                    parts.append(sub)
                piece = _length_delimited(FILE_MESSAGE_TYPE, b"".join(parts))
        out.append(piece)
    return b"".join(out) if found == len(wanted) else None


def _message_class(file_descriptor: bytes, full_name: str) -> Any:
    """The class of message ``full_name`` from a serialized FileDescriptorProto, in a new pool.

    With the upb backend (protobuf's default), the pool and the class come from its C module
    directly: ``descriptor_pool`` and ``message_factory`` import the pure-Python implementation
    and text_format (~15 ms a process) only to reach the same two calls.
    """
    upb = _upb_module()
    if upb is not None:
        pool = upb.DescriptorPool()
        pool.AddSerializedFile(file_descriptor)
        descriptor = pool.FindMessageTypeByName(full_name)
        # What message_factory.GetMessageClass builds: its metaclass adds nothing under upb.
        return upb.MessageMeta(descriptor.name, (message.Message,), {"DESCRIPTOR": descriptor, "__module__": None})
    from google.protobuf import descriptor_pool, message_factory  # slow to import: only without upb

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(file_descriptor)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


def _upb_module() -> Any:
    """google._upb._message when it is the implementation protobuf uses, else None."""
    module = api_implementation._c_module
    if api_implementation.Type() != "upb" or not getattr(module, "_IS_UPB", False):
        return None
    return module



def read_bytes(p: Path, size: int, progress: ProgressCallback | None = None) -> bytes:
    with open(p, "rb") as fh:
        if size < SCAN_MIN_FILE_BYTES:
            return fh.read()

        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(mm)
        page = mmap.ALLOCATIONGRANULARITY
        can_drop = hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED")

        def advance(pos: int) -> None:
            # Unmap what the scan has passed (kept pieces are copied as it goes): with page-cache
            # folios of up to 2 MiB, every header touched would otherwise stay in RSS.
            if can_drop and pos >= page:
                mm.madvise(mmap.MADV_DONTNEED, 0, pos - pos % page)
            if progress:
                progress("read", pos, size)

        try:
            if hasattr(mm, "madvise") and hasattr(mmap, "MADV_RANDOM"):
                mm.madvise(mmap.MADV_RANDOM)  # no read-ahead into the payloads we skip
            return stripped(view, advance)
        finally:
            try:
                view.release()
                mm.close()
            except BufferError:  # a traceback still holds a slice; the map closes when collected
                pass


# Wire-format schema: message kind -> {field number: kind of the length-delimited submessage}.
_MODEL, _GRAPH, _NODE, _ATTR, _TENSOR, _SPARSE, _FUNC, _TRAIN = range(8)
_CHILDREN: dict[int, dict[int, int]] = {
    _MODEL: {MODEL_GRAPH: _GRAPH, MODEL_TRAINING_INFO: _TRAIN, MODEL_FUNCTIONS: _FUNC},
    _GRAPH: {GRAPH_NODE: _NODE, GRAPH_INITIALIZER: _TENSOR, GRAPH_SPARSE_INITIALIZER: _SPARSE},
    _NODE: {NODE_ATTRIBUTE: _ATTR},
    _ATTR: {ATTR_T: _TENSOR, ATTR_G: _GRAPH, ATTR_TENSORS: _TENSOR, ATTR_GRAPHS: _GRAPH,
            ATTR_SPARSE_TENSOR: _SPARSE, ATTR_SPARSE_TENSORS: _SPARSE},
    _FUNC: {FUNCTION_NODE: _NODE, FUNCTION_ATTRIBUTE_PROTO: _ATTR},
    _TRAIN: {TRAINING_INITIALIZATION: _GRAPH, TRAINING_ALGORITHM: _GRAPH},
    _SPARSE: {SPARSE_VALUES: _TENSOR, SPARSE_INDICES: _TENSOR},
    _TENSOR: {},
}
_TENSOR_DATA_FIELDS = frozenset(TENSOR_DATA_FIELDS.values())


def stripped(buf: memoryview | SparseView, advance: Callable[[int], None] | None = None,
             landings: Landings | None = None) -> bytes:
    pieces = _scan(buf, 0, len(buf), _MODEL, 0, advance, landings)
    return bytes(buf[0:len(buf)]) if pieces is None else b"".join(pieces)


class ByteAt(Protocol):
    """Bytes by position: bytes, a memoryview, a remote file's sparse view."""

    def __getitem__(self, index: int, /) -> int: ...


def read_varint(buf: ByteAt, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it (IndexError past the end, ValueError when too long)."""
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _scan(buf: memoryview | SparseView, pos: int, end: int, kind: int, depth: int,
          advance: Callable[[int], None] | None = None, landings: Landings | None = None) -> list[Any] | None:
    """The message buf[pos:end] with skippable payloads dropped, as pieces; None when unchanged."""
    if depth > 2 * MAX_SUBGRAPH_DEPTH + 8:
        raise ValueError("nested too deeply")
    if kind == _TENSOR:
        return _scan_tensor(buf, pos, end, landings)
    children = _CHILDREN[kind]
    out: list[Any] | None = None
    run_start = pos
    next_advance = pos + _ADVANCE_EVERY if advance is not None else end + 1
    while pos < end:
        if pos >= next_advance and advance is not None:
            advance(pos)
            next_advance = pos + _ADVANCE_EVERY
        field_start = pos
        if landings is not None:
            landings.land(pos)
        key, pos = read_varint(buf, pos)
        wire = key & 7
        if wire == WIRE_LEN:
            length, pos = read_varint(buf, pos)
            body, pos = pos, pos + length
            if pos > end:
                raise ValueError("truncated field")
            child = children.get(key >> 3)
            if child is None or length <= SCAN_MIN_MESSAGE_BYTES:
                continue
            if landings is not None and kind == _MODEL:
                landings.graph_at(body)
            sub = _scan(buf, body, pos, child, depth + 1, advance if depth == 0 else None, landings)
            if landings is not None and child == _TENSOR:
                landings.tensor(field_start, pos)
            if sub is None:
                continue
            if out is None:
                out = []
            out.append(bytes(buf[run_start:field_start]))  # copied now: its pages are released later
            out.append(_encode_varint(key) + _encode_varint(sum(len(s) for s in sub)))
            out.extend(sub)
            run_start = pos
        else:
            pos = _skip_scalar(buf, pos, wire)
    if pos != end:
        raise ValueError("truncated message")
    if out is not None:
        out.append(bytes(buf[run_start:end]))
    return out


def fields_at(buf: ByteAt, pos: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, where its value starts, where it ends) of each field of the message
    buf[pos:end], by positions (no slice of the message is taken). ValueError or IndexError where a
    field cannot be read (truncated, a varint too long, a group)."""
    while pos < end:
        key, pos = read_varint(buf, pos)
        wire = key & 7
        if wire == WIRE_LEN:
            length, pos = read_varint(buf, pos)
            body, pos = pos, pos + length
        else:
            body = pos
            pos = _skip_scalar(buf, pos, wire)
        if pos > end:
            raise ValueError("truncated field")
        yield key >> 3, wire, body, pos


def _skip_scalar(buf: ByteAt, pos: int, wire: int) -> int:
    """Position after a varint (0), fixed64 (1) or fixed32 (5) field value."""
    if wire == WIRE_VARINT:
        return read_varint(buf, pos)[1]
    if wire == WIRE_FIXED64:
        return pos + 8
    if wire == WIRE_FIXED32:
        return pos + 4
    raise ValueError(f"unsupported wire type {wire}")


def _int64(value: int) -> int:
    """A varint read as unsigned 64 bits, reinterpreted as the signed int64 ONNX dims are."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _scan_tensor(buf: memoryview | SparseView, pos: int, end: int, landings: Landings | None = None
                 ) -> list[Any] | None:
    """Drop the data fields of a tensor whose dims say the loader never reads its values."""
    start = pos
    dims: list[int] = []
    data_type = 0
    data_spans: list[tuple[int, int]] = []
    name = b""
    while pos < end:
        field_start = pos
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == WIRE_VARINT and field == TENSOR_DATA_TYPE:
            data_type, pos = read_varint(buf, pos)
            continue
        if wire == WIRE_LEN:
            length, pos = read_varint(buf, pos)
            body, pos = pos, pos + length
            if pos > end:
                raise ValueError("truncated field")
            if field == TENSOR_DIMS:  # packed dims
                while body < pos:
                    d, body = read_varint(buf, body)
                    dims.append(_int64(d))
                continue
            if field == TENSOR_NAME and landings is not None:
                name = bytes(buf[body:pos])
                continue
        elif wire == WIRE_VARINT and field == TENSOR_DIMS:
            value, pos = read_varint(buf, pos)
            dims.append(_int64(value))
            continue
        else:
            pos = _skip_scalar(buf, pos, wire)
        if field in _TENSOR_DATA_FIELDS:
            data_spans.append((field_start, pos))
    if pos != end:
        raise ValueError("truncated tensor")
    # tensor_from_proto reads values only when numel <= MAX_INT_VALUE_ELEMENTS (ints) or == 1
    # (floats), numel counting negative dims as 0: with every dim >= 0 and more elements than
    # that, the data is never looked at, so leaving it out changes nothing.
    # Likewise a possible mask: bool/float of rank >= 2 and at most MAX_MASK_ELEMENTS elements.
    if not data_spans or any(d < 0 for d in dims) or math.prod(dims) <= MAX_INT_VALUE_ELEMENTS:
        return None
    if len(dims) >= 2 and data_type in MASK_TYPE_CODES and math.prod(dims) <= MAX_MASK_ELEMENTS:
        return None
    if landings is not None:
        landings.pending = (data_spans[0][0], name)
    pieces: list[Any] = []
    cursor = start
    for span_start, span_stop in data_spans:
        pieces.append(bytes(buf[cursor:span_start]))
        cursor = span_stop
    pieces.append(bytes(buf[cursor:end]))
    return pieces
