"""Head counts the caller states (--num-heads, --num-kv-heads) for a source that has none.

A checkpoint without a config.json has only its weight shapes, which give the projection widths,
not the number of heads. The caller's counts are offered to every block like a config's (evidence
source ``option``); shapes outrank them and a disagreement is a conflict of the block. Here: the
offer, the warning when a source could not use it, and the hint when heads stay unknown.
"""

from __future__ import annotations

from mhainspect.analysis.whatif import check_head_counts
from mhainspect.ir.weights import HeadOffers
from mhainspect.results import EvidenceSource, Matcher, Report, ReportWarning, WarningCode

_HEAD_FIELDS = ("num_heads", "num_kv_heads")


def stated_offer(num_heads: int | None, num_kv_heads: int | None) -> HeadOffers | None:
    """The caller's head counts as an offer (None when neither is given); ValueError (one line)
    for a K/V head count that cannot group the query heads."""
    if num_heads is None and num_kv_heads is None:
        return None
    check_head_counts([num_heads] if num_heads is not None else [], "--num-heads")
    check_head_counts([num_kv_heads] if num_kv_heads is not None else [], "--num-kv-heads")
    if num_heads is None:  # K/V heads alone say nothing of d_k or the query heads: half a layout
        raise ValueError(f"--num-kv-heads {num_kv_heads} needs --num-heads N (the query heads it groups)")
    if num_heads is not None and num_kv_heads is not None and (num_kv_heads > num_heads or num_heads % num_kv_heads):
        raise ValueError(f"--num-kv-heads {num_kv_heads} does not divide --num-heads {num_heads} into equal groups")
    said = [f"--{name} {n}" for name, n in (("num-heads", num_heads), ("num-kv-heads", num_kv_heads)) if n is not None]
    return HeadOffers(num_heads=num_heads, num_kv_heads=num_kv_heads, source=EvidenceSource.OPTION,
                      detail="the caller: " + ", ".join(said))


def stated_warnings(report: Report, offer: HeadOffers | None) -> tuple[ReportWarning, ...]:
    """A warning when the stated counts reached no block (the source is not a checkpoint)."""
    if offer is None:
        return ()
    used = any(e.source is EvidenceSource.OPTION and e.field in _HEAD_FIELDS for b in report.blocks for e in b.evidence)
    if used:
        return ()
    options = " and ".join(o for o, n in (("--num-heads", offer.num_heads), ("--num-kv-heads", offer.num_kv_heads))
                           if n is not None)
    why = ("the model has no attention blocks" if not report.blocks else
           f"head counts from the command line apply to checkpoints only; this model ({report.model.format}) "
           "takes them from its own graph, module or metadata")
    verb = "has" if " and " not in options else "have"
    return (ReportWarning(f"{options} {verb} no effect: {why}", WarningCode.OPTION_WITHOUT_EFFECT),)


def heads_hint(report: Report) -> str | None:
    """For a checkpoint whose heads stay unknown and that no config or option described: what
    would give them (a config.json beside it, or --num-heads)."""
    unknown = [b for b in report.blocks if b.num_heads is None and b.matcher == Matcher.CHECKPOINT]
    if not unknown:
        return None
    described = any(e.source in (EvidenceSource.CONFIG, EvidenceSource.OPTION) and e.field in _HEAD_FIELDS
                    for b in report.blocks for e in b.evidence)
    if described:
        return None
    n = len(unknown)
    return (f"heads unknown for {n} block{'s' if n != 1 else ''}: weight shapes give the projection widths, not "
            "the heads; the model's config.json beside the checkpoint (num_attention_heads, num_key_value_heads) "
            "gives them, or --num-heads N (and --num-kv-heads G for grouped-query attention)")
