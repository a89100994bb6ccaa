"""Hybrid and 2025-26 decoders from transformers' own classes, and what their caches hold.

- ``SMALL``: per model_type, a small config (a few layers, widths of tens) mixing the layer kinds
  the architecture has; ``small_folder`` saves one with random weights (noise on every parameter).
- ``cache_truth``: what transformers' cache holds after a forward pass, split into what grows per
  token (K/V, indexer keys) and what does not (recurrent and convolution states), from the cache
  object's float tensors (integer bookkeeping such as token counters is not state). Works on the
  meta device too, so a real-size model is measured without memory.
- ``meta_folder``: a real-size folder from a published-config-shaped dict: config.json and a
  safetensors header of the meta model's tensors (data a sparse hole, as tests/big_models.py).

Only the architectures the installed transformers ships are built (``available``).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

# model_type -> small config kwargs (beside SMALL_COMMON): each mixes the kinds its architecture has.
SMALL_COMMON: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                                "num_key_value_heads": 2, "vocab_size": 128}
SMALL: dict[str, dict[str, Any]] = {
    "qwen3_next": {"num_hidden_layers": 4, "head_dim": 16, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
                   "linear_num_key_heads": 2, "linear_num_value_heads": 4, "num_experts": 4, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32},
    "minimax": {"num_hidden_layers": 4, "head_dim": 16, "num_local_experts": 2},
    "jamba": {"num_hidden_layers": 4, "attn_layer_period": 2, "attn_layer_offset": 1, "mamba_d_state": 4,
              "num_experts": 2, "expert_layer_period": 2},
    "bamba": {"num_hidden_layers": 4, "attn_layer_indices": [1, 3], "mamba_n_heads": 4, "mamba_d_head": 32,
              "mamba_d_state": 8, "mamba_n_groups": 1},
    "zamba2": {"num_hidden_layers": 5, "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid", "hybrid"],
               "mamba_d_state": 8, "n_mamba_heads": 4, "num_mem_blocks": 2},
    "falcon_h1": {"num_hidden_layers": 2, "mamba_n_heads": 4, "mamba_d_head": 32, "mamba_d_ssm": 128,
                  "mamba_d_state": 8, "mamba_n_groups": 1, "head_dim": 16},
    "nemotron_h": {"hybrid_override_pattern": "M*M-", "mamba_num_heads": 4, "mamba_head_dim": 32,
                   "ssm_state_size": 8, "n_groups": 1, "head_dim": 16},
    "granitemoehybrid": {"num_hidden_layers": 4, "layer_types": ["mamba", "attention", "mamba", "attention"],
                         "mamba_n_heads": 4, "mamba_d_head": 32, "mamba_d_state": 8, "num_local_experts": 2},
    "lfm2": {"num_hidden_layers": 4, "full_attn_idxs": [1, 3]},
    "gpt_oss": {"num_hidden_layers": 2, "head_dim": 16, "num_local_experts": 2, "num_experts_per_tok": 2,
                "sliding_window": 8},
    "llama4_text": {"num_hidden_layers": 4, "head_dim": 16, "attention_chunk_size": 8, "num_local_experts": 2,
                    "intermediate_size_mlp": 128},
    "gemma3n_text": {"num_hidden_layers": 6, "head_dim": 16, "num_kv_shared_layers": 2, "sliding_window": 8,
                     "layer_types": ["sliding_attention", "full_attention"] * 3, "hidden_size_per_layer_input": 8,
                     "vocab_size_per_layer_input": 128, "laurel_rank": 8, "altup_num_inputs": 2,
                     "intermediate_size": [128] * 6, "activation_sparsity_pattern": [0.0] * 6},
    "kimi_linear": {"num_hidden_layers": 4, "head_dim": 16,
                    "linear_attn_config": {"full_attn_layers": [2, 4], "kda_layers": [1, 3], "head_dim": 16,
                                           "num_heads": 4, "short_conv_kernel_size": 4},
                    "kv_lora_rank": 16, "q_lora_rank": None, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
                    "v_head_dim": 16, "num_key_value_heads": 4, "num_experts": 2, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "pad_token_id": 0,
                    "bos_token_id": 1, "eos_token_id": 2},
    "deepseek_v32": {"num_hidden_layers": 2, "num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": 24, "qk_nope_head_dim": 8,
                     "qk_rope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 2, "moe_intermediate_size": 32,
                     "index_head_dim": 16, "index_n_heads": 2, "first_k_dense_replace": 1, "n_group": 1,
                     "topk_group": 1, "num_experts_per_tok": 2},
}


def attention_params(module: nn.Module) -> int:
    """What a (non-latent) block of this attention module holds, as torch counts it: its projections
    (its nn.Linear children) and the norms it applies to Q and K (its norm children: q_norm/k_norm,
    q_layernorm/k_layernorm), not its score terms or buffers."""
    return sum(p.numel() for c in module.children()
               if isinstance(c, nn.Linear) or "Norm" in type(c).__name__ for p in c.parameters())


def available(model_type: str) -> bool:
    from transformers import CONFIG_MAPPING

    return model_type in CONFIG_MAPPING


def small_config(model_type: str) -> Any:
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **{**SMALL_COMMON, **SMALL[model_type]})


def small_model(model_type: str, seed: int = 0) -> nn.Module:
    """The small model with random weights and noise on every parameter (no two alike)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(small_config(model_type)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model


def small_folder(model_type: str, folder: Path) -> tuple[Path, nn.Module]:
    model = small_model(model_type)
    model.save_pretrained(folder)
    return folder, model


@dataclass(frozen=True)
class CacheTruth:
    """What transformers' cache holds: bytes added per token, the fixed bytes per sequence, and per
    cache layer the bytes it adds per token with the tokens it keeps at most (its sliding window
    less one, as transformers' sliding layers keep; None: every token)."""

    per_token: int
    state: int
    layers: tuple[tuple[int, int | None], ...] = ()

    def at(self, context: int) -> int:
        """Bytes the cache holds after ``context`` tokens (one sequence), state included."""
        held = sum(per * (context if keep is None else min(context, keep)) for per, keep in self.layers)
        return held + self.state


def _float_tensors(obj: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() and obj.numel():
            yield obj
    elif isinstance(obj, (list, tuple)) and depth < 5:
        for x in obj:
            yield from _float_tensors(x, depth + 1)
    elif isinstance(obj, dict) and depth < 5:
        for x in obj.values():
            yield from _float_tensors(x, depth + 1)
    elif hasattr(obj, "__dict__") and not isinstance(obj, nn.Module) and depth < 4:
        for x in vars(obj).values():
            yield from _float_tensors(x, depth + 1)


def cache_bytes(cache: Any) -> int:
    seen: set[int] = set()
    total = 0
    for t in _float_tensors(cache):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def cache_truth(model: nn.Module, tokens: int = 3) -> CacheTruth:
    """Run ``tokens`` and ``tokens + 1`` tokens (below every window and chunk) and read the cache."""
    device = next(model.parameters()).device
    sizes = []
    layers: list[list[int]] = []
    windows: list[int | None] = []
    for n in (tokens, tokens + 1):
        ids = (torch.arange(n, device="cpu") % 7 + 1).unsqueeze(0).to(device)
        with torch.no_grad():
            out = model(ids, use_cache=True)
        cache = out.past_key_values
        sizes.append(cache_bytes(cache))
        layers.append([cache_bytes(layer) for layer in getattr(cache, "layers", ())])
        windows = [w - 1 if isinstance(w := getattr(layer, "sliding_window", None), int) else None
                   for layer in getattr(cache, "layers", ())]
    per_token = sizes[1] - sizes[0]
    per_layer = tuple((b - a, keep) for a, b, keep in zip(layers[0], layers[1], windows) if b != a)
    return CacheTruth(per_token, sizes[0] - tokens * per_token, per_layer)


def meta_model(model_type: str, config: dict[str, Any], dtype: torch.dtype = torch.bfloat16) -> nn.Module:
    """The causal LM of a published-config-shaped dict, on the meta device (no memory)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(model_type, **config)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()


def write_meta_folder(model: nn.Module, config: dict[str, Any], folder: Path) -> Path:
    """config.json (the dict as published, with its architectures and dtype) and model.safetensors
    with the header of every stored tensor (tied ones once, as save_pretrained keeps them); the
    data is a sparse hole."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    header: dict[str, Any] = {}
    offset = 0
    seen: set[int] = set()
    names = {"torch.bfloat16": "BF16", "torch.float32": "F32", "torch.float16": "F16"}
    for name, t in model.state_dict(keep_vars=True).items():
        if not isinstance(t, torch.Tensor) or id(t) in seen:
            continue
        seen.add(id(t))
        size = math.prod(t.shape) * t.element_size()
        header[name] = {"dtype": names[str(t.dtype)], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    with open(folder / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)
    return folder
