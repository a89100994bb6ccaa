"""The field rules every assembler uses: one priority table, one rule per derived number.

``BlockBuilder`` (graphs) and ``assemble`` (modules, checkpoints) both decide their numbers here,
so a head count comes out the same whichever door a model comes in by. Pure functions, no state.

- ``pick``: the strongest offer for a field wins; every other offer that disagrees becomes a
  conflict line (scale-derived offers are fallbacks and never conflict: custom scales are legal).
- widths: heads = width / head size when it divides; kv heads default to the query heads only
  when no K width is known (a K width says otherwise by itself).
- ``split_packed``: a packed [Q; K; V] width split by what the head counts imply; when the
  offered kv heads do not fit the width but another count does, the width wins (a conflict).
  Without head counts only the O projection's input width can fix Q's part (an assumption the
  evidence states); never an even split by default.
- ``shapes_win``: widths outrank a module, config or file-metadata claim where two shapes agree
  on the answer; each overruled claim becomes a conflict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mhainspect.results import Evidence, EvidenceSource

# Stronger sources first. Operator attributes and shapes read in a graph are observed; module
# attributes and configs are claims about the code; widths divided by another number inherit
# that number's doubt; a scale is a fallback only (a custom scale is legitimate, MHA003).
PRIORITY: dict[str, int] = {  # keyed by EvidenceSource members (str): looked up per offer
    EvidenceSource.ATTRIBUTE: 0,
    EvidenceSource.KERNEL_SHAPE: 1,
    EvidenceSource.HEAD_SHAPE: 1,  # a tensor one head wide: observed like a per-head kernel
    EvidenceSource.SHAPE: 2,
    EvidenceSource.SCORE_SHAPE: 3,
    EvidenceSource.MODULE: 4,
    EvidenceSource.CONFIG: 5,
    EvidenceSource.GGUF: 5,  # file metadata: a claim, like a config
    EvidenceSource.OPTION: 5,  # --num-heads: the caller's claim, offered before a config's (it wins a tie)
    EvidenceSource.WEIGHT_SHAPE: 6,
    EvidenceSource.RESHAPE: 6,
    EvidenceSource.REPEAT: 7,
    EvidenceSource.MISSING: 7,
    EvidenceSource.SCALE: 9,
}
_NEVER_CONFLICTS = frozenset({EvidenceSource.SCALE})


def conflict_text(field: str, best: Evidence, other: Evidence) -> str:
    return f"{field}: {best.source} says {best.value} ({best.detail}) but {other.source} says {other.value} " \
           f"({other.detail})"


def pick(evidence: Iterable[Evidence], field: str) -> tuple[int | None, tuple[str, ...]]:
    """The value of ``field`` from its strongest offer (ties: the first offered), and the conflicts."""
    offers = [e for e in evidence if e.field == field and isinstance(e.value, int)]
    if not offers:
        return None, ()
    if len(offers) > 1:
        offers.sort(key=lambda e: PRIORITY.get(e.source, 7))  # stable: ties keep the order
    best = offers[0]
    conflicts = tuple(conflict_text(field, best, e) for e in offers[1:]
                      if e.value != best.value and e.source not in _NEVER_CONFLICTS)
    return int(best.value) if best.value is not None else None, conflicts


def per_head(width: int | None, count: int | None) -> int | None:
    """width / count when both are known and it divides (heads from a width, or a head size)."""
    if width and count and width % count == 0:
        return width // count
    return None


def default_kv_heads(num_heads: int | None, k_width: int | None) -> int | None:
    """Without any K/V head evidence: as many as query heads, but only when no K width is known
    (a known K width with a known head size has offered its own count already)."""
    return num_heads if num_heads is not None and k_width is None else None


def width_conflicts(h: int | None, g: int | None, d_k: int | None, wq: int | None, wk: int | None
                    ) -> list[str]:
    out: list[str] = []
    if h is not None and d_k is not None and wq is not None and h * d_k != wq:
        out.append(f"num_heads {h} × d_k {d_k} = {h * d_k} but the Q projection is {wq} wide")
    if g is not None and d_k is not None and wk is not None and g * d_k != wk:
        out.append(f"num_kv_heads {g} × d_k {d_k} = {g * d_k} but the K projection is {wk} wide")
    return out


@dataclass(frozen=True)
class PackedSplit:
    q: int
    k: int
    v: int
    kv_heads: int | None  # the kv heads the split used (None: not implied by the split)
    conflict: str | None = None  # the offered kv heads did not fit the width; the width won
    assumption: str | None = None  # what the split takes for granted (evidence text), when anything

    @property
    def parts(self) -> tuple[int, int, int]:
        return self.q, self.k, self.v


def split_packed(total: int | None, h: int | None, g: int | None, d_k: int | None, d_v: int | None,
                 o_in: int | None = None) -> PackedSplit | None:
    """Q, K and V widths of a packed [(h·d_k) + (g·d_k) + (g·d_v)] projection of ``total`` rows.

    ``o_in``: the O projection's input width (h·d_v). Without head sizes, equal thirds only when
    the heads are known and K/V heads equal them (and O agrees); else, taking d_v = d_k, Q is as
    wide as O's input and K, V share the rest equally (g·d_k = g·d_v), used only when Q's width is a
    whole multiple of K's (h = n·g). None: nothing splits it (never an even split by default)."""
    if not total:
        return None
    if h and d_k:
        g2, dv = g or h, d_v or d_k
        if h * d_k + g2 * (d_k + dv) == total:
            return PackedSplit(h * d_k, g2 * d_k, g2 * dv, g2)
        # The offered kv heads do not fit: solve the width for them (the width is what runs).
        rest = total - h * d_k
        if rest > 0 and rest % (d_k + dv) == 0:
            solved = rest // (d_k + dv)
            if h % solved == 0:
                why = None if g is None else (f"num_kv_heads: the packed width {total} = {h}·{d_k} + {solved}·"
                                              f"({d_k} + {dv}) gives {solved}, not the {g} offered")
                return PackedSplit(h * d_k, solved * d_k, solved * dv, solved, why)
    if h and g and h != g and total % (h + 2 * g) == 0 and (o_in is None or o_in == h * (total // (h + 2 * g))):
        d = total // (h + 2 * g)
        return PackedSplit(h * d, g * d, g * d, g)
    if h and total % 3 == 0 and (g is None or g == h) and (o_in is None or o_in == total // 3):
        return PackedSplit(total // 3, total // 3, total // 3, h)
    if o_in and 0 < o_in < total and (total - o_in) % 2 == 0:
        kv = (total - o_in) // 2
        if kv and o_in % kv == 0 and (h is None or o_in % h == 0):
            return PackedSplit(o_in, kv, kv, None, assumption=(
                f"Q width {o_in} = the O projection's input width (h·d_v, taken as h·d_k: d_v = d_k); K and V "
                f"share the other {total - o_in} equally (g·d_k = g·d_v)"))
    return None


def shapes_win(evidence: list[Evidence], conflicts: list[str], h: int | None, g: int | None, d_k: int | None,
               d_v: int | None, widths: Mapping[str, tuple[int | None, int | None]]
               ) -> tuple[int | None, int | None, int | None]:
    """(h, g, d_v) after weight shapes overrule a claim, where two shapes agree on the answer.

    With d_k fixed by a shape, Q's width gives the heads when O's input width agrees (a Q that also
    carries a gate, as in gated attention, does not); with Q agreeing (h·d_k = Q width), K's width
    gives the KV heads when V's agrees (or V's head size is not known yet), and V's width the value
    head size when O's agrees. Each overruled claim is recorded as a conflict and the shape as
    evidence; a disagreement the shapes cannot settle stays a width conflict."""
    wq, wk, wv = widths.get("q", (None, None))[1], widths.get("k", (None, None))[1], widths.get("v", (None, None))[1]
    wo_in = widths.get("o", (None, None))[0]

    def overrule(field: str, claimed: int, value: int, why: str) -> None:
        claim = next((e for e in evidence if e.field == field and e.value == claimed), None)
        said = f"{claim.source} says {claimed} ({claim.detail})" if claim is not None else f"{claimed} was assumed"
        conflicts.append(f"{field}: {said} but {why}; the weight shapes win")
        evidence.append(Evidence(field, value, EvidenceSource.WEIGHT_SHAPE, why))

    observed = (EvidenceSource.HEAD_SHAPE, EvidenceSource.KERNEL_SHAPE)
    d_k_from_shape = any(e.field == "d_k" and e.value == d_k and e.source in observed for e in evidence)
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
