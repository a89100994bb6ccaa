"""A torch.save file read by ranges, local or remote: its pickle, never a tensor; without torch.

A zip-format PyTorch checkpoint (``.pt/.pth/.bin/.ckpt`` from torch >= 1.6) is a stored (never
compressed) zip archive: ``<name>/data.pkl`` describes the objects, and every storage is a member
``<name>/data/<key>``. The tensors' names, shapes and dtypes are all in the pickle, so a remote
file costs the archive's directory (one range from the end) and the pickle (one range more): the
storages are never fetched, bar the few bytes of the small integer tensors that state a quantized
weight's logical shape. A legacy file (torch < 1.6, or ``_use_new_zipfile_serialization=False``)
is a run of pickles from byte 0 with the storages after them: the pickles cost a range or two.

The pickles are read by the project's one restricted pickle reader (``frontends.pickles``: records,
never objects) with the allow-list of torch's own weights-only loader (state dicts of tensors,
parameters, OrderedDicts, sizes, dtypes, devices); every other global is refused in torch's words:
nothing from the file runs.
"""

from __future__ import annotations

import pickletools
import struct
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

from mhainspect.errors import InputError
from mhainspect.frontends.checkpoint.quantized import MAX_VALUE_BYTES, wants_values
from mhainspect.frontends.checkpoint.reader import flatten_state_dict
from mhainspect.frontends.formats import archive_members
from mhainspect.frontends.pickles import Global, RefusedGlobal, TensorRecord, read_pickle
from mhainspect.ir.dtypes import INTEGER_STRUCT_CODES, TORCH_STORAGE_TYPES, canonical, nbytes
from mhainspect.ir.weights import WeightMeta
from mhainspect.sources.blob import Blob, BlobFile, HeadCached, LocalBlob, Prefix, SparseView
from mhainspect.sources.parallel import in_parallel

# The end of an archive read first: the end-of-directory record and its zip64 locator, and the
# directory of a small archive (~80 bytes per tensor); a larger directory costs one range more,
# exactly its extent. The pickle is the archive's first member: in the range the file was told
# apart by (``HeadCached``), when it is shorter than that.
TAIL_RANGE = 1024
MAX_PICKLE_BYTES = 256 * 1024 * 1024  # a pickle longer than this is not a state dict's
_LOCAL_HEADER = 30
_LOCAL_EXTRA_GUESS = 128  # torch pads the local header's extra field to align the data (64 bytes)

# The globals torch's weights-only loader allows in a state dict (torch/_weights_only_unpickler.py),
# beside torch's storage classes and dtypes: a pickle that names any other is refused, as it is locally.
_ALLOWED = frozenset({
    "collections.OrderedDict", "collections.Counter", "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_tensor_v3", "torch._utils._rebuild_parameter",
    "torch._utils._rebuild_parameter_with_state", "torch._tensor._rebuild_from_type_v2",
    "torch.nn.parameter.Parameter", "torch.Tensor", "torch.Size", "torch.device",
    "torch.serialization._get_layout", "_codecs.encode", "builtins.bytearray", "builtins.set", "builtins.complex",
    "torch.storage.UntypedStorage", "torch._utils._rebuild_qtensor", "torch.per_tensor_affine",
    "torch.per_channel_affine", "torch.per_tensor_symmetric", "torch.per_channel_symmetric",
    "torch.per_channel_affine_float_qparams",
})
# dtypes a GLOBAL may name (torch.<name>): those of the storage classes, and the ones saved beside an
# untyped storage (torch.storage._new_dtypes).
_DTYPE_NAMES = frozenset(set(TORCH_STORAGE_TYPES.values()) | {
    "float", "double", "half", "long", "int", "short", "cfloat", "cdouble",
    "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
    "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2", "complex32", "uint16", "uint32", "uint64",
    *(f"uint{i}" for i in range(1, 8)), *(f"int{i}" for i in range(1, 8))})


def weights_only(named: Global) -> bool:
    """Whether torch's weights-only loader allows this global in a state dict."""
    if named.module == "torch" and (named.name in TORCH_STORAGE_TYPES or named.name in _DTYPE_NAMES):
        return True
    return named.qualified in _ALLOWED


