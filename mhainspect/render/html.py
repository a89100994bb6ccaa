"""Reports -> one self-contained HTML page with inline SVG charts. Pure: returns text.

The page makes no request of any kind: the stylesheet is inline, the charts are inline SVG, there
is no script, font, image or link that loads anything, and a Content-Security-Policy meta tag
(``default-src 'none'``, the stylesheet allowed by its hash) holds the browser to that. Every
string from the model goes through ``safe.html``; none reaches an attribute other than a quoted
text one, a URL, a style or an id (ids are counters).

``render_html_body`` is the same content without the page around it, for Jupyter
(``Report._repr_html_``, through ``mhainspect.render.render``).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence

from mhainspect import __version__
from mhainspect.analysis.gates import NO_EXTRAS, ModelExtras
from mhainspect.ir.units import format_bytes, group, human_count
from mhainspect.render import links
from mhainspect.render.cells import (
    UNKNOWN,
    block_cells,
    format_label,
    heads_label,
    ignored_line,
    kind_label,
    kv_cell,
    model_names,
    percent,
    source_facts,
    verify_label,
)
from mhainspect.render.grouping import BlockGroup, common_prefix, group_blocks, group_flags, join_names
from mhainspect.render.html_style import CSS, CSS_HASH
from mhainspect.render.safe import html
from mhainspect.render.sarif import FLAG_ANCHORS
from mhainspect.render.size_lines import (
    IF_DECODED_LABEL,
    OVERHEAD_LABEL,
    block_cache_text,
    experts_line,
    fit_lines,
    latent_cache_text,
    memory_line,
    weight_dtype_line,
)
from mhainspect.render.svg import (
    Column,
    Ids,
    Mark,
    Row,
    Segment,
    Series,
    columns_chart,
    label_width,
    line_chart,
    log_bars,
    stacked_bars,
    truncate,
)
from mhainspect.results import AttentionBlock, CacheStatus, FailedInput, Flag, KVCache, Report, Severity

__all__ = ["CSP", "page", "render_html", "render_html_body", "repr_html"]

# Nothing may load: no fetch, image, font, frame, form target or base URL; only our stylesheet.
CSP = (f"default-src 'none'; style-src '{CSS_HASH}'; img-src 'none'; font-src 'none'; connect-src 'none'; "
       "script-src 'none'; object-src 'none'; frame-src 'none'; form-action 'none'; base-uri 'none'")

_ROLES = (("q", "Q"), ("k", "K"), ("v", "V"), ("o", "O"))
_MAX_WHATIF_CHARTS = 6


def _opt(value: int | None) -> str:
    return UNKNOWN if value is None else str(value)


def _sev(flag: Flag) -> str:
    return flag.severity.value if isinstance(flag.severity, Severity) else str(flag.severity)


def _name(text: str) -> str:
    """A model name as text with break opportunities after '.' and '/' (escaped first, so the
    ``<wbr>`` tags are the page's own markup), so a narrow cell wraps between path components."""
    return html(text).replace(".", ".<wbr>").replace("/", "/<wbr>")


def _flag_link(code: str) -> str:
    """The code, linked to its section of docs/flags.md where the project says where docs live."""
    base = links.docs_base()
    if base is None:
        return f"<b>{html(code)}</b>"
    anchor = FLAG_ANCHORS.get(code)
    href = f"{base}flags.md" + (f"#{anchor}" if anchor else "")
    return f'<a href="{html(href)}" rel="noopener noreferrer"><b>{html(code)}</b></a>'


# ------------------------------------------------------------------------------------ parts


def _segments(b: AttentionBlock) -> tuple[Segment, ...]:
    """Q/K/V/O weights, then all biases (bias_k/bias_v too), then a latent block's down-projections,
    then extra (position tables)."""
    p = b.params
    weights = dict(zip(("q", "k", "v", "o"), b.role_weights()))
    segs = [Segment(f"{label} weights", weights[role], role) for role, label in _ROLES]
    segs.append(Segment("biases", p.bias, "bias"))
    if p.latent:
        segs.append(Segment("latent down-projections and norms", p.latent, "extra"))
    if p.indexer:
        segs.append(Segment("sparse-attention indexer", p.indexer, "extra"))
    if p.gate:
        segs.append(Segment("output gate", p.gate, "extra"))
    if p.extra:
        segs.append(Segment("other block parameters", p.extra, "extra"))
    return tuple(segs)


def _layout(b: AttentionBlock) -> tuple[int | None, ...]:
    return (b.num_heads, b.num_kv_heads, b.d_k, b.d_v)


def _common_layout(blocks: Sequence[AttentionBlock]) -> tuple[int | None, ...] | None:
    counts = Counter(_layout(b) for b in blocks)
    return counts.most_common(1)[0][0] if counts else None


def _legend(items: Iterable[tuple[str, str]]) -> str:
    return '<div class="legend">' + "".join(f'<span><i class="sw {css}"></i>{html(label)}</span>'
                                          for css, label in items) + "</div>"


def _tiles(report: Report) -> str:
    m = report.model
    tiles = [(group(m.total_params), "parameters"),
             (group(m.attention_params), f"in attention ({percent(m.attention_params, m.total_params)}%)"
              if m.total_params else "in attention"),
             (str(len(report.blocks)), "attention blocks")]
    if m.experts is not None and m.experts.active_params is not None:
        tiles.append((group(m.experts.active_params), "active per token"))
    if m.weight_bytes is not None:
        tiles.append((format_bytes(m.weight_bytes), "weights as stored"))
    kv = m.kv_cache
    if kv is not None and kv.bytes_per_token is not None:
        tiles.append((format_bytes(kv.bytes_per_token), "KV cache per token"))
        if kv.total_bytes is not None and kv.context is not None:
            tiles.append((format_bytes(kv.total_bytes), f"KV cache at {group(kv.context)} tokens"))
    tiles.append(_flags_tile(report))
    return '<div class="tiles">' + "".join(f"<div class=\"tile\"><b>{html(v)}</b><span>{html(k)}</span></div>"
                                           for v, k in tiles) + "</div>"


def _flags_tile(report: Report) -> tuple[str, str]:
    """The flags as the page lists them: '1 flag, on 32 blocks' for one MHA005 on every layer."""
    lines = len(group_flags(report.flags))
    label = "flag" if lines == 1 else "flags"
    if lines < len(report.flags):
        label += f", raised {len(report.flags)} times"
    return str(lines), label


def _size_lines(report: Report) -> list[str]:
    m = report.model
    out = []
    if m.weight_bytes_by_dtype:
        parts = ", ".join(f"{html(dtype)} {html(format_bytes(n))}" for dtype, n in m.weight_bytes_by_dtype)
        overhead = (f"; {html(OVERHEAD_LABEL)} {html(format_bytes(m.weight_bytes_overhead))}"
                    if m.weight_bytes_overhead else "")
        out.append(f'<p class="meta">Weights by type: {parts}{overhead}</p>')
    kv = m.kv_cache
    if kv is not None:
        if kv.bytes_per_token is not None:
            text = f"KV cache: {format_bytes(kv.bytes_per_token)} per token"
            if kv.dtype:
                text += f" ({kv.dtype})"
            if kv.bytes_per_encoder_token:
                text += f"; cross-attention {format_bytes(kv.bytes_per_encoder_token)} per encoder token"
            if kv.status is CacheStatus.IF_DECODED:
                text += f"; {IF_DECODED_LABEL}"
            out.append(f'<p class="meta">{html(text)}</p>')
            latent = latent_cache_text(report)
            if latent is not None:
                out.append(f'<p class="meta">{html(latent[0].upper() + latent[1:])}</p>')
        elif kv.reason:
            status = "none" if kv.status is CacheStatus.NONE else "unknown"
            out.append(f'<p class="meta">KV cache: {status} ({html(kv.reason)})</p>')
    what_if = weight_dtype_line(report)
    extra = [experts_line(report), memory_line(report), f"Weights {what_if}" if what_if else None,
             *(line.strip() for line in fit_lines(report))]
    out += [f'<p class="meta">{html(line)}</p>' for line in extra if line]
    return out


def _header(report: Report) -> str:
    m = report.model
    # Only what the source has (a checkpoint has no opset or nodes), as the text report says it.
    meta = [format_label(m.format), *source_facts(m)]
    out = [f"<h2>{html(m.path)}</h2>", f'<p class="meta">{html(" · ".join(meta))}</p>', _tiles(report),
           *_size_lines(report)]
    if report.flags:
        items = []
        for g in group_flags(report.flags):
            f = g.flag
            names = [b for b in g.blocks if b is not None]
            where = f"<code>{_name(join_names(names))}</code>: " if names else ""
            times = f"<b>×{g.count}</b> " if g.count > 1 else ""
            items.append(f'<li>{_flag_link(f.code)}<span class="sev {html(_sev(f))}">{html(_sev(f))}</span>'
                         f"{times}{where}{html(f.message)}</li>")
        out.append('<ul class="flags">' + "".join(items) + "</ul>")
    else:
        out.append('<p class="meta">No flags.</p>')
    if report.warnings:
        out.append('<ul class="warnings">' + "".join(f"<li>{html(w)}</li>" for w in report.warnings) + "</ul>")
    return "".join(out)


def _groups(report: Report) -> list[BlockGroup]:
    """The blocks as the page draws them: blocks with the same layout and counts whose names
    differ in one number (every layer of a big model) are one bar, one row and one section."""
    total = report.model.total_params
    return group_blocks(report.blocks, lambda b: (block_cells(b, total)[1:], _layout(b), _segments(b)))


def _label(g: BlockGroup, prefix: str = "") -> str:
    """A group's name for a chart: without the prefix every block shares, with its count."""
    name = g.label[len(prefix):] if prefix and g.label.startswith(prefix) else g.label
    return name if g.count == 1 else f"{name} ×{g.count}"


def _prefix_note(prefix: str) -> str:
    return f" Names without their common prefix “{prefix}”." if prefix else ""


def _differs_note(report: Report) -> str:
    if len({_layout(b) for b in report.blocks}) < 2:
        return ""
    return (" Names in colour have a head layout that differs from the most common one "
            f"(MHA006, {_tone(report)}).")


def _tone(report: Report) -> str:
    """How loudly the page marks blocks whose layout differs: as MHA006's own severity says
    (info, warning, error), so an informational difference is not drawn in alarm red."""
    order = {"info": 0, "warning": 1, "error": 2}
    severities = [_sev(f) for f in report.flags if f.code == "MHA006"]
    return max(severities, key=lambda v: order.get(v, 0)) if severities else "info"


def _params_section(report: Report, ids: Ids) -> str:
    m = report.model
    blocks = report.blocks
    groups = _groups(report)
    prefix = common_prefix([b.name for b in blocks])
    totals: dict[str, int] = {}
    for b in blocks:
        for seg in _segments(b):
            totals[seg.css] = totals.get(seg.css, 0) + seg.value
    rest = max(0, m.total_params - m.attention_params)
    whole = Row("whole model", (*(Segment(label, totals.get(css, 0), css) for css, label in
                                  (("q", "Q weights"), ("k", "K weights"), ("v", "V weights"), ("o", "O weights"),
                                   ("bias", "biases"), ("extra", "other block parameters"))),
                                Segment("rest of the model", rest, "rest")),
                note=f"{percent(m.attention_params, m.total_params)}% attention" if m.total_params else "")
    chars = label_width([whole.label, *(_label(g, prefix) for g in groups)])
    model_bar = stacked_bars([whole], label_chars=chars, ids=ids, title="Attention parameters against the whole model",
                             desc=f"{group(m.attention_params)} of {group(m.total_params)} parameters are in "
                                  f"attention blocks; {group(rest)} are elsewhere.", fmt=human_count)
    common = _common_layout(blocks)
    rows = [Row(_label(g, prefix), _segments(g.first),
                note=group(g.first.params.total + g.first.params.extra) + (" each" if g.count > 1 else ""),
                highlight=_layout(g.first) != common) for g in groups]
    desc = "; ".join(f"{_label(g)}: " + ", ".join(f"{r} {group(n)}" for r, n in zip("QKVO", g.first.role_weights()))
                     + f", biases {group(g.first.params.bias)}" + (" each" if g.count > 1 else "") for g in groups[:64])
    per_block = stacked_bars(rows, label_chars=chars, ids=ids,
                             title="Attention parameters per block, stacked Q / K / V / O / bias", desc=desc,
                             fmt=human_count)
    legend = _legend([("q", "Q"), ("k", "K"), ("v", "V"), ("o", "O"), ("bias", "biases"),
                      *([("extra", "other block parameters")] if totals.get("extra") else []),
                      ("rest", "rest of the model")])
    folded = (" Blocks with the same counts and layout are one bar (×N: N blocks, each as drawn)."
              if len(groups) < len(blocks) else "")
    return ("<h3>Where the attention parameters are</h3>" + legend + model_bar + per_block
            + f'<p class="caption">One bar per attention block, in model order; the scale is shared.{folded}'
              f"{html(_prefix_note(prefix))}{html(_differs_note(report))}</p>")


def _layout_section(report: Report, ids: Ids) -> str:
    blocks = report.blocks
    layouts = Counter(_layout(b) for b in blocks)
    if len(layouts) == 1:
        h, g, dk, dv = next(iter(layouts))
        every = "The block has" if len(blocks) == 1 else f"All {len(blocks)} blocks share one layout:"
        kv = f", {_opt(g)} KV heads" if g is not None and g != h else ""
        return (f"<h3>Head layout</h3><p>{html(every)} {html(_opt(h))} heads{html(kv)}, d_k {html(_opt(dk))}, "
                f"d_v {html(_opt(dv))}.</p>")
    common = _common_layout(blocks)
    prefix = common_prefix([b.name for b in blocks])
    groups = group_blocks(blocks, _layout)  # one column per layout run, labelled by its blocks
    show_dv = any(b.d_v != b.d_k for b in blocks)
    panels = ["heads", "KV heads", "d_k", *(["d_v"] if show_dv else [])]
    cols = [Column(_label(grp, prefix), (b.num_heads, b.num_kv_heads if b.num_kv_heads is not None else b.num_heads,
                                         b.d_k, *((b.d_v,) if show_dv else ())), highlight=_layout(b) != common)
            for grp in groups for b in (grp.first,)]
    desc = (f"{len(layouts)} head layouts: "
            + "; ".join(f"{_blocks_word(n)} with {_opt(h)} heads, {_opt(g)} KV heads, d_k {_opt(dk)}, d_v {_opt(dv)}"
                        for (h, g, dk, dv), n in layouts.most_common()))
    chart = columns_chart(cols, panels, ids=ids, title="Heads, KV heads and head width per block", desc=desc)
    note = (f"The layout changes between blocks (MHA006, {_tone(report)}): the differing blocks are in colour; "
            "one column per layout and its blocks (×N), in model order.")
    return f'<h3>Head layout per block</h3>{chart}<p class="caption">{html(note)}</p>'


def _blocks_word(n: int) -> str:
    return "1 block" if n == 1 else f"{n} blocks"


def _whatif_chart(members: Sequence[AttentionBlock], ids: Ids) -> str:
    b = members[0]
    h = b.num_heads
    points = [(w.num_heads, w) for w in b.what_if_curve]  # analysis.charts computed them
    own = next((w for x, w in points if x == h), None)
    if h is None or own is None or len(points) < 2:
        return ""
    # h·d_k fixed has no count where the width does not divide into x heads (total_width_fixed None).
    fixed_width = Series("h·d_k fixed (d_k shrinks as heads grow)",
                         tuple((float(x), float(w.total_width_fixed)) for x, w in points
                               if w.total_width_fixed is not None), "fixw")
    fixed_dk = Series(f"d_k fixed at {b.d_k} (widths grow with heads)",
                      tuple((float(x), float(w.head_dim_fixed)) for x, w in points), "fixd")
    mark = Mark(float(h), float(own.head_dim_fixed), f"this block: {h} heads, {group(own.head_dim_fixed)}")
    first, last = points[0], points[-1]
    desc = (f"With h·d_k fixed, {first[0]} heads hold {_count(first[1].total_width_fixed)} and {last[0]} heads "
            f"{_count(last[1].total_width_fixed)} parameters; with d_k fixed at {b.d_k}, {first[0]} heads hold "
            f"{group(first[1].head_dim_fixed)} and {last[0]} heads {group(last[1].head_dim_fixed)}. "
            f"The block has {h} heads and {group(own.head_dim_fixed)} projection parameters.")
    chart = line_chart([fixed_width, fixed_dk], [mark], ids=ids, x_label="heads",
                       title=f"Parameters against the head count: {b.name}", desc=desc, y_fmt=group,
                       x_fmt=lambda v: f"{v:g}")
    names = truncate(join_names([m.name for m in members]), 160) + (f" ({len(members)} blocks of this layout)"
                                                                    if len(members) > 1 else "")
    return (f"<figure>{chart}<figcaption><b>{html(names)}</b>: {html(heads_label(b))} heads, d_k {_opt(b.d_k)}, "
            f"d_model {_opt(b.d_model)}. {html(_whatif_sentence(b, own.head_dim_fixed))}</figcaption></figure>")


def _count(value: int | None) -> str:
    """A what-if count, or why there is none (h·d_k not divisible by that head count)."""
    return "no count (width not divisible)" if value is None else group(value)


def _whatif_sentence(b: AttentionBlock, own: int) -> str:
    """The chart in words, from the block's own what-if rows (h/2, 2h, --heads)."""
    rows = [w for w in b.what_if if w.num_heads != b.num_heads]
    if not rows:
        return ""
    fixed_width = ", ".join(f"{_count(w.total_width_fixed)} at {w.num_heads}" for w in rows)
    fixed_dk = ", ".join(f"{group(w.head_dim_fixed)} at {w.num_heads}" for w in rows)
    if all(w.total_width_fixed in (own, None) for w in rows):
        lead = f"Keeping h·d_k, any head count that divides the width holds {group(own)}"
    else:
        lead = f"Keeping h·d_k: {fixed_width}"
    return f"{lead}; keeping d_k = {b.d_k}: {fixed_dk} heads."


def _whatif_section(report: Report, ids: Ids) -> str:
    groups: dict[tuple[object, ...], list[AttentionBlock]] = {}
    for b in report.blocks:
        key = (*_layout(b), b.d_model, b.params.total,
               tuple((p.role, p.in_features, p.out_features, bool(p.bias_params)) for p in b.projections))
        groups.setdefault(key, []).append(b)
    charts = [c for c in (_whatif_chart(g, ids) for g in list(groups.values())[:_MAX_WHATIF_CHARTS]) if c]
    if not charts:
        return ""
    more = (f'<p class="caption">{len(groups) - _MAX_WHATIF_CHARTS} more layouts not drawn; '
            "the block table lists every block's what-if counts.</p>" if len(groups) > _MAX_WHATIF_CHARTS else "")
    return ("<h3>What would more heads cost?</h3>"
            + _legend([("fixw", "total width h·d_k fixed (PyTorch, MATLAB: d_k = width / h)"),
                       ("fixd", "per-head width d_k fixed (Keras key_dim, T5 d_kv, Llama head_dim)")])
            + '<div class="charts">' + "".join(charts) + "</div>" + more
            + '<p class="caption">A flat line means the head count does not change the parameter count; '
              "the circled point is the block as it is.</p>")


def _kv_section(report: Report, ids: Ids) -> str:
    kv: KVCache | None = report.model.kv_cache
    if kv is None or not (kv.by_context or kv.state_by_context):
        return ""
    # analysis.charts computed the points: even steps up to the axis' end, the context and every window;
    # the mixers' fixed state (linear attention, state-space, convolution layers) at the same points
    points = tuple((float(c), float(v)) for c, v in kv.by_context)
    state = tuple((float(c), float(v)) for c, v in kv.state_by_context)
    top = (kv.by_context or kv.state_by_context)[-1][0]
    marks = []
    if kv.context is not None and kv.total_bytes is not None:
        marks.append(Mark(float(kv.context), float(kv.total_bytes),
                          f"{group(kv.context)} tokens: {format_bytes(kv.total_bytes)}"))
    batch = f", batch {group(kv.batch)}" if kv.batch != 1 else ""
    series = [Series(f"KV cache{batch}", points, "kv")] if points else []
    legend = ""
    if state:
        series.append(Series(f"other mixers' state{batch} (constant)", state, "state"))
        legend = _legend([("kv", "KV cache (grows with the context)"),
                          ("state", "state of the linear-attention, state-space and convolution layers "
                                    "(fixed per sequence)")])
    desc = "; ".join(f"{int(c):,} tokens: {format_bytes(int(v))}" for c, v in points)
    if state:
        desc = "; ".join(x for x in (desc, f"other mixers' state at every context: {format_bytes(int(state[0][1]))}")
                         if x)
    chart = line_chart(series, marks, ids=ids, x_label="context length (tokens)",
                       title="KV cache against context length", desc=desc, y_fmt=format_bytes, y_tick=format_bytes,
                       y_binary=True, x_fmt=lambda v: f"{v / 1024:g}k" if v >= 1024 else f"{int(v)}",
                       x_ticks=[0.0, *(float(top * i // 4) for i in range(1, 5))])
    dtype = f" ({kv.dtype})" if kv.dtype else ""
    # said only where a layer has a window: a caption about windows the model lacks misleads
    windows = sorted({b.sliding_window for b in report.blocks if b.sliding_window})
    slide = (f"; the sliding-window layers stop growing at their window ({', '.join(group(w) for w in windows)} "
             "tokens)" if windows else "")
    per_token = f"{format_bytes(kv.bytes_per_token)} per token{dtype}{batch}{slide}" \
        if kv.bytes_per_token is not None else ""
    fixed = (f"the other mixers' state: {format_bytes(int(state[0][1]))} per sequence{batch}, whatever the "
             "context" if state else "")
    return (f"<h3>KV cache against context length</h3>{legend}<figure>{chart}<figcaption>"
            f"{html('; '.join(x for x in (per_token, fixed) if x))}."
            "</figcaption></figure>")


def _evidence_table(b: AttentionBlock) -> str:
    rows = []
    for ev in b.evidence:
        value = "" if ev.value is None else f"{ev.value:g}" if isinstance(ev.value, float) else str(ev.value)
        rows.append(f'<tr><td class="l">{html(ev.field)}</td><td>{html(value)}</td><td class="l">{html(ev.source)}'
                    f'</td><td class="name mono">{html(ev.detail)}</td></tr>')
    return ('<div class="scroll"><table><tr><th class="l">field</th><th>value</th><th class="l">source</th>'
            '<th class="l">detail</th></tr>' + "".join(rows) + "</table></div>") if rows else ""


def _block_details(b: AttentionBlock) -> str:
    parts = [f'<p class="meta">matcher {html(b.matcher)}' + (f" · anchor <code>{html(b.anchor)}</code>" if b.anchor
                                                             else "")
             + (f" · scale {b.scale:g}" if b.scale is not None else " · scale not found") + "</p>"]
    if b.unknown_reason:
        parts.append(f"<p>Heads unknown: {html(b.unknown_reason)}</p>")
    parts.extend(f"<p>Conflict: {html(c)}</p>" for c in b.conflicts)
    if b.verification is not None:
        parts.append(f"<p>--verify: {html(verify_label(b.verification))}</p>")
    parts.append(_evidence_table(b))
    proj_rows = "".join(
        f'<tr><td class="l">{html(p.role.upper())}</td><td class="name mono">{html(p.weight or UNKNOWN)}</td>'
        f"<td>{_opt(p.in_features)}→{_opt(p.out_features)}</td><td>{group(p.weight_params)}</td>"
        f"<td>{group(p.bias_params)}</td><td class=\"name mono\">{html(p.node)}</td></tr>" for p in b.projections)
    if proj_rows:
        parts.append('<div class="scroll"><table><tr><th class="l">role</th><th class="l">weight</th><th>shape</th>'
                     '<th>weights</th><th>bias</th><th class="l">node</th></tr>' + proj_rows + "</table></div>")
    if b.what_if:
        wi = "".join(f"<tr><td>{w.num_heads}</td><td>{_count(w.total_width_fixed)}</td><td>{group(w.head_dim_fixed)}"
                     "</td></tr>" for w in b.what_if)
        parts.append("<table><tr><th>heads</th><th>h·d_k fixed</th><th>d_k fixed</th></tr>" + wi + "</table>")
    cache_text = block_cache_text(b)
    if b.weight_bytes is not None or b.kv_cache_bytes_per_token is not None or cache_text:
        size = []
        if b.weight_bytes is not None:
            size.append(f"weights {format_bytes(b.weight_bytes)}")
        if b.kv_cache_bytes_per_token is not None:
            size.append(f"KV cache {format_bytes(b.kv_cache_bytes_per_token)} per token")
            if b.kv_cache_expanded_bytes_per_token is not None and b.latent is not None \
                    and not b.latent.runtime_expands:
                size[-1] += f" (latent; per-head K/V {format_bytes(b.kv_cache_expanded_bytes_per_token)})"
        if b.sliding_window is not None:
            size.append(f"sliding window {group(b.sliding_window)} tokens")
        if cache_text:
            size.append(cache_text)
        parts.append(f'<p class="meta">{html("; ".join(size))}</p>')
    return "".join(parts)


_BLOCK_HEAD = ("<tr><th class=\"l\">block</th><th class=\"l\">kind</th><th>heads</th><th>KV heads</th>"
               "<th>d_model</th><th>d_k</th><th>d_v</th><th>Q</th><th>K</th><th>V</th><th>O</th><th>bias</th>"
               "<th>total</th><th>share %</th></tr>")


def _block_row(b: AttentionBlock, name: str, total: int, times: int = 1) -> str:
    """One table row: ``name`` (page markup), ``times`` the blocks it stands for."""
    p = b.params
    count = f" <b>×{times}</b>" if times > 1 else ""
    cells = [_opt(b.num_heads), _opt(b.num_kv_heads), _opt(b.d_model), _opt(b.d_k), _opt(b.d_v)]
    dims = "".join(f'<td class="unknown">{c}</td>' if c == UNKNOWN else f"<td>{c}</td>" for c in cells)
    return (f'<tr><td class="name"><code>{name}</code>{count}</td><td class="l">{html(kind_label(b))}</td>{dims}'
            + "".join(f"<td>{group(v)}</td>" for v in (*b.role_weights(), p.bias))
            + f"<td><b>{group(p.total)}</b></td><td>{percent(p.total, total)}</td></tr>")


def _blocks_table(rows: Iterable[str]) -> str:
    return '<div class="scroll"><table class="blocks">' + _BLOCK_HEAD + "".join(rows) + "</table></div>"


def _evidence_section(g: BlockGroup) -> str:
    """One section per row of the table: the first block's evidence; the others' (their own
    tensor names, the same numbers) one toggle further in."""
    if g.count == 1:
        return (f"<details><summary>Evidence for <code>{html(g.label)}</code></summary>{_block_details(g.first)}"
                "</details>")
    others = "".join(f"<details><summary>Evidence for <code>{html(b.name)}</code></summary>{_block_details(b)}"
                     "</details>" for b in g.blocks[1:])
    return (f"<details><summary>Evidence for <code>{html(g.label)}</code> ({g.count} blocks with the same "
            f"numbers)</summary><p class=\"meta\">Shown: <code>{_name(g.first.name)}</code>.</p>"
            f"{_block_details(g.first)}<details><summary>The other {g.count - 1} blocks, one by one</summary>"
            f"{others}</details></details>")


def _blocks_section(report: Report) -> str:
    total = report.model.total_params
    groups = _groups(report)
    rows = [_block_row(g.first, _name(g.label), total, g.count) for g in groups]
    every = ""
    if len(groups) < len(report.blocks):
        every = (f"<details><summary>Every block, one row each ({len(report.blocks)})</summary>"
                 + _blocks_table(_block_row(b, _name(b.name), total) for b in report.blocks) + "</details>")
    folded = ('<p class="caption">×N: N blocks with the same numbers (each as shown) on one row.</p>'
              if every else "")
    return ("<h3>Blocks</h3>" + _blocks_table(rows) + folded + every
            + "".join(_evidence_section(g) for g in groups))


def _misses_section(report: Report) -> str:
    if not report.misses:
        return ""
    n = len(report.misses)
    items = "".join(f"<li>{html(x.matcher)} at <code>{html(x.anchor)}</code>: {html(x.reason)}</li>"
                    for x in report.misses)
    return (f'<details class="misses"><summary>{n} near miss{"es" if n != 1 else ""} (candidates that did not '
            f"match, with the reason)</summary><ul>{items}</ul></details>")


def _gates_section(extras: ModelExtras) -> str:
    """The run's gate results and the flags --ignore dropped (the CLI's extras), as a list."""
    items = [f"<li>{'✅ passed' if g.passed else '❌ <b>FAILED</b>'}: {html(g.message)}</li>" for g in extras.gates]
    parts = []
    if items:
        failed = sum(1 for g in extras.gates if not g.passed)
        parts.append(f"<h3>Gates ({failed} failed)</h3>" if failed else "<h3>Gates: all passed</h3>")
        parts.append("<ul>" + "".join(items) + "</ul>")
    if extras.ignored:
        parts.append(f"<p>{html(ignored_line(extras.ignored))}.</p>")
    return "".join(parts)


def _model_section(report: Report, ids: Ids, extras: ModelExtras = NO_EXTRAS) -> str:
    parts = [f'<section class="model tone-{html(_tone(report))}" aria-label="{html(report.model.path)}">',
             _header(report),
             _gates_section(extras)]
    if report.blocks:
        parts += [_params_section(report, ids), _layout_section(report, ids), _whatif_section(report, ids),
                  _kv_section(report, ids), _blocks_section(report)]
    else:
        # a model of state-space or linear-attention layers only still has their state to draw
        parts += ["<p><b>No attention blocks found.</b></p>", _kv_section(report, ids)]
    parts += [_misses_section(report), "</section>"]
    return "".join(parts)


def _comparison(reports: Sequence[Report], ids: Ids) -> str:
    """One row per model, and their parameters on one absolute (logarithmic) scale: names without
    the folder they share."""
    rows = []
    bars = []
    names = model_names(reports)
    for r, name in zip(reports, names):
        m = r.model
        layouts = list(dict.fromkeys(heads_label(b) + f"×{_opt(b.d_k)}" for b in r.blocks))
        rows.append(f'<tr><td class="name"><code>{_name(name)}</code></td><td class="l">{html(format_label(m.format))}</td>'
                    f"<td>{group(m.total_params)}</td><td>{group(m.attention_params)}</td>"
                    f"<td>{percent(m.attention_params, m.total_params)}</td><td>{len(r.blocks)}</td>"
                    f'<td class="l">{html(", ".join(layouts) or "-")}</td>'
                    f"<td>{html(format_bytes(m.weight_bytes)) if m.weight_bytes is not None else '-'}</td>"
                    f"<td>{html(kv_cell(r))}</td>"
                    f'<td class="l">{" ".join(_flag_link(c) for c in sorted({f.code for f in r.flags})) or "-"}</td>'
                    "</tr>")
        share = f"{percent(m.attention_params, m.total_params)}% in attention" if m.total_params else ""
        bars.append(Row(name, (Segment("parameters", m.total_params, "rest"),
                               Segment("in attention", m.attention_params, "q")),
                        note=f"{group(m.total_params)}; {share}" if share else group(m.total_params)))
    chart = log_bars(bars, ids=ids, title="Parameters per model and the part in attention (log scale)",
                     desc="; ".join(f"{name}: {group(r.model.total_params)} parameters, "
                                    f"{group(r.model.attention_params)} in attention" for r, name in zip(reports, names)),
                     fmt=group)
    prefix = common_prefix([r.model.path for r in reports])
    where = (f" Names are shown without the folder they share, {prefix}." if prefix
             and names != [r.model.path for r in reports] else "")
    return ("<h2>Comparison</h2>" + _legend([("rest", "parameters"), ("q", "in attention")]) + chart
            + f'<p class="caption">Each bar from the left edge, on one logarithmic scale (every grid line ten '
              f"times the last): a model ten times larger has a bar one grid step longer.{html(where)}</p>"
            + '<div class="scroll"><table><tr><th class="l">model</th><th class="l">format</th><th>parameters</th>'
              "<th>attention</th><th>share %</th><th>blocks</th><th class=\"l\">heads×d_k</th><th>weights</th>"
              "<th>KV / token</th><th class=\"l\">flags</th></tr>" + "".join(rows) + "</table></div>")


def render_html_body(reports: Report | Iterable[Report], *, id_prefix: str = "m",
                     extras: Sequence[ModelExtras] | None = None) -> str:
    """The report's content in one ``<div class="mhai">`` (no page, no stylesheet). Element ids
    start with ``id_prefix``, so several bodies can share one document (a notebook). ``extras``
    (one per report) add the run's gate results."""
    items = [reports] if isinstance(reports, Report) else list(reports)
    more = list(extras) if extras is not None else [NO_EXTRAS] * len(items)
    ids = Ids(id_prefix)
    parts = ['<div class="mhai multi">' if len(items) > 1 else '<div class="mhai">']
    if len(items) > 1:
        parts.append(_comparison(items, ids))
    if not items:
        parts.append("<p>No models analysed.</p>")
    parts.append('<div class="models">' + "".join(_model_section(r, ids, e) for r, e in zip(items, more)) + "</div>")
    base = links.docs_base()
    flags_doc = ("docs/flags.md" if base is None else
                 f'<a href="{html(base)}flags.md" rel="noopener noreferrer">docs/flags.md</a>')
    parts.append(_GLOSSARY)
    parts.append(f'<footer>mhainspect {html(__version__)} · counts are exact; charts round. '
                 f"Flag codes: {flags_doc}</footer></div>")
    return "".join(parts)


# The words of the tables and charts, for a reader who does not use them every day.
_GLOSSARY = ('<details class="glossary"><summary>Terms</summary><ul>'
             "<li><b>heads</b>: the query heads: attention runs once per head, each on its own slice of Q, K and "
             "V.</li>"
             "<li><b>KV heads</b>: the heads K and V have. As many as the query heads in standard attention; fewer "
             "in grouped-query attention (each K/V head shared by a group of query heads), one in multi-query "
             "attention. They set the KV cache.</li>"
             "<li><b>d_k</b>: the width of one head's query and key vectors (h·d_k is Q's width).</li>"
             "<li><b>d_v</b>: the width of one head's value vector (g·d_v is V's width, g the KV heads).</li>"
             "<li><b>d_model</b>: the width the block reads and writes (its input and output).</li>"
             "<li><b>KV cache</b>: what a decoder keeps per token while generating: K and V of every KV head, "
             "KV heads × (d_k + d_v) × bytes per element, per layer.</li></ul></details>")


def page(title: str, body: str) -> str:
    """A complete page around ``body`` (a ``.mhai`` div): CSP, colour schemes, the stylesheet."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="referrer" content="no-referrer">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<meta name="color-scheme" content="light dark">'
            f"<title>{html(title)}</title><style>{CSS}</style></head>"
            f'<body class="mhai-page">\n{body}\n</body></html>\n')


def render_html(reports: Report | Iterable[Report], *, extras: Sequence[ModelExtras] | None = None,
                failed: Sequence[FailedInput] = ()) -> str:
    """One self-contained page: a comparison when there are several models, then per model the
    header, the gate results (``extras``), parameter charts, head layout, what-if, KV cache, block
    table and near misses; ``failed``: the inputs that could not be audited, listed first."""
    items = [reports] if isinstance(reports, Report) else list(reports)
    title = ("mhainspect: " + items[0].model.path) if len(items) == 1 else f"mhainspect: {len(items)} models"
    body = render_html_body(items, extras=extras)
    if failed:
        errors = ('<div class="mhai"><h3>Could not be audited (' + str(len(failed)) + ")</h3><ul>"
                  + "".join(f"<li><code>{html(f.input)}</code> ({html(f.kind)}): {html(f.message)}</li>" for f in failed)
                  + "</ul></div>")
        body = errors + body
    return page(title, body)


def repr_html(reports: Report | Sequence[Report]) -> str:
    """What Jupyter shows for a Report (or for inspect_all's Reports: the comparison page): the
    page body with its stylesheet (scoped to ``.mhai``)."""
    items = [reports] if isinstance(reports, Report) else list(reports)
    # Ids from the reports' content: two different reports in one notebook never share an id.
    digest = hashlib.sha256(repr([(r.model, [b.name for b in r.blocks]) for r in items]).encode()).hexdigest()[:8]
    return f"<style>{CSS}</style>{render_html_body(items, id_prefix='m' + digest)}"
