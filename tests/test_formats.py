"""Several models and directories; json / jsonl / github / sarif output parsed back and validated."""

from __future__ import annotations

import json
import os
import re
import shutil
import unicodedata
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from jsonschema import Draft4Validator, Draft202012Validator
from typer.testing import CliRunner

from mhainspect.analysis.flags import FLAG_CODES
from mhainspect.analysis.gates import GateConfig, evaluate_gates, parse_limit
from mhainspect.analysis.verify import attach
from mhainspect.cli.app import app
from mhainspect.pipeline import audit
from mhainspect.render.github import render_github
from mhainspect.render.markdown import render_markdown
from mhainspect.render.sarif import FLAG_ANCHORS, GATE_RULES, VERIFY_RULE, sarif_dict
from mhainspect.results import BlockVerification, Flag, Report, Severity

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_models"
SAMPLE_FILES = sorted(SAMPLES.glob("*.onnx"))
STANDARD = SAMPLES / "standard_mha.onnx"
KERAS = SAMPLES / "keras_per_head.onnx"
T5 = SAMPLES / "t5_unscaled.onnx"
SARIF_SCHEMA = REPO_ROOT / "tests" / "data" / "sarif-schema-2.1.0.json"
GITHUB_LINE = re.compile(r"^::(?P<cmd>error|warning|notice) file=(?P<file>[^,:]+),title=(?P<title>[^,:]+)::(?P<msg>.+)$")


