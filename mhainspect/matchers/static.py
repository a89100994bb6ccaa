"""AttentionBlocks without a graph: from name-grouped projection weights plus head evidence.

Used by the module front end (module attributes, their config) and the checkpoint front end
(config.json, 3-D kernels). Pure: no torch, no I/O. Each number carries its evidence; which
offer wins, the defaults and the packed split are the shared rules of ``matchers.assembly``, and
where the widths contradict a module or config claim the widths win and the conflict is listed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence

from mhainspect.ir.weights import HEADS_FIRST, HeadOffers, WeightMeta, identity_by_name, tied_copy_by_name
from mhainspect.matchers.assembly import Decision, Widths, decide, norm_shared, offer_fit, offer_misfit
from mhainspect.matchers.gate import output_gate
from mhainspect.matchers.grouping import (
    SCORE_TABLE_HEAD_AXIS,
    GroupedBlock,
    HeadNorm,
    RoleWeights,
    group_attention,
    is_kv_row,
    kernel_head_split,
    linear_dims,
    projection,
    sampling_pair,
    ungrouped_attention,
)
from mhainspect.matchers.indexer import assemble_indexer
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

__all__ = ["KV_WIDTH_KIND", "ROOT_NAME", "HeadOffers", "assemble", "blocks_from_weights", "by_widths_only",
           "near_misses"]

ROOT_NAME = "(root)"  # a checkpoint whose attention weights sit at the top level (no module prefix)
NO_CONFIG_REASON = ("checkpoint without config.json: weight shapes give d_model and the projection widths, "
                    "not the number of heads")


def _dims(rw: RoleWeights, role: str, evidence: list[Evidence]) -> tuple[int | None, int | None]:
    split = kernel_head_split(rw.weight, role)
    if split is not None:
        in_f, out_f, h, d = split
        # The axes as read: a heads-first kernel says so (the file's shape alone reads either way).
        shape = f"{list(rw.weight.shape)}{' as [heads, in, head_dim]' if rw.weight.layout == HEADS_FIRST else ''}"
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
    """One AttentionBlock from a name-grouped block and what modules/configs say about its heads:
    the weights' widths and the offers go to ``assembly.decide``, which decides every number."""
    offers = tuple(offers)
    if group.latent is not None:
        return assemble_latent(group, offers, matcher=matcher, no_heads_reason=no_heads_reason)
    shown: list[Evidence] = []  # what the weights show, after what the offers say
    conflicts: list[str] = []
    widths: dict[str, tuple[int | None, int | None]] = {}
    for rw in group.roles:
        widths[rw.role] = _dims(rw, rw.role, shown)
        quant = rw.weight.quant
        if quant is not None and quant.provenance:  # a quantized weight: how its logical shape was read
            shown.append(Evidence("packing", quant.bits, EvidenceSource.WEIGHT_SHAPE,
                                  quant.provenance_of(rw.weight.name)))
            if quant.conflict:
                conflicts.append(quant.conflict)
    offers, misfits = _describing(offers, group, widths)
    evidence = [e for o in offers for e in o.evidence()] + misfits + shown
    head = _head_norm_evidence(group, widths)
    if head is not None:
        evidence.append(head)
    evidence.extend(_score_table_evidence(group))
    packed = group.role("qkv")
    kv = _kv_split(group, widths, evidence)
    if kv is not None:
        widths["k"], widths["v"] = (widths["kv"][0], kv[0]), (widths["kv"][0], kv[1])
    decision = decide(evidence, Widths(
        widths.get("q", (None, None))[1], widths.get("k", (None, None))[1], widths.get("v", (None, None))[1],
        o_in=widths.get("o", (None, None))[0], packed=widths["qkv"][1] if packed is not None else None,
        packed_label=f"{packed.weight.name} {list(packed.weight.shape)}" if packed is not None else ""),
        d_model=_model_width(group, widths))
    projections = _with_convs(_with_norms(_projections(group, widths, decision), group, decision), group)
    scale, scale_detail, scale_source = _scale(offers, scale, scale_detail)
    evidence = [*decision.evidence, *_block_evidence(group)]
    if scale is not None:
        evidence.append(Evidence("scale", scale, scale_source, scale_detail or "scale attribute"))
    unknown = None
    if decision.num_heads is None:
        unknown = ("; ".join(f"{m.detail}" for m in misfits) or no_heads_reason
                   or "no head count: weight shapes give the projection widths, not the heads")
        if decision.unsplit is not None:
            unknown = f"{unknown}; {decision.unsplit}"
    runs = next((o.applications for o in offers if o.applications is not None), None)
    if runs is not None and runs > 1:
        said = next(o for o in offers if o.applications is not None)
        evidence.append(Evidence("applications", runs, said.source, said.detail))
    indexer, indexer_params, indexer_evidence = assemble_indexer(group.indexer, decision.d_model)
    evidence.extend(indexer_evidence)
    o_in = widths.get("o", (None, None))[0] or \
        (decision.num_heads * decision.d_v if decision.num_heads and decision.d_v else None)
    gate, gate_evidence, gate_module = output_gate(group.gates, decision.d_model, o_in, decision.num_heads)
    evidence.extend(gate_evidence)
    others = _unclaimed(group, projections, gate_module)
    evidence.extend(_other_evidence(others))
    other = None if group.cross or group.kv_from is not None else _other_source(group, widths)
    if other is not None:
        evidence.append(other)
    return AttentionBlock(
        name=group.name, matcher=matcher,
        kind=BlockKind.CROSS if group.cross or other is not None else BlockKind.SELF,
        num_heads=decision.num_heads, num_kv_heads=decision.num_kv_heads, d_model=decision.d_model,
        d_k=decision.d_k, d_v=decision.d_v,
        params=ParamBreakdown.from_projections(
            projections, extra=sum(t.numel for t in group.extras if not is_kv_row(t.name)) + sum(t.numel for t in others),
            kv_rows=sum(t.numel for t in group.extras if is_kv_row(t.name)), indexer=indexer_params, gate=gate),
        projections=tuple(projections), evidence=tuple(evidence), scale=scale, scale_known=scale is not None,
        anchor=group.owner, unknown_reason=unknown, conflicts=tuple(dict.fromkeys(conflicts + list(decision.conflicts))),
        applications=runs if runs is not None else 1, kv_cache_shared_from=group.kv_from, indexer=indexer,
    )


