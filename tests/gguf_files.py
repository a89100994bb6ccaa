"""Small GGUF files written with the gguf package's own writer (llama.cpp's gguf-py), tensors named
the way llama.cpp names them. Shared by tests/test_gguf.py and tests/hostile_cases.py.

Tensor contents are zeros: the audit reads no tensor data, and a quantized tensor is raw bytes of
the right size with the right GGML type code (no real quantization needed).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

F32, F16, Q8_0, Q4_K = "F32", "F16", "Q8_0", "Q4_K"


def raw_header(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    """The fixed GGUF header, by hand (for files no writer would produce)."""
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def kv_bytes(key: bytes, vtype: int, payload: bytes) -> bytes:
    return struct.pack("<Q", len(key)) + key + struct.pack("<I", vtype) + payload


def tensor_info_bytes(name: bytes, dims: list[int], gtype: int, offset: int) -> bytes:
    return (struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims))
            + b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", gtype, offset))


def _gguf() -> Any:
    import gguf

    return gguf


@dataclass(frozen=True)
class T:
    """One tensor: name, logical shape in numpy order (out, in) and GGML type name."""

    name: str
    shape: tuple[int, ...]
    qtype: str = F32


def write_gguf(path: Path, arch: str, metadata: Mapping[str, Any], tensors: Sequence[T], *,
               split_max_tensors: int = 0) -> list[Path]:
    """Write a GGUF file (or split files) with ``metadata`` keys (``{arch}`` is filled in) and ``tensors``.
    Returns the paths written."""
    gguf = _gguf()
    w = gguf.GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    for key, value in metadata.items():
        key = key.format(arch=arch)
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_array(key, list(value))
    for t in tensors:
        qtype = gguf.GGMLQuantizationType[t.qtype]
        if qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(t.name, np.zeros(t.shape, np.float32))
        elif qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(t.name, np.zeros(t.shape, np.float16))
        else:
            byte_shape = gguf.quant_shape_to_byte_shape(t.shape, qtype)
            w.add_tensor(t.name, np.zeros(byte_shape, np.uint8), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if split_max_tensors:
        return sorted(path.parent.glob(f"{path.stem}-*-of-*.gguf"))
    return [path]


@dataclass(frozen=True)
class Decoder:
    """A decoder stack in llama.cpp naming; what the audit must find in every layer."""

    arch: str = "llama"
    layers: int = 2
    d_model: int = 256
    heads: int = 8
    kv_heads: int = 2
    head_dim: int = 32
    v_head_dim: int | None = None
    qtypes: Mapping[str, str] = field(default_factory=lambda: {"q": F32, "k": F32, "v": F32, "o": F32})
    fused: bool = False  # Phi-3: one attn_qkv
    biases: bool = False  # Qwen2: q/k/v biases
    head_norms: bool = False  # Qwen3/Gemma 3: per-head attn_q_norm / attn_k_norm
    metadata: Mapping[str, Any] = field(default_factory=dict)  # extra or overriding keys
    kv_per_layer: tuple[int, ...] | None = None  # the K/V heads each layer's tensors really have
    tensor_kv_heads: int | None = None  # K/V tensors this many heads wide (a file contradicting its metadata)
    vocab: int = 512

    @property
    def d_v(self) -> int:
        return self.v_head_dim or self.head_dim

    def kv_at(self, layer: int) -> int:
        if self.kv_per_layer is not None:
            return self.kv_per_layer[layer]
        return self.tensor_kv_heads or self.kv_heads

    def default_metadata(self) -> dict[str, Any]:
        return {"general.name": f"tiny {self.arch}", "{arch}.block_count": self.layers,
                "{arch}.embedding_length": self.d_model, "{arch}.attention.head_count": self.heads,
                "{arch}.attention.head_count_kv": self.kv_heads, "{arch}.context_length": 4096}

    def tensors(self) -> list[T]:
        out = [T("token_embd.weight", (self.vocab, self.d_model), F16)]
        q = self.qtypes
        for i in range(self.layers):
            g = self.kv_at(i)
            wq, wk, wv = self.heads * self.head_dim, g * self.head_dim, g * self.d_v
            p = f"blk.{i}"
            out.append(T(f"{p}.attn_norm.weight", (self.d_model,)))
            if self.fused:
                out.append(T(f"{p}.attn_qkv.weight", (wq + wk + wv, self.d_model), q["q"]))
            else:
                out += [T(f"{p}.attn_q.weight", (wq, self.d_model), q["q"]),
                        T(f"{p}.attn_k.weight", (wk, self.d_model), q["k"]),
                        T(f"{p}.attn_v.weight", (wv, self.d_model), q["v"])]
            if self.biases:
                out += [T(f"{p}.attn_q.bias", (wq,)), T(f"{p}.attn_k.bias", (wk,)), T(f"{p}.attn_v.bias", (wv,))]
            if self.head_norms:
                out += [T(f"{p}.attn_q_norm.weight", (self.head_dim,)), T(f"{p}.attn_k_norm.weight", (self.head_dim,))]
            out.append(T(f"{p}.attn_output.weight", (self.d_model, self.heads * self.d_v), q["o"]))
            out += [T(f"{p}.ffn_norm.weight", (self.d_model,)), T(f"{p}.ffn_up.weight", (512, self.d_model)),
                    T(f"{p}.ffn_down.weight", (self.d_model, 512))]
        out += [T("output_norm.weight", (self.d_model,)), T("output.weight", (self.vocab, self.d_model), F16)]
        return out

    def write(self, path: Path, **kwargs: Any) -> list[Path]:
        meta = {**self.default_metadata(), **self.metadata}
        meta = {k: v for k, v in meta.items() if v is not None}
        return write_gguf(path, self.arch, meta, self.tensors(), **kwargs)

    def attention_params(self, layer: int) -> int:
        g = self.kv_at(layer)
        wq, wk, wv = self.heads * self.head_dim, g * self.head_dim, g * self.d_v
        weights = (wq + wk + wv) * self.d_model + self.d_model * self.heads * self.d_v
        norms = 2 * self.head_dim if self.head_norms else 0  # attn_q_norm, attn_k_norm: [head_dim] each
        return weights + ((wq + wk + wv) if self.biases else 0) + norms


# HF module names -> llama.cpp's tensor names for DeepSeek-V2/V3 (convert_hf_to_gguf.py's mapping).
_DEEPSEEK_NAMES = {
    "input_layernorm": "attn_norm", "self_attn.q_a_proj": "attn_q_a", "self_attn.q_a_layernorm": "attn_q_a_norm",
    "self_attn.q_b_proj": "attn_q_b", "self_attn.q_proj": "attn_q", "self_attn.kv_a_proj_with_mqa": "attn_kv_a_mqa",
    "self_attn.kv_a_layernorm": "attn_kv_a_norm", "self_attn.kv_b_proj": "attn_kv_b", "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "mlp.gate": "ffn_gate_inp", "mlp.shared_experts.gate_proj": "ffn_gate_shexp",
    "mlp.shared_experts.up_proj": "ffn_up_shexp", "mlp.shared_experts.down_proj": "ffn_down_shexp",
    # DeepSeek-V3.2's lightning indexer, as llama.cpp names it
    "self_attn.indexer.wq_b": "indexer.attn_q_b", "self_attn.indexer.wk": "indexer.attn_k",
    "self_attn.indexer.k_norm": "indexer.k_norm", "self_attn.indexer.weights_proj": "indexer.proj",
}


def deepseek_gguf(path: Path, shapes: Mapping[str, tuple[int, ...]], config: Mapping[str, Any], *,
                  split_kv_b: bool = True) -> list[Path]:
    """A DeepSeek-V2/V3 model (``shapes``: its state dict's names and shapes, ``config`` its
    config) as llama.cpp's converter writes it: tensors renamed, experts stacked, ``kv_b_proj``
    split into ``attn_k_b`` [h, rank, nope] and ``attn_v_b`` [h, v, rank] (``split_kv_b``, as
    converters since llama.cpp's MLA cache do; else the legacy unsplit ``attn_kv_b``), and the
    metadata convert writes (the latent files describe the cache as one K/V head of
    key_length = kv_lora_rank + rope and value_length = kv_lora_rank, the heads' widths in
    key_length_mla / value_length_mla)."""
    h, rank, rope = config["num_attention_heads"], config["kv_lora_rank"], config["qk_rope_head_dim"]
    nope, v = config["qk_nope_head_dim"], config["v_head_dim"]
    tensors: list[T] = []
    experts: dict[tuple[int, str], list[tuple[int, ...]]] = {}
    for name, shape in shapes.items():
        name = name.removeprefix("model.")
        if name == "embed_tokens.weight":
            tensors.append(T("token_embd.weight", shape))
            continue
        if name == "norm.weight":
            tensors.append(T("output_norm.weight", shape))
            continue
        if name == "lm_head.weight":
            tensors.append(T("output.weight", shape))
            continue
        _, layer, rest = name.split(".", 2)
        module, leaf = rest.rsplit(".", 1)
        if module.startswith("mlp.experts."):
            _, _, e, proj = module.split(".")
            experts.setdefault((int(layer), proj), []).append(shape)
            continue
        if module == "mlp.gate" and leaf == "e_score_correction_bias":
            tensors.append(T(f"blk.{layer}.exp_probs_b.bias", shape))
            continue
        if module == "self_attn.kv_b_proj" and split_kv_b:
            tensors += [T(f"blk.{layer}.attn_k_b.weight", (h, rank, nope)), T(f"blk.{layer}.attn_v_b.weight", (h, v, rank))]
            continue
        tensors.append(T(f"blk.{layer}.{_DEEPSEEK_NAMES[module]}.{leaf}", shape))
    for (layer, proj), found in experts.items():
        kind = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down"}[proj]
        tensors.append(T(f"blk.{layer}.ffn_{kind}_exps.weight", (len(found), *found[0])))
    meta: dict[str, Any] = {
        "{arch}.block_count": config["num_hidden_layers"], "{arch}.embedding_length": config["hidden_size"],
        "{arch}.context_length": config.get("max_position_embeddings", 4096), "{arch}.attention.head_count": h,
        "{arch}.attention.kv_lora_rank": rank, "{arch}.rope.dimension_count": rope,
    }
    if config.get("q_lora_rank"):
        meta["{arch}.attention.q_lora_rank"] = config["q_lora_rank"]
    if split_kv_b:
        meta.update({"{arch}.attention.head_count_kv": 1, "{arch}.attention.key_length": rank + rope,
                     "{arch}.attention.value_length": rank, "{arch}.attention.key_length_mla": nope + rope,
                     "{arch}.attention.value_length_mla": v})
    else:
        meta.update({"{arch}.attention.head_count_kv": h, "{arch}.attention.key_length": nope + rope,
                     "{arch}.attention.value_length": v})
    return write_gguf(path, "deepseek2", meta, tensors)
