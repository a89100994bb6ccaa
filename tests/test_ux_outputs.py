"""Nothing lost, and the new output options: several inputs with -o write every report that succeeded
and one error entry per failed input in every format (stderr says so, the run still exits 2); -f csv
(per block, --summary per model), -f md, -o x.csv, --summary, --verbose."""

from __future__ import annotations

import csv
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_run import Run, in_process
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_models"


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    return in_process(capsys, monkeypatch)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Two good models and a corrupt one."""
    models = tmp_path / "models"
    models.mkdir()
    for name in ("gqa_llama.onnx", "bert_two_layers.onnx"):
        shutil.copy(SAMPLES / name, models / name)
    (models / "corrupt.onnx").write_bytes(b"not a model at all")
    return models


FORMATS = ("json", "jsonl", "csv", "markdown", "html", "sarif", "github", "table")


@pytest.mark.parametrize("fmt", FORMATS)
def test_nothing_lost(run: Callable[..., Run], folder: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"report.{fmt}"
    r = run(folder, "-o", out, "-f", fmt)
    assert r.code == 2  # an input failed
    assert "corrupt.onnx: not a valid ONNX model" in r.err
    assert f"wrote {out} ({fmt}, " in r.err and "2 reports and 1 error entry (" in r.err
    assert "corrupt.onnx could not be audited)" in r.err
    text = out.read_text(encoding="utf-8")
    assert "corrupt.onnx" in text and "gqa_llama.onnx" in text and "bert_two_layers.onnx" in text


def test_json_errors_validate(run: Callable[..., Run], folder: Path, tmp_path: Path,
                              report_schema: dict[str, Any]) -> None:
    out = tmp_path / "r.json"
    run(folder, "-o", out)
    doc = json.loads(out.read_text(encoding="utf-8"))
    multi = json.loads((ROOT / "docs" / "multi-report.schema.json").read_text(encoding="utf-8"))
    registry = Registry().with_resource(report_schema["$id"], Resource.from_contents(report_schema))
    assert not list(Draft202012Validator(multi, registry=registry).iter_errors(doc))
    assert [e["kind"] for e in doc["errors"]] == ["invalid"] and len(doc["models"]) == 2
    lines = [json.loads(line) for line in (run(folder, "-f", "jsonl").out.splitlines())]
    assert sum("error" in line for line in lines) == 1 and len(lines) == 3


def test_a_single_failed_model_writes_nothing(run: Callable[..., Run], folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "keep.json"
    out.write_text("before", encoding="utf-8")
    assert run(folder / "corrupt.onnx", "-o", out).code == 2
    assert out.read_text(encoding="utf-8") == "before"


def test_csv_per_block_and_per_model(run: Callable[..., Run], tmp_path: Path) -> None:
    out = tmp_path / "blocks.csv"
    assert run(SAMPLES / "bert_two_layers.onnx", SAMPLES / "gqa_llama.onnx", "-o", out).code == 0  # csv from the suffix
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert [(r["block"], r["heads"], r["kv_heads"]) for r in rows] == [
        ("encoder.layer.0.attention", "8", "8"), ("encoder.layer.1.attention", "4", "4"),
        ("model.layers.0.self_attn", "8", "2")]
    for r in rows:
        assert sum(int(r[c]) for c in ("q", "k", "v", "o", "bias")) == int(r["params"])
    summary = list(csv.DictReader(io.StringIO(run(SAMPLES / "bert_two_layers.onnx", SAMPLES / "gqa_llama.onnx",
                                                  "-f", "csv", "--summary").out)))
    assert [(r["params"], r["blocks"], r["flags"]) for r in summary] == [("33536", "2", "MHA006"),
                                                                         ("10304", "1", "MHA005")]


def test_csv_names_cannot_be_formulas() -> None:
    import dataclasses

    from mhainspect import inspect
    from mhainspect.render.csv_render import render_csv

    report = inspect(str(SAMPLES / "gqa_llama.onnx"))
    hostile = dataclasses.replace(report, blocks=tuple(dataclasses.replace(b, name="=HYPERLINK(\"x\")")
                                                       for b in report.blocks))
    row = next(csv.reader(io.StringIO(render_csv([hostile]).splitlines()[1])))
    assert row[2] == "'=HYPERLINK(\"x\")"


def test_summary_md_and_verbose(run: Callable[..., Run]) -> None:
    r = run(SAMPLES, "--summary", columns=80)
    assert r.code == 0 and "Models (" in r.out and "Attention blocks" not in r.out and "Audited " in r.out
    assert max(len(line) for line in r.out.splitlines()) <= 80
    md = run(SAMPLES / "gqa_llama.onnx", "-f", "md")
    assert md.code == 0 and md.out.startswith("## ")
    assert run(SAMPLES / "gqa_llama.onnx", "--verbose").out == run(SAMPLES / "gqa_llama.onnx", "-v").out


def test_batch_without_context_says_so(run: Callable[..., Run]) -> None:
    r = run(SAMPLES / "llama_kv_cache.onnx", "--batch", "4", "-f", "json")
    assert "--batch has no effect without --context N" in r.err
    assert not any("batch" in w for w in run(SAMPLES / "llama_kv_cache.onnx", "--batch", "4", "--context", "8",
                                              "-f", "json").json()["warnings"])


def test_option_warnings_are_short(run: Callable[..., Run]) -> None:
    """An option without effect is one short line: which blocks, and the way out; the full why is
    the KV cache line's (was ~480 characters, the cache's reason repeated)."""
    r = run(SAMPLES / "gqa_llama.onnx", "--context", "8k", "--batch", "2", "--kv-dtype", "fp16", "-f", "json")
    lines = [ln for ln in r.err.splitlines() if ln.startswith("mhainspect: warning:")]
    # The length without the model's path, which is as long as the checkout's folder makes it.
    assert len(lines) == 1 and len(lines[0].replace(str(SAMPLES / "gqa_llama.onnx"), "MODEL")) <= 320
    assert "the KV cache is unknown for 1 block (model.layers.0.self_attn); " in lines[0]
    enc = run(SAMPLES / "bert_two_layers.onnx", "--context", "8k", "-f", "json").err.strip()
    assert enc.endswith("--context has no effect: nothing in the model caches K/V (the KV cache line says why)")
