"""What mixes tokens in each layer of a Hugging Face decoder, as transformers reads its config.

A hybrid model interleaves softmax attention with layers that cache no K/V per token: linear
attention (Gated DeltaNet, MiniMax's lightning attention, Kimi's KDA), state-space mixers (Mamba,
Mamba-2) and short convolutions (LFM2). transformers 5 gives every such config a ``layer_types``
list in its own vocabulary (``configuration_utils.ALLOWED_ATTN_LAYER_TYPES``: ``full_attention``,
``sliding_attention``, ``chunked_attention``, ``indexed_attention``, ``linear_attention``, ``conv``,
``hybrid``, ``moe``, ``mlp``, ...); a config.json as published often keeps the older keys the config
class derives it from. ``layer_plan`` reads, in order:

1. ``layer_types``, ``layers_block_type`` (a list), NemotronH's ``hybrid_override_pattern``
   (``M`` Mamba, ``*`` attention, ``-`` MLP, ``E`` MoE), with the legacy names transformers remaps
   (``mamba`` -> linear_attention, ``attention`` -> full_attention, ``deepseek_sparse_attention``
   -> indexed_attention);
2. else the architecture's own derivation (``DERIVATIONS``, by model_type, each what the config
   class's ``__post_init__`` or property does, defaults included): Jamba's and Zamba's
   ``attn_layer_period``/``attn_layer_offset``, Bamba's ``attn_layer_indices``, LFM2's
   ``full_attn_idxs``, Kimi-Linear's ``linear_attn_config`` (1-indexed), Qwen3-Next's
   ``full_attention_interval``, Llama 4's ``no_rope_layers`` with ``attention_chunk_size``, ...

A linear_attention layer of a state-space family (``STATE_SPACE_TYPES``) is a state-space mixer;
``num_kv_shared_layers`` (Gemma-3n) makes the last layers reuse an earlier layer's K/V (they cache
nothing). ``MIXER_STATES`` gives, per family, the fixed state one such layer keeps per sequence
(the recurrent state and the convolution's inputs, as transformers' cache layers hold them).
``tests/test_layer_types.py`` checks every derivation and state against the installed
transformers' classes. Pure: a mapping in, a ``LayerPlan`` out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from mhainspect.ir.limits import config_int
from mhainspect.results import MixerKind


class LayerType(str, Enum):
    """One layer's token mixer, in transformers' layer-type vocabulary."""

    FULL = "full_attention"
    SLIDING = "sliding_attention"
    CHUNKED = "chunked_attention"
    INDEXED = "indexed_attention"  # softmax attention over the keys an indexer selects (DeepSeek-V3.2)
    LINEAR = "linear_attention"  # a recurrent state: linear attention or a state-space mixer
    CONV = "conv"  # a short causal convolution
    HYBRID = "hybrid"  # attention and a state-space mixer in one layer (Falcon-H1, Zamba2)
    HYBRID_SLIDING = "hybrid_sliding"
    NONE = "none"  # no token mixer: an MLP or MoE layer (NemotronH's '-' and 'E')
    UNKNOWN = "unknown"  # a name no rule here knows

    @property
    def attends(self) -> bool:
        """Whether the layer has softmax attention (caches K/V per token)."""
        return self in (LayerType.FULL, LayerType.SLIDING, LayerType.CHUNKED, LayerType.INDEXED,
                        LayerType.HYBRID, LayerType.HYBRID_SLIDING)

    @property
    def has_state(self) -> bool:
        """Whether the layer keeps a fixed state per sequence (a recurrent or convolution state)."""
        return self in (LayerType.LINEAR, LayerType.CONV, LayerType.HYBRID, LayerType.HYBRID_SLIDING)


# transformers' names (and the legacy ones its remap_legacy_layer_types takes) -> LayerType.
_NAMES: Mapping[str, LayerType] = {
    "full_attention": LayerType.FULL, "attention": LayerType.FULL, "global": LayerType.FULL,
    "sliding_attention": LayerType.SLIDING, "chunked_attention": LayerType.CHUNKED,
    "indexed_attention": LayerType.INDEXED, "deepseek_sparse_attention": LayerType.INDEXED,
    "linear_attention": LayerType.LINEAR, "mamba": LayerType.LINEAR, "mamba2": LayerType.LINEAR,
    "conv": LayerType.CONV, "hybrid": LayerType.HYBRID, "hybrid_sliding": LayerType.HYBRID_SLIDING,
    "moe": LayerType.NONE, "mlp": LayerType.NONE,
}
# NemotronH's hybrid_override_pattern characters (NemotronHConfig._pattern_to_list).
_PATTERN: Mapping[str, LayerType] = {"M": LayerType.LINEAR, "*": LayerType.FULL, "-": LayerType.NONE,
                                     "E": LayerType.NONE}
# Architectures whose linear_attention layers are state-space (Mamba) mixers.
STATE_SPACE_TYPES = frozenset(("jamba", "bamba", "zamba", "zamba2", "falcon_h1", "nemotron_h", "granitemoehybrid",
                               "mamba", "mamba2", "falcon_mamba", "recurrent_gemma"))


@dataclass(frozen=True)
class LayerPlan:
    """Every layer's mixer (``types``, by layer number), what says so, and the per-layer facts the
    cache needs: the first layer that reuses an earlier layer's K/V, the chunk of chunked layers,
    the indexer's cached key width, the non-attention layers' mixer kind and fixed state."""

    types: tuple[LayerType, ...]
    said: str
    names: tuple[str, ...]  # each layer's type as the config writes it (an unknown one is shown as is)
    mixer: MixerKind  # what the state-keeping layers are
    # Per layer, the layer whose K/V cache it reads (its own number when it caches its own); empty
    # when every layer caches its own.
    kv_sources: tuple[int, ...] = ()
    reuse_said: str = ""
    chunk: int | None = None
    chunk_said: str = ""
    indexer_width: int = 0
    indexer_said: str = ""
    state: StateWidths | None = None  # what one state-keeping layer holds per sequence

    def kind(self, layer: int | None) -> LayerType | None:
        """Layer ``layer``'s type (None: no layer number, or beyond the list)."""
        return self.types[layer] if layer is not None and 0 <= layer < len(self.types) else None

    def reuses(self, layer: int | None) -> bool:
        return self.kv_source(layer) is not None

    def kv_source(self, layer: int | None) -> int | None:
        """The earlier layer whose K/V cache layer ``layer`` reads (None: it caches its own)."""
        if layer is None or not 0 <= layer < len(self.kv_sources):
            return None
        src = self.kv_sources[layer]
        return src if src != layer else None


