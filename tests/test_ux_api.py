"""The Python API reads counts as the CLI does and says what it cannot take: context="8k" works,
context=-1 is a ValueError, a whole float is an int; inspect_all prints as the CLI's text, reports and
calculations have to_dict; inspect and calc are in dir(mhainspect)."""

from __future__ import annotations

from pathlib import Path

import pytest

import mhainspect
from mhainspect.errors import InputError

SAMPLES = Path(__file__).resolve().parent.parent / "sample_models"
KV = str(SAMPLES / "llama_kv_cache.onnx")


def test_context_as_the_options_take_it() -> None:
    at_8k = mhainspect.inspect(KV, context=8192).model.kv_cache
    assert at_8k is not None and at_8k.total_bytes == 128 * 8192
    for same in ("8Ki", "8_192", 8192.0):
        kv = mhainspect.inspect(KV, context=same).model.kv_cache
        assert kv is not None and kv.total_bytes == at_8k.total_bytes and type(kv.total_bytes) is int
    si = mhainspect.inspect(KV, context="8k").model.kv_cache  # k is 1,000, as on the command line
    assert si is not None and (si.context, si.total_bytes) == (8000, 128 * 8000)
    for bad, message in ((-1, "-1 is not a positive number of tokens"), (8192.5, "not a whole number"),
                         ("lots", "not a whole number of tokens")):
        with pytest.raises(ValueError, match=message):
            mhainspect.inspect(KV, context=bad)
    with pytest.raises(ValueError, match="batch"):
        mhainspect.inspect(KV, context=8, batch=0)


def test_lists_and_calculations_read_and_convert() -> None:
    reports = mhainspect.inspect_all(str(SAMPLES / "gqa_llama.onnx"), str(SAMPLES / "bert_two_layers.onnx"))
    text = str(reports)
    assert text.startswith("Models (2)") and "[<Report" not in text
    assert repr(reports).startswith("<Reports: 2 models")
    doc = reports.to_dict()
    assert [m["model"]["path"] for m in doc["models"]] == [r.model.path for r in reports]
    calc = mhainspect.calc("pytorch", embed_dim=512, num_heads=8)
    assert calc.to_dict()["params"]["total"] == 1_050_624
    rows = mhainspect.compare(embed_dim=512, num_heads=8).to_dict()
    assert [r["convention"] for r in rows][:2] == ["pytorch", "keras"]


def test_names_are_listed() -> None:
    names = dir(mhainspect)
    assert {"inspect", "inspect_all", "calc", "compare", "Report"} <= set(names)


def test_a_folder_of_several_models_says_what_to_call() -> None:
    with pytest.raises(InputError, match=r"holds \d+ models; use mhainspect.inspect_all\(\)"):
        mhainspect.inspect(str(SAMPLES))
