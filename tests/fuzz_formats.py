"""Seeds and mutations for fuzzing every format the tool reads beside ONNX, shared by
tests/test_fuzz.py and scripts/fuzz_long.py.

Seeds are built here (nothing is downloaded): a GGUF decoder (the gguf package's writer), a
safetensors file, a Hugging Face folder (config.json + safetensors), and, with torch, a torch.save
zip, a torch.export program (.pt2) and traced and scripted TorchScript archives. A mutation is a
plain tuple, as in tests/fuzz_mutations.py, applied

- to the bytes of the file (``bytes``: fuzz_mutations.mutate_bytes),
- to a JSON document inside it (``json``: a safetensors header, a config.json, a .pt2 program or
  its weights' metadata): a value anywhere in it replaced by one that breaks arithmetic or types
  (10**400, -1, NaN, 2**64, a string, 700 dims), a key dropped, a list entry repeated,
- to a member of a zip archive (``member``: its bytes mutated, or it dropped or repeated).

Every mutated input must keep fuzz_mutations.check_contract: a Report that renders every way, or
an InputError; nothing else.
"""

from __future__ import annotations

import copy
import io
import json
import math
import struct
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from fuzz_mutations import mutate_bytes

Mutation = tuple[Any, ...]
ABSURD_JSON: tuple[Any, ...] = (10**400, -(10**400), -1, 0, 1, 2**63, 2**64, -(2**63) - 1, 0.5, math.nan, math.inf,
                                -math.inf, "", "x" * 300, "F32", None, True, False, [], {}, [3] * 700, [2**62] * 3,
                                [-4, 64], {"as_int": 10**30}, {"as_expr": {"expr_str": "Mul(" * 50}})
JSON_KINDS = ("replace", "drop", "repeat")
_GGUF_HEADER = 4096  # the seed's metadata and tensor infos lie within its first 4 KiB
MEMBER_KINDS = ("bytes", "json", "drop", "repeat")


# ------------------------------------------------------------------------------ JSON documents


def _slots(doc: Any, out: list[tuple[Any, Any]], depth: int = 0) -> list[tuple[Any, Any]]:
    """Every (container, key) of a JSON document, in a stable order (bounded)."""
    if depth > 40 or len(out) > 20_000:
        return out
    if isinstance(doc, dict):
        for k in list(doc):
            out.append((doc, k))
            _slots(doc[k], out, depth + 1)
    elif isinstance(doc, list):
        for i in range(len(doc)):
            out.append((doc, i))
            _slots(doc[i], out, depth + 1)
    return out


def mutate_json(doc: Any, mutations: Sequence[Mutation]) -> Any:
    """``doc`` changed in place by each (kind, where, what) mutation; returns it."""
    for kind, where, what in mutations:
        slots = _slots(doc, [])
        if not slots:
            break
        container, key = slots[where % len(slots)]
        if kind == "replace":
            container[key] = copy.deepcopy(ABSURD_JSON[what % len(ABSURD_JSON)])  # never one object twice
        elif kind == "drop":
            del container[key]
        elif kind == "repeat" and isinstance(container, list):
            container.insert(key, container[key])
        elif kind == "repeat" and isinstance(container, dict):
            container[f"{key}_{what % 7}"] = container[key]
    return doc


def dump_json(doc: Any) -> bytes:
    try:
        return json.dumps(doc).encode()
    except ValueError:  # an integer past Python's text limit
        return json.dumps(doc, default=str).encode()


# ------------------------------------------------------------------------------ seeds


def safetensors_bytes(header: dict[str, Any], data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def _llama_header(d: int = 16, kv: int = 8) -> tuple[dict[str, Any], bytes]:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for layer in range(2):
        for role, rows in (("q", d), ("k", kv), ("v", kv), ("o", d)):
            n = rows * d * 4
            header[f"model.layers.{layer}.self_attn.{role}_proj.weight"] = {
                "dtype": "F32", "shape": [rows, d], "data_offsets": [offset, offset + n]}
            offset += n
    return header, bytes(offset)


_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16, "num_attention_heads": 4,
           "num_key_value_heads": 2, "num_hidden_layers": 2, "head_dim": 4, "max_position_embeddings": 64,
           "torch_dtype": "float32", "sliding_window": None, "rope_theta": 10000.0}


@cache
def gguf_seed() -> bytes:
    from gguf_files import Decoder

    with tempfile.TemporaryDirectory() as d:
        (path,) = Decoder(layers=1, d_model=64, heads=4, kv_heads=2, head_dim=16, vocab=32).write(Path(d) / "m.gguf")
        return path.read_bytes()


