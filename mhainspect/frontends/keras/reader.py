"""Keras files as names, shapes and the layers' own arguments; no weight is read.

- A ``.keras`` archive (Keras 3): ``config.json`` (the model's and every layer's arguments) and
  ``model.weights.h5``, an HDF5 file stored uncompressed in the zip, read in place by ranges: its
  groups mirror the layers (``layers/<layer>/<sublayer>/vars/<i>``, each ``vars`` group naming
  its layer), its datasets' headers give every variable's shape and dtype.
- A legacy HDF5 model (``model.save("x.h5")``): the ``model_config`` attribute and
  ``model_weights/<layer>/<layer>/<sublayer>/<variable>`` datasets.
- A Keras 3 weights file (``*.weights.h5``) with the archive's ``config.json`` beside it (an
  extracted archive).

Each variable becomes a ``WeightMeta`` named by the Keras layer names on its path
(``transformer_layer_0.self_attention.query.kernel``): the name grouping of the matchers then
finds Keras' own projection names (query, key, value, attention_output). h5py is an optional
extra (``mhainspect[keras]``); it reads the HDF5 object headers, never a dataset's data.
"""

from __future__ import annotations

import json
import struct
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mhainspect.errors import ErrorKind, InputError, MissingDependencyError
from mhainspect.ir.limits import MAX_ARCHIVE_MEMBERS, MAX_CONFIG_BYTES, MAX_RANK
from mhainspect.ir.weights import WeightMeta
from mhainspect.sources import beside
from mhainspect.sources.blob import FIRST_RANGE, Blob, BlobFile, SparseView, small_file

if TYPE_CHECKING:
    from mhainspect.sources.tree import Tree

ARCHIVE_CONFIG = "config.json"
ARCHIVE_WEIGHTS = "model.weights.h5"
KERAS_HINT = "pip install 'mhainspect[keras]'"
_VARS = "vars"
_CONTAINER = "layers"  # Keras' key for a list of layers (a functional model's, a Sequential's)
_LEGACY_WEIGHTS = "model_weights"
_TAIL_RANGE = 1024  # an archive's end record and directory (a few members): the tail its member test read
_LOCAL_HEADER = 30
_HDF5_JUMP = 4 * 1024  # h5py's jumps between object headers: a header and its neighbours per range


@dataclass(frozen=True)
class KerasModel:
    """What a Keras file holds: its variables by name (Keras layer names on the path), the model's
    config, and where the config was read (for evidence)."""

    weights: dict[str, WeightMeta]
    config: Mapping[str, Any]
    fmt: str  # "keras" (a .keras archive or a weights file with its config.json), "keras-h5" (legacy)
    config_label: str


@dataclass(frozen=True)
class _Variable:
    layer: tuple[str, ...]  # the HDF5 path of the layer holding it, as keys
    key: str  # its index in the layer ("0", "1", ...) or, in a legacy file, its name ("kernel")
    shape: tuple[int, ...]
    dtype: str


def _h5py() -> Any:
    try:
        import h5py
    except ImportError:
        raise MissingDependencyError(f"reading a Keras file requires h5py, which is not installed: {KERAS_HINT}") from None
    return h5py


def _open_h5(view: SparseView, start: int, size: int, what: str) -> Any:
    h5py = _h5py()
    try:
        return h5py.File(BlobFile(view, start, size), "r")
    except OSError as exc:
        raise InputError(f"{what} is not a readable HDF5 file ({_first_line(exc)})") from None


def _variables(group: Any, root: tuple[str, ...], what: str) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path as keys, dataset) of every dataset below ``group``, in name order; at most
    MAX_ARCHIVE_MEMBERS objects are visited."""
    h5py = _h5py()
    found: list[tuple[tuple[str, ...], Any]] = []
    count = 0

    def visit(name: str, obj: Any) -> None:
        nonlocal count
        count += 1
        if count > MAX_ARCHIVE_MEMBERS:
            raise InputError(f"{what}: refused: it holds more than {MAX_ARCHIVE_MEMBERS:,} HDF5 objects")
        if isinstance(obj, h5py.Dataset):
            found.append((root + tuple(name.split("/")), obj))

    try:
        group.visititems(visit)
    except (OSError, RuntimeError, KeyError, ValueError) as exc:
        raise InputError(f"{what}: a broken HDF5 file ({_first_line(exc)})") from None
    yield from found


def _dataset(obj: Any, what: str) -> tuple[tuple[int, ...], str]:
    """A dataset's shape and dtype from its header (its data is not read)."""
    shape = tuple(int(d) for d in (obj.shape or ()))
    if len(shape) > MAX_RANK or any(d < 0 for d in shape):
        raise InputError(f"{what}: refused: dataset {obj.name} declares shape {list(shape)[:8]}")
    return shape, str(obj.dtype)


