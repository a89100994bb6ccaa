"""The field rules every assembler uses: one priority table, one rule per derived number.

``BlockBuilder`` (graphs) and ``assemble`` (modules, checkpoints) both decide their numbers here,
so a head count comes out the same whichever door a model comes in by. Pure functions, no state.

- ``pick``: the strongest offer for a field wins; every other offer that disagrees becomes a
  conflict line (scale-derived offers are fallbacks and never conflict: custom scales are legal).
- widths: heads = width / head size when it divides; kv heads default to the query heads only
  when no K width is known (a K width says otherwise by itself).
- ``split_packed``: a packed [Q; K; V] width split by what the head counts imply; when the
  offered kv heads do not fit the width but another count does, the width wins (a conflict).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from mhainspect.findings import Evidence, EvidenceSource

# Stronger sources first. Operator attributes and shapes read in a graph are observed; module
# attributes and configs are claims about the code; widths divided by another number inherit
# that number's doubt; a scale is a fallback only (a custom scale is legitimate, MHA003).
PRIORITY: dict[EvidenceSource, int] = {
    EvidenceSource.ATTRIBUTE: 0,
    EvidenceSource.KERNEL_SHAPE: 1,
    EvidenceSource.SHAPE: 2,
    EvidenceSource.SCORE_SHAPE: 3,
    EvidenceSource.MODULE: 4,
    EvidenceSource.CONFIG: 5,
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
    offers.sort(key=lambda e: PRIORITY.get(EvidenceSource(e.source), 7))  # stable: ties keep the order
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
    kv_heads: int | None  # the kv heads the split used (None: not implied, e.g. an even thirds split)
    conflict: str | None = None  # the offered kv heads did not fit the width; the width won

    @property
    def parts(self) -> tuple[int, int, int]:
        return self.q, self.k, self.v


def split_packed(total: int | None, h: int | None, g: int | None, d_k: int | None, d_v: int | None
                 ) -> PackedSplit | None:
    """Q, K and V widths of a packed [(h·d_k) + (g·d_k) + (g·d_v)] projection of ``total`` rows."""
    if not total:
        return None
    if h and d_k:
        g2, dv = g or h, d_v or d_k
        if h * d_k + g2 * (d_k + dv) == total:
            return PackedSplit(h * d_k, g2 * d_k, g2 * dv, g2)
        # The offered kv heads do not fit: solve the width for them (K and V of one head size).
        rest = total - h * d_k
        if (d_v is None or d_v == d_k) and rest > 0 and rest % (2 * d_k) == 0:
            solved = rest // (2 * d_k)
            if h % solved == 0:
                why = None if g is None else (f"num_kv_heads: the packed width {total} = ({h} + 2·{solved}) × {d_k} "
                                              f"gives {solved}, not the {g} offered")
                return PackedSplit(h * d_k, solved * d_k, solved * d_k, solved, why)
    if h and g and h != g and total % (h + 2 * g) == 0:
        d = total // (h + 2 * g)
        return PackedSplit(h * d, g * d, g * d, g)
    if total % 3 == 0 and (g is None or g == h):
        return PackedSplit(total // 3, total // 3, total // 3, g)
    return None
