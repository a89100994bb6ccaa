"""Report -> terminal text (rich). Pure: renders into a string, never prints.

Free text wraps at word boundaries to the given width (rich does the wrapping), with a hanging
indent under each flag, warning and evidence line; block names are never split: the table
shortens a name that cannot fit ("…layers.0.attention") and says so, and -v and JSON keep it whole.
Counts are exact; only a terminal too narrow for exact counts abbreviates them, and says so.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from mhainspect.analysis.gates import NO_EXTRAS, ModelExtras
from mhainspect.ir.units import group
from mhainspect.render.cells import (
    GROUPED_NOTE,
    MODEL_COLUMNS,
    UNKNOWN,
    block_cells,
    block_groups,
    format_label,
    head_count_lines,
    heads_label,
    ignored_line,
    kind_label,
    model_cells,
    model_names,
    percent,
    source_facts,
    verify_label,
    what_if_notes,
    what_if_rows,
)
from mhainspect.render.grouping import BlockGroup, FlagGroup, common_prefix, group_flags, join_names
from mhainspect.render.safe import printable_fields
from mhainspect.render.size_lines import block_size_line, experts_line, size_lines
from mhainspect.results import AttentionBlock, BlockKind, Report, Severity, VerifyStatus

__all__ = ["heads_label", "render_overview", "render_summary", "render_table", "render_text", "severity_style",
           "verify_label"]

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def severity_style(severity: Severity | str) -> str:
    value = severity.value if isinstance(severity, Severity) else str(severity)
    return _SEVERITY_STYLE.get(value, "")


def _misses(n: int) -> str:
    return "1 near miss" if n == 1 else f"{n} near misses"


def _header(report: Report) -> list[Text]:
    m = report.model
    lines = [Text.assemble(("Model: ", "bold"), m.path)]
    meta = Text.assemble(("Format: ", "bold"), format_label(m.format))
    for fact in source_facts(m):
        meta.append(f"  {fact}")
    lines.append(meta)
    share = percent(m.attention_params, m.total_params)
    params = Text.assemble(
        ("Params: ", "bold"),
        f"{group(m.total_params)} total; attention {group(m.attention_params)}",
        f" ({share}%)" if m.total_params else "",
    )
    trainable = getattr(m, "trainable_params", None)
    if trainable is not None:
        params.append(f"; trainable {group(trainable)}, non-trainable {group(m.total_params - trainable)}")
    if m.experts is not None and m.experts.active_params is not None:
        params.append(f"; active per token {group(m.experts.active_params)}")
    lines.append(params)
    if (moe := experts_line(report)) is not None:
        lines.append(Text(moe))
    return lines


_DETAIL_COLUMNS = ("Q", "K", "V", "O", "Bias")
_COLUMNS = ("Block", "Kind", "Heads", "d_model", "d_k", "d_v", *_DETAIL_COLUMNS, "Total",
            "Share (%)")


def _gap(ascii_only: bool) -> int:
    """Cells between two columns: right padding + divider (+ left padding for ASCII rules)."""
    return 3 if ascii_only else 2


def _label(g: BlockGroup) -> str:
    """A row's name: the block's, or the folded names of identical blocks with their count."""
    return g.label if g.count == 1 else f"{g.label} ×{g.count}"


def _block_rows(report: Report, groups: Sequence[BlockGroup], exact: bool) -> list[tuple[str, ...]]:
    total = report.model.total_params
    return [(_label(g), *block_cells(g.first, total, exact=exact)[1:]) for g in groups]


def _compact_columns() -> list[int]:
    return [i for i, name in enumerate(_COLUMNS) if name not in _DETAIL_COLUMNS]


def _detail_columns() -> list[int]:
    return [0, *(i for i, name in enumerate(_COLUMNS) if name in _DETAIL_COLUMNS)]


_MIN_NAME = 16  # a block name shortened below this no longer says which block it is
_SPLIT_ROWS = 16  # up to this many rows, Q/K/V/O/Bias that do not fit get a table of their own


@dataclass(frozen=True)
class _Layout:
    """How the block table fits the width: which columns, exact or abbreviated counts, the common
    prefix dropped from the names, the width names are shortened to (None: names in full),
    whether Q/K/V/O/Bias have a second table; ``lines`` is one line per row."""

    columns: tuple[int, ...]
    exact: bool
    prefix: str = ""
    name_width: int | None = None
    shorten: str = "tail"
    split: bool = False
    lines: bool = False


def _layout(report: Report, groups: Sequence[BlockGroup], width: int, ascii_only: bool) -> _Layout:
    """The widest layout that fits, giving up in this order: the names' common prefix; a Kind
    column that says the same on every row (the heading says it); a single table (Q/K/V/O/Bias
    move to a second one, or are hidden when there are many rows); whole names (shortened with
    '…'); exact counts; a table (one line per row)."""
    gap = _gap(ascii_only)
    prefix = common_prefix([b.name for b in report.blocks])
    every, compact = tuple(range(len(_COLUMNS))), tuple(_compact_columns())
    split = len(groups) <= _SPLIT_ROWS
    candidates: list[tuple[str, tuple[int, ...], bool]] = [("", every, False), (prefix, every, False)]
    if uniform_kind(groups) is not None:
        candidates.append((prefix, tuple(i for i in every if i != 1), False))
    candidates.append((prefix, compact, split))
    if uniform_kind(groups) is not None:
        candidates.append((prefix, tuple(i for i in compact if i != 1), split))
    for exact in (True, False):
        rows = _block_rows(report, groups, exact)
        natural = [max(cell_len(c) for c in col) for col in zip(_COLUMNS, *rows)]
        for drop, columns, detail in candidates:
            if _name_width(rows, drop) + _rest_width(natural, columns, detail, gap) <= width:
                return _Layout(columns, exact, drop, split=detail)
        drop, columns, detail = candidates[-1]
        room = width - _rest_width(natural, columns, detail, gap)
        how = _shortening([r[0][len(drop):] for r in rows], room) if room >= _MIN_NAME else None
        if how is not None:
            return _Layout(columns, exact, drop, room, how, detail)
    return _Layout((), False, lines=True)


def _name_width(rows: Sequence[tuple[str, ...]], drop: str) -> int:
    """Cells the Block column needs with ``drop`` cut from every name."""
    return max(cell_len(n) for n in [_COLUMNS[0], *(r[0][len(drop):] for r in rows)])


def _rest_width(natural: Sequence[int], columns: Sequence[int], detail: bool, gap: int) -> int:
    """Cells every column but Block needs; ``detail``: the wider of this and the Q/K/V/O table."""
    need = sum(natural[i] for i in columns if i != 0) + gap * (len(columns) - 1)
    return max(need, _rest_width(natural, _detail_columns(), False, gap)) if detail else need


_KIND_WORDS: dict[str, str] = {BlockKind.SELF: "self-attention", BlockKind.CROSS: "cross-attention"}


def uniform_kind(groups: Sequence[BlockGroup]) -> str | None:
    """'self-attention' when every row is a self-attention block run once (the Kind column then
    says nothing a heading cannot), else None."""
    kinds = {kind_label(g.first) for g in groups}
    kind = kinds.pop() if len(kinds) == 1 else None
    return None if kind is None or "×" in kind else _KIND_WORDS.get(kind, kind)


def _shortening(names: list[str], width: int) -> str | None:
    """How to shorten names to ``width`` so they still tell the blocks apart: keep their ends
    ("tail") or both ends ("middle"); None when neither does (the table keeps them whole)."""
    for how in ("tail", "middle"):
        if len({_shorten(n, width, how) for n in names}) == len(set(names)):
            return how
    return None


def _shorten(name: str, width: int, how: str = "tail") -> str:
    """``name`` in at most ``width`` cells: its end kept (the layer number and role) behind '…',
    cut at a '.' or '/' where one is near; "middle" keeps a third of the start too."""
    if cell_len(name) <= width:
        return name
    if how == "middle":
        head_len = (width - 1) // 3
        head = name[:head_len]
        rest = width - 1 - cell_len(head)
        tail = name[-rest:] if rest > 0 else ""
        while cell_len(tail) > rest:
            tail = tail[1:]
        return head + "…" + tail
    tail = name[-(width - 1):]
    while cell_len(tail) > width - 1:
        tail = tail[1:]
    for i, ch in enumerate(tail[: len(tail) // 2]):
        if ch in "./":
            tail = tail[i + 1:] if i + 1 < len(tail) else tail
            break
    return "…" + tail


def _blocks_table(rows: Sequence[tuple[str, ...]], columns: Sequence[int], layout: _Layout,
                  ascii_only: bool) -> Table:
    table = Table(
        box=box.ASCII if ascii_only else box.SIMPLE_HEAD,
        show_edge=False,
        header_style="bold",
        pad_edge=False,
        # SIMPLE_HEAD's divider is a space: right padding alone separates columns.
        padding=(0, 1) if ascii_only else (0, 1, 0, 0),
    )
    for i in columns:
        name = _COLUMNS[i]
        if i <= 1:
            table.add_column(name, no_wrap=True)
        else:
            table.add_column(name, justify="right", no_wrap=True)
    for row in rows:
        cells: list[Text] = []
        for i in columns:
            value = row[i]
            if i == 0:
                value = value[len(layout.prefix):]
                if layout.name_width is not None:
                    value = _shorten(value, layout.name_width, layout.shorten)
            style = "bold" if _COLUMNS[i] == "Total" else ("dim" if value == UNKNOWN else "")
            cells.append(Text(value, style=style))
        table.add_row(*cells)
    return table


def _block_tables(report: Report, groups: Sequence[BlockGroup], layout: _Layout,
                  ascii_only: bool) -> list[RenderableType]:
    """The block table, and the Q/K/V/O/Bias table when they have one of their own."""
    if layout.lines:
        return list(_block_lines(report, groups))
    rows = _block_rows(report, groups, layout.exact)
    tables: list[RenderableType] = [_blocks_table(rows, layout.columns, layout, ascii_only)]
    if layout.split:
        tables.extend((Text(""), _blocks_table(rows, _detail_columns(), layout, ascii_only)))
    return tables


def _block_lines(report: Report, groups: Sequence[BlockGroup]) -> list[Text]:
    """Narrow-terminal fallback: one (wrapped) line per row, all columns as 'label value'."""
    lines = []
    for row in _block_rows(report, groups, True):
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


def _layout_notes(layout: _Layout, groups: Sequence[BlockGroup], width: int) -> list[Text]:
    notes = []
    if any(g.count > 1 for g in groups):
        notes.append(GROUPED_NOTE)
    if layout.prefix and not layout.lines:
        notes.append(f'Block names without their common prefix "{layout.prefix}" (to fit {width} columns).')
    if not layout.lines and not layout.split and not set(_detail_columns()) <= set(layout.columns):
        notes.append(f"Q/K/V/O/Bias columns hidden at {width} columns; -v lists them per block.")
    if layout.name_width is not None:
        notes.append("Block names shortened (…) to fit; -v gives them in full.")
    if not layout.exact and not layout.lines:
        notes.append(f"Counts abbreviated to fit {width} columns (k = thousand, M = million, B = billion); "
                     "exact counts in a wider terminal or with -v.")
    return [Text(n, style="dim") for n in notes]


def _hang(lead: Sequence[tuple[str, str]], body: Text, width: int, indent: int = 0, gap: int = 1) -> RenderableType:
    """``lead`` cells, then ``body`` wrapped at word boundaries under itself (a hanging indent);
    plain wrapping from the line start when a word of ``body`` (a long tensor name) would not fit
    under the lead, so no word is split."""
    room = width - indent - sum(cell_len(text) + gap for text, _ in lead)
    if max((cell_len(w) for w in body.plain.split()), default=0) > room:
        line = Text(" " * indent)
        for text, style in lead:
            line.append(text, style=style)
            line.append(" " * gap)
        line.append_text(body)
        return line
    grid = Table.grid(padding=(0, gap, 0, 0), pad_edge=False)
    if indent:
        grid.add_column(width=indent - gap, no_wrap=True)
    for _ in lead:
        grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold", ratio=1)
    cells: list[RenderableType] = [Text("")] if indent else []
    cells.extend(Text(text, style=style) for text, style in lead)
    cells.append(body)
    grid.add_row(*cells)
    return grid


_VERIFY_STYLE: dict[str, str] = {VerifyStatus.CONFIRMED: "green", VerifyStatus.CONTRADICTED: "bold red", VerifyStatus.OBSERVED: "cyan",
                                 VerifyStatus.UNCHECKED: "dim"}


def _verify_line(b: AttentionBlock, verbose: bool) -> Text:
    v = b.verification
    assert v is not None
    line = Text.assemble(b.name, ": ", (verify_label(v), _VERIFY_STYLE.get(v.status, "")))
    if verbose and v.status != VerifyStatus.UNCHECKED and v.reason:
        line.append(f"  [{v.reason}]", style="dim")
    return line


def _flag_rows(groups: Sequence[FlagGroup], width: int) -> list[RenderableType]:
    """Code, severity, then the message wrapped under itself; a folded group says ×N and its blocks.
    Plain wrapping from the line start when a word (a long block name) would not fit under them."""
    rows: list[tuple[Text, Text, Text]] = []
    for g in groups:
        flag = g.flag
        sev = flag.severity.value if isinstance(flag.severity, Severity) else str(flag.severity)
        body = Text()
        if g.count > 1:
            body.append(f"×{g.count} ", style="bold")
        names = [b for b in g.blocks if b is not None]
        if names:
            body.append(join_names(names) + ": ")
        body.append(flag.message)
        rows.append((Text(flag.code, style="bold"), Text(sev, style=severity_style(sev)), body))
    lead = max((r[0].cell_len for r in rows), default=0) + max((r[1].cell_len for r in rows), default=0) + 4
    longest = max((cell_len(w) for r in rows for w in r[2].plain.split()), default=0)
    if longest > width - lead:
        return [Text.assemble(code, "  ", sev, "  ", body) for code, sev, body in rows]
    grid = Table.grid(padding=(0, 2, 0, 0), pad_edge=False)
    grid.add_column(no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold", ratio=1)
    for row in rows:
        grid.add_row(*row)
    return [grid]


def _block_details(b: AttentionBlock, width: int) -> list[RenderableType]:
    def _detail(lead: str, text: str, style: str = "") -> RenderableType:
        """'  lead text...' with the text wrapped under itself."""
        return _hang(((lead, style),), Text(text, style=style), width, indent=2, gap=1)

    lines: list[RenderableType] = [Text.assemble(("Block ", "bold"), (b.name, "bold"), f"  [{b.matcher}]")]
    if b.anchor:
        lines.append(_detail("anchor:", b.anchor))
    for ev in b.evidence:
        value = "" if ev.value is None else f" = {ev.value:g}" if isinstance(ev.value, float) else f" = {ev.value}"
        lines.append(_detail(f"{ev.field}{value} ", f"({ev.source}) {ev.detail}"))
    if not b.scale_known and not any(ev.field == "scale" for ev in b.evidence):
        lines.append(_detail("scale:", "not found", "dim"))
    if b.unknown_reason:
        lines.append(_detail("unknown:", b.unknown_reason, "yellow"))
    for conflict in b.conflicts:
        lines.append(_detail("conflict:", conflict, "yellow"))
    for proj in b.projections:
        shape = f"{proj.in_features or UNKNOWN}->{proj.out_features or UNKNOWN}"
        bias = f" + bias {group(proj.bias_params)}" if proj.bias_params else ""
        lines.append(_detail(f"{proj.role}:", f"{proj.weight or UNKNOWN} ({shape}) "
                             f"{group(proj.weight_params)}{bias}  via {proj.node}"))
    if b.params.latent:
        lines.append(_detail("latent params:", f"{group(b.params.latent)} (down-projections and norms, in the total)"))
    if b.params.indexer:
        heads = f", {b.indexer.num_heads} heads" if b.indexer is not None and b.indexer.num_heads else ""
        key = f"key {b.indexer.d_k}{heads}, " if b.indexer is not None else ""
        lines.append(_detail("indexer params:", f"{group(b.params.indexer)} (sparse-attention indexer: {key}in the total)"))
    if b.params.gate:
        lines.append(_detail("gate params:", f"{group(b.params.gate)} (output gate's projection, in the total)"))
    if b.params.kv_rows:
        lines.append(_detail("K/V rows:", f"{group(b.params.kv_rows)} (learned bias_k/bias_v, in the total)"))
    if b.params.extra:
        lines.append(_detail("extra params:", group(b.params.extra)))
    lines.append(_detail("size:", block_size_line(b)))
    for w in b.what_if:
        fixed = UNKNOWN if w.total_width_fixed is None else group(w.total_width_fixed)
        lines.append(_detail(f"what if h={w.num_heads}:", f"{fixed} (h*d_k fixed), "
                             f"{group(w.head_dim_fixed)} (d_k fixed)"))
    return lines


def _what_if_table(report: Report, heads: Sequence[int], width: int, ascii_only: bool) -> Table:
    table = Table(box=box.ASCII if ascii_only else box.SIMPLE_HEAD, show_edge=False, header_style="bold",
                  pad_edge=False, padding=(0, 1) if ascii_only else (0, 1, 0, 0))
    headers = ("Heads now", "At heads", "h·d_k fixed", "d_k fixed")
    rows = what_if_rows(report, heads)
    # Names stay whole, or are shortened (distinctly) like the block table's, never folded.
    rest = sum(max([len(h), *(len(str(r[i + 1])) for r in rows)]) for i, h in enumerate(headers))
    room = max(width - rest - _gap(ascii_only) * len(headers), _MIN_NAME)
    names = [r[0] for r in rows]
    how = _shortening(list(dict.fromkeys(names)), room) or "middle"
    table.add_column("Blocks", no_wrap=True)
    for name in headers:
        table.add_column(name, justify="right", no_wrap=True)
    for label, now, n, width_fixed, dk_fixed in rows:
        table.add_row(_shorten(label, room, how), now, str(n), width_fixed, dk_fixed)
    return table


def render_table(
    report: Report,
    *,
    width: int | None = None,
    color: bool = True,
    verbose: bool = False,
    ascii_only: bool = False,
    extras: ModelExtras = NO_EXTRAS,
    what_if_heads: Sequence[int] = (),
    group_repeats: bool = True,
    wrap: bool = True,
) -> str:
    """Render one report as terminal text.

    ``color=False`` yields plain text without any escape sequence. ``verbose`` (the CLI's
    ``--explain``) adds per-block evidence, lists every near miss with its reason and every flag
    on its own line; otherwise misses are only counted and identical flags of several blocks are
    one line (also with ``group_repeats=False``). ``what_if_heads`` (--heads) adds a what-if
    section; ``extras`` the run's gate results and the flags --ignore dropped. Blocks with the
    same numbers are one row (``group_repeats=False`` or ``verbose``: one row each). The block
    table fits ``width`` (default 120), giving way as ``_layout`` says and saying so each time,
    and becomes one paragraph per row on very narrow terminals. Free text wraps at word boundaries (``wrap=False``: never, one line per flag, for
    logs and pipes). The result does not depend on environment
    variables (NO_COLOR, COLUMNS, ...): the caller decides ``color`` and ``width``.
    """
    report = printable_fields(report)  # names from the file must not drive the terminal
    extras = printable_fields(extras)
    width = width or 120
    # wrap=False (a pipe or a log): every flag, warning and evidence line stays one greppable line.
    text_width = width if wrap else 0
    parts: list[RenderableType] = [*_header(report), Text("")]
    parts += _blocks_part(report, width, ascii_only, group_repeats and not verbose)
    parts += _what_if_part(report, what_if_heads, width, ascii_only)
    parts += _section("Size", [Text(line) for line in size_lines(report)])
    parts += _section("Verify (onnxruntime run)",
                      [_verify_line(b, verbose) for b in report.blocks if b.verification is not None])
    parts += _flags_part(report, extras, text_width, group_repeats and not verbose)
    failed = sum(1 for g in extras.gates if not g.passed)
    parts += _section(f"Gates ({failed} failed)" if failed else "Gates: all passed",
                      [_hang(((("passed", "green") if g.passed else ("FAILED", "bold red")),), Text(g.message),
                             text_width) for g in extras.gates])
    parts += _section(f"Warnings ({len(report.warnings)})",
                      [_hang((("-", ""),), Text(w, style="yellow"), text_width) for w in report.warnings])
    parts += _misses_part(report, verbose, text_width)
    text = _print(parts, width, color, wrap)
    return text.translate(_ASCII) if ascii_only else text


def _section(title: str, lines: Sequence[RenderableType]) -> list[RenderableType]:
    """A blank line, the bold title, the lines; nothing when there are no lines."""
    return [Text(""), Text(title, style="bold"), *lines] if lines else []


def _blocks_part(report: Report, width: int, ascii_only: bool, group_repeats: bool) -> list[RenderableType]:
    if not report.blocks:
        return [Text.assemble(("No attention blocks found", "bold yellow"), f" ({_misses(len(report.misses))})")]
    groups = block_groups(report, group_repeats)
    layout = _layout(report, groups, width, ascii_only)
    kind = f", all {uniform_kind(groups)}" if 1 not in layout.columns and not layout.lines else ""
    return [Text(f"Attention blocks ({len(report.blocks)}{kind})", style="bold"),
            *_block_tables(report, groups, layout, ascii_only), *_layout_notes(layout, groups, width),
            *(Text(line) for line in head_count_lines(report))]


def _what_if_part(report: Report, heads: Sequence[int], width: int, ascii_only: bool) -> list[RenderableType]:
    if not heads or not report.blocks:
        return []
    return _section(f"What if (--heads {', '.join(str(h) for h in heads)})", [
        _what_if_table(report, heads, width, ascii_only),
        Text("h·d_k fixed: the heads split the same projection width (d_k shrinks); d_k fixed: every head keeps "
             "its width (the projections grow). ? = not possible at that head count (width not divisible) or "
             "layout unknown.", style="dim"),
        *(Text(note, style="dim") for note in what_if_notes(report, heads))])


def _flags_part(report: Report, extras: ModelExtras, text_width: int, group_repeats: bool) -> list[RenderableType]:
    parts: list[RenderableType] = [Text("")]
    if report.flags:
        flag_groups = group_flags(report.flags, group=group_repeats)
        parts.append(Text(f"Flags ({len(report.flags)})", style="bold"))
        parts.extend(_flag_rows(flag_groups, text_width))
        if len(flag_groups) < len(report.flags):
            parts.append(Text("Identical flags of several blocks are one line (×N); --no-group or -v "
                              "lists each.", style="dim"))
    else:
        parts.append(Text("Flags: none", style="bold"))
    if extras.ignored:
        parts.append(Text(ignored_line(extras.ignored), style="dim"))
    return parts


def _misses_part(report: Report, verbose: bool, text_width: int) -> list[RenderableType]:
    """-v: every block's evidence and every near miss with its reason; else how many misses."""
    n_miss = len(report.misses)
    if not verbose:
        return [Text(""), Text(f"{_misses(n_miss)} (candidates that did not match); use --explain to list them "
                               "with reasons", style="dim")] if n_miss else []
    parts: list[RenderableType] = []
    for b in report.blocks:
        parts.append(Text(""))
        parts.extend(_block_details(b, text_width))
    return parts + _section(f"Near misses ({n_miss})", [
        _hang((("-", ""),), Text.assemble((m.matcher, "bold"), f" at {m.anchor}: {m.reason}"), text_width)
        for m in report.misses])


