"""An ONNX-only run never imports torch, nor what only other paths use (remote reading, latent
attention, experts, the TOML parser, the table); a safetensors checkpoint run none of torch, onnx,
numpy, protobuf or the ONNX front end (imports are most of a short run's time)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from remote_models import llama_config, moe_tensors, write_hf_folder

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