# ----------------------------------------------------------------------------- derivations
# model_type -> function(config, layers) -> (each layer's transformers name, what says so) | None.

Derivation = Callable[[Mapping[str, Any], int], "tuple[list[str], str] | None"]


def _int(cfg: Mapping[str, Any], key: str, default: int) -> tuple[int, str]:
    """``cfg[key]`` (a non-negative int) or the class default, with the text that says which."""
    v = cfg.get(key)
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v, f"{key}={v}"
    return default, f"{key}={default} (default)"


def _period(attention: str) -> Derivation:
    """Jamba (attention) and Zamba (hybrid): layer i attends when i % attn_layer_period == attn_layer_offset."""
    def derive(cfg: Mapping[str, Any], n: int) -> tuple[list[str], str] | None:
        defaults = (8, 4) if attention == "full_attention" else (6, 4)
        period, p_said = _int(cfg, "attn_layer_period", defaults[0])
        offset, o_said = _int(cfg, "attn_layer_offset", defaults[1])
        if period == 0:
            return None
        return [attention if i % period == offset else "linear_attention" for i in range(n)], f"{p_said}, {o_said}"
    return derive


def _indices(key: str, listed: str, other: str, *, every_if_absent: bool = False, base: int = 0) -> Derivation:
    """The layers a list names are ``listed``, the others ``other`` (Bamba's attn_layer_indices,
    LFM2's full_attn_idxs: every layer when absent)."""
    def derive(cfg: Mapping[str, Any], n: int) -> tuple[list[str], str] | None:
        found = cfg.get(key)
        if not isinstance(found, list):
            if every_if_absent:
                return [listed] * n, f"no {key}: every layer {listed}"
            return [other] * n, f"no {key}: every layer {other}"
        chosen = {i - base for i in found if isinstance(i, int)}
        return [listed if i in chosen else other for i in range(n)], f"{key}={found}"
    return derive


