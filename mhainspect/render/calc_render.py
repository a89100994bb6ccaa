"""Render the ``calc`` side (mhainspect.conventions) as text or JSON-ready data. Pure: no I/O.

Prose is wrapped at word boundaries to ``width`` (the terminal's) when one is given, and left
one paragraph per line otherwise (a pipe or a file: the reader's tool wraps it)."""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Sequence
from typing import Any

from mhainspect.analysis.size import LayerBytes, layer_bytes
from mhainspect.conventions import LAYER_NAMES, ArgValue, Calculation, VsResult, kv_heads_of
from mhainspect.ir.dtypes import canonical
from mhainspect.ir.units import format_bytes

_NBSP = "\u00a0"  # binds "heads 4" so a wrap never separates a label from its number
def _n(value: int) -> str:
    return f"{value:,}"


def _arg(value: ArgValue) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    return "None" if value is None else str(value)


def _wrap(text: str, indent: str = "  ", first: str | None = None, width: int | None = None) -> list[str]:
    lead = indent if first is None else first
    if width is None:
        return [(lead + text).replace(_NBSP, " ")]
    return [line.replace(_NBSP, " ") for line in textwrap.wrap(
        text,
        width=max(width, len(lead) + 20),
        initial_indent=lead,
        subsequent_indent=indent,
        break_on_hyphens=False,
        break_long_words=False,
    )]


def head_count_sentence(c: Calculation) -> str:
    """The answer most readers came for, in one sentence."""
    if c.scales_with_heads:
        return ("The head count changes this count (other arguments fixed): the projection widths follow "
                "the heads.")
    return "The head count does not change this count (other arguments fixed)."


def _signature(c: Calculation) -> str:
    layer = LAYER_NAMES.get(c.convention, c.convention)
    args = ", ".join(f"{name}={_arg(value)}" for name, value in c.arguments)
    return f"{c.convention}: {layer}({args})"


def calc_text(c: Calculation, width: int | None = None) -> str:
    """A term-by-term breakdown with implied d_k/d_v, widths, the verdict and the explanation."""
    lines = [*_wrap(_signature(c), indent="    ", first="", width=width), ""]
    rows = [(t.name, t.tensor, t.formula, t.expanded, _n(t.value) + (" *" if t.extra else "")) for t in c.terms]
    totals = [(label, _n(value)) for label, value in (("weights", c.weights), ("biases", c.biases),
                                                         ("total", c.total))]
    header = ("term", "tensor", "formula", "=", "params")
    # The totals sit under the params column: they count towards its width as any of its cells.
    table = _table(header, rows, left=4, width=width, give_way=_TERM_GIVE_WAY,
                   widths_at_least={4: max(len(v) for _, v in totals)})
    lines.extend(table[:1 + len(rows)])
    rule_width = max(len(line) for line in table[:1 + len(rows)]) - 2
    params_width = max(len(cell) for cell in [header[4], *(r[4] for r in rows), *(v for _, v in totals)])
    lines.append("  " + "-" * rule_width)
    for label, value in totals:
        lines.append(f"  {label.ljust(rule_width - params_width - 2)}  {value.rjust(params_width)}")
    lines.extend(table[1 + len(rows):])
    if c.extra:
        lines.append(f"  * extra, not in total: {_n(c.extra)}")
    lines.append("")
    facts = [("heads", c.num_heads), ("d_k", c.d_k), ("d_v", c.d_v), ("query/key width", c.q_width),
             ("value width", c.v_width), ("d_model", c.d_model), ("output", c.output_dim)]
    lines.extend(_wrap("   ".join(f"{k}{_NBSP}{v}".replace(" ", _NBSP) for k, v in facts), width=width))
    lines.extend(_wrap(head_count_sentence(c), width=width))
    lines.append("")
    lines.extend(_wrap(c.explanation, width=width))
    if c.notes:
        lines.append("")
        lines.append("  Notes:")
        for note in c.notes:
            lines.extend(_wrap(note, indent="    ", first="  - ", width=width))
    return "\n".join(lines) + "\n"


