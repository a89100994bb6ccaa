"""Command line: exit codes, one-line errors, -o atomicity, output formats, calc.

End-to-end cases run ``python -m mhainspect`` in a subprocess (the real entry point, including the
implicit ``inspect`` subcommand); the rest use typer's CliRunner on the app for speed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from jsonschema import Draft202012Validator
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from mhainspect import __version__
from mhainspect.cli.app import app

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_models"
STANDARD = SAMPLES / "standard_mha.onnx"
ANSI = re.compile(r"\x1b\[")
ERROR_PREFIX = "mhainspect: error:"


# ----------------------------------------------------------------------------- helpers


def run(*args: str | os.PathLike[str], env: dict[str, str | None] | None = None) -> Any:
    """Invoke the CLI in-process; `inspect` is implied unless the first argument is `calc`."""
    argv = [str(a) for a in args]
    if not argv or argv[0] != "calc":
        argv.insert(0, "inspect")
    result = CliRunner().invoke(app, argv, env=env)
    # An uncaught exception inside the app would be a traceback in real use.
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def run_subprocess(*args: str | os.PathLike[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # PYTHONUNBUFFERED (set on some CI machines) would hide a missing final flush of stdout.
    env = {k: v for k, v in os.environ.items()
           if k not in ("FORCE_COLOR", "MHAINSPECT_DEBUG", "COLUMNS", "PYTHONUNBUFFERED")}
    return subprocess.run([sys.executable, "-m", "mhainspect", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=60)


def assert_one_line_error(stderr: str) -> None:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{stderr}"
    assert lines[0].startswith(ERROR_PREFIX), lines[0]
    assert "Traceback" not in stderr


def schema_errors(validator: Draft202012Validator, doc: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


def _io(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 4])


def _save(model_graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(model_graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


# ----------------------------------------------------------------------------- bad inputs


def _missing(tmp: Path) -> Path:
    return tmp / "missing.onnx"


def _directory(tmp: Path) -> Path:
    d = tmp / "a_dir.onnx"
    d.mkdir()
    return d


def _empty(tmp: Path) -> Path:
    p = tmp / "empty.onnx"
    p.write_bytes(b"")
    return p


def _truncated(tmp: Path) -> Path:
    data = STANDARD.read_bytes()
    p = tmp / "truncated.onnx"
    p.write_bytes(data[: len(data) // 2])
    return p


def _random_bytes(tmp: Path) -> Path:
    p = tmp / "random.onnx"
    p.write_bytes(np.random.default_rng(1234).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    return p


def _text(tmp: Path) -> Path:
    p = tmp / "notes.onnx"
    p.write_text("this is a plain text file, not an ONNX model\n" * 20, encoding="utf-8")
    return p


def _tensor_proto(tmp: Path) -> Path:
    p = tmp / "tensor.onnx"
    p.write_bytes(numpy_helper.from_array(np.ones((3, 4), np.float32), name="w").SerializeToString())
    return p


def _dangling(tmp: Path) -> Path:
    node = helper.make_node("Add", ["x", "ghost"], ["y"], name="add_ghost")
    return _save(helper.make_graph([node], "dangling", [_io("x")], [_io("y")]), tmp / "dangling.onnx")


def _cycle(tmp: Path) -> Path:
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
        helper.make_node("Relu", ["a"], ["b"], name="n2"),
        helper.make_node("Identity", ["a"], ["y"], name="n3"),
    ]
    return _save(helper.make_graph(nodes, "cycle", [_io("x")], [_io("y")]), tmp / "cycle.onnx")


BAD_INPUTS = {
    "missing": _missing,
    "directory": _directory,
    "empty": _empty,
    "truncated": _truncated,
    "random_bytes": _random_bytes,
    "text_file": _text,
    "tensor_proto": _tensor_proto,
    "dangling_input": _dangling,
    "cycle": _cycle,
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_exit_2_one_line(case: str, tmp_path: Path) -> None:
    path = BAD_INPUTS[case](tmp_path)
    result = run(path)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert_one_line_error(result.stderr)


@pytest.mark.parametrize("case", ["truncated", "cycle"])
def test_bad_input_end_to_end(case: str, tmp_path: Path) -> None:
    path = BAD_INPUTS[case](tmp_path)
    proc = run_subprocess(path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert_one_line_error(proc.stderr)


def test_unreadable_file(tmp_path: Path) -> None:
    p = tmp_path / "locked.onnx"
    p.write_bytes(STANDARD.read_bytes())
    p.chmod(0)
    try:
        if os.access(p, os.R_OK):
            pytest.skip("running with privileges that can read a mode-000 file (root)")
        result = run(p)
        assert result.exit_code == 2
        assert_one_line_error(result.stderr)
    finally:
        p.chmod(0o644)


def test_unknown_format_exit_2() -> None:
    result = run(STANDARD, "--format", "xml")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


def test_unknown_format_one_line() -> None:
    proc = run_subprocess(STANDARD, "--format", "xml")
    assert proc.returncode == 2
    assert_one_line_error(proc.stderr)


def test_non_positive_heads_exit_2() -> None:
    result = run(STANDARD, "--heads", "0")
    assert result.exit_code == 2
    assert_one_line_error(result.stderr)


# ----------------------------------------------------------------------------- end to end


def test_version_end_to_end() -> None:
    proc = run_subprocess("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"mhainspect {__version__}"
    assert proc.stderr == ""


def test_json_end_to_end_implicit_inspect(schema_validator: Draft202012Validator) -> None:
    proc = run_subprocess("sample_models/standard_mha.onnx", "--format", "json", cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    doc = json.loads(proc.stdout)
    assert not schema_errors(schema_validator, doc)
    assert doc["model"]["path"] == "sample_models/standard_mha.onnx"
    assert [b["num_heads"] for b in doc["blocks"]] == [8]


# ----------------------------------------------------------------------------- -o FILE


def test_output_file_written_nothing_on_stdout(tmp_path: Path, schema_validator: Draft202012Validator) -> None:
    out = tmp_path / "report.json"
    result = run(STANDARD, "--format", "json", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert not schema_errors(schema_validator, doc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"], "temp file left behind"


def test_output_file_permissions_like_any_new_file_and_kept_on_replace(tmp_path: Path) -> None:
    # A report for a dashboard must be readable like any file the user creates (umask), not 0600
    # like a temp file; rewriting an existing report keeps the mode the user gave it.
    out = tmp_path / "report.json"
    old_umask = os.umask(0o022)
    try:
        assert run(STANDARD, "--format", "json", "-o", out).exit_code == 0
        assert out.stat().st_mode & 0o777 == 0o644
        out.chmod(0o640)
        assert run(STANDARD, "--format", "json", "-o", out).exit_code == 0
        assert out.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old_umask)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_output_table_file_has_no_ansi(tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    result = run(STANDARD, "-o", out, env={"FORCE_COLOR": "1"})
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    text = out.read_text(encoding="utf-8")
    assert "encoder.layer.0.attention" in text
    assert not ANSI.search(text)


def test_output_into_missing_directory(tmp_path: Path) -> None:
    out = tmp_path / "no_such_dir" / "report.json"
    result = run(STANDARD, "--format", "json", "-o", out)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert_one_line_error(result.stderr)
    assert not out.exists()
    assert not out.parent.exists()


def test_output_is_a_directory(tmp_path: Path) -> None:
    result = run(STANDARD, "-o", tmp_path)
    assert result.exit_code == 2
    assert_one_line_error(result.stderr)
    assert tmp_path.is_dir() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("case", ["truncated", "dangling_input", "missing"])
def test_failed_analysis_creates_no_output(case: str, tmp_path: Path) -> None:
    bad = BAD_INPUTS[case](tmp_path)
    out = tmp_path / "out" / "report.json"
    out.parent.mkdir()
    result = run(bad, "--format", "json", "-o", out)
    assert result.exit_code == 2
    assert_one_line_error(result.stderr)
    assert list(out.parent.iterdir()) == []


def test_failed_input_among_several_is_an_entry_of_the_output(tmp_path: Path) -> None:
    """Nothing lost (issue 38): a good model and a bad one write the good report and an error entry
    for the bad one; the run still exits 2 and stderr says what was written and what failed."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "report.json"
    out.write_text("previous report\n", encoding="utf-8")
    bad = _truncated(tmp_path)
    result = run(STANDARD, bad, "--format", "json", "-o", out)
    assert result.exit_code == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert lines[0].startswith(f"mhainspect: error: {bad}: ") and len(lines) == 2
    assert lines[1].startswith(f"mhainspect: wrote {out} (json, ") and "1 report and 1 error entry" in lines[1]
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert [m["model"]["path"] for m in doc["models"]] == [str(STANDARD)]
    assert [e["input"] for e in doc["errors"]] == [str(bad)]
    assert [p.name for p in out_dir.iterdir()] == ["report.json"], "temp file left behind"


