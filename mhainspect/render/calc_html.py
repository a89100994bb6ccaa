"""``calc --format html``: a convention's formula drawn with the numbers, and its count against
the head count, so the PyTorch / Keras / MATLAB difference is seen at a glance. Pure: returns text.

The curves come from ``conventions.what_if`` (the layer's own arguments kept, the head count
changed), the same function behind ``calc --heads``; nothing is recomputed here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from mhainspect import conventions
from mhainspect.conventions import LAYER_NAMES, ArgValue, Calculation, Term, VsResult
from mhainspect.ir.units import group, human_count
from mhainspect.render.html import page
from mhainspect.render.html_style import CSS
from mhainspect.render.safe import html
from mhainspect.render.svg import Ids, Mark, Row, Segment, Series, line_chart, stacked_bars

__all__ = ["calc_body", "compare_body", "curve_heads", "render_calc_html", "render_compare_html", "render_vs_html",
           "repr_calc_html", "repr_compare_html", "vs_body"]

_SERIES_CSS = ("fixw", "fixd", "kv", "o", "k")  # colours of the conventions' lines, in order


def _arg(value: ArgValue) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    return "None" if value is None else str(value)


def _signature(c: Calculation) -> str:
    args = ", ".join(f"{name}={_arg(value)}" for name, value in c.arguments)
    return f"{LAYER_NAMES.get(c.convention, c.convention)}({args})"


def _css(term: Term) -> str:
    if term.extra:
        return "extra"
    if term.is_bias:
        return "bias"
    role = term.name[-1:].lower()
    return role if role in ("q", "k", "v", "o") else "extra"


def curve_heads(heads: int, extra: Iterable[int] = ()) -> list[int]:
    """Head counts to draw: powers of two up to twice the layer's (at least 16), its own and any asked."""
    asked = {h for h in extra if h >= 1}
    top = max(16, 2 * heads, *asked) if asked else max(16, 2 * heads)
    values = {heads, *asked}
    p = 1
    while p <= top:
        values.add(p)
        p *= 2
    return sorted(values)


def _curve(c: Calculation, extra: Iterable[int]) -> tuple[tuple[float, float], ...]:
    rows = conventions.what_if(c.convention, c.what_if_arguments, curve_heads(c.num_heads, extra))
    return tuple((float(h), float(e.total)) for h, e in rows if not isinstance(e, str))


def _formula(c: Calculation) -> str:
    width = max(len(t.name) for t in c.terms)
    lines = []
    for t in c.terms:
        star = "   (extra, not in the total)" if t.extra else ""
        lines.append(f"{t.name.ljust(width)} = {t.formula} = {t.expanded} = {group(t.value)}{star}")
    counted = [t for t in c.terms if not t.extra]
    lines.append("")
    lines.append(f"{'total'.ljust(width)} = " + " + ".join(t.name for t in counted) + f" = {group(c.total)}")
    return '<div class="formula">' + "\n".join(html(line) for line in lines) + "</div>"


def _terms_bar(c: Calculation, ids: Ids) -> str:
    segs = tuple(Segment(f"{t.name} ({t.tensor})", t.value, _css(t)) for t in c.terms if not t.extra)
    return stacked_bars([Row(c.convention, segs, note=group(c.total))], ids=ids, fmt=group,
                        title=f"{c.convention}: parameters by tensor",
                        desc="; ".join(f"{t.name} {t.tensor}: {group(t.value)}" for t in c.terms if not t.extra))


