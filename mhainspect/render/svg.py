"""Inline SVG chart primitives for the HTML report. Pure: data in, SVG markup out.

Every string drawn passes through ``safe.html``; colours are CSS classes (the page's stylesheet
sets them for light and dark schemes), never inline styles, so the page's Content-Security-Policy
needs no ``unsafe-inline``. Each chart is ``role="img"`` with a ``<title>`` and ``<desc>`` that a
screen reader reads instead of the drawing; bars and points carry their own ``<title>`` (the
browser shows it on hover).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mhainspect.ir.units import human_count
from mhainspect.render.safe import html

__all__ = ["Column", "Ids", "Mark", "Row", "Segment", "Series", "columns_chart", "label_width", "line_chart", "log_bars",
           "short_count", "stacked_bars", "truncate"]

_FONT = 12  # px: labels
_CHAR = 6.6  # px: average advance of a label character at _FONT, for layout only


class Ids:
    """Element ids unique within one page (several reports, several charts each)."""

    def __init__(self, prefix: str = "m") -> None:
        self.prefix, self.count = prefix, 0

    def next(self, kind: str) -> str:
        self.count += 1
        return f"{self.prefix}-{kind}-{self.count}"


def truncate(text: str, limit: int) -> str:
    """A label that fits: the end of a long name is the part that tells layers apart."""
    return text if len(text) <= limit else "…" + text[-(limit - 1):]


def label_width(labels: Sequence[str], limit: int = 34) -> int:
    """Characters a label column needs for these labels (at most ``limit``)."""
    return min(limit, max((len(x) for x in labels), default=4))


def short_count(value: int) -> str:
    """An axis tick: '40k' rather than '40.00k'."""
    if 1000 <= value < 10_000:
        return f"{value / 1000:g}k"
    text = human_count(value)
    if "." in text and text[-1].isalpha():
        number, unit = text[:-1], text[-1]
        text = number.rstrip("0").rstrip(".") + unit
    return text


def _n(value: float) -> str:
    """A coordinate: short, deterministic."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _open(width: float, height: float, ids: Ids, title: str, desc: str, css: str) -> list[str]:
    tid, did = ids.next("t"), ids.next("d")
    return [f'<svg class="chart {css}" viewBox="0 0 {_n(width)} {_n(height)}" width="{_n(width)}" '
            f'height="{_n(height)}" role="img" aria-labelledby="{tid} {did}" xmlns="http://www.w3.org/2000/svg">',
            f'<title id="{tid}">{html(title)}</title>', f'<desc id="{did}">{html(desc)}</desc>']


