"""``--format csv``: for spreadsheets. One row per block (every block, never folded), or with
``--summary`` one row per model; exact integers without separators, empty cells for unknowns, and a
row per input that could not be audited (its ``error`` column). Pure: reports in, text out.

A cell that a spreadsheet would read as a formula (a model or block name starting with ``=``,
``+``, ``-``, ``@``, a tab or a carriage return) is quoted with a leading apostrophe (OWASP's CSV
injection advice), so no name from a model runs in the reader's spreadsheet."""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Sequence

from mhainspect.results import AttentionBlock, FailedInput, Report

__all__ = ["BLOCK_HEADER", "MODEL_HEADER", "render_csv"]

BLOCK_HEADER = ("model", "format", "block", "kind", "heads", "kv_heads", "d_model", "d_k", "d_v", "q", "k", "v", "o",
                "bias", "params", "weight_bytes", "kv_bytes_per_token", "flags", "error")
MODEL_HEADER = ("model", "format", "params", "attention_params", "blocks", "heads", "weight_bytes",
                "kv_bytes_per_token", "flags", "flag_count", "max_context", "max_batch", "error")

Cell = str | int | None
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _safe(cell: Cell) -> str | int:
    if cell is None:
        return ""
    if isinstance(cell, str) and cell.startswith(_FORMULA_START):
        return "'" + cell
    return cell


def _codes(flags: Sequence[str]) -> str:
    """'MHA001 MHA005×2': each code once, with its count when raised more than once."""
    return " ".join(f"{c}×{n}" if n > 1 else c for c, n in sorted(Counter(flags).items()))


def _block_row(report: Report, b: AttentionBlock) -> tuple[Cell, ...]:
    q, k, v, o = b.role_weights()
    return (report.model.path, report.model.format, b.name, str(b.kind), b.num_heads, b.num_kv_heads, b.d_model,
            b.d_k, b.d_v, q, k, v, o, b.params.bias, b.params.total, b.weight_bytes, b.kv_cache_bytes_per_token,
            _codes([f.code for f in report.flags if f.block == b.name]), None)


def _model_row(report: Report) -> tuple[Cell, ...]:
    m = report.model
    heads = " ".join(dict.fromkeys(f"{b.num_heads if b.num_heads is not None else '?'}"
                                   + (f"/{b.num_kv_heads}kv" if b.num_kv_heads not in (None, b.num_heads) else "")
                                   for b in report.blocks))
    fit = m.fit  # --gpu-memory: what fits (empty cells without it, or when there is no limit)
    return (m.path, m.format, m.total_params, m.attention_params, len(report.blocks), heads, m.weight_bytes,
            m.kv_cache.bytes_per_token if m.kv_cache is not None else None, _codes([f.code for f in report.flags]),
            len(report.flags), fit.max_context if fit else None, fit.max_batch if fit else None, None)


def render_csv(reports: Sequence[Report], *, summary: bool = False, failed: Sequence[FailedInput] = ()) -> str:
    """The CSV text: a header, then one row per block of every report (``summary``: per report),
    then one row per input that could not be audited, with only ``model`` and ``error``."""
    header = MODEL_HEADER if summary else BLOCK_HEADER
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for report in reports:
        rows = [_model_row(report)] if summary else [_block_row(report, b) for b in report.blocks]
        writer.writerows([_safe(c) for c in row] for row in rows)
    for f in failed:
        writer.writerow([_safe(f.input), *([""] * (len(header) - 2)), _safe(f"{f.kind}: {f.message}")])
    return out.getvalue()
