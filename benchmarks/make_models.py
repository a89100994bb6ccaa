"""Generate the benchmark models: Llama-shaped ONNX graphs at 7B and 70B shapes, a 1.5-1.9 GB file
with inline weights, a 32-layer dynamo export of a tiny LlamaForCausalLM and a 70B-shaped sharded
safetensors checkpoint, and a 70B-shaped GGUF file (Q4_K, real header and tokenizer, sparse data).

No real weights are ever written for the big models: every weight of the external-data graphs points
into ONE sparse file per model (created with truncate, so it allocates no blocks), and the
safetensors shards hold a real JSON header followed by a hole. Only the inline-weights file holds
real bytes (zeros, ~1.8 GB on disk).

    python benchmarks/make_models.py [--out DIR] [--only NAME,...] [--force]

DIR defaults to $MHAINSPECT_BENCH_DIR or /tmp/mhainspect-bench (never the repository). Files that
exist are kept unless --force. `python benchmarks/make_models.py --list` names the models.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import TensorProto, helper

DEFAULT_OUT = Path(os.environ.get("MHAINSPECT_BENCH_DIR", "/tmp/mhainspect-bench"))
INT64_MAX = 2**63 - 1
ALIGN = 4096  # external-data offsets aligned as onnx.save does for large tensors


@dataclass(frozen=True)
class LlamaShape:
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int = 32000
    dtype: int = TensorProto.FLOAT16  # 2 bytes/param: the 70B graph "holds" ~138 GB

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    def layer_params(self) -> int:
        d, hd = self.d_model, self.head_dim
        attn = d * self.heads * hd * 2 + d * self.kv_heads * hd * 2
        return attn + 3 * d * self.ffn + 2 * d

    def total_params(self) -> int:
        return self.layers * self.layer_params() + 2 * self.vocab * self.d_model + self.d_model

    def attention_params(self) -> int:
        d, hd = self.d_model, self.head_dim
        return self.layers * (d * self.heads * hd * 2 + d * self.kv_heads * hd * 2)


LLAMA_7B = LlamaShape(layers=32, d_model=4096, heads=32, kv_heads=8, ffn=11008)
LLAMA_70B = LlamaShape(layers=80, d_model=8192, heads=64, kv_heads=8, ffn=28672)
# 12 layers at d_model 2560 in float16: 918M params, 1.84 GB of inline raw_data.
INLINE_1P8GB = LlamaShape(layers=12, d_model=2560, heads=20, kv_heads=4, ffn=6144)

_ITEMSIZE = {TensorProto.FLOAT16: 2, TensorProto.FLOAT: 4, TensorProto.BFLOAT16: 2}


# --------------------------------------------------------------------------------------
# Graph construction, TorchScript-exporter style ("/model/layers.0/self_attn/q_proj/MatMul",
# "onnx::MatMul_N" pre-transposed [in, out] Linear weights, Constant nodes for literals, shape
# arithmetic Shape -> Gather -> Unsqueeze -> Concat -> Reshape recomputed per layer).
# --------------------------------------------------------------------------------------


@dataclass
class Weight:
    name: str
    shape: tuple[int, ...]
    dtype: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * _ITEMSIZE[self.dtype]


@dataclass
class LlamaGraph:
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    weights: list[Weight] = field(default_factory=list)
    small_inits: list[onnx.TensorProto] = field(default_factory=list)  # inline tiny constants
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    next_id: int = 100

    def uid(self) -> int:
        self.next_id += 1
        return self.next_id

    def op(self, scope: str, op_type: str, inputs: list[str], n_out: int = 1, output: str | None = None,
           **attrs: object) -> str:
        k = self.counts.get((scope, op_type), 0)
        self.counts[(scope, op_type)] = k + 1
        name = f"{scope}/{op_type}" + (f"_{k}" if k else "")
        outs = [output] if output else [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs[0]

    def const_i64(self, scope: str, values: list[int] | int) -> str:
        """A Constant node; the value as raw_data, as the exporters write it."""
        dims = [] if isinstance(values, int) else [len(values)]
        vals = [values] if isinstance(values, int) else values
        t = helper.make_tensor("value", TensorProto.INT64, dims, struct.pack(f"<{len(vals)}q", *vals), raw=True)
        return self.op(scope, "Constant", [], value=t)

    def const_f(self, scope: str, value: float, dtype: int) -> str:
        fmt = {TensorProto.FLOAT: "<f", TensorProto.FLOAT16: "<e"}[dtype]
        t = helper.make_tensor("value", dtype, [], struct.pack(fmt, value), raw=True)
        return self.op(scope, "Constant", [], value=t)

    def weight(self, name: str | None, shape: tuple[int, ...], dtype: int) -> str:
        name = name or f"onnx::MatMul_{self.uid()}"
        self.weights.append(Weight(name, shape, dtype))
        return name


def build_llama(shape: LlamaShape, producer: tuple[str, str] = ("pytorch", "2.1.0")) -> tuple[onnx.ModelProto, list[Weight]]:
    """A LlamaForCausalLM forward (no KV cache) as the TorchScript exporter writes it, weights as metadata."""
    g = LlamaGraph()
    dt = shape.dtype
    d, hd = shape.d_model, shape.head_dim

    # embeddings
    emb = g.weight("model.embed_tokens.weight", (shape.vocab, d), dt)
    x = g.op("/model/embed_tokens", "Gather", [emb, "input_ids"])

    # rotary embedding, computed once: freqs = inv_freq[:, None] @ position_ids[:, None, :]
    rs = "/model/rotary_emb"
    inv = helper.make_tensor("model.rotary_emb.inv_freq_expanded", TensorProto.FLOAT, [1, hd // 2, 1],
                             [1.0 / (10000 ** (2 * i / hd)) for i in range(hd // 2)])
    g.small_inits.append(inv)
    pos = g.op(rs, "Unsqueeze", ["position_ids", g.const_i64(rs, [1])])
    pos = g.op(rs, "Cast", [pos], to=TensorProto.FLOAT)
    freqs = g.op(rs, "MatMul", [inv.name, pos])
    freqs = g.op(rs, "Transpose", [freqs], perm=[0, 2, 1])
    embp = g.op(rs, "Concat", [freqs, freqs], axis=-1)
    cos = g.op(rs, "Cast", [g.op(rs, "Cos", [embp])], to=dt)
    sin = g.op(rs, "Cast", [g.op(rs, "Sin", [embp])], to=dt)

    def rmsnorm(scope: str, inp: str, wname: str) -> str:
        w = g.weight(wname, (d,), dt)
        t = g.op(scope, "Cast", [inp], to=TensorProto.FLOAT)
        var = g.op(scope, "Pow", [t, g.const_f(scope, 2.0, TensorProto.FLOAT)])
        var = g.op(scope, "ReduceMean", [var], axes=[-1], keepdims=1)
        var = g.op(scope, "Add", [var, g.const_f(scope, 1e-5, TensorProto.FLOAT)])
        inv_rms = g.op(scope, "Div", [g.const_f(scope, 1.0, TensorProto.FLOAT), g.op(scope, "Sqrt", [var])])
        t = g.op(scope, "Mul", [t, inv_rms])
        t = g.op(scope, "Cast", [t], to=dt)
        return g.op(scope, "Mul", [w, t])

    def linear(scope: str, inp: str, d_in: int, d_out: int) -> str:
        return g.op(scope, "MatMul", [inp, g.weight(None, (d_in, d_out), dt)])

    for i in range(shape.layers):
        x = _decoder_layer(g, shape, i, x, cos, sin, rmsnorm, linear)

    x = rmsnorm("/model/norm", x, "model.norm.weight")
    g.op("/lm_head", "MatMul", [x, g.weight(None, (d, shape.vocab), dt)], output="logits")

    graph = helper.make_graph(
        g.nodes, "main_graph",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
         helper.make_tensor_value_info("attention_mask", dt, ["batch_size", 1, "sequence_length", "sequence_length"]),
         helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"])],
        [helper.make_tensor_value_info("logits", dt, ["batch_size", "sequence_length", shape.vocab])],
        initializer=g.small_inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name=producer[0], producer_version=producer[1])
    model.ir_version = 8
    return model, g.weights


def _decoder_layer(g: LlamaGraph, shape: LlamaShape, i: int, x: str, cos: str, sin: str,
                   rmsnorm: Callable[[str, str, str], str], linear: Callable[[str, str, int, int], str]) -> str:
    """One LlamaDecoderLayer: RMSNorm, GQA self-attention with RoPE, residual, RMSNorm, SwiGLU MLP, residual."""
    dt = shape.dtype
    d, h, kvh, hd = shape.d_model, shape.heads, shape.kv_heads, shape.head_dim
    L = f"/model/layers.{i}"
    A = f"{L}/self_attn"
    hs = rmsnorm(f"{L}/input_layernorm", x, f"model.layers.{i}.input_layernorm.weight")

    # bsz, q_len = hidden_states.size()[:2]
    bsz = g.op(A, "Gather", [g.op(A, "Shape", [hs]), g.const_i64(A, 0)], axis=0)
    qlen = g.op(A, "Gather", [g.op(A, "Shape", [hs]), g.const_i64(A, 1)], axis=0)

    def u0(t: str, scope: str = A) -> str:
        return g.op(scope, "Unsqueeze", [t, g.const_i64(scope, [0])])

    def heads_view(t: str, n: int) -> str:  # view(bsz, q_len, n, hd).transpose(1, 2)
        shp = g.op(A, "Concat", [u0(bsz), u0(qlen), g.const_i64(A, [n]), g.const_i64(A, [hd])], axis=0)
        t = g.op(A, "Reshape", [t, shp])
        return g.op(A, "Transpose", [t], perm=[0, 2, 1, 3])

    q = heads_view(linear(f"{A}/q_proj", hs, d, h * hd), h)
    k = heads_view(linear(f"{A}/k_proj", hs, d, kvh * hd), kvh)
    v = heads_view(linear(f"{A}/v_proj", hs, d, kvh * hd), kvh)

    # apply_rotary_pos_emb: q * cos + rotate_half(q) * sin
    c = g.op(A, "Unsqueeze", [cos, g.const_i64(A, [1])])
    s = g.op(A, "Unsqueeze", [sin, g.const_i64(A, [1])])

    def rope(t: str) -> str:
        x1 = g.op(A, "Slice", [t, g.const_i64(A, [0]), g.const_i64(A, [hd // 2]), g.const_i64(A, [3]),
                               g.const_i64(A, [1])])
        x2 = g.op(A, "Slice", [t, g.const_i64(A, [hd // 2]), g.const_i64(A, [INT64_MAX]),
                               g.const_i64(A, [3]), g.const_i64(A, [1])])
        rot = g.op(A, "Concat", [g.op(A, "Neg", [x2]), x1], axis=-1)
        return g.op(A, "Add", [g.op(A, "Mul", [t, c]), g.op(A, "Mul", [rot, s])])

    q, k = rope(q), rope(k)

    # repeat_kv: [B, kvh, S, hd] -> [B, kvh, 1, S, hd] -> expand(B, kvh, n_rep, S, hd) -> reshape(B, h, S, hd)
    def repeat_kv(t: str) -> str:
        t = g.op(A, "Unsqueeze", [t, g.const_i64(A, [2])])
        eshape = g.op(A, "Concat", [u0(bsz), g.const_i64(A, [kvh]), g.const_i64(A, [h // kvh]), u0(qlen),
                                    g.const_i64(A, [hd])], axis=0)
        t = g.op(A, "Expand", [t, eshape])
        rshape = g.op(A, "Concat", [u0(bsz), g.const_i64(A, [h]), u0(qlen), g.const_i64(A, [hd])], axis=0)
        return g.op(A, "Reshape", [t, rshape])

    k, v = repeat_kv(k), repeat_kv(v)

    kt = g.op(A, "Transpose", [k], perm=[0, 1, 3, 2])
    scores = g.op(A, "MatMul", [q, kt])
    scores = g.op(A, "Mul", [scores, g.const_f(A, 1.0 / math.sqrt(hd), dt)])
    scores = g.op(A, "Add", [scores, "attention_mask"])
    probs = g.op(A, "Softmax", [scores], axis=-1)
    ctx = g.op(A, "MatMul", [probs, v])
    ctx = g.op(A, "Transpose", [ctx], perm=[0, 2, 1, 3])
    oshape = g.op(A, "Concat", [u0(bsz), u0(qlen), g.const_i64(A, [d])], axis=0)
    ctx = g.op(A, "Reshape", [ctx, oshape])
    o = linear(f"{A}/o_proj", ctx, h * hd, d)
    x = g.op(L, "Add", [x, o])

    # SwiGLU MLP: down(silu(gate(x)) * up(x)); SiLU as x * Sigmoid(x)
    M = f"{L}/mlp"
    hs = rmsnorm(f"{L}/post_attention_layernorm", x, f"model.layers.{i}.post_attention_layernorm.weight")
    gate = linear(f"{M}/gate_proj", hs, d, shape.ffn)
    act = g.op(f"{M}/act_fn", "Mul", [gate, g.op(f"{M}/act_fn", "Sigmoid", [gate])])
    up = linear(f"{M}/up_proj", hs, d, shape.ffn)
    down = linear(f"{M}/down_proj", g.op(M, "Mul", [act, up]), shape.ffn, d)
    x = g.op(L, "Add", [x, down])
    return x


def _weight_proto(w: Weight) -> onnx.TensorProto:
    t = onnx.TensorProto()
    t.name = w.name
    t.dims.extend(w.shape)
    t.data_type = w.dtype
    return t


def write_external(model: onnx.ModelProto, weights: list[Weight], path: Path) -> Path:
    """All weights as external data in ONE sparse file next to the model (correct offsets/lengths)."""
    data_name = path.name + ".data"
    offset = 0
    inits = []
    for w in weights:
        offset = (offset + ALIGN - 1) // ALIGN * ALIGN
        t = _weight_proto(w)
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(w.nbytes))):
            e = t.external_data.add()
            e.key, e.value = key, value
        inits.append(t)
        offset += w.nbytes
    model.graph.initializer.extend(inits)
    data = path.with_name(data_name)
    with open(data, "wb"):
        pass
    os.truncate(data, offset)  # a hole: no block is ever allocated
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, path)
    return data


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _len_field(field_no: int, length: int) -> bytes:
    return _varint(field_no << 3 | 2) + _varint(length)


def write_inline(model: onnx.ModelProto, weights: list[Weight], path: Path) -> None:
    """Stream the model with every weight inline as raw_data (zeros), without ever holding it in memory.

    Wire format: ModelProto fields, then field 7 (graph) = the graph's own fields followed by one
    initializer (GraphProto field 5) per weight: its TensorProto header, then raw_data (field 9).
    """
    graph_bytes = model.graph.SerializeToString()
    model_rest = onnx.ModelProto()
    model_rest.CopyFrom(model)
    model_rest.ClearField("graph")
    heads = []
    graph_len = len(graph_bytes)
    for w in weights:
        tb = _weight_proto(w).SerializeToString() + _len_field(9, w.nbytes)
        init_len = len(tb) + w.nbytes
        heads.append((_len_field(5, init_len) + tb, w.nbytes))
        graph_len += len(heads[-1][0]) + w.nbytes
    zeros = bytes(16 << 20)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(model_rest.SerializeToString())
        f.write(_len_field(7, graph_len))
        f.write(graph_bytes)
        for head, n in heads:
            f.write(head)
            while n:
                k = min(n, len(zeros))
                f.write(zeros if k == len(zeros) else zeros[:k])
                n -= k
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------
# Dynamo export of a real (tiny) LlamaForCausalLM
# --------------------------------------------------------------------------------------


def export_dynamo(path: Path, layers: int) -> None:
    """torch.onnx.export(dynamo=True, opset 18) of LlamaForCausalLM built from LlamaConfig, random weights.

    Built directly with num_hidden_layers=layers at tiny width (hidden 64, 8 heads, 2 kv heads):
    the graph is the exporter's own output for every layer, not a replicated copy.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=64, intermediate_size=172, num_attention_heads=8, num_key_value_heads=2,
                      num_hidden_layers=layers, vocab_size=128, max_position_embeddings=128, use_cache=False)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 128, (2, 16))
    dims = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    tmp = path.with_suffix(".tmp.onnx")
    torch.onnx.export(model, (ids, torch.ones_like(ids)), str(tmp), dynamo=True, opset_version=18,
                      input_names=["input_ids", "attention_mask"], dynamic_shapes=dims, external_data=False,
                      verbose=False)
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------
# 70B-shaped sharded safetensors checkpoint (Hugging Face layout)
# --------------------------------------------------------------------------------------


