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
the checkpoint reader uses (``layer_types.selective_state``) with llama.cpp's convolution columns;
KDA (separate ``ssm_conv1d_q/k/v``: Kimi-Linear) by llama.cpp's own KDA branch (``kda.head_dim``,
no ``ssm.inner_size``). Where a key is absent, what the layer's tensor shapes determine: the
convolution's channels and kernel, a decay ``ssm_a`` [d_inner, d_state], KDA's head size as the q
convolution's channels over the heads.
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


Shapes = Mapping[str, tuple[int, ...]]  # a layer's tensors of one mixer, by leaf name -> numpy-order shape


@dataclass(frozen=True)
class _Family:
    """One recurrent or convolution mixer's tensors: their name prefix, the name of its own output
    projection, and what one layer of it keeps per sequence (widths, or why they are unknown), from
    the metadata and the shapes of one such layer's tensors."""

    prefix: str
    output: str
    state: Callable[[Namespace, Shapes], StateWidths | str]


def _missing(keys: Sequence[tuple[str, int | None]]) -> str:
    return f"GGUF {', '.join(name for name, v in keys if v is None)} absent"


def _convs(shapes: Shapes) -> list[tuple[str, int, int]]:
    """The layer's convolution weights as (leaf, channels, kernel): ``ssm_conv1d`` [d_inner, d_conv],
    KDA's ``ssm_conv1d_q/k/v`` [1, d_inner, 1, d_conv] (axes of 1 dropped)."""
    out = []
    for leaf, shape in sorted(shapes.items()):
        if leaf.startswith("ssm_conv1d") and not leaf.endswith(".bias"):
            dims = [d for d in shape if d != 1]
            if len(dims) == 2:
                out.append((leaf, dims[0], dims[1]))
    return out


def _ssm_state(ns: Namespace, shapes: Shapes) -> StateWidths | str:
    """llama.cpp: conv state (d_conv - 1) × (d_inner + 2·n_group·d_state), recurrent d_state × d_inner
    (KDA, separate q/k/v convolutions: ``_kda_state``). Without the keys, what the tensor shapes
    determine: the convolution's channels and kernel, and a decay ``ssm_a`` [d_inner, d_state] (Mamba)."""
    convs = _convs(shapes)
    if any(leaf.startswith("ssm_conv1d_") for leaf, _, _ in convs):
        return _kda_state(ns, shapes, convs)
    kernel, inner, state, groups = (ns.key(f"ssm.{k}") for k in ("conv_kernel", "inner_size", "state_size",
                                                                  "group_count"))
    k, d, n, g = kernel.at(None), inner.at(None), state.at(None), groups.at(None) or 0
    if k is None or d is None or n is None:
        return _shape_state(ns, shapes, convs, [(kernel.name, k), (inner.name, d), (state.name, n)])
    conv, recurrent = selective_state(d, g, n, max(k - 1, 0))
    g_said = "" if groups.value is not None else " (absent: 0)"
    return StateWidths(conv, recurrent, False, f"llama.cpp: conv (d_conv {k} - 1) × (d_inner {d} + 2 × n_group {g}"
                                               f"{g_said} × d_state {n}) + state d_state {n} × d_inner {d}, from GGUF "
                                               f"{ns.prefix}ssm.conv_kernel, inner_size, group_count, state_size")


def _shape_state(ns: Namespace, shapes: Shapes, convs: Sequence[tuple[str, int, int]],
                 keys: Sequence[tuple[str, int | None]]) -> StateWidths | str:
    """A selective-scan layer whose ssm.* keys are absent: the conv state from its convolution's
    shape (channels × (d_conv - 1)), the recurrent one from a decay of two axes [d_inner, d_state]."""
    decay = next((shape for leaf, shape in shapes.items() if leaf.split(".")[0] == "ssm_a"), None)
    dims = [x for x in decay if x != 1] if decay is not None else []
    if len(convs) != 1 or len(dims) != 2:
        held = f"; the tensors give the heads ({dims[0]}, ssm_a), not their size or d_state" if len(dims) == 1 else ""
        return _missing(keys) + held
    leaf, channels, kernel = convs[0]
    k = ns.key("ssm.conv_kernel").at(None) or kernel
    return StateWidths(channels * max(k - 1, 0), dims[0] * dims[1], False,
                       f"{_missing(keys)}; from the tensor shapes: conv {leaf} {channels} channels × (d_conv {k} - 1) "
                       f"+ state ssm_a {dims[0]} × {dims[1]}")