# ----------------------------------------------------------------------------- formats


MULTI = [SAMPLES / "standard_mha.onnx", SAMPLES / "gqa_llama.onnx", SAMPLES / "no_attention.onnx"]


def test_json_multi_file(multi_schema_validator: Draft202012Validator) -> None:
    result = run(*MULTI, "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    errors = schema_errors(multi_schema_validator, doc)
    assert not errors, "\n".join(errors)
    assert [m["model"]["path"] for m in doc["models"]] == [str(p) for p in MULTI]


def test_jsonl_one_line_per_model(schema_validator: Draft202012Validator) -> None:
    result = run(*MULTI, "--format", "jsonl")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(MULTI)
    for path, line in zip(MULTI, lines):
        doc = json.loads(line)
        assert not schema_errors(schema_validator, doc)
        assert doc["model"]["path"] == str(path)


def test_heads_what_if(schema_validator: Draft202012Validator) -> None:
    models = [SAMPLES / "standard_mha.onnx", SAMPLES / "t5_unscaled.onnx", SAMPLES / "bert_two_layers.onnx"]
    result = run(*models, "--format", "json", "--heads", "16")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    blocks = [b for m in doc["models"] for b in m["blocks"]]
    assert len(blocks) == 5
    for block in blocks:
        entries = [w for w in block["what_if"] if w["num_heads"] == 16]
        assert len(entries) == 1, (block["name"], block["what_if"])
    for m in doc["models"]:
        assert not schema_errors(schema_validator, m)
    # the standard layout keeps its count at any head count that divides d_model
    std = doc["models"][0]["blocks"][0]
    assert [w["total_width_fixed"] for w in std["what_if"] if w["num_heads"] == 16] == [std["params"]["total"]]
    # without --heads a 4-head block has no 16-head row (the defaults are h/2 and 2h)
    plain = json.loads(run(SAMPLES / "t5_unscaled.onnx", "--format", "json").stdout)
    assert plain["blocks"]
    assert all(w["num_heads"] != 16 for b in plain["blocks"] for w in b["what_if"])


def test_markdown_runs() -> None:
    result = run(SAMPLES / "bert_two_layers.onnx", "--format", "markdown")
    assert result.exit_code == 0, result.stderr
    assert "encoder.layer.1.attention" in result.stdout


def _all_samples_with_blocks() -> list[tuple[Path, list[str]]]:
    expected = json.loads((SAMPLES / "expected.json").read_text(encoding="utf-8"))
    return [(SAMPLES / e["file"], [b["name_hint"] for b in e["blocks"]]) for e in expected.values()]


def test_table_no_color_has_names_and_no_ansi() -> None:
    from mhainspect.pipeline import audit

    for path, _ in _all_samples_with_blocks():
        result = run(path, "--no-color", env={"FORCE_COLOR": "1", "COLUMNS": "100"})
        assert result.exit_code == 0, result.stderr
        assert not ANSI.search(result.stdout), path.name
        # every name whole, or without the common prefix the table names (to fit 100 columns)
        dropped = re.search(r'without their common prefix "([^"]*)"', result.stdout)
        for block in audit(path).blocks:
            name = block.name.removeprefix(dropped[1]) if dropped else block.name
            assert name in result.stdout, (path.name, block.name)


# ----------------------------------------------------------------------------- calc


def test_calc_pytorch_json() -> None:
    result = run("calc", "pytorch", "embed_dim=512", "num_heads=8", "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["params"]["total"] == 1050624
    assert doc["scales_with_heads"] is False


def test_calc_matlab_json() -> None:
    result = run("calc", "matlab", "NumHeads=4", "NumKeyChannels=784", "InputSize=3136", "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["params"]["total"] == 9839984
    assert doc["params"]["weights"] == 9834496


def test_calc_end_to_end() -> None:
    proc = run_subprocess("calc", "pytorch", "embed_dim=512", "num_heads=8", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["params"]["total"] == 1050624


@pytest.mark.parametrize("args", [
    ["calc", "bogus_convention", "embed_dim=512", "num_heads=8"],
    ["calc", "pytorch", "embed_dim", "num_heads=8"],
    ["calc", "pytorch", "embed_dim=abc", "num_heads=8"],
    ["calc", "pytorch", "embed_dim=512", "num_heads=0"],
], ids=["unknown_convention", "not_name_value", "not_a_number", "zero_heads"])
def test_calc_errors(args: list[str]) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert_one_line_error(result.stderr)


def test_output_file_named_like_a_subcommand(tmp_path: Path) -> None:
    proc = run_subprocess("-o", "calc", STANDARD, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "calc").is_file()


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGPIPE"), reason="no SIGPIPE on this platform")
def test_a_reader_that_goes_away_ends_the_run_by_sigpipe_not_a_gate_exit() -> None:
    """``mhainspect m -f json | head``: killed by SIGPIPE like cat (shell 141), silently; exit 1 would
    read as a failed gate."""
    import signal

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the report is written
    try:
        proc = subprocess.run([sys.executable, "-m", "mhainspect", str(STANDARD), "-f", "json", "-v"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == -signal.SIGPIPE
    assert proc.stderr == ""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("command", [[str(STANDARD), "-f", "json"], ["calc", "pytorch", "embed_dim=8", "num_heads=2"]],
                         ids=["report", "calc"])
def test_stdout_that_cannot_be_written_is_one_error_line_and_exit_2(command: list[str], unbuffered: bool) -> None:
    """A full disk behind stdout: the write fails at once (unbuffered) or at the flush (buffered);
    either way one line and exit 2, never a traceback and never exit 0 with the report lost."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "mhainspect", *command], stdout=full, stderr=subprocess.PIPE,
                              text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert_one_line_error(proc.stderr)
    assert proc.stderr.startswith(f"{ERROR_PREFIX} stdout: cannot write:")


def test_whole_process_output_is_complete_when_piped() -> None:
    """What a report leaves in stdout's buffer reaches the pipe. Both outputs are smaller than the
    8 KiB buffer, so nothing reaches the pipe before the end of the process."""
    report = run_subprocess(STANDARD, "-f", "json")
    assert report.returncode == 0, report.stderr
    assert len(report.stdout) < 8192 and json.loads(report.stdout)["blocks"]
    calc = run_subprocess("calc", "pytorch", "embed_dim=512", "num_heads=8", "--format", "json")
    assert calc.returncode == 0, calc.stderr
    assert json.loads(calc.stdout)


def test_output_to_a_device_writes_in_place_and_keeps_the_device(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    import threading

    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    result = subprocess.run([sys.executable, "-m", "mhainspect", str(SAMPLES / "standard_mha.onnx"), "-f", "json",
                             "-o", str(fifo)], capture_output=True, text=True, timeout=120)
    reader.join(timeout=60)
    assert result.returncode == 0, result.stderr
    assert fifo.is_fifo()  # not replaced by a regular file
    assert b'"schema_version"' in received[0]