def read_torch_file(blob: Blob, values: dict[str, tuple[int, ...]] | None = None,
                    unpickling_reason: Callable[[str], str] = str) -> dict[str, WeightMeta]:
    """A torch.save file, local or remote, without torch: a zip archive (torch >= 1.6) by its
    directory and its pickle, a legacy file (a run of pickles, the storages after them) by its
    pickles; both through the one restricted pickle reader with torch's weights-only allow-list."""
    if isinstance(blob, (LocalBlob, HeadCached)):  # its first byte costs no request: it says which
        first = blob.head()[:1] if isinstance(blob, HeadCached) else blob.read(0, 1)
        if first == b"\x80":
            return read_torch_legacy(blob, values, unpickling_reason)
    try:  # a shard of a folder: zip first (what torch >= 1.6 writes), its directory read from the end
        return read_torch_zip(blob, values, unpickling_reason)
    except _LegacyFile:
        return read_torch_legacy(blob, values, unpickling_reason)


class _LegacyFile(Exception):
    """Not a zip archive (no end-of-directory record at its end; or a pickle at its start): a legacy
    torch.save file, or no checkpoint at all (the legacy reader says which)."""


_END_OF_DIRECTORY = b"PK\x05\x06"


# A legacy torch.save file (torch/serialization.py, _legacy_save) is five pickles in a row: torch's
# magic number, the protocol version, a small dict of sys info, the object (storages as persistent
# ids), the sorted list of storage keys; then each storage in that order: an int64 element count
# and its bytes.
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_FIRST = 64 * 1024  # the first range: the three small pickles and a small state dict's


