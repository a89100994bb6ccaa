"""Issue 29, item 12: heads of a bare state dict.

A checkpoint without config.json has only weight shapes: the run hints at what would give the heads
(a config.json beside it, or --num-heads / --num-kv-heads), and those options give them with
evidence source "option". Shapes outrank them, and a disagreement is a conflict (MHA007).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_run import in_process
from test_cli_options import llama_folder

import mhainspect

REPO_ROOT = Path(__file__).resolve().parents[1]
GQA = REPO_ROOT / "sample_models" / "gqa_llama.onnx"
HINT = "hint: "



@pytest.fixture()
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    return in_process(capsys, monkeypatch)

@pytest.fixture()
def bare(tmp_path: Path) -> Path:
    """Two Llama attention layers (8 query heads, 2 K/V heads, head_dim 8) without a config."""
    return llama_folder(tmp_path / "llama", config=False) / "model.safetensors"


def test_a_bare_state_dict_gets_a_hint(cli: Any, bare: Path) -> None:
    result = cli(bare)
    assert result.code == 0 and "?" in result.out
    (line,) = result.err.splitlines()
    assert line.startswith(f"mhainspect: hint: {bare}: heads unknown for 2 blocks: ")
    assert "config.json beside the checkpoint" in line and "--num-heads N" in line
    assert cli(bare, "-q").err == ""  # -q: failures only
    # JSON is the report as before: the hint is on stderr only.
    doc = json.loads(cli(bare, "-f", "json").out)
    assert all(b["num_heads"] is None for b in doc["blocks"])


def test_no_hint_where_a_config_names_the_heads(cli: Any, tmp_path: Path) -> None:
    folder = llama_folder(tmp_path / "llama")
    assert HINT not in cli(folder).err
    assert HINT not in cli(GQA).err


def test_num_heads_gives_the_heads_with_option_evidence(cli: Any, bare: Path) -> None:
    result = cli(bare, "--num-heads", "8", "--num-kv-heads", "2", "-f", "json")
    assert result.code == 0 and HINT not in result.err
    doc = json.loads(result.out)
    for block in doc["blocks"]:
        assert (block["num_heads"], block["num_kv_heads"], block["d_k"], block["d_v"]) == (8, 2, 8, 8)
        said = {e["field"]: e for e in block["evidence"] if e["source"] == "option"}
        assert said["num_heads"]["detail"] == "the caller: --num-heads 8, --num-kv-heads 2"
        assert said["num_heads"]["value"] == 8 and said["num_kv_heads"]["value"] == 2
        assert block["conflicts"] == []
    assert not [f for f in doc["flags"] if f["code"] == "MHA004"]


def test_num_heads_alone_reads_the_kv_heads_from_the_shapes(cli: Any, bare: Path) -> None:
    doc = json.loads(cli(bare, "--num-heads", "8", "-f", "json").out)
    block = doc["blocks"][0]
    assert (block["num_heads"], block["num_kv_heads"]) == (8, 2)  # K width 16 / d_k 8
    (kv,) = [e for e in block["evidence"] if e["field"] == "num_kv_heads"]
    assert kv["source"] == "weight_shape"


def test_shapes_win_over_stated_heads_and_the_conflict_is_flagged(cli: Any, bare: Path) -> None:
    doc = json.loads(cli(bare, "--num-heads", "8", "--num-kv-heads", "8", "-f", "json").out)
    block = doc["blocks"][0]
    assert block["num_kv_heads"] == 2  # K width 16 / d_k 8, not the caller's 8
    (conflict,) = block["conflicts"]
    assert conflict.startswith("num_kv_heads: option says 8 (the caller: --num-heads 8, --num-kv-heads 8)")
    assert any(f["code"] == "MHA007" for f in doc["flags"])


def test_stated_heads_outrank_a_config_and_the_disagreement_is_a_conflict(cli: Any, tmp_path: Path) -> None:
    # A config naming 8 heads and an option naming 4: the option is offered first (the caller's
    # word for this run), and the disagreement is a conflict.
    folder = llama_folder(tmp_path / "llama")
    doc = json.loads(cli(folder, "--num-heads", "4", "-f", "json").out)
    block = doc["blocks"][0]
    assert block["num_heads"] == 4
    assert any(c.startswith("num_heads: option says 4") and "config says 8" in c for c in block["conflicts"])


@pytest.mark.parametrize(("args", "message"), [
    (("--num-heads", "8", "--num-kv-heads", "3"), "--num-kv-heads 3 does not divide --num-heads 8"),
    (("--num-heads", "0"), "--num-heads 0: a layer has at least 1 head"),
    (("--num-kv-heads", "100000"), "--num-kv-heads 100000: not a head count"),
])
def test_bad_stated_heads_are_usage_errors(cli: Any, bare: Path, args: tuple[str, ...], message: str) -> None:
    result = cli(bare, *args)
    assert result.code == 2 and result.err.count("\n") == 1 and message in result.err


def test_stated_heads_on_a_graph_say_they_had_no_effect(cli: Any) -> None:
    result = cli(GQA, "--num-heads", "4", "-f", "json")
    (warning,) = [w for w in json.loads(result.out)["warnings"] if "no effect" in w]
    assert warning.startswith("--num-heads has no effect: head counts from the command line apply to checkpoints")
    assert json.loads(result.out)["blocks"][0]["num_heads"] == 8
    assert f"mhainspect: warning: {GQA}: --num-heads has no effect" in result.err


def test_stated_heads_in_the_python_api(bare: Path) -> None:
    report = mhainspect.inspect(bare, num_heads=8, num_kv_heads=2, decoder=True, context=1024)
    assert [b.num_heads for b in report.blocks] == [8, 8]
    # 2 layers × 2 kv heads × (8 + 8) × 2 bytes (float16) = 128 bytes per token
    assert report.model.kv_cache is not None and report.model.kv_cache.total_bytes == 128 * 1024
    with pytest.raises(ValueError, match="does not divide"):
        mhainspect.inspect(bare, num_heads=8, num_kv_heads=3)
