"""The stored values of a few named tensors of an ONNX file, read element by element, wherever the
file is: one reader for a local file and a remote one.

Only ``mhainspect.ir.copies`` asks, and only for the tensors a candidate pair names (a stored
tensor that may be an exporter-made copy of a parameter): a run with no candidate reads nothing
here. Values come as the bytes of each element (little-endian, as ONNX stores them): comparing
two tensors of one dtype needs no decoding.

The bytes are read through views (``sources.blob.file_view``): a local file is mapped (only the
pages of the elements asked for are touched), a remote one is a ``SparseView`` fetched by ranges.

- inline data (``raw_data``, or packed ``float_data``/``double_data``): the model file's view (a
  remote file's is the one its walk filled, ``landings.remote_model_view``: every tensor's header is
  held, so where each payload lies is known without a request); its graph's initializers are walked
  by their protobuf headers (payloads skipped by length) once, on the first request;
- external data: a view of the data file beside the model (``data_file(location)``: the front end
  decides which locations may be read; one outside the model's folder never is), read only at the
  elements asked for, never whole.

What one call asks for is fetched at once, in parallel ranges where the view fetches (bounded):
each element its own range, elements closer than ``MERGE_GAP`` bytes in one. Of a small tensor (at
most ``copies.SMALL`` elements, which the rules probe at clustered positions: its first slices along
each axis) a range is whole blocks of its payload (``BLOCK`` bytes): the next elements asked for
are often held then. A tensor asked more than ``EXACT_CALLS`` times for a few elements at a time (a
table sampled slice by slice) is walked with a read-ahead that doubles per range (within its
payload): its requests grow with the logarithm of the bytes walked, not with the calls. A mapped
view holds every byte: none of this fetches anything.

Anything unreadable (a missing data file, a failed request, a typed field this does not decode, a
truncated file) answers None, and the view is not asked again: the caller then decides nothing from
values (a copy undecided, a lookup uncounted with the loader's warning), alike for both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, overload

from mhainspect.errors import InputError
from mhainspect.frontends.onnx.wire import (
    GRAPH_INITIALIZER,
    MODEL_GRAPH,
    TENSOR_DATA_FIELDS,
    WIRE_LEN,
    fields_at,
    read_varint,
)
from mhainspect.ir.copies import SMALL, ValueReader, copy_candidates, find_copies, is_lookup, quantized_candidates
from mhainspect.ir.dtypes import is_float, lookup
from mhainspect.ir.graph import FoldedCopy, ModelGraph, Tensor
from mhainspect.results import ReportWarning, WarningCode
from mhainspect.sources.blob import Blob, FileView, file_view

_TENSOR_NAME = 8
_PACKED_FIELDS = {TENSOR_DATA_FIELDS["raw_data"], TENSOR_DATA_FIELDS["float_data"], TENSOR_DATA_FIELDS["double_data"]}
_MAX_VARINT_ELEMENTS = 1 << 16  # a packed-varint tensor decoded whole (zero points, small tables)
# Elements of one call closer than this share a range (a request costs more than a few KiB more);
# a range is whole blocks of the payload (counted from its start), cut at its end.
MERGE_GAP = 4 * 1024
BLOCK = 4 * 1024
# Calls on one tensor answered exactly; past them, a call of at most WALK_ELEMENTS elements (a slice's
# sample, one of many along an axis) starts a read-ahead window at each missing span (a sample of many
# spread elements, another permutation tried, stays exact: a window each would fetch the tensor).
WALK_ELEMENTS = 4
EXACT_CALLS = 16
_FIRST_WINDOW = 64 * 1024
_MAX_WINDOW = 8 * 1024 * 1024

DataFiles = Callable[[str], "Blob | None"]
"""An external-data location -> the blob of that file beside the model; None: none, or one that is
never to be read (outside the model's folder, not in its listing)."""


class StoredValues:
    """Element bytes of the initializers of one ONNX file (module doc): ``model`` is the model file's
    view, ``data_file`` opens its external data files. ``elements`` and ``whole`` turn positions into
    byte spans of a tensor's payload and fetch all of them at once; the copy rules
    (``mhainspect.ir.copies.ValueReader``) see only those two. A context manager that closes the
    views it opened."""

    def __init__(self, weights: Mapping[str, Tensor], model: FileView, data_file: DataFiles) -> None:
        self.weights = weights
        self.model = model
        self.data_file = data_file
        self.reads = 0  # element spans asked for, for tests and measurements
        self._spans: dict[str, tuple[int, int]] | None = None  # inline: name -> (offset, length) in the file
        self._varints: dict[str, tuple[int, int]] = {}  # inline int32_data: name -> (offset, length)
        self._views: dict[str, FileView | None] = {}  # external location -> its view (None: unreadable)
        self._failed: set[int] = set()  # id() of views a read failed on: not asked again
        self._calls: dict[str, int] = {}
        self._window: dict[str, int] = {}

    def __enter__(self) -> StoredValues:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the views of data files this opened (the model's view is its owner's)."""
        for view in self._views.values():
            if view is not None:
                view.close()
        self._views.clear()

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

    # -- where a tensor's bytes are -------------------------------------------------------------

    def _where(self, name: str) -> tuple[FileView, int, int] | None:
        """(the view holding its bytes, offset of the payload there, payload length) of ``name``."""
        t = self.weights.get(name)
        if t is None or t.is_constant_node:
            return None
        if t.location is not None:
            view = self._external(t.location)
            offset = external_offset(t)
            return None if view is None or offset is None else (view, offset, external_length(t))
        span = self._inline_spans().get(name)
        return None if span is None else (self.model, span[0], span[1])

    def _inline_spans(self) -> dict[str, tuple[int, int]]:
        """Name -> (offset, length) of the data of each inline initializer of the main graph (from
        the headers a remote walk holds: a byte it did not hold is fetched)."""
        if self._spans is None:
            try:
                self._spans = initializer_spans(self.model.scanned(), self._varints)
            except (ValueError, IndexError, InputError):
                self._spans = {}
        return self._spans

    def _varint_whole(self, t: Tensor, size: int) -> list[bytes] | None:
        """The elements of a small integer tensor stored as packed varints (int32_data), as bytes of
        its own type."""
        self._inline_spans()
        span = self._varints.get(t.name)
        if span is None or t.numel > _MAX_VARINT_ELEMENTS or is_float(t.dtype) or id(self.model) in self._failed:
            return None
        at, length = span
        end, mask = at + length, (1 << (8 * size)) - 1
        out: list[bytes] = []
        try:
            self.model.fetch_spans([(at, end)])
            buf = self.model.scanned()
            while at < end:
                value, at = read_varint(buf, at)
                out.append((value & mask).to_bytes(size, "little"))  # two's complement, as the type stores it
        except (IndexError, ValueError):
            return None
        except InputError:
            self._failed.add(id(self.model))
            return None
        return out if len(out) == t.numel and at == end else None

    def _external(self, location: str) -> FileView | None:
        if location not in self._views:
            blob = self.data_file(location)
            self._views[location] = None if blob is None else self._data_view(blob, location)
        return self._views[location]

    def _data_view(self, blob: Blob, location: str) -> FileView | None:
        """A view of a data file, its length (where it is fetched by ranges) from the tensors it
        holds when each says its extent, else asked of the blob."""
        def extent() -> int | None:
            held = [t for t in self.weights.values() if t.location == location]
            ends = [off + t.external_length for t in held
                    if t.external_length is not None and (off := external_offset(t)) is not None]
            return max(ends) if ends and len(ends) == len(held) else None

        try:
            return file_view(blob, extent)
        except InputError:
            return None

    def _fetch(self, name: str, source: FileView, spans: list[tuple[int, int]],
               payload: tuple[int, int]) -> list[bytes] | None:
        """The bytes of each (offset, length) span of ``source`` (``payload``: where the tensor's
        bytes start and end there); None when any is unreadable."""
        if id(source) in self._failed:
            return None
        self.reads += len(spans)
        out: list[bytes] = []
        try:
            if not source.holds_all:  # a mapped file holds every byte: nothing to fetch
                self._fetch_missing(name, source, spans, payload)
            buf = source.scanned()
            for at, n in spans:
                chunk = bytes(buf[at:at + n])
                if len(chunk) != n:
                    return None  # the file ends before the tensor does
                out.append(chunk)
        except InputError:
            self._failed.add(id(source))
            return None
        return out

    def _fetch_missing(self, name: str, source: FileView, spans: list[tuple[int, int]],
                       payload: tuple[int, int]) -> None:
        """Fetch what ``source`` does not hold of ``spans``, in ranges shaped by the module doc's rules."""
        calls = self._calls[name] = self._calls.get(name, 0) + 1
        start, limit = payload
        missing = [s for s in _merged(spans) if not source.holds_span(*s)]
        if calls > EXACT_CALLS and len(spans) <= WALK_ELEMENTS:  # a walk over the tensor: read ahead, doubling
            window = self._window.get(name, _FIRST_WINDOW)
            missing = [(a, max(b, min(a + window, limit))) for a, b in missing]
            if missing:
                self._window[name] = min(2 * window, _MAX_WINDOW)
        elif self.weights[name].numel <= SMALL:  # whole blocks: the next elements asked for are often in them
            missing = _merged([(a, b - a) for a, b in
                               ((max(start, a - (a - start) % BLOCK), min(limit, b + (start - b) % BLOCK))
                                for a, b in missing)])
        if source is not self.model and not source.fetched and len(missing) > 1:
            # A data file's first range alone: a Hub file answers it with a redirect to its storage,
            # which the ranges after it then use (in parallel, each would be redirected).
            source.fetch_spans(missing[:1])
        source.fetch_spans(missing)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(start, end) ranges covering ``spans`` (offset, length), those closer than MERGE_GAP joined."""
    out: list[tuple[int, int]] = []
    for at, n in sorted(spans):
        if out and at - out[-1][1] <= MERGE_GAP:
            out[-1] = (out[-1][0], max(out[-1][1], at + n))
        else:
            out.append((at, at + n))
    return out


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


def folded_copies(graph: ModelGraph, model: FileView, data_file: DataFiles) -> ModelGraph:
    """``graph`` with its exporter-made copies of parameters (``mhainspect.ir.copies``) marked in
    ``folded`` (``folded_note`` names those read as parameters), their values read through ``model``
    (the model file's view) and ``data_file``; ``graph`` itself, at no read, when it has no candidate."""
    copies, _sources = copy_candidates(graph.weights)
    if not copies and not quantized_candidates(graph.weights):
        return graph
    with StoredValues(graph.weights, model, data_file) as reader:
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
