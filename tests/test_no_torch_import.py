"""An ONNX-only run never imports torch (imports are most of a short run's time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, sys
from mhainspect.cli.app import main
try:
    main([sys.argv[1], "--format", "json", "-o", sys.argv[2]])
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print(json.dumps({"code": code, "modules": sorted(m for m in ("torch", "onnx", "numpy") if m in sys.modules)}))
"""


def test_onnx_run_does_not_import_torch(sample_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(sample_dir / "gqa_llama.onnx"), str(out)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] in (0, None), proc.stderr
    assert "torch" not in result["modules"], result
    assert json.loads(out.read_text())["blocks"], "the sample model has an attention block"
