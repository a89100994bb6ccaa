"""A remote MODEL argument -> SourceResult, through the same readers and rules as a local one.

``remote_result(spec)``: the file or folder ``spec`` names is read by ranges, only the bytes each
format's header needs (``blob``), and handed to the front end of its format exactly as a local file
of the same bytes would be: a remote report equals the local report but for the path.

- a checkpoint file: its header (safetensors) or its zip directory and pickle (torch.save), and
  the config.json beside it when there is one, in parallel;
- a Hugging Face folder: config.json, the index when there is one, and every shard's header in
  parallel (the shards the folder's names suggest are read while the index is fetched; those the
  index names besides are read after it);
- GGUF: the header of each part of a split model, in parallel;
- ONNX: the graph with every large tensor payload skipped; external data is read only where a copy
  check asks for a few elements (``onnx.ranged_values``), never whole;
- a folder of several models: ``remote_models(spec)`` lists them (the CLI audits each);
  ``remote_result`` refuses it with the list.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from fnmatch import fnmatchcase
from typing import Any, TypeVar

from mhainspect.errors import ErrorKind, InputError
from mhainspect.frontends.kinds import file_kind, model_folder_names, models_below
from mhainspect.ir.weights import HeadOffers, WeightMeta
from mhainspect.results.stages import SourceResult
from mhainspect.sources.address import HubRef, Ref, StoreRef, UrlRef, parse
from mhainspect.sources.blob import FIRST_RANGE, Blob, HeadCached, Prefix, small_file
from mhainspect.sources.deadline import model_deadline
from mhainspect.sources.parallel import CONCURRENCY, Pool, in_parallel
from mhainspect.sources.transports.url import UrlTree
from mhainspect.sources.tree import Tree, beside, children, is_folder

T = TypeVar("T")
_MAX_LISTED_MODELS = 8
# Parts of a split GGUF model tried where no listing names them (a URL's folder): each is a request
# (real split models have up to a few dozen parts; a listed folder may hold up to MAX_SHARD_FILES).
MAX_GUESSED_PARTS = 256


def open_tree(ref: Ref) -> tuple[Tree, str]:
    """The folder a reference reads from and the path it names in it ("" = the folder itself)."""
    if isinstance(ref, HubRef):
        from mhainspect.sources.transports.hub import HubTree

        return HubTree(ref), ref.path
    if isinstance(ref, UrlRef):
        url_tree = UrlTree(ref)
        return url_tree, url_tree.basename
    from mhainspect.sources.transports.store import StoreTree

    last = ref.url.rstrip("/").rsplit("/", 1)[-1]
    store = StoreTree(ref, as_file=file_kind(last) is not None or last.endswith(".json"))
    return store, store.selection


def _where(ref: Ref, tree: Tree) -> str:
    if isinstance(ref, HubRef):
        return f"{ref.repo}" + (f"@{ref.revision}" if ref.revision else "")
    return tree.name("")


def locate(spec: str) -> tuple[Tree, str, str]:
    """(tree, path in it, "file" or "folder") for a remote argument; InputError when nothing is there."""
    ref = parse(spec)
    tree, path = open_tree(ref)
    files = tree.files()
    if path in files:
        return tree, path, "file"
    if is_folder(files, path):
        return tree, path, "folder"
    if isinstance(ref, StoreRef) and not path:
        raise InputError(f"{spec}: nothing there (no such object or folder)", ErrorKind.NOT_FOUND)
    raise InputError(f"{spec}: no file or folder '{path}' in {_where(ref, tree)}", ErrorKind.NOT_FOUND)


def remote_models(spec: str) -> list[str]:
    """The models ``spec`` names (see ``_models``), within the model's deadline."""
    with model_deadline():
        return _models(spec)


def _models(spec: str) -> list[str]:
    """The models ``spec`` names: itself when it is one model, else every model below the folder
    (as ``hf://...`` / URL arguments of their own), sorted as a local folder's are."""
    tree, path, what = locate(spec)
    files = tree.files()
    if what == "file" or model_folder_names(children(files, path)):
        return [spec]
    found = models_below(files, path)
    if not found:
        raise InputError(f"{spec}: no models in this folder (looked for *.onnx, *.gguf, *.safetensors, "
                         "*.pt/.pth/.bin/.ckpt and Hugging Face folders with config.json)")
    base = spec.rstrip("/")
    start = len(path) + 1 if path else 0
    return [f"{base}/{p[start:]}" for p in found]


