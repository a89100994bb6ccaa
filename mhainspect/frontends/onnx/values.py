"""The stored values of a few named tensors of an ONNX file, read element by element.

Only ``mhainspect.ir.copies`` asks, and only for the tensors a candidate pair names (a stored
tensor that may be an exporter-made copy of a parameter): a run with no candidate reads nothing
here. Values come as the bytes of each element (little-endian, as ONNX stores them): comparing
two tensors of one dtype needs no decoding.

- external data: ``os.pread`` at the tensor's offset in its data file (the storage key holds the
  location and offset); a location outside the model's folder is never opened;
- inline data (``raw_data``, or packed ``float_data``/``double_data``): the file is memory-mapped
  and its graph's initializers walked by their protobuf headers (payloads skipped by length) once,
  on the first request; only the pages of the elements asked for are touched.

``ElementValues`` turns positions into byte spans; ``StoredValues`` reads them from a local file
(below), ``mhainspect.frontends.onnx.ranged_values.RangedValues`` by ranged requests from a remote
one: the copy rules do not know where the bytes come from.

Anything unreadable (a missing data file, a typed field this does not decode, a truncated file)
answers None: the caller then decides nothing from values.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, overload

from mhainspect.frontends.onnx.locations import external_location_escapes
from mhainspect.frontends.onnx.wire import (
    GRAPH_INITIALIZER,
    MODEL_GRAPH,
    TENSOR_DATA_FIELDS,
    WIRE_LEN,
    fields_at,
    read_varint,
)
from mhainspect.ir.copies import ValueReader, copy_candidates, find_copies, is_lookup, quantized_candidates
from mhainspect.ir.dtypes import is_float, lookup
from mhainspect.ir.graph import FoldedCopy, ModelGraph, Tensor
from mhainspect.results import ReportWarning, WarningCode

_TENSOR_NAME = 8
_PACKED_FIELDS = {TENSOR_DATA_FIELDS["raw_data"], TENSOR_DATA_FIELDS["float_data"], TENSOR_DATA_FIELDS["double_data"]}
_MAX_OPEN_FILES = 16  # external data files kept open at once
_MAX_VARINT_ELEMENTS = 1 << 16  # a packed-varint tensor decoded whole (zero points, small tables)


class ElementValues:
    """Element bytes of stored tensors, wherever their bytes are: ``elements`` and ``whole`` turn
    positions into byte spans of the tensor's payload and ask ``_fetch`` for all of them at once (a
    local file reads them one by one; a remote one fetches them in parallel ranges). The copy rules
    (``mhainspect.ir.copies.ValueReader``) see only ``elements`` and ``whole``. A context manager
    that closes what it opened."""

    def __init__(self, weights: Mapping[str, Tensor]) -> None:
        self.weights = weights
        self.reads = 0  # spans read (os.pread, mapped slices, ranges asked for), for tests and measurements

    def __enter__(self) -> ElementValues:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release what reading opened (nothing by default)."""

    def itemsize(self, name: str) -> int | None:
        t = self.weights.get(name)
        found = lookup(t.dtype) if t is not None else None
        if found is None or found.block_size != 1 or found.block_bytes.denominator != 1:
            return None
        return int(found.block_bytes)

    def elements(self, name: str, positions: Sequence[int]) -> list[bytes] | None:
        """The bytes of the elements at flat ``positions`` of ``name``; None when unreadable."""
        size = self.itemsize(name)
        where = self._where(name) if size is not None else None
        if size is None or where is None:
            return None
        source, base, length = where
        spans: list[tuple[int, int]] = []
        for p in positions:
            at = p * size
            if at < 0 or at + size > length:
                return None
            spans.append((base + at, size))
        return self._fetch(name, source, spans, (base, base + length))

    def whole(self, name: str) -> list[bytes] | None:
        """The bytes of every element of ``name``, in flat order; None when unreadable."""
        size = self.itemsize(name)
        where = self._where(name) if size is not None else None
        t = self.weights.get(name)
        if size is not None and where is None and t is not None:
            return self._varint_whole(t, size)
        if size is None or where is None or t is None:
            return None
        source, base, length = where
        n = t.numel * size
        if n > length:
            return None
        got = self._fetch(name, source, [(base, n)], (base, base + length))
        if got is None:
            return None
        blob = got[0]
        return [blob[i:i + size] for i in range(0, n, size)]

    def _where(self, name: str) -> tuple[object, int, int] | None:
        """(where the bytes are, offset of the payload there, payload length) of ``name``."""
        raise NotImplementedError

    def _varint_whole(self, t: Tensor, size: int) -> list[bytes] | None:
        """The elements of a small integer tensor stored as packed varints (int32_data), as bytes of
        its own type; None where the source cannot tell (by default)."""
        return None

    def _fetch(self, name: str, source: object, spans: list[tuple[int, int]],
               payload: tuple[int, int]) -> list[bytes] | None:
        """The bytes of each (offset, length) span of ``source`` (``payload``: where the tensor's
        bytes start and end there); None when any is unreadable."""
        raise NotImplementedError


