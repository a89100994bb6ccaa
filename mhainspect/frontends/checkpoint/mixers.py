"""Layers that mix tokens without softmax attention, in a checkpoint: from the config's layer types
(``layer_types.layer_plan``) and from the weights only such a mixer has.

Name grouping finds an attention-shaped module wherever Q/K/V/O-like projections sit, and a linear
attention layer has them too (MiniMax's lightning attention, Kimi's KDA); a Gated DeltaNet or Mamba
layer leaves a near miss. Neither caches K/V per token. A layer is a non-attention mixer when

- the config's layer plan says so (linear_attention, conv), or
- its mixer module holds a weight only a recurrent or convolution mixer has: a state decay
  (``A_log``), a time-step bias (``dt_bias``), lightning attention's ``slope_rate``, or a depthwise
  causal convolution (a ``[channels, 1, kernel]`` weight under a ``conv`` name).

Such a layer's block or near miss is dropped (it is no attention block) and the layer is listed as a
mixer, with the fixed state it keeps per sequence where the config gives the widths.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mhainspect.frontends.checkpoint.arch_defaults import ConfigView
from mhainspect.frontends.checkpoint.hf_config import sub_config
from mhainspect.frontends.checkpoint.layer_types import LayerPlan, LayerType, StateWidths, layer_plan
from mhainspect.frontends.checkpoint.size_inputs import config_causal, config_dtype, layer_index, model_float_dtype
from mhainspect.ir.limits import config_int
from mhainspect.ir.mixer_names import MAX_CONV_KERNEL, MIXER_ENDINGS, STATE_WEIGHTS
from mhainspect.ir.weights import WeightMeta
from mhainspect.results import AttentionBlock, Evidence, EvidenceSource, Miss, MixerKind
from mhainspect.results.stages import MixerLayers, SizeInputs

# The module name of a mixer's short causal convolution (Mamba's conv1d, KDA's q_conv1d, LFM2's conv,
# RecurrentGemma's conv_1d).
_CONV_MODULE = re.compile(r"^(?:[a-z]+_)?conv(?:_?1d)?$")


def _is_conv(module: str, shape: Sequence[int]) -> bool:
    """A depthwise causal convolution's weight: [channels, 1, kernel] of a module named as one."""
    return len(shape) == 3 and shape[1] == 1 and 1 < shape[2] <= MAX_CONV_KERNEL and \
        _CONV_MODULE.match(module.rpartition(".")[2]) is not None


def mixer_modules(weights: Mapping[str, WeightMeta]) -> dict[str, tuple[str, ...]]:
    """Module path -> the mixer-only weight names found in it (``STATE_WEIGHTS``, a depthwise conv)."""
    out: dict[str, list[str]] = {}
    for name in weights:
        if not name.endswith(MIXER_ENDINGS):
            continue
        module, _, leaf = name.rpartition(".")
        if leaf in STATE_WEIGHTS:
            out.setdefault(module, []).append(leaf)
        elif _is_conv(module, weights[name].shape):
            parent, _, conv = module.rpartition(".")
            out.setdefault(parent, []).append(conv)
    return {m: tuple(dict.fromkeys(v)) for m, v in out.items()}


def _kind_by_weights(found: Sequence[str]) -> MixerKind:
    if "slope_rate" in found:
        return MixerKind.LINEAR_ATTENTION
    if any(x in STATE_WEIGHTS for x in found):
        return MixerKind.UNKNOWN if "dt_bias" in found and "A_log" not in found else MixerKind.STATE_SPACE \
            if "A_log" in found else MixerKind.LINEAR_ATTENTION
    return MixerKind.CONVOLUTION


def _plans(config: Mapping[str, Any] | None, names: Sequence[str]) -> dict[str, tuple[str, LayerPlan | None]]:
    """Per module name, the (sub-)config prefix it belongs to and that config's layer plan."""
    out: dict[str, tuple[str, LayerPlan | None]] = {}
    cache: dict[str, LayerPlan | None] = {}
    if config is None:
        return {n: ("", None) for n in names}
    for n in names:
        prefix, c = sub_config(config, n)
        if prefix not in cache:
            kind = c.model_type if isinstance(c, ConfigView) else c.get("model_type")
            cache[prefix] = layer_plan(c, kind if isinstance(kind, str) else None,
                                       f"config.json {prefix}".rstrip(". ") if prefix else "config.json")
        out[n] = (prefix, cache[prefix])
    return out