def _heads_chart(calcs: Sequence[Calculation], extra: Iterable[int], ids: Ids, names: Sequence[str] = ()) -> str:
    """Each calculation's count against the head count; ``names`` label the lines (default: the
    conventions)."""
    extra = tuple(extra)
    names = list(names) or [f"{c.convention}: {LAYER_NAMES.get(c.convention, c.convention)}" for c in calcs]
    series = [Series(name, _curve(c, extra), _SERIES_CSS[i % len(_SERIES_CSS)])
              for i, (c, name) in enumerate(zip(calcs, names))]
    drawn = [(s, name) for s, name in zip(series, names) if s.points]
    series = [s for s, _ in drawn]
    marks = [Mark(float(c.num_heads), float(c.total), f"{name.split(':')[0]}: {c.num_heads} heads, "
                  f"{human_count(c.total)}", show_label=len(calcs) == 1) for c, name in zip(calcs, names)]
    desc = "; ".join(f"{s.label}: " + ", ".join(f"{int(x)} heads {group(int(y))}" for x, y in s.points)
                     for s in series)
    ends = [name.split(":")[0] for _, name in drawn] if len(series) > 1 else []
    chart = line_chart(series, marks, ids=ids, x_label="heads (the layer's other arguments unchanged)",
                       title="Parameter count against the head count", desc=desc, y_fmt=group, width=640, height=280,
                       layered=len(series) > 1, end_labels=ends)
    legend = '<div class="legend">' + "".join(f'<span><i class="sw {s.css}"></i>{html(s.label)}</span>'
                                              for s in series) + "</div>"
    return legend + chart


def _verdict(c: Calculation) -> str:
    return (f"{c.convention}: the count changes with the head count" if c.scales_with_heads
            else f"{c.convention}: the head count does not change the count")


def calc_body(c: Calculation, heads: Iterable[int] = (), ids: Ids | None = None) -> str:
    """One layer: the formula with its numbers, the tensors as a bar, the count against heads."""
    ids = ids or Ids("c")
    body = ['<div class="mhai">', f"<h1>{html(_signature(c))}</h1>",
            f'<p class="verdict">{html(_verdict(c))}</p>', _formula(c),
            '<div class="legend">' + "".join(f'<span><i class="sw {css}"></i>{label}</span>' for css, label in
                                             (("q", "W_Q"), ("k", "W_K"), ("v", "W_V"), ("o", "W_O"),
                                              ("bias", "biases"))) + "</div>",
            _terms_bar(c, ids),
            f'<p class="meta">heads {c.num_heads} · d_k {c.d_k} · d_v {c.d_v} · query/key width {c.q_width} · '
            f"value width {c.v_width} · d_model {c.d_model} · output {c.output_dim}</p>",
            "<h3>Against the head count</h3>", _heads_chart([c], heads, ids),
            f"<p>{html(c.explanation)}</p>"]
    if c.notes:
        body.append("<ul>" + "".join(f"<li>{html(n)}</li>" for n in c.notes) + "</ul>")
    body.append("</div>")
    return "".join(body)


def render_calc_html(c: Calculation, heads: Iterable[int] = ()) -> str:
    """``calc -f html``: one layer's page."""
    return page(f"mhainspect calc {c.convention}", calc_body(c, heads))


def compare_body(entries: Sequence[tuple[str, Calculation | str]], heads: Iterable[int] = (),
                 ids: Ids | None = None) -> str:
    """The same arguments under every convention: totals side by side and each one's curve."""
    ids = ids or Ids("c")
    calcs = [e for _, e in entries if not isinstance(e, str)]
    body = ['<div class="mhai">', "<h1>The same arguments under each convention</h1>"]
    if calcs:
        body.append("<h3>Against the head count</h3>")
        body.append(_heads_chart(calcs, heads, ids))
        body.append('<p class="caption">Each line keeps that layer\'s own other arguments as they are here; a flat '
                    "line means its head count does not change the count; circles mark the arguments as given.</p>")
        rows = [Row(c.convention, tuple(Segment(f"{t.name} ({t.tensor})", t.value, _css(t))
                                        for t in c.terms if not t.extra), note=group(c.total)) for c in calcs]
        body.append("<h3>Parameters by tensor</h3>")
        body.append(stacked_bars(rows, ids=ids, fmt=group, title="Parameters by tensor under each convention",
                                 desc="; ".join(f"{c.convention}: {group(c.total)}" for c in calcs)))
        body.append("".join(f"<h3>{html(_signature(c))}</h3><p class=\"verdict\">{html(_verdict(c))}</p>"
                            + _formula(c) for c in calcs))
    skipped = [(name, e) for name, e in entries if isinstance(e, str)]
    if skipped:
        body.append("<h3>Not applicable</h3><ul>" + "".join(f"<li><b>{html(n)}</b>: {html(r)}</li>"
                                                           for n, r in skipped) + "</ul>")
    body.append("</div>")
    return "".join(body)