def _ticks(top: float, count: int = 4, binary: bool = False) -> list[float]:
    """Round tick values from 0 to at least ``top``; ``binary`` rounds to KiB/MiB/GiB multiples."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    if binary and raw >= 1024:
        unit = 1024 ** math.floor(math.log(raw, 1024))
        power = unit * 10 ** math.floor(math.log10(raw / unit))
    else:
        power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    return [step * i for i in range(int(math.ceil(top / step - 1e-9)) + 1)]


# ------------------------------------------------------------------------------ stacked bars


@dataclass(frozen=True)
class Segment:
    label: str  # shown in the bar's tooltip ("Q", "bias", ...)
    value: int
    css: str  # colour class: q, k, v, o, bias, extra, rest


@dataclass(frozen=True)
class Row:
    label: str
    segments: tuple[Segment, ...]
    note: str = ""  # right of the bar (the total)
    highlight: bool = False  # drawn with an accent label (a layout that differs)


def stacked_bars(rows: Sequence[Row], *, ids: Ids, title: str, desc: str, fmt: Callable[[int], str],
                 tick: Callable[[int], str] = short_count,
                 width: int = 760, label_chars: int | None = None) -> str:
    """Horizontal bars, one per row, each a stack of segments on one shared scale. Labels get
    ``label_chars`` characters (default: the longest, at most 34), so charts placed one above the
    other can share a left edge."""
    bar_h, gap, top = 16, 6, 4
    if label_chars is None:
        label_chars = label_width([r.label for r in rows])
    label_w = label_chars * _CHAR + 10
    note_w = 70
    plot_w = max(120.0, width - label_w - note_w)
    longest = max((sum(s.value for s in r.segments) for r in rows), default=0) or 1
    height = top + len(rows) * (bar_h + gap) + 22
    out = _open(width, height, ids, title, desc, "bars")
    for t in _ticks(longest):
        if t > longest * 1.0001:
            break
        x = label_w + plot_w * t / longest
        out.append(f'<line class="grid" x1="{_n(x)}" y1="{top}" x2="{_n(x)}" y2="{_n(height - 18)}"/>')
        out.append(f'<text class="tick" x="{_n(x)}" y="{_n(height - 5)}" text-anchor="middle">{html(tick(int(t)))}</text>')
    for i, row in enumerate(rows):
        y = top + i * (bar_h + gap)
        label_css = "label hl" if row.highlight else "label"
        out.append(f'<g class="row"><title>{html(row.label)}: {html(row.note)}</title>')
        out.append(f'<text class="{label_css}" x="{_n(label_w - 8)}" y="{_n(y + bar_h - 4)}" '
                   f'text-anchor="end">{html(truncate(row.label, label_chars))}</text>')
        x = float(label_w)
        for seg in row.segments:
            if seg.value <= 0:
                continue
            w = plot_w * seg.value / longest
            out.append(f'<rect class="seg {seg.css}" x="{_n(x)}" y="{y}" width="{_n(max(w, 0.5))}" height="{bar_h}">'
                       f'<title>{html(row.label)} · {html(seg.label)}: {html(fmt(seg.value))}</title></rect>')
            x += w
        out.append(f'<text class="note" x="{_n(x + 6)}" y="{_n(y + bar_h - 4)}">{html(row.note)}</text></g>')
    out.append("</svg>")
    return "".join(out)


def log_bars(rows: Sequence[Row], *, ids: Ids, title: str, desc: str, fmt: Callable[[int], str],
             width: int = 760, label_chars: int | None = None) -> str:
    """Horizontal bars on one logarithmic scale, each row's segments overlaid from the axis (the
    largest behind): sizes that differ a thousandfold stay comparable, and every bar keeps its
    absolute length (an 80M model never looks like a 16k one). Decades are labelled."""
    bar_h, gap, top = 16, 6, 4
    if label_chars is None:
        label_chars = label_width([r.label for r in rows])
    label_w = label_chars * _CHAR + 10
    note_w = 150
    plot_w = max(120.0, width - label_w - note_w)
    values = [seg.value for r in rows for seg in r.segments if seg.value > 0]
    low = 10 ** math.floor(math.log10(min(values))) if values else 1
    high = 10 ** math.ceil(math.log10(max(values))) if values else 10
    high = max(high, low * 10)
    span = math.log10(high) - math.log10(low)

    def length(value: int) -> float:
        return plot_w * (math.log10(value) - math.log10(low)) / span if value > 0 else 0.0

    height = top + len(rows) * (bar_h + gap) + 22
    out = _open(width, height, ids, title, desc, "bars log")
    decade = low
    while decade <= high:
        x = label_w + length(decade)
        out.append(f'<line class="grid" x1="{_n(x)}" y1="{top}" x2="{_n(x)}" y2="{_n(height - 18)}"/>')
        out.append(f'<text class="tick" x="{_n(x)}" y="{_n(height - 5)}" text-anchor="middle">'
                   f"{html(short_count(decade))}</text>")
        decade *= 10
    for i, row in enumerate(rows):
        y = top + i * (bar_h + gap)
        out.append(f'<g class="row"><title>{html(row.label)}: {html(row.note)}</title>')
        out.append(f'<text class="label" x="{_n(label_w - 8)}" y="{_n(y + bar_h - 4)}" '
                   f'text-anchor="end">{html(truncate(row.label, label_chars))}</text>')
        end = float(label_w)
        for seg in sorted(row.segments, key=lambda sg: -sg.value):
            if seg.value <= 0:
                continue
            w = max(length(seg.value), 0.5)
            end = max(end, label_w + w)
            out.append(f'<rect class="seg {seg.css}" x="{_n(label_w)}" y="{y}" width="{_n(w)}" height="{bar_h}">'
                       f'<title>{html(row.label)} · {html(seg.label)}: {html(fmt(seg.value))}</title></rect>')
        out.append(f'<text class="note" x="{_n(end + 6)}" y="{_n(y + bar_h - 4)}">{html(row.note)}</text></g>')
    out.append("</svg>")
    return "".join(out)


# --------------------------------------------------------------------- small column charts


@dataclass(frozen=True)
class Column:
    label: str  # the block name (tooltip)
    values: tuple[int | None, ...]  # one per panel (heads, kv heads, d_k); None = unknown
    highlight: bool = False


def columns_chart(columns: Sequence[Column], panels: Sequence[str], *, ids: Ids, title: str, desc: str,
                  width: int = 760) -> str:
    """One small column chart per panel, blocks along x in model order, so a change of layout
    between layers shows as a step; unknown values are drawn as an accent '?'. Panels stand side
    by side when they fit in ``width``, else one above the other."""
    panel_h, gap, top, title_h = 56, 28, 4, 18
    n = max(len(columns), 1)
    step = min(48.0, (width - 10) / n)  # a few blocks stay together instead of spreading out
    plot_w = step * n
    titles = []
    for p, panel in enumerate(panels):
        values = sorted({v for c in columns if (v := c.values[p]) is not None})
        span = "" if not values else f": {values[0]}" if len(values) == 1 else f": {values[0]}–{values[-1]}"
        titles.append(panel + span)
    slot = max(plot_w, max(len(t) for t in titles) * _CHAR + 4) + gap  # a panel and its title
    side_by_side = slot * len(panels) <= width
    if side_by_side:
        width = int(slot * len(panels))
        height = top + title_h + panel_h + 8
    else:
        height = top + len(panels) * (title_h + panel_h + gap)
    bar_w = max(1.0, min(28.0, step * 0.7))
    out = _open(width, height, ids, title, desc, "columns")
    for p, panel in enumerate(panels):
        x0 = p * slot if side_by_side else 0.0
        y0 = top + (0 if side_by_side else p * (title_h + panel_h + gap))
        base = y0 + title_h + panel_h
        known = [c.values[p] for c in columns if c.values[p] is not None]
        peak = max((v for v in known if v is not None), default=1) or 1
        out.append(f'<text class="panel" x="{_n(x0)}" y="{_n(y0 + 12)}">{html(titles[p])}</text>')
        out.append(f'<line class="axis" x1="{_n(x0)}" y1="{_n(base)}" x2="{_n(x0 + plot_w)}" y2="{_n(base)}"/>')
        for i, col in enumerate(columns):
            x = x0 + i * step + (step - bar_w) / 2
            value = col.values[p]
            css = "col hl" if col.highlight else "col"
            if value is None:
                out.append(f'<text class="unknown" x="{_n(x + bar_w / 2)}" y="{_n(base - 4)}" '
                           f'text-anchor="middle"><title>{html(col.label)}: {html(panel)} unknown</title>?</text>')
                continue
            h = max(1.0, (panel_h - 14) * value / peak)
            out.append(f'<rect class="{css}" x="{_n(x)}" y="{_n(base - h)}" width="{_n(bar_w)}" '
                       f'height="{_n(h)}"><title>{html(col.label)}: {html(panel)} {value}</title></rect>')
            if n <= 24:
                out.append(f'<text class="value" x="{_n(x + bar_w / 2)}" y="{_n(base - h - 3)}" '
                           f'text-anchor="middle">{value}</text>')
    out.append("</svg>")
    return "".join(out)


# ------------------------------------------------------------------------------ line chart


def _mark_groups(marks: Sequence[Mark], px: Callable[[float], float], py: Callable[[float], float],
                 flip_at: float) -> list[str]:
    """Circled points with their labels (right of the point, left of it beyond ``flip_at``)."""
    out = []
    for m in marks:
        cx, cy = px(m.x), py(m.y)
        anchor = "end" if cx > flip_at else "start"
        dx = -9 if anchor == "end" else 9
        text = (f'<text x="{_n(cx + dx)}" y="{_n(cy - 8)}" text-anchor="{anchor}">{html(m.label)}</text>'
                if m.show_label else "")
        out.append(f'<g class="mark"><title>{html(m.label)}</title><circle cx="{_n(cx)}" cy="{_n(cy)}" r="6"/>'
                   f"{text}</g>")
    return out


def _end_texts(series: Sequence[Series], labels: Sequence[str], px: Callable[[float], float],
               py: Callable[[float], float], top: float) -> list[str]:
    """The lines' names beside their last points, top to bottom, never on top of each other."""
    ends, texts = _merged_ends(series, labels, py)
    out: list[str] = []
    placed: list[float] = []
    for (x, y), text in sorted(zip(ends, texts), key=lambda e: py(e[0][1])):
        ty = max(py(y) + 4, placed[-1] + 13 if placed else top)
        placed.append(ty)
        out.append(f'<text class="end" x="{_n(px(x) + 8)}" y="{_n(ty)}">{html(text)}</text>')
    return out


