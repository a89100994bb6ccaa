"""Reports -> GitHub-flavoured markdown (PR comments, job summaries). Pure: returns text."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from mhainspect.findings import AttentionBlock, Report, Severity
from mhainspect.render.cells import (
    UNKNOWN,
    block_cells,
    blocks_word,
    format_label,
    gate_line,
    head_count_lines,
    ignored_line,
    percent,
    source_facts,
    verify_label,
    what_if_rows,
)
from mhainspect.render.extras import NO_EXTRAS, ModelExtras
from mhainspect.render.grouping import FlagGroup, group_flags, join_names
from mhainspect.render.numbers import group
from mhainspect.render.text import printable_fields

__all__ = ["render_markdown"]

_COLUMNS = (
    "Block", "Kind", "Heads", "d_model", "d_k", "d_v",
    "Q", "K", "V", "O", "Bias", "Total", "Share (%)",
)
_ALIGN = ("---", "---") + ("---:",) * (len(_COLUMNS) - 2)
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")


def _text(value: str) -> str:
    """Inline text safe in a table cell or list item: one line, markdown and pipes escaped."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(value.split()))


def _code(value: str) -> str:
    """An inline code span that survives backticks in the value and pipes in table cells."""
    one_line = " ".join(value.split()).replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", one_line)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if one_line.startswith("`") or one_line.endswith("`") else ""
    return f"{fence}{pad}{one_line}{pad}{fence}" if one_line else "(unnamed)"


def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _flag_item(g: FlagGroup) -> str:
    flag = g.flag
    sev = flag.severity.value if isinstance(flag.severity, Severity) else str(flag.severity)
    names = [b for b in g.blocks if b is not None]
    where = f"{_code(join_names(names))}: " if names else ""
    times = f" ×{g.count}" if g.count > 1 else ""
    return f"- **{flag.code}** ({sev}){times} {where}{_text(flag.message)}"


def _evidence(b: AttentionBlock) -> list[str]:
    """-v: the evidence behind a block's numbers, folded under its name."""
    lines = ["<details>", f"<summary>Evidence: {_text(b.name)} ({_text(b.matcher)})</summary>", ""]
    if b.anchor:
        lines.append(f"- anchor: {_code(b.anchor)}")
    for ev in b.evidence:
        value = "" if ev.value is None else f" = {ev.value:g}" if isinstance(ev.value, float) else f" = {ev.value}"
        lines.append(f"- {_text(ev.field + value)} ({_text(ev.source)}): {_text(ev.detail)}")
    if b.unknown_reason:
        lines.append(f"- unknown: {_text(b.unknown_reason)}")
    lines.extend(f"- conflict: {_text(c)}" for c in b.conflicts)
    for p in b.projections:
        bias = f" + bias {group(p.bias_params)}" if p.bias_params else ""
        lines.append(f"- {p.role}: {_code(p.weight or UNKNOWN)} ({p.in_features or UNKNOWN}→"
                     f"{p.out_features or UNKNOWN}) {group(p.weight_params)}{bias} via {_code(p.node)}")
    lines.extend(["", "</details>"])
    return lines


