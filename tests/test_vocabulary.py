"""Closed vocabularies: the JSON schema lists exactly the Python enums, members print as their
values (so output is byte-identical to the strings they replaced), and unknown words are refused."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import pytest

from mhainspect.analysis.flags import FLAG_CODES
from mhainspect.render.cells import verify_label
from mhainspect.results import (
    AttentionBlock,
    BlockKind,
    BlockVerification,
    CacheStatus,
    Evidence,
    EvidenceSource,
    Matcher,
    Miss,
    ParamBreakdown,
    ReportWarning,
    VerifyStatus,
    WarningCode,
    warning_code,
)

SCHEMA = json.loads((Path(__file__).parents[1] / "docs" / "report.schema.json").read_text(encoding="utf-8"))
DOCS = Path(__file__).parents[1] / "docs"
FLAGS_MD = (DOCS / "flags.md").read_text(encoding="utf-8")
JSON_MD = (DOCS / "json.md").read_text(encoding="utf-8")  # the JSON fields in words (moved from the README)
PATTERNS_MD = (DOCS / "patterns.md").read_text(encoding="utf-8")  # what is recognised and counted


def _values(enum: type) -> set[str]:
    return {m.value for m in enum}


def test_schema_lists_the_python_enums() -> None:
    defs = SCHEMA["$defs"]
    assert set(defs["evidence"]["properties"]["source"]["enum"]) == _values(EvidenceSource)
    assert set(defs["block"]["properties"]["kind"]["enum"]) == _values(BlockKind)
    assert set(defs["verification"]["properties"]["status"]["enum"]) == _values(VerifyStatus)
    assert set(defs["kvCache"]["properties"]["status"]["enum"]) == _values(CacheStatus)
    assert set(defs["block"]["properties"]["kv_cache_status"]["enum"]) == _values(CacheStatus) | {None}
    pattern = defs["matcher"]["pattern"]
    assert set(re.fullmatch(r"\^\((.*)\)\(:\.\+\)\?\$", pattern).group(1).split("|")) == _values(Matcher)  # type: ignore[union-attr]


def test_every_flag_code_is_in_the_schema_the_flags_table_and_its_sections() -> None:
    """One vocabulary of flag codes (flags.FLAG_CODES) with one severity each, everywhere it is listed."""
    assert SCHEMA["$defs"]["flag"]["properties"]["code"]["enum"] == list(FLAG_CODES)
    table = dict(re.findall(r"^\| (MHA\d{3}) \| (\w+) \|", FLAGS_MD, re.M))
    headings = dict(re.findall(r"^## (MHA\d{3}) — .*\((\w+)\)$", FLAGS_MD, re.M))
    expected = {code: str(severity) for code, (severity, _) in FLAG_CODES.items()}
    assert table == expected and headings == expected


def test_json_docs_list_every_evidence_source() -> None:
    listed = JSON_MD[JSON_MD.index("`evidence[].source` is one of"):]
    listed = listed[:listed.index("never renamed")]
    assert _values(EvidenceSource) <= set(re.findall(r"`([a-z_]+)`", listed))


def test_members_print_as_their_values() -> None:
    assert f"{EvidenceSource.WEIGHT_SHAPE}" == str(EvidenceSource.WEIGHT_SHAPE) == "weight_shape"
    assert json.dumps({"s": VerifyStatus.CONFIRMED}) == '{"s": "confirmed"}'
    assert f"{BlockKind.CROSS:>6}" == " cross"


def _block(**kw: object) -> AttentionBlock:
    fields = dict(name="b", matcher="decomposed", kind="self", num_heads=None, num_kv_heads=None, d_model=None,
                  d_k=None, d_v=None, params=ParamBreakdown(0, 0, 0, 0, 0, 0), projections=(), evidence=())
    fields.update(kw)
    return AttentionBlock(**fields)  # type: ignore[arg-type]


def test_bare_words_become_members_and_unknown_words_are_refused() -> None:
    assert Evidence("d_k", 8, "shape", "").source is EvidenceSource.SHAPE
    assert _block().matcher is Matcher.DECOMPOSED and _block().kind is BlockKind.SELF
    assert _block(matcher="fused:com.microsoft.Attention").matcher == "fused:com.microsoft.Attention"
    assert BlockVerification("b", "observed").status is VerifyStatus.OBSERVED
    assert Miss("fused", "n", "why").matcher is Matcher.FUSED
    for make in (lambda: Evidence("d_k", 8, "guess", ""), lambda: _block(kind="both"),
                 lambda: _block(matcher="regex:x"), lambda: BlockVerification("b", "maybe")):
        with pytest.raises(ValueError):
            make()


def test_warnings_are_text_with_a_code() -> None:
    w = ReportWarning("external data location 'x' ...", WarningCode.EXTERNAL_DATA_OUTSIDE)
    assert w == "external data location 'x' ..." and json.dumps([w]) == json.dumps(["external data location 'x' ..."])
    assert warning_code(w) is WarningCode.EXTERNAL_DATA_OUTSIDE
    assert warning_code("something a loader noticed") is WarningCode.LOADER
    assert warning_code(pickle.loads(pickle.dumps(w))) is WarningCode.EXTERNAL_DATA_OUTSIDE


def test_contradicted_label_uses_the_disagreement_not_the_reason_text() -> None:
    v = BlockVerification("b", VerifyStatus.CONTRADICTED, 4, 4, reason="saw 4 heads, static 8 (Softmax (x) [2, 4])",
                          disagreement="saw 4 heads, static 8")
    assert verify_label(v) == "contradicted (saw 4 heads, static 8)"


def test_docs_describe_what_the_size_and_accounting_passes_now_do() -> None:
    """Rules added to the code are in the JSON contract's words: a caching near miss (Miss.caches)
    makes the model's KV cache unknown; masks read only by comparisons and fused ops' cos/sin
    caches are not parameters."""
    status = SCHEMA["$defs"]["kvCache"]["properties"]["status"]["description"]
    unknown = status[status.index("unknown:"):]
    assert "near miss" in unknown
    docs_unknown = JSON_MD[JSON_MD.index("`unknown` (some block"):]
    assert "near" in docs_unknown[:docs_unknown.index("`reason`")]
    total = SCHEMA["$defs"]["model"]["properties"]["total_params"]["description"]
    not_counted = total[total.index("Not counted"):]
    docs_not = PATTERNS_MD[PATTERNS_MD.index("Not parameters:"):PATTERNS_MD.index("`attention_params` sums")]
    for text in (not_counted, docs_not):
        assert "comparisons" in text and "RotaryEmbedding" in text
    # A block applied N times (applications) caches N times its own per-token figure.
    per_block = SCHEMA["$defs"]["block"]["properties"]["kv_cache_bytes_per_token"]["description"]
    docs_sum = JSON_MD[JSON_MD.index("`bytes_per_token` sums"):JSON_MD.index("`total_bytes` is that at")]
    assert "applications" in per_block and "applications" in docs_sum