def _kda_state(ns: Namespace, shapes: Shapes, convs: Sequence[tuple[str, int, int]]) -> StateWidths | str:
    """llama.cpp (Kimi Delta Attention, ``n_embd_head_kda``): conv state 3 × (d_conv - 1) × n_head ×
    head_dim (the q, k and v convolutions), recurrent head_dim² × n_head. head_dim is GGUF
    ``kda.head_dim`` (older files: ``ssm.state_size``), else the q convolution's channels / n_head;
    n_head is ``attention.head_count`` (llama.cpp's n_head()); d_conv ``ssm.conv_kernel``, else the
    convolution's kernel."""
    heads_key = ns.key("attention.head_count")
    heads = heads_key.at(0) if isinstance(heads_key.value, tuple) else heads_key.at(None)
    q = next(((c, k) for leaf, c, k in convs if leaf.startswith("ssm_conv1d_q")), None)
    dim_key = next((key for key in (ns.key("kda.head_dim"), ns.key("ssm.state_size")) if key.at(None)), None)
    kernel_key = ns.key("ssm.conv_kernel")
    k = kernel_key.at(None) or (q[1] if q is not None else None)
    if heads is None or k is None:
        return _missing([(heads_key.name, heads), (kernel_key.name, k)])
    if dim_key is not None:
        dim, dim_said = dim_key.at(None) or 0, f"GGUF {dim_key.describe(None)}"
    elif q is not None and q[0] % heads == 0:
        dim, dim_said = q[0] // heads, f"{ns.prefix}kda.head_dim absent: ssm_conv1d_q's {q[0]} channels / {heads}"
    else:
        return _missing([(ns.key("kda.head_dim").name, None)])
    k_said = kernel_key.describe(None) if kernel_key.at(None) else f"the convolution's kernel {k}"
    check = "" if q is None or q[0] == heads * dim else \
        f" (ssm_conv1d_q holds {q[0]} channels, not {heads} × {dim}: llama.cpp sizes the state as said)"
    return StateWidths(3 * max(k - 1, 0) * heads * dim, dim * dim * heads, False,
                       f"llama.cpp (KDA): conv 3 × (d_conv {k} - 1) × n_head {heads} × head_dim {dim} + state head_dim "
                       f"{dim}² × n_head {heads}, from {dim_said}, GGUF {heads_key.describe(None)}, {k_said}{check}")


def _shortconv_state(ns: Namespace, shapes: Shapes) -> StateWidths | str:
    """llama.cpp (LFM2): conv state embedding_length × (l_cache - 1), no recurrent state; without the
    keys, the convolution's shape [channels, l_cache]."""
    cache, embd = ns.key("shortconv.l_cache"), ns.key("embedding_length")
    c, e = cache.at(None), embd.at(None)
    if c is None or e is None:
        conv = shapes.get("shortconv.conv.weight")
        dims = [d for d in conv if d != 1] if conv is not None else []
        if len(dims) != 2:
            return _missing([(cache.name, c), (embd.name, e)])
        return StateWidths(dims[0] * max(dims[1] - 1, 0), 0, False,
                           f"{_missing([(cache.name, c), (embd.name, e)])}; from the tensor shapes: conv "
                           f"shortconv.conv.weight {dims[0]} channels × (l_cache {dims[1]} - 1)")
    return StateWidths(selective_state(e, 0, 0, max(c - 1, 0))[0], 0, False,
                       f"llama.cpp: conv {embd.describe(None)} × (l_cache {c} - 1, GGUF {cache.name})")


def _wkv_state(ns: Namespace, shapes: Shapes) -> StateWidths | str:
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
    shapes: dict[int, dict[str, tuple[int, ...]]] = {}
    for _source, t in model.tensors:
        if (m := _MAIN.match(t.name)) is not None:
            leaves.setdefault(int(m.group("layer")), []).append(m.group("leaf"))
            shapes.setdefault(int(m.group("layer")), {})[m.group("leaf")] = t.shape
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
    out = [_mixer(ns, kind, *entry, {leaf: shape for leaf, shape in shapes[entry[1][0]].items()
                                     if leaf.startswith(entry[0].prefix)}) for kind, entry in found.items()]
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
           own: list[int], shapes: Shapes) -> MixerLayers:
    shown = sorted(stems)
    source = f"GGUF tensors blk.N.{family.prefix}* ({', '.join(shown[:6])}{' ...' if len(shown) > 6 else ''})"
    if beside:
        source += f"; beside the layer's attention at {len(beside)} of {len(layers)} layers" \
            if len(beside) < len(layers) else " (each beside the layer's attention)"
    if own:
        source += (f"; the attn_* tensors of {len(own)} of these layers are the mixer's own projections, not "
                   "softmax attention (a layer holds both only where each has its own output projection)")
    widths = family.state(ns, shapes)
    if isinstance(widths, str):
        return MixerLayers(kind, tuple(layers), source, reason=f"no widths for its state: {widths}")
    return MixerLayers(kind, tuple(layers), source, widths.conv, widths.recurrent, widths.said,
                       dtype=STATE_DTYPE, dtype_source=STATE_DTYPE_SOURCE)