class StoredValues(ElementValues):
    """Element bytes of the initializers of one local ONNX file (module doc)."""

    def __init__(self, path: str | os.PathLike[str], weights: Mapping[str, Tensor],
                 inside_folder: frozenset[str] = frozenset()) -> None:
        super().__init__(weights)
        self.path = Path(path)
        self.inside = inside_folder  # external locations checked to stay inside the model folder
        self._spans: dict[str, tuple[int, int]] | None = None  # inline: name -> (offset, length) in the file
        self._varints: dict[str, tuple[int, int]] = {}  # inline int32_data: name -> (offset, length)
        self._map: mmap.mmap | None = None
        self._files: dict[str, int] = {}

    def close(self) -> None:
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()
        if self._map is not None:
            self._map.close()
            self._map = None

    def _fetch(self, name: str, source: object, spans: list[tuple[int, int]],
               payload: tuple[int, int]) -> list[bytes] | None:
        out: list[bytes] = []
        for at, n in spans:
            self.reads += 1
            try:
                if isinstance(source, int):
                    chunk = os.pread(source, n, at)
                elif self._map is not None:
                    chunk = self._map[at:at + n]
                else:
                    return None
            except OSError:
                return None
            if len(chunk) != n:
                return None
            out.append(chunk)
        return out

    # -- where a tensor's bytes are -------------------------------------------------------------

    def _where(self, name: str) -> tuple[object, int, int] | None:
        """(the file descriptor of its data file, or None for the mapped model file; offset; length)."""
        t = self.weights.get(name)
        if t is None or t.is_constant_node:
            return None
        if t.location is not None:
            return self._external(t)
        span = self._inline_spans().get(name)
        if span is None or self._map is None:
            return None
        return None, span[0], span[1]

    def _varint_whole(self, t: Tensor, size: int) -> list[bytes] | None:
        self._inline_spans()
        span = self._varints.get(t.name)
        if span is None or self._map is None or t.numel > _MAX_VARINT_ELEMENTS or is_float(t.dtype):
            return None
        at, length = span
        end, mask = at + length, (1 << (8 * size)) - 1
        out: list[bytes] = []
        try:
            while at < end:
                value, at = read_varint(self._map, at)
                out.append((value & mask).to_bytes(size, "little"))  # two's complement, as the type stores it
        except (IndexError, ValueError):
            return None
        return out if len(out) == t.numel and at == end else None

    def _external(self, t: Tensor) -> tuple[object, int, int] | None:
        location = t.location
        offset = external_offset(t)
        if location is None or location not in self.inside or offset is None:
            return None
        fd = self._files.get(location)
        if fd is None:
            if len(self._files) >= _MAX_OPEN_FILES:
                return None
            path = self.path.parent / location
            try:
                # Only a regular file is opened: opening a FIFO for reading would wait for a writer,
                # and a FIFO or a device is never read (the external-data check promises it).
                if not stat.S_ISREG(os.stat(path).st_mode):
                    return None
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                return None
            self._files[location] = fd
        return fd, offset, external_length(t)

    def _inline_spans(self) -> dict[str, tuple[int, int]]:
        """Name -> (offset, length) of the data of each inline initializer of the main graph."""
        if self._spans is not None:
            return self._spans
        self._spans = {}
        try:
            with open(self.path, "rb") as fh:
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            view = memoryview(self._map)
            try:
                self._spans = initializer_spans(view, self._varints)
            finally:
                view.release()
        except (OSError, ValueError, IndexError):
            self._spans = {}
        return self._spans


