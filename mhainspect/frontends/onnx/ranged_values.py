"""The stored values a copy check asks for, read from a remote ONNX file by ranged requests.

The same element reader as a local file's (``values.ElementValues``), over other bytes:

- inline data: the model file's ``SparseView`` from the walk that read the graph
  (``landings.remote_model_view``): the walk has fetched every tensor's header, so where each payload
  lies is known without a request (``values.initializer_spans`` over the bytes held); a payload the
  walk skipped is fetched only at the elements asked for;
- external data: a ``SparseView`` of the data file beside the model, fetched only at the elements
  asked for (never the whole file); a location that is not a plain relative path, or that the
  folder's listing does not hold, is never requested.

What one call asks for is fetched at once, in parallel ranges (``parallel.in_parallel``, bounded):
each element its own range, elements closer than ``MERGE_GAP`` bytes in one. Of a small tensor (at
most ``copies.SMALL`` elements, which the rules probe at clustered positions: its first slices along
each axis) a range is whole blocks of its payload (``BLOCK`` bytes): the next elements asked for
are often held then. A tensor asked more than ``EXACT_CALLS`` times for a few elements at a time (a
table sampled slice by slice) is walked with a read-ahead that doubles per range (within its
payload): its requests grow with the logarithm of the bytes walked, not with the calls.

Nothing is read unless the copy rules ask (``mhainspect.ir.copies``: only where a candidate exists):
a file without candidates costs what its walk costs. A failed request (a server error, a data file
missing) answers None, as an unreadable local file does: the rules then fall back exactly as
locally (a copy undecided, a lookup uncounted with the loader's warning); the location is not asked
again.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping

from mhainspect.errors import InputError
from mhainspect.frontends.onnx.values import (
    ElementValues,
    external_length,
    external_offset,
    folded_by,
    initializer_spans,
)
from mhainspect.ir.copies import SMALL, copy_candidates
from mhainspect.ir.graph import ModelGraph, Tensor
from mhainspect.sources.blob import Blob, SparseView

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
_DRIVE = re.compile(r"^[A-Za-z]:")


class RangedValues(ElementValues):
    """Element bytes of a remote ONNX file's initializers (module doc). ``data_file(location)``: the
    blob of an external data file beside the model, None when there is none."""

    def __init__(self, weights: Mapping[str, Tensor], model: SparseView,
                 data_file: Callable[[str], Blob | None]) -> None:
        super().__init__(weights)
        self.model = model
        self.data_file = data_file
        self._spans: dict[str, tuple[int, int]] | None = None
        self._views: dict[str, SparseView | None] = {}  # external location -> its view (None: unreadable)
        self._failed: set[int] = set()  # id() of views a request failed on: not asked again
        self._calls: dict[str, int] = {}
        self._window: dict[str, int] = {}

    def _where(self, name: str) -> tuple[object, int, int] | None:
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
        if self._spans is None:  # from the headers the walk holds (a byte it did not hold is fetched)
            try:
                self._spans = initializer_spans(self.model)
            except (ValueError, IndexError, InputError):
                self._spans = {}
        return self._spans

    def _external(self, location: str) -> SparseView | None:
        if location not in self._views:
            blob = self.data_file(location) if plain_location(location) else None
            self._views[location] = None if blob is None else self._data_view(blob, location)
        return self._views[location]

    def _data_view(self, blob: Blob, location: str) -> SparseView | None:
        """A view of a data file, its length from the tensors it holds when each says its extent
        (else asked of the server)."""
        held = [t for t in self.weights.values() if t.location == location]
        ends = [off + t.external_length for t in held
                if t.external_length is not None and (off := external_offset(t)) is not None]
        try:
            return SparseView(blob, max(ends) if ends and len(ends) == len(held) else blob.size())
        except InputError:
            return None

    def _fetch(self, name: str, source: object, spans: list[tuple[int, int]],
               payload: tuple[int, int]) -> list[bytes] | None:
        if not isinstance(source, SparseView) or id(source) in self._failed:
            return None
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
        self.reads += len(missing)
        try:
            if source is not self.model and not source.fetched and len(missing) > 1:
                # A data file's first range alone: a Hub file answers it with a redirect to its storage,
                # which the ranges after it then use (in parallel, each would be redirected).
                source.fetch_spans(missing[:1])
            source.fetch_spans(missing)
            return [source[at:at + n] for at, n in spans]
        except InputError:
            self._failed.add(id(source))
            return None


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(start, end) ranges covering ``spans`` (offset, length), those closer than MERGE_GAP joined."""
    out: list[tuple[int, int]] = []
    for at, n in sorted(spans):
        if out and at - out[-1][1] <= MERGE_GAP:
            out[-1] = (out[-1][0], max(out[-1][1], at + n))
        else:
            out.append((at, at + n))
    return out


def plain_location(location: str) -> bool:
    """Whether an external-data location is a plain relative path inside the model's folder (no
    drive, no root, no '..'): anything else is never requested (locally: never opened)."""
    if not location or "\x00" in location or location.startswith(("/", "\\")) or _DRIVE.match(location):
        return False
    return ".." not in re.split(r"[\\/]", location) and not posixpath.isabs(location)


def remote_folded_copies(graph: ModelGraph, model: SparseView,
                         data_file: Callable[[str], Blob | None]) -> ModelGraph:
    """``graph`` with its exporter-made copies marked from values read by ranges (as
    ``values.with_folded_copies`` does for a local file); ``graph`` itself, at no request, when it
    has no candidate."""
    copies, _sources = copy_candidates(graph.weights)
    if not copies:
        return graph
    with RangedValues(graph.weights, model, data_file) as reader:
        return folded_by(graph, reader)
