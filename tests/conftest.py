"""Shared fixtures: repo paths, sample-model ground truth, JSON Schema validators, --update-golden."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO_ROOT / "sample_models"
DOCS_DIR = REPO_ROOT / "docs"
GOLDEN_DIR = REPO_ROOT / "tests" / "golden"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every conformance test is slow too (the zoo export), so -m 'not slow' is the one quick loop."""
    for item in items:
        if item.get_closest_marker("conformance") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="Rewrite tests/golden/*.json from the current analysis output instead of comparing.",
    )


@pytest.fixture(scope="session")
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    return SAMPLE_DIR


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    return GOLDEN_DIR


@pytest.fixture(scope="session")
def expected() -> dict[str, Any]:
    """sample_models/expected.json: ground truth keyed by file stem."""
    return json.loads((SAMPLE_DIR / "expected.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _load_schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((DOCS_DIR / name).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return schema


@pytest.fixture(scope="session")
def report_schema() -> dict[str, Any]:
    return _load_schema("report.schema.json")


@pytest.fixture(scope="session")
def schema_validator(report_schema: dict[str, Any]) -> Draft202012Validator:
    """Validator for one single-model report (docs/report.schema.json)."""
    return Draft202012Validator(report_schema)


@pytest.fixture(scope="session")
def multi_schema_validator(report_schema: dict[str, Any]) -> Draft202012Validator:
    """Validator for the multi-model document; the single-report schema is registered by its $id."""
    multi = _load_schema("multi-report.schema.json")
    registry: Registry[Any] = Registry().with_resource(report_schema["$id"], Resource.from_contents(report_schema))
    return Draft202012Validator(multi, registry=registry)



@pytest.fixture(scope="session")
def batch_record_validator(report_schema: dict[str, Any]) -> Draft202012Validator:
    """Validator for one line of a --from-file run (docs/batch-record.schema.json)."""
    record = _load_schema("batch-record.schema.json")
    registry: Registry[Any] = Registry().with_resource(report_schema["$id"], Resource.from_contents(report_schema))
    return Draft202012Validator(record, registry=registry)


# Tests whose inputs are broken on purpose (weights refused or dropped, fields mutated at random):
# there a block may count a weight the total does not, and the report says so in a warning.
_GAP_EXPECTED = ("test_hostile_inputs.py", "test_fuzz.py", "test_accounting_gap")


@pytest.fixture(autouse=True)
def _accounting_never_below_attention(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model's total never falls below its attention parameters: every report the suite builds
    fails its test loudly when it does (mhainspect.analysis.report.accounting_gap), except in the
    tests of broken inputs."""
    if any(part in request.node.nodeid for part in _GAP_EXPECTED):
        return
    import mhainspect.analysis.report as report_module

    checked = report_module.accounting_gap

    def strict(total: int, attention: int) -> Any:
        gap = checked(total, attention)
        if gap is not None:
            raise AssertionError(f"accounting gap in {request.node.nodeid}: {gap}")
        return gap

    monkeypatch.setattr(report_module, "accounting_gap", strict)
