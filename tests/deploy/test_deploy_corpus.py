"""Deployment conformance: files made by the real deployment toolchains, block by block against truth.

The corpus (scripts/make_deploy_corpus.py, run in its own virtual environment because optimum-onnx
pins an older transformers) holds optimum-onnx exports (without past, with past, merged decoders,
--optimize O2), onnxruntime-genai builder models (fp32, int4 as MatMulNBits and as QDQ),
onnxruntime.quantization outputs (dynamic int8, static int8 as QDQ and as QOperator, MatMulNBits 4-bit
QOperator and QDQ, also of the with-past and O2 exports), onnxruntime's transformer optimizer with
MultiHeadAttention, fp16 conversions and onnxslim outputs of small random-weight
Hugging Face models, plus controls without attention. Its truth.json
holds, per file, the attention blocks read from the torch modules.

Point MHAINSPECT_DEPLOY_CORPUS at the folder. Unset: the suite skips locally and FAILS under CI=true,
because a suite that silently does not run is a defect (.ci/run builds the corpus and sets it).

KNOWN_GAPS lists the files mhainspect gets wrong today, each with what it observed; they are
xfail(strict=True), so a fix shows up as XPASS and the entry must go. KNOWN_SKIPPED_STEPS lists the
generation steps that a toolchain itself cannot do; any other failed step fails the suite.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.corpus import ENV_VAR, corpus_root, evaluate, file_entries, load_manifest, skipped_steps

# file (relative to the corpus) -> why, and what mhainspect reports wrong today (`got != truth`, per block).
# Printed from a corpus by `python scripts/deploy_report.py CORPUS --gaps`; update it when a fix lands.
KNOWN_GAPS: dict[str, str] = {}  # empty since issue 15's engine work (deploy, identity) landed: 272/272 exact

# generation step -> why the toolchain cannot produce it (the step is recorded as skipped in truth.json).
KNOWN_SKIPPED_STEPS: dict[str, str] = {}


def _manifest() -> tuple[Path, dict[str, Any]] | None:
    root = corpus_root()
    if root is None:
        return None
    return root, load_manifest(root)


_LOADED = _manifest()
_ENTRIES = file_entries(_LOADED[1]) if _LOADED else []
_IDS = [e["file"] for e in _ENTRIES]


def test_corpus_is_given() -> None:
    if _LOADED is not None:
        return
    message = f"{ENV_VAR} is not set: the deployment conformance suite did not run"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + " (.ci/run must build the corpus and export it)")
    pytest.skip(message)


@pytest.mark.parametrize("entry", _ENTRIES, ids=_IDS)
def test_blocks_match_truth(entry: dict[str, Any], request: pytest.FixtureRequest) -> None:
    assert _LOADED is not None
    gap = KNOWN_GAPS.get(entry["file"])
    if gap is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=gap))
    outcome = evaluate(_LOADED[0], entry)
    assert outcome.ok, f"{entry['tool']} on {entry['model']}: " + "; ".join(outcome.problems())


def test_controls_have_no_attention() -> None:
    if _LOADED is None:
        pytest.skip(f"{ENV_VAR} is not set")
    controls = [e for e in _ENTRIES if e["control"]]
    assert controls, "the corpus must keep files without attention"
    for entry in controls:
        outcome = evaluate(_LOADED[0], entry)
        assert outcome.found == 0, f"false positive in {entry['file']}: {outcome.extra}"


def test_generation_steps_ran() -> None:
    """Every toolchain step made its files, except the ones a toolchain is known not to do."""
    if _LOADED is None:
        pytest.skip(f"{ENV_VAR} is not set")
    skipped = skipped_steps(_LOADED[1])
    unexpected = {k: v for k, v in skipped.items() if k not in KNOWN_SKIPPED_STEPS}
    assert not unexpected, "generation steps failed:\n" + "\n".join(f"{k}: {v}" for k, v in unexpected.items())
    stale = sorted(set(KNOWN_SKIPPED_STEPS) - set(skipped))
    assert not stale, f"these steps now run: remove them from KNOWN_SKIPPED_STEPS: {stale}"


def test_known_gaps_name_real_files() -> None:
    if _LOADED is None:
        pytest.skip(f"{ENV_VAR} is not set")
    stale = sorted(set(KNOWN_GAPS) - set(_IDS))
    assert not stale, f"KNOWN_GAPS names files the corpus does not hold: {stale}"