def _unclaimed(group: GroupedBlock, projections: Sequence[Projection], gate: str | None) -> list[WeightMeta]:
    """The parameters the attention module holds that the block does not count (``GroupedBlock.others``
    less the Q/K norms and the output gate it took): its ``extra``."""
    taken = {x.rpartition(".")[0] for p in projections for x in (p.norm, p.conv) if x}
    if gate is not None:
        taken.add(gate)
    return [t for t in group.others if t.name.rpartition(".")[0] not in taken]


_ROLE_WORDS = {"q": "q", "query": "q", "k": "k", "key": "k", "v": "v", "value": "v"}


def _with_convs(projections: list[Projection], group: GroupedBlock) -> list[Projection]:
    """Q's, K's or V's projection with the depthwise convolution over the sequence the attention module
    applies to its output (Inkling's ``k_sconv.conv1d`` [C, 1, kernel]): a tensor the module holds
    (``GroupedBlock.others``) shaped [width, 1, kernel] whose module's first name below the attention
    module has that role's word, its width the role's projection width. It makes the K (or V) the
    scores read, so it counts in the role."""
    out = list(projections)
    for t in group.others:
        if len(t.shape) != 3 or t.shape[1] != 1 or t.shape[2] < 2 or not t.name.startswith(group.owner + "."):
            continue
        first = t.name[len(group.owner) + 1:].split(".", 1)[0].lower()
        sides = {_ROLE_WORDS[w] for w in first.replace("-", "_").split("_") if w in _ROLE_WORDS}
        if len(sides) != 1:
            continue
        (side,) = sides
        at = [i for i, p in enumerate(out) if p.role == side]
        if len(at) != 1 or out[at[0]].out_features != t.shape[0] or out[at[0]].conv is not None:
            continue
        out[at[0]] = dataclasses.replace(out[at[0]], conv=t.name, conv_params=t.numel)
    return out


