"""Reports -> GitHub-flavoured markdown (PR comments, job summaries). Pure: returns text."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mhainspect.analysis.gates import NO_EXTRAS, ModelExtras
from mhainspect.ir.units import group
from mhainspect.render.cells import (
    GROUPED_NOTE,
    MODEL_COLUMNS,
    UNKNOWN,
    block_cells,
    block_groups,
    blocks_word,
    format_label,
    gate_line,
    head_count_lines,
    ignored_line,
    model_cells,
    model_names,
    percent,
    source_facts,
    verify_label,
    what_if_notes,
    what_if_rows,
)
from mhainspect.render.grouping import FlagGroup, group_flags, join_names
from mhainspect.render.safe import html, md_code, md_text
from mhainspect.render.size_lines import experts_line, size_lines
from mhainspect.results import AttentionBlock, FailedInput, Report, Severity

__all__ = ["render_markdown"]

_COLUMNS = (
    "Block", "Kind", "Heads", "d_model", "d_k", "d_v",
    "Q", "K", "V", "O", "Bias", "Total", "Share (%)",
)
_ALIGN = ("---", "---") + ("---:",) * (len(_COLUMNS) - 2)
def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _flag_item(g: FlagGroup) -> str:
    flag = g.flag
    sev = flag.severity.value if isinstance(flag.severity, Severity) else str(flag.severity)
    names = [b for b in g.blocks if b is not None]
    where = f"{md_code(join_names(names))}: " if names else ""
    times = f" ×{g.count}" if g.count > 1 else ""
    return f"- **{flag.code}** ({sev}){times} {where}{md_text(flag.message)}"


def _evidence(b: AttentionBlock) -> list[str]:
    """-v: the evidence behind a block's numbers, folded under its name."""
    # Inside an HTML block Markdown is not parsed (backslash escapes would show): HTML escaping.
    lines = ["<details>", f"<summary>Evidence: <code>{html(b.name)}</code> ({html(b.matcher)})</summary>", ""]
    if b.anchor:
        lines.append(f"- anchor: {md_code(b.anchor)}")
    for ev in b.evidence:
        value = "" if ev.value is None else f" = {ev.value:g}" if isinstance(ev.value, float) else f" = {ev.value}"
        lines.append(f"- {md_text(ev.field + value)} ({md_text(ev.source)}): {md_text(ev.detail)}")
    if b.unknown_reason:
        lines.append(f"- unknown: {md_text(b.unknown_reason)}")
    lines.extend(f"- conflict: {md_text(c)}" for c in b.conflicts)
    for p in b.projections:
        bias = f" + bias {group(p.bias_params)}" if p.bias_params else ""
        lines.append(f"- {p.role}: {md_code(p.weight or UNKNOWN)} ({p.in_features or UNKNOWN}→"
                     f"{p.out_features or UNKNOWN}) {group(p.weight_params)}{bias} via {md_code(p.node)}")
    lines.extend(["", "</details>"])
    return lines


def _overview(reports: Sequence[Report], level: int) -> list[str]:
    """One row per model before the models' own sections."""
    lines = [f"{'#' * level} Models ({len(reports)})", "", _row(MODEL_COLUMNS),
             _row(("---", "---", *("---:",) * 4, "---", "---:", "---"))]
    for report, name in zip(reports, model_names(reports)):
        cells = list(model_cells(report, name))  # the tool's own words and numbers, but the name
        cells[0] = md_code(name, table_cell=True)
        lines.append(_row(cells))
    return [*lines, ""]


def _report(report: Report, level: int, extras: ModelExtras, verbose: bool, what_if_heads: Sequence[int],
            group_repeats: bool) -> list[str]:
    lines = [*_heading(report, level), *_blocks_part(report, group_repeats and not verbose),
             *_what_if_part(report, what_if_heads), "", *_flags_part(report, extras, group_repeats and not verbose)]
    failed = sum(1 for g in extras.gates if not g.passed)
    lines += _section(f"Gates ({failed} failed)" if failed else "Gates: all passed",
                      [f"- {'✅' if g.passed else '❌'} {md_text(gate_line(g))}" for g in extras.gates])
    lines += _section("Size", [f"- {md_text(line.strip())}" for line in size_lines(report)])
    lines += _section("Run-time check (--verify)", [f"- {md_code(b.name)}: {md_text(verify_label(b.verification))}"
                                                    for b in report.blocks if b.verification is not None])
    lines += _section(f"Warnings ({len(report.warnings)})", [f"- {md_text(w)}" for w in report.warnings])
    if verbose:
        for b in report.blocks:
            lines.extend(["", *_evidence(b)])
    if report.misses:
        n = len(report.misses)
        lines.extend(["", "<details>", f"<summary>{n} near miss{'es' if n != 1 else ''}</summary>", "",
                      *(f"- {md_text(x.matcher)} at {md_code(x.anchor)}: {md_text(x.reason)}" for x in report.misses),
                      "", "</details>"])
    lines.append("")
    return lines


