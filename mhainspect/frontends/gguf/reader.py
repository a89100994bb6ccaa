"""GGUF files (llama.cpp, Ollama, LM Studio): attention blocks from the header alone.

A GGUF file is a header (magic, version, key/value metadata, tensor infos) followed by the tensor
data. The header is parsed here from a read-only memory map with ``MADV_RANDOM`` (no read-ahead),
so only the pages the header occupies are ever faulted in; tensor data is never touched. Every
count and length in the header is checked against the bytes left in the file before it is used,
with the same validity rules as llama.cpp's own loader (gguf.cpp): version 2 or 3, at most 4 dims,
no negative or overflowing dims, rows a whole number of GGML blocks, no nested arrays, tensors laid
out in order inside the file. A malformed file is an InputError (one line, exit 2).

Why not ``gguf.GGUFReader``: it makes one numpy view per array element (12 s for a Llama-3
tokenizer on this machine) and loops forever on an array whose declared length runs past the end
of the file (a 41-byte file hangs it). The ``gguf`` package is used by the tests, to write files.

What the metadata means is here too, as llama.cpp reads it: {arch}.attention.head_count and
head_count_kv (scalars or per-layer arrays), key_length / value_length, embedding_length, with
llama.cpp's defaults when a key is absent, the sliding window and which layers slide, causal or
not. ``mhainspect.frontends.gguf.frontend`` groups the tensors into blocks and assembles them.
"""

from __future__ import annotations

import math
import mmap
import os
import posixpath
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mhainspect.errors import InputError, read_error
from mhainspect.frontends.gguf.kv_layers import kv_from_start, reused_kv_reason
from mhainspect.frontends.gguf.split import split_name
from mhainspect.frontends.gguf.swa import SwaLayout, disabled_note, swa_layout, unknown_pattern_warning
from mhainspect.ir.dtypes import ggml_name, lookup
from mhainspect.ir.limits import MAX_DIM, MAX_SHARD_FILES, bounded_numel
from mhainspect.ir.weights import HeadOffers, WeightMeta
from mhainspect.matchers.experts import ExpertClaims
from mhainspect.results import EvidenceSource
from mhainspect.sources import beside
from mhainspect.sources.blob import FIRST_RANGE, Blob, Prefix, local_path
from mhainspect.sources.parallel import in_parallel
from mhainspect.sources.tree import Tree

MAGIC = b"GGUF"

# Limits. The first two are llama.cpp's (ggml.h GGML_MAX_DIMS, GGUF_DEFAULT_ALIGNMENT); dims and
# element counts are int64 (mhainspect.ir.limits, shared by every reader);
# the others bound work and memory on hostile files far above any real model (a Llama-3 header has
# ~30 keys, ~300k tokenizer strings, 723 tensors).
MAX_DIMS = 4
DEFAULT_ALIGNMENT = 32
MAX_KEYS = 1 << 16
MAX_TENSORS = 1 << 20
MAX_NAME_BYTES = 1 << 16
MAX_ARRAY_STRINGS = 1 << 24  # strings walked over the whole header (tokenizer vocabularies and merges)
MAX_SHARDS = MAX_SHARD_FILES
_KEPT_ARRAY = 1 << 12  # numeric arrays up to this length are decoded (per-layer values); longer ones are not
_KEPT_STRING = 1 << 12  # string values up to this many bytes are decoded
_VOCABULARY_STRINGS = 1 << 10  # a string array this long is a vocabulary (before it: tags, languages)
# Bytes a token of the arrays that follow a vocabulary: scores (float32) and types (int32) in
# SentencePiece tokenizers, types in BPE ones (their merges then start in that margin: a sample).
_PER_TOKEN = 8
_MIN_KV = 8 + 4 + 1  # key length, value type, a one-byte value
_MIN_TENSOR_INFO = 8 + 4 + 4 + 8  # name length, n_dims, type, offset

# GGUF value types (gguf.h enum gguf_type): struct format of the fixed-size ones.
_STRING, _ARRAY = 8, 9
_SCALARS: dict[int, str] = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
                            12: "d"}


@dataclass(frozen=True)
class Unread:
    """A metadata value that is not decoded (a string array, a long array or string): its kind and length."""

    kind: str
    length: int


Scalar = int | float | bool | str
MetaValue = Scalar | tuple[Scalar, ...] | Unread


@dataclass(frozen=True)
class TensorInfo:
    """One tensor info record. ``ne`` is GGML's order (ne[0] is the row length, the contiguous
    axis): the reverse of numpy/PyTorch's shape. ``offset`` is relative to the data section."""

    name: str
    ne: tuple[int, ...]
    ggml_type: int
    dtype: str  # canonical name (mhainspect.ir.dtypes)
    offset: int
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.ne))

    @property
    def numel(self) -> int:
        return math.prod(self.ne)


