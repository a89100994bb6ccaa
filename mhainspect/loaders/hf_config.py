"""Head counts from a Hugging Face style config (config.json or ``PretrainedConfig.to_dict()``).

Pure: a mapping in, ``HeadOffers`` out. Knows the common aliases (num_attention_heads, n_head,
num_heads, encoder/decoder_attention_heads; num_key_value_heads, num_kv_heads, multi_query;
head_dim, d_kv, attention_head_size, kv_channels) and nested sub-configs (text_config,
vision_config, encoder/decoder).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mhainspect.static_blocks import HeadOffers

_HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads", "num_attention_head")
_DECODER_HEADS = ("decoder_attention_heads", "num_decoder_attention_heads", "decoder_num_heads")
_KV_HEADS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads", "kv_heads", "num_kv")
_HEAD_DIM = ("head_dim", "d_kv", "attention_head_size", "kv_channels", "qk_head_dim")
_V_HEAD_DIM = ("v_head_dim",)
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model", "dim", "embed_dim", "model_dim")
_SUB_CONFIGS = {"vision": ("vision_config",), "text": ("text_config", "llm_config", "language_config"),
                "audio": ("audio_config",), "encoder": ("encoder",), "decoder": ("decoder",)}


def _int(cfg: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, int] | None:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return k, v
    return None


def sub_config(cfg: Mapping[str, Any], block_name: str) -> tuple[str, Mapping[str, Any]]:
    """The nested config that describes the block (by words in its name), or the top level."""
    low = block_name.lower()
    for word, keys in _SUB_CONFIGS.items():
        if word in low or (word == "text" and any(w in low for w in ("language_model", "text_model", "llm"))):
            for k in keys:
                sub = cfg.get(k)
                if isinstance(sub, Mapping) and _int(sub, _HEADS + _DECODER_HEADS):
                    return f"{k}.", sub
    if not _int(cfg, _HEADS + _DECODER_HEADS):
        for keys in _SUB_CONFIGS.values():
            for k in keys:
                sub = cfg.get(k)
                if isinstance(sub, Mapping) and _int(sub, _HEADS + _DECODER_HEADS):
                    return f"{k}.", sub
    return "", cfg


def offers_from_config(cfg: Mapping[str, Any], block_name: str, *, label: str = "config",
                       source: str = "config") -> HeadOffers:
    """What the config says about the block named ``block_name``."""
    prefix, c = sub_config(cfg, block_name)
    decoder = any(w in block_name.lower() for w in ("decoder", "encdecattention", "encoder_attn"))
    heads = (_int(c, _DECODER_HEADS) if decoder else None) or _int(c, _HEADS)
    kv = _int(c, _KV_HEADS)
    if kv is None and c.get("multi_query") is True:
        kv = ("multi_query", 1)
    hd = _int(c, _HEAD_DIM)
    vhd = _int(c, _V_HEAD_DIM)
    parts = [f"{prefix}{kv_[0]}={kv_[1]}" for kv_ in (heads, kv, hd, vhd) if kv_ is not None]
    return HeadOffers(
        num_heads=heads[1] if heads else None,
        num_kv_heads=kv[1] if kv else None,
        head_dim=hd[1] if hd else None,
        v_head_dim=vhd[1] if vhd else None,
        source=source,
        detail=f"{label} " + ", ".join(parts) if parts else label,
    )


def producer_from_config(cfg: Mapping[str, Any]) -> str:
    arch = cfg.get("architectures")
    name = arch[0] if isinstance(arch, list) and arch and isinstance(arch[0], str) else cfg.get("model_type", "")
    version = cfg.get("transformers_version")
    out = str(name or "")
    if isinstance(version, str):
        out = f"{out} (transformers {version})".strip()
    return out
