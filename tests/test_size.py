"""Size in bytes checked against reality: every present.* output of one onnxruntime run, every stored
initializer and Constant of the file, safetensors header offsets, torch parameter storage.

The models are small transformers decoders exported once per session with their KV cache
(tests/size_exports.py); the run is at PAST + NEW tokens for BATCH sequences.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mhainspect.analysis.size import SizeOptions, weight_sizes, with_options
from mhainspect.api import inspect
from mhainspect.ir import dtypes
from mhainspect.results import AttentionBlock, CacheStatus, Report
from mhainspect.results.stages import StoredTensor

sys.path.insert(0, str(Path(__file__).parent))
import size_exports as se  # noqa: E402

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

REPO = Path(__file__).resolve().parents[1]
SCALE_SUFFIXES = ("_scale", "_zero_point", "_scales", "_zero_points")  # onnxruntime quantizers' names


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], se.Export]:
    root = tmp_path_factory.mktemp("size_exports")
    cache: dict[str, se.Export] = {}

    def get(name: str) -> se.Export:
        if name not in cache:
            cache[name] = se.BUILDERS[name](root)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def quantized(exported: Callable[[str], se.Export]) -> Callable[[str], se.Export]:
    """int8 (quantize_dynamic) and int4 (MatMulNBits, block 16, with zero points) copies of the GQA decoder."""
    cache: dict[str, se.Export] = {}

    def get(kind: str) -> se.Export:
        if kind not in cache:
            base = exported("llama_gqa")
            target = base.path.parent / f"{kind}.onnx"
            if kind == "int8":
                from onnxruntime.quantization import QuantType, quantize_dynamic

                quantize_dynamic(str(base.path), str(target), weight_type=QuantType.QInt8)
            else:
                from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

                q = MatMulNBitsQuantizer(onnx.load(str(base.path)), block_size=16, is_symmetric=False)
                q.process()
                onnx.save(q.model.model, str(target))
            cache[kind] = se.Export(target, base.feed, base.context)
        return cache[kind]

    return get


def _report(export: se.Export, path: Path | None = None) -> Report:
    return with_options(inspect(str(path or export.path)), SizeOptions(context=export.context, batch=se.BATCH))


def _kv_evidence(block: AttentionBlock) -> str:
    """Where a caching block's figure came from (its kv_cache_bytes_per_token evidence)."""
    found = [e for e in block.evidence if e.field == "kv_cache_bytes_per_token"]
    assert len(found) == 1 and found[0].value == block.kv_cache_bytes_per_token
    return found[0].detail


def _held(block: AttentionBlock, context: int) -> int:
    return context if block.sliding_window is None else min(context, block.sliding_window - 1)


# ----------------------------------------------------------------------------- KV cache vs the run

