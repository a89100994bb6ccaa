"""An ONNX-only run never imports torch, nor what only other paths use (remote reading, latent
attention, experts, the TOML parser, the table); a safetensors checkpoint run none of torch, onnx,
numpy, protobuf or the ONNX front end (imports are most of a short run's time)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from remote_models import llama_config, llama_tensors, moe_tensors, write_hf_folder

# Behind doors: imported only by the path that uses them (docs/performance.md, issues 30 and 35).
# What the command line itself needs for no option of a plain run: --verify, --gpu-memory, JSON
# Lines output and --from-file, worker processes (--jobs), models held in memory (the Python API's),
# the diff and calc subcommands' work. (sources.blob is not among them: every reader reads through
# it, a local file's too.)
CLI_OPTIONAL_PATHS = ("mhainspect.pipeline.verify", "mhainspect.analysis.fit", "mhainspect.cli.batch_output",
                      "mhainspect.batch.pool", "queue", "multiprocessing", "mhainspect.pipeline.memory",
                      "mhainspect.analysis.diff", "mhainspect.conventions", "rich",
                      "mhainspect.results.optional")  # the Report parts only those (and rarer models) add
OPTIONAL_PATHS = ("concurrent.futures", "tomllib",
                  "mhainspect.sources.address", "mhainspect.frontends.onnx.landings",
                  "mhainspect.matchers.latent", "mhainspect.matchers.grouping", "mhainspect.matchers.experts",
                  "mhainspect.analysis.experts", "mhainspect.render.cells", *CLI_OPTIONAL_PATHS,
                  # a graph without a config.json beside it: no layer-type tables, no listing
                  "mhainspect.frontends.checkpoint.layer_types", "mhainspect.frontends.checkpoint.hf_config",
                  "mhainspect.sources.tree")

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


def test_version_imports_no_optional_path() -> None:
    """`mhainspect --version` (the command line's own imports, paid by every run) imports no front
    end and nothing that only an option or another subcommand uses."""
    code = ("import sys\nfrom mhainspect.cli.app import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n"
            "    pass\nprint('imported:', sorted(m for m in sys.argv[1].split(',') if m in sys.modules))")
    front_ends = ("mhainspect.frontends.onnx.frontend", "mhainspect.frontends.checkpoint.frontend",
                  "mhainspect.matchers.graph", "google.protobuf")
    proc = subprocess.run([sys.executable, "-c", code, ",".join((*CLI_OPTIONAL_PATHS, *front_ends))],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("mhainspect ") and lines[-1] == "imported: []", proc.stdout


def test_checkpoint_run_imports_no_graph_reader(tmp_path: Path) -> None:
    """A Hugging Face folder of fp8 experts with block scales (the quantization, grouping, expert and
    size passes all run) is audited from its headers without importing a graph reader, nor a thread
    pool (a local folder reads its shards in turn)."""
    folder = tmp_path / "moe"
    write_hf_folder(folder, llama_config(64, 4, 1, 2, model_type="qwen3_moe", num_experts=4),
                    moe_tensors(2, 4), shards=2)
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(folder), str(out), "concurrent.futures,logging"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] in (0, None), proc.stderr
    assert result["modules"] == [] and result["optional"] == [], result
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
    """torch.save'd state dicts written by torch from random weights (plus noise on every tensor),
    zip and legacy: a file beside its config.json, a Hugging Face folder of two .bin shards; the
    lm_head shares the embedding's storage, as a tied model saves it, and a quantized Linear states
    its logical shape in a small integer tensor."""
    import torch

    config = llama_config(64, 4, 2, 2, vocab=128)
    gen = torch.Generator().manual_seed(0)
    state = {name: torch.randn(shape, generator=gen).to(torch.bfloat16) + 0.01
             for name, (_, shape) in llama_tensors(64, 4, 2, 2, vocab=128).items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    state["model.layers.0.mlp.up_proj.weight_shape"] = torch.tensor([256, 64], dtype=torch.int64)
    models = []
    for legacy in (False, True):
        single = tmp_path / f"single_{legacy}"
        single.mkdir()
        (single / "config.json").write_text(json.dumps(config))
        torch.save(state, single / "model.pt", _use_new_zipfile_serialization=not legacy)
        folder = tmp_path / f"hf_{legacy}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
        names = sorted(state)
        halves = {"pytorch_model-00001-of-00002.bin": names[:len(names) // 2],
                  "pytorch_model-00002-of-00002.bin": names[len(names) // 2:]}
        for file, part in halves.items():
            torch.save({n: state[n].clone() for n in part}, folder / file, _use_new_zipfile_serialization=not legacy)
        index = {"weight_map": {n: file for file, part in halves.items() for n in part}}
        (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index))
        models += [single / "model.pt", folder]
    return models


def _torch_load_metadata(blob: Any, values: dict[str, tuple[int, ...]] | None = None, *_: Any) -> dict[str, Any]:
    """What torch's own weights-only loader says a file holds: the reference the torch-free reader
    is compared with (names, shapes, dtypes, which tensors share storage, small integer values)."""
    import torch

    from mhainspect.frontends.checkpoint.quantized import wants_values
    from mhainspect.frontends.checkpoint.reader import flatten_state_dict
    from mhainspect.ir.dtypes import canonical
    from mhainspect.ir.weights import WeightMeta

    from mhainspect.sources.blob import local_path

    obj = torch.load(str(local_path(blob)), weights_only=True, map_location="cpu")
    tensors: dict[str, Any] = {}
    flatten_state_dict(obj, "", tensors, torch.Tensor, depth=0)
    out = {}
    for name, t in tensors.items():
        # the file's name too: another shard's storages may reuse the addresses of a freed one's
        key = f"{blob.basename}:{t.untyped_storage().data_ptr()}:{t.storage_offset()}:{tuple(t.shape)}:{t.stride()}"
        out[name] = WeightMeta(name, tuple(t.shape), canonical(str(t.dtype)), key)
        if values is not None and wants_values(name) and not t.is_floating_point():
            values[name] = tuple(int(x) for x in t.reshape(-1).tolist())
    return out


def test_torch_save_state_dict_is_read_without_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local torch.save state dict (zip and legacy; a file, a sharded folder) is audited without
    importing torch, and its JSON is the JSON of the same audit with torch's own weights-only loader
    reading each file."""
    pytest.importorskip("torch")
    from mhainspect.cli.app import main

    for model in _torch_save_models(tmp_path):
        out = tmp_path / f"{model.parent.name}_{model.name}.json"
        proc = subprocess.run([sys.executable, "-c", TORCH_FREE_SCRIPT, str(model), str(out)],
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"torch": False}
        with monkeypatch.context() as m:  # the same audit, each file read by torch.load instead
            import mhainspect.frontends.checkpoint.torchzip as torchzip

            m.setattr(torchzip, "read_torch_file", _torch_load_metadata)
            with_torch = out.with_suffix(".torch.json")
            with pytest.raises(SystemExit) as exc:
                main([str(model), "--format", "json", "-o", str(with_torch)])
            assert exc.value.code in (0, None)
        report = json.loads(out.read_text())
        assert report["blocks"] and report == json.loads(with_torch.read_text())
        assert out.read_text() == with_torch.read_text()