def external_offset(t: Tensor) -> int | None:
    """Where an external tensor's data starts in its data file (its storage key holds it)."""
    parts = t.storage_key.rsplit(":", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def external_length(t: Tensor) -> int:
    """An external tensor's data length (unbounded when the model does not say: reads stop at the
    file's end)."""
    return t.external_length if t.external_length is not None else 1 << 62


class Indexable(Protocol):
    """A file's bytes by position: a memoryview of a mapped file, or a remote file's sparse view."""

    def __len__(self) -> int: ...

    @overload
    def __getitem__(self, key: int) -> int: ...

    @overload
    def __getitem__(self, key: slice) -> bytes: ...


def initializer_spans(buf: memoryview | Indexable, varints: dict[str, tuple[int, int]] | None = None
                      ) -> dict[str, tuple[int, int]]:
    """Name -> (offset, length) of the data of each initializer of the main graph of the serialized
    model ``buf``. Only keys, lengths and names are read: payloads are skipped by their lengths (a
    remote file's walk has fetched every byte this touches). ``varints``: where to put the spans of
    initializers held as packed varints instead (int32_data: ONNX's 8- and 16-bit integers written
    without raw_data, as quantizers write zero points)."""
    out: dict[str, tuple[int, int]] = {}
    int32_data = TENSOR_DATA_FIELDS["int32_data"]
    for num, wire, body, end in fields_at(buf, 0, len(buf)):
        if num != MODEL_GRAPH or wire != WIRE_LEN:
            continue
        for gnum, gwire, tbody, tend in fields_at(buf, body, end):
            if gnum != GRAPH_INITIALIZER or gwire != WIRE_LEN:
                continue
            name: str | None = None
            data: tuple[int, int] | None = None
            packed: tuple[int, int] | None = None
            for fnum, fwire, fbody, fend in fields_at(buf, tbody, tend):
                if fwire != WIRE_LEN:
                    continue
                if fnum == _TENSOR_NAME:
                    name = bytes(buf[fbody:fend]).decode("utf-8", "replace")
                elif fnum in _PACKED_FIELDS:
                    data = (fbody, fend - fbody)
                elif fnum == int32_data and varints is not None:
                    packed = (fbody, fend - fbody)
            if name is not None and data is not None:
                out[name] = data
            elif name is not None and packed is not None and varints is not None:
                varints[name] = packed
    return out


_MAX_COPIES_LISTED = 4


def with_folded_copies(path: str | os.PathLike[str], graph: ModelGraph) -> ModelGraph:
    """``graph`` with its exporter-made copies of parameters (``mhainspect.ir.copies``) marked in
    ``folded`` (``folded_note`` names those read as parameters); ``graph`` itself when it has none
    (nothing is read unless a candidate pair exists)."""
    copies, _sources = copy_candidates(graph.weights)
    if not copies and not quantized_candidates(graph.weights):
        return graph
    model_dir = os.path.dirname(os.path.abspath(os.fspath(path)))
    locations = {t.location for t in graph.weights.values() if t.location is not None}
    inside = frozenset(loc for loc in locations if external_location_escapes(model_dir, loc) is None)
    with StoredValues(path, graph.weights, inside) as reader:
        return folded_by(graph, reader)


def folded_by(graph: ModelGraph, reader: ValueReader) -> ModelGraph:
    """``graph`` with the copies ``reader``'s values show marked in ``folded`` (itself when none):
    where the bytes come from (a local file, ranged reads of a remote one) is the reader's concern."""
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
             if t.origin is not None and is_lookup(t) and n not in graph.folded and is_float(t.dtype) and t.numel > 1]
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