def _interval(key: str, default: int, *, last: bool = True) -> Derivation:
    """Every ``interval``-th layer full attention, the others linear (Qwen3-Next: the last of each
    period; MiniMax: (i + 1) % 2 -> the first)."""
    def derive(cfg: Mapping[str, Any], n: int) -> tuple[list[str], str] | None:
        every, said = _int(cfg, key, default) if key else (default, f"every {default}th layer")
        if every == 0:
            return None
        if last:
            return ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)], said
        return ["full_attention" if (i + 1) % every else "linear_attention" for i in range(n)], said
    return derive


def _kimi(cfg: Mapping[str, Any], n: int) -> tuple[list[str], str] | None:
    """KimiLinearConfig: linear_attn_config's full_attn_layers / kda_layers (1-indexed), else every
    4th layer from 4 full attention."""
    linear = cfg.get("linear_attn_config")
    if isinstance(linear, Mapping) and isinstance(linear.get("full_attn_layers"), list) \
            and isinstance(linear.get("kda_layers"), list):
        out = ["unknown"] * n
        for key, name in (("full_attn_layers", "full_attention"), ("kda_layers", "linear_attention")):
            for i in linear[key]:
                if isinstance(i, int) and 1 <= i <= n:
                    out[i - 1] = name
        return out, "linear_attn_config.full_attn_layers / kda_layers (1-indexed)"
    return ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(n)], \
        "no linear_attn_config layers: every 4th layer from 4 full attention (default)"


def _llama4(cfg: Mapping[str, Any], n: int) -> tuple[list[str], str] | None:
    """Llama4TextConfig: a RoPE layer (no_rope_layers[i] = 1) is chunked when attention_chunk_size is
    set; no_rope_layers defaults to every no_rope_layer_interval-th layer NoPE."""
    chunk = cfg.get("attention_chunk_size", 8192)
    given = cfg.get("no_rope_layers")
    if isinstance(given, list) and given:
        rope, said = list(given), "no_rope_layers"
    else:
        every, said = _int(cfg, "no_rope_layer_interval", 4)
        if every == 0:
            return None
        rope = [int((i + 1) % every != 0) for i in range(n)]
    return ["chunked_attention" if r and chunk is not None else "full_attention" for r in rope], \
        f"{said}, attention_chunk_size={chunk}"


def _every(name: str) -> Derivation:
    def derive(cfg: Mapping[str, Any], n: int) -> tuple[list[str], str] | None:
        return [name] * n, f"every layer {name} (the architecture has no other)"
    return derive


_ZAMBA2_DEFAULT = (["linear_attention"] + (["linear_attention"] * 5 + ["hybrid"]) * 7 + ["linear_attention"] * 4
                   + ["hybrid"] + ["linear_attention"] * 3 + ["hybrid"] + ["linear_attention"] * 2)


def _recurrent_gemma(cfg: Mapping[str, Any], n: int) -> tuple[list[str], str] | None:
    """RecurrentGemmaConfig.layers_block_type: block_types repeated over the layers, a recurrent
    block (RG-LRU) linear_attention, an attention block local (sliding_attention)."""
    given = cfg.get("block_types")
    blocks = list(given) if isinstance(given, list) and given and all(isinstance(b, str) for b in given) \
        else ["recurrent", "recurrent", "attention"]
    said = f"block_types={blocks}" if given is not None else f"block_types={blocks} (default)"
    return [("linear_attention" if b == "recurrent" else "sliding_attention") for b in (blocks * n)[:n]], said


def _xlstm(cfg: Mapping[str, Any], n: int) -> tuple[list[str], str] | None:
    """xLSTM: every block an mLSTM layer (a recurrent matrix memory); the model builds num_blocks of them."""
    blocks = config_int(cfg.get("num_blocks")) or n
    return ["linear_attention"] * blocks, f"every one of num_blocks={blocks} blocks an mLSTM layer (xLSTMModel)"


def _zamba2(cfg: Mapping[str, Any], n: int) -> tuple[list[str], str] | None:
    return list(_ZAMBA2_DEFAULT), "no layers_block_type: Zamba2Config's default 54-layer list"


def _gemma3n(cfg: Mapping[str, Any], n: int) -> tuple[list[str], str] | None:
    return ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(n)], \
        "no layer_types: four sliding layers, then one full (Gemma3nTextConfig)"