def calc_json(c: Calculation) -> dict[str, Any]:
    """JSON-ready dict (plain ints, bools, strings)."""
    return {
        "convention": c.convention,
        "arguments": {name: value for name, value in c.arguments},
        "terms": [
            {
                "name": t.name,
                "formula": t.formula,
                "value": int(t.value),
                "is_bias": t.is_bias,
                "expanded": t.expanded,
                "tensor": t.tensor,
                "extra": t.extra,
            }
            for t in c.terms
        ],
        "params": {
            "total": int(c.total),
            "weights": int(c.weights),
            "biases": int(c.biases),
            "extra": int(c.extra),
        },
        "num_heads": int(c.num_heads),
        "d_k": int(c.d_k),
        "d_v": int(c.d_v),
        "q_width": int(c.q_width),
        "v_width": int(c.v_width),
        "d_model": int(c.d_model),
        "output_dim": int(c.output_dim),
        "scales_with_heads": c.scales_with_heads,
        "explanation": c.explanation,
        "notes": list(c.notes),
    }


# Which columns of a calc table give way on a narrow terminal, least needed first; the others (the
# counts the table is for) always stay, whole. A term's tensor name is in -f json; the expanded
# arithmetic (4096 × 32 × 128) follows from the formula and the arguments the first line prints.
_TERM_GIVE_WAY = ("tensor", "=", "formula")
_COMPARE_GIVE_WAY = ("q/k width", "biases", "weights", "d_v")
_KV_HEADS_GIVE_WAY = ("K/V width", "weight bytes", "params")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int, width: int | None = None,
           give_way: Sequence[str] = (), widths_at_least: dict[int, int] | None = None) -> list[str]:
    """Columns: the first ``left`` left-aligned, the rest right-aligned, two spaces apart, two in.
    Wider than ``width``: the fewest ``give_way`` columns that make it fit are left out (earlier
    ones first at the same count), and a last line names them; no cell is ever cut, so a table
    that cannot fit even then is printed whole."""
    natural = [max([len(r[i]) for r in [header, *rows]] + [(widths_at_least or {}).get(i, 0)])
               for i in range(len(header))]

    def size(kept: Sequence[int]) -> int:
        return 2 + sum(natural[i] for i in kept) + 2 * (len(kept) - 1)

    every = list(range(len(header)))
    kept: list[int] = every
    dropped: tuple[int, ...] = ()
    if width is not None and size(every) > width:
        optional = [header.index(name) for name in give_way if name in header]
        choices = (d for n in range(1, len(optional) + 1) for d in itertools.combinations(optional, n))
        for dropped in choices:
            kept = [i for i in every if i not in dropped]
            if size(kept) <= width:
                break
        else:
            kept, dropped = every, ()
    out = []
    for r in [header, *rows]:
        cells = [r[i].ljust(natural[i]) if i < left else r[i].rjust(natural[i]) for i in kept]
        out.append("  " + "  ".join(cells).rstrip())
    if dropped:
        names = " and ".join(f"'{header[i]}'" for i in sorted(dropped))
        out.extend(_wrap(f"({names} left out to fit {width} columns; a wider terminal or -f json shows "
                         f"{'them' if len(dropped) > 1 else 'it'})", width=width))
    return out


def compare_text(entries: Sequence[tuple[str, Calculation | str]], width: int | None = None) -> str:
    """Side-by-side table of ``conventions.compare`` results, then why some could not apply."""
    header = ("convention", "heads", "d_k", "d_v", "q/k width", "weights", "biases", "total", "scales")
    rows: list[tuple[str, ...]] = []
    skipped: list[tuple[str, str]] = []
    assumptions: list[str] = []
    for name, entry in entries:
        if isinstance(entry, str):
            skipped.append((name, entry))
            continue
        rows.append(
            (
                name,
                str(entry.num_heads),
                str(entry.d_k),
                str(entry.d_v),
                str(entry.q_width),
                _n(entry.weights),
                _n(entry.biases),
                _n(entry.total),
                "yes" if entry.scales_with_heads else "no",
            )
        )
        assumptions.extend(f"{name}: {note}" for note in entry.assumed)
        assumptions.extend(note for note in entry.comparison_notes if note not in assumptions)
    lines = ["Same arguments under each convention", ""]
    lines.extend(_table(header, rows, left=1, width=width, give_way=_COMPARE_GIVE_WAY) if rows
                 else ["  (no convention could take them)"])
    if rows:
        lines.append("")
        lines.extend(_wrap("scales: would the count change with the head count if that layer's own "
                           "arguments stayed as they are here?", width=width))
    if skipped:
        lines.append("")
        lines.append("  Not applicable:")
        for name, reason in skipped:
            lines.extend(_wrap(reason, indent="    ", first=f"  - {name}: ", width=width))
    if assumptions:
        lines.append("")
        lines.append("  Assumptions:")
        for note in assumptions:
            lines.extend(_wrap(note, indent="    ", first="  - ", width=width))
    return "\n".join(lines) + "\n"


