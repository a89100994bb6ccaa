"""Checkpoints without running anything from the file: safetensors headers, weights-only state dicts,
Hugging Face folders (config.json + shards).

- ``.safetensors``: the 8-byte header length and the JSON header are read (bounded); tensor data
  is never read, but for a quantized Linear's stored logical shape (compressed-tensors
  ``weight_shape``, a bitsandbytes quant state: a few bytes each, bounded).
- Quantized Linears (GPTQ, AWQ, bitsandbytes, compressed-tensors, fp8): their weights at the
  logical shape they encode, their scales and zero points marked as quantization data
  (``mhainspect.frontends.checkpoint.quantized``).
- ``.pt/.pth/.bin``: a torch.save file, zip or legacy, is read without torch (``torchzip``: its
  pickle as data, with torch's weights-only allow-list). A file that needs arbitrary unpickling is
  refused (InputError) and nothing in it runs.
- A folder with ``config.json``: heads, kv heads and head_dim from the config, shapes from the
  weights (shards listed by ``*.index.json`` when present).

Without a config, d_model and projection widths come from the shapes and heads are reported
unknown (MHA004) unless 3-D Keras-style kernels identify them.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Collection, Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from mhainspect.errors import InputError
from mhainspect.frontends.checkpoint.hf_config import Tie, tied_copies
from mhainspect.frontends.checkpoint.quantized import MAX_VALUE_BYTES, VALUE_LEAVES
from mhainspect.ir.dtypes import INTEGER_STRUCT_CODES, canonical
from mhainspect.ir.limits import MAX_BYTES, MAX_CONFIG_BYTES, MAX_SAFETENSORS_HEADER_BYTES, byte_count, shape_problem
from mhainspect.ir.weights import WeightMeta
from mhainspect.sources.blob import Blob, Prefix
from mhainspect.sources.parallel import in_parallel

SAFETENSORS_SUFFIXES = (".safetensors",)
TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")


def safetensors_header(blob: Blob, values: dict[str, tuple[int, ...]] | None = None,
                       head: Prefix | None = None) -> dict[str, WeightMeta]:
    """Tensor metadata from a .safetensors header, local or remote: the 8-byte length and the
    header in one speculative range when it fits (a second, for the rest, when it does not);
    ``head``: the reader of the blob's first bytes, when the caller sizes its first range. The
    tensor bytes are never read, except, into ``values`` when given, those of the few small integer
    tensors that state a quantized weight's logical shape
    (``mhainspect.frontends.checkpoint.quantized.wants_values``)."""
    path = blob.name
    head = head or Prefix(blob)
    first = head.read(0, 8)
    if len(first) < 8:
        raise InputError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    (n,) = struct.unpack("<Q", first)
    size = blob.size()
    if n > MAX_SAFETENSORS_HEADER_BYTES or n + 8 > size or n == 0:
        raise InputError(f"{path}: not a safetensors file (header length {n} does not fit the "
                         f"{size}-byte file)")
    raw = head.read(8, n)
    if len(raw) != n:
        raise InputError(f"{path}: header cut short ({len(raw):,} of {n:,} bytes)")
    try:
        header = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise InputError(f"{path}: not a safetensors file (header nested too deeply)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a safetensors file (header is not JSON: {exc})") from None
    if not isinstance(header, dict):
        raise InputError(f"{path}: not a safetensors file (header is not a JSON object)")
    out: dict[str, WeightMeta] = {}
    wanted: list[tuple[str, str, list[Any]]] = []
    file_name = blob.basename
    spelled: dict[str, str] = {}  # header dtype -> canonical (a header uses a handful)
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            raise InputError(f"{path}: malformed safetensors header entry {_quoted(name)}")
        shape, dtype, offsets = entry.get("shape"), entry.get("dtype"), entry.get("data_offsets")
        if (not isinstance(shape, list) or not isinstance(dtype, str) or not isinstance(offsets, list)
                or len(offsets) != 2 or not _offsets_fit(offsets)):
            raise InputError(f"{path}: malformed safetensors header entry {_quoted(name)}")
        why = shape_problem(shape)
        if why is not None:
            raise InputError(f"{path}: malformed safetensors header entry {_quoted(name)}: {why}")
        kind = spelled.get(dtype)
        if kind is None:
            kind = spelled[dtype] = canonical(dtype)
        out[name] = WeightMeta(name, tuple(shape), kind, f"{file_name}:{offsets[0]}:{offsets[1]}")
        if values is not None and name.endswith(VALUE_LEAVES):
            wanted.append((name, kind, offsets))
    if wanted and values is not None:
        values.update(_read_values(head, 8 + n, wanted))
    return out


def _offsets_fit(offsets: list[Any]) -> bool:
    """Both data offsets are byte counts (``limits.byte_count``), the plain ints checked inline."""
    a, b = offsets
    if type(a) is int and type(b) is int and 0 <= a <= MAX_BYTES and 0 <= b <= MAX_BYTES:
        return True
    return byte_count(a) is not None and byte_count(b) is not None


def _quoted(name: str, limit: int = 120) -> str:
    """A header name for an error line: quoted, cut to ``limit`` characters."""
    return repr(name if len(name) <= limit else name[:limit] + "...")




def _read_values(head: Prefix, base: int, wanted: list[tuple[str, str, list[Any]]]) -> dict[str, tuple[int, ...]]:
    """The values of small integer tensors (at most MAX_VALUE_BYTES each) at their header offsets:
    from the bytes the header read already holds, else by one read each (in parallel when remote)."""
    spans: list[tuple[str, str, int, int]] = []
    for name, dtype, (start, end) in wanted:
        code = INTEGER_STRUCT_CODES.get(dtype)
        if code is None or not isinstance(start, int) or not isinstance(end, int):
            continue
        length = end - start
        if start < 0 or length <= 0 or length > MAX_VALUE_BYTES or length % struct.calcsize(code):
            continue
        spans.append((name, code, base + start, length))

    def read(span: tuple[str, str, int, int]) -> bytes:
        _, _, offset, length = span
        if offset + length <= head.held:
            return bytes(head.buf[offset:offset + length])
        return head.blob.read(offset, length)

    out: dict[str, tuple[int, ...]] = {}
    for (name, code, _, length), raw in zip(spans, in_parallel(read, spans, head.blob.speculative)):
        if len(raw) == length:
            out[name] = struct.unpack(f"<{length // struct.calcsize(code)}{code}", raw)
    return out


def unpickling_reason(message: str) -> str:
    """Why torch's weights-only loader refused the file, in words that fit one line: the class it
    met (a whole pickled model, not a state dict) and what to save instead."""
    found = re.search(r"GLOBAL\s+([\w.]+)", message)
    if found is not None:
        return (f"it pickles a {found.group(1)} object (a whole model saved with torch.save(model), not a "
                "state dict); save model.state_dict() instead, or inspect the model in Python with "
                "mhainspect.inspect(model)")
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    first = next((ln for ln in lines if "Unsupported" in ln), lines[0] if lines else "")
    return f"loading it needs arbitrary unpickling (not a weights-only state dict): {first}"


def flatten_state_dict(obj: Any, prefix: str, out: dict[str, Any], tensor_type: type, depth: int) -> None:
    """State dicts, possibly nested ({"state_dict": ...}, {"model": ...}); non-tensors ignored.
    ``tensor_type``: what a tensor is in ``obj`` (the pickle reader's TensorRecord, or torch.Tensor)."""
    if depth > 8:
        return
    if isinstance(obj, tensor_type):
        if prefix:
            out[prefix] = obj
        return
    if isinstance(obj, Mapping):
        keys = list(obj.keys())
        for wrapper in ("state_dict", "model_state_dict", "model", "module", "params"):
            if wrapper in obj and isinstance(obj[wrapper], Mapping) and not prefix:
                flatten_state_dict(obj[wrapper], "", out, tensor_type, depth + 1)
                return
        for k in keys:
            if isinstance(k, str):
                flatten_state_dict(obj[k], f"{prefix}.{k}" if prefix else k, out, tensor_type, depth + 1)


def read_config(path: Path) -> dict[str, Any]:
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise InputError(f"{path}: config.json larger than {MAX_CONFIG_BYTES} bytes")
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    return config_from_bytes(raw, str(path))


def config_from_bytes(raw: bytes, name: str) -> dict[str, Any]:
    """A config.json (or an index) as a JSON object; ``name`` says where it came from."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}: not valid JSON: {exc}") from None
    except RecursionError:
        raise InputError(f"{name}: not valid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise InputError(f"{name}: expected a JSON object")
    return data


# How a Hugging Face folder names its weights, in order of preference: (index, the single file,
# the pattern of several files, their format). Local and remote folders follow the same rule.
SHARD_RULES = (("model.safetensors.index.json", "model.safetensors", "*.safetensors", "safetensors"),
               ("pytorch_model.bin.index.json", "pytorch_model.bin", "pytorch_model*.bin", "pytorch"))


def weight_files(names: Collection[str], where: str) -> tuple[list[str], str, str | None]:
    """The weight files a folder holding the files ``names`` (no subfolders) uses, their format, and
    the index to read first when one lists them (then the list is empty: the index says)."""
    for index_name, single, pattern, kind in SHARD_RULES:
        if index_name in names:
            return [], kind, index_name
        if single in names:
            return [single], kind, None
        found = sorted(n for n in names if fnmatchcase(n, pattern) and "adapter" not in n)
        if found:
            return found, kind, None
    raise InputError(f"{where}: no weights (model.safetensors, *.safetensors or pytorch_model*.bin) next to "
                     "config.json")


def indexed_files(index: Mapping[str, Any], where: str) -> list[str]:
    """The shard files an index's weight_map names, each once, in its order."""
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict):
        raise InputError(f"{where}: no weight_map")
    return list(dict.fromkeys(map(str, weight_map.values())))


def apply_ties(weights: Mapping[str, WeightMeta], config: Mapping[str, Any] | None, parameters: frozenset[str]
               ) -> tuple[dict[str, WeightMeta], tuple[Tie, ...]]:
    """``weights`` with every stored copy of a weight the config ties to another marked
    (``WeightMeta.tied_to``: its parameters count once, its bytes as stored), and those ties. Read
    over every shard at once: a tie's two names may sit in different files. Copies that already
    share storage (one torch.save of a tied model) need no mark. ``parameters``: the names of the
    parameters (``ir.weights.parameter_names``)."""
    out = dict(weights)
    if config is None:
        return out, ()
    shapes = {n: m.shape for n, m in weights.items() if n in parameters and m.quant is None}
    found: list[Tie] = []
    for tie in tied_copies(config, shapes):
        copy, source = weights[tie.copy], weights[tie.source]
        if copy.storage_key != source.storage_key and copy.dtype == source.dtype:
            out[tie.copy] = copy._replace(tied_to=tie.source)
            found.append(tie)
    return out, tuple(found)
