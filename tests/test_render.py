"""Rendering layer: JSON contract + schema, rich table, markdown, number helpers."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from mhainspect.ir.units import human_count, parse_count, parse_size, parse_tokens, resolved
from mhainspect.render.json_render import report_to_dict, report_to_json, reports_to_json, reports_to_jsonl
from mhainspect.render.markdown import render_markdown
from mhainspect.render.table import render_table
from mhainspect.results import (
    SCHEMA_VERSION,
    AttentionBlock,
    Evidence,
    Flag,
    Miss,
    ModelSummary,
    ParamBreakdown,
    Projection,
    Report,
    Severity,
    WhatIf,
)

DOCS = Path(__file__).resolve().parents[1] / "docs"
ANSI = re.compile(r"\x1b\[")

TOP_KEYS = ["schema_version", "tool_version", "model", "blocks", "flags", "misses", "warnings"]
MODEL_KEYS = ["path", "format", "total_params", "attention_params", "num_nodes", "opset", "producer"]
BLOCK_KEYS = [
    "name", "matcher", "kind", "num_heads", "num_kv_heads", "d_model", "d_k", "d_v", "scale",
    "params", "projections", "evidence", "what_if", "unknown_reason", "conflicts", "share",
]
PARAM_KEYS = ["q", "k", "v", "o", "total", "bias", "extra"]
PROJ_KEYS = ["role", "weight", "in_features", "out_features", "weight_params", "bias",
             "bias_params", "node"]


# ----------------------------------------------------------------------------- fixtures


def _proj(role: str, prefix: str, d_in: int, d_out: int, bias: bool) -> Projection:
    return Projection(
        role=role,
        weight=f"{prefix}.{role}_proj.weight",
        in_features=d_in,
        out_features=d_out,
        weight_params=d_in * d_out,
        bias=f"{prefix}.{role}_proj.bias" if bias else None,
        bias_params=d_out if bias else 0,
        node=f"/{prefix}/{role}_proj/MatMul",
    )


def standard_block() -> AttentionBlock:
    """nn.MultiheadAttention(512, 8): 4 * (512*512 + 512) = 1,050,624 params."""
    e = 512
    return AttentionBlock(
        name="encoder.layers.0.self_attn",
        matcher="decomposed",
        kind="self",
        num_heads=8,
        num_kv_heads=8,
        d_model=e,
        d_k=64,
        d_v=64,
        params=ParamBreakdown(q=262_656, k=262_656, v=262_656, o=262_656, bias=2048,
                              total=1_050_624),
        projections=tuple(_proj(r, "encoder.layers.0.self_attn", e, e, True) for r in "qkvo"),
        evidence=(
            Evidence("num_heads", 8, "reshape", "/encoder/Reshape shape (0, -1, 8, 64)"),
            Evidence("d_k", 64, "scale", "/encoder/Div by 8.0 = sqrt(64)"),
        ),
        scale=0.125,
        scale_known=True,
        anchor="/encoder/Softmax",
        what_if=(WhatIf(4, 1_050_624, 525_824), WhatIf(16, 1_050_624, 2_100_224)),
    )


def gqa_block() -> AttentionBlock:
    """Llama-style: H=2048, 32 heads, 8 kv heads, head_dim 64, no bias."""
    h_, d = 2048, 64
    return AttentionBlock(
        name="model.layers.0.self_attn",
        matcher="fused",
        kind="self",
        num_heads=32,
        num_kv_heads=8,
        d_model=h_,
        d_k=d,
        d_v=d,
        params=ParamBreakdown(q=4_194_304, k=1_048_576, v=1_048_576, o=4_194_304, bias=0,
                              total=10_485_760),
        projections=(
            _proj("q", "model.layers.0.self_attn", h_, 32 * d, False),
            _proj("k", "model.layers.0.self_attn", h_, 8 * d, False),
            _proj("v", "model.layers.0.self_attn", h_, 8 * d, False),
            _proj("o", "model.layers.0.self_attn", 32 * d, h_, False),
        ),
        evidence=(Evidence("num_kv_heads", 8, "weight_shape", "k_proj.weight (512, 2048)"),),
        scale=0.125,
        scale_known=True,
        anchor="/model/layers.0/Softmax",
    )


def unknown_block() -> AttentionBlock:
    return AttentionBlock(
        name="decoder|attn [0]",  # pipes/brackets: must survive markdown and rich
        matcher="decomposed",
        kind="cross",
        num_heads=None,
        num_kv_heads=None,
        d_model=768,
        d_k=None,
        d_v=None,
        params=ParamBreakdown(q=589_824, k=589_824, v=589_824, o=589_824, bias=0,
                              total=2_359_296, extra=384),
        projections=(),
        evidence=(Evidence("d_model", 768, "weight_shape", "q.weight (768, 768)"),),
        unknown_reason="head split reshape uses a runtime shape",
        conflicts=("scale 0.1 implies d_k=100, reshape implies d_k=64",),
    )


FLAG_GQA = Flag("MHA005", Severity.INFO, "model.layers.0.self_attn",
                "grouped-query attention: K/V width = 8*64 = 512",
                data=(("num_kv_heads", 8), ("kv_width", 512)))
FLAG_UNKNOWN = Flag("MHA004", Severity.WARNING, "decoder|attn [0]",
                    "head count not identifiable: head split reshape uses a runtime shape",
                    data=(("reason", "runtime_shape"), ("d_model", 768), ("scale", 0.1),
                          ("d_k", None)))
FLAG_MODEL = Flag("MHA006", Severity.ERROR, None, "head layout differs between layers")
MISSES = (
    Miss("decomposed", "/pool/Softmax", "no Q/K MatMul feeds the Softmax"),
    Miss("fused", "/head/Softmax", "softmax over the class axis"),
)


def mixed_report() -> Report:
    blocks = (standard_block(), gqa_block(), unknown_block())
    return Report(
        schema_version=SCHEMA_VERSION,
        model=ModelSummary(
            path="models/mixed.onnx", format="onnx", total_params=20_000_000, num_nodes=1234,
            opset=17, producer="pytorch 2.3.0",
            attention_params=sum(b.params.total for b in blocks),
        ),
        blocks=blocks,
        flags=(FLAG_GQA, FLAG_UNKNOWN, FLAG_MODEL),
        misses=MISSES,
        warnings=("external data not read",),
    )


def standard_report() -> Report:
    return Report(
        schema_version=SCHEMA_VERSION,
        model=ModelSummary("mha.onnx", "onnx", 1_050_624, 40, 17, "pytorch", 1_050_624),
        blocks=(standard_block(),),
        flags=(),
        misses=(),
    )


def empty_report() -> Report:
    return Report(
        schema_version=SCHEMA_VERSION,
        model=ModelSummary("cnn.onnx", "onnx", 0, 12, None, "", 0),
        blocks=(),
        flags=(),
        misses=MISSES + (Miss("decomposed", "/x/Softmax", "not a score tensor"),),
    )


ALL_REPORTS = [mixed_report, standard_report, empty_report]


@pytest.fixture(scope="module")
def report_schema() -> dict[str, Any]:
    return json.loads((DOCS / "report.schema.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def validator(report_schema: dict[str, Any]) -> Draft202012Validator:
    Draft202012Validator.check_schema(report_schema)
    return Draft202012Validator(report_schema)


@pytest.fixture(scope="module")
def multi_validator(report_schema: dict[str, Any]) -> Draft202012Validator:
    multi = json.loads((DOCS / "multi-report.schema.json").read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(multi)
    registry: Registry[Any] = Registry().with_resource(
        report_schema["$id"], Resource.from_contents(report_schema)
    )
    return Draft202012Validator(multi, registry=registry)


def _errors(validator: Draft202012Validator, doc: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


# ----------------------------------------------------------------------------- JSON


@pytest.mark.parametrize("make", ALL_REPORTS)
def test_report_dict_validates(make: Any, validator: Draft202012Validator) -> None:
    doc = report_to_dict(make())
    assert _errors(validator, doc) == []
    # and survives a JSON round trip unchanged
    assert json.loads(report_to_json(make())) == doc


def test_contract_keys_and_order() -> None:
    doc = report_to_dict(mixed_report())
    assert list(doc) == TOP_KEYS
    assert list(doc["model"])[: len(MODEL_KEYS)] == MODEL_KEYS
    block = doc["blocks"][0]
    assert list(block)[: len(BLOCK_KEYS)] == BLOCK_KEYS
    assert list(block["params"]) == PARAM_KEYS
    assert list(block["projections"][0]) == PROJ_KEYS
    assert list(block["evidence"][0]) == ["field", "value", "source", "detail"]
    assert list(block["what_if"][0]) == ["num_heads", "total_width_fixed", "head_dim_fixed"]
    assert list(doc["flags"][0]) == ["code", "severity", "block", "message", "data"]
    assert list(doc["misses"][0]) == ["matcher", "anchor", "reason", "node"]
    # declared order of blocks/flags/misses is kept, nothing sorted
    assert [b["name"] for b in doc["blocks"]] == [b.name for b in mixed_report().blocks]
    assert [f["code"] for f in doc["flags"]] == ["MHA005", "MHA004", "MHA006"]
    assert list(doc["flags"][1]["data"]) == ["reason", "d_model", "scale", "d_k"]
    # deterministic text
    text = report_to_json(mixed_report())
    assert text == report_to_json(mixed_report())
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert text.startswith('{\n  "schema_version": ')
    assert text.index('"model"') < text.index('"blocks"') < text.index('"flags"')


def test_values() -> None:
    doc = report_to_dict(mixed_report())
    std, gqa, unk = doc["blocks"]
    assert std["params"] == {"q": 262_656, "k": 262_656, "v": 262_656, "o": 262_656,
                             "total": 1_050_624, "bias": 2048, "extra": 0}
    assert std["share"] == round(1_050_624 / 20_000_000, 6) == 0.052531
    assert std["scale"] == 0.125 and std["kind"] == "self"
    assert gqa["num_heads"] == 32 and gqa["num_kv_heads"] == 8
    assert unk["num_heads"] is None and unk["d_k"] is None and unk["d_v"] is None
    assert unk["scale"] is None and unk["unknown_reason"].startswith("head split")
    assert unk["params"]["extra"] == 384
    assert doc["flags"][0]["severity"] == "info"
    assert doc["flags"][1]["data"] == {"reason": "runtime_shape", "d_model": 768, "scale": 0.1,
                                       "d_k": None}
    assert doc["flags"][2]["block"] is None
    assert doc["warnings"] == ["external data not read"]


def _walk(node: Any, path: str = "$") -> list[tuple[str, Any]]:
    out = [(path, node)]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_walk(v, f"{path}.{k}"))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_walk(v, f"{path}[{i}]"))
    return out


INT_KEYS = {"total_params", "attention_params", "num_nodes", "q", "k", "v", "o", "total", "bias",
            "extra", "weight_params", "bias_params", "total_width_fixed", "head_dim_fixed",
            "in_features", "out_features", "num_heads", "num_kv_heads", "d_model", "d_k", "d_v",
            "opset"}


@pytest.mark.parametrize("make", ALL_REPORTS)
def test_ints_are_ints(make: Any) -> None:
    for path, value in _walk(report_to_dict(make())):
        key = path.rsplit(".", 1)[-1]
        if key in INT_KEYS and value is not None and not isinstance(value, (dict, str)):
            assert type(value) is int, path


def test_numpy_ints_and_nonfinite_floats_are_normalised(validator: Draft202012Validator) -> None:
    np = pytest.importorskip("numpy")
    b = standard_block()
    b = replace(b, num_heads=np.int64(8), scale=float("nan"),
                params=replace(b.params, total=np.int64(1_050_624)),
                evidence=(Evidence("scale", float("inf"), "scale", "x"),))
    r = replace(standard_report(), blocks=(b,))
    doc = report_to_dict(r)
    assert type(doc["blocks"][0]["num_heads"]) is int
    assert type(doc["blocks"][0]["params"]["total"]) is int
    assert doc["blocks"][0]["scale"] is None
    assert doc["blocks"][0]["evidence"][0]["value"] is None
    json.loads(report_to_json(r))  # strict JSON: no NaN/Infinity
    assert _errors(validator, doc) == []


def test_share_null_when_model_total_zero(validator: Draft202012Validator) -> None:
    r = replace(standard_report(), model=replace(standard_report().model, total_params=0))
    doc = report_to_dict(r)
    assert doc["blocks"][0]["share"] is None
    assert _errors(validator, doc) == []


def test_schema_is_strict(validator: Draft202012Validator) -> None:
    base = report_to_dict(mixed_report())

    def broken(mutate: Any) -> list[str]:
        doc = json.loads(json.dumps(base))
        mutate(doc)
        return _errors(validator, doc)

    assert broken(lambda d: d["blocks"][0]["params"].__setitem__("q", 1.5))
    assert broken(lambda d: d["blocks"][0]["params"].__setitem__("qkv", 1))  # closed object
    assert broken(lambda d: d["blocks"][0]["params"].pop("extra"))
    assert broken(lambda d: d["blocks"][0].__setitem__("num_heads", "8"))
    assert broken(lambda d: d["blocks"][0].__setitem__("kind", "mixed"))
    assert broken(lambda d: d["blocks"][0].pop("share"))
    assert broken(lambda d: d["model"].__setitem__("total_params", True))
    assert broken(lambda d: d["model"].pop("opset"))
    assert broken(lambda d: d["flags"][0].__setitem__("severity", "fatal"))
    assert broken(lambda d: d.pop("warnings"))
    # extensions are allowed outside params
    assert not broken(lambda d: d.__setitem__("tool", {"version": "0.1"}))
    assert not broken(lambda d: d["blocks"][0].__setitem__("layer", 0))
    assert not broken(lambda d: d["model"].__setitem__("sha256", "ab"))


def test_multi_report_json_validates(multi_validator: Draft202012Validator) -> None:
    reports = [r() for r in ALL_REPORTS]
    text = reports_to_json(reports)
    assert text.endswith("}\n")
    doc = json.loads(text)
    assert list(doc) == ["schema_version", "tool_version", "models"]
    assert doc["schema_version"] == SCHEMA_VERSION
    assert [m["model"]["path"] for m in doc["models"]] == [r.model.path for r in reports]
    assert _errors(multi_validator, doc) == []
    # a broken inner report is caught through the $ref
    doc["models"][0]["blocks"][0]["params"]["q"] = -1
    assert _errors(multi_validator, doc)
    assert _errors(multi_validator, reports_to_json_empty()) == []


def reports_to_json_empty() -> Any:
    return json.loads(reports_to_json([]))


def test_jsonl(validator: Draft202012Validator) -> None:
    reports = [r() for r in ALL_REPORTS]
    text = reports_to_jsonl(reports)
    lines = text.splitlines()
    assert text.endswith("\n") and len(lines) == len(reports)
    for line, report in zip(lines, reports):
        assert "\n" not in line and ": " not in line.split('"path"')[0]
        doc = json.loads(line)
        assert doc == report_to_dict(report)
        assert _errors(validator, doc) == []
    assert reports_to_jsonl([]) == ""


# ----------------------------------------------------------------------------- table


def test_table_contents() -> None:
    text = render_table(mixed_report(), color=False, width=160)
    assert "models/mixed.onnx" in text
    assert "onnx" in text and "opset 17" in text and "pytorch 2.3.0" in text
    assert "20,000,000" in text  # total with separators
    assert "13,895,680" in text  # attention params (exact in the header)
    assert "69.48%" in text  # attention share
    for col in ("Block", "Kind", "Heads", "d_model", "d_k", "d_v", "Bias", "Total", "Share (%)"):
        assert col in text
    assert "1,050,624" in text and "262,144" in text  # standard block: exact counts everywhere
    # Q/K/V/O without their biases, which have a column of their own: the row adds up to its total
    row = next(ln for ln in text.splitlines() if ln.startswith("encoder.layers.0.self_attn"))
    assert row.split()[6:12] == ["262,144"] * 4 + ["2,048", "1,050,624"]
    assert "32/8 kv" in text and "10,485,760" in text and "4,194,304" in text  # GQA
    assert not re.search(r"\d[kMB]\b", text)  # no abbreviated count at a width that fits exact ones
    assert "decoder|attn [0]" in text  # not eaten as rich markup
    assert "5.25" in text  # standard share (%)
    rows = [ln for ln in text.splitlines() if "decoder|attn" in ln]
    assert rows and "?" in rows[0] and "cross" in rows[0]
    assert "MHA005  info     model.layers.0.self_attn: grouped-query" in text
    assert "MHA004  warning  decoder|attn [0]: head count not identifiable" in text
    assert "MHA006  error    head layout differs" in text
    assert "2 near misses" in text and "--explain" in text
    assert "no Q/K MatMul" not in text  # reasons only in verbose
    assert "external data not read" in text


def test_table_no_ansi_without_color_and_ansi_with() -> None:
    plain = render_table(mixed_report(), color=False, verbose=True)
    assert not ANSI.search(plain)
    colored = render_table(mixed_report(), color=True)
    assert ANSI.search(colored)
    assert ANSI.sub("", colored).count("MHA004") == 1


def test_table_ignores_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    before = render_table(mixed_report(), color=False)
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    assert render_table(mixed_report(), color=False) == before
    assert ANSI.search(render_table(mixed_report(), color=True))


def _table_part(text: str) -> str:
    return text.split("Attention blocks")[1].split("Flags")[0]


def test_table_width_and_layouts() -> None:
    for w in (80, 100, 120, 160):
        for ascii_only in (False, True):
            text = render_table(mixed_report(), color=False, width=w, ascii_only=ascii_only)
            assert max(len(line) for line in _table_part(text).splitlines()) <= w
            assert "Share (%)" in text and "52.43" in text  # never truncated
    assert render_table(mixed_report(), color=False, width=None) == render_table(
        mixed_report(), color=False, width=120
    )
    # full table at 160 (names never folded): Q/K/V/O shown; at 80 they move to a table of their own
    wide = render_table(mixed_report(), color=False, width=160)
    headers = [ln for ln in wide.splitlines() if ln.startswith("Block  ")]
    assert "262,144" in wide and len(headers) == 1
    narrow = render_table(mixed_report(), color=False, width=80)
    headers = [ln for ln in narrow.splitlines() if ln.startswith("Block  ")]
    assert "262,144" in narrow and "columns hidden" not in narrow and len(headers) == 2
    assert headers[1].split() == ["Block", "Q", "K", "V", "O", "Bias"]
    assert "10,485,760" in narrow  # exact counts before anything else
    # names shortened with an ellipsis, still telling the blocks apart, and the table says so
    rows = [ln.split()[0] for ln in _table_part(narrow).splitlines() if "self" in ln.split()[1:2]]
    assert len(rows) == 2 and len(set(rows)) == 2 and all("…" in r for r in rows)
    assert "Block names shortened (…) to fit; -v gives them in full." in narrow
    # narrower: counts abbreviated, and the table says so
    seventy = render_table(mixed_report(), color=False, width=70)
    assert "10.49M" in seventy and "Counts abbreviated to fit 70 columns" in seventy
    # very narrow: one wrapped paragraph per block, exact, nothing lost
    tiny = render_table(mixed_report(), color=False, width=50)
    assert "model.layers.0.self_attn: self, heads 32/8 kv," in tiny
    assert "Q 4,194,304 K" in " ".join(tiny.split())
    assert max(len(line) for line in tiny.splitlines()) <= 50
    # flag messages wrap at word boundaries under themselves (a hanging indent)
    assert "MHA004  warning  decoder|attn [0]: head count not" in tiny
    assert "\n                 identifiable: head split" in tiny
    ascii_text = render_table(mixed_report(), color=False, ascii_only=True)
    assert ascii_text.isascii()
    assert all(line == line.rstrip() for line in ascii_text.splitlines())


def test_table_verbose() -> None:
    text = render_table(mixed_report(), color=False, verbose=True, width=200)
    assert "no Q/K MatMul feeds the Softmax" in text and "/pool/Softmax" in text
    assert "Near misses (2)" in text
    assert "num_heads = 8  (reshape) /encoder/Reshape shape (0, -1, 8, 64)" in text
    assert "unknown: head split reshape uses a runtime shape" in text
    assert "conflict: scale 0.1 implies d_k=100" in text
    assert "what if h=4: 1,050,624 (h*d_k fixed), 525,824 (d_k fixed)" in text
    assert "--explain" not in text


def test_table_empty_report() -> None:
    text = render_table(empty_report(), color=False)
    assert "No attention blocks found (3 near misses)" in text
    assert "--explain" in text
    assert "Block" not in text
    verbose = render_table(empty_report(), color=False, verbose=True)
    assert "not a score tensor" in verbose


def test_table_standard_single_block() -> None:
    text = render_table(standard_report(), color=False)
    assert "1,050,624 total; attention 1,050,624 (100.00%)" in text
    assert "100.00" in text.split("Attention blocks")[1]
    assert "near miss" not in text and "Flags: none" in text


# ----------------------------------------------------------------------------- markdown


def test_markdown() -> None:
    md = render_markdown([mixed_report(), empty_report()], title="mhainspect")
    assert md.startswith("## mhainspect\n")
    assert "### `models/mixed.onnx`" in md and "### `cnn.onnx`" in md
    assert "| Block | Kind | Heads | d_model | d_k | d_v | Q | K | V | O | Bias | Total | Share (%) |" in md
    assert "| --- | --- | ---: |" in md
    assert "| `encoder.layers.0.self_attn` | self | 8 | 512 | 64 | 64 | 262,144 |" in md
    assert "32/8 kv" in md
    assert "`decoder\\|attn [0]`" in md  # pipe escaped inside a table cell
    rows = [ln for ln in md.split("| Block |")[1].splitlines() if ln.startswith("| `")]
    assert len(rows) == 3 and all(ln.count(" | ") == 12 for ln in rows)
    # several models: one row per model first
    overview = md.split("### Models (2)")[1].split("###")[0]
    assert "| `models/mixed.onnx` | ONNX | 20,000,000 | 13,895,680 | 69.48 | 3 | 8, 32/8 kv, ? |" in overview
    assert "- **MHA004** (warning) `decoder|attn [0]`: head count not identifiable" in md
    assert "- **MHA006** (error) head layout differs" in md
    assert "**20,000,000** params" in md
    assert "No attention blocks found." in md
    assert "<summary>3 near misses</summary>" in md
    assert not ANSI.search(md) and md.endswith("\n") and not md.endswith("\n\n")


def test_markdown_single_and_empty() -> None:
    md = render_markdown(standard_report())
    assert md.startswith("## `mha.onnx`") and "No flags." in md
    assert render_markdown([]) == "No models analysed.\n"


# ----------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0"),
        (999, "999"),
        (1_000, "1,000"),
        (9_999, "9,999"),
        (10_000, "10.00k"),
        (262_656, "262.66k"),
        (999_999, "1.00M"),
        (1_050_624, "1.05M"),
        (7_000_000_000, "7.00B"),
        (1_500_000_000_000, "1.50T"),
        (-1_050_624, "-1.05M"),
    ],
)
def test_human_count(n: int, text: str) -> None:
    assert human_count(n) == text


@pytest.mark.parametrize(
    ("text", "n"),
    [
        ("1000", 1000),
        ("1_000", 1000),
        ("1,050,624", 1_050_624),
        ("120k", 120_000),
        ("120K", 120_000),
        ("1.5M", 1_500_000),
        ("1.5m", 1_500_000),
        ("7B", 7_000_000_000),
        ("2t", 2_000_000_000_000),
        (" 1.05 M ", 1_050_000),
        ("1e6", 1_000_000),
        ("8Ki", 8192),
        ("1.5Mi", 1_572_864),
        ("0", 0),
        ("1.0", 1),
    ],
)
def test_parse_count(text: str, n: int) -> None:
    assert parse_count(text) == n
    assert type(parse_count(text)) is int


@pytest.mark.parametrize(
    "text",
    ["", "  ", "abc", "M", "1.5", "1.2345k", "-5", "+5", "1__000", "_1", "1_", "1,00", "1,0000",
     "1.5.3", "1MB", "1KiB", "1Bi", "1 000", "nan", "inf", "0x10", "1e999", "1e6k", "１２"],
)
def test_parse_count_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_count(text)


@pytest.mark.parametrize(("text", "n"), [
    ("4096", 4096), ("4096B", 4096), ("512MB", 512_000_000), ("512M", 512_000_000), ("80G", 80 * 10**9),
    ("80GB", 80 * 10**9), ("80 gb", 80 * 10**9), ("24GiB", 24 * 2**30), ("24Gi", 24 * 2**30), ("512 MiB", 512 * 2**20),
    ("1.5G", 1_500_000_000), ("1.5GiB", 3 * 2**29), ("1KiB", 1024), ("1kB", 1000), ("2TB", 2 * 10**12), (4096, 4096),
])
def test_sizes_read_by_the_one_rule(text: str | int, n: int) -> None:
    """Bytes follow the rule of every count: G is 10^9, GiB 2^30; B is the byte symbol, not a billion."""
    assert parse_size(text) == n
    assert type(parse_size(text)) is int


@pytest.mark.parametrize("text", ["", "G", "GiB", "0", "0B", "-1", "2X", "1.0000000001k", "1BB", "1iB", "True", True])
def test_sizes_refuse_the_rest(text: str | bool) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_one_meaning_of_k_everywhere() -> None:
    """The same text is the same number whatever it sizes: k is 1,000 for counts, tokens and bytes."""
    assert parse_count("8k") == parse_tokens("8k") == parse_size("8k") == 8000
    assert parse_count("8Ki") == parse_tokens("8Ki") == parse_size("8KiB") == 8192
    assert resolved("8k", 8000, "tokens") == "8k = 8,000 tokens" and resolved("8192", 8192, "tokens") == "8192"
    assert resolved("24GiB", 24 * 2**30, "bytes") == "24GiB = 25,769,803,776 bytes (24 GiB)"
