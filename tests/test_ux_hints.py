"""Head counts from the command line are checked against the weight shapes: --num-kv-heads alone is
a usage error, a --num-heads that does not divide the query width is a conflict (MHA007)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from big_models import write_llama_folder
from cli_run import Run, in_process

from mhainspect import inspect


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    return in_process(capsys, monkeypatch)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A safetensors file without config: width 256, 8 query heads and 2 K/V heads of 32."""
    folder = write_llama_folder(tmp_path / "m", 2, heads=8, kv_heads=2, hidden=256, ffn=64, vocab=100)
    (folder / "config.json").unlink()
    return folder / "model.safetensors"


def test_kv_heads_alone_is_a_usage_error(run: Callable[..., Run], checkpoint: Path) -> None:
    r = run(checkpoint, "--num-kv-heads", "2")
    assert r.code == 2 and r.err.strip() == \
        "mhainspect: error: --num-kv-heads 2 needs --num-heads N (the query heads it groups)"
    with pytest.raises(ValueError, match="needs --num-heads"):
        inspect(str(checkpoint), num_kv_heads=2)


def test_heads_that_do_not_divide_the_width_are_a_conflict(run: Callable[..., Run], checkpoint: Path) -> None:
    doc = run(checkpoint, "--num-heads", "7", "-f", "json").json()
    assert any(f["code"] == "MHA007" and "num_heads 7 does not divide the Q projection's width 256" in f["message"]
               for f in doc["flags"])
    assert all(b["d_k"] is None for b in doc["blocks"])  # no head size is made up


def test_stated_heads_that_fit_give_the_layout(run: Callable[..., Run], checkpoint: Path) -> None:
    doc = run(checkpoint, "--num-heads", "8", "--num-kv-heads", "2", "-f", "json").json()
    assert {(b["num_heads"], b["num_kv_heads"], b["d_k"], b["d_v"]) for b in doc["blocks"]} == {(8, 2, 32, 32)}
    assert not [f for f in doc["flags"] if f["code"] == "MHA007"]