DERIVATIONS: Mapping[str, Derivation] = {
    "jamba": _period("full_attention"),
    "zamba": _period("hybrid"),
    "zamba2": _zamba2,
    "bamba": _indices("attn_layer_indices", "full_attention", "linear_attention"),
    "lfm2": _indices("full_attn_idxs", "full_attention", "conv", every_if_absent=True),
    "lfm2_moe": _indices("full_attn_idxs", "full_attention", "conv", every_if_absent=True),
    "granitemoehybrid": _every("linear_attention"),
    "falcon_h1": _every("hybrid"),
    "mamba": _every("linear_attention"),
    "mamba2": _every("linear_attention"),
    "falcon_mamba": _every("linear_attention"),
    "nemotron_h": lambda cfg, n: (["linear_attention", "moe", "full_attention", "mlp"],
                                  "no layers_block_type: NemotronHConfig's default"),
    "qwen3_next": _interval("full_attention_interval", 4),
    "qwen3_5_text": _interval("full_attention_interval", 4),
    "qwen3_5_moe_text": _interval("full_attention_interval", 4),
    "minimax": _interval("", 2, last=False),
    "kimi_linear": _kimi,
    "llama4_text": _llama4,
    "gemma3n_text": _gemma3n,
    "deepseek_v32": _every("indexed_attention"),
    "recurrent_gemma": _recurrent_gemma,
    "xlstm": _xlstm,
    "rwkv": _every("linear_attention"),
}


# ----------------------------------------------------------------------------- fixed state per layer
# model_type family -> function(config) -> the state one layer keeps per sequence (StateWidths).


@dataclass(frozen=True)
class StateWidths:
    """What one state-keeping layer holds per sequence, in elements: the convolution's last inputs
    (in the model's dtype) and the recurrent state (``recurrent_float32``: transformers' kernels
    return it, and its cache keeps it, in float32 whatever the model's dtype: Mamba, Mamba-2, Gated
    DeltaNet, KDA; lightning attention keeps it in the model's dtype)."""

    conv: int
    recurrent: int
    recurrent_float32: bool
    said: str


State = Callable[[Mapping[str, Any]], "StateWidths | None"]


def selective_state(inner: int, groups: int, d_state: int, conv_columns: int) -> tuple[int, int]:
    """(convolution, recurrent) elements of one layer of a selective recurrent mixer, the one formula
    for every such mixer and reader: the causal convolution keeps its last ``conv_columns`` inputs of
    ``inner + 2·groups·d_state`` channels (x, and B and C per group), the recurrent state is
    ``inner × d_state``. Mamba is ``groups`` 0; Gated DeltaNet is inner = value heads × value head
    dim, groups = key heads, d_state = key head dim (its q and k are Mamba-2's B and C); a short
    convolution (LFM2) is ``d_state`` 0. transformers' caches keep ``kernel`` columns, llama.cpp's
    ``kernel - 1`` (the first is shifted out before it is read)."""
    return (inner + 2 * groups * d_state) * conv_columns, inner * d_state


def _hidden(cfg: Mapping[str, Any]) -> int | None:
    return config_int(cfg.get("hidden_size"))


def _mamba1(expand: str, state: str, conv: str, defaults: tuple[int, int, int]) -> State:
    """Mamba: conv state [intermediate, d_conv] + SSM state [intermediate, d_state]."""
    def size(cfg: Mapping[str, Any]) -> StateWidths | None:
        hidden = _hidden(cfg)
        e, e_said = _int(cfg, expand, defaults[0])
        n, n_said = _int(cfg, state, defaults[1])
        k, k_said = _int(cfg, conv, defaults[2])
        inner = config_int(cfg.get("intermediate_size")) if expand == "expand" else None
        if inner is None:
            if hidden is None:
                return None
            inner = e * hidden
        conv_elements, recurrent = selective_state(inner, 0, n, k)
        return StateWidths(conv_elements, recurrent, True, f"Mamba: conv intermediate {inner} ({e_said} × hidden_size "
                                                       f"{hidden}) × {k_said} + state {inner} × {n_said}")
    return size


