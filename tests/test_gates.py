"""Gates: --max-params, --max-attention-params, --fail-on, --ignore, --exit-zero, -q, exit codes.

Unit tests drive mhainspect.analysis.gates on the sample models' reports; CLI tests run the typer app
in-process (CliRunner) from an empty temporary directory, so no pyproject.toml applies.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mhainspect.analysis.flags import FLAG_CODES
from mhainspect.analysis.gates import (
    GateConfig,
    GateFailure,
    Limit,
    drop_ignored,
    evaluate_gates,
    parse_codes,
    parse_limit,
)
from mhainspect.cli.app import app
from mhainspect.pipeline import audit
from mhainspect.results import Report

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_models"
STANDARD = SAMPLES / "standard_mha.onnx"  # 16,768 params, 16,640 in attention, no flags
KERAS = SAMPLES / "keras_per_head.onnx"  # 8,416 params, all attention, MHA001
T5 = SAMPLES / "t5_unscaled.onnx"  # 2 x MHA001, 2 x MHA003
GATE_LINE = re.compile(r"^mhainspect: gate failed: .+$")


@pytest.fixture(autouse=True)
def _no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from an empty folder: a pyproject.toml above the checkout must not change the gates."""
    work = tmp_path / "cwd"
    work.mkdir()
    (work / "pyproject.toml").write_text("[tool.mhainspect]\n", encoding="utf-8")
    monkeypatch.chdir(work)


def run(*args: str | os.PathLike[str]) -> Any:
    result = CliRunner().invoke(app, ["inspect", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def gate_lines(stderr: str) -> list[str]:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert all(GATE_LINE.match(ln) for ln in lines), stderr
    return lines


@pytest.fixture(scope="module")
def standard() -> Report:
    return audit(STANDARD)


@pytest.fixture(scope="module")
def keras() -> Report:
    return audit(KERAS)


# ----------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(("text", "value"), [
    ("7B", 7_000_000_000), ("1.5M", 1_500_000), ("120k", 120_000), ("16768", 16_768),
    ("16_768", 16_768), ("16,768", 16_768), (" 2t ", 2 * 10**12), ("0", 0),
])
def test_parse_limit(text: str, value: int) -> None:
    assert parse_limit(text) == Limit(value, text.strip())


def test_parse_limit_int_spelled_grouped() -> None:
    assert parse_limit(16_000) == Limit(16_000, "16,000")


@pytest.mark.parametrize("bad", ["", "abc", "-5", "1.2345k", "7 B B", "1e"])
def test_parse_limit_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_limit(bad)


@pytest.mark.parametrize("bad", [True, -1])
def test_parse_limit_rejects_non_counts(bad: int) -> None:
    with pytest.raises(ValueError):
        parse_limit(bad)


def test_parse_codes() -> None:
    assert parse_codes(["MHA001,mha004", "MHA003", " MHA001 ", ""]) == {"MHA001", "MHA003", "MHA004"}
    assert parse_codes([]) == frozenset()
    with pytest.raises(ValueError, match="MHA999"):
        parse_codes(["MHA001,MHA999"])


# ----------------------------------------------------------------------------- gates (pure)


def test_no_gates_no_failures(standard: Report, keras: Report) -> None:
    assert evaluate_gates([standard, keras], GateConfig()) == ()


def test_max_params_equal_passes_one_less_fails(standard: Report) -> None:
    assert evaluate_gates([standard], GateConfig(max_params=parse_limit("16768"))) == ()
    (failure,) = evaluate_gates([standard], GateConfig(max_params=parse_limit("16767")))
    assert failure == GateFailure("max-params", str(STANDARD), 16_768, 16_767, None,
                                  f"{STANDARD} has 16,768 parameters > --max-params 16767", False, "--max-params")


def test_max_params_message_keeps_the_spelling(standard: Report) -> None:
    big = replace(standard, model=replace(standard.model, path="model.onnx", total_params=7_241_732_096))
    (failure,) = evaluate_gates([big], GateConfig(max_params=parse_limit("7B")))
    assert failure.message == "model.onnx has 7,241,732,096 parameters > --max-params 7B (7,000,000,000)"


def test_max_attention_params(standard: Report) -> None:
    assert evaluate_gates([standard], GateConfig(max_attention_params=parse_limit("16640"))) == ()
    (failure,) = evaluate_gates([standard], GateConfig(max_attention_params=parse_limit("16k")))
    assert (failure.gate, failure.actual, failure.limit) == ("max-attention-params", 16_640, 16_000)
    assert failure.message.endswith("has 16,640 attention parameters > --max-attention-params 16k (16,000)")


