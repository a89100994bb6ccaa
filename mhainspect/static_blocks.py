"""AttentionBlocks without a graph: from grouped projection weights plus head evidence.

Used by the known-module recognisers (module attributes, their config) and the checkpoint
loader (config.json, 3-D kernels). Pure: no torch, no I/O. Each number carries its evidence;
where sources disagree the stronger one wins and the disagreement is reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mhainspect.findings import (
    AttentionBlock,
    Evidence,
    ParamBreakdown,
    Projection,
)
from mhainspect.loaders.roles import GroupedBlock, RoleWeights, kernel_head_split, linear_dims, projection

# Stronger sources first. "head_shape" is a tensor whose shape is one head (a per-head Q/K norm);
# "gguf" is a GGUF file's metadata, a claim like a config.
_PRIORITY = {"kernel_shape": 0, "head_shape": 0, "module": 1, "config": 2, "gguf": 2, "weight_shape": 3}


@dataclass(frozen=True)
class HeadOffers:
    """What a module or config says about one block (None: it does not say)."""

    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    v_head_dim: int | None = None
    source: str = "config"  # "module" or "config"
    detail: str = ""

    def evidence(self) -> list[Evidence]:
        out: list[Evidence] = []
        for field, value in (("num_heads", self.num_heads), ("num_kv_heads", self.num_kv_heads),
                             ("d_k", self.head_dim), ("d_v", self.v_head_dim)):
            if isinstance(value, int) and value > 0:
                out.append(Evidence(field, value, self.source, self.detail))
        return out


def _pick(evidence: Sequence[Evidence], field: str) -> tuple[int | None, list[str]]:
    offers = sorted((e for e in evidence if e.field == field and isinstance(e.value, int)),
                    key=lambda e: _PRIORITY.get(e.source, 5))
    if not offers:
        return None, []
    best = offers[0]
    conflicts = [f"{field}: {best.source} says {best.value} ({best.detail}) but {e.source} says {e.value} "
                 f"({e.detail})" for e in offers[1:] if e.value != best.value]
    return int(best.value) if best.value is not None else None, conflicts


def _dims(rw: RoleWeights, role: str, evidence: list[Evidence]) -> tuple[int | None, int | None]:
    split = kernel_head_split(rw.weight, role)
    if split is not None:
        in_f, out_f, h, d = split
        shape = list(rw.weight.shape)
        if role == "q":
            evidence.append(Evidence("num_heads", h, "kernel_shape", f"Q kernel {rw.weight.name} {shape}"))
            evidence.append(Evidence("d_k", d, "kernel_shape", f"Q kernel {rw.weight.name} {shape}"))
        elif role == "k":
            evidence.append(Evidence("num_kv_heads", h, "kernel_shape", f"K kernel {rw.weight.name} {shape}"))
        elif role == "v":
            evidence.append(Evidence("d_v", d, "kernel_shape", f"V kernel {rw.weight.name} {shape}"))
        return in_f, out_f
    dims = linear_dims(rw.weight, rw.module)
    return dims if dims is not None else (None, None)


def assemble(group: GroupedBlock, offers: Iterable[HeadOffers], *, matcher: str, scale: float | None = None,
             scale_detail: str = "", no_heads_reason: str = "") -> AttentionBlock:
    """One AttentionBlock from a name-grouped block and what modules/configs say about its heads."""
    evidence: list[Evidence] = []
    for o in offers:
        evidence.extend(o.evidence())
    conflicts: list[str] = []
    widths: dict[str, tuple[int | None, int | None]] = {}
    for rw in group.roles:
        widths[rw.role] = _dims(rw, rw.role, evidence)

    h, c1 = _pick(evidence, "num_heads")
    g, c2 = _pick(evidence, "num_kv_heads")
    d_k, c3 = _pick(evidence, "d_k")
    d_v, c4 = _pick(evidence, "d_v")
    conflicts += c1 + c2 + c3 + c4

    projections: list[Projection] = []
    packed = group.role("qkv")
    if packed is not None:
        in_f, total = widths["qkv"]
        parts = _split_packed(total, h, g, d_k, d_v)
        if parts is not None and total:
            for role, width in zip(("q", "k", "v"), parts):
                projections.append(projection(role, packed, in_f, width, (width, total)))
                widths[role] = (in_f, width)
            evidence.append(Evidence("qkv_split", None, "weight_shape",
                                     f"packed {packed.weight.name} {list(packed.weight.shape)} split "
                                     + " + ".join(str(p) for p in parts)))
        else:
            projections.append(projection("q", packed, in_f, total))
            conflicts.append(f"cannot split packed {packed.weight.name} {list(packed.weight.shape)} into Q/K/V "
                             "without head counts")
    for role in ("q", "k", "v", "o"):
        single = group.role(role)
        if single is not None:
            in_f, out_f = widths[role]
            projections.append(projection(role, single, in_f, out_f))
    projections.sort(key=lambda p: "qkvo".index(p.role))

    wq = widths.get("q", (None, None))[1]
    wk = widths.get("k", (None, None))[1]
    wv = widths.get("v", (None, None))[1]
    if h is None and d_k and wq and wq % d_k == 0:
        h = wq // d_k
        evidence.append(Evidence("num_heads", h, "weight_shape", f"Q width {wq} / d_k {d_k}"))
    if d_k is None and h and wq and wq % h == 0:
        d_k = wq // h
        evidence.append(Evidence("d_k", d_k, "weight_shape", f"Q width {wq} / heads {h}"))
    if g is None and d_k and wk and wk % d_k == 0 and h is not None:
        g = wk // d_k
        evidence.append(Evidence("num_kv_heads", g, "weight_shape", f"K width {wk} / d_k {d_k}"))
    if g is None and h is not None and (wk is None or wk == wq):
        g = h
    if d_v is None and g and wv and wv % g == 0:
        d_v = wv // g
        evidence.append(Evidence("d_v", d_v, "weight_shape", f"V width {wv} / kv heads {g}"))
    if d_v is None and d_k is not None and h is not None and wv is None:
        d_v = d_k
    h, g, d_v = _shapes_win(evidence, conflicts, h, g, d_k, d_v, widths)
    if h is not None and d_k is not None and wq is not None and h * d_k != wq:
        conflicts.append(f"num_heads {h} × d_k {d_k} = {h * d_k} but the Q projection is {wq} wide")
    if g is not None and d_k is not None and wk is not None and g * d_k != wk:
        conflicts.append(f"num_kv_heads {g} × d_k {d_k} = {g * d_k} but the K projection is {wk} wide")

    d_model = None
    q_proj = next((p for p in projections if p.role == "q"), None)
    o_proj = next((p for p in projections if p.role == "o"), None)
    if q_proj is not None and q_proj.in_features:
        d_model = q_proj.in_features
        evidence.append(Evidence("d_model", d_model, "weight_shape", f"input width of Q projection {q_proj.node}"))
    elif o_proj is not None and o_proj.out_features:
        d_model = o_proj.out_features
        evidence.append(Evidence("d_model", d_model, "weight_shape", f"output width of {o_proj.node}"))

    extra = 0
    for t in group.extras:
        extra += t.numel
        evidence.append(Evidence("extra", t.numel, "weight_shape", f"{t.name} {list(t.shape)}"))
    if scale is not None:
        evidence.append(Evidence("scale", scale, "module", scale_detail or "scale attribute"))
    unknown = None
    if h is None:
        g = None
        unknown = no_heads_reason or "no head count: weight shapes give the projection widths, not the heads"
    params = ParamBreakdown.from_projections(projections, extra=extra)
    return AttentionBlock(
        name=group.name, matcher=matcher, kind="cross" if group.cross else "self",
        num_heads=h, num_kv_heads=g, d_model=d_model, d_k=d_k, d_v=d_v, params=params,
        projections=tuple(projections), evidence=tuple(evidence), scale=scale, scale_known=scale is not None,
        anchor=group.owner, unknown_reason=unknown, conflicts=tuple(dict.fromkeys(conflicts)),
    )


def _shapes_win(evidence: list[Evidence], conflicts: list[str], h: int | None, g: int | None, d_k: int | None,
                d_v: int | None, widths: dict[str, tuple[int | None, int | None]]
                ) -> tuple[int | None, int | None, int | None]:
    """Weight shapes outrank what a config or file metadata claims, where two shapes agree on the
    answer. With d_k fixed by a shape, Q's width gives the heads when O's input width agrees (a Q
    that also carries a gate, as in gated attention, does not); with Q agreeing (h·d_k = Q width),
    K's width gives the KV heads when V's agrees, and V's width the value head size when O's
    agrees. Each overruled claim is recorded as a conflict; a disagreement the shapes cannot settle
    stays a conflict (see assemble)."""
    wq, wk, wv = widths.get("q", (None, None))[1], widths.get("k", (None, None))[1], widths.get("v", (None, None))[1]
    wo_in = widths.get("o", (None, None))[0]

    def overrule(field: str, claimed: int, value: int, why: str) -> None:
        claim = next((e for e in evidence if e.field == field and e.value == claimed), None)
        said = f"{claim.source} says {claimed} ({claim.detail})" if claim is not None else f"{claimed} was assumed"
        conflicts.append(f"{field}: {said} but {why}; the weight shapes win")
        evidence.append(Evidence(field, value, "weight_shape", why))

    d_k_from_shape = any(e.field == "d_k" and e.value == d_k and e.source in ("head_shape", "kernel_shape")
                         for e in evidence)
    if d_k_from_shape and h and d_k and wq and h * d_k != wq and wq % d_k == 0:
        h2 = wq // d_k
        if wo_in is None or wo_in == h2 * (d_v or d_k):
            overrule("num_heads", h, h2, f"Q width {wq} / d_k {d_k} = {h2}")
            h = h2
    if not (h and d_k and wq == h * d_k):
        return h, g, d_v
    if g is not None and wk and g * d_k != wk and wk % d_k == 0:
        g2 = wk // d_k
        if wv is None or d_v is None or wv == g2 * d_v:
            overrule("num_kv_heads", g, g2, f"K width {wk} / d_k {d_k} = {g2}")
            g = g2
    if g and d_v is not None and wv and g * d_v != wv and wv % g == 0:
        dv2 = wv // g
        if wo_in is None or wo_in == h * dv2:
            overrule("d_v", d_v, dv2, f"V width {wv} / kv heads {g} = {dv2}")
            d_v = dv2
    return h, g, d_v


def _split_packed(total: int | None, h: int | None, g: int | None, d_k: int | None, d_v: int | None
                  ) -> tuple[int, int, int] | None:
    if not total:
        return None
    if h and d_k:
        g2 = g or h
        dv = d_v or d_k
        if h * d_k + g2 * d_k + g2 * dv == total:
            return h * d_k, g2 * d_k, g2 * dv
    if h and d_k and total > h * d_k and (total - h * d_k) % (d_k + (d_v or d_k)) == 0:
        # The packed width decides the KV heads (shapes outrank a contradicting claim; see _shapes_win).
        g2 = (total - h * d_k) // (d_k + (d_v or d_k))
        return h * d_k, g2 * d_k, g2 * (d_v or d_k)
    if h and g and h != g and total % (h + 2 * g) == 0:
        d = total // (h + 2 * g)
        return h * d, g * d, g * d
    if total % 3 == 0 and (g is None or g == h):
        return total // 3, total // 3, total // 3
    return None