def _other_evidence(others: Sequence[WeightMeta]) -> list[Evidence]:
    return [Evidence("extra", t.numel, EvidenceSource.WEIGHT_SHAPE,
                     f"{t.name} {list(t.shape)}: held by the attention module, none of its projections (outside the total)")
            for t in others]


def _describing(offers: tuple[HeadOffers, ...], group: GroupedBlock,
                widths: Mapping[str, tuple[int | None, int | None]]) -> tuple[tuple[HeadOffers, ...], list[Evidence]]:
    """The offers with the head sizes and scale of each that describes a model of other widths than
    the block's taken out (``assembly.offer_misfit``), and why, as evidence of no count. An offer that
    does not describe the block (or says no count) gives way to the one of its alternatives (another
    config of the tree, a stage) whose widths describe it (``assembly.offer_fit``)."""
    model = _model_width(group, widths)
    d_model = model[0] if model else None
    attention = widths.get("q", (None, None))[1] or widths.get("o", (None, None))[0]
    k_width = widths.get("k", (None, None))[1]
    kept: list[HeadOffers] = []
    misfits: list[Evidence] = []
    for o in offers:
        silent = not (o.num_heads or o.num_kv_heads or o.head_dim)
        fit = offer_fit(o.widths, o.num_heads, o.num_kv_heads, o.head_dim, d_model, attention, k_width)
        if fit is not None and not silent:
            kept.append(o)
            continue
        chosen = _alternative(o, d_model, attention, k_width)
        if chosen is not None:
            kept.append(dataclasses.replace(chosen, detail=f"{chosen.detail} (its widths describe this block; "
                                                           f"not {o.detail})" if not silent else chosen.detail))
            continue
        why = offer_misfit(o.widths, o.num_heads, o.head_dim, d_model, attention)
        if why is None:  # no count, or numbers the shapes overrule (the conflict is listed)
            kept.append(o)
            continue
        kept.append(dataclasses.replace(o, num_heads=None, num_kv_heads=None, head_dim=None, v_head_dim=None,
                                        scale=None))
        misfits.append(Evidence("num_heads", None, o.source, f"{o.detail}: {why}"))
    return tuple(kept), misfits


def _alternative(offer: HeadOffers, d_model: int | None, attention: int | None, k_width: int | None
                 ) -> HeadOffers | None:
    """The alternative of ``offer`` that describes the block best (``assembly.offer_fit``), when every
    alternative that describes it as well gives the same numbers; else None."""
    ranked = [(fit, a) for a in offer.alternatives if (a.num_heads or a.head_dim) and (fit := offer_fit(
        a.widths, a.num_heads, a.num_kv_heads, a.head_dim, d_model, attention, k_width)) is not None]
    if not ranked:
        return None
    best = max(fit for fit, _ in ranked)
    top = [a for fit, a in ranked if fit == best]
    if len({(a.num_heads, a.num_kv_heads, a.head_dim, a.v_head_dim) for a in top}) > 1:
        return None
    return top[0]


def _other_source(group: GroupedBlock, widths: Mapping[str, tuple[int | None, int | None]]) -> Evidence | None:
    """The kind of a block whose name does not say it: K and V projected from a width Q is not
    (NeMo's transformer decoder's ``second_sub_layer`` reads the encoder's output) read a source
    of their own, as a graph would show: cross. Q, K and V each a projection of its own."""
    q, k, v = (widths.get(r, (None, None))[0] for r in ("q", "k", "v"))
    if group.latent is not None or q is None or k is None or v is None or k != v or k == q:
        return None
    return Evidence("kind", None, EvidenceSource.WEIGHT_SHAPE,
                    f"{KV_WIDTH_KIND} {k}, Q from width {q}: a source of their own (cross)")