def compare_json(entries: Sequence[tuple[str, Calculation | str]]) -> list[dict[str, Any]]:
    """JSON-ready list: one object per convention, a calculation or ``{"error": reason}``."""
    return [
        {"convention": name, "error": entry} if isinstance(entry, str) else {"convention": name, **calc_json(entry)}
        for name, entry in entries
    ]


def what_if_text(convention: str, rows: Sequence[tuple[int, Calculation | str]], width: int | None = None) -> str:
    """Table of ``conventions.what_if`` results: the count at each head count."""
    layer = LAYER_NAMES.get(convention, convention)
    valid = [(h, e) for h, e in rows if not isinstance(e, str)]
    errors = [(h, e) for h, e in rows if isinstance(e, str)]
    base_heads, base = (valid[0][0], valid[0][1].total) if valid else (0, 0)
    header = ("heads", "d_k", "d_v", "q/k width", "total", f"vs {base_heads} heads")
    table_rows = [
        (
            str(h),
            str(entry.d_k),
            str(entry.d_v),
            str(entry.q_width),
            _n(entry.total),
            "same" if entry.total == base else f"{entry.total - base:+,}",
        )
        for h, entry in valid
    ]
    lines = [*_wrap(f"{layer}: other head counts, other arguments as given", first="", width=width), ""]
    lines.extend(_table(header, table_rows, left=0, width=width) if table_rows else ["  (none valid)"])
    if errors:
        lines.append("")
        for h, reason in errors:
            lines.extend(_wrap(reason, indent="    ", first=f"  - {h} heads: ", width=width))
    if len({entry.total for _, entry in valid}) == 1 and len(valid) > 1:
        lines.append("")
        lines.append("  The head count does not change the parameter count here.")
    return "\n".join(lines) + "\n"


def what_if_json(rows: Sequence[tuple[int, Calculation | str]]) -> list[dict[str, Any]]:
    """JSON-ready list: ``{"num_heads": h, ...calc_json}`` or ``{"num_heads": h, "error": ...}``."""
    return [
        {"num_heads": h, "error": entry} if isinstance(entry, str) else {**calc_json(entry), "num_heads": h}
        for h, entry in rows
    ]


def calc_document(c: Calculation, what_if: Sequence[tuple[int, Calculation | str]] = (),
                  vs: VsResult | None = None) -> dict[str, Any]:
    """``calc -f json``: always one shape, the calculation's keys at the top level, then
    ``what_if`` (a list, empty without --heads) and ``vs`` (null without --vs)."""
    return {**calc_json(c), "what_if": what_if_json(what_if), "vs": None if vs is None else vs_json(vs)}


def vs_json(vs: VsResult) -> dict[str, Any]:
    return {
        "calculation": calc_json(vs.other),
        "changed": [{"argument": ch.argument, "from": ch.before, "to": ch.after, "alone": ch.alone,
                     "alone_total": ch.alone_total} for ch in vs.changes],
        "difference": vs.other.total - vs.base.total,
        "summary": vs.sentence,
    }


def vs_text(vs: VsResult, width: int | None = None) -> str:
    """Two argument sets side by side, then which argument moved the count."""
    a, b = vs.base, vs.other
    header = ("", "A", "B")
    rows = [(ch.argument, _arg(ch.before), _arg(ch.after)) for ch in vs.changes]
    rows += [("heads", str(a.num_heads), str(b.num_heads)), ("d_k", str(a.d_k), str(b.d_k)),
             ("d_v", str(a.d_v), str(b.d_v)), ("query/key width", str(a.q_width), str(b.q_width)),
             ("weights", _n(a.weights), _n(b.weights)), ("biases", _n(a.biases), _n(b.biases)),
             ("total", _n(a.total), _n(b.total))]
    layer = LAYER_NAMES.get(a.convention, a.convention)
    lines = _wrap(f"{layer}, two argument sets:", first="", width=width)
    for label, c in (("A", a), ("B", b)):
        args = ", ".join(f"{name}={_arg(value)}" for name, value in c.arguments)
        lines.extend(_wrap(args, indent="     ", first=f"  {label}: ", width=width))
    lines.append("")
    lines.extend(_table(header, rows, left=1, width=width))
    lines.append("")
    lines.extend(_wrap(vs.sentence.replace(" → ", f"{_NBSP}→{_NBSP}"), width=width))
    return "\n".join(lines) + "\n"