def _torch_built(kind: str) -> bytes:
    import torch
    from pytorch_artifacts import annotated, export_pt2, mha_block, script_ts, trace_ts

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "seed"
        if kind == "torch_zip":
            torch.save(mha_block().module.state_dict(), path)
        elif kind == "pt2":
            export_pt2(mha_block(), path)
        elif kind == "torchscript_trace":
            trace_ts(annotated(2)(), path)
        else:
            script_ts(annotated(2)(), path)
        return path.read_bytes()


@cache
def torch_seed(kind: str) -> bytes:
    return _torch_built(kind)


FORMATS: dict[str, str] = {  # format -> the suffix its file gets
    "gguf": ".gguf", "safetensors": ".safetensors", "config_folder": "", "torch_zip": ".pt", "pt2": ".pt2",
    "torchscript_trace": ".pt", "torchscript_script": ".pt",
}
TORCH_FORMATS = ("torch_zip", "pt2", "torchscript_trace", "torchscript_script")


def seed(fmt: str) -> bytes:
    if fmt == "gguf":
        return gguf_seed()
    if fmt in ("safetensors", "config_folder"):
        return safetensors_bytes(*_llama_header())
    return torch_seed(fmt)


# ------------------------------------------------------------------------------ applying mutations


def _mutate_safetensors(data: bytes, json_mutations: Sequence[Mutation]) -> bytes:
    if len(data) < 8:
        return data
    (n,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8:8 + n])
    except ValueError:
        return data
    return safetensors_bytes(mutate_json(header, json_mutations), data[8 + n:])


def _rewrite_zip(data: bytes, mutations: Sequence[Mutation]) -> bytes:
    """The archive with each (kind, member, a, b) mutation applied to one of its members."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            members = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError):
        return data
    for kind, which, a, b in mutations:
        if not members:
            break
        i = which % len(members)
        name, body = members[i]
        if kind == "bytes":
            members[i] = (name, mutate_bytes(body, [("flip", a, b), ("truncate", a * 7 + b, 0)] if b % 5 == 0
                                             else [(("flip", "set", "insert", "delete")[a % 4], a, b)]))
        elif kind == "json":
            json_members = [j for j, (n, _) in enumerate(members) if n.endswith(".json")]
            if json_members:
                j = json_members[which % len(json_members)]
                try:
                    doc = json.loads(members[j][1])
                except ValueError:
                    continue
                members[j] = (members[j][0], dump_json(mutate_json(doc, [(JSON_KINDS[a % 3], a // 3, b)])))
        elif kind == "drop":
            del members[i]
        elif kind == "repeat":
            members.append(members[i])
    out = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w") as z:
        warnings.simplefilter("ignore")  # a repeated member is the point
        for name, body in members:
            z.writestr(name, body)
    return out.getvalue()


def write_case(folder: Path, fmt: str, byte_mutations: Sequence[Mutation], json_mutations: Sequence[Mutation],
               member_mutations: Sequence[Mutation], use: int) -> Path:
    """The mutated input in ``folder``: ``use`` picks which mutations apply (0 bytes, 1 structure)."""
    data = seed(fmt)
    structured = use % 2 == 1
    if fmt == "config_folder":
        target = folder / "model"
        target.mkdir(exist_ok=True)
        config = mutate_json(json.loads(json.dumps(_CONFIG)), json_mutations) if structured else _CONFIG
        (target / "config.json").write_bytes(dump_json(config) if structured else
                                             mutate_bytes(json.dumps(config).encode(), byte_mutations))
        (target / "model.safetensors").write_bytes(_mutate_safetensors(data, json_mutations[:1]) if structured
                                                   else data)
        return target
    if structured:
        if fmt == "safetensors":
            data = _mutate_safetensors(data, json_mutations)
        elif fmt in TORCH_FORMATS:
            data = _rewrite_zip(data, member_mutations)
        else:  # GGUF: the header's bytes (counts, lengths, dims, types), not its tensor data
            data = mutate_bytes(data[:_GGUF_HEADER], byte_mutations) + data[_GGUF_HEADER:]
    else:
        data = mutate_bytes(data, byte_mutations)
    path = folder / f"mutated{FORMATS[fmt]}"
    path.write_bytes(data)
    return path


CaseWriter = Callable[[Path, str, Sequence[Mutation], Sequence[Mutation], Sequence[Mutation], int], Path]
