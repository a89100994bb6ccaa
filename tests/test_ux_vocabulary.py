"""One vocabulary for every dtype option and the Python API: --kv-dtype takes what --weight-dtype
and calc --dtype take (fp16, fp8, int4, bf16, any case), sized by the one dtype table."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cli_run import Run, in_process

from mhainspect import inspect
from mhainspect.analysis.size import check_kv_dtype, check_weight_dtype

SAMPLE = Path(__file__).resolve().parent.parent / "sample_models" / "llama_kv_cache.onnx"


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    return in_process(capsys, monkeypatch)


@pytest.mark.parametrize(("name", "canonical", "bits"), [
    ("fp16", "float16", 16), ("FP16", "float16", 16), ("half", "float16", 16), ("bf16", "bfloat16", 16),
    ("fp8", "float8e4m3fn", 8), ("float8_e4m3fn", "float8e4m3fn", 8), ("fp32", "float32", 32),
    ("int8", "int8", 8), ("int4", "int4", 4)])
def test_kv_dtype_takes_what_weight_dtype_takes(run: Callable[..., Run], name: str, canonical: str,
                                                bits: int) -> None:
    assert check_kv_dtype(name) == canonical == check_weight_dtype(name)[0]
    elements = inspect(str(SAMPLE)).model.kv_cache.bytes_per_token // 4  # type: ignore[union-attr]  # float32
    doc = run(SAMPLE, "--kv-dtype", name, "-f", "json").json()
    kv = doc["model"]["kv_cache"]
    assert (kv["dtype"], kv["bytes_per_token"]) == (canonical, elements * bits // 8)
    assert inspect(str(SAMPLE), kv_dtype=name).model.kv_cache.bytes_per_token == elements * bits // 8  # type: ignore[union-attr]
    calc = run("calc", "hf", "hidden_size=64", "num_attention_heads=4", "--dtype", name)
    assert calc.code == 0 and f"In {canonical}:" in calc.out


def test_a_block_type_is_no_cache_type(run: Callable[..., Run]) -> None:
    r = run(SAMPLE, "--kv-dtype", "q4_k")
    assert r.code == 2 and "'q4_k' is not a KV cache element type" in r.err