# ascii_only: the tool's own typography in ASCII (names from the file are left as they are).
_ASCII = str.maketrans({"·": "*", "…": "~", "×": "x", "–": "-",
                        "√": "sqrt", "→": "->"})


def _console(buffer: io.StringIO, width: int, color: bool) -> Console:
    return Console(
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


def _print(parts: Sequence[RenderableType], width: int, color: bool, wrap: bool = True) -> str:
    buffer = io.StringIO()
    console = _console(buffer, width, color)
    for part in parts:
        # rich wraps text at word boundaries (a word longer than a line folds); tables fit ``width``.
        if wrap and isinstance(part, Text):
            part = _hanging(part, console, width)
        console.print(part, soft_wrap=not wrap and isinstance(part, Text))
    text = buffer.getvalue()
    if not color:
        text = "\n".join(line.rstrip() for line in text.split("\n"))
    return text


def _hanging(text: Text, console: Console, width: int) -> Text:
    """A paragraph wider than ``width`` wrapped at word boundaries with a hanging indent: its
    continuation lines start two cells further in than its first line."""
    if "\n" in text.plain or text.cell_len <= width:
        return text
    lead = len(text.plain) - len(text.plain.lstrip(" "))
    hang = lead + 2
    if width - hang < 20:
        return text
    lines = text.wrap(console, width - hang, overflow="fold")
    out = Text(style=text.style)
    for i, line in enumerate(lines):
        if i:
            out.append("\n" + " " * hang)
        line.rstrip()
        out.append_text(line)
    return out


_OVERVIEW_NUMERIC = frozenset({"Params", "Attention", "Share (%)", "Blocks", "KV/token"})
# Columns the overview gives up when it does not fit, first to last; then the names are shortened
# in the middle (never below _MIN_NAME), and only then the columns every model's row must keep
# (Params, Blocks, Heads, KV/token, Flags) give way, on terminals narrower than they are.
_OVERVIEW_OPTIONAL = ("Share (%)", "Attention", "Format")
_OVERVIEW_GIVE_WAY = (*_OVERVIEW_OPTIONAL, "Heads", "KV/token", "Blocks", "Flags")
_WRAPPING = frozenset({"Flags"})  # cells that wrap between their items


def _overview_columns(rows: Sequence[tuple[str, ...]], width: int, gap: int) -> tuple[list[int], int | None]:
    """The overview's columns that fit ``width`` and the width the model names get (None: whole):
    the optional columns go first (a Format every model shares first of all), then the names
    shorten, then the other columns go in _OVERVIEW_GIVE_WAY order."""
    natural = [max(cell_len(c) for c in col) for col in zip(MODEL_COLUMNS, *rows)]
    for name in _WRAPPING:  # a wrapping cell needs only its longest item (and its heading)
        i = MODEL_COLUMNS.index(name)
        natural[i] = max(cell_len(w) for w in [MODEL_COLUMNS[i], *(w for r in rows for w in r[i].split())])
    columns = list(range(len(MODEL_COLUMNS)))
    uniform = len({r[1] for r in rows}) == 1
    optional = ("Format", *(c for c in _OVERVIEW_OPTIONAL if c != "Format")) if uniform else _OVERVIEW_OPTIONAL

    def others() -> int:
        return sum(natural[i] for i in columns if i) + gap * (len(columns) - 1)

    for dropped in (None, *optional):
        if dropped is not None:
            columns.remove(MODEL_COLUMNS.index(dropped))
        if natural[0] + others() <= width:
            return columns, None
    for kept in _OVERVIEW_GIVE_WAY[len(_OVERVIEW_OPTIONAL):]:
        if width - others() >= _MIN_NAME:
            return columns, width - others()
        columns.remove(MODEL_COLUMNS.index(kept))
    return columns, max(width, _MIN_NAME)


def render_overview(reports: Sequence[Report], *, width: int | None = None, color: bool = True,
                    ascii_only: bool = False) -> str:
    """A many-model run's first screen: one row per model (totals, blocks, heads, KV cache per
    token, flag codes), names without the folder they share; columns give way (a format shared
    by every model goes into the heading) when the terminal is narrow."""
    reports = [printable_fields(r) for r in reports]
    width = width or 120
    rows = [model_cells(r, name) for r, name in zip(reports, model_names(reports))]
    rows = [(*r[:-1], r[-1].replace(", ", " ")) for r in rows]
    columns, name_width = _overview_columns(rows, width, _gap(ascii_only))
    formats = {r[1] for r in rows}
    heading = f"Models ({len(reports)}" + (f", all {formats.pop()}" if len(formats) == 1 and 1 not in columns else "")
    table = Table(box=box.ASCII if ascii_only else box.SIMPLE_HEAD, show_edge=False, header_style="bold",
                  pad_edge=False, padding=(0, 1) if ascii_only else (0, 1, 0, 0))
    for i in columns:
        name = MODEL_COLUMNS[i]
        table.add_column(name, justify="right" if name in _OVERVIEW_NUMERIC else "left",
                         no_wrap=name not in _WRAPPING, overflow="fold")
    names = [r[0] for r in rows]
    # Model names are shortened in the middle (the family at the start, the variant at the end), the
    # end alone when that is what tells them apart.
    how = "tail"
    if name_width is not None:
        distinct = len({_shorten(n, name_width, "middle") for n in names}) == len(set(names))
        how = "middle" if distinct else (_shortening(names, name_width) or "middle")
    for row in rows:
        cells = [row[i] if i or name_width is None else _shorten(row[0], name_width, how) for i in columns]
        table.add_row(*cells)
    text = _print([Text(heading + ")", style="bold"), table], width, color)
    return text.translate(_ASCII) if ascii_only else text


def render_text(reports: Report | Sequence[Report], *, width: int | None = None) -> str:
    """Plain text for the Python API (``str(report)``, ``Report.to_text``): several reports start
    with one row per model, as the CLI's many-model run does."""
    items = [reports] if isinstance(reports, Report) else list(reports)
    parts = [render_overview(items, width=width, color=False)] if len(items) > 1 else []
    parts.extend(render_table(r, width=width, color=False) for r in items)
    return "\n".join(parts)


def render_summary(lines: Sequence[str], *, width: int | None = None, color: bool = True, wrap: bool = True) -> str:
    """The end-of-run lines of a many-model run, wrapped like the reports."""
    return _print([Text(line, style="bold" if i == 0 else "") for i, line in enumerate(lines)], width or 120, color,
                  wrap)