def test_fail_on(keras: Report, standard: Report) -> None:
    config = GateConfig(fail_on=frozenset({"MHA001"}))
    assert evaluate_gates([standard], config) == ()
    (failure,) = evaluate_gates([standard, keras], config)
    assert (failure.gate, failure.model, failure.code, failure.actual) == ("fail-on", str(KERAS), "MHA001", 1)
    assert evaluate_gates([keras], GateConfig(fail_on=frozenset({"MHA004"}))) == ()


def test_fail_on_counts_and_order() -> None:
    t5 = audit(T5)
    failures = evaluate_gates([t5], GateConfig(max_params=parse_limit("1k"), fail_on=frozenset({"MHA003", "MHA001"})))
    assert [(f.gate, f.code, f.actual) for f in failures] == [
        ("max-params", None, 16_576), ("fail-on", "MHA001", 2), ("fail-on", "MHA003", 2)]
    assert failures[1].message == f"{T5} has 2 MHA001 flags (--fail-on MHA001)"


def test_drop_ignored(keras: Report) -> None:
    assert [f.code for f in keras.flags] == ["MHA001"]
    kept = drop_ignored(keras, frozenset({"MHA001"}))
    assert kept.flags == () and kept.blocks == keras.blocks
    assert drop_ignored(keras, frozenset({"MHA004"})) is keras
    assert evaluate_gates([kept], GateConfig(fail_on=frozenset({"MHA001"}))) == ()


# ----------------------------------------------------------------------------- CLI exit codes


@pytest.mark.parametrize(("args", "code"), [
    (["--max-params", "16768"], 0),
    (["--max-params", "20k"], 0),
    (["--max-params", "16767"], 1),
    (["--max-params", "16k"], 1),
    (["--max-attention-params", "16640"], 0),
    (["--max-attention-params", "0.01M"], 1),
    (["--fail-on", "MHA001"], 0),
    (["--fail-on", "MHA001,MHA002,MHA003,MHA004,MHA005,MHA006"], 0),
])
def test_cli_gates_on_standard(args: list[str], code: int) -> None:
    result = run(STANDARD, *args)
    assert result.exit_code == code, result.stderr
    assert "encoder.layer.0.attention" in result.stdout  # the report is still printed
    assert len(gate_lines(result.stderr)) == code


def test_cli_max_params_failure_line() -> None:
    result = run(STANDARD, "--max-params", "16k")
    assert gate_lines(result.stderr) == [f"mhainspect: gate failed: {STANDARD} has 16,768 parameters > --max-params 16k (16,000)"]


def test_cli_fail_on_fails_on_flagged_model() -> None:
    result = run(KERAS, "--fail-on", "MHA001")
    assert result.exit_code == 1
    assert gate_lines(result.stderr) == [f"mhainspect: gate failed: {KERAS} has 1 MHA001 flag (--fail-on MHA001)"]


def test_cli_fail_on_repeatable_and_case_insensitive() -> None:
    result = run(T5, "--fail-on", "mha004", "--fail-on", "mha003")
    assert result.exit_code == 1
    assert gate_lines(result.stderr) == [f"mhainspect: gate failed: {T5} has 2 MHA003 flags (--fail-on MHA003)"]


def test_cli_one_line_per_failed_gate() -> None:
    result = run(STANDARD, KERAS, "--max-params", "10k", "--max-attention-params", "8k", "--fail-on", "MHA001")
    assert result.exit_code == 1
    lines = gate_lines(result.stderr)
    assert len(lines) == 4
    assert lines[0].endswith("--max-params 10k (10,000)") and lines[1].endswith("--max-attention-params 8k (8,000)")
    assert str(KERAS) in lines[2] and lines[3].endswith("(--fail-on MHA001)")


def test_cli_ignore_drops_flags_from_output_and_gates() -> None:
    result = run(KERAS, "--format", "json", "--ignore", "MHA001", "--fail-on", "MHA001")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["flags"] == []
    table = run(KERAS, "--ignore", "mha001")
    assert table.exit_code == 0 and "Flags: none" in table.stdout
    assert "1 flag hidden by --ignore: MHA001 ×1" in table.stdout  # said, not silently dropped
    assert json.loads(result.stdout)["ignored_flags"] == {"MHA001": 1}
    kept = run(T5, "--format", "json", "--ignore", "MHA003")
    assert [f["code"] for f in json.loads(kept.stdout)["flags"]] == ["MHA001", "MHA001"]


def test_cli_exit_zero() -> None:
    result = run(STANDARD, "--max-params", "1k", "--exit-zero")
    assert result.exit_code == 0
    assert len(gate_lines(result.stderr)) == 1  # still named
    assert run(STANDARD, "--max-params", "1k", "--no-exit-zero").exit_code == 1


def test_cli_exit_zero_does_not_hide_input_errors(tmp_path: Path) -> None:
    result = run(tmp_path / "missing.onnx", "--exit-zero")
    assert result.exit_code == 2