DECODERS = ["gpt2", "llama_gqa", "llama_mqa", "llama_fp16", "mistral", "hybrid", "t5", "whisper"]


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.slow  # many seconds: models exported and run (-m 'not slow' leaves it out)
def test_kv_cache_equals_every_present_output(name: str, exported: Callable[[str], se.Export]) -> None:
    export = exported(name)
    outputs = se.run(export)
    report = _report(export)
    self_blocks = [b for b in report.blocks if b.kind == "self" and b.kv_cache_bytes_per_token is not None]
    cross_blocks = [b for b in report.blocks if b.kind == "cross" and b.kv_cache_bytes_per_token is not None]
    seq2seq = export.encoder_tokens is not None
    assert len(self_blocks) == 2 and len(cross_blocks) == (2 if seq2seq else 0)
    for i, block in enumerate(self_blocks):  # layer i's present key and value, one by one
        names = [f"present.{i}.decoder.{kv}" if seq2seq else f"present.{i}.{kv}" for kv in ("key", "value")]
        run_bytes = sum(outputs[n].nbytes for n in names)
        assert run_bytes == se.BATCH * block.kv_cache_bytes_per_token * _held(block, export.context), (name, block.name)
        assert block.kv_cache_dtype == dtypes.canonical(str(outputs[names[0]].dtype))
    for i, block in enumerate(cross_blocks):
        run_bytes = sum(outputs[f"present.{i}.encoder.{kv}"].nbytes for kv in ("key", "value"))
        assert export.encoder_tokens is not None
        assert run_bytes == se.BATCH * block.kv_cache_bytes_per_token * export.encoder_tokens
    kv = report.model.kv_cache
    assert kv is not None
    presents = [n for n in outputs if n.startswith("present") and ".encoder." not in n]
    assert kv.total_bytes == sum(outputs[n].nbytes for n in presents)
    encoder_presents = [n for n in outputs if ".encoder." in n]
    if seq2seq:
        assert kv.bytes_per_encoder_token is not None and export.encoder_tokens is not None
        assert se.BATCH * kv.bytes_per_encoder_token * export.encoder_tokens == sum(
            outputs[n].nbytes for n in encoder_presents)
        encoder_blocks = [b for b in report.blocks if "encoder" in b.name and b.kind == "self"]
        assert encoder_blocks and all(b.kv_cache_bytes_per_token is None and b.kv_cache_status is CacheStatus.NONE
                                      for b in encoder_blocks)


def test_gqa_and_mqa_shrink_the_cache_not_the_query(exported: Callable[[str], se.Export]) -> None:
    per_token = {name: inspect(str(exported(name).path)).model.kv_cache for name in ("llama_gqa", "llama_mqa")}
    gqa, mqa = per_token["llama_gqa"], per_token["llama_mqa"]
    assert gqa is not None and mqa is not None and gqa.bytes_per_token == 2 * (mqa.bytes_per_token or 0)


def test_sliding_window_layers_are_capped(exported: Callable[[str], se.Export]) -> None:
    report = _report(exported("hybrid"))
    windows = [b.sliding_window for b in report.blocks]
    assert windows == [se.WINDOW, None]  # layer_types: sliding, full
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token is not None
    per_layer = kv.bytes_per_token // 2
    assert kv.total_bytes == se.BATCH * per_layer * (min(export_context := exported("hybrid").context, se.WINDOW - 1)
                                                     + export_context)
    mistral = _report(exported("mistral"))
    assert all(b.sliding_window == se.WINDOW for b in mistral.blocks)
    assert "sliding window" in _kv_evidence(mistral.blocks[0]) and mistral.blocks[0].kv_cache_reason is None


def test_kv_dtype_overrides_the_graph(exported: Callable[[str], se.Export]) -> None:
    export = exported("llama_gqa")
    report = with_options(inspect(str(export.path)), SizeOptions(context=100, kv_dtype="float8_e4m3fn"))
    kv = report.model.kv_cache
    assert kv is not None and kv.dtype == "float8e4m3fn" and kv.bytes_per_token == 2 * 2 * (8 + 8) * 1
    assert kv.total_bytes == 100 * kv.bytes_per_token
    assert "--kv-dtype" in _kv_evidence(report.blocks[0])


# ----------------------------------------------------------------------------- weights vs the file


