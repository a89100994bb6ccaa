"""An ONNX-only run never imports torch, nor what only other paths use (remote reading, latent
attention, experts, the TOML parser, the table); a safetensors checkpoint run none of torch, onnx,
numpy, protobuf or the ONNX front end (imports are most of a short run's time)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from remote_models import llama_config, llama_tensors, moe_tensors, write_hf_folder

# Behind doors: imported only by the path that uses them (docs/performance.md, issue 30).
OPTIONAL_PATHS = ("concurrent.futures", "tomllib", "mhainspect.sources.blob",
                  "mhainspect.sources.address", "mhainspect.frontends.onnx.landings",
                  "mhainspect.matchers.latent", "mhainspect.matchers.grouping", "mhainspect.matchers.experts",
                  "mhainspect.analysis.experts", "mhainspect.render.cells")

SCRIPT = """
import json, sys
from mhainspect.cli.app import main
try:
    main([sys.argv[1], "--format", "json", "-o", sys.argv[2]])
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print(json.dumps({"code": code, "modules": sorted(m for m in ("torch", "onnx", "numpy", "google.protobuf",
                                                                "mhainspect.frontends.onnx.frontend",
                                                                "mhainspect.ir.dataflow") if m in sys.modules),
                  "optional": sorted(m for m in sys.argv[3].split(",") if m in sys.modules)}))
"""


def test_onnx_run_does_not_import_torch(sample_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(sample_dir / "gqa_llama.onnx"), str(out), ""],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] in (0, None), proc.stderr
    assert "torch" not in result["modules"], result
    assert json.loads(out.read_text())["blocks"], "the sample model has an attention block"


def test_local_onnx_run_imports_no_optional_path(sample_dir: Path, tmp_path: Path) -> None:
    """A local ONNX file with no pyproject.toml above it, audited to JSON: nothing of remote reading,
    latent attention, experts, TOML or the table is imported."""
    model = tmp_path / "gqa_llama.onnx"
    shutil.copy(sample_dir / "gqa_llama.onnx", model)
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(model), str(out), ",".join(OPTIONAL_PATHS)],
                          capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] in (0, None), proc.stderr
    assert result["optional"] == [], result
    assert json.loads(out.read_text())["blocks"], "the sample model has an attention block"


def test_checkpoint_run_imports_no_graph_reader(tmp_path: Path) -> None:
    """A Hugging Face folder of fp8 experts with block scales (the quantization, grouping, expert and
    size passes all run) is audited from its headers without importing a graph reader."""
    folder = tmp_path / "moe"
    write_hf_folder(folder, llama_config(64, 4, 1, 2, model_type="qwen3_moe", num_experts=4),
                    moe_tensors(2, 4), shards=2)
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(folder), str(out), ""],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] in (0, None), proc.stderr
    assert result["modules"] == [], result
    report = json.loads(out.read_text())
    assert len(report["blocks"]) == 2 and report["model"]["experts"], report["model"]


TORCH_FREE_SCRIPT = """
import json, sys
from mhainspect.cli.app import main
try:
    main([sys.argv[1], "--format", "json", "-o", sys.argv[2]])
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
print(json.dumps({"torch": "torch" in sys.modules}))
"""


def _torch_save_models(tmp_path: Path) -> list[Path]:
    """A torch.save'd state dict beside its config.json, and a Hugging Face folder of two .bin shards,
    written by torch from random weights (plus noise on every tensor); the lm_head shares the
    embedding's storage, as a tied model saves it."""
    import torch

    config = llama_config(64, 4, 2, 2, vocab=128)
    gen = torch.Generator().manual_seed(0)
    state = {name: torch.randn(shape, generator=gen).to(torch.bfloat16) + 0.01
             for name, (_, shape) in llama_tensors(64, 4, 2, 2, vocab=128).items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    single = tmp_path / "single"
    single.mkdir()
    (single / "config.json").write_text(json.dumps(config))
    torch.save(state, single / "model.pt")
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    names = sorted(state)
    halves = {"pytorch_model-00001-of-00002.bin": names[:len(names) // 2],
              "pytorch_model-00002-of-00002.bin": names[len(names) // 2:]}
    for file, part in halves.items():
        torch.save({n: state[n].clone() for n in part}, folder / file)
    index = {"weight_map": {n: file for file, part in halves.items() for n in part}}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    return [single / "model.pt", folder]


def test_torch_save_state_dict_is_read_without_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local torch.save state dict (a file, a sharded folder) is audited without importing torch,
    and its JSON is the JSON torch's own weights-only loader gives (read_torch_state_dict)."""
    pytest.importorskip("torch")
    from mhainspect.cli.app import main
    from mhainspect.frontends.checkpoint import reader, torchzip

    for model in _torch_save_models(tmp_path):
        out = tmp_path / f"{model.name}.json"
        proc = subprocess.run([sys.executable, "-c", TORCH_FREE_SCRIPT, str(model), str(out)],
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"torch": False}
        with monkeypatch.context() as m:  # the same audit, each file read by torch.load instead
            m.setattr(torchzip, "read_torch_zip",
                      lambda blob, values=None, _reason=None: reader.read_torch_state_dict(blob.path, values))
            with_torch = tmp_path / f"{model.name}.torch.json"
            with pytest.raises(SystemExit) as exc:
                main([str(model), "--format", "json", "-o", str(with_torch)])
            assert exc.value.code in (0, None)
        report = json.loads(out.read_text())
        assert report["blocks"] and report == json.loads(with_torch.read_text())
        assert out.read_text() == with_torch.read_text()
