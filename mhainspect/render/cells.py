"""Plain-text cells shared by the tabular renderers (terminal table, markdown). No rich here."""

from __future__ import annotations

from mhainspect.findings import AttentionBlock, BlockVerification, VerifyStatus
from mhainspect.render.numbers import human_count

__all__ = ["UNKNOWN", "block_cells", "heads_label", "percent", "verify_label"]

UNKNOWN = "?"  # a number the analysis could not determine


def heads_label(block: AttentionBlock) -> str:
    """'8', '8/2 kv' for grouped/multi-query attention, '?' when unknown."""
    if block.num_heads is None:
        return UNKNOWN
    if block.num_kv_heads is not None and block.num_kv_heads != block.num_heads:
        return f"{block.num_heads}/{block.num_kv_heads} kv"
    return str(block.num_heads)


def _opt(value: int | None) -> str:
    return UNKNOWN if value is None else str(value)


def percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.2f}" if whole else "-"


def block_cells(b: AttentionBlock, model_total: int) -> tuple[str, ...]:
    """One block's row, in _COLUMNS order; shared by every tabular renderer."""
    p = b.params
    return (b.name, b.kind, heads_label(b), _opt(b.d_model), _opt(b.d_k), _opt(b.d_v), human_count(p.q),
            human_count(p.k), human_count(p.v), human_count(p.o), human_count(p.bias), human_count(p.total),
            percent(p.total, model_total))


def verify_label(v: BlockVerification) -> str:
    """'confirmed (8 heads)', 'contradicted (saw 4 heads, static 8)', 'not checkable (why)', ..."""
    heads = f"{v.observed_heads} heads"
    if v.observed_kv_heads is not None and v.observed_kv_heads != v.observed_heads:
        heads += f", {v.observed_kv_heads} kv"
    if v.status == VerifyStatus.CONFIRMED:
        return f"confirmed ({heads})"
    if v.status == VerifyStatus.CONTRADICTED:
        return f"contradicted ({v.disagreement or heads})"
    if v.status == VerifyStatus.OBSERVED:
        return f"observed at run time: {heads}"
    return f"not checkable ({v.reason or 'no reason given'})"
