"""The one-row-per-model overview of many models at 80 columns: the optional columns go first, then
the long names are shortened in the middle, never the numbers; every model's params, blocks, heads,
KV/token and flags stay readable."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from big_models import write_llama_folder

from mhainspect import inspect
from mhainspect.render.cells import kv_cell
from mhainspect.render.table import render_overview


def test_150_models_fit_80_columns(tmp_path: Path) -> None:
    gqa = inspect(str(write_llama_folder(tmp_path / "gqa", 2, heads=8, kv_heads=2, hidden=256, ffn=64, vocab=100)))
    mha = inspect(str(write_llama_folder(tmp_path / "mha", 2, heads=8, kv_heads=8, hidden=256, ffn=64, vocab=100)))
    reports = []
    for i in range(150):
        base = gqa if i % 2 else mha
        model = dataclasses.replace(base.model, path=f"hub/some-organisation/a-very-long-model-name-{i:03d}-instruct-v2",
                                    total_params=70_553_706_496 + i)
        reports.append(dataclasses.replace(base, model=model))
    text = render_overview(reports, width=80, color=False)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = lines[3:]
    assert len(rows) == 150 and lines[1].split() == ["Model", "Params", "Blocks", "Heads", "KV/token", "Flags"]
    for i, (row, report) in enumerate(zip(rows, reports)):
        name, params, blocks, *rest = row.split()
        assert "…" in name and name.endswith(f"{i:03d}-instruct-v2")  # shortened in the middle
        assert params == f"{70_553_706_496 + i:,}" and blocks == "2"
        assert kv_cell(report).replace(" ", "") in "".join(rest)
        assert ("MHA005×2" in rest) == (i % 2 == 1) and (("8/2" in rest) == (i % 2 == 1))