def _mamba2(inner: Callable[[Mapping[str, Any]], tuple[int, str] | None], groups: str, state: str, conv: str,
            defaults: tuple[int, int, int]) -> State:
    """Mamba-2: conv state [intermediate + 2·groups·d_state, d_conv] + SSM state [heads, head_dim, d_state]
    (= intermediate × d_state)."""
    def size(cfg: Mapping[str, Any]) -> StateWidths | None:
        found = inner(cfg)
        if found is None:
            return None
        width, w_said = found
        g, g_said = _int(cfg, groups, defaults[0])
        n, n_said = _int(cfg, state, defaults[1])
        k, k_said = _int(cfg, conv, defaults[2])
        conv_elements, recurrent = selective_state(width, g, n, k)
        return StateWidths(conv_elements, recurrent, True, f"Mamba-2: conv ({w_said} + 2 × {g_said} × {n_said}) × "
                                                          f"{k_said} + state {width} × {n_said}")
    return size


def _expand_inner(expand: str, default: int, override: str = "") -> Callable[[Mapping[str, Any]], tuple[int, str] | None]:
    def inner(cfg: Mapping[str, Any]) -> tuple[int, str] | None:
        given = config_int(cfg.get(override)) if override else None
        if given is not None:
            return given, f"{override}={given}"
        hidden = _hidden(cfg)
        e, said = _int(cfg, expand, default)
        return (e * hidden, f"intermediate {e * hidden} ({said} × hidden_size {hidden})") if hidden else None
    return inner


def _heads_inner(cfg: Mapping[str, Any]) -> tuple[int, str] | None:
    h, h_said = _int(cfg, "mamba_num_heads", 128)
    d, d_said = _int(cfg, "mamba_head_dim", 64)
    return h * d, f"intermediate {h * d} ({h_said} × {d_said})"


def _gated_deltanet(cfg: Mapping[str, Any]) -> StateWidths | None:
    """Gated DeltaNet: conv state [2·key_dim + value_dim, kernel] + state [v_heads, k_head_dim, v_head_dim]."""
    kh, kh_said = _int(cfg, "linear_num_key_heads", 16)
    vh, vh_said = _int(cfg, "linear_num_value_heads", 32)
    kd, kd_said = _int(cfg, "linear_key_head_dim", 128)
    vd, vd_said = _int(cfg, "linear_value_head_dim", 128)
    k, k_said = _int(cfg, "linear_conv_kernel_dim", 4)
    conv_elements, recurrent = selective_state(vh * vd, kh, kd, k)
    return StateWidths(conv_elements, recurrent, True,
                       f"Gated DeltaNet: conv (2 × {kh_said} × {kd_said} + {vh_said} × {vd_said}) × {k_said} + state "
                       f"{vh} × {kd} × {vd}")