def llama_state_dict_shapes(shape: LlamaShape) -> list[tuple[str, tuple[int, ...]]]:
    d, hd = shape.d_model, shape.head_dim
    out: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (shape.vocab, d))]
    for i in range(shape.layers):
        p = f"model.layers.{i}"
        out += [
            (f"{p}.self_attn.q_proj.weight", (shape.heads * hd, d)),
            (f"{p}.self_attn.k_proj.weight", (shape.kv_heads * hd, d)),
            (f"{p}.self_attn.v_proj.weight", (shape.kv_heads * hd, d)),
            (f"{p}.self_attn.o_proj.weight", (d, shape.heads * hd)),
            (f"{p}.mlp.gate_proj.weight", (shape.ffn, d)),
            (f"{p}.mlp.up_proj.weight", (shape.ffn, d)),
            (f"{p}.mlp.down_proj.weight", (d, shape.ffn)),
            (f"{p}.input_layernorm.weight", (d,)),
            (f"{p}.post_attention_layernorm.weight", (d,)),
        ]
    out += [("model.norm.weight", (d,)), ("lm_head.weight", (shape.vocab, d))]
    return out


def write_safetensors(folder: Path, shape: LlamaShape, max_shard_bytes: int = 10_000_000_000) -> int:
    """Sparse shards: 8-byte little-endian header length, real JSON header, then a hole of the data size."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = llama_state_dict_shapes(shape)
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shp in tensors:
        nbytes = math.prod(shp) * 2
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, shp))
        size += nbytes
    n = len(shards)
    weight_map: dict[str, str] = {}
    total = 0
    for k, shard in enumerate(shards, 1):
        fname = f"model-{k:05d}-of-{n:05d}.safetensors"
        header: dict[str, object] = {"__metadata__": {"format": "pt"}}
        off = 0
        for name, shp in shard:
            nbytes = math.prod(shp) * 2
            header[name] = {"dtype": "BF16", "shape": list(shp), "data_offsets": [off, off + nbytes]}
            off += nbytes
            weight_map[name] = fname
        hb = json.dumps(header, separators=(",", ":")).encode()
        hb += b" " * (-len(hb) % 8)
        p = folder / fname
        with open(p, "wb") as f:
            f.write(struct.pack("<Q", len(hb)))
            f.write(hb)
        os.truncate(p, 8 + len(hb) + off)
        total += off
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": shape.d_model,
        "intermediate_size": shape.ffn, "num_attention_heads": shape.heads, "num_key_value_heads": shape.kv_heads,
        "num_hidden_layers": shape.layers, "vocab_size": shape.vocab, "head_dim": shape.head_dim,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02, "pretraining_tp": 1,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return n


# --------------------------------------------------------------------------------------
# 70B-shaped GGUF (llama.cpp layout): real header and tokenizer, a hole for the tensor data
# --------------------------------------------------------------------------------------

LLAMA3_70B = LlamaShape(layers=80, d_model=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256)
GGUF_MERGES = 280147  # Llama 3's BPE merges: the header walks every string of the tokenizer


def gguf_tensors(shape: LlamaShape) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, logical numpy shape, GGML type) as llama.cpp's convert_hf_to_gguf + Q4_K_M name them."""
    d, hd = shape.d_model, shape.head_dim
    out = [("token_embd.weight", (shape.vocab, d), "Q4_K")]
    for i in range(shape.layers):
        p = f"blk.{i}"
        out += [(f"{p}.attn_norm.weight", (d,), "F32"), (f"{p}.attn_q.weight", (shape.heads * hd, d), "Q4_K"),
                (f"{p}.attn_k.weight", (shape.kv_heads * hd, d), "Q4_K"),
                (f"{p}.attn_v.weight", (shape.kv_heads * hd, d), "Q6_K"),
                (f"{p}.attn_output.weight", (d, shape.heads * hd), "Q4_K"), (f"{p}.ffn_norm.weight", (d,), "F32"),
                (f"{p}.ffn_gate.weight", (shape.ffn, d), "Q4_K"), (f"{p}.ffn_up.weight", (shape.ffn, d), "Q4_K"),
                (f"{p}.ffn_down.weight", (d, shape.ffn), "Q6_K")]
    out += [("output_norm.weight", (d,), "F32"), ("output.weight", (shape.vocab, d), "Q6_K")]
    return out


