"""What an architecture means when its config leaves a value out, and whether it decodes.

A config.json keeps only what differs from its config class's defaults (transformers'
``to_diff_dict``), and a composite model's sub-config often keeps less: a Gemma 3 ``text_config``
without ``num_attention_heads``, ``num_key_value_heads`` or ``head_dim`` is a text stack of 8 / 4 /
256 because ``Gemma3TextConfig`` says so, not because another tower of the file says otherwise. So
an omitted value is read from the config's architecture, by ``model_type``:

- ``ARCHITECTURE_DEFAULTS``: per model_type, the field defaults of transformers' config class
  (read from transformers 5.24's ``configuration_*.py``), only for the keys the head and window
  rules read and only where the class gives a value (a ``None`` default is derived by the class —
  ``num_key_value_heads`` = heads, ``head_dim`` = hidden / heads — and the rules derive it alike);
  ``sliding_window_pattern`` where the class's ``__post_init__`` derives ``layer_types`` from it;
- ``DERIVED_DEFAULTS``: what a class derives from other keys when the file leaves one out (Zamba's
  attention width, twice the hidden size), for the keys the head and width rules read;
- ``SUB_CONFIG_TYPES``: the model_type of a composite's sub-config that names none (LLaVA's
  ``text_config`` is a ``llama``), and what the composite passes when the sub-config is absent
  altogether (transformers' ``SubConfigSpec`` ``init_kwargs``; a sub-config given as a dict takes
  its class's defaults, not these);
- ``ENCODER_MODEL_TYPES``: architectures that never decode token by token — bidirectional
  encoders (BERT and its family, unless the config says ``is_decoder``), vision towers and the
  contrastive models whose towers both run once over their input (CLIP, SigLIP: a CLIP text
  tower's causal mask does not make it a decoder).

tests/test_config_defaults.py checks every entry against the installed transformers' classes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from mhainspect.ir.limits import config_int

ARCHITECTURE_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    # language models (and the text stacks of multimodal ones)
    "llama": {"num_attention_heads": 32},
    "mistral": {"num_attention_heads": 32, "num_key_value_heads": 8, "sliding_window": 4096},
    "qwen2": {"num_attention_heads": 32, "num_key_value_heads": 32, "sliding_window": 4096,
              "use_sliding_window": False, "max_window_layers": 28},
    "qwen3": {"num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "sliding_window": 4096,
              "use_sliding_window": False, "max_window_layers": 28},
    "gemma": {"num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256},
    "gemma2": {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096,
               "query_pre_attn_scalar": 256},
    "gemma3_text": {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096,
                    "query_pre_attn_scalar": 256, "sliding_window_pattern": 6},
    "cohere2": {"num_attention_heads": 64, "sliding_window": 4096, "sliding_window_pattern": 4},
    # one multi-token-prediction layer after num_hidden_layers unless the file says otherwise
    "deepseek_v3": {"num_nextn_predict_layers": 1},
    "glm4_moe": {"num_nextn_predict_layers": 1},
    # multi_query defaults to true: a file without the key is one K/V head (num_kv_heads is then unused)
    "falcon": {"num_attention_heads": 71, "multi_query": True, "new_decoder_architecture": False},
    "gpt_bigcode": {"n_head": 12, "multi_query": True},
    "qwen2_vl_text": {"num_attention_heads": 64, "num_key_value_heads": 8, "sliding_window": 4096,
                      "use_sliding_window": False, "max_window_layers": 80},
    "qwen2_5_vl_text": {"num_attention_heads": 64, "num_key_value_heads": 8, "sliding_window": 4096,
                        "use_sliding_window": False, "max_window_layers": 80},
    "qwen3_vl_text": {"num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128},
    "mllama_text_model": {"num_attention_heads": 32, "num_key_value_heads": 8},
    # text towers of contrastive models
    "clip_text_model": {"num_attention_heads": 8},
    "siglip_text_model": {"num_attention_heads": 12},
    # vision towers
    "clip_vision_model": {"num_attention_heads": 12},
    "siglip_vision_model": {"num_attention_heads": 12},
    "qwen2_vl_vision": {"num_heads": 16},
    "qwen2_5_vl_vision": {"num_heads": 16},
    "qwen3_vl_vision": {"num_heads": 16},
    "idefics3_vision": {"num_attention_heads": 16},
    "smolvlm_vision": {"num_attention_heads": 16},
    "internvl_vision": {"num_attention_heads": 16},
    "mllama_vision_model": {"attention_heads": 16},
    "pixtral": {"num_attention_heads": 16},
    # encoders
    "bert": {"num_attention_heads": 12},
    "roberta": {"num_attention_heads": 12},
    "vit": {"num_attention_heads": 12},
}

_LLAVA_VISION = {"hidden_size": 1024, "num_attention_heads": 16}
SUB_CONFIG_TYPES: Mapping[tuple[str, str], tuple[str, Mapping[str, Any]]] = {
    ("gemma3", "text_config"): ("gemma3_text", {}),
    ("gemma3", "vision_config"): ("siglip_vision_model", {}),
    ("paligemma", "text_config"): ("gemma", {"num_attention_heads": 8, "num_key_value_heads": 1}),
    ("paligemma", "vision_config"): ("siglip_vision_model", {"num_attention_heads": 16}),
    ("llava", "text_config"): ("llama", {}),
    ("llava", "vision_config"): ("clip_vision_model", _LLAVA_VISION),
    ("llava_next", "text_config"): ("llama", {}),
    ("llava_next", "vision_config"): ("clip_vision_model", _LLAVA_VISION),
    ("llava_onevision", "text_config"): ("qwen2", {}),
    ("llava_onevision", "vision_config"): ("siglip_vision_model", {"num_attention_heads": 16}),
    ("qwen2_vl", "text_config"): ("qwen2_vl_text", {}),
    ("qwen2_vl", "vision_config"): ("qwen2_vl_vision", {}),
    ("qwen2_5_vl", "text_config"): ("qwen2_5_vl_text", {}),
    ("qwen2_5_vl", "vision_config"): ("qwen2_5_vl_vision", {}),
    ("qwen3_vl", "text_config"): ("qwen3_vl_text", {}),
    ("qwen3_vl", "vision_config"): ("qwen3_vl_vision", {}),
    ("mllama", "text_config"): ("mllama_text_model", {}),
    ("mllama", "vision_config"): ("mllama_vision_model", {}),
    ("idefics3", "text_config"): ("llama", {}),
    ("idefics3", "vision_config"): ("idefics3_vision", {}),
    ("smolvlm", "text_config"): ("llama", {}),
    ("smolvlm", "vision_config"): ("smolvlm_vision", {}),
    ("internvl", "text_config"): ("qwen2", {}),
    ("internvl", "vision_config"): ("internvl_vision", {}),
    ("clip", "text_config"): ("clip_text_model", {}),
    ("clip", "vision_config"): ("clip_vision_model", {}),
    ("siglip", "text_config"): ("siglip_text_model", {}),
    ("siglip", "vision_config"): ("siglip_vision_model", {}),
}

# Architectures whose models run once over their input (no autoregressive decoding, no KV cache):
# the BERT family (a decoder only with is_decoder, which the config then says), vision encoders
# and towers, contrastive models and their towers, speech encoders.
ENCODER_MODEL_TYPES = frozenset((
    "albert", "bert", "camembert", "convbert", "deberta", "deberta-v2", "distilbert", "electra", "ernie", "esm",
    "flaubert", "funnel", "ibert", "layoutlm", "layoutlmv2", "layoutlmv3", "longformer", "luke", "megatron-bert",
    "mobilebert", "modernbert", "mpnet", "nystromformer", "rembert", "roberta", "roberta-prelayernorm", "roc_bert",
    "roformer", "squeezebert", "xlm-roberta", "xlm-roberta-xl", "xmod", "yoso",
    "beit", "bit", "data2vec-vision", "deit", "dinov2", "dinov2_with_registers", "dpt", "levit", "mobilevit",
    "swin", "swinv2", "vit", "vit_mae", "vit_msn", "yolos",
    "clip", "clip_text_model", "clip_vision_model", "siglip", "siglip_text_model", "siglip_vision_model",
    "siglip2", "siglip2_text_model", "siglip2_vision_model", "align", "altclip", "chinese_clip", "owlvit", "owlv2",
    "xclip", "groupvit", "flava", "metaclip_2",
    "qwen2_vl_vision", "qwen2_5_vl_vision", "qwen3_vl_vision", "idefics3_vision", "smolvlm_vision",
    "internvl_vision", "mllama_vision_model", "pixtral",
    "wav2vec2", "hubert", "wavlm", "data2vec-audio", "unispeech", "unispeech-sat", "sew", "sew-d",
))


def _zamba_attention(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Zamba's and Zamba2's shared attention reads the hidden state concatenated with the input
    embeddings: twice the hidden size wide, heads of 2·hidden / heads (their config classes derive
    ``attention_hidden_size`` and ``attention_head_dim`` so when the file leaves them out)."""
    hidden, heads = config_int(cfg.get("hidden_size")), config_int(cfg.get("num_attention_heads"))
    if hidden is None:
        return {}
    out: dict[str, Any] = {"attention_hidden_size": 2 * hidden}
    if heads is not None and (2 * hidden) % heads == 0:
        out["attention_head_dim"] = 2 * hidden // heads
    return out