def classify_mixers(config: Mapping[str, Any] | None, weights: Mapping[str, WeightMeta],
                    blocks: Sequence[AttentionBlock], misses: Sequence[Miss],
                    recurrent: Mapping[str, tuple[int, str]] | None = None
                    ) -> tuple[list[AttentionBlock], list[Miss], tuple[MixerLayers, ...]]:
    """The blocks and near misses that are softmax attention, and the non-attention mixers by kind
    (``recurrent``: per mixer module, its recurrent state's elements where a graph shows them)."""
    # A module the config says runs once over its input (an encoder) keeps no state between steps.
    evidence = {m: found for m, found in mixer_modules(weights).items()
                if config is None or config_causal(config, m)[0] is not False}
    plans = _plans(config, [*(b.name for b in blocks), *(m.anchor for m in misses), *evidence])

    def no_attention(name: str, *, block: bool) -> bool:
        """Whether module ``name`` sits where no softmax attention is: a layer the plan gives a
        mixer without attention (or, for a near miss, a type not known here), else a module with
        mixer-only weights. A layer type not known here does not outweigh a block its weights
        make: the block stays, its cache unknown (``size_inputs.config_causal``), and the layer is
        listed as of an unknown kind."""
        plan = plans.get(name, ("", None))[1] if in_stack(name) else None
        kind = plan.kind(layer_index(name)) if plan is not None else None
        if kind is LayerType.UNKNOWN and block:
            return name in evidence
        if kind is not None:
            return not kind.attends and kind is not LayerType.NONE
        return name in evidence

    source = kv_source_of(config)
    kept_blocks = shared_block_runs(config, [_sharing_evidence(b, plans.get(b.name, ("", None))[1], source)
                                             for b in blocks if not no_attention(b.name, block=True)])
    kept_misses = [_shared_kv(m, plans.get(m.anchor, ("", None))[1] if in_stack(m.anchor) else None)
                   for m in misses if not no_attention(m.anchor, block=False)]
    out: list[MixerLayers] = []
    for plan in {id(p): p for _, p in plans.values() if p is not None}.values():
        out.extend(_plan_mixers(plan))
    out.extend(_weight_mixers({m: found for m, found in evidence.items()
                               if plans.get(m, ("", None))[1] is None}, weights, recurrent or {}))
    out.sort(key=lambda m: (m.layers[0] if m.layers else 0, m.kind.value))
    return kept_blocks, kept_misses, tuple(out)


def _weight_mixers(evidence: Mapping[str, Sequence[str]], weights: Mapping[str, WeightMeta],
                   recurrent: Mapping[str, tuple[int, str]]) -> list[MixerLayers]:
    """Layers no plan covers: by the weights only such a mixer has, per stack, kind and state (sized
    from the weights' shapes where they determine it, ``weight_state``)."""
    modules = sorted(weights) if any(_stand_in(weights, m, f) is None and not _decays(f) for m, f in evidence.items()) \
        else []
    groups: dict[tuple[str, MixerKind, StateWidths | str], tuple[list[int], set[str]]] = {}
    for module, found in evidence.items():
        i = layer_index(module)
        if i is None:
            continue
        state = weight_state(module, found, weights, modules, recurrent.get(module))
        # one entry for the layers of a stack alike: the text names layer N's tensors
        state = state.replace(f"{_stack(module)}.{i}.", f"{_stack(module)}.N.") if isinstance(state, str) else \
            dataclasses.replace(state, said=state.said.replace(f"{_stack(module)}.{i}.", f"{_stack(module)}.N."))
        kind = _kind_by_weights(found)
        if kind is MixerKind.CONVOLUTION and isinstance(state, StateWidths) and state.recurrent:
            kind = MixerKind.STATE_SPACE  # a recurrent state the graph shows beside the convolution
        elif kind is MixerKind.CONVOLUTION and not isinstance(state, StateWidths):
            kind = MixerKind.UNKNOWN  # a convolution beside a state the weights do not show: not known here
        layers, names = groups.setdefault((_stack(module), kind, state), ([], set()))
        layers.append(i)
        names.update(_evidence_names(module, found, weights))
    out = []
    for (_stack_name, kind, state), (layers, names) in groups.items():
        source = f"weights only such a mixer has ({', '.join(sorted(names))})"
        if isinstance(state, str):
            out.append(MixerLayers(kind, tuple(sorted(layers)), source, reason=state))
        else:
            out.append(MixerLayers(kind, tuple(sorted(layers)), source, state.conv, state.recurrent, state.said,
                                   recurrent_float32=state.recurrent_float32))
    return out


