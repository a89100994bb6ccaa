"""Issue 29, item 1: a decoder's cache is always answerable.

--decoder says a model decodes with a cache its source does not show; --no-decoder that it runs once.
Either settles only what the source leaves open (a mask from a graph input, no config, a causal
mask alone); cache tensors, a config or no mask at all decide as before. --context, --batch and
--kv-dtype on a model without a cache figure, and --decoder where the source decides every block,
say so (a report warning, and a stderr line). --max-kv-cache fails on an unknown cache with the way
out in its message, and passes once the caller says what the model does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest
from cli_run import in_process

import mhainspect

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_models"
GQA = SAMPLES / "gqa_llama.onnx"  # mask from graph input 'attention_mask': causal or not is up to the caller
KV_CACHE = SAMPLES / "llama_kv_cache.onnx"  # past/present tensors: caches, 128 bytes per token
BERT = SAMPLES / "bert_two_layers.onnx"  # no causal mask: an encoder
NO_EFFECT = "no effect: "


@pytest.fixture()
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    return in_process(capsys, monkeypatch)


def _kv_evidence(doc: dict[str, Any]) -> dict[str, Any]:
    (block,) = doc["blocks"]
    (evidence,) = [e for e in block["evidence"] if e["field"] == "kv_cache_bytes_per_token"]
    return evidence


def test_decoder_gives_an_open_graph_its_cache(cli: Any) -> None:
    doc = cli(GQA, "--decoder", "--context", "8Ki", "--kv-dtype", "float16", "-f", "json").json()
    kv = doc["model"]["kv_cache"]
    # 2 kv heads × (d_k 8 + d_v 8) × 2 bytes = 64 bytes per token, at 8,192 tokens
    assert (kv["status"], kv["bytes_per_token"], kv["dtype"], kv["total_bytes"]) == ("caches", 64, "float16", 64 * 8192)
    evidence = _kv_evidence(doc)
    assert evidence["source"] == "option" and "--decoder: the caller says" in evidence["detail"]
    assert "graph input 'attention_mask'" in evidence["detail"]  # what the source left open, kept
    assert not any(NO_EFFECT in w for w in doc["warnings"])


def test_without_decoder_the_size_options_say_they_did_nothing(cli: Any) -> None:
    result = cli(GQA, "--context", "8192", "--kv-dtype", "float16", "-f", "json")
    assert result.code == 0
    (warning,) = [w for w in result.json()["warnings"] if NO_EFFECT in w]
    assert warning.startswith("--context and --kv-dtype have no effect: the KV cache is unknown")
    assert "give --decoder" in warning
    (line,) = result.err.splitlines()
    assert line == f"mhainspect: warning: {GQA}: {warning}"
    assert cli(GQA, "--context", "8192", "-f", "json", "-q").err == ""  # -q: failures only


def test_size_options_on_an_encoder_say_nothing_caches(cli: Any) -> None:
    doc = cli(BERT, "--context", "512", "-f", "json").json()
    (warning,) = [w for w in doc["warnings"] if NO_EFFECT in w]
    assert warning.startswith("--context has no effect: nothing in the model caches K/V")
    assert "--decoder" not in warning


def test_a_model_with_a_cache_figure_gets_no_warning(cli: Any) -> None:
    result = cli(KV_CACHE, "--context", "8192", "--batch", "4", "--kv-dtype", "bfloat16", "-f", "json")
    assert result.err == "" and result.json()["warnings"] == []
    assert result.json()["model"]["kv_cache"]["total_bytes"] == 2 * (8 + 8) * 2 * 8192 * 4


@pytest.mark.parametrize("option", ["--decoder", "--no-decoder"])
def test_the_source_wins_where_it_decides(cli: Any, option: str) -> None:
    # Cache tensors (a decoder) and no causal mask at all (an encoder) are the source's word.
    cached = cli(KV_CACHE, option, "-f", "json").json()
    assert cached["model"]["kv_cache"]["bytes_per_token"] == 128
    assert _kv_evidence(cached)["source"] == "cache_tensor"
    encoder = cli(BERT, option, "-f", "json").json()
    assert encoder["model"]["kv_cache"]["status"] == "none"
    for doc in (cached, encoder):
        (warning,) = [w for w in doc["warnings"] if NO_EFFECT in w]
        assert warning.startswith(f"{option} has no effect: the source decides every block")


def test_no_decoder_says_nothing_is_cached(cli: Any) -> None:
    doc = cli(GQA, "--no-decoder", "--context", "100", "-f", "json").json()
    kv = doc["model"]["kv_cache"]
    assert kv["status"] == "none" and kv["bytes_per_token"] is None
    assert kv["reason"].startswith("--no-decoder: the caller says the model runs once over its input")
    assert not any(NO_EFFECT in w for w in doc["warnings"])  # the caller asked for no cache


def test_a_causal_mask_alone_becomes_a_cache_with_decoder(tmp_path: Path, cli: Any) -> None:
    model = onnx.load(SAMPLES / "onnx_attention_23.onnx")
    (attention,) = [n for n in model.graph.node if n.op_type == "Attention"]
    (causal,) = [a for a in attention.attribute if a.name == "is_causal"]
    causal.i = 1
    path = tmp_path / "causal.onnx"
    onnx.save(model, path)
    guessed = cli(path, "-f", "json").json()["model"]["kv_cache"]
    assert (guessed["status"], guessed["bytes_per_token"]) == ("if_decoded", 256)
    told = cli(path, "--decoder", "-f", "json").json()
    assert (told["model"]["kv_cache"]["status"], told["model"]["kv_cache"]["reason"]) == ("caches", None)
    evidence = _kv_evidence(told)
    assert evidence["source"] == "causal_mask" and evidence["detail"].endswith(
        "ONNX Attention is_causal = 1; --decoder: the caller says the model decodes token by token with a K/V cache "
        "the source does not show")
    off = cli(path, "--no-decoder", "-f", "json").json()["model"]["kv_cache"]
    assert off["status"] == "none"


def test_the_kv_gate_is_coherent(cli: Any) -> None:
    unknown = cli(GQA, "--max-kv-cache", "1G", "--context", "100", "-q")
    assert unknown.code == 1
    (line,) = unknown.err.splitlines()
    assert "KV cache unknown" in line and "cannot check --max-kv-cache 1G" in line and "give --decoder" in line
    told = cli(GQA, "--decoder", "--max-kv-cache", "1G", "--context", "100", "-f", "json")
    assert told.code == 0
    (gate,) = told.json()["gates"]
    assert gate["passed"] and gate["actual"] == 2 * (8 + 8) * 4 * 100
    over = cli(GQA, "--decoder", "--max-kv-cache", "1K", "--context", "100", "-q")
    assert over.code == 1 and "caches 12,800 bytes of K/V" in over.err
    encoder = cli(GQA, "--no-decoder", "--max-kv-cache", "1", "--context", "100", "-q")
    assert encoder.code == 0 and encoder.err == ""


def test_decoder_in_the_config_file(cli: Any, tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(GQA.read_bytes())
    (folder / "pyproject.toml").write_text("[tool.mhainspect]\ndecoder = true\ncontext = \"1k\"\n")
    kv = cli(folder / "model.onnx", "-f", "json").json()["model"]["kv_cache"]
    assert (kv["status"], kv["total_bytes"]) == ("caches", 128 * 1000)  # "1k": 1,000 tokens, as on the command line
    # The command line wins over the file.
    assert cli(folder / "model.onnx", "--no-decoder", "-f", "json").json()["model"]["kv_cache"]["status"] == "none"
    (folder / "pyproject.toml").write_text("[tool.mhainspect]\ndecoder = \"yes\"\n")
    bad = cli(folder / "model.onnx")
    assert bad.code == 2 and "[tool.mhainspect] decoder: expected true or false" in bad.err


def test_decoder_in_the_python_api() -> None:
    report = mhainspect.inspect(GQA, decoder=True, context=1024)
    assert report.model.kv_cache is not None and report.model.kv_cache.total_bytes == 128 * 1024
    assert mhainspect.inspect(GQA).model.kv_cache.status == "unknown"  # type: ignore[union-attr]