def _report(report: Report, level: int, extras: ModelExtras, verbose: bool, what_if_heads: Sequence[int],
            group_repeats: bool) -> list[str]:
    m = report.model
    hashes = "#" * level
    lines = [f"{hashes} {_code(m.path)}", ""]
    facts = "".join(f", {_text(f)}" for f in source_facts(m))
    share = f" ({percent(m.attention_params, m.total_params)}%)" if m.total_params else ""
    trainable = getattr(m, "trainable_params", None)
    train = (f" (trainable {group(trainable)}, non-trainable {group(m.total_params - trainable)})"
             if trainable is not None else "")
    lines.append(
        f"{_text(format_label(m.format))}{facts}: **{group(m.total_params)}** params{train}, "
        f"attention **{group(m.attention_params)}**{share}, {blocks_word(len(report.blocks))}"
    )
    lines.append("")
    if report.blocks:
        lines.append(_row(_COLUMNS))
        lines.append(_row(_ALIGN))
        for b in report.blocks:
            cells = list(block_cells(b, m.total_params))
            cells[0], cells[1], cells[11] = _code(b.name), _text(b.kind), f"**{cells[11]}**"
            lines.append(_row(cells))
        lines.append("")
        lines.extend(_text(line) for line in head_count_lines(report))
    else:
        lines.append("No attention blocks found.")
    if what_if_heads and report.blocks:
        lines.extend(["", f"**What if (--heads {', '.join(str(h) for h in what_if_heads)})**", "",
                      _row(("Blocks", "Heads now", "At heads", "h·d_k fixed", "d_k fixed")),
                      _row(("---", "---:", "---:", "---:", "---:"))])
        lines.extend(_row((_code(names), _text(now), str(n), a, b_))
                     for names, now, n, a, b_ in what_if_rows(report, what_if_heads))
    lines.append("")
    if report.flags:
        lines.append(f"**Flags ({len(report.flags)})**")
        lines.append("")
        lines.extend(_flag_item(g) for g in group_flags(report.flags, group=group_repeats and not verbose))
    else:
        lines.append("No flags.")
    if extras.ignored:
        lines.extend(["", _text(ignored_line(extras.ignored)) + "."])
    if extras.gates:
        failed = sum(1 for g in extras.gates if not g.passed)
        lines.extend(["", f"**Gates ({failed} failed)**" if failed else "**Gates: all passed**", ""])
        lines.extend(f"- {'✅' if g.passed else '❌'} {_text(gate_line(g))}" for g in extras.gates)
    checked = [b for b in report.blocks if b.verification is not None]
    if checked:
        lines.append("")
        lines.append("**Run-time check (--verify)**")
        lines.append("")
        lines.extend(f"- {_code(b.name)}: {_text(verify_label(b.verification))}"
                     for b in checked if b.verification is not None)
    if report.warnings:
        lines.append("")
        lines.append(f"**Warnings ({len(report.warnings)})**")
        lines.append("")
        lines.extend(f"- {_text(w)}" for w in report.warnings)
    if verbose:
        for b in report.blocks:
            lines.append("")
            lines.extend(_evidence(b))
    if report.misses:
        n = len(report.misses)
        lines.append("")
        lines.append("<details>")
        lines.append(f"<summary>{n} near miss{'es' if n != 1 else ''}</summary>")
        lines.append("")
        lines.extend(
            f"- {_text(x.matcher)} at {_code(x.anchor)}: {_text(x.reason)}" for x in report.misses
        )
        lines.append("")
        lines.append("</details>")
    lines.append("")
    return lines


def render_markdown(reports: Report | Iterable[Report], *, title: str | None = None,
                    extras: Sequence[ModelExtras] | None = None, verbose: bool = False,
                    what_if_heads: Sequence[int] = (), group_repeats: bool = True) -> str:
    """A markdown summary: per model a heading, a table of blocks and a list of flags.

    Accepts one report or several. ``title`` adds a level-2 heading above the models (their
    headings are then level 3, else level 2). Every count is exact. ``extras`` (one per report)
    add the gate results and the flags --ignore dropped; ``verbose`` the evidence per block (in a
    folded <details>) and every flag on its own line; ``what_if_heads`` a what-if table.
    """
    items = [printable_fields(r) for r in ([reports] if isinstance(reports, Report) else reports)]
    more = [printable_fields(e) for e in extras] if extras is not None else [NO_EXTRAS] * len(items)
    lines: list[str] = []
    level = 2
    if title is not None:
        lines.extend([f"## {_text(title)}", ""])
        level = 3
    if not items:
        lines.extend(["No models analysed.", ""])
    for report, extra in zip(items, more):
        lines.extend(_report(report, level, extra, verbose, what_if_heads, group_repeats))
    return "\n".join(lines).rstrip("\n") + "\n"