def _lightning(cfg: Mapping[str, Any]) -> StateWidths | None:
    """MiniMax lightning attention: state [heads, head_dim, head_dim], no convolution."""
    heads = config_int(cfg.get("num_attention_heads"))
    hidden = _hidden(cfg)
    dim = config_int(cfg.get("head_dim")) or (hidden // heads if heads and hidden else None)
    if heads is None or dim is None:
        return None
    return StateWidths(0, heads * dim * dim, False,
                       f"lightning attention: state num_attention_heads {heads} × head_dim {dim} × {dim}")


def _kda(cfg: Mapping[str, Any]) -> StateWidths | None:
    """Kimi Delta Attention: q, k and v convolution states [heads·head_dim, kernel] + state [heads, head_dim, head_dim]."""
    linear = cfg.get("linear_attn_config")
    linear = linear if isinstance(linear, Mapping) else {}
    h, h_said = _int(linear, "num_heads", 32)
    d, d_said = _int(linear, "head_dim", 128)
    k, k_said = _int(linear, "short_conv_kernel_size", 4)
    return StateWidths(3 * h * d * k, h * d * d, True,
                       f"KDA: conv 3 × linear_attn_config.{h_said} × {d_said} × {k_said} + state {h} × {d} × {d}")


def _short_conv(cfg: Mapping[str, Any]) -> StateWidths | None:
    """LFM2's convolution: state [hidden_size, conv_L_cache]."""
    hidden = _hidden(cfg)
    k, k_said = _int(cfg, "conv_L_cache", 3)
    return StateWidths(selective_state(hidden, 0, 0, k)[0], 0, False, f"convolution: hidden_size {hidden} × {k_said}") if hidden else None


def _rg_lru(cfg: Mapping[str, Any]) -> StateWidths | None:
    """RecurrentGemma's recurrent block (Griffin): conv1d state [lru_width, conv1d_width - 1] (its
    _setup_cache) + RG-LRU state [lru_width], float32 ("always computed in full precision")."""
    width = config_int(cfg.get("lru_width")) or _hidden(cfg)
    k, k_said = _int(cfg, "conv1d_width", 4)
    if width is None:
        return None
    return StateWidths(width * max(k - 1, 0), width, True,
                       f"RG-LRU: conv lru_width {width} × ({k_said} - 1) + state lru_width {width}")


def _round_up(x: float, multiple: int) -> int:
    return int(-(-x // multiple) * multiple)


def _mlstm(cfg: Mapping[str, Any]) -> StateWidths | None:
    """xLSTM's mLSTM (xLSTMCache): matrix memory C [heads, qk_head_dim, v_head_dim], normaliser n
    [heads, qk_head_dim] and stabiliser m [heads, 1], in the model's dtype; qk_dim and v_dim are
    hidden_size × qk_dim_factor / v_dim_factor rounded up to a multiple of 64."""
    hidden = _hidden(cfg)
    heads, h_said = _int(cfg, "num_heads", 8)
    qk_f, v_f = cfg.get("qk_dim_factor", 0.5), cfg.get("v_dim_factor", 1.0)
    if hidden is None or not heads or not all(isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0
                                              for f in (qk_f, v_f)):
        return None
    qk, v = _round_up(hidden * qk_f, 64) // heads, _round_up(hidden * v_f, 64) // heads
    return StateWidths(0, heads * qk * v + heads * qk + heads, False,
                       f"mLSTM: C {h_said} × qk_head_dim {qk} × v_head_dim {v} + n {heads} × {qk} + m {heads} "
                       f"(hidden_size {hidden} × qk_dim_factor {qk_f} / v_dim_factor {v_f}, rounded up to 64, / heads)")


def _rwkv4(cfg: Mapping[str, Any]) -> StateWidths | None:
    """RWKV (v4, RwkvModel): five [hidden_size] vectors per layer: the attention's and the feed-forward's
    last inputs (token shift, the model's dtype) and the WKV numerator, denominator and running
    maximum (float32)."""
    hidden = _hidden(cfg)
    if hidden is None:
        return None
    return StateWidths(2 * hidden, 3 * hidden, True, f"RWKV: token shift 2 × hidden_size {hidden} + WKV state "
                                                     f"(numerator, denominator, maximum) 3 × {hidden}")


MIXER_STATES: Mapping[str, State] = {
    "jamba": _mamba1("mamba_expand", "mamba_d_state", "mamba_d_conv", (2, 16, 4)),
    "mamba": _mamba1("expand", "state_size", "conv_kernel", (2, 16, 4)),
    "falcon_mamba": _mamba1("expand", "state_size", "conv_kernel", (2, 16, 4)),
    "bamba": _mamba2(_expand_inner("mamba_expand", 2), "mamba_n_groups", "mamba_d_state", "mamba_d_conv", (1, 256, 4)),
    "granitemoehybrid": _mamba2(_expand_inner("mamba_expand", 2), "mamba_n_groups", "mamba_d_state", "mamba_d_conv",
                                (1, 256, 4)),
    "falcon_h1": _mamba2(_expand_inner("mamba_expand", 2, "mamba_d_ssm"), "mamba_n_groups", "mamba_d_state",
                         "mamba_d_conv", (1, 256, 4)),
    "zamba2": _mamba2(_expand_inner("mamba_expand", 2), "mamba_ngroups", "mamba_d_state", "mamba_d_conv", (1, 64, 4)),
    "nemotron_h": _mamba2(_heads_inner, "n_groups", "ssm_state_size", "conv_kernel", (8, 128, 4)),
    "mamba2": _mamba2(_expand_inner("expand", 2), "n_groups", "state_size", "conv_kernel", (8, 128, 4)),
    "qwen3_next": _gated_deltanet,
    "qwen3_5_text": _gated_deltanet,
    "qwen3_5_moe_text": _gated_deltanet,
    "minimax": _lightning,
    "kimi_linear": _kda,
    "lfm2": _short_conv,
    "lfm2_moe": _short_conv,
    "recurrent_gemma": _rg_lru,
    "xlstm": _mlstm,
    "rwkv": _rwkv4,
}


# ----------------------------------------------------------------------------- the plan


def _listed(cfg: Mapping[str, Any]) -> tuple[list[str], str] | None:
    """The layer types a config lists under one of transformers' keys."""
    for key in ("layer_types", "layers_block_type"):
        v = cfg.get(key)
        if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
            return list(v), key
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
        return [names.get(c, c) for c in pattern], f"hybrid_override_pattern '{pattern}'"
    return None


def _type_of(name: str) -> LayerType:
    return _NAMES.get(name, LayerType.UNKNOWN)


def layer_plan(cfg: Mapping[str, Any], model_type: str | None, label: str = "config.json") -> LayerPlan | None:
    """Every layer's mixer from the (language model's) config, or None when the config says nothing
    per layer (a plain decoder: every layer full attention, sliding windows read elsewhere)."""
    layers = config_int(cfg.get("num_hidden_layers"))
    listed = _listed(cfg)
    if listed is None:
        derive = DERIVATIONS.get(model_type or "")
        found = derive(cfg, layers or 0) if derive is not None else None
        if (found is None or not found[0]) and layers and isinstance(cfg.get("kv_source_layers"), list):
            # a plain decoder whose layers share caches: every layer full attention
            found = ["full_attention"] * layers, "(no layer types: every layer full attention)"
        if found is None or not found[0]:
            return None
        names, said = found[0], f"{label}: {model_type} {found[1]}"
    else:
        names, said = listed[0], f"{label} {listed[1]}"
    types = tuple(_type_of(n) for n in names)
    mixer = MixerKind.CONVOLUTION if all(t is not LayerType.LINEAR for t in types) and \
        any(t is LayerType.CONV for t in types) else \
        MixerKind.STATE_SPACE if model_type in STATE_SPACE_TYPES else MixerKind.LINEAR_ATTENTION
    sources, reuse_said = kv_sources(cfg, names, label)
    chunk = config_int(cfg.get("attention_chunk_size")) if LayerType.CHUNKED in types else None
    index = config_int(cfg.get("index_head_dim", 128 if model_type == "deepseek_v32" else None)) \
        if LayerType.INDEXED in types else None
    state_rule = MIXER_STATES.get(model_type or "")
    state = state_rule(cfg) if state_rule is not None and any(t.has_state for t in types) else None
    return LayerPlan(
        types, said, tuple(names), mixer,
        sources, reuse_said,
        chunk, f"{label} attention_chunk_size={chunk}" if chunk else "",
        index or 0, f"{label} index_head_dim={index}" if index else "", state,
    )


def kv_sources(cfg: Mapping[str, Any], names: Sequence[str], label: str) -> tuple[tuple[int, ...], str]:
    """Per layer, the layer whose K/V cache it reads, as the config class's ``kv_sharing_modes``
    derives it, and what says so; ((), "") when every layer caches its own.

    - ``num_kv_shared_layers`` N (Gemma-3n, Gemma 4): the last N layers read the cache of the last
      earlier layer of their own type (``layer_types``);
    - ``kv_source_layers`` (cross-layer attention as Kolibri and Mistral Large 4 write it): layer i
      reads layer ``kv_source_layers[i]``'s cache, an earlier layer that caches its own.
    A list that names no earlier caching layer (all layers shared, a later or a reusing source) is
    not placed here: every layer is then taken to cache its own, as if not shared."""
    n = len(names)
    listed = cfg.get("kv_source_layers")
    if isinstance(listed, list) and len(listed) == n and all(isinstance(x, int) and not isinstance(x, bool)
                                                              for x in listed):
        ok = all(0 <= s <= i and listed[s] == s for i, s in enumerate(listed))
        if ok and any(s != i for i, s in enumerate(listed)):
            return tuple(listed), f"{label} kv_source_layers"
        return (), ""
    shared = config_int(cfg.get("num_kv_shared_layers"))
    if not shared or shared >= n:
        return (), ""
    first = n - shared
    out = list(range(n))
    for i in range(first, n):
        src = next((j for j in range(first - 1, -1, -1) if names[j] == names[i]), None)
        if src is None:  # transformers refuses such a config: no layer of the type stores a cache
            return (), ""
        out[i] = src
    return tuple(out), (f"{label} num_kv_shared_layers={shared}: layers {first} and on read the K/V of the last "
                        "earlier layer of their type")


def layers_of(types: Sequence[LayerType], wanted: LayerType) -> tuple[int, ...]:
    return tuple(i for i, t in enumerate(types) if t is wanted)
