"""Many models: the worker pool (mhainspect.batch), --from-file / --jobs on the command line
(JSON Lines records, resume, exit codes) and mhainspect.audit_many / audit_records."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path
from typing import Any

import batch_tasks
import pytest
from cli_run import in_process
from jsonschema import Draft202012Validator

import mhainspect
from mhainspect.batch import AuditFailure, BatchAbort, read_inputs, run_many, workers_for
from mhainspect.errors import ErrorKind, InputError

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_models"
STANDARD = SAMPLES / "standard_mha.onnx"  # 16,768 params, no flags
KERAS = SAMPLES / "keras_per_head.onnx"  # 8,416 params, MHA001
BERT = SAMPLES / "bert_two_layers.onnx"


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    return in_process(capsys, monkeypatch)


def _inputs(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A list of two good models, a missing path and a corrupt file, with comments and a blank line;
    and the error kind each bad one must get."""
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(STANDARD.read_bytes()[:300])
    missing = tmp_path / "missing.onnx"
    listing = tmp_path / "models.txt"
    listing.write_text(f"# models to audit\n{STANDARD}\n\n  {missing}  \n{KERAS}\n{corrupt}\n# end\n{STANDARD}\n",
                       encoding="utf-8")
    return listing, {str(missing): "not_found", str(corrupt): "invalid"}


