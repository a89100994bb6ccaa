"""A --from-file run over a list mixing local models and models where they live, good and bad, served by
the remote tests' servers on 127.0.0.1: a good path, a missing path, a corrupt file, a Hub repo, a
missing repo, a gated repo and a stalled server: one record each, with its error kind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_run import in_process
from remote_models import llama_config, llama_tensors, write_hf_folder
from remote_servers import FileServer, Repo, hub

from mhainspect.sources.transports import hub as hub_module

REPO_ROOT = Path(__file__).resolve().parents[1]
STANDARD = REPO_ROOT / "sample_models" / "standard_mha.onnx"


@pytest.fixture
def listing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, dict[str, str]]]:
    """The list file, and the error kind each bad input must get ("" for a good one)."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MHAINSPECT_REMOTE_RETRIES", "1")
    monkeypatch.setenv("MHAINSPECT_REMOTE_TIMEOUT", "1.5")
    hub_module._LISTINGS.clear()
    cfg = llama_config(64, 4, 2, 2)
    write_hf_folder(tmp_path / "repos" / "llama", cfg, llama_tensors(64, 4, 2, 2))
    write_hf_folder(tmp_path / "repos" / "gated", cfg, llama_tensors(64, 4, 2, 2))
    write_hf_folder(tmp_path / "stalled", cfg, llama_tensors(64, 4, 2, 2))
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(STANDARD.read_bytes()[:300])
    repos = {"org/llama": Repo(tmp_path / "repos" / "llama"),
             "org/gated": Repo(tmp_path / "repos" / "gated", gated=True, token="hf_secret")}
    with hub(tmp_path, repos) as (api, _storage), FileServer(tmp_path / "stalled", mode="stall") as stall:
        monkeypatch.setenv("HF_ENDPOINT", api.endpoint)
        kinds = {str(STANDARD): "", str(tmp_path / "missing.onnx"): "not_found", str(corrupt): "invalid",
                 "hf://org/llama": "", "hf://org/missing": "not_found", "hf://org/gated": "gated",
                 stall.url("model.safetensors"): "network"}
        path = tmp_path / "models.txt"
        path.write_text("".join(f"{k}\n" for k in kinds), encoding="utf-8")
        yield path, kinds


@pytest.mark.parametrize("jobs", [1, 3])
def test_one_record_each(listing: tuple[Path, dict[str, str]], jobs: int, capsys: pytest.CaptureFixture[str],
                         monkeypatch: pytest.MonkeyPatch, batch_record_validator: Any) -> None:
    path, kinds = listing
    out = path.parent / "census.jsonl"
    run = in_process(capsys, monkeypatch)("--from-file", path, "-o", out, "--jobs", jobs)
    assert run.code == 2
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["input"] for r in records) == sorted(kinds)  # one record each
    for r in records:
        assert not list(batch_record_validator.iter_errors(r)), r
        assert r.get("error", {}).get("kind", "") == kinds[r["input"]], r
    assert "stalled" in next(r for r in records if r["input"].startswith("http"))["error"]["message"]
    good = next(r for r in records if r["input"] == "hf://org/llama")
    assert good["model"]["total_params"] > 0 and len(good["blocks"]) == 2
