"""Hostile and broken inputs: never a traceback, a hang or unbounded memory; one line and exit 2, or
a report (with a warning where something was refused or is corrupt).

Every class of tests/hostile_cases.py runs through the CLI in this process, in a folder that must be
unchanged afterwards (nothing is written but what ``-o`` names); one smoke case (and the cases that
need a process without privileges) runs the real entry point (``python -m mhainspect``) with a
timeout and RLIMIT_AS = 4 GiB. In-process tests prove external-data locations are never opened
and pin defects of files this suite may not change (strict xfail, with the fix in the reason).
"""

from __future__ import annotations

import builtins
import io
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hostile_cases as hc
import onnx
import pytest
from cli_run import in_process

from mhainspect.errors import InputError
from mhainspect.frontends.onnx.locations import external_location_escapes
from mhainspect.ir.graph import ModelGraph, Node, Tensor
from mhainspect.pipeline import audit, audit_graph
from mhainspect.results import WarningCode, warning_code

ERROR_PREFIX = "mhainspect: error:"


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


HAS_TORCH = _has_torch()


def _case_param(case: hc.Case, *, gaps: bool = True) -> Any:
    marks: list[Any] = []
    if case.torch and not HAS_TORCH:
        marks.append(pytest.mark.skip(reason="needs torch"))
    if case.known_gap and gaps:
        marks.append(pytest.mark.xfail(strict=True, reason=case.known_gap))
    return pytest.param(case, id=case.id, marks=marks)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    d = tmp_path / "case"
    d.mkdir()
    return d


