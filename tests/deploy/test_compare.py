"""The deployment suite's comparison (tests/deploy/corpus.py) on bundled sample models: it can fail.

Runs without the corpus: the truth of sample_models/expected.json, changed on purpose, must come
out as wrong, missing, duplicated or extra blocks.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from mhainspect.pipeline import audit
from tests.deploy.corpus import compare


def _truth(expected: dict[str, Any], stem: str) -> list[dict[str, Any]]:
    return [{**{k: v for k, v in b.items() if k != "params"}, **b["params"]} for b in expected[stem]["blocks"]]


def test_exact_when_truth_matches(sample_dir: Path, expected: dict[str, Any]) -> None:
    report = audit(sample_dir / "bert_two_layers.onnx")
    outcome = compare(report, _truth(expected, "bert_two_layers"))
    assert outcome.ok and outcome.exact == outcome.expected == 2, outcome.problems()


def test_wrong_field_is_named_with_both_values(sample_dir: Path, expected: dict[str, Any]) -> None:
    truth = _truth(expected, "gqa_llama")
    truth[0]["num_kv_heads"] = truth[0]["num_heads"]
    outcome = compare(audit(sample_dir / "gqa_llama.onnx"), truth)
    assert not outcome.ok and outcome.exact == len(truth) - 1
    (name, difference), = outcome.wrong
    got = next(b.num_kv_heads for b in audit(sample_dir / "gqa_llama.onnx").blocks if b.name == name)
    assert difference == f"num_kv_heads {got} != {truth[0]['num_heads']}"


def test_missing_extra_and_duplicated(sample_dir: Path, expected: dict[str, Any]) -> None:
    report = audit(sample_dir / "bert_two_layers.onnx")
    truth = _truth(expected, "bert_two_layers")
    assert compare(report, truth + [dict(truth[0])]).missing == 1
    extra = compare(report, truth[:1])
    assert len(extra.extra) == 1 and extra.exact == 1
    doubled = dataclasses.replace(report, blocks=report.blocks + report.blocks[:1])
    outcome = compare(doubled, truth)
    assert outcome.duplicated == (report.blocks[0].name,) and outcome.exact == 2 and not outcome.ok


def test_control_has_no_block(sample_dir: Path) -> None:
    assert compare(audit(sample_dir / "no_attention.onnx"), []).ok
