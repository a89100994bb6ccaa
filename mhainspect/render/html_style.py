"""The stylesheet of the HTML report: one constant, scoped under ``.mhai`` so the same rules serve
the stand-alone page and a Jupyter cell without touching the notebook around it. Its SHA-256 goes
into the page's Content-Security-Policy, which then allows this stylesheet and nothing else."""

from __future__ import annotations

import base64
import hashlib

__all__ = ["CSS", "CSS_HASH"]

CSS = """
.mhai-page{margin:0;background:#ffffff}
@media (prefers-color-scheme:dark){.mhai-page{background:#0d1117}}
@media print{.mhai-page{background:#fff}}
.mhai{--bg:#ffffff;--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--card:#f6f8fa;--accent:#cf222e;
--link:#0969da;--q:#4e79a7;--k:#f28e2b;--v:#59a14f;--o:#b07aa1;--bias:#e3b505;--extra:#9c755f;
--rest:#c9c3bf;--fixw:#4e79a7;--fixd:#e15759;--col:#7f8fa6;--warn:#9a6700;--info:#0969da;--err:#cf222e;
color:var(--fg);background:var(--bg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",
Arial,sans-serif;max-width:1280px;margin:0 auto;padding:16px 20px 40px}
@media (prefers-color-scheme:dark){.mhai{--bg:#0d1117;--fg:#e6edf3;--muted:#9198a1;--line:#3d444d;
--card:#151b23;--accent:#ff7b72;--link:#4493f8;--q:#76a5d6;--k:#ffa64d;--v:#7bc46f;--o:#d49ac6;
--bias:#f2cc4d;--extra:#c49a7c;--rest:#4a4f57;--fixw:#76a5d6;--fixd:#ff8a8a;--col:#8b98ad;--warn:#d29922;
--info:#4493f8;--err:#ff7b72}}
.mhai p,.mhai li,.mhai h1,.mhai h3,.mhai figcaption,.mhai summary{overflow-wrap:anywhere}
.mhai h1{font-size:1.5em;margin:.2em 0 .6em}
.mhai h2{font-size:1.25em;margin:0 0 .3em;overflow-wrap:anywhere}
.mhai h3{font-size:1.05em;margin:1.4em 0 .4em}
.mhai a{color:var(--link)}
.mhai code,.mhai .mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.92em;
overflow-wrap:anywhere}
.mhai .meta,.mhai .caption{color:var(--muted)}
.mhai .caption{font-size:.9em;margin:.2em 0 .6em}
.mhai.multi{max-width:1840px}
.mhai .models{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,60rem),1fr));gap:20px}
.mhai .model{border:1px solid var(--line);border-radius:10px;padding:16px 18px;min-width:0}
.mhai .tiles{display:flex;flex-wrap:wrap;gap:10px;margin:.8em 0}
.mhai .tile{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:6px 12px;min-width:8.5em}
.mhai .tile b{display:block;font-size:1.25em;font-variant-numeric:tabular-nums}
.mhai .tile span{color:var(--muted);font-size:.85em}
.mhai ul.flags{list-style:none;padding:0;margin:.4em 0}
.mhai ul.flags li{margin:.25em 0;overflow-wrap:anywhere}
.mhai .sev{display:inline-block;font-size:.78em;font-weight:600;border-radius:4px;padding:0 6px;margin:0 6px 0 4px;
border:1px solid currentColor}
.mhai .sev.warning{color:var(--warn)}.mhai .sev.info{color:var(--info)}.mhai .sev.error{color:var(--err)}
.mhai .legend{display:flex;flex-wrap:wrap;gap:14px;font-size:.88em;color:var(--muted);margin:.3em 0}
.mhai .sw{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;vertical-align:-1px}
.mhai .sw.q,.mhai .seg.q{background:var(--q);fill:var(--q)}
.mhai .sw.k,.mhai .seg.k{background:var(--k);fill:var(--k)}
.mhai .sw.v,.mhai .seg.v{background:var(--v);fill:var(--v)}
.mhai .sw.o,.mhai .seg.o{background:var(--o);fill:var(--o)}
.mhai .sw.bias,.mhai .seg.bias{background:var(--bias);fill:var(--bias)}
.mhai .sw.extra,.mhai .seg.extra{background:var(--extra);fill:var(--extra)}
.mhai .sw.rest,.mhai .seg.rest{background:var(--rest);fill:var(--rest)}
.mhai .sw.fixw{background:var(--fixw)}.mhai .sw.fixd{background:var(--fixd)}
.mhai svg.chart{display:block;max-width:100%;height:auto;margin:.3em 0 .6em;overflow:visible}
.mhai svg text{fill:var(--fg);font-size:12px;font-family:inherit}
.mhai svg .tick,.mhai svg .note,.mhai svg .value,.mhai svg .axis-label{fill:var(--muted);font-size:11px}
.mhai svg .label.hl,.mhai svg .panel{font-weight:600}
.mhai svg .label.hl{fill:var(--accent)}
.mhai svg .grid{stroke:var(--line);stroke-width:1}
.mhai svg .axis{stroke:var(--muted);stroke-width:1}
.mhai svg .col{fill:var(--col)}.mhai svg .col.hl{fill:var(--accent)}
.mhai svg .unknown{fill:var(--accent);font-weight:700}
.mhai .tone-info svg .label.hl,.mhai .tone-info svg .col.hl{fill:var(--info)}
.mhai .tone-warning svg .label.hl,.mhai .tone-warning svg .col.hl{fill:var(--warn)}
.mhai svg .line{fill:none;stroke-width:2.2}
.mhai svg .line.fixw,.mhai svg .pt.fixw{stroke:var(--fixw)}.mhai svg .pt.fixw{fill:var(--fixw)}
.mhai svg .line.fixd,.mhai svg .pt.fixd{stroke:var(--fixd)}.mhai svg .pt.fixd{fill:var(--fixd)}
.mhai svg .line.kv,.mhai svg .pt.kv{stroke:var(--v)}.mhai svg .pt.kv{fill:var(--v)}
.mhai svg .line.o,.mhai svg .pt.o{stroke:var(--o)}.mhai svg .pt.o{fill:var(--o)}
.mhai svg .line.k,.mhai svg .pt.k{stroke:var(--k)}.mhai svg .pt.k{fill:var(--k)}
.mhai .sw.kv{background:var(--v)}
.mhai svg .line.state,.mhai svg .pt.state{stroke:var(--o);stroke-dasharray:6 4}.mhai svg .pt.state{fill:var(--o)}
.mhai .sw.state{background:var(--o)}
.mhai svg .line.s0{stroke-width:8;stroke-opacity:.5}.mhai svg .line.s1{stroke-width:5.5;stroke-opacity:.7}
.mhai svg .line.s2{stroke-width:3.5}.mhai svg .line.s3{stroke-width:2.2}.mhai svg .line.s4{stroke-width:1.4}
.mhai svg .mark circle{fill:none;stroke:var(--fg);stroke-width:2}
.mhai svg text.end{font-size:11.5px;font-weight:600}
.mhai svg .line.s1{stroke-dasharray:14 5}.mhai svg .line.s2{stroke-dasharray:8 5}
.mhai svg .line.s3{stroke-dasharray:4 4}.mhai svg .line.s4{stroke-dasharray:2 3}
.mhai svg .mark text{font-weight:600;font-size:11.5px}
.mhai svg .seg{stroke:var(--bg);stroke-width:.6}
.mhai .charts{display:flex;flex-wrap:wrap;gap:8px 28px}
.mhai .charts figure{margin:0;flex:1 1 420px;min-width:0}
.mhai figcaption{font-size:.9em;color:var(--muted);overflow-wrap:anywhere}
.mhai table{border-collapse:collapse;margin:.4em 0;font-size:.92em}
.mhai .scroll{overflow-x:auto;max-width:100%}
.mhai th,.mhai td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:right;vertical-align:top;
font-variant-numeric:tabular-nums}
.mhai th{background:var(--card)}
.mhai th.l,.mhai td.l{text-align:left}
.mhai td.name{text-align:left;min-width:12em;max-width:28em;overflow-wrap:break-word}
.mhai td.name code{overflow-wrap:break-word}
.mhai td.unknown{color:var(--accent)}
.mhai details{margin:.35em 0;border:1px solid var(--line);border-radius:6px;padding:4px 10px}
.mhai summary{cursor:pointer;overflow-wrap:anywhere}
.mhai details table{font-size:.88em}
.mhai .warnings li{color:var(--warn);overflow-wrap:anywhere}
.mhai .verdict{font-size:1.1em;font-weight:600}
.mhai .formula{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:var(--card);
border:1px solid var(--line);border-radius:8px;padding:10px 14px;overflow-x:auto;white-space:pre}
.mhai footer{margin-top:2em;color:var(--muted);font-size:.85em}
.mhai .glossary{margin-top:1.5em;font-size:.9em}.mhai .glossary li{margin:.2em 0}
@media print{.mhai{--bg:#fff;--fg:#000;--muted:#444;--line:#bbb;--card:#f3f3f3;max-width:none;padding:0;font-size:11px}
.mhai .models{display:block}.mhai .model{break-inside:auto;border:none;padding:0;margin-bottom:2em}
.mhai svg.chart,.mhai figure,.mhai tr{break-inside:avoid}.mhai details::details-content{content-visibility:visible;
display:block}.mhai details{border:none;padding:0}.mhai a{color:inherit;text-decoration:none}}
""".strip()

CSS_HASH = "sha256-" + base64.b64encode(hashlib.sha256(CSS.encode("utf-8")).digest()).decode("ascii")
