"""Benchmark: whole-process time of mhainspect on checkpoint folders with very many tensors.

    python benchmarks/checkpoint_headers.py [--repeat 5] [--models deepseek-v3,kimi-k2,qwen3-30b-a3b]
                                            [--dir DIR] [--profile NAME]

Generates Hugging Face folders shaped like real mixture-of-experts checkpoints (config.json,
model.safetensors.index.json and every shard) whose shards hold only their safetensors header: the
files are sparse (truncated to the size their data offsets need), so a 671B-parameter folder costs a
few megabytes of disk. Then times ``mhainspect FOLDER --format json -o OUT`` as a fresh process
(interpreter start and imports included), best of --repeat (wall and user + system CPU time, each
its own best: on a shared machine the CPU time is the steadier figure), with its peak RSS.

- deepseek-v3: DeepSeek-V3's layout (61 layers + 1 next-token-prediction layer, 256 routed experts +
  1 shared from layer 3, latent attention), fp8 e4m3 weights with float32 128x128 block scales
  (``weight_scale_inv``), 135 shards: about 92k tensors.
- kimi-k2: Kimi-K2's (61 layers, 384 routed experts + 1 shared from layer 1, 64 heads), fp8 with
  block scales, 61 shards: about 140k tensors.
- qwen3-30b-a3b: Qwen3-30B-A3B's (48 layers, 128 experts, GQA 32/4, bf16), 16 shards: about 19k.

``--profile NAME`` runs the audit of one model in-process under cProfile and prints the top
functions by cumulative time instead of timing processes. Folders go to $MHAINSPECT_BENCH_DIR or
/tmp/mhainspect-bench/checkpoints (never the repository).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PY = sys.executable
_BIN = Path(PY).parent / "mhainspect"
MHAINSPECT = [str(_BIN)] if _BIN.exists() else [PY, "-m", "mhainspect"]
BLOCK = 128  # fp8 block-scale tile (weight_block_size [128, 128])
_ITEMSIZE = {"BF16": 2, "F32": 4, "F8_E4M3": 1}


@dataclass(frozen=True)
class MoE:
    """A mixture-of-experts decoder's layout."""

    name: str
    layers: int
    dense_layers: int  # first_k_dense_replace
    mtp_layers: int  # num_nextn_predict_layers, stored after the decoder layers
    hidden: int
    vocab: int
    experts: int
    shared_experts: int
    expert_ffn: int
    dense_ffn: int
    shards: int
    fp8: bool
    config: dict[str, object]
    mla: bool = True
    heads: int = 128
    kv_heads: int = 128
    head_dim: int = 128


def _deepseek_config(heads: int, layers: int, dense: int, experts: int, vocab: int, mtp: int, **more: object
                     ) -> dict[str, object]:
    return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
            "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": heads, "n_shared_experts": 1,
            "n_routed_experts": experts, "first_k_dense_replace": dense, "kv_lora_rank": 512, "q_lora_rank": 1536,
            "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": vocab,
            "num_nextn_predict_layers": mtp, "torch_dtype": "bfloat16", "max_position_embeddings": 163840,
            "tie_word_embeddings": False, "rms_norm_eps": 1e-6,
            "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                    "weight_block_size": [BLOCK, BLOCK]}, **more}


MODELS = {
    "deepseek-v3": MoE("deepseek-v3", 61, 3, 1, 7168, 129280, 256, 1, 2048, 18432, 135, True,
                       _deepseek_config(128, 61, 3, 256, 129280, 1)),
    "kimi-k2": MoE("kimi-k2", 61, 1, 0, 7168, 163840, 384, 1, 2048, 18432, 61, True,
                   _deepseek_config(64, 61, 1, 384, 163840, 0, model_type="kimi_k2", n_group=1, topk_group=1),
                   heads=64, kv_heads=64),
    "qwen3-30b-a3b": MoE("qwen3-30b-a3b", 48, 0, 0, 2048, 151936, 128, 0, 768, 6144, 16, False, {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
        "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
        "num_experts_per_tok": 8, "vocab_size": 151936, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
        "max_position_embeddings": 40960}, mla=False, heads=32, kv_heads=4),
}


def _linear(m: MoE, name: str, out: int, inp: int) -> Iterator[tuple[str, str, list[int]]]:
    """A Linear's weight, fp8 with its block scale when the model is fp8, else bf16."""
    if m.fp8:
        yield f"{name}.weight", "F8_E4M3", [out, inp]
        yield f"{name}.weight_scale_inv", "F32", [math.ceil(out / BLOCK), math.ceil(inp / BLOCK)]
    else:
        yield f"{name}.weight", "BF16", [out, inp]


def _attention(m: MoE, p: str) -> Iterator[tuple[str, str, list[int]]]:
    d = m.hidden
    if m.mla:
        qk, v = 128 + 64, 128
        yield from _linear(m, f"{p}.q_a_proj", 1536, d)
        yield f"{p}.q_a_layernorm.weight", "BF16", [1536]
        yield from _linear(m, f"{p}.q_b_proj", m.heads * qk, 1536)
        yield from _linear(m, f"{p}.kv_a_proj_with_mqa", 512 + 64, d)
        yield f"{p}.kv_a_layernorm.weight", "BF16", [512]
        yield from _linear(m, f"{p}.kv_b_proj", m.heads * (128 + v), 512)
        yield from _linear(m, f"{p}.o_proj", d, m.heads * v)
    else:
        hd = m.head_dim
        yield from _linear(m, f"{p}.q_proj", m.heads * hd, d)
        yield from _linear(m, f"{p}.k_proj", m.kv_heads * hd, d)
        yield from _linear(m, f"{p}.v_proj", m.kv_heads * hd, d)
        yield from _linear(m, f"{p}.o_proj", d, m.heads * hd)
        yield f"{p}.q_norm.weight", "BF16", [hd]
        yield f"{p}.k_norm.weight", "BF16", [hd]


