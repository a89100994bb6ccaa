"""Quantized Hugging Face folders as the quantization toolchains write them, with random data.

Each builder writes ``config.json`` (with the ``quantization_config`` the toolchain writes) and
``model.safetensors`` holding, for every Linear of the decoder layers, the tensors the toolchain
saves in its naming, dtypes and shapes; embeddings, norms and the LM head stay fp16 (the
toolchains leave them unquantized). Nothing is downloaded.

- GPTQ (AutoGPTQ / GPTQModel / optimum): ``qweight`` int32 [in·bits/32, out] (packed along
  in-features), ``qzeros`` int32 [groups, out·bits/32], ``scales`` fp16 [groups, out],
  ``g_idx`` int32 [in], ``bias`` fp16 [out] where the Linear has one.
- AWQ (AutoAWQ GEMM): ``qweight`` int32 [in, out·bits/32] (packed along out-features),
  ``qzeros`` int32 [in/group, out·bits/32], ``scales`` fp16 [in/group, out].
- bitsandbytes 4-bit: ``weight`` uint8 [out·in/2, 1], ``weight.absmax``, ``weight.quant_map``,
  (double quantization: ``weight.nested_absmax``, ``weight.nested_quant_map``) and
  ``weight.quant_state.bitsandbytes__nf4`` (the quant state's JSON as uint8 bytes, logical shape
  included); 8-bit LLM.int8: ``weight`` int8 [out, in], ``SCB`` fp32 [out], ``weight_format`` uint8 [].
- compressed-tensors pack-quantized: ``weight_packed`` int32 [out, in·bits/32], ``weight_scale``
  [out, in/group], ``weight_zero_point`` int32 [out·bits/32, in/group] (asymmetric only),
  ``weight_shape`` int64 [2] (the logical [out, in] as data).
  nvfp4-pack-quantized: ``weight_packed`` uint8 [out, in/2], ``weight_scale`` fp8 [out, in/16],
  ``weight_global_scale``; int-quantized: ``weight`` int8 [out, in], ``weight_scale``, ``input_scale``.
- MLX (mlx-lm): ``weight`` uint32 [out, in·bits/32], ``scales`` and ``biases`` [out, in/group]
  in the model's float dtype; the config's ``quantization`` ({group_size, bits}, per-module
  entries override them; mlx-lm also copies it to ``quantization_config``).
- AWQ GEMV: ``qweight`` int32 [out, in·bits/32], ``qzeros`` int32 [out, zw], ``scales`` fp16
  [out, zw·32/bits] (zw: the groups per row in whole words of zeros).
- EXL2: ``q_weight`` int32 [Σ rows·bits/32, out] (bits per group of rows), ``q_invperm`` int16
  [in], ``q_scale`` int32, ``q_scale_max`` fp16 [groups], ``q_groups`` int16 [2·groups].
- fp8: ``weight`` float8_e4m3fn [out, in] with ``weight_scale_inv`` fp32 [out/128, in/128]
  (DeepSeek-style block fp8) or ``weight_scale`` fp32 [] / [out, 1] (compressed-tensors
  float-quantized).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

Tensors = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Arch:
    """A tiny decoder: its config and the Linear layers of one layer as (name, in, out, bias)."""

    model_type: str
    prefix: str  # the layers' module path ("model.layers")
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 64
    inter: int = 512
    vocab: int = 128
    layers: int = 2

    def linears(self) -> list[tuple[str, int, int, bool]]:
        e, q, kv, f = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.inter
        if self.model_type == "llama":
            return [("self_attn.q_proj", e, q, False), ("self_attn.k_proj", e, kv, False),
                    ("self_attn.v_proj", e, kv, False), ("self_attn.o_proj", q, e, False),
                    ("mlp.gate_proj", e, f, False), ("mlp.up_proj", e, f, False), ("mlp.down_proj", f, e, False)]
        if self.model_type == "phi3":
            return [("self_attn.qkv_proj", e, q + 2 * kv, False), ("self_attn.o_proj", q, e, False),
                    ("mlp.gate_up_proj", e, 2 * f, False), ("mlp.down_proj", f, e, False)]
        if self.model_type == "gpt_neox":  # MHA, biases everywhere
            return [("attention.query_key_value", e, 3 * q, True), ("attention.dense", q, e, True),
                    ("mlp.dense_h_to_4h", e, f, True), ("mlp.dense_4h_to_h", f, e, True)]
        raise ValueError(self.model_type)

    def config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"model_type": self.model_type, "hidden_size": self.hidden,
                               "num_attention_heads": self.heads, "num_hidden_layers": self.layers,
                               "intermediate_size": self.inter, "vocab_size": self.vocab, "torch_dtype": "float16"}
        if self.model_type == "llama":
            cfg.update(architectures=["LlamaForCausalLM"], num_key_value_heads=self.kv_heads, head_dim=self.head_dim)
        elif self.model_type == "phi3":
            cfg.update(architectures=["Phi3ForCausalLM"], num_key_value_heads=self.kv_heads)
        else:
            cfg.update(architectures=["GPTNeoXForCausalLM"])
        return cfg

    def plain(self) -> Tensors:
        """The unquantized tensors: embeddings, norms, LM head (fp16)."""
        h = torch.float16
        if self.model_type == "gpt_neox":
            out = {"gpt_neox.embed_in.weight": torch.randn(self.vocab, self.hidden, dtype=h),
                   "embed_out.weight": torch.randn(self.vocab, self.hidden, dtype=h),
                   "gpt_neox.final_layer_norm.weight": torch.ones(self.hidden, dtype=h),
                   "gpt_neox.final_layer_norm.bias": torch.zeros(self.hidden, dtype=h)}
            for i in range(self.layers):
                for n in ("input_layernorm", "post_attention_layernorm"):
                    out[f"{self.prefix}.{i}.{n}.weight"] = torch.ones(self.hidden, dtype=h)
                    out[f"{self.prefix}.{i}.{n}.bias"] = torch.zeros(self.hidden, dtype=h)
            return out
        out = {"model.embed_tokens.weight": torch.randn(self.vocab, self.hidden, dtype=h),
               "lm_head.weight": torch.randn(self.vocab, self.hidden, dtype=h),
               "model.norm.weight": torch.ones(self.hidden, dtype=h)}
        for i in range(self.layers):
            for n in ("input_layernorm", "post_attention_layernorm"):
                out[f"{self.prefix}.{i}.{n}.weight"] = torch.ones(self.hidden, dtype=h)
        return out

    def logical_params(self) -> int:
        """Parameters of the unquantized model: every Linear's in·out (+ bias) plus the plain tensors."""
        lin = sum(i * o + (o if b else 0) for _, i, o, b in self.linears()) * self.layers
        return lin + sum(t.numel() for t in self.plain().values())

    def attention_params(self) -> list[int]:
        """Per attention block: its projections' in·out (+ bias)."""
        attn = [(i, o, b) for n, i, o, b in self.linears() if "mlp" not in n]
        return [sum(i * o + (o if b else 0) for i, o, b in attn)] * self.layers


