"""Will it fit (--gpu-memory, --gpus, --require-context): the longest context and the largest batch
that fit weights + KV cache per GPU under tensor parallelism, checked by hand arithmetic on
Llama-shaped folders (config.json + safetensors headers, tests/big_models.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from big_models import LLAMA_70B, write_llama_folder
from cli_run import Run, in_process

from mhainspect.analysis.fit import FitOptions, gpu_fit, kv_heads_per_gpu
from mhainspect.analysis.size import SizeOptions
from mhainspect.pipeline import AuditOptions, audit
from mhainspect.results import FitStatus, ModelFacts, Report

GIB = 2**30
BF16 = 2


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    return in_process(capsys, monkeypatch)


@pytest.fixture(scope="module")
def llama70b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_llama_folder(tmp_path_factory.mktemp("fit") / "llama-3-70b", **LLAMA_70B)


def _llama70b_params() -> int:
    """Llama-3-70B's parameters from its shapes, by hand."""
    layers, hidden, heads, kv, ffn, vocab = 80, 8192, 64, 8, 28672, 128256
    head_dim = hidden // heads
    attention = hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2  # Q, O; K, V
    mlp = 3 * hidden * ffn
    norms = 2 * hidden
    return layers * (attention + mlp + norms) + 2 * vocab * hidden + hidden  # embeddings, lm_head, final norm


def test_llama_70b_on_two_80gib_gpus(run: Callable[..., Run], llama70b: Path, schema_validator: Any) -> None:
    params = _llama70b_params()
    assert params == 70_553_706_496
    weights_per_gpu = params * BF16 // 2  # bfloat16, split over 2 GPUs
    free = 80 * GIB - weights_per_gpu
    # 80 layers × 4 of the 8 K/V heads per GPU × (d_k 128 + d_v 128) × 2 bytes
    per_token_per_gpu = 80 * 4 * (128 + 128) * BF16
    assert per_token_per_gpu == 163_840
    longest = free // per_token_per_gpu
    assert longest == 93_662
    largest_at_8k = free // (per_token_per_gpu * 8192)  # at the config's max_position_embeddings
    assert largest_at_8k == 11

    r = run(llama70b, "--gpu-memory", "80GiB", "--gpus", "2", "-f", "json")
    assert r.code == 0, r.err
    doc = r.json()
    assert not list(schema_validator.iter_errors(doc))
    fit = doc["model"]["fit"]
    assert fit["status"] == "fits"
    assert (fit["gpu_memory_bytes"], fit["gpus"]) == (80 * GIB, 2)
    assert fit["weight_bytes_per_gpu"] == weights_per_gpu
    assert fit["free_bytes_per_gpu"] == free
    assert fit["kv_bytes_per_token_per_gpu"] == per_token_per_gpu
    assert (fit["max_context"], fit["batch"]) == (longest, 1)
    assert (fit["max_batch"], fit["context"]) == (largest_at_8k, 8192)
    assert any("split over 2 GPUs: 4 per GPU" in n for n in fit["notes"])
    assert any("activations" in n for n in fit["notes"])

    table = run(llama70b, "--gpu-memory", "80GiB", "--gpus", "2")
    assert "longest context 93,662 tokens for 1 sequence" in table.out
    assert "largest batch 11 at context 8,192" in table.out
    assert "activations and the runtime's buffers not counted" in table.out
    md = run(llama70b, "--gpu-memory", "80GiB", "--gpus", "2", "-f", "markdown")
    assert "longest context 93,662 tokens" in md.out
    page = run(llama70b, "--gpu-memory", "80GiB", "--gpus", "2", "-f", "html")
    assert "longest context 93,662 tokens" in page.out


