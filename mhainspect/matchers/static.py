"""AttentionBlocks without a graph: from name-grouped projection weights plus head evidence.

Used by the module front end (module attributes, their config) and the checkpoint front end
(config.json, 3-D kernels). Pure: no torch, no I/O. Each number carries its evidence; which
offer wins, the defaults and the packed split are the shared rules of ``matchers.assembly``, and
where the widths contradict a module or config claim the widths win and the conflict is listed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence

from mhainspect.ir.weights import HeadOffers, WeightMeta, identity_by_name, tied_copy_by_name
from mhainspect.matchers.assembly import default_kv_heads, per_head, pick, shapes_win, split_packed, width_conflicts
from mhainspect.matchers.grouping import (
    GroupedBlock,
    RoleWeights,
    group_attention,
    kernel_head_split,
    linear_dims,
    projection,
    ungrouped_attention,
)
from mhainspect.matchers.latent import assemble_latent
from mhainspect.matchers.sharing import count_shared_once
from mhainspect.results import (
    AttentionBlock,
    BlockKind,
    Evidence,
    EvidenceSource,
    Matcher,
    Miss,
    ParamBreakdown,
    Projection,
)

__all__ = ["ROOT_NAME", "HeadOffers", "assemble", "blocks_from_weights", "near_misses"]

ROOT_NAME = "(root)"  # a checkpoint whose attention weights sit at the top level (no module prefix)
NO_CONFIG_REASON = ("checkpoint without config.json: weight shapes give d_model and the projection widths, "
                    "not the number of heads")


def _dims(rw: RoleWeights, role: str, evidence: list[Evidence]) -> tuple[int | None, int | None]:
    split = kernel_head_split(rw.weight, role)
    if split is not None:
        in_f, out_f, h, d = split
        shape = list(rw.weight.shape)
        if role == "q":
            evidence.append(Evidence("num_heads", h, EvidenceSource.KERNEL_SHAPE, f"Q kernel {rw.weight.name} {shape}"))
            evidence.append(Evidence("d_k", d, EvidenceSource.KERNEL_SHAPE, f"Q kernel {rw.weight.name} {shape}"))
        elif role == "k":
            evidence.append(Evidence("num_kv_heads", h, EvidenceSource.KERNEL_SHAPE, f"K kernel {rw.weight.name} {shape}"))
        elif role == "v":
            evidence.append(Evidence("d_v", d, EvidenceSource.KERNEL_SHAPE, f"V kernel {rw.weight.name} {shape}"))
        return in_f, out_f
    dims = linear_dims(rw.weight, rw.module, packed=role == "qkv")
    return dims if dims is not None else (None, None)


def assemble(group: GroupedBlock, offers: Iterable[HeadOffers], *, matcher: str, scale: float | None = None,
             scale_detail: str = "", no_heads_reason: str = "") -> AttentionBlock:
    """One AttentionBlock from a name-grouped block and what modules/configs say about its heads."""
    if group.latent is not None:
        return assemble_latent(group, tuple(offers), matcher=matcher, no_heads_reason=no_heads_reason)
    evidence: list[Evidence] = []
    offers = tuple(offers)
    for o in offers:
        evidence.extend(o.evidence())
    scale_source = EvidenceSource.MODULE
    if scale is None:  # no attribute says: the first offer that gives the scale (a config's rule)
        said = next((o for o in offers if o.scale is not None), None)
        if said is not None:
            scale, scale_detail, scale_source = said.scale, said.detail, EvidenceSource(said.source)
    conflicts: list[str] = []
    widths: dict[str, tuple[int | None, int | None]] = {}
    for rw in group.roles:
        widths[rw.role] = _dims(rw, rw.role, evidence)
        quant = rw.weight.quant
        if quant is not None and quant.provenance:  # a quantized weight: how its logical shape was read
            evidence.append(Evidence("packing", quant.bits, EvidenceSource.WEIGHT_SHAPE,
                                     quant.provenance_of(rw.weight.name)))
            if quant.conflict:
                conflicts.append(quant.conflict)

    head = _head_norm_evidence(group, widths)
    if head is not None:
        evidence.append(head)
    h, c1 = pick(evidence, "num_heads")
    g, c2 = pick(evidence, "num_kv_heads")
    d_k, c3 = pick(evidence, "d_k")
    d_v, c4 = pick(evidence, "d_v")
    conflicts += c1 + c2 + c3 + c4

    projections: list[Projection] = []
    unsplit: str | None = None
    packed = group.role("qkv")
    if packed is not None:
        in_f, total = widths["qkv"]
        o_in = widths["o"][0] if "o" in widths else None
        split = split_packed(total, h, g, d_k, d_v, o_in)
        if split is not None and total:
            for role, width in zip(("q", "k", "v"), split.parts):
                projections.append(projection(role, packed, in_f, width, (width, total), group.role_bias(role)))
                widths[role] = (in_f, width)
            evidence.append(Evidence("qkv_split", None, EvidenceSource.WEIGHT_SHAPE,
                                     f"packed {packed.weight.name} {list(packed.weight.shape)} split "
                                     + " + ".join(str(p) for p in split.parts)
                                     + (f" ({split.assumption})" if split.assumption else "")))
            if split.conflict is not None and split.kv_heads is not None:
                g = split.kv_heads  # the width is what the block computes with: it wins over a claim
                evidence.append(Evidence("num_kv_heads", g, EvidenceSource.WEIGHT_SHAPE, split.conflict))
                conflicts.append(split.conflict)
        else:
            # Split unknown: the packed weight counts once, whole, on Q (as the graph path does).
            unsplit = (f"packed {packed.weight.name} {list(packed.weight.shape)}: nothing gives its Q/K/V split "
                       "(no head counts, no O projection width that fits), so it is counted whole under Q")
            projections.append(projection("q", packed, in_f, None, own_bias=group.role_bias("q")))
            projections.extend(Projection(r, None, None, None, 0, b.name, b.numel, group.owner)
                               for r, b in group.role_biases if r != "q")
            evidence.append(Evidence("qkv_split", None, EvidenceSource.WEIGHT_SHAPE, unsplit))
            if h is not None:
                conflicts.append(f"cannot split packed {packed.weight.name} {list(packed.weight.shape)} into Q/K/V "
                                 "with the head counts offered")
    for role in ("q", "k", "v", "o"):
        single = group.role(role)
        if single is not None:
            in_f, out_f = widths[role]
            projections.append(projection(role, single, in_f, out_f, own_bias=group.role_bias(role)))
    projections.sort(key=lambda p: "qkvo".index(p.role))

    wq = widths.get("q", (None, None))[1]
    wk = widths.get("k", (None, None))[1]
    wv = widths.get("v", (None, None))[1]
    if h is None and (n := per_head(wq, d_k)) is not None:
        h = n
        evidence.append(Evidence("num_heads", h, EvidenceSource.WEIGHT_SHAPE, f"Q width {wq} / d_k {d_k}"))
    if d_k is None and (n := per_head(wq, h)) is not None:
        d_k = n
        evidence.append(Evidence("d_k", d_k, EvidenceSource.WEIGHT_SHAPE, f"Q width {wq} / heads {h}"))
    h, g, d_v = shapes_win(evidence, conflicts, h, g, d_k, d_v, widths)
    if g is None and d_k and (n := per_head(wk, d_k)) is not None and h is not None:
        g = n
        evidence.append(Evidence("num_kv_heads", g, EvidenceSource.WEIGHT_SHAPE, f"K width {wk} / d_k {d_k}"))
    if g is None:
        g = default_kv_heads(h, wk)
    if d_v is None and (n := per_head(wv, g)) is not None:
        d_v = n
        evidence.append(Evidence("d_v", d_v, EvidenceSource.WEIGHT_SHAPE, f"V width {wv} / kv heads {g}"))
    conflicts.extend(width_conflicts(h, g, d_k, wq, wk))

    d_model = None
    q_proj = next((p for p in projections if p.role == "q"), None)
    o_proj = next((p for p in projections if p.role == "o"), None)
    if q_proj is not None and q_proj.in_features:
        d_model = q_proj.in_features
        evidence.append(Evidence("d_model", d_model, EvidenceSource.WEIGHT_SHAPE, f"input width of Q projection {q_proj.node}"))
    elif o_proj is not None and o_proj.out_features:
        d_model = o_proj.out_features
        evidence.append(Evidence("d_model", d_model, EvidenceSource.WEIGHT_SHAPE, f"output width of {o_proj.node}"))

    if group.learned_query is not None:
        t = group.learned_query
        evidence.append(Evidence("kind", None, EvidenceSource.WEIGHT_SHAPE,
                                 f"Q is projected from the learned query {t.name} {list(t.shape)} and K/V from the "
                                 "sequence: a source of their own (cross)"))
    extra = 0
    for t in group.extras:
        extra += t.numel
        evidence.append(Evidence("extra", t.numel, EvidenceSource.WEIGHT_SHAPE, f"{t.name} {list(t.shape)}"))
    if scale is not None:
        evidence.append(Evidence("scale", scale, scale_source, scale_detail or "scale attribute"))
    unknown = None
    if unsplit is not None:
        h = g = None  # with Q's width unknown, any head count would be a guess
    if h is None:
        g = None
        unknown = no_heads_reason or "no head count: weight shapes give the projection widths, not the heads"
        if unsplit is not None:
            unknown = f"{unknown}; {unsplit}"
    params = ParamBreakdown.from_projections(projections, extra=extra)
    runs = next((o for o in offers if o.applications is not None), None)
    if runs is not None and runs.applications is not None and runs.applications > 1:
        evidence.append(Evidence("applications", runs.applications, runs.source, runs.detail))
    return AttentionBlock(
        name=group.name, matcher=matcher, kind=BlockKind.CROSS if group.cross else BlockKind.SELF,
        num_heads=h, num_kv_heads=g, d_model=d_model, d_k=d_k, d_v=d_v, params=params,
        projections=tuple(projections), evidence=tuple(evidence), scale=scale, scale_known=scale is not None,
        anchor=group.owner, unknown_reason=unknown, conflicts=tuple(dict.fromkeys(conflicts)),
        applications=runs.applications if runs is not None and runs.applications is not None else 1,
    )



def _head_norm_evidence(group: GroupedBlock, widths: Mapping[str, tuple[int | None, int | None]]) -> Evidence | None:
    """d_k read off per-head Q/K norms (Qwen3, Gemma 3: [d_k]), a shape that outranks a config's
    head_dim; a norm as wide as Q's projection (OLMo 2) is over all heads and says nothing."""
    dims = {t.shape[0] for t in group.head_norms}
    wq = widths.get("q", (None, None))[1]
    if len(dims) != 1 or wq is None:
        return None
    (d,) = dims
    if d <= 0 or d >= wq or wq % d:
        return None
    names = " and ".join(t.name for t in group.head_norms)
    return Evidence("d_k", d, EvidenceSource.HEAD_SHAPE, f"per-head norm {names} [{d}]")