def _stored_bytes(path: Path) -> tuple[int, int, dict[str, int]]:
    """(all initializer and Constant bytes, parameter-initializer bytes, bytes by dtype) read with numpy."""
    model = onnx.load(str(path))
    total = params = 0
    by_dtype: dict[str, int] = {}

    def add(t: onnx.TensorProto, parameter: bool) -> None:
        nonlocal total, params
        n = numpy_helper.to_array(t).nbytes
        total += n
        params += n if parameter else 0
        name = dtypes.onnx_name(t.data_type)
        by_dtype[name] = by_dtype.get(name, 0) + n

    # The TorchScript exporter stores a tied output embedding a second time, transposed
    # (onnx::MatMul_N = wte.weight.T): a copy, overhead like the second copy of a tied checkpoint.
    arrays = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    copies = {name for name, a in arrays.items() if a.ndim == 2 and any(
        other != name and b.shape == a.T.shape and np.array_equal(b, a.T) for other, b in arrays.items()
        if "." in other and ":" not in other)}
    for init in model.graph.initializer:
        add(init, not init.name.endswith(SCALE_SUFFIXES) and init.name not in copies)
    for node in model.graph.node:
        if node.op_type == "Constant":
            add(next(a.t for a in node.attribute if a.name == "value"), False)
    return total, params, by_dtype


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa", "llama_fp16", "t5", "whisper"])
def test_weight_bytes_equal_the_stored_tensors(name: str, exported: Callable[[str], se.Export]) -> None:
    path = exported(name).path
    total, params, by_dtype = _stored_bytes(path)
    model = inspect(str(path)).model
    assert model.weight_bytes == total
    assert model.weight_bytes - (model.weight_bytes_overhead or 0) == params
    assert dict(model.weight_bytes_by_dtype) == by_dtype


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_quantized_weight_bytes(kind: str, quantized: Callable[[str], se.Export]) -> None:
    export = quantized(kind)
    total, params, by_dtype = _stored_bytes(export.path)
    report = _report(export)
    m = report.model
    assert m.weight_bytes == total
    assert m.weight_bytes - (m.weight_bytes_overhead or 0) == params  # scales and zero points are overhead
    assert dict(m.weight_bytes_by_dtype) == by_dtype
    model = onnx.load(str(export.path))
    scales = sum(numpy_helper.to_array(i).nbytes for i in model.graph.initializer if i.name.endswith(SCALE_SUFFIXES))
    assert scales > 0 and (m.weight_bytes_overhead or 0) >= scales
    assert all(b.weight_bytes for b in report.blocks)
    # the run still agrees on the cache (quantized weights, float cache)
    outputs = se.run(export)
    kv = m.kv_cache
    assert kv is not None and kv.total_bytes == sum(v.nbytes for n, v in outputs.items() if n.startswith("present"))


def test_block_weight_bytes_are_its_projections(exported: Callable[[str], se.Export]) -> None:
    path = exported("llama_fp16").path
    stored = {i.name: numpy_helper.to_array(i).nbytes for i in onnx.load(str(path)).graph.initializer}
    report = inspect(str(path))
    for b in report.blocks:  # no biases, no shared tensors (the exporter keeps o_proj in float32 here)
        assert b.weight_bytes == sum(stored[p.weight] for p in b.projections if p.weight)


def test_packed_int4_and_ggml_blocks_round_up() -> None:
    def stored(dtype: str, numel: int) -> StoredTensor:
        return StoredTensor("w", dtype, numel, f"k{dtype}{numel}", True)

    assert weight_sizes([stored("int4", 15)], [], {}).total == 8
    assert weight_sizes([stored("q4_k", 512)], [], {}).total == 2 * 144
    shared = [StoredTensor("a", "float16", 10, "same", True), StoredTensor("b", "float16", 10, "same", True)]
    assert weight_sizes(shared, [], {}).total == 20  # tied: once
    assert dtypes.lookup("q4_0") is not None and dtypes.lookup("q4_0").bits_per_element == Fraction(9, 2)  # type: ignore[union-attr]


def test_int4_initializer_from_onnx_helper(tmp_path: Path) -> None:
    """A DequantizeLinear(int4 weight [16, 15], per-axis scales) -> MatMul graph: packed bytes exact."""
    w = helper.make_tensor("w", TensorProto.INT4, [16, 15], np.ones(240, dtype=np.int8).tolist())
    s = helper.make_tensor("s", TensorProto.FLOAT, [15], np.ones(15, dtype=np.float32).tolist())
    nodes = [helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], axis=1),
             helper.make_node("MatMul", ["x", "wf"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 15])], [w, s])
    path = tmp_path / "int4.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), str(path))
    m = inspect(str(path)).model
    assert m.weight_bytes == 120 + 60 and dict(m.weight_bytes_by_dtype) == {"int4": 120, "float32": 60}
    assert m.weight_bytes_overhead == 60  # the per-axis scales