def _section(title: str, items: Sequence[str]) -> list[str]:
    """A bold title and its list, after a blank line; nothing without items."""
    return ["", f"**{title}**", "", *items] if items else []


def _heading(report: Report, level: int) -> list[str]:
    m = report.model
    facts = "".join(f", {md_text(f)}" for f in source_facts(m))
    share = f" ({percent(m.attention_params, m.total_params)}%)" if m.total_params else ""
    trainable = getattr(m, "trainable_params", None)
    train = (f" (trainable {group(trainable)}, non-trainable {group(m.total_params - trainable)})"
             if trainable is not None else "")
    moe = experts_line(report)
    return [f"{'#' * level} {md_code(m.path)}", "",
            f"{md_text(format_label(m.format))}{facts}: **{group(m.total_params)}** params{train}, "
            f"attention **{group(m.attention_params)}**{share}, {blocks_word(len(report.blocks))}", "",
            *([md_text(moe), ""] if moe else [])]


def _blocks_part(report: Report, group_repeats: bool) -> list[str]:
    """The block table, one row per set of identical blocks, and the head-count sentences."""
    if not report.blocks:
        return ["No attention blocks found."]
    lines = [_row(_COLUMNS), _row(_ALIGN)]
    groups = block_groups(report, group_repeats)
    for g in groups:
        cells = list(block_cells(g.first, report.model.total_params))
        times = f" ×{g.count}" if g.count > 1 else ""
        cells[0], cells[1], cells[11] = md_code(g.label, table_cell=True) + times, md_text(cells[1]), f"**{cells[11]}**"
        lines.append(_row(cells))
    lines.append("")
    if any(g.count > 1 for g in groups):
        lines.extend([md_text(GROUPED_NOTE), ""])
    return lines + [md_text(line) for line in head_count_lines(report)]


def _what_if_part(report: Report, heads: Sequence[int]) -> list[str]:
    if not heads or not report.blocks:
        return []
    lines = ["", f"**What if (--heads {', '.join(str(h) for h in heads)})**", "",
             _row(("Blocks", "Heads now", "At heads", "h·d_k fixed", "d_k fixed")),
             _row(("---", "---:", "---:", "---:", "---:"))]
    lines.extend(_row((md_code(names, table_cell=True), md_text(now), str(n), a, b_))
                 for names, now, n, a, b_ in what_if_rows(report, heads))
    notes = what_if_notes(report, heads)
    return lines + (["", *(md_text(note) for note in notes)] if notes else [])


def _flags_part(report: Report, extras: ModelExtras, group_repeats: bool) -> list[str]:
    if report.flags:
        lines = [f"**Flags ({len(report.flags)})**", "",
                 *(_flag_item(g) for g in group_flags(report.flags, group=group_repeats))]
    else:
        lines = ["No flags."]
    return lines + (["", md_text(ignored_line(extras.ignored)) + "."] if extras.ignored else [])


def render_markdown(reports: Report | Iterable[Report], *, title: str | None = None,
                    extras: Sequence[ModelExtras] | None = None, verbose: bool = False,
                    what_if_heads: Sequence[int] = (), group_repeats: bool = True,
                    failed: Sequence[FailedInput] = ()) -> str:
    """A markdown summary: per model a heading, a table of blocks and a list of flags.

    Accepts one report or several. ``title`` adds a level-2 heading above the models (their
    headings are then level 3, else level 2). Every count is exact. ``extras`` (one per report)
    add the gate results and the flags --ignore dropped; ``verbose`` the evidence per block (in a
    folded <details>) and every flag on its own line; ``what_if_heads`` a what-if table.
    """
    items = [reports] if isinstance(reports, Report) else list(reports)
    more = list(extras) if extras is not None else [NO_EXTRAS] * len(items)
    lines: list[str] = []
    level = 2
    if title is not None:
        lines.extend([f"## {md_text(title)}", ""])
        level = 3
    if not items:
        lines.extend(["No models analysed.", ""])
    if len(items) > 1:
        lines.extend(_overview(items, level))
    for report, extra in zip(items, more):
        lines.extend(_report(report, level, extra, verbose, what_if_heads, group_repeats))
    lines.extend(_failed(failed, level))
    return "\n".join(lines).rstrip("\n") + "\n"


def _failed(failed: Sequence[FailedInput], level: int) -> list[str]:
    if not failed:
        return []
    return [f"{'#' * level} Could not be audited ({len(failed)})", "",
            *(f"- {md_code(f.input)} ({md_text(f.kind)}): {md_text(f.message)}" for f in failed), ""]


def render_overview_markdown(reports: Sequence[Report], *, failed: Sequence[FailedInput] = ()) -> str:
    """--summary in markdown: the one-row-per-model table (and the inputs that could not be audited)."""
    lines = _overview(reports, 2) if reports else ["No models analysed.", ""]
    return "\n".join([*lines, *_failed(failed, 2)]).rstrip("\n") + "\n"
