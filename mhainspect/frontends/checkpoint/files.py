"""A checkpoint file or a Hugging Face folder in a ``Tree`` (a local folder, a Hub revision, a
store folder, the folder of a URL) -> its weights and config: the one checkpoint reader.

- a checkpoint file: its header (safetensors) or its zip directory and pickle (torch.save), and the
  config.json beside it when there is one (remote: in parallel);
- a Hugging Face folder: config.json, the index when there is one, and every shard's header (remote:
  in parallel; the shards the folder's names suggest are read while the index is fetched, those the
  index names besides after it; locally each is read when its turn comes, in the index's order).
"""

from __future__ import annotations

import os
import threading
from fnmatch import fnmatchcase
from typing import Any

from mhainspect.errors import InputError
from mhainspect.frontends.checkpoint.quantized import apply_quantization
from mhainspect.frontends.checkpoint.reader import (
    config_from_bytes,
    indexed_files,
    safetensors_header,
    unpickling_reason,
    weight_files,
)
from mhainspect.ir.limits import MAX_CONFIG_BYTES, MAX_SHARD_FILES
from mhainspect.ir.weights import WeightMeta
from mhainspect.sources.blob import FIRST_RANGE, Blob, Prefix
from mhainspect.sources.parallel import Jobs, Result
from mhainspect.sources.tree import Tree, beside

_MAX_FIRST_RANGE = 16 * 1024 * 1024

Values = dict[str, tuple[int, ...]]


def small_file(blob: Blob, limit: int) -> bytes:
    """A small file whole (config.json, an index), refused past ``limit`` bytes."""
    data = blob.read(0, limit + 1)
    if len(data) > limit:
        raise InputError(f"{blob.name}: larger than {limit:,} bytes")
    return data


def config_at(tree: Tree, path: str, required: bool) -> dict[str, Any] | None:
    """The config.json at ``path``: None when absent (or, unless ``required``, unreadable: a broken
    neighbour is not the model's problem)."""
    if tree.complete and path not in tree.files():
        return None
    try:
        blob = tree.blob(path)
        return config_from_bytes(small_file(blob, MAX_CONFIG_BYTES), blob.name)
    except InputError:
        if required:
            raise
        return None


class HeaderSizes:
    """The shard headers of one folder are alike: once one has needed a second range, the first
    range of the shards read after it is sized to the longest header seen (and an eighth more)."""

    def __init__(self) -> None:
        self._longest = 0
        self._lock = threading.Lock()

    def first(self) -> int:
        with self._lock:
            return min(max(FIRST_RANGE, self._longest * 9 // 8), _MAX_FIRST_RANGE)

    def saw(self, head: Prefix) -> None:
        if head.fetches > 1:  # the header was longer than the first range: its length is what is held
            with self._lock:
                self._longest = max(self._longest, head.held)


def weights_of(blob: Blob, kind: str, sizes: HeaderSizes | None = None) -> tuple[dict[str, WeightMeta], Values]:
    """A checkpoint file's weights and the small values its quantized weights state (``kind``:
    "safetensors", else a torch.save file)."""
    values: Values = {}
    if kind == "safetensors":
        head = Prefix(blob, first=sizes.first() if sizes is not None else FIRST_RANGE)
        weights = safetensors_header(blob, values, head)
        if sizes is not None:
            sizes.saw(head)
        return weights, values
    from mhainspect.frontends.checkpoint.torchzip import read_torch_file

    return read_torch_file(blob, values, unpickling_reason), values


def read_file(tree: Tree, path: str, blob: Blob, kind: str, remote: bool
              ) -> tuple[dict[str, WeightMeta], dict[str, Any] | None]:
    """A checkpoint file's weights (quantization applied) and the config.json beside it (None: none)."""
    with Jobs(remote) as jobs:
        config_job = jobs.submit(config_at, tree, beside(path, "config.json"), False)
        if not remote:
            config_job.result()  # locally the config is read first, as it always was
        weights, values = weights_of(blob, kind)
        config = config_job.result()
    return apply_quantization(weights, config, values), config


def read_folder(tree: Tree, folder: str, display: str, remote: bool) -> tuple[dict[str, WeightMeta], dict[str, Any]]:
    """A Hugging Face folder's weights (quantization applied) and config (see the module docstring)."""
    names = list(tree.listdir(folder).files)
    if "config.json" not in names:
        raise InputError(f"{display}: is a folder without config.json (expected a model file or a Hugging Face "
                         "model folder)")
    found, kind, index_name = weight_files(names, display)

    def at(name: str) -> str:
        return f"{folder}/{name}" if folder else name

    sizes = HeaderSizes()

    def header(name: str) -> tuple[dict[str, WeightMeta], Values]:
        return weights_of(tree.blob(at(name)), kind, sizes)

    with Jobs(remote) as jobs:
        config_job = jobs.submit(config_at, tree, at("config.json"), True)
        index_job: Result[bytes] | None = None
        if index_name is not None:
            index_job = jobs.submit(small_file, tree.blob(at(index_name)), MAX_CONFIG_BYTES)
            # The index names the shards; the folder's names almost always say the same: read them meanwhile.
            pattern = "*.safetensors" if kind == "safetensors" else "pytorch_model*.bin"
            guessed = sorted(n for n in names if fnmatchcase(n, pattern) and "adapter" not in n)
            if len(guessed) > MAX_SHARD_FILES:  # not one model's shards: the index says which are
                guessed = []
        else:
            guessed = found
        jobs_by_name = {n: jobs.submit(header, n) for n in guessed}
        config = config_job.result()
        if index_job is not None:
            index_where = display.rstrip("/") + "/" + (index_name or "")
            shards = indexed_files(config_from_bytes(index_job.result(), index_where), index_where)
            if len(shards) > MAX_SHARD_FILES:
                raise InputError(f"{index_where}: names {len(shards):,} shard files, more than the {MAX_SHARD_FILES:,} "
                                 "one model is read from")
            listed = set(names)
            for f in shards:  # every shard checked before any is read
                _check_shard(f, listed, index_where)
            for f in shards:
                if f not in jobs_by_name:
                    jobs_by_name[f] = jobs.submit(header, f)
        else:
            shards = found
        read = [jobs_by_name[f].result() for f in shards]
    weights: dict[str, WeightMeta] = {}
    values: Values = {}
    for w, v in read:
        weights.update(w)
        values.update(v)
    assert config is not None
    return apply_quantization(weights, config, values), config


def _check_shard(name: str, names: set[str], where: str) -> None:
    norm = os.path.normpath(name)
    if os.path.isabs(name) or norm.startswith("..") or "/" in norm:
        raise InputError(f"{where}: shard '{name}' is outside the folder")
    if name not in names:
        raise InputError(f"{where}: shard '{name}' is missing")
