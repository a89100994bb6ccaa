"""calc: the HTML chart draws the numbers the text prints (one computation: the layer at another
head count keeps the arguments as given, a derived head_dim derived again), and the text fits 100
columns."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_run import Run, in_process

from mhainspect import conventions
from mhainspect.render.calc_html import render_calc_html

GQA = ("hf", "hidden_size=4096", "num_attention_heads=32", "num_key_value_heads=8")


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    return in_process(capsys, monkeypatch)


def test_chart_draws_the_text_numbers(run: Callable[..., Run], tmp_path: Path) -> None:
    text = run("calc", *GQA, "--heads", "16", "--heads", "64").out
    rows = dict(re.findall(r"^\s+(\d+)\s+\d+\s+\d+\s+\d+\s+([\d,]+)", text, re.M))
    # head_dim derived from hidden_size: 16 heads of 256, 64 of 64 (K/V width 8 × head_dim)
    assert rows["16"] == "50,331,648" and rows["64"] == "37,748,736"
    out = tmp_path / "calc.html"
    assert run("calc", *GQA, "--heads", "16", "--heads", "64", "-o", out).code == 0
    page = out.read_text(encoding="utf-8")
    drawn = dict(re.findall(r"(\d+) heads ([\d,]+\d)", page))
    assert drawn["16"] == rows["16"] and drawn["64"] == rows["64"]
    assert "25,165,824" not in page and "75,497,472" not in page  # head_dim held at 128: not what the text says


def test_given_arguments_are_what_the_what_if_keeps() -> None:
    c = conventions.calculate("hf", dict(a.split("=") for a in GQA[1:]))
    assert "head_dim" in dict(c.arguments) and "head_dim" not in c.what_if_arguments
    page = render_calc_html(c, (16,))
    assert "16 heads 50,331,648" in page


@pytest.mark.parametrize("args", [
    ("pytorch", "embed_dim=512", "num_heads=8", "--vs", "num_heads=16", "kdim=256"),
    ("keras", "num_heads=8", "key_dim=64", "query_dim=512", "--heads", "4", "--dtype", "fp16", "--context", "1M",
     "--kv-heads", "2"),
    ("--compare", "embed_dim=512", "num_heads=8"),
    (*GQA, "--heads", "16", "--dtype", "bf16", "--context", "8k", "--kv-heads", "1", "--kv-heads", "4"),
])
def test_calc_fits_100_columns(run: Callable[..., Run], args: tuple[str, ...]) -> None:
    out = run("calc", *args, columns=100).out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert all(line == line.rstrip() for line in out.splitlines())