def _merged_ends(series: Sequence[Series], labels: Sequence[str], py: Callable[[float], float]
                 ) -> tuple[list[tuple[float, float]], list[str]]:
    """Each line's last point and label; lines ending within 6 px of each other share one label."""
    ends: list[tuple[float, float]] = []
    texts: list[str] = []
    for s, label in zip(series, labels):
        if not s.points:
            continue
        x, y = s.points[-1]
        for i, (ex, ey) in enumerate(ends):
            if ex == x and abs(py(ey) - py(y)) < 6:
                texts[i] += f" = {label}"
                break
        else:
            ends.append((x, y))
            texts.append(label)
    return ends, texts


@dataclass(frozen=True)
class Series:
    label: str
    points: tuple[tuple[float, float], ...]
    css: str  # line colour class


@dataclass(frozen=True)
class Mark:
    x: float
    y: float
    label: str  # tooltip and the text beside the point
    show_label: bool = True  # False: the tooltip only (several marks on one point)


def _spaced(ticks: Sequence[float], px: Callable[[float], float], fmt: Callable[[float], str]) -> list[float]:
    """The ticks whose labels do not overlap, left to right, the last one always kept (1, 2, 4 at
    the start of a 0-128 axis are one label: '1', and then 8 ...)."""
    def half(t: float) -> float:
        return len(fmt(t)) * _CHAR / 2 + 3  # half a label and a little air

    kept: list[float] = []
    for t in ticks:
        if kept and px(t) - half(t) < px(kept[-1]) + half(kept[-1]):
            if t != ticks[-1]:
                continue
            kept.pop()  # the axis' end is named; the label before it gives way
        kept.append(t)
    return kept


