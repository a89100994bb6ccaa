"""render.json_text.dumps_pretty is json.dumps(indent=2, allow_nan=False) exactly, errors included."""

from __future__ import annotations

import json
from collections import OrderedDict
from enum import Enum, IntEnum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mhainspect.render.json_text import dumps_pretty

GOLDEN = sorted((Path(__file__).parent / "golden").glob("*.json"))

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text())
keys = st.text() | st.integers() | st.booleans() | st.none() | st.floats()
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                      | st.dictionaries(st.text(), inner, max_size=4)
                      | st.dictionaries(keys, inner, max_size=3), max_leaves=30)


def _outcome(fn: Any) -> tuple[str, str]:
    try:
        return "ok", fn()
    except (TypeError, ValueError) as exc:
        return type(exc).__name__, str(exc)


@settings(max_examples=400, deadline=None)
@given(values, st.booleans())
def test_same_text_or_same_error_as_the_stdlib(value: Any, ascii_only: bool) -> None:
    assert _outcome(lambda: dumps_pretty(value, ensure_ascii=ascii_only)) == _outcome(
        lambda: json.dumps(value, indent=2, allow_nan=False, ensure_ascii=ascii_only))


@pytest.mark.parametrize("path", GOLDEN, ids=[p.name for p in GOLDEN])
def test_golden_reports_round_trip(path: Path) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert dumps_pretty(doc) == json.dumps(doc, indent=2, allow_nan=False)


def test_unsupported_types_get_the_stdlib_error() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_pretty({"a": {1, 2}})
    with pytest.raises(ValueError, match="Out of range float"):
        dumps_pretty([1.0, float("nan")])


class _Word(str, Enum):
    A = "a%s"


class _Count(IntEnum):
    TWO = 2


def test_shapes_the_writer_caches_and_subclasses() -> None:
    # One key set at several depths and in several dicts (templates are per key set and depth), a
    # key holding a '%' (templates are %-formatted), subclasses of every supported type.
    row = {"%s": 1, "b%": "x%d", "c": [_Word.A, _Count.TWO, 1.5, True, None]}
    doc: Any = {"rows": [row, dict(row), {"nested": row}], "t": (row, OrderedDict(row)), "%": {}, "e": []}
    assert dumps_pretty(doc) == json.dumps(doc, indent=2, allow_nan=False)


def _nested(depth: int) -> Any:
    doc: Any = []
    for _ in range(depth):
        doc = [{"k": doc}]
    return doc


@pytest.mark.parametrize("depth", [10, 400])
def test_deep_nesting_matches_the_stdlib(depth: int) -> None:
    # 800 levels: deeper than this writer goes (two frames a level), so the stdlib writes it.
    doc = _nested(depth)
    assert dumps_pretty(doc) == json.dumps(doc, indent=2, allow_nan=False)


def test_too_deep_is_the_stdlib_recursion_error() -> None:
    with pytest.raises(RecursionError):
        json.dumps(_nested(2000), indent=2)
    with pytest.raises(RecursionError):
        dumps_pretty(_nested(2000))