def _decays(found: Sequence[str]) -> bool:
    return any(x in STATE_WEIGHTS for x in found)


def _conv_key(module: str, leaf: str) -> str:
    return f"{module}.{leaf}.weight"


def _evidence_names(module: str, found: Sequence[str], weights: Mapping[str, WeightMeta]) -> list[str]:
    """How the evidence is named in the source text: the leaf (``A_log``, ``conv1d``), or, for a
    tensor the file keeps under another name (an exporter's anonymous constant found by what the
    graph does with it), what it is and the file's own name."""
    out = []
    for leaf in found:
        key = f"{module}.{leaf}" if leaf in STATE_WEIGHTS else _conv_key(module, leaf)
        meta = weights.get(key)
        if meta is None or meta.name == key:
            out.append(leaf)
        elif leaf in STATE_WEIGHTS:
            out.append(f"a state decay the graph exponentiates, {meta.name} {list(meta.shape)}")
        else:
            out.append(f"a causal depthwise convolution, weight {meta.name} {list(meta.shape)}")
    return out


def _stand_in(weights: Mapping[str, WeightMeta], module: str, found: Sequence[str]) -> str | None:
    """The file's own name of a tensor of the module kept under another name (a graph's anonymous
    convolution weight), or None when every piece of evidence is a named parameter of the module."""
    for leaf in found:
        key = f"{module}.{leaf}" if leaf in STATE_WEIGHTS else _conv_key(module, leaf)
        meta = weights.get(key)
        if meta is not None and meta.name != key:
            return meta.name
    return None


