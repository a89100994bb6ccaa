"""Compare mhainspect's byte figures with hf-mem and accelerate's estimate-memory on the same local
Hugging Face folders (docs/size.md shows a run).

    python scripts/compare_size_tools.py [--workdir DIR] [--context 8192] [--keep]

1. Writes Hugging Face folders for published configs (Llama-3-8B, Mistral-7B-v0.1, Gemma-2-9B,
   gpt-oss-120b with its experts in bfloat16 (the published files store them in MXFP4),
   Falcon-7B-style multi-query, flan-T5-base): config.json plus a model.safetensors whose header
   lists every tensor of the real architecture (names, shapes and dtypes from transformers on the
   meta device) and whose data is a sparse hole: gigabytes on paper, nothing on disk, and
   nothing that any of the three tools reads.
2. Creates a throwaway virtual environment in the work dir and installs hf-mem and accelerate into
   it (torch and transformers are reused from this environment through a .pth file, so nothing is
   installed here and no CUDA build is pulled).
3. Runs, offline (HF_HUB_OFFLINE=1, no token):
   - ``mhainspect FOLDER --format json --context N``;
   - ``accelerate estimate-memory FOLDER --library_name transformers --dtypes float32 float16 int8 int4``:
     it asks the Hub for the model's info (``model_info``) before anything else and refuses a local
     path, so the script records that failure, then runs accelerate's own ``gather_data`` with that
     one call answered from the local config.json (AutoConfig reads the folder; the model is built on
     the meta device as the command does);
   - hf-mem: its command line only takes a Hub model id (every URL it requests is fixed to the
     Hub), so it cannot run on a local folder. The script tries the command line first (and
     records the failure), then calls hf-mem's own functions on the very inputs it would have
     fetched: ``parse_safetensors_metadata`` on the header and ``compute_safetensors_kv_cache_size``
     on config.json, with its command line's defaults (--experimental, max_model_len = N).
4. Prints a markdown table.

The work dir (default: a temp dir) is removed unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import site
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# Published config values (the fields that decide shapes, caches and dtypes).
CONFIGS: dict[str, dict[str, Any]] = {
    "llama-3-8b (GQA)": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 8192, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
    },
    "mistral-7b-v0.1 (sliding 4096)": {
        "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096, "torch_dtype": "bfloat16",
    },
    "gemma-2-9b (hybrid sliding)": {
        "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
        "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
        "vocab_size": 256000, "max_position_embeddings": 8192, "sliding_window": 4096, "torch_dtype": "bfloat16",
        "query_pre_attn_scalar": 256,
    },
    "gpt-oss-120b (hybrid sliding 128, bf16 experts)": {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
        "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
        "num_local_experts": 128, "num_experts_per_tok": 4, "vocab_size": 201088, "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 18, "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    },
    "falcon-7b (multi-query)": {
        "architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32,
        "num_attention_heads": 71, "multi_query": True, "new_decoder_architecture": False, "parallel_attn": True,
        "bias": False, "vocab_size": 65024, "torch_dtype": "bfloat16", "max_position_embeddings": 2048,
        "alibi": False,
    },
    "flan-t5-base-shaped (encoder-decoder)": {
        "architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "d_model": 768, "d_kv": 64, "d_ff": 2048,
        "num_layers": 12, "num_decoder_layers": 12, "num_heads": 12, "vocab_size": 32128, "is_encoder_decoder": True,
        "feed_forward_proj": "gated-gelu", "torch_dtype": "float32", "tie_word_embeddings": False,
    },
}

_SAFETENSORS_DTYPE = {"torch.float32": "F32", "torch.bfloat16": "BF16", "torch.float16": "F16"}


def write_folder(folder: Path, config: dict[str, Any]) -> None:
    """config.json and a sparse model.safetensors with the architecture's real header."""
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    cfg = transformers.AutoConfig.for_model(**config)
    dtype = getattr(torch, config.get("torch_dtype", "float32"))
    auto = (transformers.AutoModelForSeq2SeqLM if config.get("is_encoder_decoder")
            else transformers.AutoModelForCausalLM)
    with torch.device("meta"):
        model = auto.from_config(cfg, torch_dtype=dtype)
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    seen: set[int] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:  # tied weights are saved once
            continue
        seen.add(id(tensor))
        nbytes = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": _SAFETENSORS_DTYPE[str(tensor.dtype)], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(folder / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)  # a hole: no data blocks on disk


def make_venv(workdir: Path) -> Path:
    venv = workdir / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # torch and transformers from this environment; the tools themselves only in the venv.
    Path(purelib, "_reuse_parent.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "hf-mem", "accelerate"], check=True)
    return venv


def _offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_TOKEN", "HUGGING_FACE"))}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
                "NO_COLOR": "1", "PYTHONWARNINGS": "ignore"})
    return env


def run_mhainspect(folder: Path, context: int) -> dict[str, Any]:
    env = {**_offline_env(), "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "mhainspect", str(folder), "-f", "json", "--context", str(context)],
                         capture_output=True, text=True, env=env, timeout=300)
    if out.returncode != 0:
        return {"error": out.stderr.strip()[:300]}
    doc = json.loads(out.stdout)
    model = (doc["models"][0] if "models" in doc else doc)["model"]  # a folder argument gives the multi form
    return {"weights": model["weight_bytes"], "kv_per_token": model["kv_cache"]["bytes_per_token"],
            "kv_total": model["kv_cache"]["total_bytes"], "per_encoder_token": model["kv_cache"]["bytes_per_encoder_token"],
            "reason": model["kv_cache"]["reason"]}