@dataclass(frozen=True)
class GGUFHeader:
    path: str | Path  # a local path, or the name of a remote file (messages)
    version: int
    metadata: Mapping[str, MetaValue]
    tensors: tuple[TensorInfo, ...]
    data_offset: int  # where the data section starts (aligned)
    file_size: int


# ------------------------------------------------------------------------------ the header


def _q(name: str, limit: int = 120) -> str:
    """A name from the file, quoted for a one-line message: control characters escaped, long names cut."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in name[: limit + 1])
    return f"'{shown[:limit]}…'" if len(shown) > limit else f"'{shown}'"


class _Cursor:
    """Bounded reads from the header: every read checks the bytes left in the file first.

    ``buf`` is the whole file mapped (local), or the bytes held so far of a remote file (a
    ``Prefix``'s buffer, grown in place by ``grow(end, hint)``): then a read past the bytes held
    fetches more, from where they end, at least up to ``hint``, an estimate of what the reader
    will need next, so that the whole header comes in a few ranges: a string array (a tokenizer's
    vocabulary, its merges) is walked through the bytes held first, and the rest of it is fetched
    at the mean length of the strings walked, with a margin that also holds a sample of what
    follows (the next array's first strings: its own mean for the range after) and the tensor
    infos at their estimated size. A vocabulary of 128k tokens and 280k merges: 3 ranges."""

    def __init__(self, buf: mmap.mmap | bytearray, size: int, order: str, path: str | Path,
                 grow: Prefix | None = None) -> None:
        self.buf, self.size, self.order, self.path, self.pos = buf, size, order, path, 0
        self.strings_walked = 0
        self.grow = grow
        self.string_bytes = self.strings_measured = 0  # string lengths walked so far: the next ones' estimate
        self.vocabulary_walked = False  # a string array of a vocabulary's length walked (not short lists: tags)
        self.tail = 0  # an estimate of the tensor infos, added to a fetch so the last range holds them too

    def held(self) -> int:
        return self.size if self.grow is None else min(self.grow.held, self.size)

    def fetch(self, end: int, hint: int = 0) -> None:
        """Hold the bytes up to ``end`` (a remote file), fetching up to ``hint`` if it has to fetch."""
        if self.grow is not None and end > self.grow.held:
            # No estimate: grow by half of what is held (a few ranges for any header); an estimate
            # is taken as it is (it is sized to what comes next, so little past the header is fetched).
            # At least a first range's worth more: estimates that fall short by a little (later tokens
            # are longer) cost no run of tiny ranges; past the header, that is all that is fetched.
            target = max(hint if hint else self.grow.held * 3 // 2, self.grow.held + FIRST_RANGE) + self.tail
            self.grow.ensure(min(end, self.size), min(max(target, end), self.size))

    def avg_string(self) -> int:
        return self.string_bytes // self.strings_measured + 1 if self.strings_measured else 8

    def fail(self, what: str) -> InputError:
        return InputError(f"{self.path}: corrupt GGUF header: {what}")

    def left(self) -> int:
        return self.size - self.pos

    def check(self, n: int, what: str) -> None:
        """Fail unless the file has ``n`` bytes left from here (nothing is fetched)."""
        if n > self.left():
            raise self.fail(f"{what} needs {n:,} bytes at offset {self.pos:,}, the file has {self.left():,} left "
                            "(truncated?)")

    def need(self, n: int, what: str, hint: int = 0) -> None:
        self.check(n, what)
        if self.grow is not None:
            self.fetch(self.pos + n, hint)

    def scalar(self, fmt: str, what: str) -> int | float | bool:
        size = struct.calcsize(fmt)
        self.need(size, what)
        (value,) = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        self.pos += size
        return value  # type: ignore[no-any-return]

    def u32(self, what: str) -> int:
        return int(self.scalar("I", what))

    def u64(self, what: str) -> int:
        return int(self.scalar("Q", what))

    def raw_string(self, what: str, limit: int | None = None) -> tuple[int, int]:
        """(offset, length) of a string; the bytes are skipped, not copied."""
        n = self.u64(f"length of {what}")
        if limit is not None and n > limit:
            raise self.fail(f"{what} is {n:,} bytes long (at most {limit:,} allowed)")
        self.need(n, what)
        start = self.pos
        self.pos += n
        return start, n

    def text(self, what: str, limit: int) -> str:
        start, n = self.raw_string(what, limit)
        try:
            return bytes(self.buf[start:start + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8") from None

    def skip_strings(self, n: int, key: str) -> None:
        """Walk past ``n`` strings (tokenizer vocabularies: hundreds of thousands), lengths checked."""
        unpack = struct.Struct(self.order + "Q").unpack_from
        buf, pos, size = self.buf, self.pos, self.size
        start = pos
        i = 0
        mid_i, mid_pos = 0, pos  # where the later half of the strings walked in the last batch starts
        while True:
            held = self.held()
            # Remote: the held bytes are walked in two halves, so that the estimate of the rest can
            # follow the later strings (a vocabulary's tokens grow longer with their rank).
            for bound in ((held,) if self.grow is None else ((pos + held) // 2, held)):
                while i < n and pos + 8 <= bound:
                    after = pos + 8 + unpack(buf, pos)[0]
                    if after > bound:
                        break
                    pos = after
                    i += 1
                if bound != held:
                    mid_i, mid_pos = i, pos
            if i >= n or held >= size or self.grow is None:
                break
            end = pos + 8 if pos + 8 > held else pos + 8 + unpack(buf, pos)[0]
            if end > size:
                break
            self.fetch(end, pos + (n - i) * self._string_estimate(i, pos - start, i - mid_i, pos - mid_pos) * 6 // 5
                       + (_PER_TOKEN * n if not self.vocabulary_walked else 0) + FIRST_RANGE)
        if i < n:
            raise self.fail(f"string {i} of {_q(key)} runs past the end of the file (truncated?)")
        self.string_bytes += pos - start - 8 * n
        self.strings_measured += n
        self.vocabulary_walked = self.vocabulary_walked or n >= _VOCABULARY_STRINGS
        self.pos = pos

    def _string_estimate(self, walked: int, walked_bytes: int, late: int, late_bytes: int) -> int:
        """Bytes a string of an array (its length field included) is expected to take from here:
        the mean of those walked in it, or of the later half of them when longer (+20% and a first
        range's worth at the call site: what follows the array is sampled in that margin; after
        the first long string array, the vocabulary, also ``_PER_TOKEN`` bytes a token for the
        per-token arrays that follow it in tokenizers)."""
        if not walked:
            return 8 + self.avg_string()
        return max(walked_bytes // walked, late_bytes // late if late else 0) + 1

    def value(self, vtype: int, key: str) -> MetaValue:
        if vtype in _SCALARS:
            v = self.scalar(_SCALARS[vtype], f"value of {_q(key)}")
            return bool(v) if vtype == 7 else v
        if vtype == _STRING:
            start, n = self.raw_string(f"value of {_q(key)}")
            if n > _KEPT_STRING:
                return Unread("string", n)
            return bytes(self.buf[start:start + n]).decode("utf-8", errors="replace")
        if vtype == _ARRAY:
            return self.array(key)
        raise self.fail(f"key {_q(key)} has unknown value type {vtype}")

    def array(self, key: str) -> MetaValue:
        itype = self.u32(f"element type of {_q(key)}")
        n = self.u64(f"length of {_q(key)}")
        if itype == _ARRAY:
            raise self.fail(f"key {_q(key)} is an array of arrays (llama.cpp refuses nested arrays)")
        if itype == _STRING:
            self.check(8 * n, f"{n:,} strings of {_q(key)}")  # the strings held are walked before any fetch
            self.strings_walked += n
            if self.strings_walked > MAX_ARRAY_STRINGS:
                raise self.fail(f"more than {MAX_ARRAY_STRINGS:,} strings in metadata arrays (key {_q(key)})")
            self.skip_strings(n, key)
            return Unread("string array", n)
        fmt = _SCALARS.get(itype)
        if fmt is None:
            raise self.fail(f"key {_q(key)} is an array of unknown value type {itype}")
        size = struct.calcsize(fmt) * n
        # A fetch for it takes a first range more: the next array's first strings, for its estimate.
        self.need(size, f"{n:,} elements of {_q(key)}", self.pos + size + FIRST_RANGE)
        start = self.pos
        self.pos += size
        if n > _KEPT_ARRAY:
            return Unread("array", n)
        items = struct.unpack_from(f"{self.order}{n}{fmt}", self.buf, start)
        return tuple(bool(x) for x in items) if itype == 7 else tuple(items)


def read_header(path: Path) -> GGUFHeader:
    """The header of one GGUF file, validated; tensor data is never read (see the module docstring)."""
    try:
        if path.exists() and not path.is_file():  # a FIFO or a device: opening it could block
            raise InputError(f"{path}: not a regular file")
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < 4 + 4 + 8 + 8:
                raise InputError(f"{path}: not a GGUF file ({size} bytes, shorter than the 24-byte header)"
                                 if size else f"{path}: empty file")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                if hasattr(buf, "madvise") and hasattr(mmap, "MADV_RANDOM"):
                    buf.madvise(mmap.MADV_RANDOM)  # fault in the header's pages only: no read-ahead
                return _parse(buf, size, path)
    except OSError as exc:
        raise read_error(path, exc) from None
    except ValueError as exc:  # mmap of something that is not a regular file
        raise InputError(f"{path}: cannot map: {exc}") from None


# A remote header longer than this is refused before it is fetched (real ones: 6-15 MB, the
# tokenizer arrays; a length field that says more is corrupt or hostile).
MAX_REMOTE_HEADER = 256 * 1024 * 1024
# Bytes of one tensor info before any is read: a name of up to ~40 bytes and 3 dims (most are 60-80;
# a guess too long costs bytes past the header, one too short a range more).
_TENSOR_INFO_GUESS = 96


def read_header_blob(blob: Blob) -> GGUFHeader:
    """The header of a GGUF file, local or remote: a local file is memory-mapped (its header's pages
    fault in, nothing else), a remote one read in a few ranges that never fetch a byte twice; the
    tensor data is never fetched (bar the end of the last range)."""
    path = local_path(blob)
    if path is not None:
        return read_header(path)
    head = Prefix(blob, limit=MAX_REMOTE_HEADER)
    head.ensure(4 + 4 + 8 + 8)
    size = blob.size()
    if size < 4 + 4 + 8 + 8:
        raise InputError(f"{blob.name}: not a GGUF file ({size} bytes, shorter than the 24-byte header)"
                         if size else f"{blob.name}: empty file")
    return _parse(head.buf, size, blob.name, head)


def _parse(buf: mmap.mmap | bytearray, size: int, path: str | Path, grow: Prefix | None = None) -> GGUFHeader:
    if buf[:4] != MAGIC:
        raise InputError(f"{path}: not a GGUF file (no GGUF magic)")
    (version,) = struct.unpack_from("<I", buf, 4)
    order = "<"
    if version & 0xFFFF == 0 and version:  # written on a host of the other byte order
        order, version = ">", struct.unpack_from(">I", buf, 4)[0]
    if version == 1:
        raise InputError(f"{path}: GGUF version 1 is not supported (llama.cpp dropped it too)")
    if version not in (2, 3):
        raise InputError(f"{path}: unsupported GGUF version {version} (2 and 3 are known)")
    cur = _Cursor(buf, size, order, path, grow)
    cur.pos = 8
    n_tensors = cur.u64("tensor count")
    cur.tail = n_tensors * _TENSOR_INFO_GUESS
    n_kv = cur.u64("key count")
    if n_kv > MAX_KEYS or n_tensors > MAX_TENSORS or n_kv * _MIN_KV + n_tensors * _MIN_TENSOR_INFO > cur.left():
        raise cur.fail(f"declares {n_kv:,} keys and {n_tensors:,} tensors, more than its {cur.left():,} header "
                       f"bytes can hold (or above {MAX_KEYS:,} keys / {MAX_TENSORS:,} tensors)")
    metadata: dict[str, MetaValue] = {}
    for _ in range(n_kv):
        key = cur.text("a metadata key", MAX_NAME_BYTES)
        if key in metadata:
            raise cur.fail(f"duplicate key {_q(key)}")
        metadata[key] = cur.value(cur.u32(f"value type of {_q(key)}"), key)
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 \
            or alignment & (alignment - 1):
        raise cur.fail(f"general.alignment {alignment!r} is not a power of two")
    tensors: list[TensorInfo] = []
    names: set[str] = set()
    infos_start = cur.pos
    for i in range(n_tensors):
        if grow is not None and cur.pos + 256 > cur.held():  # the rest of the infos, at their size so far
            per = (cur.pos - infos_start) // i + 1 if i else _TENSOR_INFO_GUESS
            cur.fetch(cur.pos + 1, cur.pos + (n_tensors - i) * per * 11 // 10)
        tensors.append(_tensor_info(cur, names))
    data_offset = -(-cur.pos // alignment) * alignment
    expected = 0
    for t in tensors:
        if t.offset != expected:
            raise cur.fail(f"tensor {_q(t.name)} has data offset {t.offset:,}, expected {expected:,} (tensors are "
                           "laid out in order, each padded to the alignment)")
        end = data_offset + t.offset + t.nbytes
        if end > size:
            raise cur.fail(f"tensor {_q(t.name)} ends at byte {end:,}, past the end of the {size:,}-byte file "
                           "(truncated?)")
        expected += -(-t.nbytes // alignment) * alignment
    return GGUFHeader(path, version, metadata, tuple(tensors), data_offset, size)


def _tensor_info(cur: _Cursor, names: set[str]) -> TensorInfo:
    name = cur.text("a tensor name", MAX_NAME_BYTES)
    if name in names:
        raise cur.fail(f"duplicate tensor name {_q(name)}")
    names.add(name)
    n_dims = cur.u32(f"dim count of {_q(name)}")
    if n_dims > MAX_DIMS:
        raise cur.fail(f"tensor {_q(name)} has {n_dims:,} dims (at most {MAX_DIMS})")
    ne = tuple(cur.u64(f"dims of {_q(name)}") for _ in range(n_dims))
    for d in ne:
        if d > MAX_DIM:
            raise cur.fail(f"tensor {_q(name)} has a negative dim ({d - (1 << 64)} as int64)")
    numel = bounded_numel(ne)
    if numel is None:
        raise cur.fail(f"tensor {_q(name)} dims {list(ne)} hold more elements than int64 counts")
    code = cur.u32(f"type of {_q(name)}")
    dtype = ggml_name(code)
    found = lookup(dtype) if dtype is not None else None
    if dtype is None or found is None:
        raise cur.fail(f"tensor {_q(name)} has unknown GGML type {code}")
    row = ne[0] if ne else 1
    if row % found.block_size:
        raise cur.fail(f"tensor {_q(name)} rows of {row} elements are not a whole number of {dtype} blocks "
                       f"({found.block_size} elements each)")
    offset = cur.u64(f"data offset of {_q(name)}")
    return TensorInfo(name, ne, code, dtype, offset, found.nbytes(numel))


# ------------------------------------------------------------------------------ split files and folders


# Parts of a split GGUF model tried where no listing names them (a URL's folder): each is a request
# (real split models have up to a few dozen parts; a listed folder may hold up to MAX_SHARD_FILES).
MAX_GUESSED_PARTS = 256


def split_paths(path: str, display: str, listed: bool = True) -> list[str]:
    """Every file of the split model ``path`` belongs to (``*-00001-of-00003.gguf`` ...), as paths
    of its folder, or [path]; ``listed``: whether the folder's listing says which exist (else each
    part is tried, at most MAX_GUESSED_PARTS)."""
    m = split_name(posixpath.basename(path))
    if m is None:
        return [path]
    count = int(m.group("count"))
    if count < 1 or count > MAX_SHARDS or not 1 <= int(m.group("no")) <= count:
        raise InputError(f"{display}: split file name says part {int(m.group('no'))} of {count}")
    if not listed and count > MAX_GUESSED_PARTS:
        raise InputError(f"{display}: split file name says {count:,} parts; a URL's folder is not listed, so "
                         f"parts are tried one by one, at most {MAX_GUESSED_PARTS}: read it where its folder is "
                         "listed (hf://, s3://, gs://, az://)")
    return [beside(path, f"{m.group('stem')}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def read_model_tree(tree: Tree, path: str, display: str, blob: Blob, remote: bool) -> GGUFModel:
    """The model the GGUF file ``path`` of ``tree`` (named ``display``) is: every part of a split
    model, their headers read in parallel when remote."""
    parts = split_paths(path, display, tree.complete)
    if len(parts) > 1 and tree.complete:
        files = tree.files()
        missing = [posixpath.basename(p) for p in parts if p not in files]
        if missing:
            raise InputError(f"{display}: split model is missing {len(missing)} of its {len(parts)} files, first "
                             f"{_q(missing[0])}")
    headers = in_parallel(lambda p: read_header_blob(blob if p == path else tree.blob(p)), parts, remote)
    first = parts[0]
    return merge_parts(display if first == path else beside(display, posixpath.basename(first)), headers)


def is_later_split_part(path: Path) -> bool:
    """A split file other than the first: a folder scan lists the model once, by its first file."""
    m = split_name(path.name)
    return m is not None and int(m.group("no")) > 1


@dataclass(frozen=True)
class GGUFModel:
    """One model: its files' headers merged (metadata from the first file)."""

    path: str | Path
    metadata: Mapping[str, MetaValue]
    tensors: tuple[tuple[str, TensorInfo], ...]  # (the file's name, the tensor)


def read_model(path: Path) -> GGUFModel:
    """The model of a local GGUF file (see read_model_tree)."""
    from mhainspect.sources.transports.local import LocalTree

    tree = LocalTree(path.parent)
    return read_model_tree(tree, path.name, str(path), tree.blob(path.name), remote=False)


def merge_parts(path: str | Path, headers: list[GGUFHeader]) -> GGUFModel:
    """One model from the headers of its files (one, or every part of a split model, in order),
    checked as llama.cpp checks them."""
    first = headers[0]
    parts = headers
    declared = first.metadata.get("split.count")
    if len(parts) > 1 or (isinstance(declared, int) and declared > 1):
        if declared != len(parts):
            raise InputError(f"{path}: split.count is {declared!r} but the file names say {len(parts)} files")
        for i, h in enumerate(headers):
            if h.metadata.get("split.no") != i:
                raise InputError(f"{h.path}: split.no is {h.metadata.get('split.no')!r}, expected {i}")
    tensors: list[tuple[str, TensorInfo]] = []
    seen: set[str] = set()
    for h in headers:
        for t in h.tensors:
            if t.name in seen:
                raise InputError(f"{h.path}: tensor {_q(t.name)} is also in another file of the split model")
            seen.add(t.name)
            tensors.append((_file_name(h.path), t))
    total = first.metadata.get("split.tensors.count")
    if isinstance(total, int) and not isinstance(total, bool) and total != len(tensors):
        raise InputError(f"{path}: split.tensors.count is {total} but the files hold {len(tensors)} tensors")
    return GGUFModel(first.path, first.metadata, tuple(tensors))


def _file_name(path: str | Path) -> str:
    return path.name if isinstance(path, Path) else path.rstrip("/").rsplit("/", 1)[-1]


# ------------------------------------------------------------------------------ metadata semantics


def _uint(v: MetaValue | None) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


@dataclass(frozen=True)
class _Key:
    """A per-layer metadata value: a scalar, or an array with one entry per layer (llama.cpp's
    get_key_or_arr)."""

    name: str
    value: MetaValue | None

    def at(self, layer: int | None) -> int | None:
        v = self.value
        if isinstance(v, tuple):
            if layer is None or layer >= len(v):
                return None
            return _uint(v[layer])
        return _uint(v)

    def describe(self, layer: int | None) -> str:
        if isinstance(self.value, tuple):
            raw = self.value[layer] if layer is not None and layer < len(self.value) else None
            return f"{self.name}[{layer}] = {raw}"
        return f"{self.name} = {self.value}"


@dataclass(frozen=True)
class Namespace:
    """The metadata keys describing one stack of blocks: ``{arch}.`` or a sub-model (``clip.vision.``)."""

    prefix: str  # e.g. "llama." or "clip.vision."
    metadata: Mapping[str, MetaValue]

    def key(self, name: str) -> _Key:
        full = self.prefix + name
        return _Key(full, self.metadata.get(full))

    @property
    def arch(self) -> str:
        return self.prefix.rstrip(".")

    def swa(self) -> SwaLayout | None:
        """Which layers of this stack slide (``mhainspect.frontends.gguf.swa``), or None."""
        return swa_layout(self.arch, self.prefix, self.metadata)


def offers_for(ns: Namespace, layer: int | None, swa: bool) -> list[HeadOffers]:
    """What the metadata says about the block of ``layer``, one offer per number, with llama.cpp's
    defaults where a key is absent (head_count_kv = head_count; key_length and value_length =
    embedding_length / head_count of layer 0)."""
    heads, kv = ns.key("attention.head_count"), ns.key("attention.head_count_kv")
    n_embd = ns.key("embedding_length")
    out: list[HeadOffers] = []
    h = heads.at(layer)
    if h:
        out.append(HeadOffers(num_heads=h, source="gguf", detail=f"GGUF {heads.describe(layer)}"))
    g = kv.at(layer)
    if g:
        out.append(HeadOffers(num_kv_heads=g, source="gguf", detail=f"GGUF {kv.describe(layer)}"))
    elif h and kv.value is None:
        out.append(HeadOffers(num_kv_heads=h, source="gguf", detail=f"GGUF {kv.name} absent (llama.cpp: = "
                                                                     f"head_count {h})"))
    for which in ("key_length", "value_length"):
        k = ns.key(f"attention.{which}_swa") if swa else ns.key(f"attention.{which}")
        if swa and k.value is None:
            k = ns.key(f"attention.{which}")
        d, detail = k.at(layer), f"GGUF {k.describe(layer)}"
        h0, e = heads.at(0), n_embd.at(None)
        if d is None and h0 and e:
            d, detail = e // h0, f"GGUF {k.name} absent (llama.cpp: {n_embd.name} {e} / head_count {h0})"
        if d:
            out.append(HeadOffers(head_dim=d, source="gguf", detail=detail) if which == "key_length"
                       else HeadOffers(v_head_dim=d, source="gguf", detail=detail))
    return out


def latent_offers_for(ns: Namespace, layer: int | None) -> list[HeadOffers]:
    """What the metadata says about a latent-attention block (llama.cpp's deepseek2 keys): heads,
    the latent widths (kv_lora_rank, q_lora_rank, rope.dimension_count) and the per-head key and
    value widths: key_length_mla / value_length_mla where the file has them (it then describes the
    cache as one K/V head of key_length = kv_lora_rank + rope wide: not the heads'), else
    key_length / value_length. head_count_kv is no claim about the per-head K/V here (files with
    the latent cache say 1)."""
    out: list[HeadOffers] = []
    heads = ns.key("attention.head_count")
    if (h := heads.at(layer)) is not None and h:
        out.append(HeadOffers(num_heads=h, source="gguf", detail=f"GGUF {heads.describe(layer)}"))
    mla = ns.key("attention.key_length_mla").value is not None
    for field, name in (("head_dim", "key_length_mla" if mla else "key_length"),
                        ("v_head_dim", "value_length_mla" if mla else "value_length"),
                        ("kv_rank", "kv_lora_rank"), ("q_rank", "q_lora_rank")):
        k = ns.key(f"attention.{name}")
        if (v := k.at(layer)) is not None and v:
            said = {field: v}
            out.append(HeadOffers(source="gguf", detail=f"GGUF {k.describe(layer)}", head_dim=said.get("head_dim"),
                                  v_head_dim=said.get("v_head_dim"), kv_rank=said.get("kv_rank"),
                                  q_rank=said.get("q_rank")))
    rope = ns.key("rope.dimension_count")
    if (r := rope.at(None)) is not None and r:
        out.append(HeadOffers(rope_dim=r, source="gguf", detail=f"GGUF {rope.describe(None)}"))
    return out


# ------------------------------------------------------------------------------ tensors -> blocks

_LAYER = re.compile(r"(?:^|\.)(?:blk|layers?|posnet)\.(\d+)$")
SUB_MODELS = {"v": "vision", "a": "audio"}  # mmproj files: v.blk.N / a.blk.N under {arch}.vision. / .audio.


def weight_meta(source: str, t: TensorInfo) -> WeightMeta:
    # GGML's ne[0] is a weight's input width: reversed, the shape reads (out, in) as nn.Linear's.
    return WeightMeta(t.name, t.shape, t.dtype, f"{source}:{t.offset}", layout="out_in")


def layer_of(scope: str) -> int | None:
    """The layer index of a block scope (blk.N, enc.blk.N, v.blk.N)."""
    m = _LAYER.search(scope)
    return int(m.group(1)) if m else None


def namespace(arch: str, scope: str, metadata: Mapping[str, MetaValue]) -> Namespace:
    first = scope.split(".", 1)[0]
    sub = SUB_MODELS.get(first)
    if sub is not None:
        prefix = f"{arch}.{sub}."
        if any(k.startswith(prefix) for k in metadata):
            return Namespace(prefix, metadata)
    return Namespace(f"{arch}.", metadata)


def architecture(metadata: Mapping[str, MetaValue]) -> tuple[str, list[str]]:
    arch = metadata.get("general.architecture")
    if isinstance(arch, str) and arch:
        return arch, []
    found = sorted({k[: -len(".attention.head_count")] for k in metadata if k.endswith(".attention.head_count")})
    if found:
        return found[0].split(".")[0], [f"general.architecture missing: head counts read from '{found[0]}.*'"]
    return "", ["general.architecture missing and no *.attention.head_count key: heads only from shapes"]


@dataclass(frozen=True)
class Decoding:
    """What the file says about one block during llama.cpp's autoregressive decoding: whether it
    caches K/V per token (and why), and the sliding window of a sliding layer."""

    caches: bool
    reason: str
    window: int | None = None
    window_source: str = ""
    # A latent block whose file keeps the unsplit attn_kv_b: llama.cpp then caches the per-head K/V
    # (its MLA cache needs attn_k_b / attn_v_b).
    latent_expanded: bool = False
    kv_from: int | None = None  # the layer whose cache this one reuses (llama.cpp's reuse callback)


KV_CACHE_DTYPE = "float16"  # llama.cpp's default K/V cache type (its -ctk / -ctv options change it)
KV_CACHE_DTYPE_SOURCE = "llama.cpp's default cache type f16 (-ctk/-ctv change it)"


def decoding(name: str, cross: bool, ns: Namespace, layer: int | None,
             metadata: Mapping[str, MetaValue], *, latent_expanded: bool = False) -> Decoding:
    """How the block ``name`` (``{scope}.{kind}``) of a GGUF model decodes, from the metadata."""
    scope = name.rsplit(".", 1)[0]
    causal = metadata.get(ns.prefix + "attention.causal")
    if causal is False:
        return Decoding(False, f"GGUF {ns.prefix}attention.causal = false: a bidirectional encoder, run once")
    if scope.split(".", 1)[0] in ("enc", *SUB_MODELS) and not cross:
        return Decoding(False, f"GGUF '{scope}' is an encoder block (runs once over its input)")
    reused = None if cross else reused_kv_reason(ns.arch, ns.prefix, metadata, layer)
    if reused is not None:
        return Decoding(False, reused, kv_from=_reused_layer(ns, metadata, layer))
    reason = ("GGUF cross-attention of a decoder: K/V computed once from the encoder output" if cross
              else f"GGUF {ns.prefix.rstrip('.')}: llama.cpp decodes autoregressively (causal attention)")
    if latent_expanded:
        reason += ("; the file keeps the unsplit attn_kv_b, so llama.cpp caches the per-head K/V (its latent cache "
                   "needs attn_k_b / attn_v_b)")
    layout = ns.swa()
    if layout is not None and not cross and layer is not None and layer < len(layout.slides) and layout.slides[layer]:
        return Decoding(True, reason, layout.window, f"{layout.window_source}, {layout.pattern(layer)}",
                        latent_expanded)
    off = disabled_note(ns.arch, metadata, ns.prefix)
    return Decoding(True, f"{reason}; {off}" if off is not None and not cross else reason,
                    latent_expanded=latent_expanded)


def _reused_layer(ns: Namespace, metadata: Mapping[str, MetaValue], layer: int | None) -> int | None:
    """The layer whose cache layer ``layer`` reuses: the last one with a cache of its own that is of
    its kind (sliding or not, as ``swa_layout`` says), as llama.cpp's reuse callback picks it."""
    found = kv_from_start(ns.arch, ns.prefix, metadata)
    if found is None or layer is None:
        return None
    layout = ns.swa()
    slides = layout.slides if layout is not None else ()

    def kind(i: int) -> bool:
        return i < len(slides) and slides[i]

    return next((j for j in range(found[0] - 1, -1, -1) if kind(j) == kind(layer)), None)


def swa_warnings(metadata: Mapping[str, MetaValue], arch: str) -> list[str]:
    found = unknown_pattern_warning(arch, metadata)
    return [found] if found is not None else []


# general.type values of GGUF files that are not a whole model (gguf-py's GGUFType; llama.cpp's
# convert_lora_to_gguf.py writes "adapter", vocab-only conversions "vocab"): what the file holds instead.
NOT_A_MODEL = {
    "adapter": "a LoRA adapter: low-rank deltas (lora_a / lora_b) for a base model's layers; the base model's "
               "attention blocks and KV cache are not in this file",
    "vocab": "a vocabulary-only file (tokenizer, no weights): no attention blocks, no KV cache",
}


def file_type_warnings(metadata: Mapping[str, MetaValue]) -> list[str]:
    """What a file that is not a whole model holds (general.type), so an empty report is not read as
    "a model without attention"."""
    kind = metadata.get("general.type")
    said = NOT_A_MODEL.get(kind) if isinstance(kind, str) else None
    return [f"GGUF general.type = {kind}: {said}"] if said else []


def model_weights(model: GGUFModel) -> dict[str, WeightMeta]:
    """Every tensor as weight metadata (logical shape, canonical GGML dtype), for the size report."""
    return {t.name: weight_meta(source, t) for source, t in model.tensors}


def context_length(metadata: Mapping[str, MetaValue], arch: str) -> int | None:
    """``{arch}.context_length``: the context the model was trained for (None when absent or 0)."""
    return _uint(metadata.get(f"{arch}.context_length")) or None


def producer(metadata: Mapping[str, MetaValue], arch: str) -> str:
    name = metadata.get("general.name")
    label = arch or "unknown architecture"
    return f"{name} ({label})" if isinstance(name, str) and name else label




def expert_claims(metadata: Mapping[str, MetaValue], arch: str) -> ExpertClaims | None:
    """``{arch}.expert_count``, ``expert_used_count`` and ``expert_shared_count``: what llama.cpp
    reads to route a mixture of experts (None when the file names no experts)."""

    def read(key: str) -> tuple[int, str] | None:
        value = _uint(metadata.get(f"{arch}.{key}"))
        return None if value is None else (value, f"GGUF {arch}.{key} = {value:,}")

    experts, used = read("expert_count"), read("expert_used_count")
    if experts is None and used is None:
        return None
    return ExpertClaims(EvidenceSource.GGUF, experts, used, read("expert_shared_count"))