def test_batch_and_context_trade(run: Callable[..., Run], llama70b: Path) -> None:
    """At --batch 4 each sequence gets a quarter; at --context 16k (16,000 tokens: k is 1,000) the batch is
    what 16,000-token sequences allow."""
    free = 80 * GIB - 70_553_706_496
    fit = run(llama70b, "--gpu-memory", "80GiB", "--gpus", "2", "--batch", "4", "--context", "16k",
              "-f", "json").json()["model"]["fit"]
    assert fit["max_context"] == free // (4 * 163_840)
    assert (fit["max_batch"], fit["context"], fit["context_source"]) == (free // (16_000 * 163_840), 16_000, "--context")


def test_require_context_gate(run: Callable[..., Run], llama70b: Path) -> None:
    ok = run(llama70b, "--gpu-memory", "80GiB", "--gpus", "2", "--require-context", "32k", "-q")
    assert ok.code == 0, ok.err
    short = run(llama70b, "--gpu-memory", "80GiB", "--gpus", "2", "--require-context", "128k", "-q")
    assert short.code == 1
    assert "fits at most 93,662 tokens on 2 × 80 GiB < --require-context 128k (128,000 tokens)" in short.err
    one = run(llama70b, "--gpu-memory", "80GiB", "--require-context", "1k", "-q")  # 131 GiB of weights on one GPU
    assert one.code == 1 and "the weights alone take 131.4 GiB per GPU" in one.err
    table = run(llama70b, "--gpu-memory", "80GiB").out  # the table's (printable) copy keeps the status
    assert "Does not fit on 1 GPU of 80 GiB: weights (as stored) 131.4 GiB per GPU, more than the GPU holds" in table
    assert "longest context" not in table
    gates = run(llama70b, "--gpu-memory", "80GiB", "--gpus", "2", "--require-context", "128k", "-f", "json").json()
    assert [(g["gate"], g["passed"], g["actual"], g["limit"]) for g in gates["gates"]] == \
        [("require-context", False, 93_662, 128_000)]
    for args, message in ((("--require-context", "1k"), "--require-context needs --gpu-memory"),
                          (("--gpus", "2"), "--gpus needs --gpu-memory"),
                          (("--gpu-memory", "lots"), "--gpu-memory: not a size in bytes: 'lots'")):
        bad = run(llama70b, *args)
        assert bad.code == 2 and message in bad.err and "Traceback" not in bad.err


def test_fewer_kv_heads_than_gpus_are_replicated(tmp_path: Path) -> None:
    """2 K/V heads on 8 GPUs: each GPU holds one (vLLM and TensorRT-LLM replicate them)."""
    assert [kv_heads_per_gpu(g, 8) for g in (1, 2, 8, 16)] == [1, 1, 1, 2]
    folder = write_llama_folder(tmp_path / "m", 4, heads=32, kv_heads=2, hidden=4096, ffn=1024, vocab=1000)
    report = audit(folder, AuditOptions(size=SizeOptions(gpu_memory=GIB, gpus=8)))
    fit = report.model.fit
    assert fit is not None and fit.status is FitStatus.FITS
    assert fit.kv_bytes_per_token_per_gpu == 4 * 1 * (128 + 128) * BF16  # 4 layers × 1 whole head
    assert any("fewer than 8 GPUs: replicated, 1 per GPU" in n for n in fit.notes)
    assert fit.weight_bytes_per_gpu == -(-(report.model.weight_bytes or 0) // 8)


def _facts(report: Report) -> ModelFacts:
    return ModelFacts(report.model.path, report.model.format, report.model.total_params)


def test_sliding_windows_stop_the_cache(tmp_path: Path) -> None:
    """Every caching layer a sliding window: the cache stops at window - 1 tokens, so any context fits
    once the full windows do; one full-attention layer makes the context finite again."""
    report = audit(write_llama_folder(tmp_path / "m", 2, heads=8, kv_heads=8, hidden=1024, ffn=64, vocab=100))
    per_layer = 8 * (128 + 128) * BF16  # one layer's K/V per token
    windowed = dataclasses.replace(report, blocks=tuple(dataclasses.replace(b, sliding_window=4096)
                                                        for b in report.blocks))
    weights = report.model.weight_bytes or 0
    roomy = gpu_fit(windowed, FitOptions(weights + 2 * per_layer * 4095), _facts(report), None)
    assert roomy.status is FitStatus.FITS and roomy.max_context is None and "sliding window" in (roomy.reason or "")
    tight = gpu_fit(windowed, FitOptions(weights + 2 * per_layer * 1000 + 5), _facts(report), None)
    assert tight.max_context == 1000
    mixed = dataclasses.replace(windowed, blocks=(windowed.blocks[0], report.blocks[1]))
    room = 2 * per_layer * 4095 + per_layer * 10_000
    fit = gpu_fit(mixed, FitOptions(weights + room), _facts(report), None)
    # past 4,095 tokens only the full layer grows: 4,095·2·L + (c - 4,095)·L <= room
    assert fit.max_context == 4095 + (room - 2 * per_layer * 4095) // per_layer


def test_fit_in_the_csv_summary(run: Callable[..., Run], llama70b: Path) -> None:
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(run(llama70b, "--gpu-memory", "80GiB", "--gpus", "2", "-f", "csv",
                                              "--summary").out)))
    assert [(r["max_context"], r["max_batch"]) for r in rows] == [("93662", "11")]