# How the evidence of a kind read from the widths begins: a source that records the call (a Keras
# config) says the same with its own words, and its evidence replaces this one (``by_widths_only``).
KV_WIDTH_KIND = "K and V are projected from width"


def by_widths_only(block: AttentionBlock) -> bool:
    """Whether a block is cross-attention only because its K/V read another width than Q."""
    kinds = [e for e in block.evidence if e.field == "kind"]
    return len(kinds) == 1 and kinds[0].source is EvidenceSource.WEIGHT_SHAPE and kinds[0].detail.startswith(KV_WIDTH_KIND)


def _block_evidence(group: GroupedBlock) -> list[Evidence]:
    """What the grouping found beside the projections: a learned query (the kind), extra tables."""
    out: list[Evidence] = []
    if group.learned_query is not None:
        t = group.learned_query
        out.append(Evidence("kind", None, EvidenceSource.WEIGHT_SHAPE,
                            f"Q is projected from the learned query {t.name} {list(t.shape)} and K/V from the "
                            "sequence: a source of their own (cross)"))
    out.extend(Evidence("kv_rows" if is_kv_row(t.name) else "extra", t.numel, EvidenceSource.WEIGHT_SHAPE,
                        f"{t.name} {list(t.shape)}") for t in group.extras)
    return out


def _scale(offers: Sequence[HeadOffers], scale: float | None, detail: str) -> tuple[float | None, str, EvidenceSource]:
    """The scale a module attribute gives; else the first offer that gives it (a config's rule)."""
    if scale is None:
        said = next((o for o in offers if o.scale is not None), None)
        if said is not None:
            return said.scale, said.detail, EvidenceSource(said.source)
    return scale, detail, EvidenceSource.MODULE


def _model_width(group: GroupedBlock, widths: Mapping[str, tuple[int | None, int | None]]
                 ) -> tuple[int | None, str] | None:
    """d_model as the weights show it: the input width of Q (or of the packed weight), else O's output."""
    for role in ("qkv", "q"):
        rw = group.role(role)
        if rw is not None and widths[role][0]:
            return widths[role][0], f"input width of Q projection {rw.module}"
    o = group.role("o")
    if o is not None and widths["o"][1]:
        return widths["o"][1], f"output width of {o.module}"
    return None


def _projections(group: GroupedBlock, widths: Mapping[str, tuple[int | None, int | None]], decision: Decision
                 ) -> list[Projection]:
    """Q/K/V/O as counted: a packed weight by its split, or whole under Q when nothing splits it."""
    out: list[Projection] = []
    kv = group.role("kv")
    if kv is not None:
        in_f, total = widths["kv"]
        wk, wv = widths.get("k", (None, None))[1], widths.get("v", (None, None))[1]
        if wk and wv and total:
            out += [projection(r, kv, in_f, w, (w, total)) for r, w in (("k", wk), ("v", wv))]
        else:  # split unknown: counted once, whole, on K
            out.append(projection("k", kv, in_f, None))
    packed = group.role("qkv")
    if packed is not None:
        in_f, total = widths["qkv"]
        if decision.split is not None and total:
            for role, width in zip(("q", "k", "v"), decision.split.parts):
                out.append(projection(role, packed, in_f, width, (width, total), group.role_bias(role)))
        else:  # split unknown: the packed weight counts once, whole, on Q (as the graph path does)
            out.append(projection("q", packed, in_f, None, own_bias=group.role_bias("q")))
            out.extend(Projection(r, None, None, None, 0, b.name, b.numel, group.owner)
                       for r, b in group.role_biases if r != "q")
    for role in ("q", "k", "v", "o"):
        single = group.role(role)
        if single is not None:
            in_f, out_f = widths[role]
            out.append(projection(role, single, in_f, out_f, own_bias=group.role_bias(role)))
    out.sort(key=lambda p: "qkvo".index(p.role))
    return out