def line_chart(series: Sequence[Series], marks: Sequence[Mark], *, ids: Ids, title: str, desc: str,
               x_label: str, y_fmt: Callable[[int], str], y_tick: Callable[[int], str] = short_count, x_fmt: Callable[[float], str] = lambda v: f"{v:g}",
               x_log: bool = False, x_ticks: Sequence[float] = (), width: int = 520, height: int = 240,
               layered: bool = False, y_binary: bool = False, end_labels: Sequence[str] = ()) -> str:
    """Lines through points on a shared scale, y from 0; ``marks`` are highlighted points (the
    model's own configuration). ``x_log`` spaces x by log2 (context lengths). ``layered`` draws
    each later series thinner, so lines that coincide stay visible; ``end_labels`` (one per
    series) name each line at its last point, lines that end together in one label ('a = b')."""
    left, right, top, bottom = 64, 16, 10, 40
    if end_labels:
        right += int(max(len(t) for t in _merged_ends(series, end_labels, lambda y: y)[1]) * _CHAR) + 12
    xs = [x for s in series for x, _ in s.points] + [m.x for m in marks]
    ys = [y for s in series for _, y in s.points] + [m.y for m in marks]
    if not xs:
        return ""

    def fx(v: float) -> float:
        return math.log2(v) if x_log else v

    lo, hi = fx(min(xs)), fx(max(xs))
    span = (hi - lo) or 1.0
    y_ticks = _ticks(max(ys) if ys else 1, binary=y_binary)
    y_top = y_ticks[-1] or 1.0
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(v: float) -> float:
        return left + plot_w * (fx(v) - lo) / span

    def py(v: float) -> float:
        return top + plot_h * (1 - v / y_top)

    out = _open(width, height, ids, title, desc, "lines")
    for t in y_ticks:
        out.append(f'<line class="grid" x1="{left}" y1="{_n(py(t))}" x2="{_n(width - right)}" y2="{_n(py(t))}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{_n(py(t) + 4)}" text-anchor="end">{html(y_tick(int(t)))}</text>')
    for t in _spaced(x_ticks or sorted(set(xs)), px, x_fmt):
        out.append(f'<text class="tick" x="{_n(px(t))}" y="{_n(top + plot_h + 16)}" '
                   f'text-anchor="middle">{html(x_fmt(t))}</text>')
    out.append(f'<line class="axis" x1="{left}" y1="{_n(top + plot_h)}" x2="{_n(width - right)}" '
               f'y2="{_n(top + plot_h)}"/>')
    out.append(f'<text class="axis-label" x="{_n(left + plot_w / 2)}" y="{height - 4}" '
               f'text-anchor="middle">{html(x_label)}</text>')
    for i, s in enumerate(series):
        layer = f" s{min(i, 4)}" if layered else ""
        path = " ".join(f"{'M' if i == 0 else 'L'}{_n(px(x))},{_n(py(y))}" for i, (x, y) in enumerate(s.points))
        out.append(f'<path class="line {s.css}{layer}" d="{path}"><title>{html(s.label)}</title></path>')
        for x, y in s.points:
            out.append(f'<circle class="pt {s.css}" cx="{_n(px(x))}" cy="{_n(py(y))}" r="2.5">'
                       f'<title>{html(s.label)}: {html(x_fmt(x))} → {html(y_fmt(int(y)))}</title></circle>')
    if end_labels:
        out.extend(_end_texts(series, end_labels, px, py, top))
    out.extend(_mark_groups(marks, px, py, left + plot_w * 0.6))
    out.append("</svg>")
    return "".join(out)
