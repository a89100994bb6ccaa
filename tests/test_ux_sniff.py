"""A file that is no model is refused from its first bytes, before any heavy module is imported
(onnx, ml_dtypes, numpy, torch): `mhainspect README.md` used to import onnx (0.6 s of ml_dtypes) to
say the protobuf did not decode. Every ONNX file the project holds still reads as ONNX."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mhainspect.frontends.formats import HEAD_BYTES, looks_like_onnx

ROOT = Path(__file__).resolve().parent.parent
ONNX_FILES = sorted({*ROOT.glob("sample_models/*.onnx"), *ROOT.glob("tests/**/*.onnx")})


def test_every_onnx_file_looks_like_onnx() -> None:
    assert ONNX_FILES
    for path in ONNX_FILES:
        with path.open("rb") as fh:
            assert looks_like_onnx(fh.read(HEAD_BYTES), path.stat().st_size), path


@pytest.mark.parametrize(("name", "content", "said"), [
    ("README.md", b"# mhainspect\n\nAudit the attention blocks", "it is text, starting '# mhainspect'"),
    ("page.html", b"<!DOCTYPE html><html>", "it is text, starting '<!DOCTYPE html><html>'"),
    ("image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "it starts with bytes 89 50 4e 47"),
    ("notes.txt", b"import torch\n", "it is text, starting 'import torch'"),
])
def test_non_model_files_are_refused_without_heavy_imports(tmp_path: Path, name: str, content: bytes,
                                                            said: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "mhainspect", str(path)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    lines = [ln for ln in out.stderr.splitlines() if not ln.startswith("import time:")]
    assert len(lines) == 1 and lines[0].startswith(
        f"mhainspect: error: {path}: not a model file: its content is none of the formats mhainspect reads (ONNX, "
        f"GGUF, safetensors, PyTorch, Keras; {said}")
    imported = {ln.rsplit("|", 1)[-1].strip() for ln in out.stderr.splitlines() if ln.startswith("import time:")}
    assert not imported & {"onnx", "ml_dtypes", "numpy", "torch", "google.protobuf"}
