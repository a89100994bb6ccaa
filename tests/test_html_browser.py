"""The HTML report in a real browser (issues 18 and 21): headless Chromium loads each page from a
local server that records requests, and the tests assert on the rendered DOM, the console and
the requests: every block present, charts drawn, no console message (a CSP violation is one), no
request but the page's own, no script or image from a model's names.

Skips without Chromium, except under CI=true (see tests/chromium.py).
"""

from __future__ import annotations

import dataclasses
import html as html_lib
import re
from pathlib import Path

import pytest
from big_models import LAYERS, write_llama_folder
from chromium import Loaded, load
from hostile_names import write_hostile_model

from mhainspect import conventions
from mhainspect.analysis.charts import with_charts
from mhainspect.pipeline import audit
from mhainspect.render.calc_html import render_calc_html, render_compare_html
from mhainspect.render.html import render_html
from mhainspect.results import KVCache, Report

SAMPLES = sorted((Path(__file__).resolve().parents[1] / "sample_models").glob("*.onnx"))
pytestmark = pytest.mark.slow  # a headless browser per page (-m 'not slow' leaves them out)


def _open(page_text: str, folder: Path, name: str = "page.html") -> Loaded:
    path = folder / name
    path.write_text(page_text, encoding="utf-8")
    loaded = load(path)
    assert loaded.console == (), loaded.console  # no error, no CSP violation, nothing logged
    assert loaded.requests == (f"/{name}",), loaded.requests  # the page, and nothing it asked for
    assert "<script" not in loaded.dom and "<img" not in loaded.dom and "<iframe" not in loaded.dom
    return loaded


def _count(dom: str, pattern: str) -> int:
    return len(re.findall(pattern, dom))


def _assert_model(dom: str, report: Report) -> None:
    """``dom`` holds one model's section."""
    for b in report.blocks:
        assert html_lib.escape(b.name, quote=False) in dom, b.name
    if report.blocks:
        layouts = {(b.num_heads, b.num_kv_heads, b.d_k, b.d_v) for b in report.blocks}
        assert _count(dom, r'<rect class="seg ') >= len(report.blocks)  # stacked bars drawn
        if len(layouts) > 1:  # heads / KV heads / d_k columns; one layout is one sentence
            assert _count(dom, r'<rect class="col') >= len(report.blocks)
        assert _count(dom, r'<table class="blocks">') == 1  # these samples' blocks differ: one row each
        rows = dom.split('<table class="blocks">')[1].split("</table>")[0]
        assert _count(rows, r"<tr>") == 1 + len(report.blocks)
        if all(b.num_heads is not None for b in report.blocks):
            assert _count(dom, r'<path class="line fix[wd]') >= 2 and _count(dom, r'<g class="mark">') >= 1


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.stem for p in SAMPLES])
def test_sample_page_in_chromium(sample: Path, tmp_path: Path) -> None:
    report = audit(str(sample))
    loaded = _open(render_html(report), tmp_path)
    assert _count(loaded.dom, r'<section class="model') == 1
    _assert_model(loaded.dom, report)


def test_several_models_in_chromium(tmp_path: Path) -> None:
    reports = [audit(str(p)) for p in SAMPLES]
    loaded = _open(render_html(reports), tmp_path)
    sections = loaded.dom.split('<section class="model')[1:]
    assert len(sections) == len(reports)
    assert "<h2>Comparison</h2>" in loaded.dom
    for section, r in zip(sections, reports):
        _assert_model(section, r)


def test_big_model_page_in_chromium(tmp_path: Path) -> None:
    """32 identical layers: one flag line, one bar, one table row, one evidence section; the
    per-layer rows and evidence load too, behind their toggles."""
    report = audit(write_llama_folder(tmp_path / "llama"))
    loaded = _open(render_html(report), tmp_path)
    dom = loaded.dom
    assert _count(dom, r"<li>.{0,200}MHA005") == 1
    assert _count(dom, r'<g class="row">') == 2  # the whole model, then one bar for the 32 layers
    assert _count(dom, r'<rect class="col') == 0  # one layout: a sentence, not 32 columns
    assert "All 32 blocks share one layout: 32 heads, 8 KV heads, d_k 128, d_v 128." in dom
    tables = dom.split('<table class="blocks">')[1:]
    assert len(tables) == 2 and _count(tables[0].split("</table>")[0], r"<tr>") == 2  # header, one row
    assert _count(tables[1].split("</table>")[0], r"<tr>") == 1 + LAYERS  # every layer, behind a toggle
    assert _count(dom, r"<summary>Evidence for") == LAYERS


def test_kv_cache_chart_in_chromium(tmp_path: Path) -> None:
    r = audit(str(next(p for p in SAMPLES if p.stem == "gqa_llama")))
    kv = KVCache(bytes_per_token=128, dtype="float16", context=8192, total_bytes=128 * 8192)
    # the chart's points are the analysis' (analysis.charts), as a Report carries them
    sized = with_charts(dataclasses.replace(r, model=dataclasses.replace(r.model, weight_bytes=20_608, kv_cache=kv)))
    loaded = _open(render_html(sized), tmp_path)
    assert "KV cache against context length" in loaded.dom
    assert _count(loaded.dom, r'<path class="line kv"') == 1
    assert "line state" not in loaded.dom
    # A hybrid's other mixers: their fixed state is a second, flat series with its legend.
    hybrid = with_charts(dataclasses.replace(sized, model=dataclasses.replace(
        sized.model, kv_cache=dataclasses.replace(kv, state_bytes_per_sequence=600_000))))
    drawn = _open(render_html(hybrid), tmp_path, "hybrid.html")
    assert _count(drawn.dom, r'<path class="line kv"') == 1 and _count(drawn.dom, r'<path class="line state"') == 1
    assert _count(drawn.dom, r'<i class="sw state">') == 1


def test_hostile_names_run_nothing_and_request_nothing(tmp_path: Path) -> None:
    report = audit(str(write_hostile_model(tmp_path)))
    loaded = _open(render_html(report), tmp_path)  # the page's checks: no console, no request, no <script>
    assert "&lt;script&gt;console.error('pwned')" in loaded.dom  # the name is shown as text
    assert "onerror" not in re.sub(r"&lt;img src=x onerror=[^&]*&gt;", "", loaded.dom)  # only as text


def test_calc_pages_in_chromium(tmp_path: Path) -> None:
    c = conventions.calculate("matlab", {"NumHeads": "4", "NumKeyChannels": "784", "InputSize": "3136"})
    single = _open(render_calc_html(c), tmp_path, "calc.html")
    assert "9,839,984" in single.dom and _count(single.dom, r'<path class="line') == 1
    both = _open(render_compare_html(conventions.compare({"embed_dim": "512", "num_heads": "8"})), tmp_path,
                 "compare.html")
    assert _count(both.dom, r'<path class="line') == 5  # one line per convention
