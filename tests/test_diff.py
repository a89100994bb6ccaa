"""`mhainspect diff A B`: a checkpoint folder and its ONNX export have the same blocks; an fp32
model and its int8 copy (onnxruntime quantize_dynamic) differ only in bytes; a lost block and a
changed layout are listed, and --fail-on-change exits 1. Models are built here (random weights
with noise on every parameter), nothing is downloaded."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_run import Run, in_process
from jsonschema import Draft202012Validator

from mhainspect.analysis.diff import diff_reports, match_blocks
from mhainspect.pipeline import audit
from mhainspect.results.diff import Change, MatchedBy

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    return in_process(capsys, monkeypatch)


@pytest.fixture(scope="module")
def diff_validator() -> Draft202012Validator:
    schema = json.loads((ROOT / "docs" / "diff.schema.json").read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small grouped-query Llama saved as a Hugging Face folder, its ONNX export (with the KV
    cache) and the export quantized to int8."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests import size_exports as se
    from tests.random_weights import add_noise

    root = tmp_path_factory.mktemp("diff")
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = add_noise(LlamaForCausalLM(cfg))
    model.save_pretrained(root / "folder")
    (root / "onnx").mkdir()
    export = se.causal_lm(model, cfg, root / "onnx" / "model.onnx", kv_heads=2, head_dim=8)
    int8 = root / "onnx" / "model.int8.onnx"
    quantize_dynamic(str(export.path), str(int8), weight_type=QuantType.QInt8)
    return {"folder": root / "folder", "onnx": export.path, "int8": int8}


def _changed_fields(doc: dict[str, Any]) -> set[str]:
    return {f["field"] for b in doc["blocks"] for f in b["fields"] if f["changed"]}


@pytest.mark.slow  # many seconds: a model saved and exported (-m 'not slow' leaves it out)
def test_checkpoint_and_its_export_have_the_same_blocks(run: Callable[..., Run], llama: dict[str, Path]) -> None:
    r = run("diff", llama["folder"], llama["onnx"], "-f", "json", "--fail-on-change")
    assert r.code == 0, r.out  # the model's bytes differ (the export's constant tables), no block does
    doc = json.loads(r.out)
    assert [b["status"] for b in doc["blocks"]] == ["same", "same"], doc["blocks"]
    # The export wraps the model (model.model.layers.N): paired by position among blocks of one shape.
    assert [b["matched_by"] for b in doc["blocks"]] == ["position", "position"]
    assert all(b["b"] == "model." + b["a"] for b in doc["blocks"])
    assert _changed_fields(doc) == set()
    heads = {f["field"]: f["a"] for f in doc["blocks"][0]["fields"]}
    assert (heads["num_heads"], heads["num_kv_heads"], heads["d_k"], heads["d_v"]) == (4, 2, 8, 8)
    text = run("diff", llama["folder"], llama["onnx"])
    assert "2 blocks in A, 2 in B: 0 paired by name, 2 by position and shape; 0 changed" in text.out
    assert "No block changed." in text.out


@pytest.mark.slow  # the export above, quantized
def test_fp32_and_int8_differ_only_in_bytes(run: Callable[..., Run], llama: dict[str, Path],
                                            diff_validator: Any) -> None:
    r = run("diff", llama["onnx"], llama["int8"], "-f", "json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert not list(diff_validator.iter_errors(doc))
    assert [b["status"] for b in doc["blocks"]] == ["changed", "changed"]
    assert _changed_fields(doc) == {"weight_bytes"}
    for b in doc["blocks"]:
        size = next(f for f in b["fields"] if f["field"] == "weight_bytes")
        assert size["b"] < size["a"] and size["delta"] == size["b"] - size["a"]
    assert run("diff", llama["onnx"], llama["int8"], "--fail-on-change").code == 1
    text = run("diff", llama["onnx"], llama["int8"]).out
    assert "model.model.layers.{0–1}.self_attn ×2  bytes" in text  # the two layers' same change on one row
    md = run("diff", llama["onnx"], llama["int8"], "-f", "md").out
    assert "| `model.model.layers.{0–1}.self_attn ×2` | bytes |" in md
    page = run("diff", llama["onnx"], llama["int8"], "-f", "html").out
    assert page.startswith("<!DOCTYPE html>") and "model.model.layers.{0–1}.self_attn ×2" in page


def test_a_lost_block_and_a_changed_layout() -> None:
    a = audit(str(ROOT / "sample_models" / "bert_two_layers.onnx"))
    lost = dataclasses.replace(a, blocks=a.blocks[:1])
    d = diff_reports(a, lost)
    assert [b.status for b in d.blocks] == [Change.SAME, Change.ONLY_A] and d.changed
    renamed = dataclasses.replace(a, blocks=tuple(dataclasses.replace(b, name=f"enc.{i}.attn", num_heads=1)
                                                  for i, b in enumerate(a.blocks)))
    pairs = match_blocks(a.blocks, renamed.blocks)
    assert [(i, j, how) for i, j, how in pairs] == [(0, 0, MatchedBy.POSITION), (1, 1, MatchedBy.POSITION)]
    d = diff_reports(a, renamed)
    heads = [next(f for f in b.fields if f.field == "num_heads") for b in d.blocks]
    assert all(h.changed and h.b == 1 for h in heads)


def test_bad_input_is_one_line(run: Callable[..., Run], tmp_path: Path) -> None:
    r = run("diff", ROOT / "sample_models" / "gqa_llama.onnx", tmp_path / "missing.onnx")
    assert r.code == 2 and r.err.startswith("mhainspect: error:") and "Traceback" not in r.err


def test_python_api_diff() -> None:
    import mhainspect

    samples = ROOT / "sample_models"
    d = mhainspect.diff(str(samples / "gqa_llama.onnx"), str(samples / "llama_kv_cache.onnx"))
    assert d.changed and "diff" in dir(mhainspect)
    kv = [f for b in d.to_dict()["blocks"] for f in b["fields"] if f["field"] == "kv_cache_bytes_per_token"]
    assert [(f["a"], f["b"], f["changed"]) for f in kv] == [(None, 128, True)]  # a cache the graph shows
    assert "model.layers.0.self_attn  KV/token  ?  128" in str(d)
    same = mhainspect.diff(mhainspect.inspect(str(samples / "gqa_llama.onnx")), str(samples / "gqa_llama.onnx"))
    assert not same.changed
