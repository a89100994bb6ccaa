"""A torch.save archive read by ranges: its zip directory and its pickle, never a tensor.

A zip-format PyTorch checkpoint (``.pt/.pth/.bin/.ckpt`` from torch >= 1.6) is a stored (never
compressed) zip archive: ``<name>/data.pkl`` describes the objects, and every storage is a member
``<name>/data/<key>``. The tensors' names, shapes and dtypes are all in the pickle, so a remote
file costs the archive's directory (one range from the end) and the pickle (one range more): the
storages are never fetched, bar the few bytes of the small integer tensors that state a quantized
weight's logical shape.

The pickle is read by a restricted unpickler that knows only what torch's own weights-only loader
allows (state dicts of tensors, parameters, OrderedDicts, sizes, dtypes, devices), builds no
tensor, and refuses every other global with the message the local loader gives: nothing from the
file runs. Torch itself is not needed.
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Callable, Mapping

from mhainspect.errors import InputError
from mhainspect.frontends.checkpoint.quantized import MAX_VALUE_BYTES, wants_values
from mhainspect.frontends.checkpoint.reader import flatten_state_dict
from mhainspect.frontends.formats import archive_members
from mhainspect.frontends.pickles import STORAGE_DTYPES, Global, RefusedGlobal, TensorRecord, read_pickle
from mhainspect.ir.dtypes import INTEGER_STRUCT_CODES, canonical
from mhainspect.ir.weights import WeightMeta
from mhainspect.sources.blob import Blob, BlobFile, LocalBlob, SparseView
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
_DTYPE_NAMES = frozenset(set(STORAGE_DTYPES.values()) | {
    "float", "double", "half", "long", "int", "short", "cfloat", "cdouble",
    "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
    "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2", "complex32", "uint16", "uint32", "uint64",
    *(f"uint{i}" for i in range(1, 8)), *(f"int{i}" for i in range(1, 8))})


def weights_only(named: Global) -> bool:
    """Whether torch's weights-only loader allows this global in a state dict."""
    if named.module == "torch" and (named.name in STORAGE_DTYPES or named.name in _DTYPE_NAMES):
        return True
    return named.qualified in _ALLOWED


def read_torch_file(blob: Blob, values: dict[str, tuple[int, ...]] | None = None,
                    unpickling_reason: Callable[[str], str] = str) -> dict[str, WeightMeta]:
    """A torch.save file, local or remote: a zip archive by ranges, without torch; a legacy (non-zip)
    pickle on local disk with torch's weights-only loader (its storages follow the pickle)."""
    if isinstance(blob, LocalBlob) and blob.read(0, 1) == b"\x80":
        from mhainspect.frontends.checkpoint.reader import read_torch_state_dict

        return read_torch_state_dict(blob.path, values)
    return read_torch_zip(blob, values, unpickling_reason)


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
    size = blob.size()
    view = SparseView(blob, size)
    view.seed(size - len(tail), tail)
    try:
        return zipfile.ZipFile(BlobFile(view)), view
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, ValueError, EOFError,
            struct.error) as exc:  # zipfile's words for a directory it cannot parse (UnicodeDecodeError too)
        head = view[0:4]
        if head.startswith(b"\x80"):
            raise InputError(f"{blob.name}: a legacy (non-zip) PyTorch checkpoint: its storages follow the pickle, "
                             "so it is read on local disk only (save it again with torch >= 1.6)") from None
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
