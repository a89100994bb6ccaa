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
- applications, first rule of ``APPLICATION_RULES`` that applies: ALBERT's layer groups
  (``num_hidden_layers`` runs of ``num_hidden_groups`` shared groups: a group runs
  num_hidden_layers / num_hidden_groups times);
- per-layer lists (OpenELM) are indexed by the block's layer number; per-stage lists
  (``<key>_per_stage``, SAM 2's Hiera) give one reading per stage, the block's width choosing;
- nested sub-configs (``text_config``, ``vision_config``, ``qformer_config``, ``encoder``/``decoder``
  and their ``*_config`` spellings, ...) are chosen by the block's name (``SUB_CONFIGS``), any other
  ``<stem>_config`` by the words of its stem, a config holding keys prefixed with words of the path
  (``pred_num_attention_heads``) by those words, the one named by the outermost path component first
  (``_named_configs``), a composite one searched in turn; a block no name places, of a config without
  top-level heads, is the language model's, and where that config's counts do not describe the
  block, the widths choose another config of the tree (``HeadOffers.alternatives``);
- keys prefixed with words of the block's path are read as the plain ones (``_prefixed``): a
  cross-attention block's ``cross_`` keys (``cross_num_attention_heads``, ...), a predictor's ``pred_``.

Where the config and the weight shapes disagree the assembler lets the shapes win and records
the disagreement (``mhainspect.matchers.assembly``).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mhainspect.frontends.checkpoint.arch_defaults import ConfigView, absent_sub_config, with_defaults
from mhainspect.ir.limits import MAX_CONFIG_STAGES, MAX_CONFIG_TREE, config_float, config_int
from mhainspect.ir.weights import HeadOffers
from mhainspect.matchers.experts import ExpertClaims
from mhainspect.matchers.grouping import cross_by_name
from mhainspect.results import EvidenceSource

HEADS_KEYS = ("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads",
              "num_attention_head", "num_query_heads", "attention_heads", "encoder_num_attention_heads",
              "num_encoder_attention_heads")
DECODER_HEADS_KEYS = ("decoder_attention_heads", "num_decoder_attention_heads", "decoder_num_heads",
                      "decoder_num_attention_heads")
KV_HEADS_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads", "kv_heads", "num_kv",
                 "kv_n_heads", "num_attention_groups")
# attention_head_dim: Zamba/Zamba2's head size (their attribute_map's head_dim), ahead of the
# kv_channels those configs also write (hidden_size / heads, which their attention does not use).
HEAD_DIM_KEYS = ("head_dim", "attention_head_dim", "d_kv", "kv_channels", "attention_head_size", "qk_head_dim",
                 "d_head")
V_HEAD_DIM_KEYS = ("v_head_dim",)
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model", "dim", "embed_dim", "model_dim")
# A width a config runs its attention at apart from the hidden size (MobileBERT's bottleneck, Zamba's
# concatenated input): the blocks of that width are the config's too (``HeadOffers.widths``).
INNER_WIDTH_KEYS = ("intra_bottleneck_size", "attention_hidden_size")
_SIZE_KEYS = frozenset(HEADS_KEYS + KV_HEADS_KEYS + HEAD_DIM_KEYS + V_HEAD_DIM_KEYS + HIDDEN_KEYS)


@dataclass(frozen=True)
class SubConfig:
    """A nested config of a composite model: the keys that hold it, the words in a block's module
    path that put the block there, and whether it is a tower run once per input (no KV cache)."""

    keys: tuple[str, ...]
    words: tuple[str, ...]
    tower: bool
    # Whether the weights it names are a model built on that config with its own tie rules (a
    # language model, an encoder or decoder stack: transformers ties each sub-model by its own
    # config, ``tied_copies``); the towers without word embeddings tie nothing.
    ties: bool = False


# In the order a block's name is matched: the Q-Former (``qformer.encoder.layer``) before the
# encoder; a name matching none falls to the top level, and when the top level has no heads, to
# the language model's sub-config: the stack a multimodal folder leaves unnamed (Qwen2-VL's
# ``model.layers`` beside ``visual.blocks``).
LANGUAGE_MODEL = SubConfig(("text_config", "llm_config", "language_config"), ("text", "language_model", "llm"),
                           False, True)
SUB_CONFIGS: tuple[SubConfig, ...] = (
    SubConfig(("vision_config",), ("vision", "visual", "video"), True),  # a video tower reads frames
    SubConfig(("qformer_config",), ("qformer",), True),
    LANGUAGE_MODEL,
    SubConfig(("audio_config",), ("audio",), True),
    # The decoder before the encoder: a decoder's cross-attention is named after the encoder
    # (``decoder.layers.0.encoder_attn``); "decoder" is in no encoder's path.
    SubConfig(("decoder", "decoder_config"), ("decoder",), False, True),
    SubConfig(("encoder", "encoder_config"), ("encoder",), True, True),
)
# Any other nested config is named ``<stem>_config``; a block belongs to it when every word of
# the stem (but a last ``model``: ``patch_model_config`` names the patch model) is a word of the
# block's module path (``encoder.patch_encoder.model.…``; ``backbone_config``: ``backbone.…``), the
# most words first. A nested config without heads of its own (a composite: Pi0's ``vlm_config``
# holds a text and a vision config) places the block among its own sub-configs the same way.
_NESTED_SUFFIX = "_config"
_WORDS = re.compile(r"[a-z]+")
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
    # hybrid and 2025-26 decoders (linear attention, state-space, convolution, chunked, sparse attention)
    "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "kimi_linear", "bamba", "nemotron_h", "granitemoehybrid",
    "lfm2", "lfm2_moe", "mamba", "mamba2", "falcon_mamba", "llama4_text", "gemma3n_text", "deepseek_v32",
))


def decoder_only_model_type(cfg: Mapping[str, Any]) -> str | None:
    """The config's model_type when it names a decoder-only language model family, else None."""
    kind = cfg.model_type if isinstance(cfg, ConfigView) else cfg.get("model_type")
    return kind if isinstance(kind, str) and kind in DECODER_ONLY_MODEL_TYPES else None


# Words in a block's name that put it in the decoder of an encoder-decoder config.
_DECODER_WORDS = ("decoder", "encdecattention", "encoder_attn")
_LAYER_NUMBER = re.compile(r"(?:^|[./])(\d+)(?:[./]|$)")


@dataclass(frozen=True)
class Found:
    """One value read from a config, with the text that says where."""

    value: int
    said: str  # "num_kv_heads=4", "multi_query=true -> 1", ...


def positive_int(v: Any) -> int | None:
    """A config value that is a positive int (not a bool) within the readers' limits
    (mhainspect.ir.limits.config_int), else None."""
    return config_int(v)