def _layer_names(h5: Any, layers: set[tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """Each layer group's Keras name (the ``name`` attribute of its ``vars`` group), by HDF5 path."""
    names: dict[tuple[str, ...], str] = {}
    for path in layers:
        for i in range(1, len(path) + 1):
            prefix = path[:i]
            if prefix in names:
                continue
            try:
                vars_group = h5.get("/".join((*prefix, _VARS)))
                name = vars_group.attrs.get("name") if vars_group is not None else None
            except (OSError, RuntimeError, KeyError, ValueError):
                name = None
            if isinstance(name, bytes):
                name = name.decode("utf-8", "replace")
            if isinstance(name, str) and name and "." not in name:
                names[prefix] = name
    return names


def _module_paths(layers: set[tuple[str, ...]], names: Mapping[tuple[str, ...], str]) -> dict[tuple[str, ...], str]:
    """The dotted module path of each layer group: each component its Keras name where the group
    names one (its HDF5 key otherwise, and where two siblings would share a name), container keys
    (``layers``) dropped."""
    prefixes = {p[:i] for p in layers for i in range(1, len(p) + 1)}
    component: dict[tuple[str, ...], str] = {}
    by_parent: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for p in prefixes:
        by_parent.setdefault(p[:-1], []).append(p)
    for siblings in by_parent.values():
        wanted = {p: names.get(p, p[-1]) for p in siblings}
        counts: dict[str, int] = {}
        for w in wanted.values():
            counts[w] = counts.get(w, 0) + 1
        for p, w in wanted.items():
            component[p] = w if counts[w] == 1 else p[-1]
    out: dict[tuple[str, ...], str] = {}
    for layer in layers:
        parts = [component[layer[:i]] for i in range(1, len(layer) + 1)
                 if not (layer[i - 1] == _CONTAINER and layer[:i] not in names)]
        out[layer] = ".".join(parts)
    return out


def _leaf_names(variables: list[_Variable]) -> dict[str, str]:
    """A Keras 3 layer's variables by index named as its layer calls them where the shapes say
    so: a first variable of rank 2 or more is the kernel, a second whose shape ends the kernel's
    (EinsumDense [h, d] after [in, h, d], Dense [out] after [in, out]) its bias; others keep
    their index."""
    by_index = {v.key: v for v in variables}
    out = {v.key: v.key for v in variables}
    first, second = by_index.get("0"), by_index.get("1")
    if first is not None and len(first.shape) >= 2:
        out["0"] = "kernel"
        if second is not None and 0 < len(second.shape) < len(first.shape) and \
                first.shape[-len(second.shape):] == second.shape:
            out["1"] = "bias"
    return out


def _metas(variables: list[_Variable], modules: Mapping[tuple[str, ...], str], indexed: bool, source: str
           ) -> dict[str, WeightMeta]:
    by_layer: dict[tuple[str, ...], list[_Variable]] = {}
    for v in variables:
        by_layer.setdefault(v.layer, []).append(v)
    out: dict[str, WeightMeta] = {}
    for layer, own in by_layer.items():
        leaves = _leaf_names(own) if indexed else {v.key: v.key.removesuffix(":0") for v in own}
        module = modules[layer]
        for v in sorted(own, key=lambda v: (len(v.key), v.key)):
            name = f"{module}.{leaves[v.key]}" if module else leaves[v.key]
            if name in out:  # two variables one name: keep the HDF5 path, which is unique
                name = "/".join((*v.layer, v.key))
            layout = "in_out" if len(v.shape) >= 2 else ""  # Keras kernels are [in, ..., out]
            out[name] = WeightMeta(name, v.shape, v.dtype, f"{source}:{'/'.join((*v.layer, v.key))}", layout)
    return out


def _keras3_weights(h5: Any, what: str, source: str) -> dict[str, WeightMeta]:
    """Variables of a Keras 3 weights file: ``<layer path>/vars/<index>`` datasets."""
    variables: list[_Variable] = []
    for path, obj in _variables(h5, (), what):
        if len(path) < 2 or path[-2] != _VARS:
            continue
        shape, dtype = _dataset(obj, what)
        variables.append(_Variable(path[:-2], path[-1], shape, dtype))
    layers = {v.layer for v in variables}
    modules = _module_paths(layers, _layer_names(h5, layers))
    return _metas(variables, modules, indexed=True, source=source)


def _legacy_weights(h5: Any, what: str, source: str) -> dict[str, WeightMeta]:
    """Variables of a legacy HDF5 model: ``model_weights/<layer>/<layer>/.../<variable>``."""
    group = h5.get(_LEGACY_WEIGHTS)
    if group is None:
        raise InputError(f"{what}: a Keras HDF5 model without its {_LEGACY_WEIGHTS} group")
    variables: list[_Variable] = []
    for path, obj in _variables(group, (), what):
        shape, dtype = _dataset(obj, what)
        layer = path[:-1]
        if len(layer) >= 2 and layer[0] == layer[1]:  # Keras 2 repeats the top layer's name
            layer = layer[1:]
        variables.append(_Variable(layer, path[-1], shape, dtype))
    modules = {v.layer: ".".join(v.layer) for v in variables}
    return _metas(variables, modules, indexed=False, source=source)


def _parse_config(data: bytes | str, what: str) -> Mapping[str, Any]:
    try:
        config = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{what}: not valid JSON ({_first_line(exc)})") from None
    if not isinstance(config, dict):
        raise InputError(f"{what}: not a Keras model config (a JSON {type(config).__name__}, expected an object)")
    return config


def _view(blob: Blob) -> SparseView:
    """The blob as a sparse view, its last range (a zip archive's directory) held."""
    size = blob.size()
    view = SparseView(blob, size)
    tail = blob.tail(_TAIL_RANGE)
    view.seed(size - len(tail), tail)
    view.jump_window = _HDF5_JUMP
    return view


def read_archive(blob: Blob) -> KerasModel:
    """A ``.keras`` archive: its config.json and its weights file's variables, read by ranges
    (the zip directory, config.json, the HDF5 headers of the stored weights member)."""
    view = _view(blob)
    name = blob.name
    try:
        archive = zipfile.ZipFile(BlobFile(view))
        infos = {i.filename: i for i in archive.infolist()[:MAX_ARCHIVE_MEMBERS + 1]}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, ValueError, EOFError,
            struct.error) as exc:  # zipfile's words for a directory it cannot parse
        raise InputError(f"{name}: a broken Keras archive ({_first_line(exc)})") from None
    if len(infos) > MAX_ARCHIVE_MEMBERS:
        raise InputError(f"{name}: refused: the archive holds more than {MAX_ARCHIVE_MEMBERS:,} members")
    config_info, weights_info = infos.get(ARCHIVE_CONFIG), infos.get(ARCHIVE_WEIGHTS)
    if config_info is None or weights_info is None:
        raise InputError(f"{name}: a Keras archive without its {ARCHIVE_CONFIG} and {ARCHIVE_WEIGHTS}")
    if config_info.file_size > MAX_CONFIG_BYTES or config_info.compress_size > MAX_CONFIG_BYTES:
        raise InputError(f"{name}: refused: its {ARCHIVE_CONFIG} declares more than {MAX_CONFIG_BYTES:,} bytes")
    try:
        text = archive.read(config_info)  # inflated to its declared size at most
    except (zipfile.BadZipFile, NotImplementedError, ValueError, EOFError, OSError, zlib.error) as exc:
        raise InputError(f"{name}: a broken Keras archive: {ARCHIVE_CONFIG} ({_first_line(exc)})") from None
    config = _parse_config(text, f"{name}: {ARCHIVE_CONFIG}")
    start, size = _stored_span(view, weights_info, name)
    with _open_h5(view, start, size, f"{name}: a Keras archive whose {ARCHIVE_WEIGHTS}") as h5:
        weights = _keras3_weights(h5, f"{name}: {ARCHIVE_WEIGHTS}", blob.basename)
    return KerasModel(weights, config, "keras", f"{blob.basename}: {ARCHIVE_CONFIG}")


def _stored_span(view: SparseView, info: zipfile.ZipInfo, name: str) -> tuple[int, int]:
    """(offset, size) of a stored member's bytes: read in place, never inflated."""
    if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
        raise InputError(f"{name}: its {ARCHIVE_WEIGHTS} is compressed (method {info.compress_type}); Keras stores "
                         "it uncompressed and it is read in place only so: extract the archive and pass the "
                         f"{ARCHIVE_WEIGHTS} with its {ARCHIVE_CONFIG}")
    local = view[info.header_offset:info.header_offset + _LOCAL_HEADER]
    if len(local) < _LOCAL_HEADER or local[:4] != b"PK\x03\x04":
        raise InputError(f"{name}: a broken Keras archive: no local header for {ARCHIVE_WEIGHTS}")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    start = info.header_offset + _LOCAL_HEADER + name_len + extra_len
    if start + info.file_size > len(view):
        raise InputError(f"{name}: a truncated Keras archive: {ARCHIVE_WEIGHTS} ends past the end of the file")
    return start, info.file_size


def read_hdf5(tree: Tree, path: str, blob: Blob) -> KerasModel:
    """An HDF5 file, the file ``path`` of ``tree`` (``blob``), on this machine or remote alike: a
    legacy Keras model (its ``model_config`` attribute), or a Keras 3 weights file with the archive's
    config.json beside it in the tree; anything else is named and refused."""
    what = blob.name
    view = _hdf5_view(blob)
    with _open_h5(view, 0, len(view), what) as h5:
        raw = h5.attrs.get("model_config")
        if raw is not None:
            config = _parse_config(raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw),
                                   f"{what}: model_config")
            return KerasModel(_legacy_weights(h5, what, blob.basename), config, "keras-h5",
                              f"{blob.basename}: model_config")
        if _VARS in h5 or _CONTAINER in h5:
            text, where = _config_beside(tree, path, what)
            return KerasModel(_keras3_weights(h5, what, blob.basename), _parse_config(text, where), "keras",
                              f"{ARCHIVE_CONFIG} beside {blob.basename}")
    raise InputError(f"{what}: an HDF5 file that holds no Keras model (no model_config, no Keras weights layout); "
                     "mhainspect reads Keras models saved with model.save()", ErrorKind.UNSUPPORTED)


