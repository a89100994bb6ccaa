"""--verify: one onnxruntime run confirms, contradicts or supplies the static head counts."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from jsonschema import Draft202012Validator
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from mhainspect.analysis.verify import attach, parse_size, weight_bytes
from mhainspect.pipeline.verify import check_budget, verify_file
from mhainspect.cli.app import app
from mhainspect.pipeline import audit

pytest.importorskip("onnxruntime")

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_models"
STANDARD = SAMPLES / "standard_mha.onnx"


def run(*args: str | Path) -> Any:
    result = CliRunner().invoke(app, ["inspect", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def runtime_reshape_model(d_model: int = 32) -> onnx.ModelProto:
    """Self-attention whose head-split Reshapes take their target from the graph input `shape`."""
    rng = np.random.default_rng(0)

    def weight(name: str) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal((d_model, d_model)) * 0.1).astype(np.float32), name)

    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "Wq"], ["q"], name="q_proj"),
        n("MatMul", ["x", "Wk"], ["k"], name="k_proj"),
        n("MatMul", ["x", "Wv"], ["v"], name="v_proj"),
        n("Reshape", ["q", "shape"], ["q4"], name="q_split"),
        n("Reshape", ["k", "shape"], ["k4"], name="k_split"),
        n("Reshape", ["v", "shape"], ["v4"], name="v_split"),
        n("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
        n("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        n("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3]),
        n("MatMul", ["qt", "kt"], ["scores"], name="qk"),
        n("Softmax", ["scores"], ["probs"], name="softmax", axis=-1),
        n("MatMul", ["probs", "vt"], ["ctx"], name="av"),
        n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_t", "merge_shape"], ["ctx_m"], name="merge"),
        n("MatMul", ["ctx_m", "Wo"], ["y"], name="o_proj"),
    ]
    inits = [weight("Wq"), weight("Wk"), weight("Wv"), weight("Wo"),
             numpy_helper.from_array(np.array([0, 0, d_model], np.int64), "merge_shape")]
    graph = helper.make_graph(
        nodes, "runtime_reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d_model]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", d_model])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="test", ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


# ----------------------------------------------------------------------------- service


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.onnx")), ids=lambda p: p.stem)
def test_every_sample_model_is_confirmed(path: Path, expected: dict[str, Any]) -> None:
    report = audit(path)
    # Synthetic dims are independent symbols: a decoding step's key length is past + new tokens
    # (seq defaults to 8), which the caller gives, as --dim does.
    dims = {"past_seq": 3, "total_seq": 11} if path.stem == "llama_kv_cache" else None
    results = verify_file(path, report, dims=dims)
    assert len(results) == len(report.blocks) == len(expected[path.stem]["blocks"])
    for block, result, truth in zip(report.blocks, results, expected[path.stem]["blocks"]):
        assert result.block == block.name
        assert result.status == "confirmed", result
        assert result.observed_heads == truth["num_heads"]
        assert result.observed_kv_heads in (None, truth["num_kv_heads"])


def test_gqa_kv_heads_are_read_from_the_run() -> None:
    for name in ("gqa_llama", "onnx_attention_23"):
        (result,) = verify_file(SAMPLES / f"{name}.onnx", audit(SAMPLES / f"{name}.onnx"))
        assert (result.status, result.observed_kv_heads) == ("confirmed", 2 if name == "gqa_llama" else 4)


def test_runtime_reshape_is_observed(tmp_path: Path) -> None:
    path = tmp_path / "runtime_reshape.onnx"
    onnx.save(runtime_reshape_model(), path)
    report = audit(path)
    (block,) = report.blocks
    assert block.num_heads is None and any(f.code == "MHA004" for f in report.flags)
    # The head split is a run-time value: feed it as the caller would ([0, 0] copies batch, seq).
    (result,) = verify_file(path, report, inputs={"shape": np.array([0, 0, 4, 8], np.int64)})
    assert (result.status, result.observed_heads) == ("observed", 4)
    assert result.reason is not None and result.reason.startswith("observed at run time")
    # Without a usable value the model cannot run: the static report stays, the block is unchecked.
    (failed,) = verify_file(path, report)
    assert failed.status == "unchecked" and "onnxruntime" in (failed.reason or "")


def test_contradiction_is_reported() -> None:
    report = audit(STANDARD)
    wrong = dataclasses.replace(report, blocks=(dataclasses.replace(report.blocks[0], num_heads=4),))
    (result,) = verify_file(STANDARD, wrong)
    assert (result.status, result.observed_heads) == ("contradicted", 8)
    assert "saw 8 heads, static 4" in (result.reason or "")


def test_weight_bytes_and_budget(tmp_path: Path) -> None:
    model = onnx.load(STANDARD)
    inline = weight_bytes(model)
    assert inline >= 4 * 64 * 64 * 4
    onnx.save(model, tmp_path / "ext.onnx", save_as_external_data=True, location="ext.data", size_threshold=0)
    assert weight_bytes(onnx.load(tmp_path / "ext.onnx", load_external_data=False)) == inline
    assert check_budget(tmp_path / "ext.onnx", None) == inline
    assert parse_size("2GiB") == 2 * 1024**3 and parse_size("512MiB") == 512 * 1024**2 and parse_size("1") == 1
    assert parse_size("2G") == 2 * 10**9  # SI, as every count (ir.units)
    for bad in ("", "G", "-1", "2X", "0"):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_attach_leaves_static_findings_alone() -> None:
    report = audit(STANDARD)
    verified = attach(report, verify_file(STANDARD, report))
    assert dataclasses.replace(verified.blocks[0], verification=None) == report.blocks[0]


# ----------------------------------------------------------------------------- CLI


def test_cli_table_and_json(schema_validator: Draft202012Validator) -> None:
    table = run(SAMPLES / "bert_two_layers.onnx", "--verify", "--no-color")
    assert table.exit_code == 0
    assert "encoder.layer.0.attention: confirmed (8 heads)" in table.stdout
    assert "encoder.layer.1.attention: confirmed (4 heads)" in table.stdout
    doc = json.loads(run(SAMPLES / "gqa_llama.onnx", "--verify", "-f", "json").stdout)
    schema_validator.validate(doc)
    assert doc["blocks"][0]["verify"] == {
        "status": "confirmed", "observed_heads": 8, "observed_kv_heads": 2,
        "reason": doc["blocks"][0]["verify"]["reason"]}
    plain = json.loads(run(STANDARD, "-f", "json").stdout)
    assert "verify" not in plain["blocks"][0]  # the key appears only when --verify ran


def test_user_file_untouched_and_temp_dir_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    temp_root = tmp_path / "tmp"
    temp_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp_root))
    model = tmp_path / "model.onnx"
    onnx.save(onnx.load(STANDARD), model, save_as_external_data=True, location="model.data", size_threshold=0)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir() if p.is_file()}
    result = run(model, "--verify", "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["blocks"][0]["verify"]["status"] == "confirmed"  # external data loaded
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir() if p.is_file()}
    assert after == before
    assert list(temp_root.iterdir()) == []


def test_static_audit_never_needs_external_data(tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    onnx.save(onnx.load(STANDARD), model, save_as_external_data=True, location="model.data", size_threshold=0)
    (tmp_path / "model.data").unlink()
    assert run(model).exit_code == 0
    result = run(model, "--verify", "-f", "json")
    assert result.exit_code == 0
    verify = json.loads(result.stdout)["blocks"][0]["verify"]
    assert verify["status"] == "unchecked" and "model.data" in verify["reason"]


def test_budget_refuses_up_front() -> None:
    result = run(STANDARD, "--verify", "--max-verify-bytes", "1")
    assert result.exit_code == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--max-verify-bytes" in lines[0] and result.stdout == ""
    assert run(STANDARD, "--verify", "--max-verify-bytes", "2G").exit_code == 0
    assert run(STANDARD, "--verify", "--max-verify-bytes", "lots").exit_code == 2
    assert run(STANDARD, "--max-verify-bytes", "2G").exit_code == 2  # only with --verify
    assert run(STANDARD, "--verify", "--dim", "batch").exit_code == 2
    for bad in ("batch=0", "batch=1.5", "batch=two", "=2"):
        assert run(STANDARD, "--verify", "--dim", bad).exit_code == 2, bad


def test_run_failure_keeps_static_report(tmp_path: Path) -> None:
    model = onnx.load(STANDARD)
    x = next(i for i in model.graph.input if i.name == "x")
    x.type.tensor_type.shape.dim[2].dim_param = "hidden"  # the projections need 64
    path = tmp_path / "symbolic_hidden.onnx"
    onnx.save(model, path)
    result = run(path, "--verify", "--dim", "hidden=5", "-f", "json")
    assert result.exit_code == 0 and "Traceback" not in result.output
    block = json.loads(result.stdout)["blocks"][0]
    assert block["num_heads"] == 8  # the static report is intact
    assert block["verify"]["status"] == "unchecked"
    assert block["verify"]["reason"].startswith("model did not run in onnxruntime")
    table = run(path, "--verify", "--dim", "hidden=5", "--no-color")
    assert "not checkable (model did not run in onnxruntime" in table.stdout
    assert run(path, "--verify", "--dim", "hidden=64", "-f", "json").exit_code == 0
    # --dim reads numbers as every option does: 0.064k is 64, which the projections need
    ran = json.loads(run(path, "--verify", "--dim", "hidden=0.064k", "-f", "json").stdout)["blocks"][0]["verify"]
    assert ran["status"] != "unchecked", ran


def test_fail_on_contradiction_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    assert run(STANDARD, "--fail-on-contradiction").exit_code == 0
    import mhainspect.pipeline.runner

    real = mhainspect.pipeline.runner.audit  # the audit every run's models go through

    def disagreeing(path: Any, *args: Any, **kwargs: Any) -> Any:
        report = real(path, *args, **kwargs)
        return dataclasses.replace(report, blocks=tuple(dataclasses.replace(b, num_heads=2) for b in report.blocks))

    monkeypatch.setattr(mhainspect.pipeline.runner, "audit", disagreeing)
    verified = run(STANDARD, "--verify", "--no-color")
    assert verified.exit_code == 0 and "contradicted (saw 8 heads, static 2)" in verified.stdout
    gated = run(STANDARD, "--fail-on-contradiction", "--no-color")
    assert gated.exit_code == 1
    assert "--fail-on-contradiction" in gated.stderr


def test_sample_copy_runs_from_any_folder(tmp_path: Path) -> None:
    copy = tmp_path / "copy.onnx"
    shutil.copyfile(SAMPLES / "ms_attention.onnx", copy)
    doc = json.loads(run(copy, "--verify", "-f", "json").stdout)
    assert doc["blocks"][0]["verify"]["status"] == "confirmed"
