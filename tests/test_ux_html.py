"""HTML page fixes of issue 38: exact numbers beside the bars (10,240 as the tables say, not 10.24k),
a whole caption naming the shared folder, tick labels that do not overlap, a sliding-window caption
only where a layer has a window, and a glossary of the page's terms."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from big_models import LLAMA_70B, write_llama_folder

from mhainspect import inspect, inspect_all
from mhainspect.render.html import render_html
from mhainspect.render.svg import _spaced

SAMPLES = Path(__file__).resolve().parent.parent / "sample_models"


def test_bar_notes_are_exact_and_the_caption_whole() -> None:
    page = render_html(inspect_all(str(SAMPLES)))
    assert "10,304; 99.38% in attention" in page and "10.30k" not in page
    assert "Names are shown without the folder they share, " in page and "Models below" not in page
    single = render_html(inspect(str(SAMPLES / "gqa_llama.onnx")))
    assert ">10,240<" in single and "10.24k" not in single
    assert '<details class="glossary"><summary>Terms</summary>' in single
    for term in ("heads", "KV heads", "d_k", "d_v", "d_model", "KV cache"):
        assert f"<li><b>{term}</b>: " in single


def test_head_ticks_do_not_overlap(tmp_path: Path) -> None:
    page = render_html(inspect(str(write_llama_folder(tmp_path / "m", 2, **{k: v for k, v in LLAMA_70B.items() if k != "layers"}))))
    svg = page[page.index("What would more heads cost?"):]
    svg = svg[:svg.index("</svg>")]
    ticks = re.findall(r'<text class="tick" x="([\d.]+)" y="[\d.]+" text-anchor="middle">(\d+)</text>', svg)
    xs = [float(x) for x, _ in ticks]
    assert [t for _, t in ticks][-1] == "128" and "1" in [t for _, t in ticks]
    assert all(b - a >= 12 for a, b in zip(xs, xs[1:])), ticks  # at least two characters apart
    assert _spaced([1, 2, 4, 8, 128], lambda v: 4 * v, lambda v: f"{v:g}") == [1, 8, 128]


def test_sliding_window_caption_only_with_a_window() -> None:
    report = inspect(str(SAMPLES / "llama_kv_cache.onnx"), context=1024)
    assert "sliding-window" not in render_html(report)
    windowed = dataclasses.replace(report, blocks=tuple(dataclasses.replace(b, sliding_window=4096)
                                                        for b in report.blocks))
    assert "the sliding-window layers stop growing at their window (4,096 tokens)" in render_html(windowed)