def _hdf5_view(blob: Blob) -> SparseView:
    """The blob as h5py reads it: a sparse view whose first range (the superblock, the root group
    and, in a small model's file, most object headers) is held from the start, and whose jumps
    (h5py's walk from one object header to the next, over the data between them) fetch
    ``_HDF5_JUMP`` bytes: a remote file costs a round trip per cluster of headers, not per read."""
    size = blob.size()
    view = SparseView(blob, size)
    if blob.speculative:
        view.seed(0, blob.read(0, min(size, FIRST_RANGE)))
        view.jump_window = _HDF5_JUMP
    return view


def _config_beside(tree: Tree, path: str, what: str) -> tuple[bytes, str]:
    """The config.json beside a Keras weights file (an extracted archive) and its name; without one
    the weights alone say nothing of the layers' arguments: refused."""
    at = beside(path, ARCHIVE_CONFIG)
    missing = InputError(f"{what}: Keras weights without the model's config (no {ARCHIVE_CONFIG} beside it): "
                         "pass the .keras archive", ErrorKind.UNSUPPORTED)
    if tree.complete and at not in tree.files():
        raise missing
    config = tree.blob(at)
    try:
        return small_file(config, MAX_CONFIG_BYTES), config.name
    except InputError as exc:
        if exc.kind is ErrorKind.NOT_FOUND:  # a URL's folder lists no sibling: its absence is told by the read
            raise missing from None
        raise


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
