"""docs/architecture.md names one function for each number of a report, and the one reader of each
format: every name must import (a renamed or removed function fails here until the page follows)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
_ROW = re.compile(r"^\| ([^|]+) \| `(mhainspect\.[\w.]+)` \|$")
_NAMES = re.compile(r"`(mhainspect\.[\w.]+)`")


def _table(title: str = "Where each number is decided") -> list[tuple[str, str]]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    return [(m.group(1).strip(), m.group(2)) for line in section.splitlines() if (m := _ROW.match(line))]


def _readers() -> list[tuple[str, str]]:
    """(format, every function its row names) of the readers table."""
    section = PAGE.read_text(encoding="utf-8").split("## One reader per format", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ", 1) for line in section.splitlines() if line.startswith("| ") and "`mhainspect." in line]
    return [(fmt.strip("| "), name) for fmt, rest in rows for name in _NAMES.findall(rest)]


def _resolve(dotted: str) -> object:
    """The object a dotted name names: the longest importable module, then attributes (the torch
    front end's names skip where torch is not installed)."""
    if dotted.startswith("mhainspect.frontends.torch."):
        pytest.importorskip("torch")
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def test_the_table_names_every_number_the_issue_asks_for() -> None:
    numbers = " / ".join(n for n, _ in _table())
    for wanted in ("heads", "KV heads", "d_k", "d_v", "d_model", "block params", "total params", "weight bytes",
                   "KV bytes", "kind", "scale", *(f"MHA00{i}" for i in range(1, 9))):
        assert wanted in numbers, wanted


@pytest.mark.parametrize(("number", "dotted"), _table())
def test_every_named_function_exists(number: str, dotted: str) -> None:
    assert callable(_resolve(dotted)), f"{number}: {dotted} is not a function"


def test_the_readers_table_names_each_format() -> None:
    formats = " / ".join(f for f, _ in _readers())
    for wanted in ("Hugging Face folder", "safetensors", "torch.save", "GGUF", "ONNX", "Keras", "TorchScript"):
        assert wanted in formats, wanted


@pytest.mark.parametrize(("fmt", "dotted"), _readers())
def test_every_named_reader_exists(fmt: str, dotted: str) -> None:
    assert callable(_resolve(dotted)), f"{fmt}: {dotted} is not a function"


def test_every_name_the_page_gives_resolves() -> None:
    """Names in the prose too (the faces' door to the pipeline, the driver, the readers): each
    imports, so the page cannot send a reader to code that moved."""
    names = sorted(set(_NAMES.findall(PAGE.read_text(encoding="utf-8"))))
    assert "mhainspect.pipeline.inputs.expand" in names and "mhainspect.pipeline.runner.run" in names
    # every graph front end's shared step, and what only ONNX adds to it
    assert "mhainspect.frontends.graphs.result.graph_result" in names
    assert "mhainspect.frontends.onnx.frontend.onnx_graph_result" in names
    for dotted in names:
        _resolve(dotted)