def _records(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


# ----------------------------------------------------------------------------- the pool


def test_read_inputs_skips_blank_and_comment_lines_and_repeats() -> None:
    assert read_inputs(["a\n", "\n", "  # note\n", " b \n", "a\n", "hf://org/name@main\n"]) == [
        "a", "b", "hf://org/name@main"]


def test_workers_spread_jobs_over_processes_then_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mhainspect.batch.pool._cpus", lambda: 4)
    assert (workers_for(2).processes, workers_for(2).threads) == (2, 1)
    assert (workers_for(4).processes, workers_for(4).threads) == (4, 1)
    assert (workers_for(10).processes, workers_for(10).threads) == (4, 3)


def test_in_process_failures_are_records() -> None:
    results = dict(run_many(batch_tasks.echo, ["a", "missing-x", "bug-y"], jobs=1))
    assert results["a"][0] == "a"  # type: ignore[index]
    assert results["missing-x"] == AuditFailure("missing-x", ErrorKind.NOT_FOUND, "missing-x: no such file")
    bug = results["bug-y"]
    assert isinstance(bug, AuditFailure) and bug.kind is ErrorKind.INTERNAL and "ValueError: a bug" in bug.message


def test_worker_processes_run_every_input_and_a_dead_worker_fails_only_its_input() -> None:
    inputs = ["a", "b", "die-1", "c", "missing-d", "e", "f", "g"]
    results = dict(run_many(batch_tasks.echo, inputs, jobs=4))  # 2 processes x 2 threads on 2 CPUs
    assert set(results) == set(inputs)
    dead = results["die-1"]
    assert isinstance(dead, AuditFailure) and dead.kind is ErrorKind.INTERNAL and "died (exit code 3)" in dead.message
    assert isinstance(results["missing-d"], AuditFailure) and results["missing-d"].kind is ErrorKind.NOT_FOUND
    good = {k: v for k, v in results.items() if not isinstance(v, AuditFailure)}
    assert sorted(good) == ["a", "b", "c", "e", "f", "g"]  # the inputs beside the dying one ran again
    import os

    assert os.getpid() not in {pid for _, pid in good.values()}  # type: ignore[misc]


def test_batch_abort_ends_the_run_in_the_caller() -> None:
    with pytest.raises(BatchAbort, match="every input"):
        list(run_many(batch_tasks.echo, ["a", "abort-now", "b"], jobs=2))


def test_input_error_keeps_its_kind_through_pickling() -> None:
    exc = pickle.loads(pickle.dumps(InputError("x: gated", ErrorKind.GATED)))
    assert isinstance(exc, InputError) and exc.kind is ErrorKind.GATED and str(exc) == "x: gated"


def test_error_kinds_match_the_schema(batch_record_validator: Draft202012Validator) -> None:
    schema = batch_record_validator.schema
    kinds = schema["oneOf"][1]["properties"]["error"]["properties"]["kind"]["enum"]
    assert kinds == [k.value for k in ErrorKind]


# ----------------------------------------------------------------------------- the command line


def test_from_file_one_record_per_input_with_its_error(cli: Any, tmp_path: Path,
                                                       batch_record_validator: Draft202012Validator) -> None:
    listing, bad = _inputs(tmp_path)
    run = cli("--from-file", listing)  # jsonl is the default of a list run
    assert run.code == 2  # an input failed
    records = _records(run.out)
    missing, corrupt = bad
    assert [r["input"] for r in records] == [str(STANDARD), missing, str(KERAS), corrupt]  # one by one: list order
    for r in records:
        assert not list(batch_record_validator.iter_errors(r)), r
    by_input = {r["input"]: r for r in records}
    assert set(by_input) == {str(STANDARD), str(KERAS), *bad}  # STANDARD listed twice: audited once
    for text, kind in bad.items():
        assert by_input[text]["error"]["kind"] == kind and by_input[text]["error"]["message"].startswith(text)
    assert by_input[str(STANDARD)]["model"]["total_params"] == 16_768
    assert by_input[str(KERAS)]["model"]["total_params"] == 8_416
    errors = [line for line in run.err.splitlines() if line.startswith("mhainspect: error:")]
    assert len(errors) == 2


def test_from_file_with_jobs_gives_the_same_records(cli: Any, tmp_path: Path) -> None:
    listing, _ = _inputs(tmp_path)
    one = sorted(cli("--from-file", listing).out.splitlines())
    two = sorted(cli("--from-file", listing, "--jobs", "2").out.splitlines())
    assert one == two and len(one) == 4


def test_from_file_appends_and_a_rerun_skips_what_is_recorded(cli: Any, tmp_path: Path) -> None:
    listing, bad = _inputs(tmp_path)
    out = tmp_path / "audit.jsonl"
    first = cli("--from-file", listing, "-o", out)
    assert first.code == 2 and first.out == ""
    assert len(_records(out.read_text(encoding="utf-8"))) == 4
    again = cli("--from-file", listing, "-o", out)
    assert again.code == 0  # a finished list: nothing audited, nothing failed in this run (issue 38)
    assert "all 4 inputs already recorded (2 error records: --retry-errors audits them again); nothing to audit" \
        in again.err
    assert len(_records(out.read_text(encoding="utf-8"))) == 4
    listing.write_text(listing.read_text(encoding="utf-8") + f"{BERT}\n", encoding="utf-8")
    more = cli("--from-file", listing, "-o", out)
    records = _records(out.read_text(encoding="utf-8"))
    assert more.code == 2 and len(records) == 5 and records[-1]["input"] == str(BERT)


def test_retry_errors_runs_the_failed_inputs_again(cli: Any, tmp_path: Path) -> None:
    listing, bad = _inputs(tmp_path)
    out = tmp_path / "audit.jsonl"
    cli("--from-file", listing, "-o", out)
    missing = next(t for t, k in bad.items() if k == "not_found")
    Path(missing).write_bytes(STANDARD.read_bytes())  # the missing model has arrived
    run = cli("--from-file", listing, "-o", out, "--retry-errors")
    records = _records(out.read_text(encoding="utf-8"))
    assert len(records) == 4
    assert [r["input"] for r in records if "error" in r] == [next(t for t, k in bad.items() if k == "invalid")]
    assert next(r for r in records if r["input"] == missing)["model"]["total_params"] == 16_768
    assert run.code == 2


def test_a_line_cut_by_a_crash_is_dropped_with_the_input_before_it(cli: Any, tmp_path: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text(f"{STANDARD}\n{KERAS}\n{BERT}\n", encoding="utf-8")
    out = tmp_path / "audit.jsonl"
    assert cli("--from-file", listing, "-o", out).code == 0
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    out.write_text(lines[0] + lines[1] + lines[2][:40], encoding="utf-8")  # killed while writing the third
    run = cli("--from-file", listing, "-o", out)
    assert run.code == 0 and "1 of 3 inputs already recorded" in run.err
    records = _records(out.read_text(encoding="utf-8"))
    assert sorted(r["input"] for r in records) == sorted(map(str, (STANDARD, KERAS, BERT)))


def test_resume_refuses_a_file_that_is_no_record_log(cli: Any, tmp_path: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text(f"{STANDARD}\n", encoding="utf-8")
    out = tmp_path / "audit.jsonl"
    out.write_text('{"schema_version": "1.0"}\n', encoding="utf-8")
    run = cli("--from-file", listing, "-o", out)
    assert run.code == 2 and "line 1 is not a record of a --from-file run" in run.err
    assert out.read_text(encoding="utf-8") == '{"schema_version": "1.0"}\n'


def test_exit_codes_input_errors_outrank_gates(cli: Any, tmp_path: Path) -> None:
    good = tmp_path / "good.txt"
    good.write_text(f"{STANDARD}\n{KERAS}\n", encoding="utf-8")
    assert cli("--from-file", good).code == 0
    gated = cli("--from-file", good, "--max-params", "10k")  # STANDARD has 16,768
    assert gated.code == 1 and "mhainspect: gate failed:" in gated.err
    assert cli("--from-file", good, "--max-params", "10k", "--exit-zero").code == 0
    both = tmp_path / "both.txt"
    both.write_text(f"{STANDARD}\n{tmp_path / 'missing.onnx'}\n", encoding="utf-8")
    assert cli("--from-file", both, "--max-params", "10k").code == 2


def test_a_folder_input_gives_a_line_per_model_naming_the_input(cli: Any, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    for p in (STANDARD, KERAS):
        (folder / p.name).write_bytes(p.read_bytes())
    listing = tmp_path / "list.txt"
    listing.write_text(f"{folder}\n", encoding="utf-8")
    records = _records(cli("--from-file", listing).out)
    assert [r["input"] for r in records] == [str(folder)] * 2
    assert sorted(Path(r["model"]["path"]).name for r in records) == sorted([STANDARD.name, KERAS.name])


def test_list_from_stdin_and_models_beside_it(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{KERAS}\n"))
    records = _records(cli(STANDARD, "--from-file", "-").out)
    assert sorted(r["input"] for r in records) == sorted([str(STANDARD), str(KERAS)])


def test_from_file_in_another_format_renders_at_the_end(cli: Any, tmp_path: Path) -> None:
    listing, _ = _inputs(tmp_path)
    run = cli("--from-file", listing, "-f", "json")
    assert run.code == 2
    doc = json.loads(run.out)
    assert [m["model"]["total_params"] for m in doc["models"]] == [16_768, 8_416]  # in list order


def test_from_file_usage_errors(cli: Any, tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing yet\n\n", encoding="utf-8")
    run = cli("--from-file", empty)
    assert run.code == 2 and run.err.strip() == f"mhainspect: error: no model given (--from-file {empty} lists none)"
    run = cli("--from-file", tmp_path / "nope.txt")
    assert run.code == 2 and run.err.strip() == f"mhainspect: error: --from-file {tmp_path / 'nope.txt'}: no such file"
    run = cli(STANDARD, "--retry-errors")
    assert run.code == 2 and "--retry-errors applies to a --from-file run" in run.err
    run = cli(STANDARD, "--jobs", "0")
    assert run.code == 2


def test_jobs_on_model_arguments_keeps_their_order(cli: Any) -> None:
    run = cli(STANDARD, KERAS, BERT, "-f", "jsonl", "--jobs", "2")
    assert run.code == 0
    assert [r["model"]["path"] for r in _records(run.out)] == [str(STANDARD), str(KERAS), str(BERT)]
    assert "input" not in _records(run.out)[0]  # records name their input in list runs only


# ----------------------------------------------------------------------------- the Python API


def test_audit_many_in_worker_processes(tmp_path: Path) -> None:
    listing, bad = _inputs(tmp_path)
    texts = read_inputs(listing.read_text(encoding="utf-8").splitlines())
    results = list(mhainspect.audit_many(texts, jobs=2))
    assert len(results) == 4
    by_input = dict(results)
    assert isinstance(by_input[str(STANDARD)], mhainspect.Report)
    assert by_input[str(STANDARD)].model.total_params == 16_768
    for text, kind in bad.items():
        failure = by_input[text]
        assert isinstance(failure, mhainspect.AuditFailure) and failure.kind.value == kind
    report = pickle.loads(pickle.dumps(by_input[str(KERAS)]))
    assert report.to_dict() == by_input[str(KERAS)].to_dict()


def test_audit_records_are_the_cli_lines(cli: Any, tmp_path: Path,
                                         batch_record_validator: Draft202012Validator) -> None:
    listing, bad = _inputs(tmp_path)
    from_cli = {r["input"]: r for r in _records(cli("--from-file", listing).out)}
    for text in from_cli:
        (record,) = mhainspect.audit_records(text)
        assert record == from_cli[text]
        assert not list(batch_record_validator.iter_errors(record))
