"""``mhainspect diff A B`` in every format (table, json, markdown, html): the model's fields side by
side, then each block that changed (blocks with the same change folded: ``layers.{0–31}.attn ×32``)
with A, B and B - A. Pure: a ReportDiff in, text out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mhainspect import __version__
from mhainspect.analysis.diff import BLOCK_FIELDS, MODEL_FIELDS
from mhainspect.ir.units import group
from mhainspect.render.grouping import fold_names
from mhainspect.render.html import page
from mhainspect.render.json_render import to_json
from mhainspect.render.safe import html, md_code, md_text, printable
from mhainspect.results import SCHEMA_VERSION
from mhainspect.results.diff import BlockDiff, Change, FieldDiff, MatchedBy, ReportDiff

__all__ = ["diff_to_dict", "render_diff_html", "render_diff_json", "render_diff_markdown", "render_diff_text"]

_LABELS = dict(BLOCK_FIELDS) | {f"model.{k}": v for k, v in MODEL_FIELDS}


def _value(v: int | str | None) -> str:
    if v is None:
        return "?"
    return group(v) if isinstance(v, int) else (v or "none")


def _delta(f: FieldDiff) -> str:
    if f.delta is None or f.delta == 0:
        return "" if not f.changed or f.delta == 0 else "≠"
    return f"+{group(f.delta)}" if f.delta > 0 else f"−{group(-f.delta)}"


def _shape_text(b: BlockDiff, side: str) -> str:
    """One unpaired block's numbers on one line: '4 heads, 2 K/V heads, d_k 8, d_v 8, 1,056 params'."""
    values = {f.field: (f.a if side == "a" else f.b) for f in b.fields}
    return ", ".join(f"{label} {_value(values[name])}" for name, label in BLOCK_FIELDS[:5])


@dataclass(frozen=True)
class Row:
    """One row of the block section: a (folded) block label, the field, A, B, B - A."""

    block: str
    field: str
    a: str
    b: str
    delta: str


def _label(diffs: Sequence[BlockDiff]) -> str:
    def names(side: str) -> list[str]:
        return [n for d in diffs if (n := d.a if side == "a" else d.b) is not None]

    def one(side: str) -> str:
        found = names(side)
        folded = fold_names(found) if len(found) > 1 else (found[0] if found else None)
        return (folded or ", ".join(found)) + (f" ×{len(found)}" if len(found) > 1 else "")

    first = diffs[0]
    if first.a is not None and first.b is not None and first.matched_by is MatchedBy.POSITION:
        return f"{one('a')} → {one('b')}"
    return one("a") if first.a is not None else one("b")


def block_rows(d: ReportDiff) -> list[Row]:
    """Every block that changed, one row per changed field; blocks with the same change (the same
    field and values, or the same missing block) folded into one row."""
    buckets: dict[tuple[Any, ...], list[BlockDiff]] = {}
    order: list[tuple[Any, ...]] = []
    for b in d.blocks:
        if b.status is Change.SAME:
            continue
        if b.status is not Change.CHANGED:
            continue  # only_a / only_b: listed apart (unpaired)
        for key in [(b.matched_by, f.field, f.a, f.b) for f in b.fields if f.changed]:
            if key not in buckets:
                buckets[key] = []
                order.append(key)
            buckets[key].append(b)
    rows: list[Row] = []
    for key in order:
        members = buckets[key]
        f = next(f for f in members[0].fields if f.field == key[1])
        rows.append(Row(_label(members), _LABELS[f.field], _value(f.a), _value(f.b), _delta(f)))
    return rows


def unpaired(d: ReportDiff) -> list[str]:
    """'Only in A: layers.{0–1}.attn ×2 (heads 8, K/V heads 2, d_k 8, d_v 8, params 10,240)', per
    kind of block that has no match, blocks with the same numbers folded."""
    out = []
    for status, side, word in ((Change.ONLY_A, "a", "A"), (Change.ONLY_B, "b", "B")):
        buckets: dict[str, list[BlockDiff]] = {}
        for b in d.blocks:
            if b.status is status:
                buckets.setdefault(_shape_text(b, side), []).append(b)
        out += [f"Only in {word}: {_label(members)} ({shape})" for shape, members in buckets.items()]
    return out


def model_rows(d: ReportDiff) -> list[Row]:
    return [Row("", _LABELS[f"model.{f.field}"], _value(f.a), _value(f.b), _delta(f)) for f in d.model]


def summary(d: ReportDiff) -> str:
    """'12 blocks in A, 12 in B: 12 paired by name; 0 changed, 0 only in A, 0 only in B.'"""
    n_a = sum(1 for b in d.blocks if b.a is not None)
    n_b = sum(1 for b in d.blocks if b.b is not None)
    by_name = sum(1 for b in d.blocks if b.matched_by is MatchedBy.NAME)
    by_pos = sum(1 for b in d.blocks if b.matched_by is MatchedBy.POSITION)
    changed = sum(1 for b in d.blocks if b.status is Change.CHANGED)
    only_a = sum(1 for b in d.blocks if b.status is Change.ONLY_A)
    only_b = sum(1 for b in d.blocks if b.status is Change.ONLY_B)
    paired = f"{by_name} paired by name" + (f", {by_pos} by position and shape" if by_pos else "")
    return (f"{n_a} block{'s' if n_a != 1 else ''} in A, {n_b} in B: {paired}; {changed} changed, "
            f"{only_a} only in A, {only_b} only in B.")


