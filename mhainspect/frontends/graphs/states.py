"""The fixed state a decoder graph hands from one step to the next for its recurrent and convolution
mixers, read from the graph's own state inputs (``matchers.cache.state_tensors``: onnx-community's
``past_conv.N`` [batch, channels, kernel], ``past_ssm.N`` [batch, heads, head_dim, d_state],
``past_recurrent.N``, ...). Every axis but the batch is a fixed number, so what one sequence keeps
per layer is exactly their elements × their dtype's size: the graph says so itself, whatever the
mixer is and whatever a config beside the file or the weights would give. Those layers' entries
replace what the weights or a config said of them; other mixer layers stay as they were found."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mhainspect.matchers.cache import StateTensor
from mhainspect.results import MixerKind
from mhainspect.results.stages import MixerLayers


def _shape(t: StateTensor) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) and i else "batch" for i, d in enumerate(t.shape)) + "]"


def _generic(name: str, layer: int) -> str:
    """``past_conv.3`` -> ``past_conv.N``: the name a layer's tensor shares with the other layers'."""
    return name.replace(f".{layer}.", ".N.").replace(f"_{layer}_", "_N_").removesuffix(f".{layer}") \
        + (".N" if name.endswith(f".{layer}") else "")


def _kind(tensors: Sequence[StateTensor], found: MixerKind | None) -> MixerKind:
    """What the layer is: what the weights or the config said, else what its state tensors are
    called (a state-space scan's ``ssm``, a convolution's state alone, else a recurrent state)."""
    if found is not None and found is not MixerKind.UNKNOWN:
        return found
    if all(t.conv for t in tensors):
        return MixerKind.CONVOLUTION
    return MixerKind.STATE_SPACE if any("ssm" in t.name.lower() for t in tensors) else MixerKind.LINEAR_ATTENTION


def _one_dtype(tensors: Sequence[StateTensor]) -> str | None:
    kinds = {t.dtype for t in tensors}
    return kinds.pop() if len(kinds) == 1 else None


def with_graph_states(found: Sequence[MixerLayers], states: Sequence[StateTensor]) -> tuple[MixerLayers, ...]:
    """``found`` (the mixers the weights or a config gave) with the layers the graph's state tensors
    cover sized from those tensors. A layer with state tensors and no other evidence is a mixer
    layer on that evidence alone."""
    by_layer: dict[int, list[StateTensor]] = {}
    for t in states:
        if t.layer is not None:
            by_layer.setdefault(t.layer, []).append(t)
    if not by_layer:
        return tuple(found)
    kind_of = {i: m for m in found for i in m.layers}
    groups: dict[tuple[MixerKind, int, int, str | None, str | None, tuple[str, ...], str, str], list[int]] = {}
    for layer, tensors in sorted(by_layer.items()):
        conv = [t for t in tensors if t.conv]
        recurrent = [t for t in tensors if not t.conv]
        conv_dtype, recurrent_dtype = _one_dtype(conv), _one_dtype(recurrent)
        if (conv and conv_dtype is None) or (recurrent and recurrent_dtype is None):
            continue  # tensors of one role in several dtypes: left to the other evidence
        was = kind_of.get(layer)
        key = (_kind(tensors, was.kind if was is not None else None), sum(t.elements for t in conv),
               sum(t.elements for t in recurrent), conv_dtype, recurrent_dtype,
               tuple(sorted(_generic(t.name, layer) for t in tensors)), was.source if was is not None else "",
               _said(was, sum(t.elements for t in tensors)))
        groups.setdefault(key, []).append(layer)
    covered = {i for layers in groups.values() for i in layers}
    out = [dataclasses.replace(m, layers=tuple(i for i in m.layers if i not in covered)) for m in found]
    out = [m for m in out if m.layers]
    for (kind, conv_n, recurrent_n, conv_dtype, recurrent_dtype, _names, was_source, config_said), layers in \
            groups.items():
        tensors = by_layer[layers[0]]
        shown = ", ".join(f"{_generic(t.name, layers[0])} {_shape(t)} {t.dtype}" for t in tensors)
        source = f"{was_source}; " if was_source else ""
        source += f"the graph's state tensors ({', '.join(_generic(t.name, layers[0]) for t in tensors)})"
        dtype = conv_dtype or recurrent_dtype
        out.append(MixerLayers(
            kind, tuple(layers), source, conv_n, recurrent_n,
            f"the graph's state tensors, every axis but the batch fixed: {shown}{config_said}",
            dtype=dtype, dtype_source="the graph's state tensors", recurrent_dtype=recurrent_dtype))
    out.sort(key=lambda m: (m.layers[0] if m.layers else 0, m.kind.value))
    return tuple(out)


def _said(was: MixerLayers | None, elements: int) -> str:
    """A config's or the weights' widths that disagree with the graph's tensors, said beside them."""
    if was is None or was.conv_elements is None or was.recurrent_elements is None:
        return ""
    given = was.conv_elements + was.recurrent_elements
    if given == elements:
        return ""
    return (f" ({was.state_source or was.source} gives {given:,} elements, not the graph's {elements:,}: the "
            "graph's own tensors are taken)")