def _assert_one_line_error(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{stderr[-3000:]}"
    assert lines[0].startswith(ERROR_PREFIX), lines[0]
    return lines[0]


def _check_outcome(case: hc.Case, code: int | None, stdout: str, stderr: str, seconds: float, folder: Path,
                   before: dict[str, tuple[int, int]]) -> None:
    """What every hostile case must give: an answer, no traceback, nothing written, and either one
    error line with exit 2 or a report (with the expected warning)."""
    assert code is not None, f"no answer within {case.timeout} s (hang)"
    assert "Traceback" not in stdout + stderr, stderr[-3000:]
    assert "internal error" not in stderr, stderr
    assert "out of memory" not in stderr, stderr  # hit RLIMIT_AS: memory is not bounded
    if case.budget is not None:
        assert seconds <= case.budget, f"took {seconds:.1f} s (budget {case.budget} s)"
    assert hc.snapshot(folder) == before, "the audit wrote or changed files (only -o may write)"
    assert not (folder / hc.PAYLOAD_MARKER).exists(), "a pickle payload ran"

    if case.expect == "error":
        assert code == 2, f"exit {code}, stderr: {stderr[-2000:]}"
        line = _assert_one_line_error(stderr)
        assert case.match in line
        return
    assert code == 0, f"exit {code}, stderr: {stderr[-2000:]}"
    assert stderr.strip() == "", stderr
    report = json.loads(stdout)
    assert report["schema_version"]
    assert report["model"]["total_params"] >= 0
    warnings = report["warnings"]
    if case.expect == "warning":
        assert any(case.match in w for w in warnings), warnings
        assert all("\n" not in w for w in warnings)


@pytest.mark.parametrize("case", [_case_param(c) for c in hc.CASES if not c.unprivileged])
def test_cli_on_hostile_input(case: hc.Case, folder: Path, capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI in this process (tests/cli_run.py) on every hostile case, from the case's folder."""
    args = case.build(folder)
    before = hc.snapshot(folder)
    monkeypatch.delenv("MHAINSPECT_DEBUG", raising=False)
    monkeypatch.chdir(folder)
    cli = in_process(capsys, monkeypatch)
    start = time.perf_counter()
    run = cli(*args, "--format", "json")
    _check_outcome(case, run.code, run.out, run.err, time.perf_counter() - start, folder, before)


@pytest.mark.parametrize("case", [_case_param(c) for c in hc.CASES
                                  if c.unprivileged or c.id == "truncated"])
def test_cli_on_hostile_input_in_a_subprocess(case: hc.Case, folder: Path) -> None:
    """The real entry point (``python -m mhainspect``) under a wall-clock timeout and RLIMIT_AS: one
    smoke case, and the cases that need a process without the privilege to read a mode-000 file."""
    if case.unprivileged and not hc.can_run_unprivileged():
        pytest.skip("cannot run the CLI without the privilege to read a mode-000 file")
    args = case.build(folder)
    before = hc.snapshot(folder)
    run = hc.run_cli([*args, "--format", "json"], folder, timeout=case.timeout, unprivileged=case.unprivileged)
    _check_outcome(case, run.code, run.stdout, run.stderr, run.seconds, folder, before)


# ------------------------------------------------------------------------------ in process


_IN_PROCESS = [c for c in hc.CASES if not c.torch and not c.unprivileged and c.id not in ("nodes_100k", "softmax_100k")]


@pytest.mark.parametrize("case", [_case_param(c) for c in _IN_PROCESS])
def test_service_contract(case: hc.Case, folder: Path) -> None:
    """audit (and so the Python API) returns a Report or raises InputError, nothing else."""
    args = case.build(folder)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        audit(args[0])
    except InputError as exc:
        assert str(exc).strip()
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("cut", [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999])
def test_truncated_anywhere(cut: float, folder: Path) -> None:
    """A sample cut anywhere is an input error of one line that names the file (a protobuf cut short
    is never a whole model: every sample ends in fields the graph needs)."""
    for sample in sorted(hc.SAMPLES.glob("*.onnx")):
        data = sample.read_bytes()
        path = folder / sample.name
        path.write_bytes(data[: max(1, int(len(data) * cut))])
        with pytest.raises(InputError) as exc:
            audit(path)
        message = str(exc.value)
        assert str(path) in message and "\n" not in message, message


@pytest.fixture
def record_opens(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every path opened through builtins.open, io.open or os.open while the test runs."""
    opened: list[str] = []
    real_open, real_io_open, real_os_open = builtins.open, io.open, os.open

    def spy_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, bytes, os.PathLike)):
            opened.append(os.path.realpath(os.fsdecode(file)))
        return real_open(file, *args, **kwargs)

    def spy_io_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, bytes, os.PathLike)):
            opened.append(os.path.realpath(os.fsdecode(file)))
        return real_io_open(file, *args, **kwargs)

    def spy_os_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(os.path.realpath(os.fsdecode(path)))
        return real_os_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(io, "open", spy_io_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    yield opened


@pytest.mark.parametrize("case_id", ["external_dotdot", "external_absolute", "external_symlink_out",
                                     "external_fifo_inside"])
@pytest.mark.parametrize("fast_path", [True, False], ids=["fast", "onnx.load"])
def test_external_data_is_never_opened(case_id: str, fast_path: bool, folder: Path, record_opens: list[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    case = next(c for c in hc.CASES if c.id == case_id)
    (arg,) = case.build(folder)
    model = folder / arg
    m = onnx.load(str(model), load_external_data=False)
    locations = {e.value for t in m.graph.initializer for e in t.external_data if e.key == "location"}
    forbidden = {os.path.realpath(os.path.join(model.parent, loc)) for loc in locations}
    forbidden |= {os.path.join(model.parent, loc) for loc in locations}
    if not fast_path:  # the fallback that onnx.load takes on an unusual file
        from mhainspect.frontends.onnx import loader as onnx_loader

        monkeypatch.setattr(onnx_loader, "model_proto_class", lambda: (_ for _ in ()).throw(ImportError("off")))
    report = audit(model)
    assert not forbidden & set(record_opens), f"opened {sorted(forbidden & set(record_opens))}"
    assert os.path.realpath(model) in record_opens  # the spy works: the model itself was opened
    if case.expect == "warning":
        assert any(case.match in w and "never opened" in w for w in report.warnings), report.warnings
    else:
        # An external data file that is never read (a FIFO) leaves the total below the blocks' weights,
        # which the report says (accounting_gap); nothing else is to be said.
        assert not [w for w in report.warnings if warning_code(w) is not WarningCode.ACCOUNTING_GAP], report.warnings


@pytest.mark.parametrize("location, escapes", [
    ("weights.bin", False), ("sub/weights.bin", False), ("./w.bin", False), ("a/../w.bin", True),
    ("../w.bin", True), ("..\\w.bin", True), ("/etc/passwd", True), ("\\\\server\\share", True),
    ("C:\\w.bin", True), ("c:w.bin", True), ("w\x00.bin", True),
])
def test_external_location_classification(location: str, escapes: bool, tmp_path: Path) -> None:
    assert (external_location_escapes(str(tmp_path), location) is not None) is escapes


def test_verify_refuses_escaping_external_data(folder: Path) -> None:
    pytest.importorskip("onnxruntime")
    case = next(c for c in hc.CASES if c.id == "external_dotdot")  # a FIFO outside: opening it would block
    args = case.build(folder)
    run = hc.run_cli([*args, "--verify", "--format", "json"], folder, timeout=120)
    assert run.code == 0, run.stderr
    report = json.loads(run.stdout)
    verdicts = [b["verify"] for b in report["blocks"]]
    assert verdicts and all(v["status"] == "unchecked" and "refused" in v["reason"] for v in verdicts), verdicts


def test_sibling_subgraphs_may_reuse_names() -> None:
    """If's then/else branches both producing 'z' is legal ONNX: no duplicate-output warning."""
    nodes = (Node("if", "If", ("c",), ("y",)), Node("if/body0/a", "Relu", ("x",), ("z",)),
             Node("if/body1/b", "Relu", ("x",), ("z",)))
    report = audit_graph(ModelGraph("g", "onnx", nodes, {}))
    assert not report.warnings
    dup = (Node("a", "Relu", ("x",), ("z",)), Node("b", "Relu", ("x",), ("z",)))
    assert any("more than one node" in w for w in audit_graph(ModelGraph("g", "onnx", dup, {})).warnings)


def test_nodes_without_outputs_are_dropped() -> None:
    nodes = (Node("sm", "Softmax", ("x",), ()), Node("mm", "MatMul", ("x", "w.weight"), ()))
    report = audit_graph(ModelGraph("g", "onnx", nodes, {"w.weight": Tensor("w.weight", (4, 4), "float32", "w")}))
    assert any("without outputs" in w for w in report.warnings)


def test_impossible_weights_are_not_counted() -> None:
    weights = {"a.weight": Tensor("a.weight", (-3, 4), "float32", "a"),
               "b.weight": Tensor("b.weight", (2**40, 2**40), "float32", "b"),
               "c.weight": Tensor("c.weight", (4, 4), "float32", "c")}
    nodes = tuple(Node(f"mm{i}", "MatMul", ("x", name), (f"y{i}",)) for i, name in enumerate(weights))
    report = audit_graph(ModelGraph("g", "onnx", nodes, weights))
    assert report.model.total_params == 16
    assert any("'a.weight'" in w and "'b.weight'" in w for w in report.warnings)


# ------------------------------------------------------------------------------ string fields


def test_non_utf8_string_field_is_an_input_error(folder: Path) -> None:
    (arg,) = hc.non_utf8(folder)
    with pytest.raises(InputError):
        audit(folder / arg)


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_onnx_named_pt_is_not_called_a_pickle(folder: Path) -> None:
    shutil.copy(hc.STANDARD, folder / "model.pt")
    with pytest.raises(InputError, match="not a PyTorch checkpoint"):
        audit(str(folder / "model.pt"))


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_names_cannot_drive_the_terminal(fmt: str, folder: Path) -> None:
    m = onnx.load(str(hc.STANDARD))
    for node in m.graph.node:
        node.name = node.name.replace("/encoder", "/enc\x1b]0;pwned\x07\x1b[2J")
    path = folder / "escape.onnx"
    path.write_bytes(m.SerializeToString())
    run = hc.run_cli([path.name, "--format", fmt, "--no-color"], folder)
    assert run.code == 0, run.stderr
    assert "\x1b" not in run.stdout