LLAMA = Arch("llama", "model.layers")
PHI3 = Arch("phi3", "model.layers")
NEOX = Arch("gpt_neox", "gpt_neox.layers")

Quantizer = Callable[[int, int], Tensors]  # (in, out) -> tensors under the module path, by leaf


def _ints(*shape: int) -> torch.Tensor:
    return torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int32)


def gptq(bits: int, group: int) -> Quantizer:
    def q(i: int, o: int) -> Tensors:
        groups = 1 if group == -1 else math.ceil(i / group)
        return {"qweight": _ints(i * bits // 32, o), "qzeros": _ints(groups, o * bits // 32),
                "scales": torch.rand(groups, o, dtype=torch.float16),
                "g_idx": torch.arange(i, dtype=torch.int32) // (i if group == -1 else group)}
    return q


def gptq_config(bits: int, group: int, desc_act: bool) -> dict[str, Any]:
    """As optimum / AutoGPTQ write it (GPTQModel adds ``meta`` and ``pack_dtype``)."""
    return {"bits": bits, "group_size": group, "damp_percent": 0.01, "desc_act": desc_act, "static_groups": False,
            "sym": True, "true_sequential": True, "model_name_or_path": None, "model_file_base_name": "model",
            "quant_method": "gptq", "checkpoint_format": "gptq", "pack_dtype": "int32",
            "meta": {"quantizer": ["gptqmodel:2.2.0"]}}


def awq(bits: int, group: int) -> Quantizer:
    def q(i: int, o: int) -> Tensors:
        return {"qweight": _ints(i, o * bits // 32), "qzeros": _ints(i // group, o * bits // 32),
                "scales": torch.rand(i // group, o, dtype=torch.float16)}
    return q


def awq_config(bits: int, group: int) -> dict[str, Any]:
    return {"bits": bits, "group_size": group, "modules_to_not_convert": None, "quant_method": "awq",
            "version": "gemm", "zero_point": True}


def bnb4(quant_type: str = "nf4", double: bool = True, blocksize: int = 64) -> Quantizer:
    def q(i: int, o: int) -> Tensors:
        n = i * o
        blocks = math.ceil(n / blocksize)
        state: dict[str, Any] = {"quant_type": quant_type, "blocksize": blocksize, "dtype": "float16",
                                 "shape": [o, i]}
        out: Tensors = {"weight": torch.randint(0, 255, ((n + 1) // 2, 1), dtype=torch.uint8),
                        "weight.quant_map": torch.randn(16)}
        if double:
            out["weight.absmax"] = torch.randint(0, 255, (blocks,), dtype=torch.uint8)
            out["weight.nested_absmax"] = torch.rand(math.ceil(blocks / 256))
            out["weight.nested_quant_map"] = torch.randn(256)
            state.update(nested_blocksize=256, nested_dtype="float32", nested_offset=0.03)
        else:
            out["weight.absmax"] = torch.rand(blocks)
        raw = json.dumps(state).encode("utf-8")  # bitsandbytes' pack_dict_to_tensor
        out[f"weight.quant_state.bitsandbytes__{quant_type}"] = torch.tensor(list(raw), dtype=torch.uint8)
        return out
    return q


def bnb4_config(quant_type: str = "nf4", double: bool = True) -> dict[str, Any]:
    return {"_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "float16",
            "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": quant_type,
            "bnb_4bit_use_double_quant": double, "llm_int8_enable_fp32_cpu_offload": False,
            "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None, "llm_int8_threshold": 6.0,
            "load_in_4bit": True, "load_in_8bit": False, "quant_method": "bitsandbytes"}


def bnb8() -> Quantizer:
    def q(i: int, o: int) -> Tensors:
        return {"weight": torch.randint(-127, 127, (o, i), dtype=torch.int8), "SCB": torch.rand(o),
                "weight_format": torch.tensor(0, dtype=torch.uint8)}
    return q


def bnb8_config() -> dict[str, Any]:
    return {"_load_in_4bit": False, "_load_in_8bit": True, "llm_int8_enable_fp32_cpu_offload": False,
            "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None, "llm_int8_threshold": 6.0,
            "load_in_4bit": False, "load_in_8bit": True, "quant_method": "bitsandbytes"}


def ct_packed(bits: int, group: int, symmetric: bool = True, shape_override: tuple[int, int] | None = None
              ) -> Quantizer:
    def q(i: int, o: int) -> Tensors:
        out: Tensors = {"weight_packed": _ints(o, i * bits // 32),
                        "weight_scale": torch.rand(o, i // group, dtype=torch.bfloat16),
                        "weight_shape": torch.tensor(list(shape_override or (o, i)), dtype=torch.int64)}
        if not symmetric:
            out["weight_zero_point"] = _ints(o * bits // 32, i // group)
        return out
    return q


def ct_nvfp4() -> Quantizer:
    """compressed-tensors nvfp4-pack-quantized: two fp4 values per uint8, fp8 scales per 16, global scales."""
    def q(i: int, o: int) -> Tensors:
        return {"weight_packed": torch.randint(0, 255, (o, i // 2), dtype=torch.uint8),
                "weight_scale": torch.rand(o, i // 16).to(torch.float8_e4m3fn),
                "weight_global_scale": torch.rand(1), "input_global_scale": torch.rand(1),
                "weight_shape": torch.tensor([o, i], dtype=torch.int64)}
    return q


def ct_int8() -> Quantizer:
    """compressed-tensors int-quantized (W8A8 static): int8 weight, per-channel scale, input scale."""
    def q(i: int, o: int) -> Tensors:
        return {"weight": torch.randint(-127, 127, (o, i), dtype=torch.int8),
                "weight_scale": torch.rand(o, 1, dtype=torch.bfloat16), "input_scale": torch.rand(1)}
    return q


def ct_config(fmt: str, bits: int, group: int | None, kind: str = "int", symmetric: bool = True) -> dict[str, Any]:
    weights: dict[str, Any] = {"actorder": None, "block_structure": None, "dynamic": False, "group_size": group, "num_bits": bits,
               "observer": "minmax", "observer_kwargs": {}, "strategy": "group" if group else "channel",
               "symmetric": symmetric, "type": kind}
    return {"config_groups": {"group_0": {"input_activations": None, "output_activations": None,
                                          "targets": ["Linear"], "weights": weights, "format": fmt}},
            "format": fmt, "global_compression_ratio": None, "ignore": ["lm_head"], "kv_cache_scheme": None,
            "quant_method": "compressed-tensors", "quantization_status": "compressed", "sparsity_config": {}}


def mlx(bits: int, group: int) -> Quantizer:
    def q(i: int, o: int) -> Tensors:
        return {"weight": torch.randint(0, 2**31, (o, i * bits // 32), dtype=torch.int64).to(torch.uint32),
                "scales": torch.rand(o, i // group, dtype=torch.float16),
                "biases": torch.rand(o, i // group, dtype=torch.float16)}
    return q


def mlx_config(bits: int, group: int) -> dict[str, Any]:
    return {"group_size": group, "bits": bits}


def awq_gemv(bits: int, group: int) -> Quantizer:
    def q(i: int, o: int) -> Tensors:
        pack = 32 // bits
        zeros_width = math.ceil(i / group / pack)
        return {"qweight": _ints(o, i * bits // 32), "qzeros": _ints(o, zeros_width),
                "scales": torch.rand(o, zeros_width * pack, dtype=torch.float16)}
    return q


def exl2(bits: tuple[int, ...], group: int = 32) -> Quantizer:
    """Groups of ``group`` rows at ``bits[g % len(bits)]`` bits each."""
    def q(i: int, o: int) -> Tensors:
        groups = i // group
        rows = sum(group * bits[g % len(bits)] // 32 for g in range(groups))
        return {"q_weight": _ints(rows, o), "q_invperm": torch.arange(i, dtype=torch.int16),
                "q_scale": _ints(max(1, groups * 4 // 32), o), "q_scale_max": torch.rand(groups, dtype=torch.float16),
                "q_groups": torch.zeros(2 * groups, dtype=torch.int16)}
    return q


def exl2_config(bits: float) -> dict[str, Any]:
    return {"quant_method": "exl2", "version": "0.2.8", "bits": bits, "head_bits": 6,
            "calibration": {"rows": 115, "length": 2048, "dataset": "(default)"}}


def fp8_block(block: int = 128) -> Quantizer:
    def q(i: int, o: int) -> Tensors:
        return {"weight": torch.randn(o, i).to(torch.float8_e4m3fn),
                "weight_scale_inv": torch.rand(math.ceil(o / block), math.ceil(i / block))}
    return q


def fp8_block_config(block: int = 128) -> dict[str, Any]:
    return {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [block, block]}


def fp8_channel() -> Quantizer:
    """compressed-tensors float-quantized (FP8 dynamic): fp8 weight, one scale per output row."""
    def q(i: int, o: int) -> Tensors:
        return {"weight": torch.randn(o, i).to(torch.float8_e4m3fn), "weight_scale": torch.rand(o, 1)}
    return q


def fp16() -> Quantizer:
    """No quantization: the fp16 Linear weight (the reference the quantized files must match)."""
    return lambda i, o: {"weight": torch.randn(o, i, dtype=torch.float16)}


@dataclass(frozen=True)
class Written:
    folder: Path
    aux_bytes: int  # bytes of the quantization data (every tensor a quantizer writes beside the weight)


def tensors_of(arch: Arch, quantizer: Quantizer) -> tuple[Tensors, int]:
    """Every tensor of the model, and the bytes of its quantization data."""
    torch.manual_seed(0)
    tensors = arch.plain()
    aux = 0
    for layer in range(arch.layers):
        for name, i, o, bias in arch.linears():
            path = f"{arch.prefix}.{layer}.{name}"
            for n, (leaf, t) in enumerate(quantizer(i, o).items()):
                tensors[f"{path}.{leaf}"] = t
                aux += t.numel() * t.element_size() if n else 0  # the first is the weight itself
            if bias:
                tensors[f"{path}.bias"] = torch.randn(o, dtype=torch.float16)
    return tensors, aux


def write(folder: Path, arch: Arch, quantizer: Quantizer, quant_config: dict[str, Any] | None,
          *, config: bool = True) -> Written:
    """A Hugging Face folder: every decoder Linear quantized by ``quantizer``; biases fp16."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors, aux = tensors_of(arch, quantizer)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if config:
        cfg = arch.config()
        if quant_config is not None:
            cfg["quantization_config"] = quant_config
        (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return Written(folder, aux)


def stored_bytes(folder: Path) -> int:
    """Bytes of the tensor data in the folder's safetensors file (the file minus its header)."""
    data = (folder / "model.safetensors").read_bytes()
    return len(data) - 8 - int.from_bytes(data[:8], "little")