def weight_state(module: str, found: Sequence[str], weights: Mapping[str, WeightMeta],
                 names: Sequence[str], recurrent: tuple[int, str] | None = None) -> StateWidths | str:
    """The state one layer of the mixer ``module`` keeps per sequence, from its weights' shapes where
    they determine it, as transformers' cache holds it; else why not (the text says what is known).

    - the convolution's last ``kernel`` inputs: every depthwise convolution weight [C, 1, k] -> C × k;
    - the recurrent state: a decay ``A_log`` of two axes [inner, d_state] (Mamba) -> inner × d_state;
      a decay per head (h elements) beside separate query and value convolutions (KDA's q_conv1d /
      v_conv1d: h × d_k and h × d_v channels) -> h × d_k × d_v; no decay, time-step bias or slope
      and no parameter but the convolution and matrices (LFM2's short convolution: conv, in_proj,
      out_proj; ``names``: every weight name, sorted) -> none; lightning attention's slope rate per
      head beside its packed q/k/v projection -> heads × head_dim²; else ``recurrent``, what a graph's
      dataflow shows (``graphs.scan``). A decay per head alone (Mamba-2, Gated DeltaNet) leaves the
      head size and state size to a config or the graph."""
    convs = [(leaf, weights[_conv_key(module, leaf)]) for leaf in found
             if leaf not in STATE_WEIGHTS and _conv_key(module, leaf) in weights]
    conv = sum(m.shape[0] * m.shape[2] for _, m in convs)
    conv_said = " + ".join(f"{m.name} [{m.shape[0]}, 1, {m.shape[2]}] -> {m.shape[0]} × {m.shape[2]}" for _, m in convs)
    decay = weights.get(f"{module}.A_log")
    shape = tuple(d for d in decay.shape if d != 1) if decay is not None else ()
    if decay is not None and len(shape) == 2:
        return StateWidths(conv, shape[0] * shape[1], True, f"from the weights: conv {conv_said}; state "
                                                            f"{decay.name} {list(decay.shape)} -> {shape[0]} × {shape[1]}")
    if recurrent is not None:
        return StateWidths(conv, recurrent[0], True, f"from the weights: conv {conv_said}; {recurrent[1]}")
    by_side = {leaf.split("_")[0]: m.shape[0] for leaf, m in convs if "_" in leaf}
    if decay is not None and len(shape) == 1 and {"q", "v"} <= by_side.keys():
        heads, q, v = shape[0], by_side["q"], by_side["v"]
        if q % heads == 0 and v % heads == 0:
            return StateWidths(conv, heads * (q // heads) * (v // heads), True,
                               f"from the weights: conv {conv_said}; state {heads} heads ({decay.name} "
                               f"{list(decay.shape)}) × d_k {q // heads} × d_v {v // heads}")
    slopes = weights.get(f"{module}.slope_rate")
    lightning = _lightning_state(module, slopes, weights) if slopes is not None and not convs else None
    if lightning is not None:
        return lightning
    if not _decays(found):
        stand_in = _stand_in(weights, module, found)
        if stand_in is not None:
            return (f"its convolution ({conv_said}) is known, not whether a recurrent state is kept beside it: the "
                    "file does not name the layer's parameters and no config gives its widths")
        others = _other_parameters(module, names, {_conv_key(module, leaf) for leaf, _ in convs}, weights)
        if not others:
            return StateWidths(conv, 0, False, f"from the weights: conv {conv_said}; no recurrent state (the module "
                                               "holds nothing but the convolution and matrices)")
        return (f"its convolution ({conv_said}) is known; the weights do not size what its other parameters "
                f"({', '.join(others[:3])}) keep, and no config gives the widths")
    known = f"its convolution ({conv_said}) is known; " if convs else ""
    held = f"{decay.name} {list(decay.shape)} gives the heads, " if decay is not None else ""
    return f"{known}{held}no config gives the widths of its recurrent state"


def _lightning_state(module: str, slopes: WeightMeta, weights: Mapping[str, WeightMeta]) -> StateWidths | None:
    """Lightning attention (MiniMax): a decay rate per head (``slope_rate`` [h, 1, 1]) and its q, k and v
    in one projection of three equal parts (``qkv_proj`` [3·h·d, hidden]): the state [h, d, d], in the
    model's dtype as transformers keeps it."""
    heads = [d for d in slopes.shape if d != 1]
    packed = weights.get(f"{module}.qkv_proj.weight")
    if len(heads) != 1 or packed is None or len(packed.shape) != 2 or packed.shape[0] % (3 * heads[0]):
        return None
    h, d = heads[0], packed.shape[0] // (3 * heads[0])
    return StateWidths(0, h * d * d, False, f"from the weights: state {h} heads ({slopes.name} {list(slopes.shape)}) "
                                            f"× head_dim {d} × {d} ({packed.name} {list(packed.shape)}: q, k and v "
                                            f"of {h} × {d} each)")


def _other_parameters(module: str, names: Sequence[str], convs: set[str], weights: Mapping[str, WeightMeta]) -> list[str]:
    """The module's parameters that are neither its convolutions (weight and bias) nor a matrix or a
    bias: what could be a recurrent state's (a decay, a skip vector, a norm)."""
    prefix = module + "."
    start = bisect.bisect_left(names, prefix)
    out = []
    for name in names[start:]:
        if not name.startswith(prefix):
            break
        shape = weights[name].shape
        if name in convs or any(name == c.removesuffix("weight") + "bias" for c in convs):
            continue
        if (name.endswith(".weight") and len(shape) == 2) or (name.endswith(".bias") and len(shape) == 1):
            continue
        out.append(name[len(prefix):])
    return out


def graph_mixers(config: Mapping[str, Any] | None, weights: Mapping[str, WeightMeta],
                 recurrent: Mapping[str, tuple[int, str]] | None = None) -> tuple[MixerLayers, ...]:
    """The non-attention mixers of a graph (an ONNX export), whose blocks are the softmax attention the
    matchers found: by the weights only such a mixer has and, where the exporter's names do not tell
    (folded or renamed parameters), by the layer plan of a config beside the file. Its blocks stay
    as they are: a graph's block is softmax attention, whatever the layer's type."""
    _, _, found = classify_mixers(config, weights, [], [], recurrent)
    if found or config is None:
        return found
    _, c = sub_config(config, "model.layers.0")
    kind = c.model_type if isinstance(c, ConfigView) else c.get("model_type")
    plan = layer_plan(c, kind if isinstance(kind, str) else None)
    return tuple(_plan_mixers(plan)) if plan is not None else ()


def in_stack(name: str) -> bool:
    """Whether a module is in the decoder stack a config's layer types describe: not in a
    multi-token-prediction module (Qwen3-Next's ``mtp.layers.0`` is numbered from 0 again)."""
    return not any(part == "mtp" or part.startswith("mtp_") for part in name.split("."))


def kv_source_of(config: Mapping[str, Any] | None) -> Callable[[str], str | None] | None:
    """Module path -> the module (same path, the source layer's number) whose K/V cache it reads,
    where the config's layer plan says the layer reads another's (``layer_types.kv_sources``); None
    without a config."""
    if config is None:
        return None
    cache: dict[str, LayerPlan | None] = {}

    def source(name: str) -> str | None:
        prefix, c = sub_config(config, name)
        if prefix not in cache:
            kind = c.model_type if isinstance(c, ConfigView) else c.get("model_type")
            cache[prefix] = layer_plan(c, kind if isinstance(kind, str) else None)
        plan = cache[prefix]
        layer = layer_index(name)
        src = plan.kv_source(layer) if plan is not None and in_stack(name) else None
        if src is None:
            return None
        marker = f".{layer}."
        cut = (name + ".").find(marker)
        return None if cut < 0 else (name[:cut] + f".{src}." + name[cut + len(marker):]).rstrip(".")

    return source


def _sharing_evidence(block: AttentionBlock, plan: LayerPlan | None,
                      source: Callable[[str], str | None] | None) -> AttentionBlock:
    """A block at a layer that reads another layer's K/V cache: which block it reads (``source``),
    with the config's word for it in its evidence. Its own K/V projections, where it still holds
    some, count as its stored parameters; its cache is its source's."""
    src = block.kv_cache_shared_from or (source(block.name) if source is not None else None)
    if src is None or plan is None:
        return block
    held = "its K and V projections are that block's, counted there" if block.kv_cache_shared_from else \
        "the K/V projections it holds are counted as its parameters"
    said = (f"{plan.reuse_said}: layer {layer_index(block.name)} reads the K/V cache of {src} ({held}); it caches "
            "nothing of its own")
    return dataclasses.replace(block, kv_cache_shared_from=src, evidence=block.evidence + (
        Evidence("kv_cache_shared_from", layer_index(src), EvidenceSource.CONFIG, said),))


def _shared_kv(miss: Miss, plan: LayerPlan | None) -> Miss:
    """A near miss at a layer that reads another layer's K/V cache (``layer_types.kv_sources``) where
    the source layer is no block to lend its K/V (``grouping.group_attention``): it caches nothing (said so)."""
    layer = layer_index(miss.anchor)
    source = plan.kv_source(layer) if plan is not None else None
    if plan is None or source is None:
        return miss
    return dataclasses.replace(miss, caches=False, reason=(
        f"layer {layer} reads the K/V cache of layer {source} ({plan.reuse_said}), and caches nothing; no block "
        "at that layer lends it K/V projections, so it is not counted as a block"))


def _plan_mixers(plan: LayerPlan) -> list[MixerLayers]:
    """The plan's state-keeping layers (linear attention, state-space, convolution; a hybrid layer's
    mixer beside its attention) and its layers of a type not known here, one entry per kind."""
    by_kind: dict[MixerKind, list[int]] = {}
    hybrid = False
    for i, t in enumerate(plan.types):
        if t is LayerType.UNKNOWN:
            by_kind.setdefault(MixerKind.UNKNOWN, []).append(i)
        elif t.has_state:
            hybrid = hybrid or t.attends
            by_kind.setdefault(MixerKind.CONVOLUTION if t is LayerType.CONV else plan.mixer, []).append(i)
    out = []
    for kind, layers in by_kind.items():
        if kind is MixerKind.UNKNOWN:
            names = sorted({plan.names[i] for i in layers})
            out.append(MixerLayers(kind, tuple(layers), f"{plan.said}: {', '.join(repr(n) for n in names)}",
                                   reason=f"a layer type not known here ({', '.join(names)}): what it caches is not "
                                          "counted"))
            continue
        source = plan.said + (" (each beside the layer's attention)" if hybrid else "")
        w = plan.state
        if w is None:
            out.append(MixerLayers(kind, tuple(layers), source,
                                   reason="no rule here gives the widths of this architecture's state"))
        else:
            out.append(MixerLayers(kind, tuple(layers), source, w.conv, w.recurrent, w.said,
                                   recurrent_float32=w.recurrent_float32))
    return out


def _stack(name: str) -> str:
    """The module path before the layer number (``model.layers``): layers of one stack group together."""
    i = layer_index(name)
    if i is None:
        return name
    marker = f".{i}."
    cut = (name + ".").find(marker)
    return name[:cut] if cut >= 0 else name


def with_mixers(size: SizeInputs, mixers: Sequence[MixerLayers], config: Mapping[str, Any] | None,
                label: str) -> SizeInputs:
    """``size`` with the mixers, their state in the model's dtype: the config's ``torch_dtype``, else
    the float dtype most parameters are stored in (a mixer whose source gave its state's dtype, a
    graph's state tensor, keeps it)."""
    if not mixers:
        return size
    dtype = config_dtype(config)
    where = f"{label} torch_dtype" if dtype is not None else "the model's prevailing float dtype"
    dtype = dtype or model_float_dtype(size.tensors)
    return dataclasses.replace(size, mixers=tuple(m if m.dtype is not None else
                                                  dataclasses.replace(m, dtype=dtype, dtype_source=where)
                                                  for m in mixers))


def shared_block_runs(config: Mapping[str, Any] | None, blocks: Sequence[AttentionBlock]) -> list[AttentionBlock]:
    """Zamba2: the hybrid layers run ``num_mem_blocks`` shared transformer blocks in turn (hybrid layer
    j runs block j % num_mem_blocks), and transformers ties each later use to the first. A saved
    folder keeps the first use of each block only, a module holds every use: the first block found
    for a block runs for each use no other block found stands for (parameters once, cache per use)."""
    if config is None or not any("shared_transformer" in b.name for b in blocks):
        return list(blocks)
    _, c = sub_config(config, blocks[0].name)
    kind = c.model_type if isinstance(c, ConfigView) else c.get("model_type")
    plan = layer_plan(c, kind if isinstance(kind, str) else None)
    mem = config_int(c.get("num_mem_blocks")) or 1
    if plan is None:
        return list(blocks)
    hybrid = [i for i, t in enumerate(plan.types) if t is LayerType.HYBRID]
    position = {layer: j % mem for j, layer in enumerate(hybrid)}
    of = {b.name: position[i] for b in blocks
          if "shared_transformer" in b.name and (i := layer_index(b.name)) is not None and i in position}
    out = []
    for b in blocks:
        p = of.get(b.name)
        if p is None:
            out.append(b)
            continue
        same = [x for x in blocks if of.get(x.name) == p]
        if same[0] is not b:
            out.append(b)
            continue
        uses = sum(1 for q in position.values() if q == p)
        runs = uses - (len(same) - 1)
        said = (f"{len(hybrid)} hybrid layers run num_mem_blocks={mem} shared blocks in turn: this one at {uses} of "
                f"them, {len(same) - 1} of which the source holds as blocks of their own -> runs {runs} times")
        out.append(dataclasses.replace(b, applications=runs, evidence=b.evidence + (
            Evidence("applications", runs, EvidenceSource.CONFIG, f"config {said}"),)))
    return out