# ----------------------------------------------------------------------------- checkpoints and modules


@pytest.fixture(scope="session")
def mistral_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, max_position_embeddings=64, sliding_window=se.WINDOW)
    model = MistralForCausalLM(cfg).to(dtype=__import__("torch").bfloat16)
    folder = tmp_path_factory.mktemp("mistral_ckpt")
    model.save_pretrained(folder)
    return folder, model


def test_checkpoint_folder_sizes(mistral_folder: tuple[Path, Any], exported: Callable[[str], se.Export]) -> None:
    folder, _ = mistral_folder
    header_bytes = 0
    for shard in folder.glob("*.safetensors"):
        raw = shard.read_bytes()
        header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
        header_bytes += sum(e["data_offsets"][1] - e["data_offsets"][0] for k, e in header.items() if k != "__metadata__")
    report = with_options(inspect(str(folder)), SizeOptions(context=10))
    m = report.model
    assert m.weight_bytes == header_bytes and dict(m.weight_bytes_by_dtype) == {"bfloat16": header_bytes}
    assert m.weight_bytes_overhead == 0
    kv = m.kv_cache
    assert kv is not None and kv.dtype == "bfloat16"
    onnx_kv = inspect(str(exported("mistral").path)).model.kv_cache  # same layout, float32
    assert onnx_kv is not None and kv.bytes_per_token == (onnx_kv.bytes_per_token or 0) // 2
    assert kv.total_bytes == (kv.bytes_per_token or 0) * (se.WINDOW - 1)  # every layer slides
    assert all(b.weight_bytes == 2 * b.params.total for b in report.blocks)


def test_module_sizes(mistral_folder: tuple[Path, Any]) -> None:
    _, model = mistral_folder
    report = inspect(model, trace=False)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    m = report.model
    assert m.weight_bytes == params + buffers and m.weight_bytes_overhead == buffers
    kv = m.kv_cache
    assert kv is not None and kv.bytes_per_token == 2 * 2 * (8 + 8) * 2  # 2 layers, 2 kv heads, bfloat16


def test_encoder_only_reports_no_cache() -> None:
    report = inspect(str(REPO / "sample_models" / "bert_two_layers.onnx"))
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token is None and kv.total_bytes is None
    assert kv.reason is not None and "encoder" in kv.reason
    assert all(b.kv_cache_bytes_per_token is None for b in report.blocks)


def test_checkpoint_without_config_is_unknown(tmp_path: Path, mistral_folder: tuple[Path, Any]) -> None:
    folder, _ = mistral_folder
    shard = next(folder.glob("*.safetensors"))
    lone = tmp_path / "model.safetensors"
    lone.write_bytes(shard.read_bytes())
    kv = inspect(str(lone)).model.kv_cache
    assert kv is not None and kv.bytes_per_token is None and (kv.reason or "").startswith("unknown")


