"""calc: the HTML chart draws the numbers the text prints (one computation: the layer at another
head count keeps the arguments as given, a derived head_dim derived again), and the text fits 100
columns, and 80 for every convention (columns give way, numbers whole)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_run import Run, in_process

from mhainspect import conventions
from mhainspect.render.calc_html import render_calc_html
from mhainspect.render.calc_render import calc_text

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


# Every convention at a large, realistic size, with every table calc can print: the terms, the
# head-count what-if, the K/V-head what-if with bytes at a long context, and --vs.
WIDE = {
    "pytorch": ("embed_dim=16384", "num_heads=128", "kdim=4096", "vdim=4096", "add_bias_kv=true",
                "--vs", "num_heads=256"),
    "keras": ("num_heads=64", "key_dim=128", "query_dim=8192", "value_dim=256", "--vs", "key_dim=64"),
    "matlab": ("NumHeads=4", "NumKeyChannels=784", "InputSize=3136", "--vs", "NumHeads=8", "NumKeyChannels=392"),
    "hf": ("hidden_size=16384", "num_attention_heads=128", "num_key_value_heads=8", "attention_bias=true",
           "--vs", "num_key_value_heads=16"),
    "t5": ("d_model=4096", "num_heads=128", "d_kv=128", "has_relative_attention_bias=true", "--vs", "d_kv=64"),
}
WHAT_IFS = ("--heads", "16", "--heads", "256", "--kv-heads", "1", "--kv-heads", "64", "--dtype", "bfloat16",
            "--context", "1Mi")


def _printed_counts(doc: dict[str, Any]) -> set[int]:
    """The counts of a calc JSON document that its text prints: each term and total, the total at
    each head count, each K/V-head row's parameters and bytes, the bytes at --dtype and --context,
    the other argument set's totals."""
    counts = {t["value"] for t in doc["terms"]} | set(doc["params"].values())
    counts |= {w["params"]["total"] for w in doc["what_if"] if "params" in w}
    for row in [doc.get("size") or {}, *(doc.get("kv_heads_what_if") or [])]:
        counts |= {row[k] for k in ("params", "weight_bytes", "kv_bytes_per_token", "kv_bytes") if row.get(k)}
    if doc["vs"]:
        counts |= {doc["vs"]["calculation"]["params"][k] for k in ("weights", "biases", "total")}
    return {n for n in counts if n >= 1000}  # big enough to be cut


@pytest.mark.parametrize("convention", sorted(WIDE))
def test_every_convention_fits_80_columns(run: Callable[..., Run], convention: str) -> None:
    """At 80 columns every calc table fits: columns give way by priority, and every count the JSON
    holds is printed whole (none cut, none wrapped apart)."""
    assert set(WIDE) == set(conventions.LAYER_NAMES), "a convention without a width check"
    args = ("calc", convention, *WIDE[convention][:WIDE[convention].index("--vs")], *WHAT_IFS)
    for cmd in (args, ("calc", convention, *WIDE[convention])):
        out = run(*cmd, columns=80).out
        assert max(len(line) for line in out.splitlines()) <= 80, out
        doc = json.loads(run(*cmd, "-f", "json").out)
        whole = {n for n in _printed_counts(doc) if f"{n:,}" not in out}
        assert not whole, (whole, out)
    wide = run(*args, columns=200).out
    assert "left out to fit" not in wide and "tensor" in wide  # a terminal that has room shows every column


def test_compare_fits_80_columns(run: Callable[..., Run]) -> None:
    out = run("calc", "--compare", "embed_dim=16384", "num_heads=128", "kdim=4096", columns=80).out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    totals = [r["params"]["total"] for r in json.loads(run("calc", "--compare", "embed_dim=16384", "num_heads=128",
                                                 "kdim=4096", "-f", "json").out) if "params" in r]
    assert totals and all(f"{t:,}" in out for t in totals)


def test_the_fewest_columns_give_way() -> None:
    """Dropping the expanded arithmetic alone fits the Llama term table at 80 columns: the tensor
    names, which go first when that is enough, stay."""
    c = conventions.calculate("hf", dict(a.split("=") for a in GQA[1:]))
    lines = calc_text(c, 80).splitlines()
    header = next(line for line in lines if line.lstrip().startswith("term"))
    assert header.split() == ["term", "tensor", "formula", "params"]
    assert "('=' left out to fit 80 columns; a wider terminal or -f json shows it)" in calc_text(c, 80)
    keras = conventions.calculate("keras", {"num_heads": "8", "key_dim": "64", "query_dim": "512"})
    header = next(line for line in calc_text(keras, 80).splitlines() if line.lstrip().startswith("term"))
    assert header.split() == ["term", "formula", "=", "params"]
    assert "left out" not in calc_text(c, None) and "left out" not in calc_text(c, 120)