@pytest.fixture(autouse=True)
def _in_repo_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Relative sample paths, and an empty [tool.mhainspect] so no outer config applies."""
    work = tmp_path / "cwd"
    (work / "sample_models").mkdir(parents=True)
    for path in SAMPLE_FILES:
        os.symlink(path, work / "sample_models" / path.name)
    (work / "pyproject.toml").write_text("[tool.mhainspect]\n", encoding="utf-8")
    monkeypatch.chdir(work)


def run(*args: str | os.PathLike[str]) -> Any:
    result = CliRunner().invoke(app, ["inspect", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def errors_of(validator: Draft4Validator | Draft202012Validator, doc: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


def with_path(report: Report, path: str, *flags: Flag) -> Report:
    return replace(report, model=replace(report.model, path=path), flags=flags)


@pytest.fixture(scope="module")
def sarif_validator() -> Draft4Validator:
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    Draft4Validator.check_schema(schema)
    return Draft4Validator(schema, format_checker=Draft4Validator.FORMAT_CHECKER)


@pytest.fixture(scope="module")
def reports() -> list[Report]:
    return [audit(Path("sample_models") / p.name) for p in SAMPLE_FILES]


# ----------------------------------------------------------------------------- directories


def test_directory_json_is_one_multi_document(multi_schema_validator: Draft202012Validator) -> None:
    result = run("sample_models", "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert not errors_of(multi_schema_validator, doc)
    assert [m["model"]["path"] for m in doc["models"]] == [f"sample_models/{p.name}" for p in SAMPLE_FILES]


def test_directory_with_one_model_is_still_multi(tmp_path: Path, multi_schema_validator: Draft202012Validator) -> None:
    folder = tmp_path / "one"
    folder.mkdir()
    shutil.copy(STANDARD, folder / "m.onnx")
    doc = json.loads(run(folder, "--format", "json").stdout)
    assert not errors_of(multi_schema_validator, doc) and len(doc["models"]) == 1
    single = json.loads(run(folder / "m.onnx", "--format", "json").stdout)
    assert "models" not in single and single["model"]["total_params"] == 16_768


def test_directory_recursive_sorted_onnx_only(tmp_path: Path) -> None:
    root = tmp_path / "models"
    for rel in ["b.onnx", "a/z.onnx", "a/b/c.ONNX", "a.onnx"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(STANDARD, root / rel)
    (root / "notes.txt").write_text("not a model", encoding="utf-8")
    (root / "a" / "weights.onnx.data").write_bytes(b"\0" * 8)
    result = run(root, "--format", "jsonl")
    assert result.exit_code == 0, result.stderr
    paths = [json.loads(line)["model"]["path"] for line in result.stdout.splitlines()]
    assert paths == [str(root / rel) for rel in ["a/b/c.ONNX", "a/z.onnx", "a.onnx", "b.onnx"]]


def test_files_and_directories_mixed_no_duplicates(tmp_path: Path) -> None:
    root = tmp_path / "m"
    root.mkdir()
    shutil.copy(STANDARD, root / "x.onnx")
    paths = [json.loads(line)["model"]["path"] for line in run(KERAS, root, root / "x.onnx", "-f", "jsonl").stdout.splitlines()]
    assert paths == [str(KERAS), str(root / "x.onnx")]


def test_directory_without_models_exit_2(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "readme.md").write_text("x", encoding="utf-8")
    result = run(tmp_path / "empty", STANDARD)
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mhainspect: error: {tmp_path / 'empty'}: no models in this folder")


# ----------------------------------------------------------------------------- json / jsonl


def test_several_files_json(multi_schema_validator: Draft202012Validator) -> None:
    result = run(STANDARD, KERAS, T5, "--format", "json")
    doc = json.loads(result.stdout)
    assert not errors_of(multi_schema_validator, doc)
    assert [m["model"]["total_params"] for m in doc["models"]] == [16_768, 8_416, 16_576]


def test_jsonl_lines_parse(schema_validator: Draft202012Validator) -> None:
    result = run("sample_models", "--format", "jsonl")
    lines = result.stdout.splitlines()
    assert len(lines) == len(SAMPLE_FILES)
    for line in lines:
        doc = json.loads(line)
        assert not errors_of(schema_validator, doc)


# ----------------------------------------------------------------------------- github


def test_github_one_annotation_per_flag(reports: list[Report]) -> None:
    result = run("sample_models", "--format", "github")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    flags = [(r.model.path, f) for r in reports for f in r.flags]
    assert len(lines) == len(flags) > 0
    expected_cmd = {Severity.WARNING: "warning", Severity.INFO: "notice", Severity.ERROR: "error"}
    for line, (path, flag) in zip(lines, flags):
        m = GITHUB_LINE.match(line)
        assert m, line
        assert (m["cmd"], m["file"], m["title"]) == (expected_cmd[flag.severity], path, flag.code)
        assert flag.message.split()[0] in m["msg"]
        if flag.block is not None:
            assert m["msg"].startswith(f"{flag.block}: ")


def test_github_gate_errors() -> None:
    result = run("sample_models/keras_per_head.onnx", "sample_models/standard_mha.onnx", "--format", "github",
                 "--max-params", "10k", "--fail-on", "MHA001")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines == [
        lines[0],
        "::error file=sample_models/keras_per_head.onnx,title=mhainspect fail-on MHA001::gate failed: "
        "sample_models/keras_per_head.onnx has 1 MHA001 flag (--fail-on MHA001)",
        "::error file=sample_models/standard_mha.onnx,title=mhainspect max-params::gate failed: "
        "sample_models/standard_mha.onnx has 16,768 parameters > --max-params 10k (10,000)",
    ]
    assert lines[0].startswith("::warning file=sample_models/keras_per_head.onnx,title=MHA001::")


def test_github_nothing_to_say_is_empty() -> None:
    result = run(STANDARD, "--format", "github")
    assert result.exit_code == 0 and result.stdout == ""


def test_github_escapes(reports: list[Report]) -> None:
    weird = with_path(reports[0], "dir,1/a:b%.onnx", Flag("MHA002", Severity.INFO, "blk", "50% wider\nsecond line\r"))
    (line,) = render_github([weird]).splitlines()
    assert line == "::notice file=dir%2C1/a%3Ab%25.onnx,title=MHA002::blk: 50%25 wider second line"


# ----------------------------------------------------------------------------- sarif


def test_sarif_validates_and_maps_flags(sarif_validator: Draft4Validator, reports: list[Report]) -> None:
    result = run("sample_models", "--format", "sarif")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    errors = errors_of(sarif_validator, doc)
    assert not errors, "\n".join(errors)
    assert doc["version"] == "2.1.0"
    (run_,) = doc["runs"]
    rules = run_["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [*FLAG_CODES, *GATE_RULES, VERIFY_RULE[0]]
    for rule in rules:
        assert rule["shortDescription"]["text"]
        # Links only where pyproject.toml's [project.urls] says where the docs are (never an invented host).
        assert "helpUri" not in rule or urlparse(rule["helpUri"]).scheme == "https"
    flags = [(r.model.path, f) for r in reports for f in r.flags]
    assert len(run_["results"]) == len(flags)
    level = {Severity.WARNING: "warning", Severity.INFO: "note", Severity.ERROR: "error"}
    for res, (path, flag) in zip(run_["results"], flags):
        assert res["ruleId"] == flag.code and rules[res["ruleIndex"]]["id"] == flag.code
        assert res["level"] == level[flag.severity]
        (loc,) = res["locations"]
        assert loc["physicalLocation"]["artifactLocation"]["uri"] == path
        if flag.block is not None:
            assert loc["logicalLocations"][0]["fullyQualifiedName"] == flag.block
    assert run_["invocations"] == [{"executionSuccessful": True}]


def test_sarif_gate_results(sarif_validator: Draft4Validator) -> None:
    result = run("sample_models/t5_unscaled.onnx", "--format", "sarif", "--max-attention-params", "16k",
                 "--fail-on", "MHA003")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert not errors_of(sarif_validator, doc)
    gates = [r for r in doc["runs"][0]["results"] if r["ruleId"] in GATE_RULES]
    assert [(g["ruleId"], g["level"]) for g in gates] == [("max-attention-params", "error"), ("fail-on", "error")]
    assert gates[0]["properties"] == {"actual": 16_384, "limit": 16_000}


def test_sarif_uris(reports: list[Report], sarif_validator: Draft4Validator) -> None:
    spaced = with_path(reports[0], "./my models/a#1.onnx", Flag("MHA002", Severity.INFO, None, "m"))
    absolute = with_path(reports[0], "/srv/m.onnx", Flag("MHA002", Severity.INFO, None, "m"))
    doc = sarif_dict([spaced, absolute], evaluate_gates([spaced], GateConfig(max_params=parse_limit("1"))),
                     execution_successful=False)
    assert not errors_of(sarif_validator, doc)
    artifacts = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in doc["runs"][0]["results"]]
    assert artifacts == [{"uri": "my%20models/a%231.onnx", "uriBaseId": "%SRCROOT%"}, {"uri": "file:///srv/m.onnx"},
                         {"uri": "my%20models/a%231.onnx", "uriBaseId": "%SRCROOT%"}]
    assert doc["runs"][0]["invocations"] == [{"executionSuccessful": False}]


def _github_slug(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation and symbols dropped, spaces -> '-'."""
    kept = "".join(c for c in heading.lower()
                   if c in "- " or unicodedata.category(c)[0] in "LNM" or unicodedata.category(c) == "Pc")
    return kept.replace(" ", "-")


