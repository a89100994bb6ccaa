"""Head counts from a Hugging Face style config (config.json or ``PretrainedConfig.to_dict()``).

Pure: a mapping in, ``HeadOffers`` out. Every alias and every rule lives in the tables below, each
applied the way the architecture's own modelling code applies it:

- query heads: ``num_attention_heads`` (most), ``n_head`` (GPT-2, Bloom, GPT-J, Falcon/RW),
  ``num_heads`` (T5), ``n_heads`` (MPT), ``encoder_attention_heads`` / ``decoder_attention_heads``
  (BART family), ``num_query_heads`` (OpenELM, one per layer), ``attention_heads`` (XGLM,
  Kosmos-2, Mllama vision), ``num_encoder_attention_heads`` (ProphetNet) and the other names
  transformers' ``attribute_map`` gives ``num_attention_heads``; then the rules of ``HEAD_RULES``
  (ConvBERT's ``head_ratio``: that share of the heads is a convolution, the attention keeps
  ``num_attention_heads // head_ratio``, at least one);
- key/value heads, first rule that applies:
  ChatGLM ``multi_query_attention`` -> ``multi_query_group_num``; Falcon / RW / GPTBigCode
  ``multi_query: true`` -> 1 unless ``new_decoder_architecture`` (then ``num_kv_heads`` /
  ``n_head_kv``, as FalconAttention does: a config may carry ``num_kv_heads == heads`` next to
  ``multi_query: true``); MPT ``attn_config.attn_type == "multiquery_attention"`` -> 1;
  DeciLM ``block_configs[i].attention.n_heads_in_group`` -> heads / group; then the explicit
  keys ``num_key_value_heads``, ``num_kv_heads``, ``n_head_kv``, ``n_kv_heads``, ...;
- head size: ``head_dim`` (Llama, Gemma, Qwen3), ``d_kv`` (T5), ``kv_channels`` (ChatGLM,
  Megatron), ``attention_head_size``, ``d_head`` (Funnel, Transformer-XL); value head size ``v_head_dim``;
- score scale, first rule of ``SCALE_RULES`` that applies: Granite ``attention_multiplier`` (the
  factor itself), Gemma 2/3 ``query_pre_attn_scalar`` (scores scaled by its inverse square root);
- per-layer lists (OpenELM) are indexed by the block's layer number; nested sub-configs
  (``text_config``, ``vision_config``, ``qformer_config``, ``encoder``/``decoder``, ...) are chosen by the block's
  name (``SUB_CONFIGS``); a block no name places, of a config without top-level heads, is the language model's.

Where the config and the weight shapes disagree the assembler lets the shapes win and records
the disagreement (``mhainspect.matchers.assembly``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mhainspect.findings import EvidenceSource
from mhainspect.static_ir import HeadOffers

HEADS_KEYS = ("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads",
              "num_attention_head", "num_query_heads", "attention_heads", "encoder_num_attention_heads",
              "num_encoder_attention_heads")
DECODER_HEADS_KEYS = ("decoder_attention_heads", "num_decoder_attention_heads", "decoder_num_heads",
                      "decoder_num_attention_heads")
KV_HEADS_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads", "kv_heads", "num_kv",
                 "kv_n_heads", "num_attention_groups")
HEAD_DIM_KEYS = ("head_dim", "d_kv", "kv_channels", "attention_head_size", "qk_head_dim", "d_head")
V_HEAD_DIM_KEYS = ("v_head_dim",)
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model", "dim", "embed_dim", "model_dim")


@dataclass(frozen=True)
class SubConfig:
    """A nested config of a composite model: the keys that hold it, the words in a block's module
    path that put the block there, and whether it is a tower run once per input (no KV cache)."""

    keys: tuple[str, ...]
    words: tuple[str, ...]
    tower: bool


# In the order a block's name is matched: the Q-Former (``qformer.encoder.layer``) before the
# encoder; a name matching none falls to the top level, and when the top level has no heads, to
# the language model's sub-config: the stack a multimodal folder leaves unnamed (Qwen2-VL's
# ``model.layers`` beside ``visual.blocks``).
SUB_CONFIGS: tuple[SubConfig, ...] = (
    SubConfig(("vision_config",), ("vision", "visual"), True),
    SubConfig(("qformer_config",), ("qformer",), True),
    SubConfig(("text_config", "llm_config", "language_config"), ("text", "language_model", "llm"), False),
    SubConfig(("audio_config",), ("audio",), True),
    SubConfig(("encoder",), ("encoder",), True),
    SubConfig(("decoder",), ("decoder",), False),
)
# Prefixes (as sub_config returns them) of the sub-configs of towers that run once per input.
TOWER_PREFIXES = frozenset(f"{k}." for s in SUB_CONFIGS if s.tower for k in s.keys)
# model_type values of decoder-only language models (transformers' causal LM families): a config
# of one of these decodes autoregressively whatever class saved it (MistralModel, LlamaModel, ...).
DECODER_ONLY_MODEL_TYPES = frozenset((
    "bloom", "codegen", "cohere", "cohere2", "ctrl", "dbrx", "deepseek_v2", "deepseek_v3", "falcon", "gemma",
    "gemma2", "gemma3_text", "glm", "glm4", "gpt2", "gpt_bigcode", "gpt_neo", "gpt_neox", "gptj", "granite",
    "granitemoe", "internlm2", "jamba", "jetmoe", "llama", "mistral", "mixtral", "mpt", "nemotron", "olmo",
    "olmo2", "olmoe", "openai-gpt", "opt", "persimmon", "phi", "phi3", "phimoe", "qwen", "qwen2", "qwen2_moe",
    "qwen3", "qwen3_moe", "recurrent_gemma", "rwkv", "stablelm", "starcoder2", "xglm", "exaone", "baichuan",
    "chatglm", "smollm3", "hunyuan_v1_dense", "hunyuan_v1_moe", "ernie4_5", "ernie4_5_moe", "arcee", "apertus",
    "seed_oss", "minimax", "gpt_oss", "bitnet", "helium", "zamba", "zamba2", "falcon_h1", "doge", "dots1",
))


def decoder_only_model_type(cfg: Mapping[str, Any]) -> str | None:
    """The config's model_type when it names a decoder-only language model family, else None."""
    kind = cfg.get("model_type")
    return kind if isinstance(kind, str) and kind in DECODER_ONLY_MODEL_TYPES else None


