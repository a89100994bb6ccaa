"""Model files for the remote tests and the remote benchmark, one of each format the audit reads.

Safetensors files are written header first and sized to their tensors with ``truncate`` (sparse:
a 70B-shaped shard costs its header on disk, not its weights), so a server can serve them as if
they were full.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path

ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "I8": 1, "F8_E4M3": 1}


def write_safetensors(path: Path, tensors: Mapping[str, tuple[str, Sequence[int]]],
                      metadata: Mapping[str, str] | None = None) -> int:
    """A safetensors file with ``tensors`` (name -> (dtype, shape)), data all zero (sparse).
    Returns the header length."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name, (dtype, shape) in tensors.items():
        nbytes = math.prod(shape) * ITEMSIZE[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)
    return len(raw)


def llama_config(d: int, heads: int, kv_heads: int, layers: int, vocab: int = 256, ffn: int = 0,
                 **extra: object) -> dict[str, object]:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d,
            "num_attention_heads": heads, "num_key_value_heads": kv_heads, "num_hidden_layers": layers,
            "intermediate_size": ffn or 4 * d, "vocab_size": vocab, "max_position_embeddings": 4096,
            "torch_dtype": "bfloat16", **extra}


def llama_tensors(d: int, heads: int, kv_heads: int, layers: int, vocab: int = 256, ffn: int = 0,
                  dtype: str = "BF16") -> dict[str, tuple[str, tuple[int, ...]]]:
    head_dim = d // heads
    ffn = ffn or 4 * d
    out: dict[str, tuple[str, tuple[int, ...]]] = {"model.embed_tokens.weight": (dtype, (vocab, d))}
    for i in range(layers):
        p = f"model.layers.{i}"
        out[f"{p}.input_layernorm.weight"] = (dtype, (d,))
        out[f"{p}.self_attn.q_proj.weight"] = (dtype, (heads * head_dim, d))
        out[f"{p}.self_attn.k_proj.weight"] = (dtype, (kv_heads * head_dim, d))
        out[f"{p}.self_attn.v_proj.weight"] = (dtype, (kv_heads * head_dim, d))
        out[f"{p}.self_attn.o_proj.weight"] = (dtype, (d, heads * head_dim))
        out[f"{p}.post_attention_layernorm.weight"] = (dtype, (d,))
        out[f"{p}.mlp.gate_proj.weight"] = (dtype, (ffn, d))
        out[f"{p}.mlp.up_proj.weight"] = (dtype, (ffn, d))
        out[f"{p}.mlp.down_proj.weight"] = (dtype, (d, ffn))
    out["model.norm.weight"] = (dtype, (d,))
    out["lm_head.weight"] = (dtype, (vocab, d))
    return out


