"""Mixture-of-experts layers told by their tensors' names and shapes: routed experts, shared experts.

Routed experts are found two ways, by the segments of a tensor's dotted name:

- indexed: ``... .experts.<i>. ...`` (``local_experts`` too; ``experts.expert_<i>`` of Switch
  Transformers and NLLB-MoE): one module per expert (Mixtral's ``block_sparse_moe.experts.3.w1.weight``,
  Qwen-MoE's and DeepSeek's ``mlp.experts.3.up_proj.weight``, as checkpoints store them); the
  experts are the distinct indices;
- stacked: a tensor under an ``experts`` segment with no index (``mlp.experts.gate_up_proj``
  ``[E, ...]`` of gpt-oss, Llama 4 and transformers' modules), or a GGUF ``ffn_*_exps`` tensor
  (``blk.3.ffn_up_exps.weight`` ``[E, f, d]``): the experts are the leading axis, which every stacked
  tensor of the layer must share;
- fused: a layer whose stacked tensors are all matrices (none has an axis of its own for the
  experts) holds every expert along the leading axis, expert after expert (DBRX's
  ``ffn.experts.mlp.w1`` ``[E * f, d]``). The leading axis is then E x f, and the shapes alone do
  not split it: it is counted only where a count of experts (the router's rows, else the metadata's)
  times a per-expert width the metadata states (``ExpertClaims.expert_widths``) gives every such
  tensor's leading axis; otherwise the layer's experts are not counted, with the reason.

Shared experts (``shared_expert``/``shared_experts`` segments, GGUF ``*_shexp``) run for every token:
their parameters are counted apart, never as routed. A router (``gate``/``router`` beside the experts,
``router.layer`` too, GGUF ``ffn_gate_inp``) shaped ``[E, d]`` confirms the count. Nothing here reads
a config: the front end's metadata (``ExpertClaims``) says how many experts a token uses (and, for
fused experts, how wide one is), and the analysis combines both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mhainspect.ir.weights import WeightMeta
from mhainspect.results import EvidenceSource

__all__ = ["ExpertClaims", "ExpertInputs", "MoeLayer", "find_experts", "weight_experts"]

_ROUTED = frozenset({"experts", "local_experts"})
_SHARED = re.compile(r"^(?:shared_experts?|ffn_[a-z_]*shexp)$")
_GGUF_STACKED = re.compile(r"^ffn_[a-z_]*_exps$")
_INDEX = re.compile(r"^(?:expert_?)?(\d+)$")  # the segment after ``experts`` that names one expert
_ROUTER = frozenset({"gate", "router", "ffn_gate_inp"})


@dataclass
class MoeLayer:
    """One mixture-of-experts layer (the name before its ``experts`` segment, or a GGUF ``blk.N``)."""

    name: str
    expert_params: dict[int, int] = field(default_factory=dict)  # indexed experts: index -> parameters
    stacked: list[WeightMeta] = field(default_factory=list)  # stacked experts' tensors
    shared_params: int = 0
    router: WeightMeta | None = None
    problem: str = ""  # why the layer's experts cannot be counted (empty: they can)
    # fused experts: (count, words saying how the leading axis splits, whether the count is the router's rows)
    fused: tuple[int, str, bool] | None = None

    @property
    def num_experts(self) -> int | None:
        if self.problem:
            return None
        if self.fused is not None:
            return self.fused[0]
        if self.stacked:
            return self.stacked[0].shape[0]
        return len(self.expert_params) or None

    @property
    def routed_params(self) -> int:
        return sum(self.expert_params.values()) + sum(t.numel for t in self.stacked)

    @property
    def params_per_expert(self) -> int | None:
        """One routed expert's parameters; None when the experts differ (or there are none)."""
        n = self.num_experts
        if n is None:
            return None
        if self.stacked:
            return self.routed_params // n
        sizes = set(self.expert_params.values())
        return sizes.pop() if len(sizes) == 1 else None

    @property
    def count_from_metadata(self) -> bool:
        """True when the count of experts is the metadata's word (fused experts without a router),
        not a shape's."""
        return self.fused is not None and not self.fused[2]

    def evidence(self) -> str:
        """What the count was read from, in words."""
        if self.fused is not None:
            names = ", ".join(f"{t.name} {list(t.shape)}" for t in self.stacked[:3])
            return f"{self.name}: expert tensors fused along their leading axis, {self.fused[1]} ({names})"
        if self.stacked:
            names = ", ".join(f"{t.name} {list(t.shape)}" for t in self.stacked[:3])
            return f"{self.name}: stacked expert tensors, leading axis {self.num_experts} ({names})"
        indices = sorted(self.expert_params)
        return (f"{self.name}: {len(indices)} indexed experts ({self.name}.experts.{indices[0]} ... "
                f"{indices[-1]}), {self.params_per_expert or 'unequal'} parameters each")


@dataclass(frozen=True)
class ExpertClaims:
    """What a config or GGUF metadata says about the experts: counts with the words that say where
    each was read (``source`` CONFIG or GGUF). None where it says nothing."""

    source: EvidenceSource
    num_experts: tuple[int, str] | None = None
    experts_per_token: tuple[int, str] | None = None
    num_shared_experts: tuple[int, str] | None = None
    # the hidden widths the metadata states that one expert may have (moe_intermediate_size,
    # ffn_hidden_size, intermediate_size, ...): what splits a fused expert axis
    expert_widths: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class ExpertInputs:
    """A front end's findings for the analysis: the layers its tensors show and its metadata's claims."""

    layers: tuple[MoeLayer, ...]
    claims: ExpertClaims | None = None