# Values a config class derives from others when the file leaves them out (its __init__ /
# __post_init__), for the keys the head and width rules read: per model_type, from the config as
# given plus ARCHITECTURE_DEFAULTS.
DERIVED_DEFAULTS: Mapping[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "zamba": _zamba_attention,
    "zamba2": _zamba_attention,
}


def _defaults(kind: str | None, given: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """The architecture's class defaults, with what its class derives from the config as given."""
    out = dict(base)
    derive = DERIVED_DEFAULTS.get(kind) if kind is not None else None
    if derive is not None:
        out.update(derive({**out, **given}))
    return out


class ConfigView(Mapping[str, Any]):
    """A config (or sub-config) with its architecture's defaults under the keys it omits.
    ``defaulted`` says which keys the defaults supplied and ``model_type`` whose they are."""

    def __init__(self, given: Mapping[str, Any], defaults: Mapping[str, Any], model_type: str | None) -> None:
        self._given = given
        self._defaults = {k: v for k, v in defaults.items() if k not in given}
        self.model_type = model_type

    def __getitem__(self, key: str) -> Any:
        if key in self._given:
            return self._given[key]
        return self._defaults[key]

    def __iter__(self) -> Iterator[str]:
        yield from self._given
        yield from self._defaults

    def __len__(self) -> int:
        return len(self._given) + len(self._defaults)

    @property
    def given(self) -> Mapping[str, Any]:
        """What the config itself says (the defaults aside)."""
        return self._given

    def defaulted(self, key: str) -> bool:
        """Whether ``key`` comes from the architecture's defaults (the config omits it)."""
        return key in self._defaults

    def over(self, values: Mapping[str, Any]) -> ConfigView:
        """This view with ``values`` read first (given by the config, not defaults)."""
        return ConfigView({**self._given, **values}, self._defaults, self.model_type)


def sub_model_type(parent: Mapping[str, Any], key: str, sub: Mapping[str, Any] | None) -> str | None:
    """The model_type of ``parent[key]``: its own, else the one its composite architecture gives it."""
    own = sub.get("model_type") if sub is not None else None
    if isinstance(own, str) and own:
        return own
    kind = parent.get("model_type")
    found = SUB_CONFIG_TYPES.get((kind, key)) if isinstance(kind, str) else None
    return found[0] if found is not None else None


def with_defaults(cfg: Mapping[str, Any], parent: Mapping[str, Any] | None = None, key: str = "") -> ConfigView:
    """``cfg`` with the defaults of its architecture (``model_type``; for a sub-config of ``parent``
    under ``key`` that names none, the one its composite gives it) under the keys it omits."""
    if isinstance(cfg, ConfigView):
        return cfg
    kind = sub_model_type(parent, key, cfg) if parent is not None else cfg.get("model_type")
    kind = kind if isinstance(kind, str) else None
    return ConfigView(cfg, _defaults(kind, cfg, ARCHITECTURE_DEFAULTS.get(kind, {}) if kind is not None else {}), kind)


def absent_sub_config(parent: Mapping[str, Any], key: str) -> ConfigView | None:
    """What a composite builds for a sub-config its file leaves out (its type's defaults and the
    composite's init_kwargs), or None when the architecture has no such sub-config."""
    kind = parent.get("model_type")
    found = SUB_CONFIG_TYPES.get((kind, key)) if isinstance(kind, str) else None
    if found is None:
        return None
    sub_type, init = found
    return ConfigView({}, _defaults(sub_type, {}, {**ARCHITECTURE_DEFAULTS.get(sub_type, {}), **init}), sub_type)


def encoder_model_type(cfg: Mapping[str, Any]) -> str | None:
    """The config's model_type when its architecture never decodes token by token, else None."""
    kind = cfg.model_type if isinstance(cfg, ConfigView) else cfg.get("model_type")
    return kind if isinstance(kind, str) and kind in ENCODER_MODEL_TYPES else None