def remote_result(spec: str, stated: HeadOffers | None = None) -> SourceResult:
    """The audit's front-end stage for a remote argument (see ``_result_of``), within the model's
    deadline (the caller's, else the default)."""
    with model_deadline():
        return _result_of(spec, stated)


def _result_of(spec: str, stated: HeadOffers | None = None) -> SourceResult:
    """The audit's front-end stage for a remote argument (see the module docstring); ``stated``:
    head counts the caller gives, for a checkpoint."""
    tree, path, what = locate(spec)
    files = tree.files()
    display = spec.rstrip("/") if not spec.endswith("://") else spec  # as a local folder's path: no final slash
    if what == "folder":
        names = children(files, path)
        if not model_folder_names(names):
            models = _models(spec)
            if len(models) != 1:
                shown = ", ".join(models[:_MAX_LISTED_MODELS]) + (", ..." if len(models) > _MAX_LISTED_MODELS else "")
                raise InputError(f"{spec}: holds {len(models)} models ({shown}); name one, or give the folder to the "
                                 "command line, which audits each")
            return _result_of(models[0], stated)
        return _folder_result(tree, path, display, stated)
    if path.rsplit("/", 1)[-1] == "config.json":
        raise InputError(f"{spec}: a config.json alone is not a model: pass the folder that holds it with its weights")
    blob = HeadCached(tree.blob(path))
    kind = content_kind(blob) or file_kind(path) or "onnx"
    if kind in ("checkpoint", "safetensors"):
        return _checkpoint_file_result(tree, path, display, blob, kind == "safetensors" or (
            kind == "checkpoint" and path.lower().endswith(".safetensors")), stated)
    if kind == "gguf":
        return _gguf_result(tree, path, display, blob)
    return _onnx_result(tree, path, display, blob)


_LFS = b"version https://git-lfs.github.com/spec/v1"


def content_kind(blob: HeadCached) -> str | None:
    """The reader a remote file goes to by its first bytes (the range its reader asks for first):
    "gguf", "checkpoint" (a zip archive or a pickle: torch.save), "safetensors"; None: the suffix
    decides (ONNX has no signature). A format this tool does not read raises InputError naming it."""
    from mhainspect.frontends import formats

    head = blob.head()
    if head.startswith(b"GGUF"):
        return "gguf"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06", b"\x80")):
        return "checkpoint"
    foreign = {_LFS: formats.LFS_POINTER, b"\x89HDF\r\n\x1a\n": formats.HDF5}
    for magic, what in foreign.items():
        if head.startswith(magic):
            raise InputError(what.message(blob.name), ErrorKind.UNSUPPORTED)
    if head[4:8] == b"TFL3":
        raise InputError(formats.TFLITE.message(blob.name), ErrorKind.UNSUPPORTED)
    if len(head) >= 10 and head[8:9] == b"{" and 2 <= int.from_bytes(head[:8], "little") <= blob.size() - 8:
        return "safetensors"
    return None


# ----------------------------------------------------------------------------------------------- reading


def _small(blob: Blob, limit: int) -> bytes:
    """A small file whole (config.json, an index), refused past ``limit`` bytes (``small_file``)."""
    return small_file(blob, limit)


def _config(tree: Tree, path: str, required: bool) -> dict[str, Any] | None:
    """The config.json at ``path``: None when absent (or, unless ``required``, unreadable: a broken
    neighbour is not the model's problem, as for local files)."""
    from mhainspect.frontends.checkpoint.reader import config_from_bytes
    from mhainspect.ir.limits import MAX_CONFIG_BYTES

    if tree.complete and path not in tree.files():
        return None
    try:
        blob = tree.blob(path)
        return config_from_bytes(_small(blob, MAX_CONFIG_BYTES), blob.name)
    except InputError:
        if required:
            raise
        return None