def _kv_split(group: GroupedBlock, widths: Mapping[str, tuple[int | None, int | None]],
              evidence: list[Evidence]) -> tuple[int, int] | None:
    """K and V widths of a packed [K; V] weight (``kv``) beside a separate Q: g·d_k and g·d_v, whose
    ratio d_k : d_v is Q's width (h·d_k) to O's input (h·d_v) whatever the head counts. None when
    the widths do not give whole parts (then the weight counts whole, on K)."""
    kv = group.role("kv")
    if kv is None:
        return None
    total, wq, o_in = widths["kv"][1], widths.get("q", (None, None))[1], widths.get("o", (None, None))[0]
    if not (total and wq and o_in) or (total * wq) % (wq + o_in):
        return None
    k = total * wq // (wq + o_in)
    evidence.append(Evidence("kv_split", None, EvidenceSource.WEIGHT_SHAPE,
                             f"packed K/V {kv.weight.name} {total} wide split {k} + {total - k} "
                             f"as Q's width {wq} to O's input {o_in} (d_k : d_v)"))
    return k, total - k


def _head_norm_evidence(group: GroupedBlock, widths: Mapping[str, tuple[int | None, int | None]]) -> Evidence | None:
    """d_k read off per-head Q/K norms (Qwen3, Gemma 3, HunYuan: [d_k]), a shape that outranks a
    config's head_dim; a norm as wide as Q's projection (OLMo 2) is over all heads and says nothing.
    Only vectors whose names say Q or K: another vector under the module says nothing of d_k."""
    named = [n.weight for n in group.head_norms if n.side is not None and len(n.weight.shape) == 1]
    dims = {t.shape[0] for t in named}
    wq = widths.get("q", (None, None))[1]
    if len(dims) != 1 or wq is None:
        return None
    (d,) = dims
    if d <= 0 or d >= wq or wq % d:
        return None
    names = " and ".join(t.name for t in named)
    return Evidence("d_k", d, EvidenceSource.HEAD_SHAPE, f"per-head norm {names} [{d}]")


def _with_norms(projections: list[Projection], group: GroupedBlock, decision: Decision) -> list[Projection]:
    """Q's and K's projections with the norms applied to them before the scores (``HeadNorm``): a
    candidate is a norm of the side its name says when its shape fits that side
    (``assembly.norm_shared``); one whose name says neither side is a norm of the one side whose
    width it has (the other side's differs). Each side takes one norm (weight and bias)."""
    d = decision.d_k
    fit = {"q": (decision.q_width, decision.num_heads), "k": (decision.k_width, decision.num_kv_heads)}
    taken: dict[str, tuple[HeadNorm, bool]] = {}
    for norm in group.head_norms:
        shape = norm.weight.shape
        side = norm.side
        if side is None:
            sides = [x for x in ("q", "k") if shape == (fit[x][0],) and fit[x][0] != d]
            side = sides[0] if len(sides) == 1 else None
        if side is None or side in taken:
            continue
        shared = norm_shared(shape, d, *fit[side])
        if shared is not None:
            taken[side] = norm, shared
    out: list[Projection] = []
    for p in projections:
        found = taken.pop(p.role, None)
        if found is not None:
            norm, shared = found
            p = dataclasses.replace(p, norm=norm.weight.name, norm_params=norm.params, norm_shared=shared)
        out.append(p)
    return out


