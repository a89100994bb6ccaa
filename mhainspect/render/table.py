"""Report -> terminal text (rich). Pure: renders into a string, never prints."""

from __future__ import annotations

import io

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from mhainspect.findings import AttentionBlock, Flag, Report, Severity
from mhainspect.render.cells import UNKNOWN, block_cells, heads_label, percent, verify_label
from mhainspect.render.numbers import group
from mhainspect.render.safe import printable_fields
from mhainspect.render.size_lines import block_size_line, size_lines

__all__ = ["render_table", "heads_label", "severity_style", "verify_label"]

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def severity_style(severity: Severity | str) -> str:
    value = severity.value if isinstance(severity, Severity) else str(severity)
    return _SEVERITY_STYLE.get(value, "")


def _misses(n: int) -> str:
    return "1 near miss" if n == 1 else f"{n} near misses"


def _header(report: Report) -> list[Text]:
    m = report.model
    lines = [Text.assemble(("Model: ", "bold"), m.path)]
    meta = Text.assemble(("Format: ", "bold"), m.format)
    meta.append(f"  opset {m.opset if m.opset is not None else UNKNOWN}")
    meta.append(f"  producer {m.producer or UNKNOWN}")
    meta.append(f"  nodes {group(m.num_nodes)}")
    lines.append(meta)
    share = percent(m.attention_params, m.total_params)
    lines.append(
        Text.assemble(
            ("Params: ", "bold"),
            f"{group(m.total_params)} total; attention {group(m.attention_params)}",
            f" ({share}%)" if m.total_params else "",
        )
    )
    return lines


_DETAIL_COLUMNS = ("Q", "K", "V", "O", "Bias")
_COLUMNS = ("Block", "Kind", "Heads", "d_model", "d_k", "d_v", *_DETAIL_COLUMNS, "Total",
            "Share (%)")


def _gap(ascii_only: bool) -> int:
    """Cells between two columns: right padding + divider (+ left padding for ASCII rules)."""
    return 3 if ascii_only else 2


def _block_rows(report: Report) -> list[tuple[str, ...]]:
    total = report.model.total_params
    rows: list[tuple[str, ...]] = []
    for b in report.blocks:
        rows.append(block_cells(b, total))
    return rows


def _layout(report: Report, width: int, ascii_only: bool) -> str:
    """'full' table, 'compact' table (no Q/K/V/O/Bias) or 'list' (one line per block)."""
    rows = _block_rows(report)
    natural = [max(cell_len(c) for c in col) for col in zip(_COLUMNS, *rows)]

    def needed(columns: list[int], block_floor: int) -> int:
        rest = sum(natural[i] for i in columns if i != 0)
        return min(natural[0], block_floor) + rest + _gap(ascii_only) * (len(columns) - 1)

    all_cols = list(range(len(_COLUMNS)))
    # Block names are the handle users grep for: drop detail columns before folding a name.
    if needed(all_cols, natural[0]) <= width:
        return "full"
    if needed(_compact_columns(), natural[0]) <= width:
        return "compact"
    if needed(_compact_columns(), 12) <= width:
        return "compact"
    return "list"


def _compact_columns() -> list[int]:
    return [i for i, name in enumerate(_COLUMNS) if name not in _DETAIL_COLUMNS]


def _blocks_table(report: Report, compact: bool, ascii_only: bool) -> Table:
    rows = _block_rows(report)
    keep = _compact_columns() if compact else list(range(len(_COLUMNS)))
    table = Table(
        box=box.ASCII if ascii_only else box.SIMPLE_HEAD,
        show_edge=False,
        header_style="bold",
        pad_edge=False,
        # SIMPLE_HEAD's divider is a space: right padding alone separates columns.
        padding=(0, 1) if ascii_only else (0, 1, 0, 0),
    )
    for i in keep:
        name = _COLUMNS[i]
        if i == 0:
            table.add_column(name, overflow="fold", min_width=12)
        elif i == 1:
            table.add_column(name, no_wrap=True)
        else:
            table.add_column(name, justify="right", no_wrap=True)
    for row in rows:
        cells: list[Text] = []
        for i in keep:
            value = row[i]
            style = "bold" if _COLUMNS[i] == "Total" else ("dim" if value == UNKNOWN else "")
            cells.append(Text(value, style=style))
        table.add_row(*cells)
    return table


def _block_lines(report: Report) -> list[Text]:
    """Narrow-terminal fallback: one line per block, all columns as 'label value'."""
    lines = []
    for row in _block_rows(report):
        name, kind, heads, d_model, d_k, d_v, q, k, v, o, bias, total, share = row
        lines.append(
            Text.assemble(
                (name, "bold"),
                f": {kind}, heads {heads}, d_model {d_model}, d_k {d_k}, d_v {d_v}, "
                f"Q {q} K {k} V {v} O {o}, bias {bias}, ",
                (f"total {total}", "bold"),
                f" ({share}%)" if share != "-" else "",
            )
        )
    return lines


_VERIFY_STYLE = {"confirmed": "green", "contradicted": "bold red", "observed": "cyan", "unchecked": "dim"}


def _verify_line(b: AttentionBlock, verbose: bool) -> Text:
    v = b.verification
    assert v is not None
    line = Text.assemble(b.name, ": ", (verify_label(v), _VERIFY_STYLE.get(v.status, "")))
    if verbose and v.status != "unchecked" and v.reason:
        line.append(f"  [{v.reason}]", style="dim")
    return line


def _flag_line(flag: Flag) -> Text:
    sev = flag.severity.value if isinstance(flag.severity, Severity) else str(flag.severity)
    line = Text.assemble((flag.code, "bold"), " ", (f"{sev:<7}", severity_style(sev)), "  ")
    if flag.block is not None:
        line.append(flag.block)
        line.append(": ")
    line.append(flag.message)
    return line