def verdict(d: ReportDiff) -> str:
    if not any(b.status is Change.CHANGED for b in d.blocks):
        if not d.blocks:
            return "Neither model has an attention block."
        return "No paired block changed." if any(b.status is not Change.SAME for b in d.blocks) else "No block changed."
    return "Paired blocks that changed (blocks with the same change on one row, ×N):"


def _text_table(header: Row, rows: Sequence[Row]) -> list[str]:
    cols = [[r.block, r.field, r.a, r.b, r.delta] for r in (header, *rows)]
    widths = [max(len(c[i]) for c in cols) for i in range(5)]
    keep = [i for i in range(5) if widths[i] > 0]
    out = []
    for c in cols:
        cells = [c[i].ljust(widths[i]) if i < 2 else c[i].rjust(widths[i]) for i in keep]
        out.append("  ".join(cells).rstrip())
    return out


def render_diff_text(d: ReportDiff) -> str:
    """The terminal form: A and B, the model side by side, the summary, the blocks that changed."""
    lines = [f"A: {printable(d.a)} ({d.a_format})", f"B: {printable(d.b)} ({d.b_format})", ""]
    lines += _text_table(Row("", "Model", "A", "B", "B − A"), model_rows(d))
    lines += ["", summary(d)]
    lines += [printable(line) for line in unpaired(d)]
    lines.append(verdict(d))
    rows = block_rows(d)
    if rows:
        lines += _text_table(Row("Block", "Field", "A", "B", "B − A"),
                             [Row(printable(r.block), r.field, r.a, r.b, r.delta) for r in rows])
    return "\n".join(lines) + "\n"


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_diff_markdown(d: ReportDiff) -> str:
    lines = [f"## mhainspect diff: {md_code(d.a)} → {md_code(d.b)}", "",
             f"A: {md_code(d.a)} ({md_text(d.a_format)}), B: {md_code(d.b)} ({md_text(d.b_format)})", "",
             _md_row(["Model", "A", "B", "B − A"]), "| --- | ---: | ---: | ---: |"]
    lines += [_md_row([r.field, md_text(r.a), md_text(r.b), r.delta]) for r in model_rows(d)]
    lines += ["", md_text(summary(d)), ""]
    lines += [f"- {md_text(line)}" for line in unpaired(d)]
    lines += ["", md_text(verdict(d))] if unpaired(d) else [md_text(verdict(d))]
    rows = block_rows(d)
    if rows:
        lines += ["", _md_row(["Block", "Field", "A", "B", "B − A"]), "| --- | --- | ---: | ---: | ---: |"]
        lines += [_md_row([md_code(r.block, table_cell=True), r.field, md_text(r.a), md_text(r.b), r.delta])
                  for r in rows]
    return "\n".join(lines) + "\n"


def _field_dict(f: FieldDiff) -> dict[str, Any]:
    return {"field": f.field, "a": f.a, "b": f.b, "delta": f.delta, "changed": f.changed}


def diff_to_dict(d: ReportDiff) -> dict[str, Any]:
    """The JSON document (docs/diff.schema.json): every block, changed or not, with every field."""
    return {
        "schema_version": SCHEMA_VERSION, "tool_version": __version__,
        "a": {"path": d.a, "format": d.a_format}, "b": {"path": d.b, "format": d.b_format},
        "changed": d.changed,
        "model": [_field_dict(f) for f in d.model],
        "blocks": [{"a": b.a, "b": b.b, "matched_by": str(b.matched_by), "status": str(b.status),
                    "fields": [_field_dict(f) for f in b.fields]} for b in d.blocks],
    }


def render_diff_json(d: ReportDiff) -> str:
    return to_json(diff_to_dict(d))


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]], names: int) -> str:
    """``names``: how many leading columns hold text (left-aligned); the rest are numbers."""
    head = "".join(f'<th class="l">{html(h)}</th>' if i < names else f"<th>{html(h)}</th>"
                   for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f'<td class="l"><code>{html(c)}</code></td>' if i == 0 and names == 2 else
                                    f'<td class="l">{html(c)}</td>' if i < names else f"<td>{html(c)}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f'<div class="scroll"><table class="blocks"><tr>{head}</tr>{body}</table></div>'


def render_diff_html(d: ReportDiff) -> str:
    """One self-contained page (the report page's stylesheet and policy)."""
    parts = ['<div class="mhai">', "<h2>mhainspect diff</h2>",
             f'<p class="meta">A: <code>{html(d.a)}</code> ({html(d.a_format)}) · B: <code>{html(d.b)}</code> '
             f"({html(d.b_format)})</p>",
             "<h3>Model</h3>",
             _html_table(["", "A", "B", "B − A"], [[r.field, r.a, r.b, r.delta] for r in model_rows(d)], 1),
             "<h3>Blocks</h3>", f"<p>{html(summary(d))}</p>",
             *(f'<p class="meta">{html(line)}</p>' for line in unpaired(d)), f"<p>{html(verdict(d))}</p>"]
    rows = block_rows(d)
    if rows:
        parts.append(_html_table(["Block", "Field", "A", "B", "B − A"],
                                 [[r.block, r.field, r.a, r.b, r.delta] for r in rows], 2))
    parts.append(f"<footer>mhainspect {html(__version__)} · counts are exact.</footer></div>")
    return page(f"mhainspect diff: {d.a} → {d.b}", "".join(parts))