def _layout_name(kv_heads: int, heads: int) -> str:
    return "MHA" if kv_heads == heads else "MQA" if kv_heads == 1 else "GQA"


def layer_bytes_for(c: Calculation, dtype: str, context: int | None, kv_heads: int | None = None) -> LayerBytes:
    """The calculated layer in bytes (mhainspect.analysis.size holds the rule)."""
    return layer_bytes(c.total, kv_heads or kv_heads_of(c), c.d_k, c.d_v, dtype, context)


def _whole_bytes(n: int) -> str:
    """format_bytes bound to one piece: a wrap never parts "3.9" from "GiB"."""
    return format_bytes(n).replace(" ", _NBSP)


def size_text(c: Calculation, dtype: str, context: int | None, width: int | None = None) -> str:
    """Weights and KV cache of one layer in bytes: what --dtype and --context ask."""
    b = layer_bytes_for(c, dtype, context)
    line = (f"  In {b.dtype}: weights {_n(b.weight_bytes)} bytes ({_whole_bytes(b.weight_bytes)}); KV cache "
            f"{_n(b.kv_bytes_per_token)} bytes per token ({b.kv_heads} kv heads × (d_k {c.d_k} + d_v {c.d_v}) × "
            f"{b.itemsize:g} bytes)")
    if b.kv_bytes is not None and b.context is not None:
        line += f", {_n(b.kv_bytes)} bytes ({_whole_bytes(b.kv_bytes)}) at context {_n(b.context)}"
    lines = _wrap(line.strip(), indent="  ", first="  ", width=width)
    lines.extend(_wrap("Per layer and per sequence; the cache counts only for a layer that decodes "
                       "autoregressively (causal self-attention).", indent="  ", width=width))
    return "\n".join(lines) + "\n"


def size_json(c: Calculation, dtype: str, context: int | None) -> dict[str, Any]:
    b = layer_bytes_for(c, dtype, context)
    return {"dtype": b.dtype, "weight_bytes": b.weight_bytes, "kv_heads": b.kv_heads,
            "kv_bytes_per_token": b.kv_bytes_per_token, "context": b.context, "kv_bytes": b.kv_bytes}


def kv_heads_text(convention: str, rows: Sequence[tuple[int, Calculation | str]], dtype: str,
                  context: int | None, width: int | None = None) -> str:
    """MHA vs GQA vs MQA side by side: parameters, weight bytes and the cache per token and at context."""
    layer = LAYER_NAMES.get(convention, convention)
    valid = [(g, e) for g, e in rows if not isinstance(e, str)]
    errors = [(g, e) for g, e in rows if isinstance(e, str)]
    header = ["layout", "kv heads", "K/V width", "params", "weight bytes", "KV bytes/token"]
    if context is not None:
        header.append(f"KV at {_n(context)}")
    table_rows = []
    for g, entry in valid:
        b = layer_bytes_for(entry, dtype, context, g)
        row = [_layout_name(g, entry.num_heads), str(g), str(g * entry.d_k), _n(entry.total), _n(b.weight_bytes),
               _n(b.kv_bytes_per_token)]
        if b.kv_bytes is not None:
            row.append(_n(b.kv_bytes))
        table_rows.append(tuple(row))
    lines = [*_wrap(f"{layer}: other K/V head counts, other arguments as given ({canonical(dtype)})", first="",
                    width=width), ""]
    lines.extend(_table(header, table_rows, left=1, width=width, give_way=_KV_HEADS_GIVE_WAY) if table_rows
                 else ["  (none valid)"])
    for g, reason in errors:
        lines.extend(_wrap(reason, indent="    ", first=f"  - {g} kv heads: ", width=width))
    if table_rows:
        lines.append("")
        lines.extend(_wrap("Query heads at a fixed width leave the weights alone (see --heads); K/V heads set the "
                           "cache per token, and the K/V projections with it.", indent="  ", width=width))
    return "\n".join(lines) + "\n"


def kv_heads_json(rows: Sequence[tuple[int, Calculation | str]], dtype: str, context: int | None
                  ) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for g, entry in rows:
        if isinstance(entry, str):
            out.append({"kv_heads": g, "error": entry})
            continue
        out.append({"kv_heads": g, "layout": _layout_name(g, entry.num_heads), "params": int(entry.total),
                    **size_json(entry, dtype, context)})
    return out
