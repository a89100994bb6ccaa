"""One ranged-read interface for every place a model file lives, and the two ways readers use it.

A ``Blob`` is one file: a local path, a file in the Hugging Face cache, a Hub file, an HTTP(S) URL
or an object in a store. It answers ``read(offset, length)`` with the bytes of that span (fewer
only where the file ends), and knows its size (after its first read at the latest). Readers never
hold a file object: they ask a blob for the spans their format needs.

- ``Prefix``: a header read from byte 0 (safetensors, GGUF). The first read asks for a speculative
  window sized to typical headers (``FIRST_RANGE``); later reads are served from the bytes held and
  only what is missing is fetched, from where the held bytes end: no byte is fetched twice.
- ``SparseView``: a file walked in place with large skips (an ONNX protobuf whose tensor payloads
  are skipped). Indexing fetches the block around a missed byte; a sequential miss fetches half of
  the run walked so far (read-ahead), a jump a small window; a walker that knows where it lands
  next fetches those spans at once, in parallel.
- ``MappedView``: a file on this machine, mapped: the same indexing with every byte held (nothing is
  fetched; only the pages touched are read). ``file_view`` gives a blob's view of either kind, so
  a reader that indexes a file in place is one code for a local file and a remote one.
"""

from __future__ import annotations

import io
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, overload

from mhainspect.errors import InputError, read_error
from mhainspect.sources.parallel import in_parallel

if TYPE_CHECKING:
    from collections.abc import Callable

# The first speculative range of a header read: a median safetensors header is ~6 KB, most are
# below this; a GGUF header's first keys and array lengths are in it. Longer headers cost a second
# range, sized from what the first one says.
FIRST_RANGE = 64 * 1024


class Blob(Protocol):
    """One file that answers ranged reads."""

    @property
    def name(self) -> str:
        """What messages call the file: a path, a URL, ``hf://org/name/file``."""

    @property
    def basename(self) -> str:
        """The file's own name (storage keys name the file, not where it lives)."""

    @property
    def speculative(self) -> bool:
        """Whether a read should ask for more than it needs (each read is a round trip)."""

    def size(self) -> int:
        """The file's length in bytes (may cost a request when no read has told it yet)."""

    def known_size(self) -> int | None:
        """The file's length when it is known without a request (a listing, a read's answer), else None."""

    def read(self, offset: int, length: int) -> bytes:
        """The bytes [offset, offset + length), cut at the end of the file; raises InputError."""

    def tail(self, length: int) -> bytes:
        """The last ``length`` bytes (the whole file when shorter); tells the size as it reads."""