def render_compare_html(entries: Sequence[tuple[str, Calculation | str]], heads: Iterable[int] = ()) -> str:
    """``calc --compare -f html``: every convention on one page."""
    return page("mhainspect calc --compare", compare_body(entries, heads))


def _vs_table(vs: VsResult) -> str:
    a, b = vs.base, vs.other
    rows = [(ch.argument, _arg(ch.before), _arg(ch.after)) for ch in vs.changes]
    rows += [("heads", str(a.num_heads), str(b.num_heads)), ("d_k", str(a.d_k), str(b.d_k)),
             ("d_v", str(a.d_v), str(b.d_v)), ("query/key width", str(a.q_width), str(b.q_width)),
             ("weights", group(a.weights), group(b.weights)), ("biases", group(a.biases), group(b.biases)),
             ("total", group(a.total), group(b.total))]
    cells = "".join(f'<tr><td class="l">{html(k)}</td><td>{html(x)}</td><td>{html(y)}</td></tr>' for k, x, y in rows)
    return ('<div class="scroll"><table><tr><th class="l"></th><th>A</th><th>B</th></tr>' + cells
            + "</table></div>")


def vs_body(vs: VsResult, heads: Iterable[int] = (), ids: Ids | None = None) -> str:
    """``calc ... --vs ...``: the answer (which argument moved the count) first, the two sets side
    by side, their tensors on one scale, both against the head count, then each formula."""
    ids = ids or Ids("c")
    a, b = vs.base, vs.other
    layer = LAYER_NAMES.get(a.convention, a.convention)
    rows = [Row(f"{label}: {group(c.total)}", tuple(Segment(f"{t.name} ({t.tensor})", t.value, _css(t))
                                                    for t in c.terms if not t.extra), note=group(c.total))
            for label, c in (("A", a), ("B", b))]
    sets = "".join(f"<li><b>{label}</b>: <code>{html(_signature(c))}</code></li>" for label, c in (("A", a), ("B", b)))
    body = ['<div class="mhai">', f"<h1>{html(layer)}: two argument sets</h1>",
            f'<p class="verdict">{html(vs.sentence)}</p>', f"<ul>{sets}</ul>", _vs_table(vs),
            "<h3>Parameters by tensor</h3>",
            '<div class="legend">' + "".join(f'<span><i class="sw {css}"></i>{label}</span>' for css, label in
                                             (("q", "W_Q"), ("k", "W_K"), ("v", "W_V"), ("o", "W_O"),
                                              ("bias", "biases"))) + "</div>",
            stacked_bars(rows, ids=ids, fmt=group, title="Parameters by tensor, A and B on one scale",
                         desc=f"A: {group(a.total)}; B: {group(b.total)}"),
            "<h3>Against the head count</h3>", _heads_chart([a, b], heads, ids, ("A", "B")),
            '<p class="caption">Each line keeps its own set\'s other arguments; circles mark the sets as given.</p>',
            f"<h3>A: {html(_signature(a))}</h3>", _formula(a), f"<h3>B: {html(_signature(b))}</h3>", _formula(b),
            "</div>"]
    return "".join(body)


def render_vs_html(vs: VsResult, heads: Iterable[int] = ()) -> str:
    """``calc CONVENTION ... --vs ... -f html``: two argument sets of one layer on one page."""
    return page(f"mhainspect calc {vs.base.convention} --vs", vs_body(vs, heads))


def _notebook_ids(what: object) -> Ids:
    """Ids from the content: two different results in one notebook never share an id."""
    return Ids("c" + hashlib.sha256(repr(what).encode()).hexdigest()[:8])


def repr_calc_html(c: Calculation) -> str:
    """What Jupyter shows for a Calculation: the page body with its stylesheet."""
    return f"<style>{CSS}</style>{calc_body(c, ids=_notebook_ids(c))}"


def repr_compare_html(entries: Sequence[tuple[str, Calculation | str]]) -> str:
    """What Jupyter shows for compare()'s rows."""
    return f"<style>{CSS}</style>{compare_body(entries, ids=_notebook_ids(tuple(entries)))}"