# ----------------------------------------------------------------------------- command line


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "MHAINSPECT_NO_PROGRESS": "1"}
    return subprocess.run([sys.executable, "-m", "mhainspect", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


def test_size_gates_from_the_command_line(exported: Callable[[str], se.Export]) -> None:
    path = str(exported("llama_gqa").path)
    ok = _cli(path, "--context", "100", "--max-weight-bytes", "1G", "--max-kv-cache", "1MiB", "-q")
    assert ok.returncode == 0, ok.stderr
    bad = _cli(path, "--context", "100", "--max-weight-bytes", "10K", "--max-kv-cache", "1K", "-q")
    assert bad.returncode == 1
    lines = [ln for ln in bad.stderr.splitlines() if "gate failed" in ln]
    assert len(lines) == 2 and "--max-weight-bytes 10K" in lines[0] and "--max-kv-cache 1K" in lines[1]
    assert "25,600 bytes" in lines[1]  # 256 bytes per token x 100 tokens
    assert _cli(path, "--max-kv-cache", "1K").returncode == 2  # needs --context
    assert _cli(path, "--max-weight-bytes", "lots").returncode == 2


def test_size_gates_from_pyproject(tmp_path: Path, exported: Callable[[str], se.Export]) -> None:
    """The nearest pyproject.toml above the model (as ruff finds it) sets the size gates and the context."""
    model = tmp_path / "model.onnx"
    model.write_bytes(exported("llama_gqa").path.read_bytes())
    (tmp_path / "pyproject.toml").write_text('[tool.mhainspect]\nmax-kv-cache = "1K"\ncontext = 100\n'
                                             'max-weight-bytes = 1000000\n', encoding="utf-8")
    result = _cli(str(model), "-q")
    assert result.returncode == 1 and result.stderr.count("gate failed") == 1, result.stderr
    assert "max-kv-cache 1K (1,000 bytes) from" in result.stderr and "25,600 bytes" in result.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.mhainspect]\nmax-kv-cache = "2 GB?"\n', encoding="utf-8")
    assert _cli(str(model)).returncode == 2


def test_json_carries_the_size_keys(exported: Callable[[str], se.Export], schema_validator: Any) -> None:
    result = _cli(str(exported("t5").path), "-f", "json", "--context", "8", "--batch", "3")
    doc = json.loads(result.stdout)
    assert not list(schema_validator.iter_errors(doc))
    kv = doc["model"]["kv_cache"]
    assert kv["context"] == 8 and kv["batch"] == 3 and kv["total_bytes"] == 3 * 8 * kv["bytes_per_token"]
    assert kv["bytes_per_encoder_token"] == 2 * 4 * (8 + 8) * 4
    assert doc["model"]["weight_bytes"] == sum(doc["model"]["weight_bytes_by_dtype"].values())
    assert all("kv_cache_bytes_per_token" in b and "weight_bytes" in b for b in doc["blocks"])
    table = _cli(str(exported("t5").path), "--context", "8")
    assert "Size" in table.stdout and "per encoder token" in table.stdout and "at context 8" in table.stdout


def test_calc_kv_heads_side_by_side() -> None:
    result = _cli("calc", "hf", "hidden_size=4096", "num_attention_heads=32", "--dtype", "bfloat16", "--context",
                  "8192", "--kv-heads", "32", "--kv-heads", "8", "--kv-heads", "1", "-f", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["kv_heads_what_if"]
    assert [r["layout"] for r in rows] == ["MHA", "GQA", "MQA"]
    assert [r["kv_bytes_per_token"] for r in rows] == [32 * 256 * 2, 8 * 256 * 2, 1 * 256 * 2]
    assert rows[1]["kv_bytes"] == 8192 * 8 * 256 * 2
    assert rows[0]["weight_bytes"] == 2 * 4 * 4096 * 4096
    heads = _cli("calc", "hf", "hidden_size=4096", "num_attention_heads=32", "--heads", "16", "--dtype", "float16")
    assert heads.returncode == 0 and "does not change the parameter count" in heads.stdout


@pytest.mark.parametrize("fmt", ["sarif", "github"])
def test_size_gates_in_ci_formats(fmt: str, exported: Callable[[str], se.Export]) -> None:
    result = _cli(str(exported("llama_gqa").path), "-f", fmt, "--context", "100", "--max-kv-cache", "1K",
                  "--max-weight-bytes", "1K")
    assert result.returncode == 1, result.stderr
    if fmt == "sarif":
        rules = {r["ruleId"] for run in json.loads(result.stdout)["runs"] for r in run["results"]}
        assert {"max-kv-cache", "max-weight-bytes"} <= rules
    else:
        assert result.stdout.count("::error") == 2


def test_kv_gate_passes_an_encoder_and_fails_an_unknown() -> None:
    encoder = _cli(str(REPO / "sample_models" / "bert_two_layers.onnx"), "--context", "512", "--max-kv-cache", "1",
                   "-q")
    assert encoder.returncode == 0, encoder.stderr  # nothing caches
    unknown = _cli(str(REPO / "sample_models" / "gqa_llama.onnx"), "--context", "512", "--max-kv-cache", "1G", "-q")
    assert unknown.returncode == 1 and "KV cache unknown" in unknown.stderr and "attention_mask" in unknown.stderr


def test_config_decides_per_tower() -> None:
    """A vision-language config: the language model's blocks cache, the vision tower's do not."""
    from mhainspect.frontends.checkpoint.size_inputs import config_decoding
    from mhainspect.results import ParamBreakdown

    def block(name: str) -> AttentionBlock:
        return AttentionBlock(name, "checkpoint", "self", 8, 2, 64, 8, 8, ParamBreakdown(0, 0, 0, 0, 0, 0), (), ())

    cfg = {"architectures": ["LlavaForConditionalGeneration"],
           "vision_config": {"num_attention_heads": 8, "hidden_size": 64},
           "text_config": {"num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 64,
                           "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"]}}
    text0, text1, vision = (block("language_model.model.layers.0.self_attn"),
                            block("language_model.model.layers.1.self_attn"),
                            block("vision_tower.vision_model.encoder.layers.0.self_attn"))
    decided = {d.block: d for d in config_decoding(cfg, [text0, text1, vision], {})}
    assert decided[text0.name].caches is True and decided[text0.name].window == 16
    assert decided[text1.name].caches is True and decided[text1.name].window is None
    assert decided[vision.name].caches is False


def test_traced_module_causal_mask_decides() -> None:
    """A module without a config: a causal mask in its traced graph says it caches (2 kv heads of 4)."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v, self.o = nn.Linear(32, 32), nn.Linear(32, 16), nn.Linear(32, 16), nn.Linear(32, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q = self.q(x).view(b, t, 4, 8).transpose(1, 2)
            k = self.k(x).view(b, t, 2, 8).transpose(1, 2).repeat_interleave(2, 1)
            v = self.v(x).view(b, t, 2, 8).transpose(1, 2).repeat_interleave(2, 1)
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
            scores = (q @ k.transpose(-1, -2) / 8**0.5).masked_fill(mask, -1e9)
            return self.o((torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, t, 32))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = Attention()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attn(x)

    report = inspect(Model(), (torch.randn(2, 5, 32),), context=10)
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == 2 * (8 + 8) * 4 and kv.total_bytes == 10 * kv.bytes_per_token
    assert "Trilu" in _kv_evidence(report.blocks[0])


def test_schema_documents_every_emitted_key(exported: Callable[[str], se.Export], report_schema: Any) -> None:
    """Every key the JSON report writes for the model, its KV cache and its blocks is in the schema."""
    from mhainspect.render.json_render import report_to_dict

    doc = report_to_dict(with_options(inspect(str(exported("t5").path)), SizeOptions(context=8)))
    defs = report_schema["$defs"]
    assert set(doc["model"]) <= set(defs["model"]["properties"])
    assert set(doc["model"]["kv_cache"]) <= set(defs["kvCache"]["properties"])
    assert set(defs["kvCache"]["required"]) <= set(doc["model"]["kv_cache"])
    for block in doc["blocks"]:
        assert set(block) <= set(defs["block"]["properties"])


def test_kv_dtype_sizes_a_cache_whose_dtype_the_source_does_not_give() -> None:
    from mhainspect.analysis.report import build_report
    from mhainspect.results import ParamBreakdown
    from mhainspect.results.stages import BlockDecoding, SizeInputs

    block = AttentionBlock("layers.0.attn", "checkpoint", "self", 8, 2, 64, 8, 8, ParamBreakdown(0, 0, 0, 0, 0, 0), (), ())
    report = build_report([block], path="m", fmt="onnx", total_params=0,
                          size=SizeInputs(decoding=(BlockDecoding(block.name, True, "causal mask", None, ""),)))
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token is None and "--kv-dtype" in (kv.reason or "")
    sized = with_options(report, SizeOptions(context=10, kv_dtype="bf16")).model.kv_cache
    assert sized is not None and sized.bytes_per_token == 2 * 16 * 2 and sized.total_bytes == 640


def test_ggml_tensors_are_parameters_in_their_blocks() -> None:
    """What the GGUF front end hands over (GGML block types by name): bytes by their blocks, weights not overhead."""
    from mhainspect.frontends.checkpoint.size_inputs import metas_size_inputs
    from mhainspect.ir.weights import WeightMeta, count_weights

    metas = {"blk.0.attn_q.weight": WeightMeta("blk.0.attn_q.weight", (4096, 4096), "q4_k", "a"),
             "blk.0.attn_norm.weight": WeightMeta("blk.0.attn_norm.weight", (4096,), "float32", "b"),
             "blk.0.ffn_down.weight": WeightMeta("blk.0.ffn_down.weight", (4096, 32), "q8_0", "c")}
    parameters = frozenset(m.storage_key for m in metas.values() if m.is_parameter)
    sizes = weight_sizes(metas_size_inputs(metas, [], None, parameters).tensors, [], {})
    assert dict(sizes.by_dtype) == {"q4_k": 4096 * 4096 // 256 * 144, "float32": 4096 * 4, "q8_0": 4096 * 32 // 32 * 34}
    assert sizes.overhead == 0
    # The one counter of weight lists counts a GGML block type by its logical elements, not its bytes.
    assert count_weights(metas) == 4096 * 4096 + 4096 + 4096 * 32


def test_external_data_lengths_70b_width(tmp_path: Path) -> None:
    """Two layers at Llama-2-70B width, float16 weights as external data in a sparse file (never
    read): the parameter bytes equal the external-data lengths the file declares, and the cache,
    with a config.json beside the model, is 2 layers x 8 kv heads x (128 + 128) x 2 bytes per token."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import make_models as mm

    model, weights = mm.build_llama(mm.LlamaShape(layers=2, d_model=8192, heads=64, kv_heads=8, ffn=28672))
    path = tmp_path / "model.onnx"
    mm.write_external(model, weights, path)
    declared = sum(int(e.value) for init in onnx.load(str(path), load_external_data=False).graph.initializer
                   for e in init.external_data if e.key == "length")
    m = inspect(str(path)).model
    assert m.weight_bytes is not None and m.weight_bytes - (m.weight_bytes_overhead or 0) == declared
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "torch_dtype": "float16"}),
                                          encoding="utf-8")
    kv = inspect(str(path), context=4096).model.kv_cache
    assert kv is not None and kv.bytes_per_token == 2 * 8 * (128 + 128) * 2 and kv.dtype == "float16"
    assert kv.total_bytes == 4096 * kv.bytes_per_token


