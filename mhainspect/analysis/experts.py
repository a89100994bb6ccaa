"""Mixture of experts: the parameters one token uses, beside the total.

    active = total − every routed expert + Σ over MoE layers (experts per token × one expert)

Shapes count the experts (matchers.experts: indexed modules or a stacked leading axis, a router
``[E, d]`` confirming; experts fused along one axis split by the router's rows or the metadata's
count times a width the metadata states); how many a token uses is the config's or GGUF metadata's word (nothing in
the weights says it). Shared experts, routers, attention, embeddings and norms run for every token.
Where the count of experts disagrees with the metadata the shapes win and a warning says so; where
something the sum needs is not known the figure is None with the reason, never a guess.
"""

from __future__ import annotations

from mhainspect.matchers.experts import ExpertClaims, ExpertInputs, MoeLayer
from mhainspect.results import Evidence, EvidenceSource, MixtureOfExperts, ReportWarning, WarningCode

__all__ = ["mixture_of_experts"]


def _evidence(layers: tuple[MoeLayer, ...], claims: ExpertClaims | None, k: int | None) -> list[Evidence]:
    out = []
    if layers:
        first = layers[0]
        # (fused experts' own words name the router when its rows gave the count)
        router = (f"; router {first.router.name} {list(first.router.shape)}"
                  if first.router is not None and first.fused is None else "")
        more = f" (and {len(layers) - 1} more MoE layer{'s' if len(layers) != 2 else ''})" if len(layers) > 1 else ""
        source = EvidenceSource.CONFIG if first.count_from_metadata else EvidenceSource.WEIGHT_SHAPE
        if source is EvidenceSource.CONFIG and claims is not None:
            source = claims.source
        out.append(Evidence("num_experts", first.num_experts, source, first.evidence() + router + more))
    source = claims.source if claims is not None else EvidenceSource.CONFIG
    if claims is not None and claims.experts_per_token is not None and k is not None:
        out.append(Evidence("experts_per_token", k, source, claims.experts_per_token[1]))
    if claims is not None and claims.num_shared_experts is not None:
        out.append(Evidence("num_shared_experts", claims.num_shared_experts[0], source, claims.num_shared_experts[1]))
    return out


def _active(layers: tuple[MoeLayer, ...], k: int | None, total_params: int) -> tuple[int | None, str | None]:
    """The active parameters, or None and why."""
    if not layers:
        return None, "the metadata names experts, but no tensor was identified as one (no 'experts' module or " \
                     "*_exps tensor)"
    problem = next((layer.problem for layer in layers if layer.problem), "")
    if problem:
        return None, problem
    if k is None:
        return None, ("nothing says how many experts a token uses (config num_experts_per_tok, GGUF "
                      "expert_used_count)")
    unequal = next((layer for layer in layers if layer.params_per_expert is None), None)
    if unequal is not None:
        return None, f"{unequal.name}: its experts differ in size, so the parameters a token uses depend on the routing"
    too_many = next((layer for layer in layers if k > (layer.num_experts or 0)), None)
    if too_many is not None:
        return None, f"{k} experts per token, but {too_many.name} has {too_many.num_experts}"
    routed = sum(layer.routed_params for layer in layers)
    return total_params - routed + sum(k * (layer.params_per_expert or 0) for layer in layers), None


def mixture_of_experts(inputs: ExpertInputs | None, total_params: int
                       ) -> tuple[MixtureOfExperts | None, tuple[ReportWarning, ...]]:
    """The model's MixtureOfExperts (None for a dense model) and warnings (metadata the shapes contradict)."""
    if inputs is None:
        return None, ()
    layers, claims = inputs.layers, inputs.claims
    counts = {layer.num_experts for layer in layers}
    num_experts = counts.pop() if len(counts) == 1 else None
    warnings = []
    claimed = claims.num_experts if claims is not None else None
    if claimed is not None and num_experts is not None and claimed[0] != num_experts:
        warnings.append(ReportWarning(f"{claimed[1]}, but the expert tensors show {num_experts} experts per layer "
                                      f"({layers[0].evidence()}): the shapes are counted", WarningCode.LOADER))
    if not layers and claimed is not None:
        num_experts = claimed[0]
    k = claims.experts_per_token[0] if claims is not None and claims.experts_per_token is not None else None
    active, reason = _active(layers, k, total_params)
    per_expert = {layer.params_per_expert for layer in layers}
    evidence = _evidence(layers, claims, k)
    if active is not None:
        evidence.append(Evidence("active_params", active, EvidenceSource.WEIGHT_SHAPE,
                                 f"{total_params:,} total − {sum(x.routed_params for x in layers):,} in routed experts + "
                                 f"{len(layers)} MoE layer{'s' if len(layers) != 1 else ''} × {k} × "
                                 f"{'/'.join(f'{p:,}' for p in sorted(x for x in per_expert if x))} per expert"))
    moe = MixtureOfExperts(
        moe_layers=len(layers), num_experts=num_experts, experts_per_token=k,
        num_shared_experts=claims.num_shared_experts[0] if claims and claims.num_shared_experts else None,
        expert_params=sum(layer.routed_params for layer in layers),
        params_per_expert=per_expert.pop() if len(per_expert) == 1 else None,
        shared_expert_params=sum(layer.shared_params for layer in layers),
        active_params=active, reason=reason, evidence=tuple(evidence))
    return moe, tuple(warnings)