def write_gguf(path: Path, shape: LlamaShape, merges: int = GGUF_MERGES) -> None:
    """The header through gguf-py's writer; then the file is extended to its full size with a hole."""
    import gguf
    import numpy as np

    from mhainspect.ir.dtypes import nbytes

    w = gguf.GGUFWriter(path, "llama")
    w.add_name("Llama-3-70B-shaped (sparse)")
    w.add_block_count(shape.layers)
    w.add_context_length(8192)
    w.add_embedding_length(shape.d_model)
    w.add_feed_forward_length(shape.ffn)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_vocab_size(shape.vocab)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list([f"tok{i}" for i in range(shape.vocab)])
    w.add_token_types([1] * shape.vocab)
    w.add_token_merges([f"t{i} k{i}" for i in range(merges)])
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}" * 40)
    total = 0
    for name, shp, qtype in gguf_tensors(shape):
        size = nbytes(qtype, math.prod(shp))
        assert size is not None
        w.add_tensor_info(name, shp, np.dtype(np.float32), size, raw_dtype=gguf.GGMLQuantizationType[qtype])
        total += -(-size // w.data_alignment) * w.data_alignment
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    assert w.fout is not None
    fh = w.fout[0]
    fh.flush()
    start = -(-fh.tell() // w.data_alignment) * w.data_alignment
    fh.close()
    os.truncate(path, start + total)


# --------------------------------------------------------------------------------------
# The catalogue
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    name: str
    path: str  # relative to the output folder: the file a benchmark points at
    description: str
    make: Callable[[Path], None]
    data: str | None = None  # the sparse external-data file, if any


def _external(shape: LlamaShape) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        model, weights = build_llama(shape)
        write_external(model, weights, path)
    return make


def _inline(shape: LlamaShape) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        model, weights = build_llama(shape)
        write_inline(model, weights, path)
    return make


def _with_layers(shape: LlamaShape, layers: int) -> LlamaShape:
    return LlamaShape(layers, shape.d_model, shape.heads, shape.kv_heads, shape.ffn, shape.vocab, shape.dtype)


def catalogue() -> list[Entry]:
    entries = [
        Entry("llama7b", "llama7b/model.onnx", "7B: 32 layers, d_model 4096, 32/8 heads, ffn 11008, fp16 external",
              _external(LLAMA_7B), "llama7b/model.onnx.data"),
        Entry("llama70b", "llama70b/model.onnx", "70B: 80 layers, d_model 8192, 64/8 heads, ffn 28672, fp16 external",
              _external(LLAMA_70B), "llama70b/model.onnx.data"),
    ]
    for n in (2, 8, 32):
        entries.append(Entry(f"llama70b_L{n}", f"llama70b_L{n}/model.onnx", f"70B width, {n} layers",
                             _external(_with_layers(LLAMA_70B, n)), f"llama70b_L{n}/model.onnx.data"))
    entries += [
        Entry("inline_1p8gb", "inline_1p8gb/model.onnx",
              "12 layers, d_model 2560, 20/4 heads, ffn 6144, fp16 weights INLINE as raw_data (1.84 GB)",
              _inline(INLINE_1P8GB)),
        Entry("dynamo_L32", "dynamo_L32/model.onnx",
              "torch.onnx.export(dynamo=True, opset 18) of LlamaForCausalLM, 32 layers, hidden 64, 8/2 heads",
              lambda p: export_dynamo(p, 32)),
        Entry("safetensors70b", "safetensors70b/model.safetensors.index.json",
              "70B-shaped sharded safetensors (bf16, sparse shards, real headers) + config.json",
              lambda p: print(f"    {write_safetensors(p.parent, LLAMA_70B)} shards", file=sys.stderr)),
        Entry("gguf70b", "gguf70b/llama-3-70b-Q4_K_M.gguf",
              "Llama-3-70B-shaped GGUF: 80 layers, 64/8 heads, Q4_K/Q6_K, 128k-token tokenizer, sparse data",
              lambda p: write_gguf(p, LLAMA3_70B)),
    ]
    return entries


def expected_params(name: str) -> tuple[int, int] | None:
    """(total params, attention params) the audit must report for a generated graph."""
    shapes = {"llama7b": LLAMA_7B, "llama70b": LLAMA_70B, "inline_1p8gb": INLINE_1P8GB, "gguf70b": LLAMA3_70B}
    for n in (2, 8, 32):
        shapes[f"llama70b_L{n}"] = _with_layers(LLAMA_70B, n)
    s = shapes.get(name)
    return (s.total_params(), s.attention_params()) if s else None


def generate(out: Path, only: set[str] | None = None, force: bool = False) -> dict[str, Path]:
    paths: dict[str, Path] = {}
    for e in catalogue():
        if only and e.name not in only:
            continue
        path = out / e.path
        paths[e.name] = path
        if path.exists() and not force:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        print(f"  making {e.name}: {e.description}", file=sys.stderr)
        e.make(path)
        print(f"    {path} ({path.stat().st_size / 1e6:,.1f} MB) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--force", action="store_true", help="regenerate files that exist")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    if args.list:
        for e in catalogue():
            print(f"{e.name:16} {e.description}")
        return 0
    only = {s for s in args.only.split(",") if s} or None
    generate(args.out, only, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