@pytest.mark.parametrize("name", ["mistral", "hybrid"])
def test_sliding_window_read_from_the_graph_mask(name: str, exported: Callable[[str], se.Export],
                                                 tmp_path: Path) -> None:
    """Without config.json the window comes from the mask itself (kv > q - W), layer by layer."""
    export = exported(name)
    lone = tmp_path / "model.onnx"
    lone.write_bytes(export.path.read_bytes())
    report = _report(export, lone)
    outputs = se.run(export)
    kv = report.model.kv_cache
    assert kv is not None and kv.total_bytes == sum(v.nbytes for n, v in outputs.items() if n.startswith("present"))
    expected = [se.WINDOW, se.WINDOW] if name == "mistral" else [se.WINDOW, None]
    assert [b.sliding_window for b in report.blocks] == expected
    assert "position comparison" in _kv_evidence(report.blocks[0])


def test_size_gates_in_the_json_report(exported: Callable[[str], se.Export], schema_validator: Any) -> None:
    result = _cli(str(exported("llama_gqa").path), "-f", "json", "--context", "100", "--max-kv-cache", "1K",
                  "--max-weight-bytes", "1G")
    doc = json.loads(result.stdout)
    assert result.returncode == 1 and not list(schema_validator.iter_errors(doc))
    gates = {g["gate"]: g for g in doc["gates"]}
    assert gates["max-weight-bytes"]["passed"] and not gates["max-kv-cache"]["passed"]
    assert gates["max-kv-cache"]["actual"] == 25_600 and gates["max-kv-cache"]["limit"] == 1000