def test_sarif_help_anchors_exist_in_docs() -> None:
    flags_md = (REPO_ROOT / "docs" / "flags.md").read_text(encoding="utf-8")
    anchors = {_github_slug(line[3:].strip()) for line in flags_md.splitlines() if line.startswith("## ")}
    assert set(FLAG_CODES) == set(FLAG_ANCHORS)
    assert set(FLAG_ANCHORS.values()) <= anchors
    cli_md = (REPO_ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    cli_anchors = {_github_slug(line.lstrip("#").strip()) for line in cli_md.splitlines() if line.startswith("#")}
    assert {anchor for _, anchor in GATE_RULES.values()} | {VERIFY_RULE[2]} <= cli_anchors


# ----------------------------------------------------------------------------- --verify in every format


def _verified(report: Report) -> Report:
    """The report as a --verify run that contradicts its first block and confirms the others would leave it."""
    first, *rest = report.blocks
    wrong = (first.num_heads or 1) * 2
    return attach(report, (BlockVerification(first.name, "contradicted", wrong, wrong,
                                             f"saw {wrong} heads, static {first.num_heads} (Softmax 'p')",
                                             disagreement=f"saw {wrong} heads, static {first.num_heads}"),
                           *(BlockVerification(b.name, "confirmed", b.num_heads, b.num_kv_heads) for b in rest)))


def test_verify_results_in_markdown_github_and_sarif(sarif_validator: Draft4Validator) -> None:
    report = _verified(audit("sample_models/bert_two_layers.onnx"))
    first, second = report.blocks
    markdown = render_markdown(report)
    assert "**Run-time check (--verify)**" in markdown
    markdown = markdown.replace("\\", "")  # markdown escapes of ( and )
    assert f"contradicted (saw {first.verification.observed_heads} heads, static {first.num_heads})" in markdown
    assert f"confirmed ({second.num_heads} heads)" in markdown
    assert "Run-time check" not in render_markdown(audit("sample_models/bert_two_layers.onnx"))

    failures = evaluate_gates([report], GateConfig(fail_on_contradiction=True))
    assert [(f.gate, f.actual) for f in failures] == [("fail-on-contradiction", 1)]
    assert first.name in failures[0].message
    assert not evaluate_gates([report], GateConfig())  # only the gate makes a contradiction fail

    lines = render_github([report], failures).splitlines()
    parsed = [GITHUB_LINE.match(line) for line in lines]
    assert all(parsed)
    verify_lines = [m for m in parsed if m is not None and m["title"] == "mhainspect verify"]
    assert [(m["cmd"], m["msg"].split(":")[0]) for m in verify_lines] == [("warning", first.name)]
    assert parsed[-1] is not None and parsed[-1]["cmd"] == "error" and "fail-on-contradiction" in parsed[-1]["title"]

    doc = sarif_dict([report], failures)
    assert not errors_of(sarif_validator, doc)
    results = doc["runs"][0]["results"]
    contradiction = [r for r in results if r["ruleId"] == VERIFY_RULE[0]]
    assert len(contradiction) == 1 and contradiction[0]["level"] == "warning"
    assert contradiction[0]["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == first.name
    assert contradiction[0]["properties"]["static_heads"] == first.num_heads
    gate = [r for r in results if r["ruleId"] == "fail-on-contradiction"]
    assert len(gate) == 1 and gate[0]["level"] == "error"