def _score_table_evidence(group: GroupedBlock) -> list[Evidence]:
    """The heads read off the block's own score bias tables (Swin's relative_position_bias_table
    [(2W-1)², h], LeViT's attention_biases [h, N]): one entry per head of the scores, observed in
    the weights, so it outranks a config or --num-heads (which then is a conflict, not applied).
    The table is per query head and says nothing of K/V heads: as many are offered at the rank of a
    width (a config or option saying otherwise wins), as the assembler's default would take them."""
    out: list[Evidence] = []
    for t in group.extras:
        axis = SCORE_TABLE_HEAD_AXIS.get(t.name.replace("/", ".").rpartition(".")[2])
        if axis is not None and len(t.shape) == 2 and t.shape[axis] > 0:
            what = f"the score bias table {t.name} {list(t.shape)}"
            out.append(Evidence("num_heads", t.shape[axis], EvidenceSource.SCORE_SHAPE, f"head axis of {what}"))
            out.append(Evidence("num_kv_heads", t.shape[axis], EvidenceSource.WEIGHT_SHAPE,
                                f"as many as the query heads of {what} (no K/V head count in the weights)"))
            break  # one table per block; a second (shared) one says the same
    return out


def near_misses(weights: Mapping[str, WeightMeta], groups: Iterable[GroupedBlock], matcher: str) -> list[Miss]:
    """Attention-named modules whose projections make none of ``groups`` (``grouping.ungrouped_attention``),
    each with the reason its weights show."""
    return [_ungrouped(matcher, weights, path, names) for path, names in ungrouped_attention(weights, groups)]


def _ungrouped(matcher: str, weights: Mapping[str, WeightMeta], path: str, names: Sequence[str]) -> Miss:
    """Why an attention-named module is no block: a deformable attention's sampling projections
    (``grouping.sampling_pair``: it caches nothing per token), else no K and V the rules here can read."""
    pair = sampling_pair(weights, path, names)
    if pair is not None:
        offsets, w2, points, w1 = pair
        return Miss(matcher, path, (
            f"sampling (deformable) attention: {offsets} ({w2} wide) = 2 × {points} ({w1}), an x and y offset "
            f"and a weight for each of {w1} points (heads × levels × points) sampled per query from a "
            "feature map; the weights are normalised over those points, not over keys, and no K/V is "
            "cached per token: not counted as a block"), caches_nothing=True)
    stacked = [f"{n} {list(meta.shape)}" for n in names
               if (meta := weights.get(f"{path}.{n}.weight")) is not None and len(meta.shape) == 3]
    if stacked:
        return Miss(matcher, path, (
            f"attention module with projections {', '.join(names)}, of which {', '.join(stacked)} are stacked per "
            "expert ([experts, out, in]): a mixture of attention experts routed per token, whose heads no rule "
            "here reads: not counted as a block"))
    return Miss(matcher, path, f"attention module with projections {', '.join(names)} but no separate K and V "
                               "projections or a fused QKV (e.g. latent K/V, MLA): not counted as a block")


def blocks_from_weights(weights: Mapping[str, WeightMeta], offers_for: Callable[[str], Sequence[HeadOffers]] | None,
                        kv_source: Callable[[str], str | None] | None = None
                        ) -> tuple[list[AttentionBlock], list[Miss]]:
    """Blocks of a checkpoint: name-grouped projections, heads from ``offers_for(block name)``
    (what its config says; None: there is no config); and the near misses of the same grouping.
    A weight several blocks use (one storage, or a copy the config ties to another:
    ``ir.weights.parameter_identity``) counts in one block only, as in a graph: the first, or where a
    tie declares a source, the first block using the source. ``kv_source``: module path -> the module
    whose K/V cache it reads, where a config says so (``grouping.group_attention``)."""
    groups = group_attention(weights, kv_source)
    blocks: list[AttentionBlock] = []
    for group in groups:
        if not group.name:
            group = dataclasses.replace(group, name=ROOT_NAME)
        offers = list(offers_for(group.name)) if offers_for is not None else []
        blocks.append(assemble(group, offers, matcher=Matcher.CHECKPOINT,
                               no_heads_reason="" if offers_for is not None else NO_CONFIG_REASON))
    return count_shared_once(blocks, identity_by_name(weights), tied_copy_by_name(weights)), near_misses(weights, groups, Matcher.CHECKPOINT)
