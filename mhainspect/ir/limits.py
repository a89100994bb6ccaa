"""One set of numeric limits for every reader, applied where a header is decoded.

A number read from a file (a tensor's rank, a dim, its element and byte counts, a header's length,
a config value) is checked here before anything else sees it, so the analysis never computes with
a value no real model has and no renderer meets a number it cannot print (3**700 elements overflow
a float; 10**400 exceeds Python's int-to-text limit). The ONNX, GGUF, safetensors, config,
PyTorch-archive and TorchScript readers all take their bounds from this module.

Bounds are those of the formats themselves: dims and element counts are int64 (ONNX, PyTorch,
GGUF and safetensors all store them so); a rank above 64 is no layer's weight (real models stay
below 8); config values are positive and below 2**63, floats finite.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MAX_RANK = 64  # no layer of a real model has more dims (the formats set no limit; shape folding stops here)
MAX_DIM = 2**63 - 1  # int64: every format stores dims as int64 (GGUF: uint64 read as int64)
MAX_NUMEL = 2**63 - 1  # more elements than an int64 index reaches: the declared shape is corrupt
MAX_BYTES = 2**63 - 1  # a byte count or offset past int64 addresses no file
MAX_SAFETENSORS_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own limit
MAX_CONFIG_BYTES = 16 * 1024 * 1024  # a config.json (the largest real ones are ~100 kB)
MAX_ARCHIVE_JSON_BYTES = 512 * 1024 * 1024  # a torch.export graph (a 70B model's is ~40 MB)
MAX_ARCHIVE_TEXT_BYTES = 64 * 1024 * 1024  # a TorchScript code file or pickle, inflated
MAX_SHARD_FILES = 1 << 12  # files one model is split into (an index's shards, a split GGUF's parts; real: < 200)
MAX_ARCHIVE_MEMBERS = 1 << 20  # members of one zip archive (a 70B torch.save zip has ~800)
MAX_CONFIG_INT = 2**63 - 1  # a config count (heads, widths, layers) past int64 is no model's
MAX_CONFIG_FLOAT = 1e300  # a finite float with room for the arithmetic done with it
MAX_CONFIG_STAGES = 64  # entries of a per-stage config list (real: <= 8); a longer list is not read as one
MAX_CONFIG_TREE = 64  # nested configs of one config the block lookup compares (real: < 20); the rest are not


def as_int(value: object) -> int | None:
    """``value`` if it is an int (a bool is not), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def bounded_numel(shape: Sequence[int]) -> int | None:
    """The element count of ``shape``, or None once it passes MAX_NUMEL (computed with an early
    stop: 700 dims of 3 never build a 334-digit number)."""
    n = 1
    for d in shape:
        if d == 0:
            return 0
    for d in shape:
        n *= d
        if n > MAX_NUMEL:
            return None
    return n


def shape_problem(shape: object) -> str | None:
    """Why ``shape`` (a decoded list of dims) is no tensor's shape, or None when it is one: not a
    list of ints, more than MAX_RANK dims, a negative dim or one past int64, or more elements
    than int64 counts."""
    if type(shape) is list and len(shape) <= MAX_RANK:  # the common case in one pass (every header entry)
        n = 1
        for d in shape:
            if type(d) is not int or not 0 <= d <= MAX_DIM:
                break
            n *= d
        else:
            if n <= MAX_NUMEL:
                return None
    if not isinstance(shape, (list, tuple)):
        return "shape is not a list"
    if len(shape) > MAX_RANK:
        return f"{len(shape):,} dims (at most {MAX_RANK})"
    dims: list[int] = []
    for d in shape:
        v = as_int(d)
        if v is None:
            return "a dim that is not an integer"
        if v < 0:
            return f"negative dim {v}"
        if v > MAX_DIM:
            return "a dim past int64"
        dims.append(v)
    if bounded_numel(dims) is None:
        return "more elements than int64 counts"
    return None


def byte_count(value: object) -> int | None:
    """``value`` as a byte count or offset (an int in [0, MAX_BYTES]), else None."""
    v = as_int(value)
    return v if v is not None and 0 <= v <= MAX_BYTES else None


def config_int(value: object) -> int | None:
    """A config value that is a positive int (not a bool) within MAX_CONFIG_INT, else None:
    negative, zero, 10**400, a float, a string or NaN are no count."""
    v = as_int(value)
    return v if v is not None and 0 < v <= MAX_CONFIG_INT else None


def config_float(value: object) -> float | None:
    """A config value that is a positive finite number (an int or float, not a bool) within
    MAX_CONFIG_FLOAT, else None (NaN, infinity, 10**400, a string)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        if not 0 < value <= MAX_CONFIG_FLOAT:
            return None
        return float(value)
    return value if math.isfinite(value) and 0 < value <= MAX_CONFIG_FLOAT else None