def _split(name: str) -> tuple[str, str, str] | None:
    """(layer, kind, index-or-empty) for a routed or shared expert tensor; None for any other."""
    if "exp" not in name:  # every name of an expert holds it (a dense model's tensors stop here)
        return None
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part in _ROUTED:
            index = _INDEX.match(parts[i + 1]) if i + 1 < len(parts) else None
            return ".".join(parts[:i]), "routed", index.group(1) if index else ""
        if "exp" not in part:  # neither pattern can match: most parts
            continue
        if _GGUF_STACKED.match(part):
            return ".".join(parts[:i]), "routed", ""
        if _SHARED.match(part):
            return ".".join(parts[:i]), "shared", ""
    return None


def _router_layer(name: str) -> str | None:
    """The layer a router tensor (``<layer>.gate.weight``, ``<layer>.router.weight``,
    ``<layer>.router.layer.weight``, ``blk.N.ffn_gate_inp.weight``) belongs to."""
    parts = name.split(".")
    if len(parts) >= 3 and parts[-1] == "weight" and parts[-2] in _ROUTER:
        return ".".join(parts[:-2])
    if len(parts) >= 4 and parts[-1] == "weight" and parts[-3] in _ROUTER:  # a router module's linear layer
        return ".".join(parts[:-3])
    return None


def _fused(layer: MoeLayer, claims: ExpertClaims | None) -> str:
    """For a layer whose stacked expert tensors are all matrices: set ``layer.fused`` where a count of
    experts times a stated width gives their leading axis, and return "" ; else the reason they
    cannot be counted."""
    leading = {t.shape[0] for t in layer.stacked}
    counts: list[tuple[int, str, bool]] = []
    if layer.router is not None:
        counts.append((layer.router.shape[0], f"router {layer.router.name} {list(layer.router.shape)}", True))
    if claims is not None and claims.num_experts is not None and claims.num_experts[0] > 1:
        counts.append((claims.num_experts[0], claims.num_experts[1], False))
    widths = claims.expert_widths if claims is not None else ()
    axis = ", ".join(map(str, sorted(leading)))
    if len(leading) == 1 and counts and counts[0][0] == next(iter(leading)):
        return ""  # one row per expert: stacked as usual
    for n, said, from_router in counts[:1]:  # the router's rows outrank the metadata's count
        for width, width_said in widths:
            if all(x == n * width for x in leading):
                layer.fused = (n, f"{n * width:,} = {n} experts ({said}) x {width:,} ({width_said})", from_router)
                return ""
    stated = "; ".join([c[1] for c in counts[:1]] + [w[1] for w in widths]) or "nothing states a count of experts"
    return (f"{layer.name}: its expert tensors are matrices whose leading axis ({axis}) holds every expert fused, "
            f"and no count of experts times a stated per-expert width gives it ({stated})")


def find_experts(tensors: Iterable[WeightMeta], claims: ExpertClaims | None = None) -> tuple[MoeLayer, ...]:
    """The mixture-of-experts layers the parameter tensors (tied copies left out: each counted
    once) show, in name order; empty for a dense model. A layer whose stacked tensors disagree on
    the expert axis, that mixes indexed and stacked experts, or whose fused experts nothing splits
    (``claims``: the metadata's counts and widths) carries the reason in ``problem``."""
    layers: dict[str, MoeLayer] = {}
    routers: dict[str, WeightMeta] = {}
    for t in tensors:
        where = _split(t.name)
        if where is None:
            owner = _router_layer(t.name)
            if owner is not None and len(t.shape) == 2:
                routers[owner] = t
            continue
        prefix, kind, index = where
        layer_found = layers.get(prefix)
        if layer_found is None:
            layer_found = layers[prefix] = MoeLayer(prefix)
        if kind == "shared":
            layer_found.shared_params += t.numel
        elif index:
            i = int(index)
            layer_found.expert_params[i] = layer_found.expert_params.get(i, 0) + t.numel
        elif t.shape:
            layer_found.stacked.append(t)
    out = []
    for name in sorted(layers):
        layer = layers[name]
        if not layer.expert_params and not layer.stacked:
            continue  # shared experts only: a dense layer with a differently named MLP
        layer.router = routers.get(name)
        leading = {t.shape[0] for t in layer.stacked}
        if layer.stacked and layer.expert_params:
            layer.problem = f"{name}: indexed and stacked expert tensors in one layer"
        elif layer.stacked and all(len(t.shape) <= 2 for t in layer.stacked):
            layer.problem = _fused(layer, claims)
        elif len(leading) > 1:
            layer.problem = (f"{name}: its stacked expert tensors disagree on the expert axis "
                             f"({', '.join(map(str, sorted(leading)))})")
        elif layer.stacked and layer.routed_params % layer.stacked[0].shape[0]:
            layer.problem = f"{name}: its stacked expert tensors do not split evenly by their leading axis"
        out.append(layer)
    return tuple(out)


def weight_experts(weights: Mapping[str, WeightMeta], parameters: frozenset[str],
                   claims: ExpertClaims | None) -> ExpertInputs | None:
    """The expert layers of a weight list (``parameters``: the storage keys that are parameters,
    each counted once) with the metadata's claims; None for a dense model of which nothing speaks."""
    seen: set[str] = set()
    tensors = []
    for w in weights.values():
        if w.storage_key in parameters and w.storage_key not in seen:
            seen.add(w.storage_key)
            tensors.append(w)
    layers = find_experts(tensors, claims)
    if not layers and (claims is None or (claims.num_experts or (0, ""))[0] <= 1):
        return None
    return ExpertInputs(layers, claims)