class HeaderSizes:
    """The first range of each shard header of one folder, sized so that a long header costs one
    range, not two. A safetensors header holds one entry per tensor: its quoted name, then dtype,
    shape and offsets, which are alike across a model's shards. Once the index has said which
    tensors each shard holds (``plan``), a shard's first range is its names' bytes plus, per tensor,
    the most bytes an entry took beyond its name in the headers read so far (``_ENTRY_BYTES``
    before any), with a margin. A shard the index has not sized gets the longest header seen (and
    an eighth more) once one has needed a second range."""

    def __init__(self) -> None:
        self._longest = 0
        self._per_entry = 0.0  # bytes an entry took beyond its name, the most seen
        self._planned: dict[str, tuple[int, int]] = {}  # shard -> (tensors, bytes of their quoted names)
        self._lock = threading.Lock()

    def plan(self, weight_map: Mapping[object, object]) -> None:
        """The tensors each shard holds, from the index's weight_map (tensor -> shard file)."""
        planned: dict[str, list[int]] = {}
        for name, shard in weight_map.items():
            entry = planned.setdefault(str(shard), [0, 0])
            entry[0] += 1
            entry[1] += len(str(name).encode()) + 4  # its quotes, the colon and the comma
        with self._lock:
            self._planned = {k: (v[0], v[1]) for k, v in planned.items()}

    def first(self, shard: str) -> int:
        with self._lock:
            planned = self._planned.get(shard)
            if planned is None:
                return min(max(FIRST_RANGE, self._longest * 9 // 8), _MAX_FIRST_RANGE)
            tensors, names = planned
            per_entry = self._per_entry or _ENTRY_BYTES
        want = int((_HEADER_START + names + tensors * per_entry) * 1.02) + 1024  # a margin for longer offsets
        return min(max(FIRST_RANGE, want), _MAX_FIRST_RANGE)

    def saw(self, shard: str, head: Prefix) -> None:
        held = bytes(head.buf[:8])
        length = 8 + int.from_bytes(held, "little") if len(held) == 8 else 0
        with self._lock:
            if head.fetches > 1:  # the header was longer than the first range: its length is what is held
                self._longest = max(self._longest, head.held)
            planned = self._planned.get(shard)
            if planned is not None and planned[0] and length <= head.held:
                tensors, names = planned
                self._per_entry = max(self._per_entry, (length - _HEADER_START - names) / tensors)


_MAX_FIRST_RANGE = 16 * 1024 * 1024
# A header entry beyond its quoted name before any header was read: {"dtype":"BF16","shape":[2048,768],
# "data_offsets":[1234567890,1237713618]} is 75 bytes (Qwen3-MoE- and DeepSeek-V3-shaped headers
# average 74); rank-3 shapes and longer dtype names add some.
_ENTRY_BYTES = 84
_HEADER_START = 8 + 2 + 32  # the length field, the braces, a small __metadata__
# A folder whose index (by its size in the listing) suggests shard headers longer than this, on
# average, waits for the index before reading them: its counts size each first range (one range a
# shard instead of two), for the round trip the first ranges would have taken anyway.
_WAIT_FOR_INDEX = FIRST_RANGE // 2
# Header bytes per index byte: an index entry is the tensor's name and its shard's file name, a
# header entry the name, dtype, shape and offsets.
_HEADER_PER_INDEX_BYTE = 1.4


def _weights_of(blob: Blob, kind: str, sizes: HeaderSizes | None = None, shard: str = ""
                ) -> tuple[dict[str, WeightMeta], dict[str, tuple[int, ...]]]:
    """A checkpoint file's weights and the small values its quantized weights state (``kind``:
    "safetensors", else a torch.save archive)."""
    values: dict[str, tuple[int, ...]] = {}
    if kind == "safetensors":
        from mhainspect.frontends.checkpoint.reader import safetensors_header

        head = Prefix(blob, first=sizes.first(shard) if sizes is not None else FIRST_RANGE)
        weights = safetensors_header(blob, values, head)
        if sizes is not None:
            sizes.saw(shard, head)
        return weights, values
    from mhainspect.frontends.checkpoint.reader import unpickling_reason
    from mhainspect.frontends.checkpoint.torchzip import read_torch_zip

    return read_torch_zip(blob, values, unpickling_reason), values


def _checkpoint_file_result(tree: Tree, path: str, display: str, blob: Blob, safetensors: bool,
                            stated: HeadOffers | None) -> SourceResult:
    from mhainspect.frontends.checkpoint.frontend import weights_result
    from mhainspect.frontends.checkpoint.quantized import apply_quantization

    kind = "safetensors" if safetensors else "pytorch"
    with Pool(2) as pool:
        config_job = pool.submit(_config, tree, beside(path, "config.json"), False)
        weights, values = _weights_of(blob, kind)
        config = config_job.result()
    weights = apply_quantization(weights, config, values)
    config_name = _beside_name(display, "config.json")
    return weights_result(weights, config, kind, display, folder=False, config_path=config_name, stated=stated)


def _beside_name(display: str, name: str) -> str:
    return display.rstrip("/").rsplit("/", 1)[0] + "/" + name


def _folder_result(tree: Tree, folder: str, display: str, stated: HeadOffers | None) -> SourceResult:
    from mhainspect.frontends.checkpoint.frontend import weights_result

    weights, config = read_folder(tree, folder, display)
    return weights_result(weights, config, "huggingface", display, folder=True, config_path=None, stated=stated)


def read_folder(tree: Tree, folder: str, display: str) -> tuple[dict[str, WeightMeta], dict[str, Any]]:
    """A Hugging Face folder's weights (quantization applied) and config: config.json, the index and
    the shard headers in parallel (see the module docstring)."""
    from mhainspect.frontends.checkpoint.quantized import apply_quantization
    from mhainspect.frontends.checkpoint.reader import config_from_bytes, indexed_files, weight_files
    from mhainspect.ir.limits import MAX_CONFIG_BYTES, MAX_SHARD_FILES

    names = children(tree.files(), folder)
    if "config.json" not in names:
        raise InputError(f"{display}: is a folder without config.json (expected a model file or a Hugging Face "
                         "model folder)")
    found, kind, index_name = weight_files(names, display)

    def at(name: str) -> str:
        return f"{folder}/{name}" if folder else name

    sizes = HeaderSizes()

    def header(name: str) -> tuple[dict[str, WeightMeta], dict[str, tuple[int, ...]]]:
        return _weights_of(tree.blob(at(name)), kind, sizes, name)

    with Pool(CONCURRENCY) as pool:
        config_job = pool.submit(_config, tree, at("config.json"), True)
        if index_name is not None:
            index_blob = tree.blob(at(index_name))
            index_job: Future[bytes] | None = pool.submit(_small, index_blob, MAX_CONFIG_BYTES)
            # The index names the shards; the folder's names almost always say the same: read them meanwhile.
            pattern = "*.safetensors" if kind == "safetensors" else "pytorch_model*.bin"
            guessed = _matching(names, pattern)
            if len(guessed) > MAX_SHARD_FILES or _long_headers(tree.files().get(at(index_name)), guessed, kind):
                guessed = []  # not one model's shards (the index says which are), or headers the index sizes
        else:
            index_job, guessed = None, found
        jobs = {n: pool.submit(header, n) for n in guessed}
        config = config_job.result()
        if index_job is not None:
            index_where = _beside_name(display + "/", index_name or "")
            index = config_from_bytes(index_job.result(), index_where)
            shards = indexed_files(index, index_where)
            sizes.plan(index["weight_map"])
            if len(shards) > MAX_SHARD_FILES:
                raise InputError(f"{index_where}: names {len(shards):,} shard files, more than the {MAX_SHARD_FILES:,} "
                                 "one model is read from")
            listed = set(names)
            for f in shards:  # every shard checked before any is read
                _check_shard(f, listed, index_where)
            for f in shards:
                if f not in jobs:
                    jobs[f] = pool.submit(header, f)
        else:
            shards = found
        read = [_result(jobs[f]) for f in shards]
    weights: dict[str, WeightMeta] = {}
    values: dict[str, tuple[int, ...]] = {}
    for w, v in read:
        weights.update(w)
        values.update(v)
    assert config is not None
    return apply_quantization(weights, config, values), config


def _long_headers(index_size: int | None, guessed: list[str], kind: str) -> bool:
    """Whether an index of ``index_size`` bytes suggests shard headers longer than a first range
    can take (then the shards wait for the index, which sizes their first ranges)."""
    if kind != "safetensors" or index_size is None or not guessed:
        return False
    return index_size * _HEADER_PER_INDEX_BYTE / len(guessed) > _WAIT_FOR_INDEX


def _result(job: Future[T]) -> T:
    return job.result()


def _matching(names: list[str], pattern: str) -> list[str]:
    return sorted(n for n in names if fnmatchcase(n, pattern) and "adapter" not in n)


def _check_shard(name: str, names: set[str], where: str) -> None:
    norm = os.path.normpath(name)
    if os.path.isabs(name) or norm.startswith("..") or "/" in norm:
        raise InputError(f"{where}: shard '{name}' is outside the folder")
    if name not in names:
        raise InputError(f"{where}: shard '{name}' is missing")


def _gguf_result(tree: Tree, path: str, display: str, blob: Blob) -> SourceResult:
    from mhainspect.frontends.gguf.frontend import gguf_model_result
    from mhainspect.frontends.gguf.reader import MAX_SHARDS, merge_parts, read_header_blob
    from mhainspect.frontends.gguf.split import split_name

    name = path.rsplit("/", 1)[-1]
    m = split_name(name)
    parts = [path]
    if m is not None:
        count = int(m.group("count"))
        if count < 1 or count > MAX_SHARDS or not 1 <= int(m.group("no")) <= count:
            raise InputError(f"{display}: split file name says part {int(m.group('no'))} of {count}")
        if not tree.complete and count > MAX_GUESSED_PARTS:
            raise InputError(f"{display}: split file name says {count:,} parts; a URL's folder is not listed, so "
                             f"parts are tried one by one, at most {MAX_GUESSED_PARTS}: read it where its folder is "
                             "listed (hf://, s3://, gs://, az://)")
        parts = [beside(path, f"{m.group('stem')}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
        if tree.complete:
            listed = tree.files()
            missing = [p.rsplit("/", 1)[-1] for p in parts if p not in listed]
            if missing:
                raise InputError(f"{display}: split model is missing {len(missing)} of its {count} files, first "
                                 f"'{missing[0]}'")
    headers = in_parallel(lambda p: read_header_blob(blob if p == path else tree.blob(p)), parts)
    first = parts[0]
    shown = display if first == path else _beside_name(display, first.rsplit("/", 1)[-1])
    return gguf_model_result(merge_parts(shown, headers), display)


def _onnx_result(tree: Tree, path: str, display: str, blob: Blob) -> SourceResult:
    from mhainspect.frontends.onnx.frontend import external_data_warnings, graph_result
    from mhainspect.frontends.onnx.loader import load_onnx_bytes
    from mhainspect.frontends.onnx.ranged_values import plain_location, remote_folded_copies
    from mhainspect.frontends.onnx.wire import remote_model_view

    with Pool(2) as pool:
        config_job = pool.submit(_config, tree, beside(path, "config.json"), False)
        data, view = remote_model_view(blob)
        config = config_job.result()

    def data_file(location: str) -> Blob | None:
        """An external data file beside the model (never one the folder's listing does not hold)."""
        where = beside(path, posixpath.normpath(location.replace("\\", "/")))
        if not plain_location(location) or (tree.complete and where not in tree.files()):
            return None
        return tree.blob(where)

    try:
        graph = load_onnx_bytes(data, display)
        escaping = external_data_warnings(display, graph)
        if escaping:
            graph = dataclasses.replace(graph, warnings=graph.warnings + tuple(escaping))
        # Copies of parameters decided by values, as locally: read by ranges, only where a candidate is.
        graph = remote_folded_copies(graph, view, data_file)
        return graph_result(graph, path=display, fmt="onnx", config=config,
                            config_label="config.json beside the model" if config is not None else "")
    except InputError as exc:
        if not str(exc).startswith(display):
            raise InputError(f"{display}: {exc}") from None
        raise
