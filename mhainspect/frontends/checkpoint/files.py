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
from collections.abc import Mapping
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
from mhainspect.sources import beside
from mhainspect.sources.blob import FIRST_RANGE, Blob, Prefix, small_file
from mhainspect.sources.parallel import Jobs, Result
from mhainspect.sources.tree import Tree

Values = dict[str, tuple[int, ...]]


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


def weights_of(blob: Blob, kind: str, sizes: HeaderSizes | None = None, shard: str = ""
               ) -> tuple[dict[str, WeightMeta], Values]:
    """A checkpoint file's weights and the small values its quantized weights state (``kind``:
    "safetensors", else a torch.save file)."""
    values: Values = {}
    if kind == "safetensors":
        head = Prefix(blob, first=sizes.first(shard) if sizes is not None else FIRST_RANGE)
        weights = safetensors_header(blob, values, head)
        if sizes is not None:
            sizes.saw(shard, head)
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
        return weights_of(tree.blob(at(name)), kind, sizes, name)

    with Jobs(remote) as jobs:
        config_job = jobs.submit(config_at, tree, at("config.json"), True)
        index_job: Result[bytes] | None = None
        if index_name is not None:
            index_job = jobs.submit(small_file, tree.blob(at(index_name)), MAX_CONFIG_BYTES)
            # The index names the shards; the folder's names almost always say the same: read them meanwhile.
            pattern = "*.safetensors" if kind == "safetensors" else "pytorch_model*.bin"
            guessed = sorted(n for n in names if fnmatchcase(n, pattern) and "adapter" not in n)
            if len(guessed) > MAX_SHARD_FILES or _long_headers(tree.files().get(at(index_name)), guessed, kind):
                guessed = []  # not one model's shards (the index says which are), or headers the index sizes
        else:
            guessed = found
        jobs_by_name = {n: jobs.submit(header, n) for n in guessed}
        config = config_job.result()
        if index_job is not None:
            index_where = display.rstrip("/") + "/" + (index_name or "")
            index = config_from_bytes(index_job.result(), index_where)
            index_job = None  # the index's bytes and its parsed map (megabytes for 100k tensors) go now
            shards = indexed_files(index, index_where)
            # Remote only: locally a header longer than its first range costs one more read, far less
            # than the plan's pass over every name (92k on a DeepSeek-V3-sized folder).
            if remote:
                sizes.plan(index["weight_map"])
            del index
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
        weights: dict[str, WeightMeta] = {}
        values: Values = {}
        for f in shards:  # merged as each comes: a shard's own dicts are dropped once merged
            w, v = jobs_by_name.pop(f).result()
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


def _check_shard(name: str, names: set[str], where: str) -> None:
    norm = os.path.normpath(name)
    if os.path.isabs(name) or norm.startswith("..") or "/" in norm:
        raise InputError(f"{where}: shard '{name}' is outside the folder")
    if name not in names:
        raise InputError(f"{where}: shard '{name}' is missing")
