"""pipeline.run: one run for the CLI, the Python API and the batch runner. Outcomes come one per
model in the order of the sources; gates, --ignore, per-model config and --verify work from Python
as on the command line."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from cli_run import in_process

import mhainspect
from mhainspect.analysis.gates import parse_limit
from mhainspect.batch import AuditFailure
from mhainspect.errors import ErrorKind
from mhainspect.pipeline import Audited, AuditRequest, run
from mhainspect.pipeline.config import Settings

SAMPLES = Path(__file__).resolve().parents[1] / "sample_models"
GQA = SAMPLES / "gqa_llama.onnx"  # one block, flagged MHA005 (grouped-query attention)
STANDARD = SAMPLES / "standard_mha.onnx"


def test_one_outcome_per_model_in_the_order_of_the_sources(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff not a model")
    folder = tmp_path / "two"
    folder.mkdir()
    shutil.copyfile(GQA, folder / "a.onnx")
    shutil.copyfile(STANDARD, folder / "b.onnx")
    outcomes = list(run(AuditRequest((str(STANDARD), str(bad), str(folder)))))
    assert [type(o) for o in outcomes] == [Audited, AuditFailure, Audited, Audited]
    first, failed, a, b = outcomes
    assert isinstance(first, Audited) and first.report.model.path == str(STANDARD) and first.input == str(STANDARD)
    assert isinstance(failed, AuditFailure) and failed.input == str(bad) and failed.kind is ErrorKind.INVALID
    assert isinstance(a, Audited) and isinstance(b, Audited)
    assert [Path(a.report.model.path).name, Path(b.report.model.path).name] == ["a.onnx", "b.onnx"]
    assert a.input == b.input == str(folder)


def test_gates_and_ignore_from_python() -> None:
    request = AuditRequest((str(GQA),), settings=Settings(max_params=parse_limit("10k"), fail_on=frozenset({"MHA005"})))
    (outcome,) = run(request)
    assert isinstance(outcome, Audited)
    failed = {g.gate for g in outcome.extras.gates if not g.passed}
    assert failed == {"max-params", "fail-on"}
    ignored = AuditRequest((str(GQA),), settings=Settings(fail_on=frozenset({"MHA005"}), ignore=frozenset({"MHA005"})))
    (outcome,) = run(ignored)
    assert isinstance(outcome, Audited)
    assert not outcome.report.flags and outcome.extras.ignored == (("MHA005", 1),)
    assert all(g.passed for g in outcome.extras.gates)
    assert [f.code for f in mhainspect.inspect(GQA).flags] == ["MHA005"]
    assert mhainspect.inspect(GQA, ignore=["MHA005"]).flags == ()


def test_per_model_config_from_python(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copyfile(GQA, tmp_path / "m.onnx")
    (tmp_path / "pyproject.toml").write_text('[tool.mhainspect]\nignore = ["MHA005"]\nmax-params = "10k"\n')
    assert [f.code for f in mhainspect.inspect(tmp_path / "m.onnx").flags] == ["MHA005"]  # no config read
    assert mhainspect.inspect(tmp_path / "m.onnx", config=True).flags == ()
    (record,) = mhainspect.audit_records(tmp_path / "m.onnx", config=True)
    assert record["ignored_flags"] == {"MHA005": 1}
    assert [g["gate"] for g in record["gates"] if not g["passed"]] == ["max-params"]
    # the CLI reads the same file the same way
    doc = in_process(capsys, monkeypatch)(tmp_path / "m.onnx", "-f", "json").json()
    assert doc["ignored_flags"] == record["ignored_flags"] and doc["gates"] == record["gates"]


def test_verify_from_python() -> None:
    pytest.importorskip("onnxruntime")
    report = mhainspect.inspect(GQA, verify=True)
    (block,) = report.blocks
    assert block.verification is not None and block.verification.status == "confirmed"
    assert block.verification.observed_heads == 8 and block.verification.observed_kv_heads == 2
    assert mhainspect.inspect(GQA).blocks[0].verification is None


def test_the_api_raises_what_the_audit_raises(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff not a model")
    with pytest.raises(mhainspect.InputError) as err:
        mhainspect.inspect(bad)
    assert err.value.kind is ErrorKind.INVALID
    results = list(mhainspect.audit_many([bad, GQA]))
    assert [type(r) for _, r in results] == [AuditFailure, mhainspect.Report]


def test_ignore_on_a_module_and_what_a_module_does_not_take() -> None:
    torch = pytest.importorskip("torch")

    class TwoLayouts(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.MultiheadAttention(64, 8)
            self.b = torch.nn.MultiheadAttention(64, 4)

    model = TwoLayouts()
    assert [f.code for f in mhainspect.inspect(model).flags] == ["MHA006"]
    assert mhainspect.inspect(model, ignore=["MHA006"]).flags == ()
    for refused in ({"verify": True}, {"config": True}):
        with pytest.raises(ValueError, match="model path"):
            mhainspect.inspect(model, **refused)


def _two_layouts() -> object:
    """Two nn.MultiheadAttention of one width at 8 and 4 heads (MHA006), random weights with noise
    on every parameter."""
    torch = pytest.importorskip("torch")
    from random_weights import add_noise

    class TwoLayouts(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.MultiheadAttention(64, 8)
            self.b = torch.nn.MultiheadAttention(64, 4)

    return add_noise(TwoLayouts())


def test_a_module_is_a_source_of_a_run_like_a_file() -> None:
    from mhainspect.pipeline import ModuleSource, audit_module
    from mhainspect.render.json_render import report_to_dict

    model = _two_layouts()
    module = ModuleSource(model, name="two")
    settings = Settings(max_params=parse_limit("10k"), fail_on=frozenset({"MHA006"}))
    outcomes = list(run(AuditRequest((str(GQA), module, str(STANDARD)), settings=settings, jobs=2)))
    assert [o.input for o in outcomes] == [str(GQA), "two", str(STANDARD)]  # in the order of the sources
    _, audited, _ = outcomes
    assert isinstance(audited, Audited) and audited.report.model.path == "two"
    assert {g.gate for g in audited.extras.gates if not g.passed} == {"max-params", "fail-on"}
    # the same report as the stage alone: the run adds gates, it changes no number
    assert report_to_dict(audited.report) == report_to_dict(audit_module(model, name="two"))
    (ignored,) = run(AuditRequest((module,), settings=Settings(ignore=frozenset({"MHA006"}))))
    assert isinstance(ignored, Audited) and ignored.report.flags == () and ignored.extras.ignored == (("MHA006", 1),)
    # the API's inspect(module) is this run
    assert mhainspect.inspect(model, name="two") == audit_module(model, name="two")
    assert mhainspect.inspect(model, ignore=["MHA006"]).flags == ()


def test_a_module_takes_the_working_directorys_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mhainspect.pipeline import ConfigFinder, ModuleSource

    (tmp_path / "pyproject.toml").write_text('[tool.mhainspect]\nignore = ["MHA006"]\nmax-params = "10k"\n')
    monkeypatch.chdir(tmp_path)
    (outcome,) = run(AuditRequest((ModuleSource(_two_layouts()),), config=ConfigFinder(None)))
    assert isinstance(outcome, Audited) and outcome.input == "TwoLayouts"
    assert outcome.report.flags == () and outcome.extras.ignored == (("MHA006", 1),)
    assert [g.gate for g in outcome.extras.gates if not g.passed] == ["max-params"]


def test_verify_leaves_a_model_in_memory_unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """--verify runs a file; a module has none: its blocks say so, the static report stays."""
    from mhainspect.analysis import verify as verify_mod
    from mhainspect.pipeline import ModuleSource, VerifyRequest

    monkeypatch.setattr(verify_mod, "require_runtime", lambda: None)  # no model here is run
    (outcome,) = run(AuditRequest((ModuleSource(_two_layouts()),), verify=VerifyRequest()))
    assert isinstance(outcome, Audited) and len(outcome.report.blocks) == 2
    for block in outcome.report.blocks:
        assert block.verification is not None and block.verification.status == "unchecked"
        assert "in memory" in (block.verification.reason or "")


def test_a_graph_in_memory_is_a_source_and_its_failure_one_outcome() -> None:
    import onnx

    from mhainspect.errors import InputError
    from mhainspect.frontends.onnx.loader import model_to_graph
    from mhainspect.pipeline import GraphSource, InMemory, audit_graph
    from mhainspect.results.stages import SourceResult

    class Unreadable(InMemory):
        def __str__(self) -> str:
            return "unreadable"

        def result(self) -> SourceResult:
            raise InputError("unreadable: its reader gave up", ErrorKind.INVALID)

    graph = model_to_graph(onnx.load(str(GQA)), source="gqa.onnx")
    request = AuditRequest((GraphSource(graph), Unreadable()), settings=Settings(fail_on=frozenset({"MHA005"})))
    good, failed = run(request)
    assert isinstance(good, Audited) and good.input == "gqa.onnx" and good.report == audit_graph(graph)
    assert [g.gate for g in good.extras.gates if not g.passed] == ["fail-on"]
    assert failed == AuditFailure("unreadable", ErrorKind.INVALID, "unreadable: its reader gave up")
    with pytest.raises(InputError, match="gave up"):  # a run that raises its errors (the API's) raises it
        list(run(dataclasses.replace(request, raise_errors=True)))
