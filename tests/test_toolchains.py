"""Models from other toolchains (tf2onnx, Keras on torch, jax2onnx, paddle2onnx, their onnxruntime
int8 copies, .keras archives): every committed fixture audited and compared with the truth its
script read from the framework's own layer objects (tests/toolchain_cases.py), and the same Keras
model through its backends and its .keras archive giving the same blocks and totals.

The fixtures and the scripts that made them live in tests/data/toolchains/ and
scripts/toolchains/ (the toolchains themselves are not installed here). A file the matchers do
not get right yet is an expected failure naming the gap (strict: it flips when the gap is closed).
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from toolchain_cases import GAPS, Fixture, block_key, compare, fixtures, gap, report_keys

import mhainspect


def _cases() -> list[object]:
    out: list[object] = []
    for f in fixtures():
        why = gap(f)
        marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
        out.append(pytest.param(f, id=f.id, marks=marks))
    return out


FIXTURES = fixtures()


def test_every_toolchain_has_fixtures() -> None:
    """The fixtures are there (a checkout without them would pass every case vacuously)."""
    assert {f.toolchain for f in FIXTURES} >= {"paddle2onnx", "keras-tf2onnx", "keras-torch", "keras-jax2onnx",
                                              "flax-jax2onnx", "keras"}
    assert all(f.truth()["blocks"] for f in FIXTURES)


@pytest.mark.parametrize("fixture", _cases())
def test_fixture_matches_truth(fixture: Fixture) -> None:
    report = mhainspect.inspect(str(fixture.path))
    outcome = compare(report, fixture.truth())
    assert outcome.exact, outcome.why()


def test_gaps_name_fixtures() -> None:
    """Every gap entry names a committed fixture (a renamed file must not leave a stale entry)."""
    ids = {f.id for f in FIXTURES} | {f"{f.toolchain}/{f.path.name.split('.', 1)[0]}*" for f in FIXTURES}
    assert set(GAPS) <= ids


def _by_model() -> dict[str, list[Fixture]]:
    groups: dict[str, list[Fixture]] = defaultdict(list)
    for f in FIXTURES:
        groups[f.path.name.split(".", 1)[0]].append(f)
    return groups


def test_truths_agree_across_toolchains() -> None:
    """One model built by several toolchains (a Keras model on TensorFlow, torch and JAX) has one
    truth: the scripts read the same layer objects each time."""
    for name, group in _by_model().items():
        truths = {(tuple(sorted(block_key(b) for b in f.truth()["blocks"])), f.truth()["total_params"]) for f in group}
        assert len(truths) == 1, name


def _keras_exports() -> list[object]:
    """Every export of a model whose .keras archive is committed, with that archive."""
    archives = {f.path.name.split(".", 1)[0]: f for f in FIXTURES if f.toolchain == "keras"}
    out: list[object] = []
    for f in FIXTURES:
        model = f.path.name.split(".", 1)[0]
        if f.toolchain == "keras" or model not in archives:
            continue
        why = gap(f)
        marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
        out.append(pytest.param(archives[model], f, id=f.id, marks=marks))
    return out


@pytest.mark.parametrize(("archive", "export"), _keras_exports())
def test_keras_archive_and_its_exports_agree(archive: Fixture, export: Fixture) -> None:
    """The same Keras model through each backend's exporter (tf2onnx, torch, jax2onnx; int8 copies)
    gives the blocks, block parameters and total its .keras archive gives."""
    kept, exported = mhainspect.inspect(str(archive.path)), mhainspect.inspect(str(export.path))
    assert sorted(report_keys(exported)) == sorted(report_keys(kept))
    assert exported.model.total_params == kept.model.total_params
