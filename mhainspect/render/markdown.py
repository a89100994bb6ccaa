"""Reports -> GitHub-flavoured markdown (PR comments, job summaries). Pure: returns text."""

from __future__ import annotations

from collections.abc import Iterable

from mhainspect.findings import Flag, Report, Severity
from mhainspect.render.cells import block_cells, percent, verify_label
from mhainspect.render.numbers import group
from mhainspect.render.safe import md_code, md_text
from mhainspect.render.size_lines import size_lines

__all__ = ["render_markdown"]

_COLUMNS = (
    "Block", "Kind", "Heads", "d_model", "d_k", "d_v",
    "Q", "K", "V", "O", "Bias", "Total", "Share (%)",
)
_ALIGN = ("---", "---") + ("---:",) * (len(_COLUMNS) - 2)


def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _flag_item(flag: Flag) -> str:
    sev = flag.severity.value if isinstance(flag.severity, Severity) else str(flag.severity)
    where = f"{md_code(flag.block)}: " if flag.block is not None else ""
    return f"- **{flag.code}** ({sev}) {where}{md_text(flag.message)}"


def _report(report: Report, level: int) -> list[str]:
    m = report.model
    hashes = "#" * level
    lines = [f"{hashes} {md_code(m.path)}", ""]
    opset = f", opset {m.opset}" if m.opset is not None else ""
    producer = f", {md_text(m.producer)}" if m.producer else ""
    share = f" ({percent(m.attention_params, m.total_params)}%)" if m.total_params else ""
    lines.append(
        f"{md_text(m.format)}{opset}{producer}: **{group(m.total_params)}** params, "
        f"attention **{group(m.attention_params)}**{share}, {len(report.blocks)} blocks"
    )
    lines.append("")
    if report.blocks:
        lines.append(_row(_COLUMNS))
        lines.append(_row(_ALIGN))
        for b in report.blocks:
            cells = list(block_cells(b, m.total_params))
            cells[0], cells[1], cells[11] = md_code(b.name, table_cell=True), md_text(b.kind), f"**{cells[11]}**"
            lines.append(_row(cells))
    else:
        lines.append("No attention blocks found.")
    lines.append("")
    if report.flags:
        lines.append(f"**Flags ({len(report.flags)})**")
        lines.append("")
        lines.extend(_flag_item(f) for f in report.flags)
    else:
        lines.append("No flags.")
    sizes = size_lines(report)
    if sizes:
        lines.append("")
        lines.append("**Size**")
        lines.append("")
        lines.extend(f"- {md_text(line.strip())}" for line in sizes)
    checked = [b for b in report.blocks if b.verification is not None]
    if checked:
        lines.append("")
        lines.append("**Run-time check (--verify)**")
        lines.append("")
        lines.extend(f"- {md_code(b.name)}: {md_text(verify_label(b.verification))}"
                     for b in checked if b.verification is not None)
    if report.warnings:
        lines.append("")
        lines.append(f"**Warnings ({len(report.warnings)})**")
        lines.append("")
        lines.extend(f"- {md_text(w)}" for w in report.warnings)
    if report.misses:
        n = len(report.misses)
        lines.append("")
        lines.append("<details>")
        lines.append(f"<summary>{n} near miss{'es' if n != 1 else ''}</summary>")
        lines.append("")
        lines.extend(
            f"- {md_text(x.matcher)} at {md_code(x.anchor)}: {md_text(x.reason)}" for x in report.misses
        )
        lines.append("")
        lines.append("</details>")
    lines.append("")
    return lines


def render_markdown(reports: Report | Iterable[Report], *, title: str | None = None) -> str:
    """A markdown summary: per model a heading, a table of blocks and a list of flags.

    Accepts one report or several. ``title`` adds a level-2 heading above the models (their
    headings are then level 3, else level 2). Human-size numbers (1.05M) appear in the block
    table only; the model totals are exact.
    """
    items = [reports] if isinstance(reports, Report) else list(reports)
    lines: list[str] = []
    level = 2
    if title is not None:
        lines.extend([f"## {md_text(title)}", ""])
        level = 3
    if not items:
        lines.extend(["No models analysed.", ""])
    for report in items:
        lines.extend(_report(report, level))
    return "\n".join(lines).rstrip("\n") + "\n"
