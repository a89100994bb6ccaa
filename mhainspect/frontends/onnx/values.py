"""The stored values of a few named tensors of a local ONNX file, read element by element.

Only ``mhainspect.ir.copies`` asks, and only for the tensors a candidate pair names (a stored
tensor that may be an exporter-made copy of a parameter): a run with no candidate reads nothing
here. Values come as the bytes of each element (little-endian, as ONNX stores them): comparing
two tensors of one dtype needs no decoding.

- external data: ``os.pread`` at the tensor's offset in its data file (the storage key holds the
  location and offset); a location outside the model's folder is never opened;
- inline data (``raw_data``, or packed ``float_data``/``double_data``): the file is memory-mapped
  and its graph's initializers walked by their protobuf headers (payloads skipped by length) once,
  on the first request; only the pages of the elements asked for are touched.

Anything unreadable (a missing data file, a typed field this does not decode, a truncated file)
answers None: the caller then decides nothing from values.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from mhainspect.frontends.onnx.wire import GRAPH_INITIALIZER, MODEL_GRAPH, TENSOR_DATA_FIELDS, WIRE_LEN, _fields
from mhainspect.ir.copies import copy_candidates, find_copies, is_lookup
from mhainspect.ir.dtypes import is_float, lookup
from mhainspect.ir.graph import FoldedCopy, ModelGraph, Tensor
from mhainspect.results import ReportWarning, WarningCode

_TENSOR_NAME = 8
_PACKED_FIELDS = {TENSOR_DATA_FIELDS["raw_data"], TENSOR_DATA_FIELDS["float_data"], TENSOR_DATA_FIELDS["double_data"]}
_MAX_OPEN_FILES = 16  # external data files kept open at once
_Reader = Callable[[int, int], "bytes | None"]  # read(offset, length)


class StoredValues:
    """Element bytes of the initializers of one local ONNX file (module doc); a context manager
    that closes what it opened."""

    def __init__(self, path: str | os.PathLike[str], weights: Mapping[str, Tensor],
                 inside_folder: frozenset[str] = frozenset()) -> None:
        self.path = Path(path)
        self.weights = weights
        self.inside = inside_folder  # external locations checked to stay inside the model folder
        self.reads = 0  # os.pread / mapped-page reads made, for tests and measurements
        self._spans: dict[str, tuple[int, int]] | None = None  # inline: name -> (offset, length) in the file
        self._map: mmap.mmap | None = None
        self._files: dict[str, int] = {}

    def __enter__(self) -> StoredValues:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()
        if self._map is not None:
            self._map.close()
            self._map = None

    def itemsize(self, name: str) -> int | None:
        t = self.weights.get(name)
        found = lookup(t.dtype) if t is not None else None
        if found is None or found.block_size != 1 or found.block_bytes.denominator != 1:
            return None
        return int(found.block_bytes)

    def elements(self, name: str, positions: Sequence[int]) -> list[bytes] | None:
        """The bytes of the elements at flat ``positions`` of ``name``; None when unreadable."""
        size = self.itemsize(name)
        where = self._where(name)
        if size is None or where is None:
            return None
        read, base, length = where
        out: list[bytes] = []
        for p in positions:
            at = p * size
            if at < 0 or at + size > length:
                return None
            chunk = read(base + at, size)
            if chunk is None or len(chunk) != size:
                return None
            out.append(chunk)
        return out

    def whole(self, name: str) -> list[bytes] | None:
        """The bytes of every element of ``name``, in flat order; None when unreadable."""
        size = self.itemsize(name)
        where = self._where(name)
        t = self.weights.get(name)
        if size is None or where is None or t is None:
            return None
        read, base, length = where
        n = t.numel * size
        if n > length:
            return None
        blob = read(base, n)
        if blob is None or len(blob) != n:
            return None
        return [blob[i:i + size] for i in range(0, n, size)]

    # -- where a tensor's bytes are -------------------------------------------------------------

    def _where(self, name: str) -> tuple[_Reader, int, int] | None:
        t = self.weights.get(name)
        if t is None or t.is_constant_node:
            return None
        if t.location is not None:
            return self._external(t)
        spans = self._inline_spans()
        span = spans.get(name)
        if span is None or self._map is None:
            return None
        return self._read_mapped, span[0], span[1]

    def _external(self, t: Tensor) -> tuple[_Reader, int, int] | None:
        location = t.location
        if location is None or location not in self.inside:
            return None
        parts = t.storage_key.rsplit(":", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        offset = int(parts[1])
        fd = self._files.get(location)
        if fd is None:
            if len(self._files) >= _MAX_OPEN_FILES:
                return None
            try:
                fd = os.open(self.path.parent / location, os.O_RDONLY)
            except OSError:
                return None
            self._files[location] = fd
        length = t.external_length if t.external_length is not None else 1 << 62

        def read(at: int, n: int) -> bytes | None:
            self.reads += 1
            try:
                return os.pread(fd, n, at)
            except OSError:
                return None

        return read, offset, length

    def _read_mapped(self, at: int, n: int) -> bytes | None:
        self.reads += 1
        return self._map[at:at + n] if self._map is not None else None

    def _inline_spans(self) -> dict[str, tuple[int, int]]:
        """Name -> (offset, length) of the data of each inline initializer of the main graph."""
        if self._spans is not None:
            return self._spans
        self._spans = {}
        try:
            with open(self.path, "rb") as fh:
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            self._spans = _initializer_spans(self._map)
        except (OSError, ValueError, IndexError):
            self._spans = {}
        return self._spans


def _initializer_spans(buf: mmap.mmap) -> dict[str, tuple[int, int]]:
    view = memoryview(buf)
    try:
        out: dict[str, tuple[int, int]] = {}
        for num, wire, start, end in _fields(view):  # type: ignore[arg-type]
            if num != MODEL_GRAPH or wire != WIRE_LEN:
                continue
            body = _body_start(view, start)
            for gnum, gwire, gstart, gend in _fields(view[body:end]):  # type: ignore[arg-type]
                if gnum != GRAPH_INITIALIZER or gwire != WIRE_LEN:
                    continue
                tbody = body + _body_start(view[body:end], gstart)
                name, data = _tensor_name_and_data(view, tbody, body + gend)
                if name is not None and data is not None:
                    out[name] = data
        return out
    finally:
        view.release()


def _body_start(view: memoryview, start: int) -> int:
    """Where the value of the length-delimited field at ``start`` begins."""
    pos = start
    while view[pos] & 0x80:
        pos += 1
    pos += 1  # past the key
    while view[pos] & 0x80:
        pos += 1
    return pos + 1  # past the length


def _tensor_name_and_data(view: memoryview, start: int, end: int) -> tuple[str | None, tuple[int, int] | None]:
    name: str | None = None
    data: tuple[int, int] | None = None
    for num, wire, fstart, fend in _fields(view[start:end]):  # type: ignore[arg-type]
        if wire != WIRE_LEN:
            continue
        body = start + _body_start(view[start:end], fstart)
        if num == _TENSOR_NAME:
            name = bytes(view[body:start + fend]).decode("utf-8", "replace")
        elif num in _PACKED_FIELDS:
            data = (body, start + fend - body)
    return name, data


_MAX_COPIES_LISTED = 4


def with_folded_copies(path: str | os.PathLike[str], graph: ModelGraph) -> ModelGraph:
    """``graph`` with its exporter-made copies of parameters (``mhainspect.ir.copies``) marked in
    ``folded`` (``folded_note`` names those read as parameters); ``graph`` itself when it has none
    (nothing is read unless a candidate pair exists)."""
    copies, _sources = copy_candidates(graph.weights)
    if not copies:
        return graph
    model_dir = os.path.dirname(os.path.abspath(os.fspath(path)))
    from mhainspect.frontends.onnx.frontend import external_location_escapes

    locations = {t.location for t in graph.weights.values() if t.location is not None}
    inside = frozenset(loc for loc in locations if external_location_escapes(model_dir, loc) is None)
    with StoredValues(path, graph.weights, inside) as reader:
        found = find_copies(graph.weights, reader, graph.nodes)
    if not found:
        return graph
    return dataclasses.replace(graph, folded=found)


def folded_note(graph: ModelGraph, found: Mapping[str, FoldedCopy]) -> ReportWarning:
    """The warning naming each copy, what it repeats, and what is no longer counted."""
    items = list(found.values())
    shown = "; ".join(c.detail for c in items[:_MAX_COPIES_LISTED])
    if len(items) > _MAX_COPIES_LISTED:
        shown += f"; and {len(items) - _MAX_COPIES_LISTED} more"
    dropped = sum(graph.weights[c.copy].numel - c.params for c in items)
    return ReportWarning(f"exporter-made copies of parameters ({len(items)}), recognised by their values: {shown}; "
                         f"counted as the parameters they hold ({dropped:,} stored elements not counted as "
                         f"parameters); the bytes of every copy are stored", WarningCode.LOADER)


def undecided_lookups_note(graph: ModelGraph) -> ReportWarning | None:
    """The warning for tensors folded from a parameter by index buffers that no values decided (a
    graph without its file, a data file missing, too large to sample): not counted, and why."""
    names = [n for n, t in graph.weights.items()
             if is_lookup(t) and n not in graph.folded and is_float(t.dtype) and t.numel > 1]
    if not names:
        return None
    shown = "; ".join(f"'{n}' {list(graph.weights[n].shape)} from {graph.weights[n].origin}"
                      for n in names[:_MAX_COPIES_LISTED])
    if len(names) > _MAX_COPIES_LISTED:
        shown += f"; and {len(names) - _MAX_COPIES_LISTED} more"
    total = sum(graph.weights[n].numel for n in names)
    return ReportWarning(f"tensors the exporter folded from a parameter looked up by index buffers ({len(names)}): "
                         f"{shown}; not counted as parameters ({total:,} elements): without their values the graph "
                         f"does not say how many of the parameter's elements they hold (a lookup may repeat them)",
                         WarningCode.LOADER)