def _value(cfg: Mapping[str, Any], key: str, layer: int | None) -> Found | None:
    """``cfg[key]`` as a positive int; a per-layer list is read at ``layer`` (or when all agree). A
    value the config omits and its architecture supplies (``arch_defaults.ConfigView``) says so."""
    found = _read(cfg, key, layer)
    if found is not None and isinstance(cfg, ConfigView) and cfg.defaulted(key):
        return Found(found.value, f"{found.said} ({cfg.model_type} default)")
    return found


def _read(cfg: Mapping[str, Any], key: str, layer: int | None) -> Found | None:
    v = cfg.get(key)
    if isinstance(v, list) and v and all(positive_int(x) for x in v):
        if len(set(v)) == 1:
            return Found(v[0], f"{key}={v[0]} (every layer)")
        if layer is not None and 0 <= layer < len(v):
            return Found(v[layer], f"{key}[{layer}]={v[layer]}")
        return None
    n = positive_int(v)
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
        default = f" ({cfg.model_type} default)" if isinstance(cfg, ConfigView) and cfg.defaulted("multi_query") else ""
        return Found(1, f"multi_query=true{default} -> 1")
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
    group = positive_int(attn.get("n_heads_in_group")) if isinstance(attn, Mapping) else None
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
    ratio = positive_int(cfg.get("head_ratio"))
    if ratio is None or ratio == 1:
        return None
    kept = max(1, heads.value // ratio)
    return Found(kept, f"{heads.said} // head_ratio={ratio} -> {kept}")


HEAD_RULES: tuple[tuple[str, HeadRule], ...] = (
    ("ConvBERT: head_ratio of the heads are convolution heads (ConvBertSelfAttention)", _convbert_head_ratio),
)


# ----------------------------------------------------------------------------- head size
# Each rule: (what it follows, function(config, layer) -> Found | None): the key width per head where
# an architecture does not keep it under the head-size keys. The first rule that returns a value
# decides; else the keys of HEAD_DIM_KEYS.

HeadDimRule = Callable[[Mapping[str, Any], "int | None"], "Found | None"]


def _latent_key_width(cfg: Mapping[str, Any], layer: int | None) -> Found | None:
    nope, rope = _value(cfg, "qk_nope_head_dim", layer), _value(cfg, "qk_rope_head_dim", layer)
    if nope is None or rope is None:
        return None
    return Found(nope.value + rope.value, f"{nope.said} + {rope.said} -> d_k {nope.value + rope.value}")


HEAD_DIM_RULES: tuple[tuple[str, HeadDimRule], ...] = (
    ("latent attention (DeepSeek-V2/V3, Kimi-K2, MiniCPM3): a head's key is qk_nope_head_dim + qk_rope_head_dim "
     "(transformers' DeepseekV3Config sets head_dim to the rotary part alone)", _latent_key_width),
)
# Latent attention's widths: (HeadOffers field, config key).
LATENT_KEYS = (("kv_rank", "kv_lora_rank"), ("rope_dim", "qk_rope_head_dim"), ("q_rank", "q_lora_rank"))


# ----------------------------------------------------------------------------- score scale
# Each rule: (what it follows, function(config) -> (scale, what the config says) | None).

ScaleRule = Callable[[Mapping[str, Any]], "tuple[float, str] | None"]


def _number(v: Any) -> float | None:
    return config_float(v)


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


# ----------------------------------------------------------------------------- applications
# Each rule: (what it follows, function(config, block name) -> Found | None): how many times one
# run applies the block's weights, when the config shares a layer between depths. The first rule
# that returns a value decides; without one, a block runs once.

ApplicationRule = Callable[[Mapping[str, Any], str], "Found | None"]
_ALBERT_GROUP = re.compile(r"(?:^|\.)albert_layer_groups\.(\d+)\.")


def _albert_groups(cfg: Mapping[str, Any], block_name: str) -> Found | None:
    layers, groups = positive_int(cfg.get("num_hidden_layers")), positive_int(cfg.get("num_hidden_groups"))
    found = _ALBERT_GROUP.search(block_name)
    if layers is None or groups is None or found is None:
        return None
    group = int(found.group(1))
    # AlbertTransformer: layer i runs group int(i / (layers / groups)), every layer of the group once.
    runs = sum(1 for i in range(layers) if i * groups // layers == group)
    return Found(runs, f"num_hidden_layers={layers}, num_hidden_groups={groups} -> layer group {group} runs "
                       f"{runs} times") if runs else None


APPLICATION_RULES: tuple[tuple[str, ApplicationRule], ...] = (
    ("ALBERT: num_hidden_layers layers run num_hidden_groups shared layer groups in turn", _albert_groups),
)
# Zamba2's shared transformer blocks, run in turn by its hybrid layers, are counted over every block
# a source shows (mhainspect.frontends.checkpoint.mixers.shared_block_runs): a folder keeps the first
# use of each, a module holds every use.


# ----------------------------------------------------------------------------- tied weights
# What a config declares about weights two module paths share (transformers ties them at load:
# ``PreTrainedModel.tie_weights``). A checkpoint may store a tied weight under both names (older
# transformers wrote both; sharded ``.bin`` files hold a copy in each shard): the stored copy is
# the same parameter, counted once. Three declarations:
# - ``tie_word_embeddings`` (read as the config says it; when absent, the architecture's default:
#   the config classes of transformers 5 whose ``tie_word_embeddings`` defaults to true are
#   ``TIE_WORD_EMBEDDINGS_BY_DEFAULT``; any other model_type ties nothing it does not say): the
#   output head (``lm_head``, ``cls.predictions.decoder``, ``embed_out``, ...) is the input word
#   embedding, and a prediction head's bias (``cls.predictions.decoder.bias``) its parent's
#   (``cls.predictions.bias``). T5's own config class forces the key to true and keeps what the file said for its
#   output scaling: the key as written decides here, as it decided in transformers 4.
# - an encoder-decoder config (``is_encoder_decoder``) builds its stacks on the ``shared``
#   embedding: ``encoder.embed_tokens`` and ``decoder.embed_tokens`` are it (unless
#   ``share_encoder_decoder_embeddings`` is false, as some Marian models say).
# - ``tie_encoder_decoder`` (transformers 4, an encoder-decoder config): every decoder weight
#   whose module path is the encoder's (``decoder.X`` or, under ``EncoderDecoderModel``,
#   ``decoder.<base model>.X`` for ``encoder.X``) is the encoder's.
# A tie joins tensors of one shape only; a head ties to the input embedding nearest it in the
# module tree (the longest common path), never to one of several equally near.
# A nested config that builds a sub-model (``SubConfig.ties``: an encoder-decoder's ``encoder`` /
# ``decoder``, a multimodal ``text_config``) ties that sub-model's weights, the ones below the
# module path its words name, by these same rules (transformers ties each sub-model by its own
# config): BERT2BERT's decoder head by ``decoder.tie_word_embeddings``.

TIE_WORD_EMBEDDINGS_BY_DEFAULT = frozenset((
    "albert", "aya_vision", "bart", "bert", "bert-generation", "big_bird", "bigbird_pegasus", "biogpt",
    "blenderbot", "blenderbot-small", "blip", "blip_text_model", "bloom", "camembert", "canary", "cohere",
    "cohere2", "cohere2_moe", "cohere2_vision", "cohere_compass_text", "convbert", "cpmant", "csm", "ctrl",
    "d_fine", "dab-detr", "data2vec-text", "deberta", "deberta-v2", "deepseek_vl", "deepseek_vl_hybrid",
    "deformable_detr", "deimv2", "diffusion_gemma", "diffusion_gemma_text", "distilbert", "electra", "ernie",
    "ernie4_5", "ernie4_5_moe", "ernie4_5_vl_moe", "ernie4_5_vl_moe_text", "esm", "falcon", "falcon_mamba",
    "flaubert", "flava", "florence2", "fnet", "fun_asr_nano", "funnel", "gemma", "gemma2", "gemma3",
    "gemma3_text", "gemma3n", "gemma3n_text", "gemma4", "gemma4_text", "gemma4_unified",
    "gemma4_unified_assistant", "gemma4_unified_text", "glmasr", "got_ocr2", "gpt-sw3", "gpt2", "gpt_bigcode",
    "gpt_neo", "gpt_neox_japanese", "granite_docling", "granite_docling_text", "granite_speech",
    "granite_speech5_ctc", "granite_speech_plus", "granite_swa", "grounding-dino", "gte", "hunyuan_vl",
    "hunyuan_vl_text", "hyperclovax_vision_v2", "ibert", "internvl", "janus", "jetmoe", "jina_embeddings_v3",
    "kimi_k25", "kosmos-2", "kosmos-2.5", "kosmos_2_5_text_model", "kosmos_2_text_model", "lara_mini", "layoutlm",
    "led", "lfm2", "lfm2_moe", "lfm2_vl", "lfm3", "lfm3_vl", "lighton_ocr", "longformer", "longt5", "luke",
    "lxmert", "m2m_100", "mamba", "marian", "mbart", "megatron-bert", "mimi", "mimi_decoder", "mimi_encoder",
    "minicpm3", "minicpm_ocr", "mistral3", "mm-grounding-dino", "mobilebert", "modernbert", "modernbert-decoder",
    "moonshine", "moss_transcribe_diarize", "mpnet", "mpt", "mra", "mt5", "mvp", "neomme", "nllb-moe",
    "nomic_bert", "nystromformer", "openai-gpt", "opt", "ovis2", "paddleocr_vl", "paddleocr_vl_text", "paligemma",
    "pe_audio_video", "pegasus", "pegasus_x", "plbart", "pop2piano", "pp_chart2table", "pp_doclayout_v3",
    "pp_doclayout_v4", "prophetnet", "qwen2_5_omni_text", "qwen3_asr", "qwen3_vl_moe_text", "recurrent_gemma",
    "roberta", "roberta-prelayernorm", "roc_bert", "roformer", "rt_detr_v2", "sam", "sam_hq", "seamless_m4t",
    "seamless_m4t_v2", "shieldgemma2", "smollm3", "speech_to_text", "speecht5", "squeezebert", "starcoder2",
    "switch_transformers", "t5", "t5_gemma_module", "t5gemma", "t5gemma2", "t5gemma2_decoder", "t5gemma2_encoder",
    "t5gemma2_text", "tapas", "trocr", "udop", "umt5", "vaultgemma", "vilt", "visual_bert", "voxtral_realtime",
    "whisper", "xglm", "xlm", "xlm-roberta", "xlm-roberta-xl", "xlnet", "xmod", "yoso", "youtu", "zamba",
    "zamba2", "zaya",
))
# Module paths (their last components) of output heads transformers ties to the word embedding.
OUTPUT_EMBEDDING_PATHS = ("lm_head", "lm_head.decoder", "lm_head.out_proj", "predictions.decoder", "embed_out",
                          "output_projection", "proj_out", "generator_lm_head", "vocab_projector", "pred_layer.proj",
                          "lm_loss", "mlm_score.decoder", "head.decoder", "head", "output", "decoder")
# Last module path component of an input word embedding.
INPUT_EMBEDDING_NAMES = frozenset(("embed_tokens", "word_embeddings", "wte", "embed_in", "shared", "tok_embeddings",
                                   "tokens_embed", "word_embedding", "w", "embeddings"))


@dataclass(frozen=True)
class Tie:
    """A stored tensor (``copy``) that the config declares to be another (``source``)."""

    copy: str
    source: str
    said: str  # what the config declares: "tie_word_embeddings=true", "gpt2 default tie_word_embeddings=true", ...


def word_embeddings_tied(cfg: Mapping[str, Any]) -> str | None:
    """What makes the config tie its output head to its input embedding, or None when it does not."""
    for prefix, c in (("", cfg), *((f"{k}.", sub) for k in LANGUAGE_MODEL.keys
                                   if isinstance(sub := cfg.get(k), Mapping))):
        declared = c.get("tie_word_embeddings")
        if isinstance(declared, bool):
            return f"{prefix}tie_word_embeddings=true" if declared else None
        kind = c.get("model_type")
        if isinstance(kind, str) and kind in TIE_WORD_EMBEDDINGS_BY_DEFAULT:
            return f"{prefix}tie_word_embeddings absent: {kind}'s default is true"
        if kind is not None:  # a known type without the default, or an unknown one: no tie
            return None
    return None


def _module(name: str) -> tuple[str, ...]:
    return tuple(name.split(".")[:-1])


def _nearest(head: str, sources: Sequence[str]) -> str | None:
    """The source sharing the longest module path with ``head``; None when several are equally near."""
    def shared(s: str) -> int:
        n = 0
        for a, b in zip(_module(head), _module(s)):
            if a != b:
                break
            n += 1
        return n
    if not sources:
        return None
    best = max(shared(s) for s in sources)
    nearest = [s for s in sources if shared(s) == best]
    return nearest[0] if len(nearest) == 1 else None


class _Ties:
    """The ties found so far: copy -> (source, what the config says); a chain ends at a stored tensor."""

    def __init__(self, shapes: Mapping[str, tuple[int, ...]]) -> None:
        self.shapes = shapes
        self.source_of: dict[str, tuple[str, str]] = {}

    def stored(self, name: str) -> str:
        while name in self.source_of:
            name = self.source_of[name][0]
        return name

    def tie(self, copy: str, source: str, said: str) -> None:
        """``copy`` repeats ``source`` when both are stored with one shape and ``copy`` is no source."""
        source = self.stored(source)
        shapes = self.shapes
        if copy != source and copy not in self.source_of and copy in shapes and shapes[copy] == shapes.get(source):
            self.source_of[copy] = source, said

    def found(self) -> tuple[Tie, ...]:
        return tuple(Tie(copy, self.stored(source), said) for copy, (source, said) in self.source_of.items())


def tied_copies(cfg: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> tuple[Tie, ...]:
    """The stored tensors (float parameters: ``shapes`` by name) that the config ties to another stored
    tensor, each with the tensor it repeats (never a copy: chains end at the stored source)."""
    ties = _Ties(shapes)
    encdec = cfg.get("is_encoder_decoder") is True
    if encdec and cfg.get("share_encoder_decoder_embeddings") is not False:
        _tie_shared_embeddings(ties)
    if encdec and cfg.get("tie_encoder_decoder") is True:
        _tie_encoder_to_decoder(ties)
    said = word_embeddings_tied(cfg)
    if said is not None:
        _tie_output_embeddings(cfg, ties, said)
    # Each sub-model ties its own weights by its own config (transformers ties every PreTrainedModel
    # in the tree by its config: EncoderDecoderModel's decoder head by ``decoder.tie_word_embeddings``).
    for prefix, (key, sub, sub_shapes) in _sub_models(cfg, shapes).items():
        for t in tied_copies(sub, sub_shapes):
            ties.tie(prefix + t.copy, prefix + t.source, f"{key}.{t.said}")
    return ties.found()


def _tie_shared_embeddings(ties: _Ties) -> None:
    """An encoder-decoder's stacks embed with its shared embedding (``encoder.embed_tokens`` is ``shared``)."""
    for name in ties.shapes:
        parts = name.split(".")
        if parts[-2:] == ["embed_tokens", "weight"] and len(parts) >= 3 and parts[-3] in ("encoder", "decoder"):
            shared = ".".join(parts[:-3] + ["shared", "weight"])
            if shared in ties.shapes:
                ties.tie(name, shared, "is_encoder_decoder=true: the stacks embed with the shared embedding")


def _tie_encoder_to_decoder(ties: _Ties) -> None:
    """``tie_encoder_decoder``: each decoder weight at the encoder weight's path (one level deeper allowed)."""
    by_parts = {tuple(n.split(".")): n for n in ties.shapes}
    for comps, name in by_parts.items():
        if "encoder" not in comps:
            continue
        i = comps.index("encoder")
        head, rest = comps[:i] + ("decoder",), comps[i + 1:]
        found = [n for p, n in by_parts.items() if p[:i + 1] == head and (p[i + 1:] == rest or (
            len(p) == len(comps) + 1 and p[i + 2:] == rest))]
        if len(found) == 1:
            ties.tie(found[0], name, "tie_encoder_decoder=true")


def _tie_output_embeddings(cfg: Mapping[str, Any], ties: _Ties, said: str) -> None:
    """Tied word embeddings: each output head (a vocabulary-wide matrix at an output-embedding path)
    repeats the nearest input embedding of its shape, and its bias its parent's."""
    shapes = ties.shapes
    vocab = {v for c in (cfg, *(s for s in cfg.values() if isinstance(s, Mapping)))
             if (v := positive_int(c.get("vocab_size"))) is not None}
    matrices = [n for n, s in shapes.items() if len(s) == 2 and n.endswith(".weight")
                and (not vocab or s[0] in vocab)]
    inputs = [n for n in matrices if _module(n)[-1:] and _module(n)[-1] in INPUT_EMBEDDING_NAMES
              and n not in ties.source_of]
    for name in matrices:
        path = ".".join(_module(name))
        if name in inputs or not any(path == h or path.endswith("." + h) for h in OUTPUT_EMBEDDING_PATHS):
            continue
        source = _nearest(name, [s for s in inputs if shapes[s] == shapes[name]])
        if source is not None:
            ties.tie(name, source, said)
            # A prediction head's bias is its parent's (BERT's cls.predictions.decoder.bias is
            # cls.predictions.bias), tied with the weight.
            parent = _module(name)[:-1]
            if parent:
                ties.tie(f"{path}.bias", ".".join(parent + ("bias",)), said)


def _sub_models(cfg: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]
                ) -> dict[str, tuple[str, Mapping[str, Any], dict[str, tuple[int, ...]]]]:
    """The weights of the sub-models a composite config builds from a nested config that ties
    (``SubConfig.ties``), by module path prefix: the outermost path component naming a sub-config
    the config holds (``SUB_CONFIGS`` words, in their order) puts a weight there, by the path below it;
    a weight first named by a tower's words (``vision_tower.…encoder``) is the tower's, in none."""
    out: dict[str, tuple[str, Mapping[str, Any], dict[str, tuple[int, ...]]]] = {}
    if not any(isinstance(cfg.get(k), Mapping) for s in SUB_CONFIGS for k in s.keys):
        return out  # no nested config: no name needs its components matched
    for name, shape in shapes.items():
        comps = name.split(".")[:-1]
        for i, comp in enumerate(comps):
            low = comp.lower()
            found = next(((s, k) for s in SUB_CONFIGS if any(w in low for w in s.words)
                          for k in s.keys if isinstance(cfg.get(k), Mapping)), None)
            if found is None:
                continue
            s, key = found
            if s.ties:
                prefix = ".".join(comps[:i + 1]) + "."
                out.setdefault(prefix, (key, cfg[key], {}))[2][name[len(prefix):]] = shape
            break
    return out


# ----------------------------------------------------------------------------- lookup


def _has_heads(cfg: Mapping[str, Any], comps: Sequence[frozenset[str]] = ()) -> bool:
    """Whether the config names query heads: its own keys, or a prefixed key the path names."""
    return _first(cfg, HEADS_KEYS + DECODER_HEADS_KEYS, None) is not None or any(
        isinstance(cfg.get(k), list) for k in HEADS_KEYS) or any(
        k in _HEADS_SET for k in _prefixed(cfg, comps)) or any(k in _HEADS_SET for k in _stage_lists(cfg))


def _nested(cfg: Mapping[str, Any], keys: Sequence[str]) -> tuple[str, ConfigView] | None:
    """The first of ``keys`` the config holds as a sub-config (with its architecture's defaults),
    else the one its composite architecture builds when the file leaves it out."""
    for k in keys:
        sub = cfg.get(k)
        if isinstance(sub, Mapping):
            return f"{k}.", with_defaults(sub, cfg, k)
    for k in keys:
        if (absent := absent_sub_config(cfg, k)) is not None:
            return f"{k}.", absent
    return None


def path_words(block_name: str) -> tuple[frozenset[str], ...]:
    """The words of each component of a block's module path, outermost first; a block named as
    cross-attention (``cross_by_name``) also names ``cross`` (its config's ``cross_`` keys)."""
    comps = tuple(frozenset(_WORDS.findall(c)) for c in block_name.lower().split("."))
    return comps + (frozenset({"cross"}),) if cross_by_name(block_name) else comps


# A word of a config's prefix names a path word it begins (``pred`` the ``predictor``, ``prompt`` the
# ``prompts_generator``, ``conf`` the ``conformer``) when it is at least this long.
_MIN_ABBREVIATION = 3


def _named_at(comps: Sequence[frozenset[str]], words: Sequence[str], *, abbreviated: bool = False) -> int | None:
    """The path component where the path has named every one of ``words`` (the outermost place that
    completes them), or None when it does not name them all."""
    at = -1
    for word in words:
        i = next((i for i, ws in enumerate(comps) if word in ws or (
            abbreviated and len(word) >= _MIN_ABBREVIATION and any(w.startswith(word) for w in ws))), None)
        if i is None:
            return None
        at = max(at, i)
    return at if words else None


def sub_config(cfg: Mapping[str, Any], block_name: str) -> tuple[str, Mapping[str, Any]]:
    """The nested config that describes the block: of those its module path names (a tower's words,
    ``SUB_CONFIGS``; a ``<stem>_config``; a config holding keys prefixed with words of the path), the
    one named by the outermost component (the sub-model the block sits in: ``detr_decoder`` before
    the ``vision`` of its ``vision_cross_attn``), the most words first; else the top level; a block no
    name places, of a config without top-level heads, is the language model's. Either with its
    architecture's defaults under the values it omits (``arch_defaults``): never another tower's values."""
    return _placed(cfg, block_name)[:2]


# ``_placed`` of the configs read last, by the config's identity and the block's name: each block's
# config is asked for by several steps (heads, window, causality, decoding, mixers: 384 lookups for
# Qwen3-30B-A3B's 48 blocks). Each entry holds its config, so an id is not reused while it is here;
# a config given another key since is placed again (as ``_FACTS``).
_PLACED: dict[tuple[int, str], tuple[Mapping[str, Any], int, tuple[str, Mapping[str, Any], bool]]] = {}
_PLACED_KEPT = 4096


def _placed(cfg: Mapping[str, Any], block_name: str) -> tuple[str, Mapping[str, Any], bool]:
    """``sub_config``, and whether the block's path names the config (else it is the default)."""
    hit = _PLACED.get((id(cfg), block_name))
    if hit is not None and hit[0] is cfg and hit[1] == len(cfg):
        return hit[2]
    placed = _place(cfg, block_name)
    if len(_PLACED) >= _PLACED_KEPT:
        _PLACED.pop(next(iter(_PLACED)))
    _PLACED[(id(cfg), block_name)] = (cfg, len(cfg), placed)
    return placed


def _place(cfg: Mapping[str, Any], block_name: str) -> tuple[str, Mapping[str, Any], bool]:
    low = block_name.lower()
    comps = path_words(block_name)
    named = _named_configs(cfg, low, comps)
    if named:
        return named[0][1], named[0][2], True
    top = with_defaults(cfg)
    if not _has_heads(top, comps) and (found := _nested(cfg, LANGUAGE_MODEL.keys)) is not None:
        return (*found, False)
    return "", top, False


def _named_configs(cfg: Mapping[str, Any], low: str, comps: Sequence[frozenset[str]]
                   ) -> list[tuple[tuple[int, int, int], str, ConfigView]]:
    """The configs the block's path names, best first: ((where, -words, kind), prefix, view)."""
    found: list[tuple[tuple[int, int, int], str, ConfigView]] = []
    parts = low.split(".")
    for s in SUB_CONFIGS:
        if not any(w in low for w in s.words):
            continue
        at = next((i for i, c in enumerate(parts) if any(w in c for w in s.words)), None)
        if at is not None and (nested := _nested(cfg, s.keys)) is not None:
            found.append(((at, -1, 0), *_within(*nested, low)))
            break  # SUB_CONFIGS' own order decides between its entries (the Q-Former before the encoder)
    stems: list[tuple[tuple[int, int, int], str, ConfigView]] = []
    facts = _facts(cfg)
    for key, words in facts.stems:
        at = _named_at(comps, words)
        if at is not None:
            prefix, view = _within(f"{key}.", with_defaults(cfg[key], cfg, key), low)
            # A nested config neither with heads nor nesting the block's (MPT's ``attn_config``) is not its.
            if _has_heads(view, comps):
                stems.append(((at, -len(words), 1), prefix, view))
    stems.sort(key=lambda f: f[0])
    if len(stems) > 1 and stems[0][0] == stems[1][0]:
        stems = []  # two stems equally specific at one place: neither
    found += stems[:1]
    for prefix, node in (("", cfg), *((f"{k}.", v) for k, v in facts.nested)):
        named = [(at, -words) for k, (_, _, at, words) in _prefixed(node, comps).items() if k in _HEADS_SET]
        if named:
            view = with_defaults(node, cfg, prefix[:-1]) if prefix else with_defaults(cfg)
            found.append(((*min(named), 2), prefix, view))
    found.sort(key=lambda f: f[0])
    return found


_SCALARS = (int, float, str, list, type(None))


def _is_mapping(v: Any) -> bool:
    """``isinstance(v, Mapping)``, without the abstract-class check for a config's scalars (the lookup
    runs per block over every key)."""
    return isinstance(v, dict) or (not isinstance(v, _SCALARS) and isinstance(v, Mapping))


def _stem_words(key: str) -> list[str]:
    words = _WORDS.findall(key[:-len(_NESTED_SUFFIX)].lower())
    return words[:-1] if len(words) > 1 and words[-1] == "model" else words


def _within(prefix: str, view: ConfigView, low: str) -> tuple[str, ConfigView]:
    """A sub-config without heads of its own that nests others (T5Gemma 2's ``encoder`` holds a text
    and a vision config, Pi0's ``vlm_config``): the one of those the block's path names, else it."""
    if _has_heads(view):
        return prefix, view
    inner, nested = sub_config(view, low)
    return (f"{prefix}{inner}", with_defaults(nested)) if inner else (prefix, view)


def layer_number(block_name: str) -> int | None:
    """The first all-digit component of a block's module path (``model.layers.3.self_attn`` -> 3)."""
    m = _LAYER_NUMBER.search(block_name)
    return int(m.group(1)) if m else None


def _heads(c: Mapping[str, Any], block_name: str, layer: int | None) -> Found | None:
    """The query heads: a decoder block's own key first, then the head keys, then HEAD_RULES."""
    decoder = any(w in block_name.lower() for w in _DECODER_WORDS)
    heads = (_first(c, DECODER_HEADS_KEYS, layer) if decoder else None) or _first(c, HEADS_KEYS, layer)
    if heads is not None:
        heads = next((found for _, rule in HEAD_RULES if (found := rule(c, heads)) is not None), heads)
    return heads


def _head_dim(c: Mapping[str, Any], layer: int | None) -> Found | None:
    """A head's key width: the first rule of HEAD_DIM_RULES that applies, else the head-size keys."""
    return next((found for _, rule in HEAD_DIM_RULES if (found := rule(c, layer)) is not None), None) \
        or _first(c, HEAD_DIM_KEYS, layer)


def _latent_widths(c: Mapping[str, Any], layer: int | None) -> dict[str, Found]:
    """Latent attention's widths (LATENT_KEYS) by HeadOffers field, when the config has a K/V latent."""
    if "kv_lora_rank" not in c:
        return {}
    return {field: found for field, key in LATENT_KEYS if (found := _value(c, key, layer)) is not None}


# Keys a config writes for one part of its model under a prefix naming that part: a cross-attention
# sized apart from the self-attention (Dia's ``cross_num_attention_heads``, ``cross_head_dim``), a
# predictor (V-JEPA 2's ``pred_num_attention_heads``, ``pred_hidden_size``), a resampler
# (Idefics2's ``resampler_n_heads``), a video tower's message transformer (XCLIP's
# ``mit_num_attention_heads``), a decoder's self-attention (RF-DETR's ``decoder_self_attention_heads``).
# Such a key is read as the plain one for a block whose module path names every word of its prefix
# (a prefix word may abbreviate a path word: ``pred`` the ``predictor``); a prefixed width is one
# more width the config describes (``HeadOffers.widths``). A key the rules read by its own name
# (``encoder_attention_heads``, ``qk_rope_head_dim``) is not a prefixed one.
_HEADS_GROUP = HEADS_KEYS + DECODER_HEADS_KEYS
_HEADS_SET = frozenset(_HEADS_GROUP)
_WIDTH_GROUP = HIDDEN_KEYS + INNER_WIDTH_KEYS
_KEY_GROUPS = (_HEADS_GROUP, KV_HEADS_KEYS, HEAD_DIM_KEYS, V_HEAD_DIM_KEYS, _WIDTH_GROUP)
_PLAIN_KEYS = tuple(sorted({k for g in _KEY_GROUPS for k in g}, key=len, reverse=True))
_OWN_NAME_KEYS = frozenset(_PLAIN_KEYS) | {k for _, k in LATENT_KEYS} | {"qk_nope_head_dim"}
CROSS_PREFIX = "cross_"


def _prefixed(c: Mapping[str, Any], comps: Sequence[frozenset[str]], *, in_part: bool = False
              ) -> dict[str, tuple[str, Any, int, int]]:
    """The config's prefixed keys the path names, by the plain key each is read as: (the key as
    written, its value, the path component that names the prefix, the prefix's word count); of two
    for one plain key, the prefix of more words. ``in_part``: instead, the keys whose prefix the path
    names only in part, by a word that is not one of every attention's (EdgeTAM's
    ``perceiver_resampler_*`` for its ``spatial_perceiver``; not ``memory_attention_*`` for any
    ``self_attention``): a reading the widths must choose (``offers_from_config``)."""
    out: dict[str, tuple[str, Any, int, int]] = {}
    if not comps:
        return out
    for key, plain, words in _facts(c).prefixed:
        at = _named_at(comps, words, abbreviated=True)
        if in_part:
            some = [w for w in words if w not in _EVERY_ATTENTIONS and _named_at(comps, (w,), abbreviated=True) is not None]
            at = None if at is not None or not some else min(_named_at(comps, (w,), abbreviated=True) or 0 for w in some)
        if at is not None and (plain not in out or len(words) > out[plain][3]):
            out[plain] = (key, c[key], at, len(words))
    return out


@dataclass(frozen=True)
class _Facts:
    """What the lookup reads of one config's own keys, whatever the block: its prefixed keys (key, plain
    key, prefix words), per-stage lists by plain key, nested configs (key, config) and among them the
    ``<stem>_config`` ones (key, stem words)."""

    prefixed: tuple[tuple[str, str, tuple[str, ...]], ...]
    stages: dict[str, tuple[str, list[int]]]
    nested: tuple[tuple[str, Mapping[str, Any]], ...]
    stems: tuple[tuple[str, tuple[str, ...]], ...]


# The facts of the configs read last, by identity (the lookup runs once per block over one config;
# each entry holds its config, so an id is not reused while it is here; a config given another key
# since is read again).
_FACTS: dict[int, tuple[Mapping[str, Any], int, _Facts]] = {}
_FACTS_KEPT = 32


def _facts(c: Mapping[str, Any]) -> _Facts:
    own = c.given if isinstance(c, ConfigView) else c
    hit = _FACTS.get(id(own))
    if hit is not None and hit[0] is own and hit[1] == len(own):
        return hit[2]
    prefixed: list[tuple[str, str, tuple[str, ...]]] = []
    stages: dict[str, tuple[str, list[int]]] = {}
    nested: list[tuple[str, Mapping[str, Any]]] = []
    stems: list[tuple[str, tuple[str, ...]]] = []
    for key in own:
        if type(key) is not str:
            continue
        value = own[key]
        if _is_mapping(value):
            if len(nested) >= MAX_CONFIG_TREE:
                continue
            nested.append((key, value))
            if key.endswith(_NESTED_SUFFIX):
                stems.append((key, tuple(_stem_words(key))))
            continue
        split = _split_prefixed(key)
        if split is not None:
            prefixed.append((key, *split))
        if key.endswith(_PER_STAGE) and key[:-len(_PER_STAGE)] in _PLAIN_KEYS and isinstance(value, list) \
                and 0 < len(value) <= MAX_CONFIG_STAGES and all(positive_int(x) for x in value):
            stages[key[:-len(_PER_STAGE)]] = (key, value)
    facts = _Facts(tuple(prefixed), stages, tuple(nested), tuple(stems))
    if len(_FACTS) >= _FACTS_KEPT:
        _FACTS.pop(next(iter(_FACTS)))
    _FACTS[id(own)] = (own, len(own), facts)
    return facts


# ``<prefix>_<plain key>``, the longest plain key (the shortest prefix) first.
_PREFIXED_KEY = re.compile(r"^(.+?)_(" + "|".join(re.escape(k) for k in _PLAIN_KEYS) + r")$")


@functools.lru_cache(maxsize=4096)
def _split_prefixed(key: str) -> tuple[str, tuple[str, ...]] | None:
    """A prefixed key's plain key and its prefix's words; None for any other key (one the rules read by
    its own name among them)."""
    if key in _OWN_NAME_KEYS:
        return None
    m = _PREFIXED_KEY.match(key)
    if m is None:
        return None
    words = tuple(_WORDS.findall(m.group(1).lower()))
    return (m.group(2), words) if words else None


# Per-stage lists (SAM 2's Hiera: ``num_attention_heads_per_stage``, ``embed_dim_per_stage``): each
# stage's values, the stage told by its width (the blocks' attention width), not by the block's number
# (Hiera numbers its blocks through the stages).
_PER_STAGE = "_per_stage"


def _stage_lists(c: Mapping[str, Any]) -> dict[str, tuple[str, list[int]]]:
    """The config's ``<key>_per_stage`` lists of positive ints, by the plain key (of ``_KEY_GROUPS``)."""
    return _facts(c).stages


def _overlaid(c: Mapping[str, Any], values: Mapping[str, tuple[str, Any]]) -> tuple[Mapping[str, Any], dict[str, str]]:
    """``c`` with each group of keys that ``values`` gives (plain key -> (key as written, value)) read
    as that value, whatever spelling of the group the rules try first; and the key each read stands for."""
    over: dict[str, Any] = {}
    read_as: dict[str, str] = {}
    for group in _KEY_GROUPS:
        given = next((values[k] for k in group if k in values), None)
        if given is None:
            continue
        if group is _WIDTH_GROUP:  # one more width: the plain ones stay (widths add up)
            continue
        for k in group:
            over[k] = given[1]
            read_as[k] = given[0]
    if not over:
        return c, read_as
    return (c.over(over) if isinstance(c, ConfigView) else {**c, **over}), read_as


def _renamed(found: Found | None, read_as: Mapping[str, str]) -> Found | None:
    """A value read under a plain key that stands for another (a prefixed key, a stage's entry), said as that."""
    if found is None:
        return None
    key = re.split(r"[=\[ ]", found.said, maxsplit=1)[0]
    return Found(found.value, read_as[key] + found.said[len(key):]) if key in read_as else found


def offers_from_config(cfg: Mapping[str, Any], block_name: str, *, label: str = "config",
                       source: EvidenceSource = EvidenceSource.CONFIG) -> HeadOffers:
    """What the config says about the block named ``block_name``: the config its path places it in
    (``sub_config``), with the other readings the widths may choose instead (``HeadOffers.alternatives``):
    each stage of per-stage lists; and for a block no path names whose config gives a count, every
    other config of the tree (the assembler takes one whose widths describe the block where the first
    does not)."""
    comps = path_words(block_name)
    prefix, c, named = _placed(cfg, block_name)
    first = _offer(prefix, c, block_name, comps, label, source)
    alternatives = [*_stage_offers(prefix, c, block_name, comps, label, source)]
    if _partly_named(cfg, comps):  # a prefix the path names in part: a reading the widths must confirm
        alternatives.extend(_offer(other, view, block_name, comps, label, source, in_part=True)
                            for other, view in _tree(cfg)
                            if _HEADS_SET & _prefixed(view, comps, in_part=True).keys())
    # Only a count the widths may refuse is replaced by another config's: where the config read says
    # none (a top level without heads: EdgeTAM's perceiver), a config of the same width by chance
    # (its mask decoder's) is no evidence.
    if not named and (first.num_heads or first.num_kv_heads or first.head_dim):
        for other, view in _tree(cfg):
            if other != prefix and _has_heads(view):
                alternatives.append(_offer(other, view, block_name, comps, label, source))
                alternatives.extend(_stage_offers(other, view, block_name, comps, label, source))
    return dataclasses.replace(first, alternatives=tuple(alternatives)) if alternatives else first


def _partly_named(cfg: Mapping[str, Any], comps: Sequence[frozenset[str]]) -> bool:
    """Whether a config of the tree has a head count under a prefix the path names in part."""
    nodes = [cfg, *(sub for _, sub in _facts(cfg).nested)]
    nodes += [v for sub in nodes[1:] for _, v in _facts(sub).nested][:MAX_CONFIG_TREE]
    return any(_HEADS_SET & _prefixed(node, comps, in_part=True).keys() for node in nodes if _facts(node).prefixed)


def _tree(cfg: Mapping[str, Any]) -> list[tuple[str, ConfigView]]:
    """The config and the configs nested in it (two levels: a tower's ``backbone_config``), with their
    prefixes and their architectures' defaults."""
    out = [("", with_defaults(cfg))]
    for key, sub in _facts(cfg).nested:
        out.append((f"{key}.", with_defaults(sub, cfg, key)))
        out.extend((f"{key}.{k}.", with_defaults(v, sub, k)) for k, v in _facts(sub).nested)
        if len(out) > MAX_CONFIG_TREE:
            return out[:MAX_CONFIG_TREE]
    return out


def _stage_offers(prefix: str, c: Mapping[str, Any], block_name: str, comps: Sequence[frozenset[str]], label: str,
                  source: EvidenceSource) -> list[HeadOffers]:
    """One offer per stage of the config's per-stage lists (none without a per-stage head count)."""
    lists = _stage_lists(c)
    heads = next((lists[k][1] for k in _HEADS_GROUP if k in lists), None)
    if heads is None:
        return []
    out = []
    for stage in range(len(heads)):
        values = {k: (f"{key}[{stage}]", v[stage]) for k, (key, v) in lists.items() if len(v) == len(heads)}
        view, read_as = _overlaid(c, values)
        width = next((values[k][1] for k in _WIDTH_GROUP if k in values), None)
        offer = _offer(prefix, view, block_name, (), label, source, read_as)
        out.append(dataclasses.replace(offer, widths=(width,) if width is not None else ()))
    return out


def _offer(prefix: str, c: Mapping[str, Any], block_name: str, comps: Sequence[frozenset[str]], label: str,
           source: EvidenceSource, read_as: Mapping[str, str] | None = None, *, in_part: bool = False) -> HeadOffers:
    """What one config (``prefix``: where it sits) says about the block: its keys, the prefixed keys
    the path names read as the plain ones (``in_part``: those it names in part); a per-stage head
    count leaves the plain keys' count out (each stage is an alternative)."""
    prefixed = _prefixed(c, comps, in_part=in_part)
    c, own = _overlaid(c, {k: (v[0], v[1]) for k, v in prefixed.items()})
    stages = _stage_lists(c)
    if read_as is None and stages and not own.keys() & _HEADS_SET and any(k in _HEADS_SET for k in stages):
        c, _ = _overlaid(c, {HEADS_KEYS[0]: ("", None)})  # the stages' counts, not the model's
    read_as = {**own, **(read_as or {})}
    layer = layer_number(block_name)
    heads = _renamed(_heads(c, block_name, layer), read_as)
    h = heads.value if heads is not None else None
    kv = _renamed(next((found for _, rule in KV_RULES if (found := rule(c, h, layer)) is not None), None), read_as)
    hd = _renamed(_head_dim(c, layer), read_as)
    vhd = _renamed(_first(c, V_HEAD_DIM_KEYS, layer), read_as)
    scale = next((said for _, rule in SCALE_RULES if (said := rule(c)) is not None), None)
    runs = next((found for _, rule in APPLICATION_RULES if (found := rule(c, block_name)) is not None), None)
    latent = _latent_widths(c, layer)
    parts = [f"{prefix}{f.said}" for f in (heads, kv, hd, vhd, runs, latent.get("kv_rank"), latent.get("q_rank"))
             if f is not None]
    if scale is not None:
        parts.append(f"{prefix}{scale[1]}")
    widths = _widths(c, heads, layer) + tuple(
        n for k, (_, v, _, _) in prefixed.items() if k in _WIDTH_GROUP and (n := positive_int(v)) is not None)
    return HeadOffers(
        num_heads=h,
        num_kv_heads=_value_of(kv),
        head_dim=_value_of(hd),
        v_head_dim=_value_of(vhd),
        source=source,
        detail=f"{label} " + ", ".join(parts) if parts else label,
        scale=scale[0] if scale is not None else None,
        applications=_value_of(runs),
        kv_rank=_value_of(latent.get("kv_rank")),
        rope_dim=_value_of(latent.get("rope_dim")),
        q_rank=_value_of(latent.get("q_rank")),
        widths=tuple(dict.fromkeys(widths)),
    )


# The words of a head-count key that say "heads"; the others name what it counts the heads of.
_HEADS_WORDS = frozenset({"num", "n", "attention", "heads", "head"})
# Words of any attention's module path: naming one of a prefix's words says nothing of the prefix.
_EVERY_ATTENTIONS = _HEADS_WORDS | {"attn", "self", "cross", "layer", "layers", "block", "blocks", "model"}
_WIDTH_SUFFIXES = ("hidden_size", "hidden_dim", "d_model", "embed_dim")


def _widths(c: Mapping[str, Any], heads: Found | None, layer: int | None) -> tuple[int, ...]:
    """The model widths the head count read describes (``HeadOffers.widths``): the hidden size, a
    width the config runs its attention at (INNER_WIDTH_KEYS), and for a head key that names a
    stack (``encoder_attention_heads``) that stack's width keys (``encoder_hidden_dim``)."""
    out = [f.value for f in (_first(c, HIDDEN_KEYS, layer), _first(c, INNER_WIDTH_KEYS, layer)) if f is not None]
    named = set(_WORDS.findall(re.split(r"[=\[ ]", heads.said, maxsplit=1)[0].lower())) - _HEADS_WORDS \
        if heads is not None else set()
    if named:
        out.extend(v for k in c if isinstance(k, str) and k.endswith(_WIDTH_SUFFIXES)
                   and named <= set(_WORDS.findall(k.lower())) and (v := positive_int(c[k])) is not None)
    return tuple(dict.fromkeys(out))


def _value_of(found: Found | None) -> int | None:
    return found.value if found is not None else None


POSITIONS_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def max_positions(cfg: Mapping[str, Any] | None, label: str = "config") -> tuple[int | None, str]:
    """The most token positions the config builds the model for (``max_position_embeddings`` and
    its spellings; a composite config's language model when the top level has none) and the text
    that says where; (None, "") when the config gives none (relative positions, as T5)."""
    if cfg is None:
        return None, ""
    nested = [(f"{k}.", sub) for s in SUB_CONFIGS if not s.tower for k in s.keys
              if isinstance(sub := cfg.get(k), Mapping)]
    for prefix, c in (("", cfg), *nested):
        for key in POSITIONS_KEYS:
            n = positive_int(c.get(key))
            if n is not None:
                return n, f"{label} {prefix}{key} = {n:,}"
    return None, ""


def producer_from_config(cfg: Mapping[str, Any]) -> str:
    arch = cfg.get("architectures")
    name = arch[0] if isinstance(arch, list) and arch and isinstance(arch[0], str) else cfg.get("model_type", "")
    version = cfg.get("transformers_version")
    out = str(name or "")
    if isinstance(version, str):
        out = f"{out} (transformers {version})".strip()
    return out


# ----------------------------------------------------------------------------- mixture of experts
# The keys configs write the expert counts under (Mixtral, Qwen-MoE, DeepSeek, gpt-oss, OLMoE,
# Jamba, Phi-MoE, Llama 4, DBRX's ffn_config, ...), first found wins.
_NUM_EXPERTS_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts")
_EXPERTS_PER_TOKEN_KEYS = ("num_experts_per_tok", "num_experts_per_token", "experts_per_token", "moe_top_k",
                           "moe_topk", "num_selected_experts")
_SHARED_EXPERTS_KEYS = ("n_shared_experts", "num_shared_experts")
# The widths one expert's hidden layer may have (what splits experts fused along one axis): the
# MoE-specific keys first, then the model's feed-forward width (Mixtral's intermediate_size).
_EXPERT_WIDTH_KEYS = ("moe_intermediate_size", "expert_intermediate_size", "ffn_hidden_size", "intermediate_size",
                      "ffn_dim")


def _moe_configs(cfg: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The config and its nested configs (text_config, ffn_config, ...), with their key prefixes."""
    out: list[tuple[str, Mapping[str, Any]]] = [("", cfg)]
    out += [(f"{k}.", v) for k, v in cfg.items() if isinstance(v, Mapping) and k.endswith("_config")]
    return out


def _moe_value(cfg: Mapping[str, Any], keys: Sequence[str], label: str) -> tuple[int, str] | None:
    for prefix, sub in _moe_configs(cfg):
        for key in keys:
            value = sub.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value, f"{label} {prefix}{key} = {value:,}"
    return None


def expert_claims(cfg: Mapping[str, Any] | None, label: str = "config.json") -> ExpertClaims | None:
    """What a config says about routed experts (how many, how many a token uses) and shared ones;
    None for a config that names no experts."""
    if cfg is None:
        return None
    experts = _moe_value(cfg, _NUM_EXPERTS_KEYS, label)
    per_token = _moe_value(cfg, _EXPERTS_PER_TOKEN_KEYS, label)
    shared = _moe_value(cfg, _SHARED_EXPERTS_KEYS, label)
    if shared is None:  # Qwen2-MoE: one shared expert of its own width
        width = _moe_value(cfg, ("shared_expert_intermediate_size",), label)
        shared = (1, f"{width[1]} (one shared expert)") if width is not None and width[0] > 0 else None
    if experts is None and per_token is None:
        return None
    return ExpertClaims(EvidenceSource.CONFIG, experts, per_token, shared, _expert_widths(cfg, label))


def _expert_widths(cfg: Mapping[str, Any], label: str) -> tuple[tuple[int, str], ...]:
    """Every width the config (and its nested configs) states for a feed-forward layer, each once."""
    out: dict[int, str] = {}
    for prefix, sub in _moe_configs(cfg):
        for key in _EXPERT_WIDTH_KEYS:
            value = sub.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0 and value not in out:
                out[value] = f"{label} {prefix}{key} = {value:,}"
    return tuple(out.items())
