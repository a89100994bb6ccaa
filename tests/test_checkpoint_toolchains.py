"""Checkpoint folders laid out as other toolchains write them (multimodal configs, MLX, EXL2, AWQ
GEMV): the blocks, parameters and bytes must be those of the model the files encode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from mhainspect.pipeline import audit


def _folder(path: Path, config: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(config))
    return path


def _layout(report: Any) -> dict[str, tuple[Any, ...]]:
    return {b.name: (b.num_heads, b.num_kv_heads, b.d_k, b.d_model, b.kv_cache_status.value) for b in report.blocks}


def _llama_attn(prefix: str, d: int, heads: int, kv: int, hd: int) -> dict[str, torch.Tensor]:
    return {f"{prefix}.q_proj.weight": torch.zeros(heads * hd, d), f"{prefix}.k_proj.weight": torch.zeros(kv * hd, d),
            f"{prefix}.v_proj.weight": torch.zeros(kv * hd, d), f"{prefix}.o_proj.weight": torch.zeros(d, heads * hd)}


def test_unnamed_language_model_beside_a_vision_tower(tmp_path: Path) -> None:
    """Qwen2-VL as transformers saves it: no heads at the top level, the language model's layers at
    ``model.layers`` (no word names them), the vision tower at ``visual.blocks``. The language model
    reads text_config (was: vision_config's heads, and no KV cache as if a tower)."""
    config = {"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl", "dtype": "float32",
              "text_config": {"model_type": "qwen2_vl_text", "hidden_size": 96, "num_attention_heads": 6,
                              "num_key_value_heads": 2, "num_hidden_layers": 1},
              "vision_config": {"model_type": "qwen2_vl_vision", "embed_dim": 64, "num_heads": 4, "depth": 1}}
    tensors = {**_llama_attn("model.layers.0.self_attn", 96, 6, 2, 16),
               "visual.blocks.0.attn.qkv.weight": torch.zeros(3 * 64, 64),
               "visual.blocks.0.attn.proj.weight": torch.zeros(64, 64)}
    report = audit(_folder(tmp_path, config, tensors))
    assert _layout(report) == {"model.layers.0.self_attn": (6, 2, 16, 96, "caches"),
                               "visual.blocks.0.attn": (4, 4, 16, 64, "none")}
    assert report.model.kv_cache is not None and report.model.kv_cache.bytes_per_token == 2 * 2 * 16 * 4


def test_qformer_reads_its_own_config(tmp_path: Path) -> None:
    """BLIP-2: the Q-Former's blocks read qformer_config (was: the vision tower's heads), and do not cache."""
    config = {"architectures": ["Blip2ForConditionalGeneration"], "model_type": "blip-2",
              "vision_config": {"hidden_size": 64, "num_attention_heads": 8},
              "qformer_config": {"hidden_size": 48, "num_attention_heads": 3, "encoder_hidden_size": 64},
              "text_config": {"model_type": "opt", "hidden_size": 32, "num_attention_heads": 2}}
    q = "qformer.encoder.layer.0"
    tensors = {f"{q}.attention.attention.{r}.weight": torch.zeros(48, 48) for r in ("query", "key", "value")}
    tensors[f"{q}.attention.output.dense.weight"] = torch.zeros(48, 48)
    tensors.update({f"{q}.crossattention.attention.query.weight": torch.zeros(48, 48),
                    f"{q}.crossattention.attention.key.weight": torch.zeros(48, 64),
                    f"{q}.crossattention.attention.value.weight": torch.zeros(48, 64),
                    f"{q}.crossattention.output.dense.weight": torch.zeros(48, 48),
                    "vision_model.encoder.layers.0.self_attn.qkv.weight": torch.zeros(3 * 64, 64),
                    "vision_model.encoder.layers.0.self_attn.projection.weight": torch.zeros(64, 64)})
    report = audit(_folder(tmp_path, config, tensors))
    heads = {b.name: (b.num_heads, b.d_k, b.kv_cache_status.value) for b in report.blocks}
    assert heads[f"{q}.attention"] == (3, 16, "none")
    assert heads[f"{q}.crossattention"] == (3, 16, "none")


def test_latent_attention_of_a_decoder_caches_its_latent(tmp_path: Path) -> None:
    """DeepSeek-V2 (MLA) from its weights and config: one latent block whose cache is the latent
    and the rotary key (was: a near miss and an unknown cache); as an encoder, it caches nothing."""
    p = "model.layers.0.self_attn"
    tensors = {f"{p}.q_proj.weight": torch.zeros(4 * 24, 64), f"{p}.kv_a_proj_with_mqa.weight": torch.zeros(40, 64),
               f"{p}.kv_a_layernorm.weight": torch.zeros(32), f"{p}.kv_b_proj.weight": torch.zeros(4 * 32, 32),
               f"{p}.o_proj.weight": torch.zeros(64, 64)}
    config = {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "hidden_size": 64,
              "num_attention_heads": 4, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
              "v_head_dim": 16}
    report = audit(_folder(tmp_path / "decoder", config, tensors))
    (b,) = report.blocks
    assert not report.misses and b.latent is not None
    assert (b.num_heads, b.d_k, b.d_v, b.params.k, b.params.v) == (4, 24, 16, 4 * 16 * 32, 4 * 16 * 32)
    assert b.kv_cache_bytes_per_token == (32 + 8) * 4
    encoder = {**config, "architectures": ["DeepseekV2ForSequenceClassification"], "model_type": "encoder_only"}
    report = audit(_folder(tmp_path / "encoder", encoder, tensors))
    assert report.model.kv_cache is not None and report.model.kv_cache.status.value == "none"
