"""What changed between two reports: blocks matched by name, else by position among the blocks of
the same shape (kind, d_model and Q/K/V/O parameters), and for each pair the numbers a reader
compares (heads, K/V heads, d_k, d_v, parameters, bytes, KV cache per token, flags) with their
difference. Pure: two Reports in, a ReportDiff out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

from mhainspect.results import AttentionBlock, Report
from mhainspect.results.diff import BlockDiff, Change, FieldDiff, MatchedBy, ReportDiff

# (field, label) of each block number compared, in the order every format shows them.
BLOCK_FIELDS: tuple[tuple[str, str], ...] = (
    ("num_heads", "heads"), ("num_kv_heads", "K/V heads"), ("d_k", "d_k"), ("d_v", "d_v"),
    ("params", "params"), ("weight_bytes", "bytes"), ("kv_cache_bytes_per_token", "KV/token"), ("flags", "flags"))
MODEL_FIELDS: tuple[tuple[str, str], ...] = (
    ("total_params", "params"), ("attention_params", "attention params"), ("blocks", "blocks"),
    ("weight_bytes", "bytes"), ("kv_cache_bytes_per_token", "KV/token"), ("flags", "flags"))

Value = int | str | None


def _field(name: str, a: Value, b: Value) -> FieldDiff:
    delta = b - a if isinstance(a, int) and isinstance(b, int) else None
    return FieldDiff(name, a, b, delta)


def _flag_text(codes: Sequence[str]) -> str:
    """'MHA001, MHA005' or 'MHA005 ×80': each code once, with its count when more than one."""
    counts = Counter(codes)
    return ", ".join(f"{c} ×{n}" if n > 1 else c for c, n in sorted(counts.items()))


def _block_values(report: Report, b: AttentionBlock) -> dict[str, Value]:
    return {"num_heads": b.num_heads, "num_kv_heads": b.num_kv_heads, "d_k": b.d_k, "d_v": b.d_v,
            "params": b.params.total, "weight_bytes": b.weight_bytes,
            "kv_cache_bytes_per_token": b.kv_cache_bytes_per_token,
            "flags": _flag_text([f.code for f in report.flags if f.block == b.name])}


def _model_values(report: Report) -> dict[str, Value]:
    m = report.model
    return {"total_params": m.total_params, "attention_params": m.attention_params, "blocks": len(report.blocks),
            "weight_bytes": m.weight_bytes,
            "kv_cache_bytes_per_token": m.kv_cache.bytes_per_token if m.kv_cache is not None else None,
            "flags": _flag_text([f.code for f in report.flags])}


def _shape(b: AttentionBlock) -> Hashable:
    """What pairs two blocks whose names differ: their kind, width and projection parameters."""
    p = b.params
    return (b.kind, b.d_model, p.q, p.k, p.v, p.o)


def match_blocks(a: Sequence[AttentionBlock], b: Sequence[AttentionBlock]
                 ) -> list[tuple[int | None, int | None, MatchedBy]]:
    """Pairs of indices (A's, B's): by name first, then each unpaired block of A with the next unpaired
    block of B of the same shape after the last such pair (so order is kept); the rest alone. In A's
    order, B's unpaired blocks last."""
    b_by_name = {blk.name: j for j, blk in enumerate(b)}
    pairs: dict[int, tuple[int, MatchedBy]] = {}
    used: set[int] = set()
    for i, blk in enumerate(a):
        j = b_by_name.get(blk.name)
        if j is not None and j not in used:
            pairs[i] = (j, MatchedBy.NAME)
            used.add(j)
    free_b = [j for j in range(len(b)) if j not in used]
    cursor = 0
    for i, blk in enumerate(a):
        if i in pairs:
            continue
        for k in range(cursor, len(free_b)):
            if _shape(b[free_b[k]]) == _shape(blk):
                pairs[i] = (free_b[k], MatchedBy.POSITION)
                used.add(free_b[k])
                cursor = k + 1
                break
    out: list[tuple[int | None, int | None, MatchedBy]] = []
    for i in range(len(a)):
        if i in pairs:
            out.append((i, *pairs[i]))
        else:
            out.append((i, None, MatchedBy.NONE))
    out += [(None, j, MatchedBy.NONE) for j in range(len(b)) if j not in used]
    return out


def diff_reports(a: Report, b: Report) -> ReportDiff:
    """``a`` and ``b`` compared: the model's fields and every block, paired by ``match_blocks``."""
    blocks = []
    for i, j, how in match_blocks(a.blocks, b.blocks):
        va = _block_values(a, a.blocks[i]) if i is not None else {}
        vb = _block_values(b, b.blocks[j]) if j is not None else {}
        fields = tuple(_field(name, va.get(name), vb.get(name)) for name, _ in BLOCK_FIELDS)
        if i is None:
            status = Change.ONLY_B
        elif j is None:
            status = Change.ONLY_A
        else:
            status = Change.CHANGED if any(f.changed for f in fields) else Change.SAME
        blocks.append(BlockDiff(a.blocks[i].name if i is not None else None,
                                b.blocks[j].name if j is not None else None, how, status, fields))
    ma, mb = _model_values(a), _model_values(b)
    model = tuple(_field(name, ma[name], mb[name]) for name, _ in MODEL_FIELDS)
    return ReportDiff(a.model.path, b.model.path, a.model.format, b.model.format, model, tuple(blocks))