def near_misses(weights: Mapping[str, WeightMeta], groups: Iterable[GroupedBlock], matcher: str) -> list[Miss]:
    """Attention-named modules whose projections make none of ``groups`` (``grouping.ungrouped_attention``)."""
    return [Miss(matcher, path, f"attention module with projections {', '.join(names)} but no separate K and V "
                                "projections or a fused QKV (e.g. latent K/V, MLA): not counted as a block")
            for path, names in ungrouped_attention(weights, groups)]


def blocks_from_weights(weights: Mapping[str, WeightMeta], offers_for: Callable[[str], Sequence[HeadOffers]] | None
                        ) -> tuple[list[AttentionBlock], list[Miss]]:
    """Blocks of a checkpoint: name-grouped projections, heads from ``offers_for(block name)``
    (what its config says; None: there is no config); and the near misses of the same grouping.
    A weight several blocks use (one storage, or a copy the config ties to another:
    ``static_ir.parameter_identity``) counts in one block only, as in a graph: the first, or where a
    tie declares a source, the first block using the source."""
    groups = group_attention(weights)
    blocks: list[AttentionBlock] = []
    for group in groups:
        if not group.name:
            group = dataclasses.replace(group, name=ROOT_NAME)
        offers = list(offers_for(group.name)) if offers_for is not None else []
        blocks.append(assemble(group, offers, matcher=Matcher.CHECKPOINT,
                               no_heads_reason="" if offers_for is not None else NO_CONFIG_REASON))
    return count_shared_once(blocks, identity_by_name(weights), tied_copy_by_name(weights)), near_misses(weights, groups, Matcher.CHECKPOINT)
