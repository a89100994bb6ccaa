"""Issue 29, item 13: what an output says about itself.

JSON names the tool version that wrote it; SARIF results carry partialFingerprints that stay the
same from run to run for the same finding; links to the documentation (SARIF helpUri, the HTML
page) are derived from pyproject.toml's [project.urls] and absent when the project names none.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli_run import in_process
from jsonschema import Draft202012Validator

from mhainspect import __version__
from mhainspect.pipeline import audit
from mhainspect.render import links
from mhainspect.render.html import render_html
from mhainspect.render.json_render import report_to_dict, reports_to_dict
from mhainspect.render.sarif import FINGERPRINT, sarif_dict

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_models"
T5 = SAMPLES / "t5_unscaled.onnx"  # MHA001 and MHA003 on two blocks
BERT = SAMPLES / "bert_two_layers.onnx"



@pytest.fixture()
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    return in_process(capsys, monkeypatch)

def test_json_names_the_tool_version(cli: Any, schema_validator: Draft202012Validator,
                                     multi_schema_validator: Draft202012Validator) -> None:
    one = json.loads(cli(T5, "-f", "json").out)
    assert one["tool_version"] == __version__ and list(one)[:2] == ["schema_version", "tool_version"]
    assert not list(schema_validator.iter_errors(one))
    several = json.loads(cli(T5, BERT, "-f", "json").out)
    assert several["tool_version"] == __version__
    assert all(doc["tool_version"] == __version__ for doc in several["models"])
    assert not list(multi_schema_validator.iter_errors(several))
    lines = cli(T5, BERT, "-f", "jsonl").out.splitlines()
    assert [json.loads(line)["tool_version"] for line in lines] == [__version__, __version__]
    # The schemas require it: a document without one does not validate.
    bare = {k: v for k, v in report_to_dict(audit(T5)).items() if k != "tool_version"}
    assert list(schema_validator.iter_errors(bare))
    multi = {k: v for k, v in reports_to_dict([audit(T5)]).items() if k != "tool_version"}
    assert list(multi_schema_validator.iter_errors(multi))


def test_sarif_results_have_stable_partial_fingerprints(tmp_path: Path) -> None:
    report = audit(T5)
    first = sarif_dict([report])["runs"][0]["results"]
    again = sarif_dict([audit(T5)])["runs"][0]["results"]
    prints = [r["partialFingerprints"][FINGERPRINT] for r in first]
    assert prints == [r["partialFingerprints"][FINGERPRINT] for r in again]  # the same finding, run after run
    assert all(re.fullmatch(r"[0-9a-f]{64}", p) for p in prints)
    assert len(set(prints)) == len(prints)  # each finding (rule, file, block) its own
    # Another file with the same findings: other fingerprints.
    copy = tmp_path / "t5_copy.onnx"
    copy.write_bytes(T5.read_bytes())
    moved = sarif_dict([audit(copy)])["runs"][0]["results"]
    assert not {r["partialFingerprints"][FINGERPRINT] for r in moved} & set(prints)


def test_failed_gates_have_fingerprints_too(cli: Any) -> None:
    doc = json.loads(cli(T5, "-f", "sarif", "--max-params", "1k", "--fail-on", "MHA003").out)
    gates = [r for r in doc["runs"][0]["results"] if r["level"] == "error"]
    assert {r["ruleId"] for r in gates} == {"max-params", "fail-on"}
    assert len({r["partialFingerprints"][FINGERPRINT] for r in gates}) == 2


@pytest.mark.parametrize(("urls", "base"), [
    (["Repository, https://github.com/owner/mhainspect"], "https://github.com/owner/mhainspect/blob/HEAD/docs/"),
    (["Source, https://gitlab.com/group/mhainspect.git"], "https://gitlab.com/group/mhainspect/-/blob/HEAD/docs/"),
    (["Documentation, https://docs.example.org/mhainspect", "Repository, https://github.com/o/r"],
     "https://docs.example.org/mhainspect/"),
    (["Homepage, https://example.org/"], None),  # a host whose file URLs are unknown: no link
    (["Repository, http://github.com/o/r"], None),  # not https
    ([], None),
])
def test_docs_base_is_derived_from_the_project_urls(urls: list[str], base: str | None) -> None:
    assert links.docs_base_from(urls) == base


def test_without_a_project_url_nothing_links_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(links, "docs_base", lambda: None)
    report = audit(T5)
    rules = sarif_dict([report])["runs"][0]["tool"]["driver"]["rules"]
    assert rules and all("helpUri" not in r for r in rules)
    page = render_html([report])
    assert "href=" not in page and "Flag codes: docs/flags.md" in page and "github.com" not in page


def test_with_a_project_url_links_are_derived_from_it(monkeypatch: pytest.MonkeyPatch) -> None:
    base = "https://github.com/owner/mhainspect/blob/HEAD/docs/"
    monkeypatch.setattr(links, "docs_base", lambda: base)
    report = audit(T5)
    rules = {r["id"]: r for r in sarif_dict([report])["runs"][0]["tool"]["driver"]["rules"]}
    assert rules["MHA001"]["helpUri"].startswith(base + "flags.md#mha001")
    assert rules["max-params"]["helpUri"] == base + "cli.md#gates"
    page = render_html([report])
    hrefs = re.findall(r'href="([^"]+)"', page)
    assert hrefs and all(h.startswith(base) for h in hrefs)


def test_the_project_names_no_invented_host() -> None:
    """pyproject.toml is the one place a project URL may be defined; no output names a host of its own."""
    source = "\n".join(p.read_text(encoding="utf-8") for p in (REPO_ROOT / "mhainspect").rglob("*.py"))
    assert "github.com/mhainspect" not in source
    pyproject = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert "github.com/mhainspect/mhainspect" not in pyproject
    assert "<repository URL>" not in (REPO_ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