@pytest.mark.parametrize("args", [
    ["--fail-on", "MHA009"], ["--fail-on", "MHA001,bogus"], ["--ignore", "MHA000"],
    ["--max-params", "lots"], ["--max-params", "-3"], ["--max-attention-params", "1.5"],
])
def test_cli_bad_gate_values_exit_2_one_line(args: list[str]) -> None:
    result = run(STANDARD, *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mhainspect: error: {args[0]}: "), result.stderr


def test_cli_unknown_code_lists_the_known_ones() -> None:
    result = run(STANDARD, "--fail-on", "MHA009")
    assert all(code in result.stderr for code in FLAG_CODES)


# ----------------------------------------------------------------------------- -q


def test_quiet_prints_nothing_on_success() -> None:
    result = run(STANDARD, KERAS, "-q", "--max-params", "20k")
    assert result.exit_code == 0
    assert result.stdout == "" and result.stderr == ""


def test_quiet_prints_only_failures() -> None:
    result = run(STANDARD, KERAS, "--quiet", "--max-params", "10k", "--format", "json")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert gate_lines(result.stderr) == [f"mhainspect: gate failed: {STANDARD} has 16,768 parameters > --max-params 10k (10,000)"]


def test_quiet_still_writes_output_file(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = run(STANDARD, "-q", "--format", "json", "-o", out)
    assert result.exit_code == 0 and result.stdout == ""
    assert json.loads(out.read_text(encoding="utf-8"))["model"]["total_params"] == 16_768


# ----------------------------------------------------------------------------- unreadable models


def test_unreadable_among_several_reports_the_rest_then_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(STANDARD.read_bytes()[:500])
    result = run(STANDARD, bad, KERAS, "--format", "jsonl")
    assert result.exit_code == 2
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith(f"mhainspect: error: {bad}")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["model"]["path"] for line in lines if "model" in line] == [str(STANDARD), str(KERAS)]
    # and the failed input as an error record, as a --from-file run writes it (nothing lost)
    assert [(line["input"], line["error"]["kind"]) for line in lines if "error" in line] == [(str(bad), "invalid")]


def test_errors_outrank_gates(tmp_path: Path) -> None:
    result = run(STANDARD, tmp_path / "missing.onnx", "--max-params", "1k", "--exit-zero")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("mhainspect: error:") and GATE_LINE.match(lines[1])


def test_unreadable_among_several_writes_the_rest_and_the_error(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = run(STANDARD, tmp_path / "missing.onnx", "--format", "json", "-o", out)
    assert result.exit_code == 2 and result.stdout == ""
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert len(doc["models"]) == 1 and [e["kind"] for e in doc["errors"]] == ["not_found"]


# ----------------------------------------------------------------------------- pre-commit hook


def test_pre_commit_hook_manifest() -> None:
    yaml = pytest.importorskip("yaml")
    hooks = yaml.safe_load((REPO_ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    (hook,) = hooks
    assert (hook["id"], hook["entry"], hook["language"]) == ("mhainspect", "mhainspect", "python")
    files = re.compile(hook["files"])
    assert files.search("models/a b/encoder.onnx") and not files.search("model.onnx.txt")
    # Every suffix the tool reads, in any case, and only those (a .pt2/.jit archive is refused).
    from mhainspect.frontends.kinds import MODEL_FILE_KINDS

    read = {suffix for suffix, kind in MODEL_FILE_KINDS.items() if kind in ("onnx", "checkpoint", "gguf")}
    assert read >= {".onnx", ".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".gguf"}
    for suffix, kind in MODEL_FILE_KINDS.items():
        for name in (f"models/m{suffix}", f"models/M{suffix.upper()}"):
            assert bool(files.search(name)) == (suffix in read), (name, kind)


def test_pre_commit_style_invocation() -> None:
    """pre-commit runs `entry` followed by the changed files: the implicit inspect, several files."""
    proc = subprocess.run([sys.executable, "-m", "mhainspect", "--max-params", "10k", "-q", str(STANDARD), str(KERAS)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert gate_lines(proc.stderr) == [f"mhainspect: gate failed: {STANDARD} has 16,768 parameters > --max-params 10k (10,000)"]


def test_docs_list_every_gate_under_exit_code_1() -> None:
    """docs/cli.md's exit-code 1 line names every gate a run can fail (the SARIF gate rules)."""
    from mhainspect.render.sarif import GATE_RULES

    cli_md = (REPO_ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    cli_exit = next(line for line in cli_md[cli_md.index("## Exit codes"):].splitlines() if line.startswith("| 1 |"))
    for gate in GATE_RULES:
        assert f"`--{gate}`" in cli_exit, gate