_ACCELERATE_LOCAL = r"""
import json, sys, types
import accelerate.commands.estimate as est
folder = sys.argv[1]
config = json.load(open(folder + "/config.json"))
# The one Hub call (model_info) answered from the local config.json; everything else is accelerate's code.
est.verify_on_hub = lambda repo, token=None: types.SimpleNamespace(config=config, library_name="transformers")
args = types.SimpleNamespace(model_name=folder, library_name="transformers", trust_remote_code=False,
                             dtypes=["float32", "float16", "int8", "int4"])
rows = est.gather_data(args)
print(json.dumps({row[0]: {"largest_layer": int(row[1]), "total": int(row[2])} for row in rows}))
"""


def run_accelerate(venv: Path, folder: Path) -> dict[str, Any]:
    cmd = [str(venv / "bin" / "accelerate"), "estimate-memory", str(folder), "--library_name", "transformers",
           "--dtypes", "float32", "float16", "int8", "int4"]
    cli = subprocess.run(cmd, capture_output=True, text=True, env=_offline_env(), timeout=600)
    result: dict[str, Any] = {"cli": "ok" if cli.returncode == 0 else
                              " ".join((cli.stderr or cli.stdout).strip().splitlines()[-1:])[:200]}
    local = subprocess.run([str(venv / "bin" / "python"), "-c", _ACCELERATE_LOCAL, str(folder)],
                           capture_output=True, text=True, env=_offline_env(), timeout=600)
    if local.returncode != 0:
        result["error"] = local.stderr.strip().splitlines()[-1][:300] if local.stderr.strip() else "failed"
    else:
        result.update(json.loads(local.stdout.strip().splitlines()[-1]))
    return result


_HF_MEM_LOCAL = r"""
import json, struct, sys
from hf_mem.safetensors.metadata import parse_safetensors_metadata
from hf_mem.safetensors.kv_cache import compute_safetensors_kv_cache_size, resolve_kv_cache_dtype
folder, context = sys.argv[1], int(sys.argv[2])
raw = open(folder + "/model.safetensors", "rb").read(8)
n = struct.unpack("<Q", raw)[0]
with open(folder + "/model.safetensors", "rb") as fh:
    fh.seek(8)
    header = json.loads(fh.read(n))
metadata = parse_safetensors_metadata(raw_metadata={"Transformer": header})
config = json.load(open(folder + "/config.json"))
out = {"weights": metadata.bytes_count}
try:
    dtype = resolve_kv_cache_dtype(config=config, kv_cache_dtype="auto", metadata=metadata, model_id=folder)
    out["kv_total"] = compute_safetensors_kv_cache_size(config=config, cache_dtype=dtype, max_model_len=context)
    out["kv_per_token"] = compute_safetensors_kv_cache_size(config=config, cache_dtype=dtype, max_model_len=1)
except Exception as exc:
    out["kv_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def run_hf_mem(venv: Path, folder: Path, context: int) -> dict[str, Any]:
    cli = subprocess.run([str(venv / "bin" / "hf-mem"), "--model-id", str(folder), "--experimental",
                          "--max-model-len", str(context), "--json-output"], capture_output=True, text=True,
                         env=_offline_env(), timeout=120)
    result: dict[str, Any] = {"cli": "ok" if cli.returncode == 0 else
                              " ".join((cli.stderr or cli.stdout).strip().splitlines()[-1:])[:200]}
    local = subprocess.run([str(venv / "bin" / "python"), "-c", _HF_MEM_LOCAL, str(folder), str(context)],
                           capture_output=True, text=True, env=_offline_env(), timeout=120)
    if local.returncode != 0:
        result["error"] = local.stderr.strip().splitlines()[-1][:300] if local.stderr.strip() else "failed"
    else:
        result.update(json.loads(local.stdout))
    return result


def _n(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else ("—" if value is None else str(value))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--context", type=int, default=8192)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mhainspect-size-"))
    try:
        venv = make_venv(workdir)
        rows = []
        for name, config in CONFIGS.items():
            folder = workdir / "models" / name.split(" ")[0]
            write_folder(folder, config)
            rows.append((name, run_mhainspect(folder, args.context), run_hf_mem(venv, folder, args.context),
                         run_accelerate(venv, folder)))
        print(f"context {args.context:,} tokens, batch 1\n")
        print("| model | mhainspect weights | hf-mem weights | accelerate (float16) | mhainspect KV/token | "
              f"hf-mem KV/token | mhainspect KV at {args.context:,} | hf-mem KV at {args.context:,} |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, mine, hf, acc in rows:
            fp16 = acc.get("float16", {}).get("total", acc.get("error"))
            print(f"| {name} | {_n(mine.get('weights'))} | {_n(hf.get('weights'))} | {_n(fp16)} | "
                  f"{_n(mine.get('kv_per_token'))} | {_n(hf.get('kv_per_token', hf.get('kv_error')))} | "
                  f"{_n(mine.get('kv_total'))} | {_n(hf.get('kv_total', hf.get('kv_error')))} |")
        print("\nmhainspect notes:")
        for name, mine, _, _ in rows:
            if mine.get("per_encoder_token") or mine.get("reason") or mine.get("error"):
                print(f"- {name}: per encoder token {_n(mine.get('per_encoder_token'))}; "
                      f"{mine.get('reason') or mine.get('error')}")
        print("\nhf-mem command line on a local folder:")
        for name, _, hf, _ in rows:
            print(f"- {name}: {hf.get('cli')}")
        print("\naccelerate estimate-memory command line on a local folder:")
        for name, _, _, acc in rows:
            print(f"- {name}: {acc.get('cli')}")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