class LocalBlob:
    """A file on this machine (a path, or a file in the Hugging Face cache shown by another name)."""

    speculative = False

    def __init__(self, path: Path, name: str | None = None) -> None:
        self.path = path
        self.name = name if name is not None else str(path)
        self.basename = path.name
        self._size: int | None = None

    def size(self) -> int:
        if self._size is None:
            try:
                self._size = self.path.stat().st_size
            except OSError as exc:
                raise read_error(self.name, exc) from None
        return self._size

    def known_size(self) -> int | None:
        return self.size()

    def read(self, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        try:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                if hasattr(os, "posix_fadvise"):  # no kernel read-ahead: a span asked for pulls no tensor data in
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                return os.pread(fd, length, offset)
            finally:
                os.close(fd)
        except OSError as exc:
            raise read_error(self.name, exc) from None

    def tail(self, length: int) -> bytes:
        size = self.size()
        return self.read(max(0, size - length), min(length, size))


def local_path(blob: Blob) -> Path | None:
    """The path of a blob that is a file on this machine (a local file, one in the Hugging Face
    cache, either behind ``HeadCached``), else None: such a file is mapped, not read by ranges."""
    if isinstance(blob, LocalBlob):
        return blob.path
    if isinstance(blob, HeadCached):
        return local_path(blob.blob)
    return None


class MemoryBlob:
    """Bytes already held (a header fetched once, served again to a second reader)."""

    speculative = False

    def __init__(self, data: bytes, name: str, basename: str, size: int | None = None) -> None:
        self.data, self.name, self.basename = data, name, basename
        self._size = len(data) if size is None else size

    def size(self) -> int:
        return self._size

    def known_size(self) -> int | None:
        return self._size

    def read(self, offset: int, length: int) -> bytes:
        if offset + length > len(self.data) and offset + length <= self._size:
            raise InputError(f"{self.name}: read past the bytes held ({offset + length:,} of {len(self.data):,})")
        return self.data[offset:offset + length]

    def tail(self, length: int) -> bytes:
        return self.read(max(0, self._size - length), min(length, self._size))


class Prefix:
    """The bytes [0, held) of a blob, grown on demand: the first fetch is at least ``first`` bytes
    when the blob is remote, a later one starts where the held bytes end and reaches at least the
    ``hint`` a reader gives (what it expects to need next). ``buf`` grows in place."""

    def __init__(self, blob: Blob, first: int = FIRST_RANGE, limit: int | None = None) -> None:
        self.blob = blob
        self.first = first if blob.speculative else 0
        self.limit = limit  # a header longer than this is refused, not fetched
        self.buf = bytearray()
        self.fetches = 0

    @property
    def held(self) -> int:
        return len(self.buf)

    def ensure(self, end: int, hint: int = 0) -> int:
        """Hold at least [0, end) where the file has it (and up to ``hint`` when fetching anyway);
        returns the bytes held."""
        if end <= len(self.buf):
            return len(self.buf)
        if self.limit is not None and end > self.limit:
            raise InputError(f"{self.blob.name}: its header would be longer than {self.limit:,} bytes "
                             "(a corrupt or hostile length field); not fetched")
        want = max(end, hint, self.first if not self.buf else 0)
        if self.limit is not None:
            want = min(want, self.limit)
        if self.fetches or not self.blob.speculative:  # the size is known: never ask past the end
            want = min(want, self.blob.size())
        if want > len(self.buf):
            got = self.blob.read(len(self.buf), want - len(self.buf))
            self.fetches += 1
            self.buf += got
        return len(self.buf)

    def read(self, offset: int, length: int, hint: int = 0) -> bytes:
        """The bytes [offset, offset + length) (cut at the end of the file)."""
        self.ensure(offset + length, hint)
        return bytes(self.buf[offset:offset + length])


# The first range of a small file read whole whose size is not known yet (a config.json beside a
# URL): every real one fits; a larger one is grown to its limit only when no answer states its size.
SMALL_FIRST = 1024 * 1024


def small_file(blob: Blob, limit: int) -> bytes:
    """A small file whole (a config.json, an index), refused past ``limit`` bytes: before any byte
    is fetched when its size is known (a listing's), after the first range when that range's answer
    states it; otherwise in ranges that double up to the limit."""
    def too_large(size: int | None) -> InputError:
        told = f" ({size:,} bytes)" if size is not None else ""
        return InputError(f"{blob.name}: larger than {limit:,} bytes{told}; not fetched past that")

    size = blob.known_size()
    if size is not None:
        if size > limit:
            raise too_large(size)
        return blob.read(0, size)
    asked = min(limit + 1, SMALL_FIRST) if blob.speculative else limit + 1
    data = blob.read(0, asked)
    got = len(data)
    while True:
        size = blob.known_size()
        if size is not None and size > limit or len(data) > limit:
            raise too_large(size)
        if size is not None and len(data) < size:
            return data + blob.read(len(data), size - len(data))
        if size is not None or got < asked:
            return data  # as long as its size, or shorter than asked: the file ends there
        asked = min(len(data), limit + 1 - len(data))
        more = blob.read(len(data), asked)
        got = len(more)
        data += more


# Read-ahead of SparseView: the least a miss fetches, and the ceiling of a sequential window.
_SPARSE_MIN = 1024
_SPARSE_MAX = 8 * 1024 * 1024


@dataclass
class _Run:
    start: int
    data: bytes

    @property
    def end(self) -> int:
        return self.start + len(self.data)


class SparseView:
    """A remote file indexed like a memoryview (``view[i]``, ``view[a:b]``, ``len(view)``) that
    fetches only the spans touched. Held spans are kept sorted and never fetched twice.

    A miss right after the span fetched last (a walk over consecutive small messages) fetches half
    of the sequential run walked so far (since the last span the walker says it skipped,
    ``skipped_to``), at least ``_SPARSE_MIN`` bytes: the bytes fetched past the end of a run stay
    below half of it, in a few ranges however long the run. A miss elsewhere
    (a jump) fetches ``jump_window`` bytes. A walker that knows where it will land next (the tensor
    headers after skipped payloads) fetches those spans together, in parallel (``fetch_spans``)."""

    def __init__(self, blob: Blob, size: int) -> None:
        self.blob = blob
        self._len = size
        self._runs: list[_Run] = []
        self._last: _Run | None = None
        self.jump_window = _SPARSE_MIN
        self.skipped_to = 0  # where the last span the walk skipped (a payload) ends, when it says so
        self.fetched = 0
        self.holds_all = False  # (a file held whole is a MappedView)

    def __len__(self) -> int:
        return self._len

    def _locate(self, pos: int) -> _Run | None:
        """The held span holding ``pos``."""
        lo, hi = 0, len(self._runs)
        while lo < hi:
            mid = (lo + hi) // 2
            run = self._runs[mid]
            if pos < run.start:
                hi = mid
            elif pos >= run.end:
                lo = mid + 1
            else:
                return run
        return None

    def _find(self, pos: int) -> _Run | None:
        last = self._last
        if last is not None and last.start <= pos < last.end:
            return last
        run = self._locate(pos)
        if run is not None:
            self._last = run
        return run

    def holds(self, pos: int) -> bool:
        return pos >= self._len or self._locate(pos) is not None

    def scanned(self) -> SparseView:
        return self

    def close(self) -> None:
        """Nothing to release: the spans held go with the view."""

    def holds_span(self, start: int, end: int) -> bool:
        """Whether every byte of [start, end) is held (or past the end of the file)."""
        pos = start
        while pos < min(end, self._len):
            run = self._locate(pos)
            if run is None:
                return False
            pos = run.end
        return True

    def seed(self, start: int, data: bytes) -> None:
        """Bytes already fetched (the first range, the tail that told the size) become a held span."""
        if data and self._locate(start) is None:
            self._runs.append(_Run(start, data))
            self._runs.sort(key=lambda r: r.start)
            self._last = self._locate(start)

    def prefetch(self, start: int, end: int) -> None:
        """Fetch the spans of [start, end) not held yet, exactly (a member whose extent is known)."""
        self.fetch_spans([(start, end)])

    def fetch_spans(self, spans: list[tuple[int, int]]) -> None:
        """Fetch the parts of ``spans`` not held yet, in parallel: each part its own range."""
        parts: list[tuple[int, int]] = []
        for start, end in sorted(spans):
            pos, end = max(0, start), min(end, self._len)
            while pos < end:
                run = self._locate(pos)
                if run is not None:
                    pos = run.end
                    continue
                stop = min(end, next((r.start for r in self._runs if r.start > pos), self._len))
                if parts and parts[-1][1] >= pos:  # overlapping requests: one range
                    pos = max(pos, parts[-1][1])
                    parts[-1] = (parts[-1][0], max(stop, parts[-1][1]))
                elif pos < stop:
                    parts.append((pos, stop))
                pos = stop
        self._fetch_parts(parts)

    def _fetch_parts(self, parts: list[tuple[int, int]]) -> None:
        datas = in_parallel(lambda span: self.blob.read(span[0], span[1] - span[0]), parts, len(parts) > 1)
        for (q, q_stop), data in zip(parts, datas):
            if len(data) != q_stop - q:
                raise InputError(f"{self.blob.name}: the server sent {len(data):,} bytes for a {q_stop - q:,}-byte "
                                 "range (the file changed or the server misreports lengths)")
            self.fetched += len(data)
            self._runs.append(_Run(q, data))
        self._runs.sort(key=lambda r: r.start)

    def _block_start(self, run: _Run) -> int:
        """Where the block of contiguous held spans that ends with ``run`` starts."""
        i = self._runs.index(run)
        while i > 0 and self._runs[i - 1].end == self._runs[i].start:
            i -= 1
        return self._runs[i].start

    def _fetch(self, start: int, end: int) -> None:
        """Fetch at least [start, end) (stopping before the next held span), with read-ahead."""
        # Sequential: right after the last span touched, or a few small fields past it (a walk over
        # small messages skips their bodies): half the run walked so far; a jump: the jump window.
        last = self._last
        window = self.jump_window
        if last is not None and last.end <= start:
            run_start = self._block_start(last)
            if run_start <= self.skipped_to <= last.end:
                run_start = self.skipped_to  # the walk skipped what came before: its run starts here
            half = max(_SPARSE_MIN, (last.end - run_start) // 2)
            if start < last.end + half:
                window = min(half, _SPARSE_MAX)
                if self._locate(last.end) is None:
                    start = last.end  # the few bytes skipped are fetched too: the copy of the run reads them next
        stop = min(max(end, start + window), self._len,
                   next((r.start for r in self._runs if r.start > start), self._len))
        self._fetch_parts([(start, stop)])
        self._last = self._locate(start)

    @overload
    def __getitem__(self, key: int) -> int: ...

    @overload
    def __getitem__(self, key: slice) -> bytes: ...

    def __getitem__(self, key: int | slice) -> int | bytes:
        if isinstance(key, int):
            if key < 0 or key >= self._len:
                raise IndexError(key)
            run = self._find(key)
            if run is None:
                self._fetch(key, key + 1)
                run = self._find(key)
                assert run is not None
            return run.data[key - run.start]
        start, stop, _ = key.indices(self._len)
        out = bytearray()
        pos = start
        while pos < stop:
            run = self._find(pos)
            if run is None:
                self._fetch(pos, stop)
                continue
            take = min(stop, run.end)
            out += run.data[pos - run.start:take - run.start]
            pos = take
        return bytes(out)


class FileView(Protocol):
    """A file indexed in place (``view[i]``, ``view[a:b]``, ``len(view)``) whose spans a reader asks
    for ahead (``fetch_spans``): a remote file's ``SparseView`` or a local file's ``MappedView``."""

    fetched: int  # bytes fetched so far (a mapped file's: none)
    holds_all: bool  # whether every byte is held (a mapped file): nothing is ever fetched

    def __len__(self) -> int: ...

    @overload
    def __getitem__(self, key: int) -> int: ...

    @overload
    def __getitem__(self, key: slice) -> bytes: ...

    def holds_span(self, start: int, end: int) -> bool: ...

    def fetch_spans(self, spans: list[tuple[int, int]]) -> None: ...

    def scanned(self) -> FileView | memoryview:
        """What a walk over many small fields indexes: the view itself, or a mapped file's memoryview
        (indexed in C; released by ``close``)."""

    def close(self) -> None: ...


class MappedView:
    """A local file as a ``FileView``: mapped on first use (read-only), every byte held, so nothing
    is ever fetched; only the pages of the bytes indexed are read from disk. ``close`` unmaps it.
    A file that cannot be mapped (gone, unreadable, not a regular file) raises InputError on use."""

    def __init__(self, path: Path, name: str | None = None) -> None:
        self.path = path
        self.name = name if name is not None else str(path)
        self._map: mmap.mmap | None = None
        self._memory: memoryview | None = None
        self.fetched = 0  # as SparseView counts it: never a byte
        self.holds_all = True

    def _mapped(self) -> mmap.mmap:
        if self._map is None:
            try:
                # Only a regular file is mapped: a FIFO or a device is never opened for reading.
                if not os.path.isfile(self.path):
                    raise InputError(f"{self.name}: not a regular file")
                with open(self.path, "rb") as fh:
                    self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as exc:  # ValueError: an empty file cannot be mapped
                raise InputError(f"{self.name}: cannot map: {exc}") from None
        return self._map

    def __len__(self) -> int:
        return len(self._mapped())

    @overload
    def __getitem__(self, key: int) -> int: ...

    @overload
    def __getitem__(self, key: slice) -> bytes: ...

    def __getitem__(self, key: int | slice) -> int | bytes:
        return self._mapped()[key]

    def holds_span(self, start: int, end: int) -> bool:
        return True

    def fetch_spans(self, spans: list[tuple[int, int]]) -> None:
        """Nothing to fetch: a mapped file holds every byte."""

    def scanned(self) -> memoryview:
        if self._memory is None:
            self._memory = memoryview(self._mapped())
        return self._memory

    def close(self) -> None:
        try:
            if self._memory is not None:
                self._memory.release()
            if self._map is not None:
                self._map.close()
        except BufferError:  # a slice of it is still alive: unmapped when collected
            pass
        self._memory = self._map = None


def file_view(blob: Blob, size: Callable[[], int | None] | None = None) -> FileView:
    """The view a reader indexes ``blob`` through: the file mapped when it is on this machine, else a
    ``SparseView`` that fetches what is touched, of the length ``size()`` says (when it knows one:
    what the reader knows of the file spares a request), else the blob's."""
    path = local_path(blob)
    if path is not None:
        return MappedView(path, blob.name)
    known = size() if size is not None else None
    return SparseView(blob, blob.size() if known is None else known)


class BlobFile(io.RawIOBase):
    """A read-only, seekable file over a SparseView, or over its span [start, start + size): what
    zipfile reads a remote archive through, and h5py an archive's stored weights member (only the
    headers it visits are fetched)."""

    def __init__(self, view: SparseView, start: int = 0, size: int | None = None) -> None:
        super().__init__()
        self.view = view
        self.start = start
        self.size = len(view) - start if size is None else size
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, size: int | None = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self.pos + size)
        if end <= self.pos:
            return b""
        data = self.view[self.start + self.pos:self.start + end]
        self.pos += len(data)
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[:len(data)] = data
        return len(data)


class HeadCached:
    """A blob whose first range is fetched once (``head()``) and served from memory to every read
    that falls in it: what tells the format apart (its first bytes) is what its reader needs first.
    A remote blob also keeps the other spans it fetches (a zip archive's tail and directory, which
    the member test reads before the archive's reader reads them again), up to ``_HELD_LIMIT``
    bytes: a reader's read is served from what is held and only the gaps are fetched."""

    def __init__(self, blob: Blob, first: int = FIRST_RANGE) -> None:
        self.blob = blob
        self.first = first
        self._head: bytes | None = None
        self._spans: list[_Run] = []  # held spans but the head, sorted, not overlapping
        self._held = 0
        self._end: int | None = None  # where the file ends, once a read came back short

    @property
    def name(self) -> str:
        return self.blob.name

    @property
    def basename(self) -> str:
        return self.blob.basename

    @property
    def speculative(self) -> bool:
        return self.blob.speculative

    def head(self) -> bytes:
        if self._head is None:
            self._head = self.blob.read(0, self.first)
            if len(self._head) < self.first:
                self._end = len(self._head)
        return self._head

    def size(self) -> int:
        return self._end if self._end is not None else self.blob.size()

    def known_size(self) -> int | None:
        return self._end if self._end is not None else self.blob.known_size()

    def _held_at(self, pos: int) -> bytes:
        """The held bytes from ``pos`` on to the end of the span holding it (b"": none)."""
        head = self._head
        if head is not None and pos < len(head):
            return head[pos:]
        for run in self._spans:
            if run.start <= pos < run.end:
                return run.data[pos - run.start:]
        return b""

    def _next_held(self, pos: int) -> int | None:
        return next((r.start for r in self._spans if r.start > pos), None)

    def _keep(self, start: int, data: bytes) -> None:
        if not self.blob.speculative or not data or self._held + len(data) > _HELD_LIMIT:
            return
        self._spans.append(_Run(start, data))
        self._spans.sort(key=lambda r: r.start)
        self._held += len(data)

    def read(self, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        if self._head is None and offset < self.first:
            self.head()  # the first read fetches the first range whole: the reader's first reads fall in it
        end = offset + length if self._end is None else min(offset + length, self._end)
        out = bytearray()
        pos = offset
        while pos < end:
            held = self._held_at(pos)
            if held:
                take = held[:end - pos]
                out += take
                pos += len(take)
                continue
            stop = self._next_held(pos)
            want = end - pos if stop is None else min(end, stop) - pos
            got = self.blob.read(pos, want)
            self._keep(pos, got)
            out += got
            pos += len(got)
            if len(got) < want:
                self._end = pos
                break
        return bytes(out)

    def tail(self, length: int) -> bytes:
        size = self.known_size()
        if size is None or not self._held_at(max(0, size - length)) and self.blob.speculative:
            data = self.blob.tail(length)
            size = self.blob.size()
            self._keep(size - len(data), data)
            return data[max(0, len(data) - length):]
        return self.read(max(0, size - length), min(length, size))


# What a remote HeadCached keeps besides its head: a zip archive's tail and directory (a torch.save
# checkpoint of a few thousand tensors), not a reader's walk.
_HELD_LIMIT = 1024 * 1024