def _block_details(b: AttentionBlock) -> list[Text]:
    lines = [Text.assemble(("Block ", "bold"), (b.name, "bold"), f"  [{b.matcher}]")]
    if b.anchor:
        lines.append(Text(f"  anchor: {b.anchor}"))
    for ev in b.evidence:
        value = "" if ev.value is None else f" = {ev.value:g}" if isinstance(ev.value, float) else f" = {ev.value}"
        lines.append(Text(f"  {ev.field}{value}  ({ev.source}) {ev.detail}"))
    if not b.scale_known and not any(ev.field == "scale" for ev in b.evidence):
        lines.append(Text("  scale: not found", style="dim"))
    if b.unknown_reason:
        lines.append(Text(f"  unknown: {b.unknown_reason}", style="yellow"))
    for conflict in b.conflicts:
        lines.append(Text(f"  conflict: {conflict}", style="yellow"))
    for proj in b.projections:
        shape = f"{proj.in_features or UNKNOWN}->{proj.out_features or UNKNOWN}"
        bias = f" + bias {group(proj.bias_params)}" if proj.bias_params else ""
        lines.append(
            Text(
                f"  {proj.role}: {proj.weight or UNKNOWN} ({shape}) "
                f"{group(proj.weight_params)}{bias}  via {proj.node}"
            )
        )
    if b.params.extra:
        lines.append(Text(f"  extra params: {group(b.params.extra)}"))
    lines.append(Text(f"  size: {block_size_line(b)}"))
    for w in b.what_if:
        lines.append(
            Text(
                f"  what if h={w.num_heads}: {group(w.total_width_fixed)} (h*d_k fixed), "
                f"{group(w.head_dim_fixed)} (d_k fixed)"
            )
        )
    return lines


def render_table(
    report: Report,
    *,
    width: int | None = None,
    color: bool = True,
    verbose: bool = False,
    ascii_only: bool = False,
) -> str:
    """Render one report as terminal text.

    ``color=False`` yields plain text without any escape sequence. ``verbose`` (the CLI's
    ``--explain``) adds per-block evidence and lists every near miss with its reason;
    otherwise misses are only counted. ``ascii_only`` draws the table with ASCII rules.
    The block table fits ``width`` (default 120): it drops the Q/K/V/O/Bias columns when they
    do not fit, and becomes one line per block on very narrow terminals. Free-text lines
    (flags, evidence) are not hard-wrapped. The result does not depend on environment
    variables (NO_COLOR, COLUMNS, ...): the caller decides ``color`` and ``width``.
    """
    report = printable_fields(report)  # names from the file must not drive the terminal
    width = width or 120
    parts: list[Text | Table] = [*_header(report), Text("")]
    if report.blocks:
        parts.append(Text(f"Attention blocks ({len(report.blocks)})", style="bold"))
        layout = _layout(report, width, ascii_only)
        if layout == "list":
            parts.extend(_block_lines(report))
        else:
            parts.append(_blocks_table(report, layout == "compact", ascii_only))
        if layout == "compact":
            parts.append(
                Text("Q/K/V/O/Bias columns hidden at this width (see --format json)", style="dim")
            )
    else:
        parts.append(
            Text.assemble(
                ("No attention blocks found", "bold yellow"), f" ({_misses(len(report.misses))})"
            )
        )

    sizes = size_lines(report)
    if sizes:
        parts.append(Text(""))
        parts.append(Text("Size", style="bold"))
        parts.extend(Text(line) for line in sizes)

    checked = [b for b in report.blocks if b.verification is not None]
    if checked:
        parts.append(Text(""))
        parts.append(Text("Verify (onnxruntime run)", style="bold"))
        parts.extend(_verify_line(b, verbose) for b in checked)

    parts.append(Text(""))
    if report.flags:
        parts.append(Text(f"Flags ({len(report.flags)})", style="bold"))
        parts.extend(_flag_line(f) for f in report.flags)
    else:
        parts.append(Text("Flags: none", style="bold"))

    if report.warnings:
        parts.append(Text(""))
        parts.append(Text(f"Warnings ({len(report.warnings)})", style="bold"))
        parts.extend(Text(f"- {w}", style="yellow") for w in report.warnings)

    n_miss = len(report.misses)
    if verbose:
        for b in report.blocks:
            parts.append(Text(""))
            parts.extend(_block_details(b))
        parts.append(Text(""))
        parts.append(Text(f"Near misses ({n_miss})", style="bold"))
        parts.extend(
            Text.assemble("- ", (m.matcher, "bold"), f" at {m.anchor}: {m.reason}")
            for m in report.misses
        )
    elif n_miss:
        parts.append(Text(""))
        parts.append(
            Text(
                f"{_misses(n_miss)} (candidates that did not match); "
                "use --explain to list them with reasons",
                style="dim",
            )
        )

    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        force_terminal=color,
        no_color=not color,
        color_system="standard" if color else None,
        force_jupyter=False,
        force_interactive=False,
        legacy_windows=False,
        markup=False,
        emoji=False,
        highlight=False,
        _environ={},  # independent of NO_COLOR, COLUMNS, FORCE_COLOR, ...
    )
    for part in parts:
        # Text lines are never hard-wrapped (one flag = one line, greppable); the table is
        # laid out to ``width``.
        console.print(part, soft_wrap=isinstance(part, Text))
    text = buffer.getvalue()
    if not color:
        text = "\n".join(line.rstrip() for line in text.split("\n"))
    return text