def _mlp(m: MoE, p: str, ffn: int) -> Iterator[tuple[str, str, list[int]]]:
    yield from _linear(m, f"{p}.gate_proj", ffn, m.hidden)
    yield from _linear(m, f"{p}.up_proj", ffn, m.hidden)
    yield from _linear(m, f"{p}.down_proj", m.hidden, ffn)


def _layer(m: MoE, i: int) -> Iterator[tuple[str, str, list[int]]]:
    p = f"model.layers.{i}"
    yield f"{p}.input_layernorm.weight", "BF16", [m.hidden]
    yield from _attention(m, f"{p}.self_attn")
    yield f"{p}.post_attention_layernorm.weight", "BF16", [m.hidden]
    if i < m.dense_layers:
        yield from _mlp(m, f"{p}.mlp", m.dense_ffn)
        return
    yield f"{p}.mlp.gate.weight", "BF16", [m.experts, m.hidden]
    if m.mla:
        yield f"{p}.mlp.gate.e_score_correction_bias", "F32", [m.experts]
    for e in range(m.experts):
        yield from _mlp(m, f"{p}.mlp.experts.{e}", m.expert_ffn)
    if m.shared_experts:
        yield from _mlp(m, f"{p}.mlp.shared_experts", m.expert_ffn * m.shared_experts)
    if i >= m.layers:  # DeepSeek-V3's next-token-prediction module
        yield f"{p}.embed_tokens.weight", "BF16", [m.vocab, m.hidden]
        yield f"{p}.enorm.weight", "BF16", [m.hidden]
        yield f"{p}.hnorm.weight", "BF16", [m.hidden]
        yield f"{p}.eh_proj.weight", "BF16", [m.hidden, 2 * m.hidden]
        yield f"{p}.shared_head.norm.weight", "BF16", [m.hidden]
        yield f"{p}.shared_head.head.weight", "BF16", [m.vocab, m.hidden]


def tensors(m: MoE) -> list[tuple[str, str, list[int]]]:
    out = [("model.embed_tokens.weight", "BF16", [m.vocab, m.hidden])]
    for i in range(m.layers + m.mtp_layers):
        out.extend(_layer(m, i))
    out += [("model.norm.weight", "BF16", [m.hidden]), ("lm_head.weight", "BF16", [m.vocab, m.hidden])]
    return out


def write_folder(m: MoE, folder: Path) -> Path:
    """config.json, the index and every shard (header only, sparse data); skipped when present."""
    done = folder / ".complete"
    if done.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    items = tensors(m)
    per = math.ceil(len(items) / m.shards)
    weight_map: dict[str, str] = {}
    for s in range(m.shards):
        name = f"model-{s + 1:05d}-of-{m.shards:05d}.safetensors"
        header: dict[str, object] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for tname, dtype, shape in items[s * per:(s + 1) * per]:
            size = math.prod(shape) * _ITEMSIZE[dtype]
            header[tname] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
            offset += size
            weight_map[tname] = name
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        with open(folder / name, "wb") as fh:
            fh.write(len(raw).to_bytes(8, "little") + raw)
            fh.truncate(8 + len(raw) + offset)  # sparse: the data is never written
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(m.config, indent=1))
    done.write_text(str(len(items)))
    return folder


def time_process(folder: Path, out: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, peak RSS in KB) of one fresh ``mhainspect FOLDER`` process."""
    start = time.perf_counter()
    proc = subprocess.Popen([*MHAINSPECT, str(folder), "--format", "json", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"mhainspect failed on {folder}: {proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def profile(folder: Path) -> None:
    import cProfile
    import pstats

    from mhainspect.pipeline import audit

    prof = cProfile.Profile()
    prof.enable()
    audit(folder)
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--dir", type=Path, default=Path(os.environ.get("MHAINSPECT_BENCH_DIR", "/tmp/mhainspect-bench"))
                    / "checkpoints")
    ap.add_argument("--profile", choices=sorted(MODELS))
    args = ap.parse_args()
    if args.profile:
        profile(write_folder(MODELS[args.profile], args.dir / args.profile))
        return
    # As pip writes it for a regular install: without it, a run under PYTHONDONTWRITEBYTECODE=1
    # compiles every module it imports from source (docs/performance.md).
    subprocess.run([PY, "-m", "compileall", "-q", str(Path(__file__).resolve().parents[1] / "mhainspect")],
                   check=False, stdout=subprocess.DEVNULL)
    print("| model | tensors | shards | wall s (best) | CPU s | peak RSS MB | blocks |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key in args.models.split(","):
        m = MODELS[key]
        folder = write_folder(m, args.dir / key)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "report.json"
            runs = [time_process(folder, out) for _ in range(args.repeat)]
            blocks = len(json.loads(out.read_text())["blocks"])
        wall = min(r[0] for r in runs)
        cpu = min(r[1] for r in runs)
        rss = max(r[2] for r in runs)
        count = int((folder / ".complete").read_text())
        print(f"| {key} | {count:,} | {m.shards} | {wall:.2f} | {cpu:.2f} | {rss / 1024:.0f} | {blocks} |")
    print(f"\n({resource.getpagesize()}-byte pages; {PY}; best of {args.repeat} fresh processes)")


if __name__ == "__main__":
    main()
