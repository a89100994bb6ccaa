"""Real-world conformance: models nobody here wrote, exported by both torch exporters.

Every case of tests/conformance/zoo.py (transformers BERT, GPT-2, LLaMA-GQA, T5, ViT in eager and
SDPA attention; torch nn.MultiheadAttention variants, an SDPA module, the Annotated Transformer,
VITS's text encoder and a latent-diffusion VAE attention, whose projections are 1x1 convolutions;
controls without attention) is exported once per session with every exporter variant, audited
with mhainspect, and compared with the ground truth read from the torch modules themselves.

Exports are reused across runs from a cache keyed by what they depend on (tests/conformance/conftest.py).
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from mhainspect.pipeline import audit  # noqa: E402
from mhainspect.results import Report  # noqa: E402
from tests.conformance import zoo  # noqa: E402
from tests.conformance.conftest import EXTENDED_VARIANTS  # noqa: E402
from tests.conformance.extended import EXTENDED_CASES  # noqa: E402

pytestmark = pytest.mark.conformance

# Differences that are facts of the exported graph, not of the matchers. Each is asserted to still
# hold, so a fix in an exporter (or in mhainspect) shows up as a failure to update this table.
# A parameter the exporter stores twice under a view its constant folding made (a tied embedding
# transposed, a relative-position table gathered by a constant index or padded with zeros) is no
# gap: mhainspect.ir.copies counts it once (tests/test_folded_copies_exports.py: Swin, VITS static,
# SigLIP, OPT and Starcoder2 against their modules). Nor is a parameter looked up by an index buffer
# and folded (gemma3-vlm's vision position table): its values tell how many of its elements it holds.
KNOWN_TOTAL_PARAM_GAPS: dict[str, str] = {
    "resnet": "both exporters fold BatchNorm into the preceding Conv (γ, β become a Conv bias), "
    "so the graph holds fewer parameters than the torch module",
}

_BLOCK_FIELDS = ("kind", "num_heads", "num_kv_heads", "d_model", "d_k", "d_v")
_PARAM_FIELDS = ("q", "k", "v", "o", "bias", "total")


def _entry(manifest: dict[tuple[str, str], dict[str, Any]], case: str, variant: str) -> dict[str, Any]:
    entry = manifest[(case, variant)]
    if entry["error"]:
        pytest.skip(f"exporter cannot export {case} with {variant}: {entry['error']}")
    return entry


def _mismatches(report: Report, entry: dict[str, Any]) -> list[str]:
    truth = entry["blocks"]
    problems: list[str] = []
    if len(report.blocks) != len(truth):
        problems.append(
            f"found {len(report.blocks)} blocks, expected {len(truth)}: " + ", ".join(b.name for b in report.blocks)
        )
    for block, expected in zip(report.blocks, truth):
        where = expected["name_hint"]
        if where and where not in block.name:
            problems.append(f"block '{block.name}' should be named after '{where}'")
        for field in _BLOCK_FIELDS:
            if getattr(block, field) != expected[field]:
                problems.append(f"{where}: {field} {getattr(block, field)} != {expected[field]}")
        for field in _PARAM_FIELDS:
            if getattr(block.params, field) != expected[field]:
                problems.append(f"{where}: params.{field} {getattr(block.params, field)} != {expected[field]}")
    return problems


CASE_VARIANTS = [(c.name, v.name) for c in zoo.CASES for v in zoo.VARIANTS] + [
    (c.name, v.name) for c in EXTENDED_CASES for v in EXTENDED_VARIANTS]


@pytest.mark.parametrize(("case", "variant"), CASE_VARIANTS, ids=[f"{c}-{v}" for c, v in CASE_VARIANTS])
def test_blocks_match_ground_truth(manifest: dict[tuple[str, str], dict[str, Any]], case: str, variant: str) -> None:
    entry = _entry(manifest, case, variant)
    report = audit(entry["path"])
    problems = _mismatches(report, entry)
    assert not problems, "\n".join(problems)
    # MHA004 would mean "could not tell": the suite expects every block identified.
    assert not [f for f in report.flags if f.code == "MHA004"]


@pytest.mark.parametrize(("case", "variant"), CASE_VARIANTS, ids=[f"{c}-{v}" for c, v in CASE_VARIANTS])
def test_total_parameters(manifest: dict[tuple[str, str], dict[str, Any]], case: str, variant: str) -> None:
    entry = _entry(manifest, case, variant)
    report = audit(entry["path"])
    if case in KNOWN_TOTAL_PARAM_GAPS:
        assert report.model.total_params < entry["total_params"], KNOWN_TOTAL_PARAM_GAPS[case]
        return
    assert report.model.total_params == entry["total_params"]
    for block in report.blocks:
        assert block.params.total <= report.model.total_params


@pytest.mark.parametrize(("case", "variant"), CASE_VARIANTS, ids=[f"{c}-{v}" for c, v in CASE_VARIANTS])
def test_flags_follow_the_layout(manifest: dict[tuple[str, str], dict[str, Any]], case: str, variant: str) -> None:
    entry = _entry(manifest, case, variant)
    report = audit(entry["path"])
    flagged = {f.block for f in report.flags if f.code == "MHA001"}
    for block, expected in zip(report.blocks, entry["blocks"]):
        nonstandard = expected["num_heads"] * expected["d_k"] != expected["d_model"]
        assert (block.name in flagged) == nonstandard, f"MHA001 on {block.name}: expected {nonstandard}"
        gqa = expected["num_kv_heads"] < expected["num_heads"]
        assert any(f.code == "MHA005" and f.block == block.name for f in report.flags) == gqa


def test_controls_have_no_attention(manifest: dict[tuple[str, str], dict[str, Any]]) -> None:
    controls = [c.name for c in zoo.CASES if not c.has_attention]
    assert controls, "the zoo must keep models without attention"
    checked = 0
    for case in controls:
        for variant in zoo.VARIANTS:
            entry = manifest[(case, variant.name)]
            if entry["error"]:
                continue
            report = audit(entry["path"])
            assert report.blocks == (), f"false positive in {case}/{variant.name}"
            checked += 1
    assert checked >= len(controls)


def test_t5_is_flagged_non_standard(manifest: dict[tuple[str, str], dict[str, Any]]) -> None:
    entry = _entry(manifest, "t5-eager", "torchscript-17")
    report = audit(entry["path"])
    codes = {f.code for f in report.flags}
    assert {"MHA001", "MHA003"} <= codes
    assert {b.kind for b in report.blocks} == {"self", "cross"}
