"""The block breakdown adds up: Q + K + V + O (each without its bias) + Bias (+ a latent block's
down-projections) = Total, in every sample model and in the table the terminal shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from mhainspect import inspect
from mhainspect.render.table import render_table

SAMPLES = sorted((Path(__file__).resolve().parent.parent / "sample_models").glob("*.onnx"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_breakdown_adds_up(path: Path) -> None:
    report = inspect(str(path))
    for b in report.blocks:
        assert sum(b.role_weights()) + b.params.bias + b.params.latent == b.params.total, b.name


def test_table_row_adds_up() -> None:
    report = inspect(str(SAMPLES[0].parent / "keras_per_head.onnx"))
    row = next(ln for ln in render_table(report, color=False, width=160).splitlines()
               if ln.startswith("model.multi_head_attention"))
    cells = [int(c.replace(",", "")) for c in row.split()[6:12]]
    assert sum(cells[:5]) == cells[5] == 8416 and cells[4] == 224  # 4 × 2,048 + 224 biases


def test_memory_line_names_cross_attention_in_words() -> None:
    """An encoder-decoder's memory line says what cross-attention adds, in bytes, not by a JSON field's name."""
    import dataclasses

    from mhainspect.render.size_lines import memory_line
    from mhainspect.results import MemoryAtContext

    report = inspect(str(SAMPLES[0].parent / "llama_kv_cache.onnx"), context=1024)
    kv = dataclasses.replace(report.model.kv_cache, bytes_per_encoder_token=1536)  # type: ignore[arg-type]
    memory = MemoryAtContext(1024, "--context", 1, 1000, 2000, 3000,
                             "cross-attention adds bytes_per_encoder_token per encoder token per sequence")
    seq2seq = dataclasses.replace(report, model=dataclasses.replace(report.model, kv_cache=kv, memory=memory))
    line = memory_line(seq2seq)
    assert line is not None and "bytes_per_encoder_token" not in line
    assert line.endswith("cross-attention adds 1,536 bytes (1.5 KiB) per encoder token per sequence, not in this total")