@pytest.mark.parametrize("projection", ["float_matmul", "matmul_nbits"])
def test_kv_cache_of_an_ort_group_query_attention(projection: str, tmp_path: Path) -> None:
    """onnxruntime-genai's layout (com.microsoft GroupQueryAttention fed by past_key/past_value,
    float or 4-bit projections): one decoding step's present_key/present_value bytes, exactly."""
    import deploy_graphs as dg
    import onnxruntime as ort

    model = dg.genai_gqa(getattr(dg, projection), packed=False)
    gqa = next(n for n in model.graph.node if n.op_type == "GroupQueryAttention")
    model.graph.output.extend(helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in gqa.output[1:])
    path = tmp_path / "gqa.onnx"
    onnx.save(model, str(path))
    past, batch = 3, 2
    report = with_options(inspect(str(path)), SizeOptions(context=past + 1, batch=batch))
    feed = {"x": np.random.randn(batch, 1, 64).astype(np.float32),
            "past_key": np.zeros((batch, 2, past, 16), np.float32),
            "past_value": np.zeros((batch, 2, past, 16), np.float32),
            "seqlens_k": np.full((batch,), past, np.int32), "total_seq": np.array(past + 1, np.int32)}
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
    present = sum(outputs[o].nbytes for o in gqa.output[1:])
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == 2 * (16 + 16) * 4 and kv.total_bytes == present
    assert "past_key" in _kv_evidence(report.blocks[0])


