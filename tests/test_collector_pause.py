"""pipeline.collector_paused: the cycle collector is off while a source is read and analysed, and
always comes back as it was, so a library caller never inherits a disabled collector (also after
an error)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mhainspect.pipeline import stages as pipeline
from mhainspect.errors import InputError
from mhainspect.pipeline import audit, collector_paused

SAMPLE = Path(__file__).resolve().parents[1] / "sample_models" / "standard_mha.onnx"


@pytest.fixture
def collector_enabled() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_paused_inside_and_enabled_after(collector_enabled: None) -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_enabled_again_after_an_error(collector_enabled: None) -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_caller_that_disabled_it_keeps_it_disabled(collector_enabled: None) -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_audit_reads_with_the_collector_paused_and_restores_it(collector_enabled: None, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    read = pipeline.source_result

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return read(*args, **kwargs)

    monkeypatch.setattr(pipeline, "source_result", recording)
    report = audit(SAMPLE)
    assert report.blocks and seen == [False] and gc.isenabled()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff not a model")
    with pytest.raises(InputError):
        audit(bad)
    assert seen == [False, False] and gc.isenabled()