# Words in a block's name that put it in the decoder of an encoder-decoder config.
_DECODER_WORDS = ("decoder", "encdecattention", "encoder_attn")
_LAYER_NUMBER = re.compile(r"(?:^|[./])(\d+)(?:[./]|$)")


@dataclass(frozen=True)
class Found:
    """One value read from a config, with the text that says where."""

    value: int
    said: str  # "num_kv_heads=4", "multi_query=true -> 1", ...


def _positive(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _value(cfg: Mapping[str, Any], key: str, layer: int | None) -> Found | None:
    """``cfg[key]`` as a positive int; a per-layer list is read at ``layer`` (or when all agree)."""
    v = cfg.get(key)
    if isinstance(v, list) and v and all(_positive(x) for x in v):
        if len(set(v)) == 1:
            return Found(v[0], f"{key}={v[0]} (every layer)")
        if layer is not None and 0 <= layer < len(v):
            return Found(v[layer], f"{key}[{layer}]={v[layer]}")
        return None
    n = _positive(v)
    return Found(n, f"{key}={n}") if n is not None else None


def _first(cfg: Mapping[str, Any], keys: Sequence[str], layer: int | None) -> Found | None:
    for k in keys:
        found = _value(cfg, k, layer)
        if found is not None:
            return found
    return None


# ----------------------------------------------------------------------------- key/value heads
# Each rule: (what it follows, function(config, query heads, layer) -> Found | None). The first
# rule that returns a value decides; a rule returning None passes to the next.

KvRule = Callable[[Mapping[str, Any], "int | None", "int | None"], "Found | None"]


def _chatglm(cfg: Mapping[str, Any], heads: int | None, layer: int | None) -> Found | None:
    if cfg.get("multi_query_attention") is True:
        groups = _value(cfg, "multi_query_group_num", layer)
        if groups is not None:
            return Found(groups.value, f"multi_query_attention=true, {groups.said}")
    return None


def _falcon_multi_query(cfg: Mapping[str, Any], heads: int | None, layer: int | None) -> Found | None:
    if cfg.get("multi_query") is True and cfg.get("new_decoder_architecture") is not True:
        return Found(1, "multi_query=true -> 1")
    return None


def _mpt(cfg: Mapping[str, Any], heads: int | None, layer: int | None) -> Found | None:
    attn = cfg.get("attn_config")
    if not isinstance(attn, Mapping):
        return None
    kind = attn.get("attn_type")
    if kind == "multiquery_attention":
        return Found(1, "attn_config.attn_type=multiquery_attention -> 1")
    if kind == "grouped_query_attention":
        kv = _value(attn, "kv_n_heads", layer)
        return Found(kv.value, f"attn_config.{kv.said}") if kv is not None else None
    return None


def _decilm(cfg: Mapping[str, Any], heads: int | None, layer: int | None) -> Found | None:
    blocks = cfg.get("block_configs")
    if heads is None or layer is None or not isinstance(blocks, list) or not 0 <= layer < len(blocks):
        return None
    attn = blocks[layer].get("attention") if isinstance(blocks[layer], Mapping) else None
    group = _positive(attn.get("n_heads_in_group")) if isinstance(attn, Mapping) else None
    if group is None or heads % group:
        return None
    return Found(heads // group, f"block_configs[{layer}].attention.n_heads_in_group={group} -> {heads // group}")


def _explicit(cfg: Mapping[str, Any], heads: int | None, layer: int | None) -> Found | None:
    return _first(cfg, KV_HEADS_KEYS, layer)


KV_RULES: tuple[tuple[str, KvRule], ...] = (
    ("ChatGLM: multi_query_attention uses multi_query_group_num K/V heads", _chatglm),
    ("Falcon, RW, GPTBigCode: multi_query means one K/V head unless new_decoder_architecture", _falcon_multi_query),
    ("MPT: attn_config.attn_type", _mpt),
    ("DeciLM: heads / n_heads_in_group per layer", _decilm),
    ("explicit key/value head count", _explicit),
)


# ----------------------------------------------------------------------------- query heads
# Each rule: (what it follows, function(config, heads the keys name) -> Found | None): the heads
# the attention computes with when the config keeps the named count for something wider. The
# first rule that returns a value decides.

HeadRule = Callable[[Mapping[str, Any], Found], "Found | None"]


def _convbert_head_ratio(cfg: Mapping[str, Any], heads: Found) -> Found | None:
    ratio = _positive(cfg.get("head_ratio"))
    if ratio is None or ratio == 1:
        return None
    kept = max(1, heads.value // ratio)
    return Found(kept, f"{heads.said} // head_ratio={ratio} -> {kept}")


HEAD_RULES: tuple[tuple[str, HeadRule], ...] = (
    ("ConvBERT: head_ratio of the heads are convolution heads (ConvBertSelfAttention)", _convbert_head_ratio),
)


# ----------------------------------------------------------------------------- score scale
# Each rule: (what it follows, function(config) -> (scale, what the config says) | None).

ScaleRule = Callable[[Mapping[str, Any]], "tuple[float, str] | None"]


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def _attention_multiplier(cfg: Mapping[str, Any]) -> tuple[float, str] | None:
    m = _number(cfg.get("attention_multiplier"))
    return (m, f"attention_multiplier={m:g}") if m is not None else None


def _query_pre_attn_scalar(cfg: Mapping[str, Any]) -> tuple[float, str] | None:
    q = _number(cfg.get("query_pre_attn_scalar"))
    return (q ** -0.5, f"query_pre_attn_scalar={q:g} -> scale {q ** -0.5:.6g}") if q is not None else None


SCALE_RULES: tuple[tuple[str, ScaleRule], ...] = (
    ("Granite: attention_multiplier is the score scale (GraniteAttention.scaling)", _attention_multiplier),
    ("Gemma 2/3: scores scaled by query_pre_attn_scalar ** -0.5", _query_pre_attn_scalar),
)


# ----------------------------------------------------------------------------- lookup


def _has_heads(cfg: Mapping[str, Any]) -> bool:
    return _first(cfg, HEADS_KEYS + DECODER_HEADS_KEYS, None) is not None or any(
        isinstance(cfg.get(k), list) for k in HEADS_KEYS)


def sub_config(cfg: Mapping[str, Any], block_name: str) -> tuple[str, Mapping[str, Any]]:
    """The nested config that describes the block (by words in its name), or the top level."""
    low = block_name.lower()
    for s in SUB_CONFIGS:
        if any(w in low for w in s.words):
            for k in s.keys:
                sub = cfg.get(k)
                if isinstance(sub, Mapping) and _has_heads(sub):
                    return f"{k}.", sub
    if not _has_heads(cfg):
        for s in sorted(SUB_CONFIGS, key=lambda s: s.tower):  # the language model first
            for k in s.keys:
                sub = cfg.get(k)
                if isinstance(sub, Mapping) and _has_heads(sub):
                    return f"{k}.", sub
    return "", cfg


def layer_number(block_name: str) -> int | None:
    """The first all-digit component of a block's module path (``model.layers.3.self_attn`` -> 3)."""
    m = _LAYER_NUMBER.search(block_name)
    return int(m.group(1)) if m else None


def offers_from_config(cfg: Mapping[str, Any], block_name: str, *, label: str = "config",
                       source: EvidenceSource = EvidenceSource.CONFIG) -> HeadOffers:
    """What the config says about the block named ``block_name``."""
    prefix, c = sub_config(cfg, block_name)
    layer = layer_number(block_name)
    decoder = any(w in block_name.lower() for w in _DECODER_WORDS)
    heads = (_first(c, DECODER_HEADS_KEYS, layer) if decoder else None) or _first(c, HEADS_KEYS, layer)
    if heads is not None:
        heads = next((found for _, rule in HEAD_RULES if (found := rule(c, heads)) is not None), heads)
    h = heads.value if heads is not None else None
    kv = next((found for _, rule in KV_RULES if (found := rule(c, h, layer)) is not None), None)
    hd = _first(c, HEAD_DIM_KEYS, layer)
    vhd = _first(c, V_HEAD_DIM_KEYS, layer)
    scale = next((said for _, rule in SCALE_RULES if (said := rule(c)) is not None), None)
    parts = [f"{prefix}{f.said}" for f in (heads, kv, hd, vhd) if f is not None]
    if scale is not None:
        parts.append(f"{prefix}{scale[1]}")
    return HeadOffers(
        num_heads=h,
        num_kv_heads=kv.value if kv else None,
        head_dim=hd.value if hd else None,
        v_head_dim=vhd.value if vhd else None,
        source=source,
        detail=f"{label} " + ", ".join(parts) if parts else label,
        scale=scale[0] if scale is not None else None,
    )


def producer_from_config(cfg: Mapping[str, Any]) -> str:
    arch = cfg.get("architectures")
    name = arch[0] if isinstance(arch, list) and arch and isinstance(arch[0], str) else cfg.get("model_type", "")
    version = cfg.get("transformers_version")
    out = str(name or "")
    if isinstance(version, str):
        out = f"{out} (transformers {version})".strip()
    return out
