"""What mixes tokens in each layer of a GGUF model: softmax attention, a recurrent or convolution
mixer, both, or something not known here; read from the tensors a layer holds and the metadata.

llama.cpp writes every layer of the main stack as ``blk.N.*``. A layer's token mixer shows in its
tensor names, whatever the architecture is called:

- ``ssm_*`` (``ssm_in``, ``ssm_conv1d``, ``ssm_a``, ``ssm_d``, ``ssm_out``, ...): a selective
  recurrent mixer, Mamba and Mamba-2 (state space), or a delta-rule linear attention when it holds
  the rule's write strength (``ssm_beta``, ``ssm_alpha``, or both fused in ``ssm_ba``: Gated
  DeltaNet, KDA);
- ``time_mix_*``: RWKV's WKV linear attention; ``shortconv.*``: LFM2's short convolution.

Such a mixer that has an output projection of its own (``ssm_out``, ``time_mix_output``,
``shortconv.out_proj``) sits beside the layer's attention when the layer also holds an attention
output (Falcon-H1: both in every layer). A mixer without one uses the layer's ``attn_*`` tensors as
its projections (KDA's ``attn_q/k/v/output``), and ``attn_*`` tensors in a layer whose mixer has its
own output but that have none (Qwen3.5's Gated DeltaNet ``attn_qkv`` + ``attn_gate``) are the mixer's
too: neither is softmax attention, neither caches K/V. A layer the metadata says has no attention
(a per-layer ``attention.head_count_kv`` or ``head_count`` of 0) that holds no attention and no
known mixer but tensors other than its feed-forward and norms is of a kind not known here: what it
keeps is not counted, and the KV figure is a stated lower bound.

The state one recurrent layer keeps per sequence is llama.cpp's (``llama_hparams::n_embd_r`` and
``n_embd_s``, both cached in float32 whatever ``-ctk``/``-ctv`` say), computed by the one formula
the checkpoint reader uses (``layer_types.selective_state``) with llama.cpp's convolution columns.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from mhainspect.frontends.checkpoint.layer_types import StateWidths, selective_state
from mhainspect.frontends.gguf.reader import GGUFModel, Namespace
from mhainspect.results import MixerKind
from mhainspect.results.stages import MixerLayers

_MAIN = re.compile(r"^blk\.(?P<layer>\d+)\.(?P<leaf>.+)$")
# The write strength of a delta rule: Qwen3-Next's fused ssm_ba, Qwen3.5's and KDA's ssm_beta / ssm_alpha.
_DELTA_RULE = ("ssm_ba", "ssm_beta", "ssm_alpha")
STATE_DTYPE = "float32"
STATE_DTYPE_SOURCE = "llama.cpp keeps recurrent states in f32 (hard-coded, whatever -ctk/-ctv say)"


@dataclass(frozen=True)
class _Family:
    """One recurrent or convolution mixer's tensors: their name prefix, the name of its own output
    projection, and what one layer of it keeps per sequence (widths, or why they are unknown)."""

    prefix: str
    output: str
    state: Callable[[Namespace], StateWidths | str]


def _missing(keys: Sequence[tuple[str, int | None]]) -> str:
    return f"GGUF {', '.join(name for name, v in keys if v is None)} absent"


def _ssm_state(ns: Namespace) -> StateWidths | str:
    """llama.cpp: conv state (d_conv - 1) × (d_inner + 2·n_group·d_state), recurrent d_state × d_inner."""
    kernel, inner, state, groups = (ns.key(f"ssm.{k}") for k in ("conv_kernel", "inner_size", "state_size",
                                                                  "group_count"))
    k, d, n, g = kernel.at(None), inner.at(None), state.at(None), groups.at(None) or 0
    if k is None or d is None or n is None:
        return _missing([(kernel.name, k), (inner.name, d), (state.name, n)])
    conv, recurrent = selective_state(d, g, n, max(k - 1, 0))
    g_said = "" if groups.value is not None else " (absent: 0)"
    return StateWidths(conv, recurrent, False, f"llama.cpp: conv (d_conv {k} - 1) × (d_inner {d} + 2 × n_group {g}"
                                               f"{g_said} × d_state {n}) + state d_state {n} × d_inner {d}, from GGUF "
                                               f"{ns.prefix}ssm.conv_kernel, inner_size, group_count, state_size")


def _shortconv_state(ns: Namespace) -> StateWidths | str:
    """llama.cpp (LFM2): conv state embedding_length × (l_cache - 1), no recurrent state."""
    cache, embd = ns.key("shortconv.l_cache"), ns.key("embedding_length")
    c, e = cache.at(None), embd.at(None)
    if c is None or e is None:
        return _missing([(cache.name, c), (embd.name, e)])
    return StateWidths(selective_state(e, 0, 0, max(c - 1, 0))[0], 0, False,
                       f"llama.cpp: conv {embd.describe(None)} × (l_cache {c} - 1, GGUF {cache.name})")


def _wkv_state(ns: Namespace) -> StateWidths | str:
    """llama.cpp (RWKV): token-shift state token_shift_count × embedding_length, WKV state
    embedding_length × wkv.head_size."""
    head, embd, shift = ns.key("wkv.head_size"), ns.key("embedding_length"), ns.key("token_shift_count")
    h, e = head.at(None), embd.at(None)
    s = shift.at(None) if shift.value is not None else 2
    if h is None or e is None or s is None:
        return _missing([(head.name, h), (embd.name, e), (shift.name, s)])
    s_said = shift.describe(None) if shift.value is not None else f"{shift.name} absent (llama.cpp: 2)"
    return StateWidths(s * e, e * h, False, f"llama.cpp: token shift {s_said} × {embd.describe(None)} + WKV state "
                                            f"{e} × {head.describe(None)}")


_FAMILIES = (_Family("ssm_", "ssm_out", _ssm_state), _Family("time_mix_", "time_mix_output", _wkv_state),
             _Family("shortconv.", "shortconv.out_proj", _shortconv_state))


def _kind(family: _Family, leaves: Sequence[str]) -> MixerKind:
    if family.prefix == "shortconv.":
        return MixerKind.CONVOLUTION
    if family.prefix == "time_mix_" or any(leaf.split(".")[0] in _DELTA_RULE for leaf in leaves):
        return MixerKind.LINEAR_ATTENTION
    return MixerKind.STATE_SPACE


@dataclass(frozen=True)
class LayerMixers:
    """The main stack's layers that are no softmax attention: those whose ``attn_*`` tensors belong to
    a recurrent mixer (``owned``: no attention block there), and the mixers by kind."""

    owned: frozenset[int]
    mixers: tuple[MixerLayers, ...]


def _stem(leaf: str) -> str:
    """``ssm_conv1d.weight`` -> ``ssm_conv1d``."""
    return leaf[: -len(".weight")] if leaf.endswith(".weight") else leaf[: -len(".bias")] if leaf.endswith(".bias") \
        else leaf


def classify_layers(model: GGUFModel, ns: Namespace, attention: Mapping[int, bool]) -> LayerMixers:
    """Each ``blk.N`` layer's mixer. ``attention`` maps a layer holding ``attn_*`` tensors to whether
    they include an output projection (the front end's grouping of the attention tensors)."""
    leaves: dict[int, list[str]] = {}
    for _source, t in model.tensors:
        if (m := _MAIN.match(t.name)) is not None:
            leaves.setdefault(int(m.group("layer")), []).append(m.group("leaf"))
    # kind -> (family, layers, tensor stems seen, layers beside attention, layers owning attn_* tensors)
    found: dict[MixerKind, tuple[_Family, list[int], set[str], list[int], list[int]]] = {}
    unknown: list[tuple[int, str, list[str]]] = []
    owned: set[int] = set()
    for layer, names in sorted(leaves.items()):
        family = next((f for f in _FAMILIES if any(n.startswith(f.prefix) for n in names)), None)
        if family is None:
            said = _no_attention_claim(ns, layer)
            others = sorted({_stem(n) for n in names if not n.startswith("ffn_") and "norm" not in n})
            if said is not None and layer not in attention and others:
                unknown.append((layer, said, others))
            continue
        stems = {_stem(n) for n in names if n.startswith(family.prefix)}
        entry = found.setdefault(_kind(family, sorted(stems)), (family, [], set(), [], []))
        entry[1].append(layer)
        entry[2].update(stems)
        if layer in attention:
            if attention[layer] and family.output in stems:
                entry[3].append(layer)
            else:
                entry[4].append(layer)
                owned.add(layer)
    out = [_mixer(ns, kind, *entry) for kind, entry in found.items()]
    if unknown:
        layers = tuple(i for i, _, _ in unknown)
        _, said, others = unknown[0]
        out.append(MixerLayers(MixerKind.UNKNOWN, layers, f"{said} and no tensor of a mixer known here "
                                                         f"(blk.{layers[0]}: {', '.join(others[:6])})",
                               reason="a layer whose token mixer is not known here: what it caches is not counted"))
    out.sort(key=lambda m: (m.layers[0] if m.layers else 0, m.kind.value))
    return LayerMixers(frozenset(owned), tuple(out))


def _no_attention_claim(ns: Namespace, layer: int) -> str | None:
    """The metadata's word that layer ``layer`` has no attention (a per-layer head count of 0), or None."""
    for key in (ns.key("attention.head_count_kv"), ns.key("attention.head_count")):
        if isinstance(key.value, tuple) and key.at(layer) == 0:
            return f"GGUF {key.describe(layer)}"
    return None


def _mixer(ns: Namespace, kind: MixerKind, family: _Family, layers: list[int], stems: set[str], beside: list[int],
           own: list[int]) -> MixerLayers:
    shown = sorted(stems)
    source = f"GGUF tensors blk.N.{family.prefix}* ({', '.join(shown[:6])}{' ...' if len(shown) > 6 else ''})"
    if beside:
        source += f"; beside the layer's attention at {len(beside)} of {len(layers)} layers" \
            if len(beside) < len(layers) else " (each beside the layer's attention)"
    if own:
        source += (f"; the attn_* tensors of {len(own)} of these layers are the mixer's own projections, not "
                   "softmax attention (a layer holds both only where each has its own output projection)")
    widths = family.state(ns)
    if isinstance(widths, str):
        return MixerLayers(kind, tuple(layers), source, reason=f"no widths for its state: {widths}")
    return MixerLayers(kind, tuple(layers), source, widths.conv, widths.recurrent, widths.said,
                       dtype=STATE_DTYPE, dtype_source=STATE_DTYPE_SOURCE)