def test_kv_dtype_after_the_audit_remakes_the_figure_from_its_values() -> None:
    """--kv-dtype applied to a finished report (what the pipeline does) gives the figure and the
    evidence text that sizing the blocks in that dtype gives: the text is made from the figure's
    values, whatever the source's own words say (parentheses and byte counts in them included)."""
    from mhainspect.analysis.report import build_report
    from mhainspect.analysis.size import apply
    from mhainspect.results import ParamBreakdown
    from mhainspect.results.stages import BlockDecoding, SizeInputs

    block = AttentionBlock("layers.0.attn", "checkpoint", "self", 8, 2, 64, 8, 8, ParamBreakdown(0, 0, 0, 0, 0, 0), (), ())
    decoding = BlockDecoding(block.name, True, "present output (× 4 bytes (float32) in the export)", "float16",
                             "past_key_values.0.key (float16, the graph's input)", window=512, window_source="config")
    inputs = SizeInputs(decoding=(decoding,))
    audited = build_report([block], path="m", fmt="onnx", total_params=0, size=inputs)
    assert _kv_evidence(audited.blocks[0]).startswith(
        "2 kv heads × (d_k 8 + d_v 8) × 2 bytes (float16, past_key_values.0.key (float16, the graph's input)) per token")
    after = with_options(audited, SizeOptions(kv_dtype="int8")).blocks[0]
    during = apply([block], inputs, SizeOptions(kv_dtype="int8"))[0][0]
    assert after.kv_cache_bytes_per_token == during.kv_cache_bytes_per_token == 2 * 16 * 1
    assert _kv_evidence(after) == _kv_evidence(during) == (
        "2 kv heads × (d_k 8 + d_v 8) × 1 bytes (int8, --kv-dtype) per token; present output (× 4 bytes (float32) "
        "in the export); sliding window 512 (config): keeps at most 511 past tokens")