def _pickle_end(head: Prefix, start: int, what: str) -> int:
    """Where the pickle that starts at ``start`` ends (after its STOP), growing the bytes held
    (doubling, up to MAX_PICKLE_BYTES) until its STOP is in them. Decoding only: nothing runs."""
    want = head.held - start if head.held > start else _LEGACY_FIRST  # what is held first: no request
    while True:
        held = head.ensure(start + want) - start
        try:
            for op, _, pos in pickletools.genops(bytes(head.buf[start:start + held])):
                if op.name == "STOP" and pos is not None:
                    return start + pos + 1
        except ValueError:
            pass  # cut short: the pickle goes on past the bytes held
        if held < want or want >= MAX_PICKLE_BYTES:
            raise InputError(f"{what}: truncated pickle (no STOP in {held:,} bytes)")
        want = min(2 * max(want, _LEGACY_FIRST // 2), MAX_PICKLE_BYTES)


def read_torch_legacy(blob: Blob, values: dict[str, tuple[int, ...]] | None = None,
                      unpickling_reason: Callable[[str], str] = str) -> dict[str, WeightMeta]:
    """Tensor metadata of a legacy (non-zip) torch.save file: its pickles read as records from the
    file's start; the storages are never read, bar the few bytes of the small integer tensors that
    state a quantized weight's logical shape. ``values`` and ``unpickling_reason`` as for
    read_torch_zip."""
    what = f"{blob.name}: cannot read as a PyTorch checkpoint"
    head = Prefix(blob, first=_LEGACY_FIRST, limit=None)
    if head.read(0, 1) != b"\x80":
        raise InputError(f"{blob.name}: not a PyTorch checkpoint (neither a zip archive nor a pickle)")
    pickles: list[Any] = []
    pos = 0
    try:
        for _ in range(5):
            end = _pickle_end(head, pos, what)
            pickles.append(read_pickle(bytes(head.buf[pos:end]), what, weights_only))
            pos = end
            if len(pickles) == 1 and (type(pickles[0]) is not int or pickles[0] != _LEGACY_MAGIC):
                raise InputError(f"{blob.name}: not a PyTorch checkpoint (a pickle, but not one torch.save wrote: "
                                 "no magic number)")
    except RefusedGlobal as exc:
        reason = unpickling_reason(f"Weights only load failed. Unsupported global: GLOBAL {exc.qualified}")
        raise InputError(f"{blob.name}: refused: {reason}; nothing from the file was run") from None
    obj, keys = pickles[3], pickles[4]
    tensors: dict[str, TensorRecord] = {}
    flatten_state_dict(obj, "", tensors, TensorRecord, depth=0)
    if not tensors:
        raise InputError(f"{blob.name}: no tensors found (expected a state dict)")
    out = {name: WeightMeta(name, t.shape, canonical(f"torch.{t.dtype}"), _storage_key(blob.basename, name, t))
           for name, t in tensors.items()}
    if values is not None and isinstance(keys, list):
        values.update(_legacy_values(blob, pos, [str(k)[:200] for k in keys], tensors, out))
    return out


def _legacy_values(blob: Blob, start: int, keys: list[str], tensors: Mapping[str, TensorRecord],
                   metas: Mapping[str, WeightMeta]) -> dict[str, tuple[int, ...]]:
    """The small integer tensors a quantized weight's logical shape is stated in, from a legacy
    file's storages: each storage's offset follows from the ones before it (their element counts
    and item sizes), walked only as far as the last storage wanted."""
    wanted = {name: t for name, t in tensors.items() if wants_values(name) and metas[name].dtype in INTEGER_STRUCT_CODES
              and _contiguous(t)}
    if not wanted:
        return {}
    itemsize = {t.storage: nbytes(metas[n].dtype, 1) for n, t in tensors.items()}
    order = {key: i for i, key in enumerate(keys)}
    last = max((order[t.storage] for t in wanted.values() if t.storage in order), default=-1)
    at: dict[str, int] = {}
    pos = start
    for key in keys[:last + 1]:
        width = itemsize.get(key)
        raw = blob.read(pos, 8)
        if width is None or len(raw) < 8:
            break  # a storage of a size not known here: the ones after it cannot be placed
        at[key] = pos + 8
        pos += 8 + struct.unpack("<q", raw)[0] * width
    out: dict[str, tuple[int, ...]] = {}
    for name, t in wanted.items():
        code = INTEGER_STRUCT_CODES[metas[name].dtype]
        width = struct.calcsize(code)
        numel = 1
        for d in t.shape:
            numel *= d
        if t.storage not in at or numel * width > MAX_VALUE_BYTES:
            continue
        raw = blob.read(at[t.storage] + t.offset * width, numel * width)
        if len(raw) == numel * width:
            out[name] = struct.unpack(f"<{numel}{code}", raw)
    return out


def read_torch_zip(blob: Blob, values: dict[str, tuple[int, ...]] | None = None,
                   unpickling_reason: Callable[[str], str] = str) -> dict[str, WeightMeta]:
    """Tensor metadata of a zip-format torch.save file that answers ranged reads; ``values`` as for
    read_safetensors_header. ``unpickling_reason`` words a refusal as the local reader does."""
    archive, view = _open_archive(blob)
    info = _pickle_member(blob, archive, len(view))
    view.prefetch(info.header_offset,
                  info.header_offset + _LOCAL_HEADER + len(info.filename) + _LOCAL_EXTRA_GUESS + info.compress_size)
    try:
        obj = read_pickle(archive.read(info), f"{blob.name}: cannot read as a PyTorch checkpoint", weights_only)
    except RefusedGlobal as exc:
        # The words of torch's weights-only loader, which the local reader's message quotes.
        reason = unpickling_reason(f"Weights only load failed. Unsupported global: GLOBAL {exc.qualified}")
        raise InputError(f"{blob.name}: refused: {reason}; nothing from the file was run") from None
    except (EOFError, ValueError, struct.error, zipfile.BadZipFile) as exc:
        raise InputError(f"{blob.name}: cannot read as a PyTorch checkpoint: {exc}") from None
    tensors: dict[str, TensorRecord] = {}
    flatten_state_dict(obj, "", tensors, TensorRecord, depth=0)
    if not tensors:
        raise InputError(f"{blob.name}: no tensors found (expected a state dict)")
    root = info.filename.rsplit("/", 1)[0] + "/" if "/" in info.filename else ""
    out = {name: WeightMeta(name, t.shape, canonical(f"torch.{t.dtype}"), _storage_key(blob.basename, name, t))
           for name, t in tensors.items()}
    if values is not None:
        values.update(_small_values(archive, view, root, tensors, out, blob.speculative))
    return out


def _open_archive(blob: Blob) -> tuple[zipfile.ZipFile, SparseView]:
    """The archive's directory, read from a range at its end (and the rest of a long directory)."""
    tail = blob.tail(TAIL_RANGE)
    if _END_OF_DIRECTORY not in tail:  # torch writes no archive comment: a zip's end record is in the tail
        raise _LegacyFile
    size = blob.size()
    view = SparseView(blob, size)
    view.seed(size - len(tail), tail)
    try:
        return zipfile.ZipFile(BlobFile(view)), view
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, ValueError, EOFError,
            struct.error) as exc:  # zipfile's words for a directory it cannot parse (UnicodeDecodeError too)
        head = view[0:4]
        if head.startswith(b"\x80"):
            raise _LegacyFile from None
        if not head.startswith(b"PK\x03\x04"):
            raise InputError(f"{blob.name}: not a PyTorch checkpoint (neither a zip archive nor a pickle)") from None
        raise InputError(f"{blob.name}: not a PyTorch checkpoint (broken zip archive: {exc})") from None


def _pickle_member(blob: Blob, archive: zipfile.ZipFile, size: int) -> zipfile.ZipInfo:
    """data.pkl, once the members say the archive is a torch.save zip (no bomb, no other archive)."""
    infos = archive.infolist()
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED or info.file_size > size:
            raise InputError(f"{blob.name}: refused: archive member {info.filename!r} is compressed or larger than "
                             "the file (torch.save never writes that; a zip bomb?)")
    _, members = archive_members([i.filename for i in infos])
    if "constants.pkl" in members and any(n.startswith("code/") for n in members):
        raise InputError(f"{blob.name}: a TorchScript archive (torch.jit.save): not read by this version")
    if "serialized_exported_program.json" in members or any(n.startswith("models/") and n.endswith(".json")
                                                            for n in members):
        raise InputError(f"{blob.name}: a torch.export program (torch.export.save): not read by this version")
    pickles = [i for i in infos if i.filename.endswith("data.pkl") and i.filename.count("/") <= 1]
    if not pickles:
        raise InputError(f"{blob.name}: not a PyTorch checkpoint (no data.pkl in the archive)")
    if pickles[0].file_size > MAX_PICKLE_BYTES:
        raise InputError(f"{blob.name}: its pickle is {pickles[0].file_size:,} bytes (not a state dict's)")
    return pickles[0]


def _storage_key(file: str, name: str, t: TensorRecord) -> str:
    if t.storage_numel == 0:  # an empty storage has no identity of its own (the local reader's id())
        return f"{file}:empty:{name}"
    return f"{file}:{t.storage}:{t.offset}:{t.shape}:{t.strides}"


def _contiguous(t: TensorRecord) -> bool:
    expected = 1
    for dim, stride in zip(reversed(t.shape), reversed(t.strides)):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return True


def _small_values(archive: zipfile.ZipFile, view: SparseView, root: str, tensors: Mapping[str, TensorRecord],
                  metas: Mapping[str, WeightMeta], remote: bool) -> dict[str, tuple[int, ...]]:
    """The values of the few small integer tensors a quantized weight's logical shape is stated in."""
    wanted: list[tuple[str, zipfile.ZipInfo, int, int, str]] = []
    for name, t in tensors.items():
        code = INTEGER_STRUCT_CODES.get(metas[name].dtype)
        width = struct.calcsize(code) if code is not None else None
        numel = 1
        for d in t.shape:
            numel *= d
        if not wants_values(name) or code is None or width is None or not _contiguous(t) \
                or numel * width > MAX_VALUE_BYTES:
            continue
        try:
            info = archive.getinfo(f"{root}data/{t.storage}")
        except KeyError:
            continue
        wanted.append((name, info, t.offset * width, numel * width, code))

    def fetch(item: tuple[str, zipfile.ZipInfo, int, int, str]) -> None:
        _, info, _, _, _ = item
        view.prefetch(info.header_offset,
                      info.header_offset + _LOCAL_HEADER + len(info.filename) + _LOCAL_EXTRA_GUESS + info.compress_size)

    in_parallel(fetch, wanted, remote)
    out: dict[str, tuple[int, ...]] = {}
    for name, info, start, length, code in wanted:
        with archive.open(info) as member:
            member.seek(start)
            raw = member.read(length)
        if len(raw) == length:
            out[name] = struct.unpack(f"<{length // struct.calcsize(code)}{code}", raw)
    return out