def write_hf_folder(folder: Path, config: Mapping[str, object], tensors: Mapping[str, tuple[str, Sequence[int]]],
                    shards: int = 1, index: bool = True) -> list[Path]:
    """A Hugging Face folder: config.json and the tensors in ``shards`` safetensors files (with
    model.safetensors.index.json when ``index`` and shards > 1). Returns the weight files."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    names = list(tensors)
    if shards == 1:
        write_safetensors(folder / "model.safetensors", tensors)
        return [folder / "model.safetensors"]
    per = -(-len(names) // shards)
    files: list[Path] = []
    weight_map: dict[str, str] = {}
    for i in range(shards):
        part = names[i * per:(i + 1) * per]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(folder / fname, {n: tensors[n] for n in part})
        weight_map.update({n: fname for n in part})
        files.append(folder / fname)
    if index:
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}, indent=2))
    return files


def moe_tensors(layers: int, experts: int, d: int = 64, heads: int = 4, kv_heads: int = 1,
                ffn: int = 32) -> dict[str, tuple[str, tuple[int, ...]]]:
    """A mixture-of-experts stack with fp8 experts and their scales (many tensors, small shapes)."""
    out = llama_tensors(d, heads, kv_heads, layers, dtype="BF16")
    for i in range(layers):
        for name in ("gate_proj", "up_proj", "down_proj"):
            del out[f"model.layers.{i}.mlp.{name}.weight"]
        out[f"model.layers.{i}.mlp.gate.weight"] = ("BF16", (experts, d))
        for e in range(experts):
            p = f"model.layers.{i}.mlp.experts.{e}"
            for name, shape in (("gate_proj", (ffn, d)), ("up_proj", (ffn, d)), ("down_proj", (d, ffn))):
                out[f"{p}.{name}.weight"] = ("F8_E4M3", shape)
                out[f"{p}.{name}.weight_scale_inv"] = ("F32", (1, 1))
    return out


def vocabulary(n: int) -> list[str]:
    """``n`` distinct token strings of realistic lengths (2-12 bytes)."""
    return [f"t{i:x}" + "abcdefgh"[: i % 9] for i in range(n)]


def merges(n: int) -> list[str]:
    return [f"t{i:x} t{i + 1:x}" for i in range(n)]


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def write_sparse_onnx(path: Path, layers: int, d: int, heads: int, inits_first: bool = False) -> int:
    """An ONNX model with inline weights (raw_data), its payloads holes in a sparse file: ``layers``
    attention layers (tests/attention_graphs.mha_nodes) with MLP initializers and an embedding;
    ``inits_first``: the initializers before the nodes in the graph (valid protobuf, not the order
    a serializer writes). Returns the number of initializers with a payload."""
    import onnx
    from attention_graphs import Nodes, mha_nodes, shape_consts, value

    g = Nodes()
    x = "x"
    shapes: dict[str, list[int]] = {}
    for i in range(layers):
        prefix = f"layers.{i}.attn"
        x = mha_nodes(g, f"/layers.{i}/attn", x, prefix, heads, d // heads)
        for r in "qkvo":
            shapes[f"{prefix}.{r}_proj.weight"] = [d, d]
            shapes[f"{prefix}.{r}_proj.bias"] = [d]
        shapes[f"layers.{i}.mlp.up.weight"] = [d, 4 * d]
        shapes[f"layers.{i}.mlp.down.weight"] = [4 * d, d]
    shapes["embed.weight"] = [50304, d]
    graph = onnx.helper.make_graph(g.nodes, "g", [value("x", "batch", "seq", d)], [value(x, "batch", "seq", d)],
                                   shape_consts(heads, d // heads) + g.inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    graph_bytes = model.graph.SerializeToString()
    model.ClearField("graph")
    inits: list[tuple[bytes, int]] = []  # (the initializer up to its payload, payload length)
    for name, dims in shapes.items():
        meta = onnx.TensorProto(name=name, dims=dims, data_type=onnx.TensorProto.FLOAT).SerializeToString()
        n = math.prod(dims) * 4
        head = meta + b"\x4a" + _varint(n)  # raw_data (field 9), length-delimited
        inits.append((b"\x2a" + _varint(len(head) + n) + head, n))  # GraphProto.initializer (field 5)
    graph_len = len(graph_bytes) + sum(len(head) + n for head, n in inits)
    with open(path, "wb") as fh:
        fh.write(model.SerializeToString() + b"\x3a" + _varint(graph_len))  # ModelProto.graph (7)
        if not inits_first:
            fh.write(graph_bytes)
        for head, n in inits:
            fh.write(head)
            fh.seek(n, 1)  # the payload: a hole
        if inits_first:
            fh.write(graph_bytes)
        fh.truncate(fh.tell())
    return len(inits)


class _Touched:
    """A memoryview stand-in that records every byte the ONNX payload scanner reads or copies."""

    def __init__(self, view: memoryview) -> None:
        self.view = view
        self.spans: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self.view)

    def __getitem__(self, key: int | slice) -> int | bytes:
        if isinstance(key, int):
            self.spans.append((key, key + 1))
            return self.view[key]
        start, stop, _ = key.indices(len(self.view))
        if stop > start:
            self.spans.append((start, stop))
        return bytes(self.view[start:stop])


def onnx_floor(path: Path) -> tuple[int, int]:
    """(spans, bytes): what any reader of ``path`` needs, the model minus the payloads the scanner
    skips: its bytes (what ``stripped`` keeps), and the disjoint spans of the file they lie in
    (payloads cut them apart: with one range a request, no reader needs fewer requests without
    fetching payload bytes)."""
    import mmap

    from mhainspect.frontends.onnx.wire import stripped

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        touched = _Touched(view)
        kept = len(stripped(touched))  # type: ignore[arg-type]
        del touched.view
        view.release()
    spans, end = 0, -1
    for a, b in sorted(touched.spans):
        if a > end:
            spans += 1
        end = max(end, b)
    return spans, kept


def copy_check_floor(path: Path) -> tuple[int, int]:
    """(spans, bytes) a copy check (mhainspect.ir.copies) of the ONNX file ``path`` reads locally:
    what reading the same values by ranges may add to a remote walk (docs/remote.md): a range a
    span at most, each span rounded out to whole blocks of its payload (BLOCK; a span may straddle
    two) and joined with blocks up to MERGE_GAP away."""
    from mhainspect.frontends.onnx.frontend import data_files
    from mhainspect.frontends.onnx.loader import load_onnx
    from mhainspect.frontends.onnx.values import BLOCK, MERGE_GAP, StoredValues, folded_by
    from mhainspect.sources.blob import FileView, MappedView
    from mhainspect.sources.transports.local import LocalTree

    graph = load_onnx(path)
    spans = nbytes = 0

    class Counting(StoredValues):
        def _fetch(self, name: str, source: FileView, wanted: list[tuple[int, int]],
                   payload: tuple[int, int]) -> list[bytes] | None:
            nonlocal spans, nbytes
            spans += len(wanted)
            nbytes += sum(n + 2 * BLOCK + MERGE_GAP for _, n in wanted)
            return super()._fetch(name, source, wanted, payload)

    with Counting(graph.weights, MappedView(path), data_files(LocalTree(path.parent), path.name)) as reader:
        folded_by(graph, reader)
    return spans, nbytes
