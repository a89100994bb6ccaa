"""docs/batch.md's Dask recipe, taken from the page and run on a local cluster of two worker processes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_models"

distributed = pytest.importorskip("distributed")


def _recipe() -> Any:
    """The ``census`` function as docs/batch.md gives it."""
    page = (REPO_ROOT / "docs" / "batch.md").read_text(encoding="utf-8")
    (code,) = [block for block in re.findall(r"```python\n(.*?)```", page, re.S) if "def census" in block]
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/batch.md", "exec"), namespace)
    return namespace["census"]


def test_census_on_a_local_cluster(tmp_path: Path) -> None:
    census = _recipe()
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes((SAMPLES / "standard_mha.onnx").read_bytes()[:300])
    good = [str(SAMPLES / n) for n in ("standard_mha.onnx", "keras_per_head.onnx", "llama_kv_cache.onnx")]
    inputs = [*good, str(tmp_path / "missing.onnx"), str(corrupt)]
    out = tmp_path / "census.jsonl"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=40) as cluster, distributed.Client(cluster) as client:
        census(client, inputs, str(out), window=2, context=1024)
        workers = {w for w in client.scheduler_info()["workers"]}
        lines = out.read_text(encoding="utf-8").splitlines()
        census(client, inputs, str(out), window=2, context=1024)  # everything recorded: nothing to add
        assert out.read_text(encoding="utf-8").splitlines() == lines
    assert len(workers) == 2
    records = {r["input"]: r for r in map(json.loads, lines)}
    assert len(lines) == len(inputs) and set(records) == set(inputs)
    assert records[str(tmp_path / "missing.onnx")]["error"]["kind"] == "not_found"
    assert records[str(corrupt)]["error"]["kind"] == "invalid"
    gqa = records[good[2]]
    assert gqa["model"]["kv_cache"]["context"] == 1024 and gqa["model"]["kv_cache"]["total_bytes"] is not None
    assert records[good[0]]["model"]["total_params"] == 16_768
