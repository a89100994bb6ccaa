"""Sample models vs ground truth (sample_models/expected.json), schema, golden files and invariants.

Golden files live in tests/golden/<stem>.json; regenerate with ``pytest tests/test_samples.py --update-golden``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from mhainspect.pipeline import audit
from mhainspect.render.json_render import report_to_dict, report_to_json
from mhainspect.results import Report

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO_ROOT / "sample_models"
GOLDEN_DIR = REPO_ROOT / "tests" / "golden"
EXPECTED: dict[str, Any] = json.loads((SAMPLE_DIR / "expected.json").read_text(encoding="utf-8"))
STEMS = sorted(EXPECTED)

PARAM_FIELDS = ("q", "k", "v", "o", "bias", "total")
BLOCK_FIELDS = ("kind", "num_heads", "num_kv_heads", "d_model", "d_k", "d_v")

# Flag codes each model must / must not raise (model-level expectations from the sample design).
MUST_HAVE: dict[str, set[str]] = {
    "keras_per_head": {"MHA001"},
    "t5_unscaled": {"MHA001", "MHA003"},
    "gqa_llama": {"MHA005"},
    "llama_kv_cache": {"MHA005"},
    "onnx_attention_23": {"MHA005"},
    "bert_two_layers": {"MHA006"},
}
NEVER_MHA001 = ("standard_mha", "gqa_llama", "llama_kv_cache", "packed_qkv", "ms_attention", "bert_two_layers")

_CACHE: dict[str, Report] = {}


def _report(stem: str) -> Report:
    """Analyse a sample once per session; model.path normalised to ``sample_models/<file>``."""
    if stem not in _CACHE:
        file = EXPECTED[stem]["file"]
        report = audit(SAMPLE_DIR / file)
        rel = (SAMPLE_DIR / file).relative_to(REPO_ROOT).as_posix()
        _CACHE[stem] = dataclasses.replace(report, model=dataclasses.replace(report.model, path=rel))
    return _CACHE[stem]


def test_every_sample_file_has_ground_truth(sample_dir: Path, expected: dict[str, Any]) -> None:
    on_disk = {p.stem for p in sample_dir.glob("*.onnx")}
    assert on_disk == set(expected), "sample_models/*.onnx and expected.json disagree"
    assert all(expected[s]["file"] == f"{s}.onnx" for s in expected)


# ----------------------------------------------------------------------------- (a) ground truth


@pytest.mark.parametrize("stem", STEMS)
def test_blocks_match_expected(stem: str) -> None:
    exp = EXPECTED[stem]
    report = _report(stem)
    assert report.model.total_params == exp["total_params"], "total_params"
    got_names = [b.name for b in report.blocks]
    assert len(report.blocks) == len(exp["blocks"]), f"block count; found {got_names}"
    for i, (block, eb) in enumerate(zip(report.blocks, exp["blocks"])):
        got = {f: getattr(block, f) for f in BLOCK_FIELDS}
        want = {f: eb[f] for f in BLOCK_FIELDS}
        assert got == want, f"block {i} ({block.name})"
        got_p = {f: getattr(block.params, f) for f in PARAM_FIELDS}
        want_p = {f: eb["params"][f] for f in PARAM_FIELDS}
        assert got_p == want_p, f"block {i} ({block.name}) params"
        # Names are hints (exporter scopes); the found name must at least contain the hint.
        assert eb["name_hint"] in block.name, f"block {i}: {block.name!r} lacks hint {eb['name_hint']!r}"


# ----------------------------------------------------------------------------- (b) schema


@pytest.mark.parametrize("stem", STEMS)
def test_json_validates(stem: str, schema_validator: Draft202012Validator) -> None:
    doc = json.loads(report_to_json(_report(stem)))
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in schema_validator.iter_errors(doc)]
    assert not errors, "\n".join(errors)
    assert doc == report_to_dict(_report(stem))


# ----------------------------------------------------------------------------- (c) golden files


@pytest.mark.parametrize("stem", STEMS)
def test_golden(stem: str, update_golden: bool) -> None:
    actual = report_to_json(_report(stem))
    golden = GOLDEN_DIR / f"{stem}.json"
    if update_golden:
        GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
        golden.write_text(actual, encoding="utf-8")
        return
    assert golden.is_file(), f"{golden.relative_to(REPO_ROOT)} missing; run pytest with --update-golden"
    want = golden.read_text(encoding="utf-8")
    if actual != want:
        diff = "".join(difflib.unified_diff(
            want.splitlines(keepends=True), actual.splitlines(keepends=True),
            fromfile=f"tests/golden/{stem}.json", tofile=f"analysis of sample_models/{stem}.onnx"))
        pytest.fail(f"golden mismatch for {stem} (rerun with --update-golden if intended):\n{diff}",
                    pytrace=False)


def test_golden_has_no_stray_files() -> None:
    if not GOLDEN_DIR.is_dir():
        pytest.skip("no golden dir yet")
    assert {p.stem for p in GOLDEN_DIR.glob("*.json")} <= set(STEMS)


# ----------------------------------------------------------------------------- (d) invariants


@pytest.mark.parametrize("stem", STEMS)
def test_block_totals_within_model_total(stem: str) -> None:
    report = _report(stem)
    for b in report.blocks:
        assert b.params.total <= report.model.total_params, b.name
        assert b.params.total == b.params.q + b.params.k + b.params.v + b.params.o, b.name
    assert report.model.attention_params <= report.model.total_params


@pytest.mark.parametrize("stem", STEMS)
def test_head_width_product_or_mha001(stem: str) -> None:
    report = _report(stem)
    mha001 = {f.block for f in report.flags if f.code == "MHA001"}
    for b in report.blocks:
        if None in (b.num_heads, b.d_k, b.d_model):
            continue
        assert b.num_heads * b.d_k == b.d_model or b.name in mha001, (
            f"{b.name}: {b.num_heads} x {b.d_k} != {b.d_model} without MHA001")
        if b.name in mha001:
            assert b.num_heads * b.d_k != b.d_model, f"{b.name}: MHA001 on a standard layout"


@pytest.mark.parametrize("stem", STEMS)
def test_mha004_iff_heads_unknown(stem: str) -> None:
    report = _report(stem)
    mha004 = {f.block for f in report.flags if f.code == "MHA004"}
    assert mha004 <= {b.name for b in report.blocks}
    for b in report.blocks:
        assert (b.name in mha004) == (b.num_heads is None), b.name


@pytest.mark.parametrize("stem", STEMS)
def test_expected_flags(stem: str) -> None:
    codes = {f.code for f in _report(stem).flags}
    missing = MUST_HAVE.get(stem, set()) - codes
    assert not missing, f"{stem}: missing {sorted(missing)}; got {sorted(codes)}"
    if stem in NEVER_MHA001:
        assert "MHA001" not in codes, f"{stem}: unexpected MHA001"


def test_mha001_and_mha003_name_the_t5_blocks() -> None:
    report = _report("t5_unscaled")
    names = {b.name for b in report.blocks}
    for code in ("MHA001", "MHA003"):
        assert {f.block for f in report.flags if f.code == code} == names, code


def test_no_attention_has_no_blocks_but_explains_the_miss() -> None:
    report = _report("no_attention")
    assert report.blocks == ()
    assert report.misses, "expected at least one near miss (the classifier Softmax)"
    assert all(m.reason.strip() for m in report.misses)
    assert report.model.attention_params == 0


def test_the_decoder_sample_shows_its_kv_cache_out_of_the_box() -> None:
    """llama_kv_cache.onnx carries past/present tensors: a KV figure with no option given, read
    from the graph's cache tensors (2 kv heads × (d_k 8 + d_v 8) × 4 bytes of float32)."""
    kv = _report("llama_kv_cache").model.kv_cache
    assert kv is not None and kv.status == "caches"
    assert (kv.bytes_per_token, kv.dtype) == (2 * (8 + 8) * 4, "float32")
    (block,) = _report("llama_kv_cache").blocks
    (evidence,) = [e for e in block.evidence if e.field == "kv_cache_bytes_per_token"]
    assert evidence.source == "cache_tensor" and "past_key_values.0.key" in evidence.detail
    # The same layer without its cache tensors leaves whether it decodes to the caller.
    plain = _report("gqa_llama").model.kv_cache
    assert plain is not None and plain.status == "unknown" and plain.bytes_per_token is None
