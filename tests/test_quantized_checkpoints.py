"""Quantized checkpoints as the toolchains write them (tests/quantized_checkpoints.py builds them
with random data): the blocks, the parameters the packed tensors encode, the bytes the file holds,
and the config/shape conflicts."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import quantized_checkpoints as Q
import torch
from safetensors import safe_open

from mhainspect.pipeline import audit
from mhainspect.results import Report

FORMATS: dict[str, tuple[Q.Quantizer, dict[str, Any] | None]] = {
    "gptq-4bit-g128": (Q.gptq(4, 128), Q.gptq_config(4, 128, False)),
    "gptq-4bit-g-1-desc_act": (Q.gptq(4, -1), Q.gptq_config(4, -1, True)),
    "gptq-8bit-g128": (Q.gptq(8, 128), Q.gptq_config(8, 128, False)),
    "gptq-3bit-g128": (Q.gptq(3, 128), Q.gptq_config(3, 128, False)),
    "awq-gemm-4bit": (Q.awq(4, 128), Q.awq_config(4, 128)),
    "bnb-nf4-double": (Q.bnb4("nf4", True), Q.bnb4_config("nf4", True)),
    "bnb-fp4": (Q.bnb4("fp4", False), Q.bnb4_config("fp4", False)),
    "bnb-int8": (Q.bnb8(), Q.bnb8_config()),
    "ct-w4a16": (Q.ct_packed(4, 128), Q.ct_config("pack-quantized", 4, 128)),
    "ct-w4-asym": (Q.ct_packed(4, 128, symmetric=False), Q.ct_config("pack-quantized", 4, 128, symmetric=False)),
    "ct-nvfp4": (Q.ct_nvfp4(), Q.ct_config("nvfp4-pack-quantized", 4, 16, "float")),
    "ct-w8a8-int8": (Q.ct_int8(), Q.ct_config("int-quantized", 8, None)),
    "fp8-block": (Q.fp8_block(), Q.fp8_block_config()),
    "fp8-channel": (Q.fp8_channel(), Q.ct_config("float-quantized", 8, None, "float")),
    "mlx-4bit-g64": (Q.mlx(4, 64), Q.mlx_config(4, 64)),
    "mlx-8bit-g32": (Q.mlx(8, 32), Q.mlx_config(8, 32)),
    "awq-gemv-4bit": (Q.awq_gemv(4, 64), {**Q.awq_config(4, 64), "version": "gemv"}),
    "exl2-4bit": (Q.exl2((4,)), Q.exl2_config(4.0)),
}
ARCHS = {"llama": Q.LLAMA, "phi3": Q.PHI3, "gpt_neox": Q.NEOX}


def _heads(arch: Q.Arch) -> tuple[int, int, int, int, int]:
    kv = arch.heads if arch.model_type == "gpt_neox" else arch.kv_heads
    return arch.heads, kv, arch.head_dim, arch.head_dim, arch.hidden


def _check(report: Report, arch: Q.Arch, written: Q.Written) -> None:
    blocks = report.blocks
    assert [(b.num_heads, b.num_kv_heads, b.d_k, b.d_v, b.d_model) for b in blocks] == [_heads(arch)] * arch.layers
    assert [b.params.total for b in blocks] == arch.attention_params()
    m = report.model
    assert m.total_params == arch.logical_params()
    assert m.weight_bytes == Q.stored_bytes(written.folder)
    assert m.weight_bytes_overhead == written.aux_bytes
    # Per block: its projections' packed weights, biases and quantization data, as stored.
    with safe_open(str(written.folder / "model.safetensors"), "pt") as fh:
        sizes = {n: fh.get_slice(n).get_shape() for n in fh.keys()}
        dtypes = {n: fh.get_slice(n).get_dtype() for n in fh.keys()}
    itemsize = {"F16": 2, "BF16": 2, "F32": 4, "I32": 4, "U32": 4, "I64": 8, "I16": 2, "U8": 1, "I8": 1, "F8_E4M3": 1}
    for b in blocks:
        under = [n for n in sizes if n.startswith(b.name + ".")]
        assert b.weight_bytes == sum(math.prod(sizes[n]) * itemsize[dtypes[n]] for n in under)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_folder(tmp_path: Path, fmt: str, arch: str) -> None:
    quantizer, config = FORMATS[fmt]
    written = Q.write(tmp_path, ARCHS[arch], quantizer, config)
    report = audit(tmp_path)
    _check(report, ARCHS[arch], written)
    assert not [f for f in report.flags if f.code in ("MHA004", "MHA007")]
    assert not report.warnings
    packing = [e for e in report.blocks[0].evidence if e.field == "packing"]
    assert packing and all(str(e.value) in e.detail for e in packing)  # the bits and where they came from


def test_unquantized_reference(tmp_path: Path) -> None:
    """The same model in fp16: the counts the quantized files must reproduce, nothing called overhead."""
    written = Q.write(tmp_path, Q.LLAMA, Q.fp16(), None)
    _check(audit(tmp_path), Q.LLAMA, written)
    assert written.aux_bytes == 0


def _conflicts(report: Report) -> list[str]:
    return [c for b in report.blocks for c in b.conflicts]


def test_config_bits_disagree_with_shapes(tmp_path: Path) -> None:
    """A GPTQ config claiming 8 bits over 4-bit packing (g_idx gives in-features): the shapes win."""
    written = Q.write(tmp_path, Q.LLAMA, Q.gptq(4, 128), Q.gptq_config(8, 128, False))
    report = audit(tmp_path)
    _check(report, Q.LLAMA, written)
    assert any("bits=8" in c and "4-bit" in c for c in _conflicts(report))
    assert "MHA007" in {f.code for f in report.flags}
    assert any("disagrees with the weight shapes" in w for w in report.warnings)


def test_config_method_disagrees_with_shapes(tmp_path: Path) -> None:
    """A config saying AWQ over GPTQ-packed tensors (scales as wide as qweight): read as GPTQ."""
    written = Q.write(tmp_path, Q.PHI3, Q.gptq(4, 128), Q.awq_config(4, 128))
    report = audit(tmp_path)
    _check(report, Q.PHI3, written)
    assert any("quant_method=awq" in c and "fit gptq" in c for c in _conflicts(report))


def test_stored_weight_shape_wins_over_config(tmp_path: Path) -> None:
    """compressed-tensors: the weight_shape tensor says the logical shape; a config claiming 8 bits loses."""
    written = Q.write(tmp_path, Q.LLAMA, Q.ct_packed(4, 128), Q.ct_config("pack-quantized", 8, 128))
    report = audit(tmp_path)
    _check(report, Q.LLAMA, written)
    assert any("bits=8" in c and "weight_shape" in c for c in _conflicts(report))


@pytest.mark.parametrize("fmt", ["gptq-4bit-g128", "gptq-3bit-g128", "awq-gemm-4bit", "bnb-nf4-double", "ct-w4a16"])
def test_without_config_the_shapes_tell(tmp_path: Path, fmt: str) -> None:
    """A bare .safetensors file: g_idx, scales, the quant state or weight_shape give the logical shapes."""
    quantizer, _ = FORMATS[fmt]
    written = Q.write(tmp_path, Q.LLAMA, quantizer, None, config=False)
    report = audit(tmp_path / "model.safetensors")
    assert [b.d_model for b in report.blocks] == [Q.LLAMA.hidden] * Q.LLAMA.layers
    q_widths = {p.out_features for b in report.blocks for p in b.projections if p.role == "q"}
    assert q_widths == {Q.LLAMA.heads * Q.LLAMA.head_dim}
    assert [b.params.total for b in report.blocks] == Q.LLAMA.attention_params()
    assert report.model.total_params == Q.LLAMA.logical_params()
    assert report.model.weight_bytes == Q.stored_bytes(written.folder)


@pytest.mark.parametrize("fmt", ["bnb-nf4-double", "ct-w4a16", "gptq-4bit-g128"])
def test_sharded_pytorch_bin(tmp_path: Path, fmt: str) -> None:
    """pytorch_model-0000x.bin shards with an index: the quant state / weight_shape read from torch tensors."""
    quantizer, config = FORMATS[fmt]
    tensors, aux = Q.tensors_of(Q.LLAMA, quantizer)
    names = sorted(tensors)
    half = len(names) // 2
    weight_map = {}
    for k, part in enumerate((names[:half], names[half:]), start=1):
        shard = f"pytorch_model-0000{k}-of-00002.bin"
        torch.save({n: tensors[n] for n in part}, tmp_path / shard)
        weight_map.update(dict.fromkeys(part, shard))
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (tmp_path / "config.json").write_text(json.dumps({**Q.LLAMA.config(), "quantization_config": config}))
    report = audit(tmp_path)
    assert [b.params.total for b in report.blocks] == Q.LLAMA.attention_params()
    assert report.model.total_params == Q.LLAMA.logical_params()
    assert report.model.weight_bytes_overhead == aux
    assert report.model.weight_bytes == sum(t.numel() * t.element_size() for t in tensors.values())


def test_unknown_packing_is_reported_not_guessed(tmp_path: Path) -> None:
    """A qweight whose shapes fit no known layout (GPTQ Marlin's tiles): stored bytes, a warning, no block."""
    def marlin(i: int, o: int) -> Q.Tensors:
        return {"qweight": Q._ints(i // 16, o * 16 * 4 // 32), "scales": torch.rand(i // 128, o, dtype=torch.float16)}

    cfg = {**Q.gptq_config(4, 128, False), "checkpoint_format": "marlin"}
    written = Q.write(tmp_path, Q.LLAMA, marlin, cfg)
    report = audit(tmp_path)
    assert report.model.weight_bytes == Q.stored_bytes(written.folder)
    assert any("layout not known" in w and "qweight" in w for w in report.warnings)
    assert not report.blocks


def test_fp8_kv_cache_scheme(tmp_path: Path) -> None:
    """compressed-tensors FP8 with kv_cache_scheme: the cache is fp8, k_scale/v_scale are quantization data."""
    a = Q.LLAMA
    tensors, aux = Q.tensors_of(a, Q.fp8_channel())
    for i in range(a.layers):
        for leaf in ("k_scale", "v_scale"):
            tensors[f"{a.prefix}.{i}.self_attn.{leaf}"] = torch.rand(())
            aux += 4
    Q.save_file(tensors, str(tmp_path / "model.safetensors"))
    qc = {**Q.ct_config("float-quantized", 8, None, "float"),
          "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}}
    (tmp_path / "config.json").write_text(json.dumps({**a.config(), "quantization_config": qc}))
    report = audit(tmp_path)
    assert {b.kv_cache_dtype for b in report.blocks} == {"float8e4m3fn"}
    assert report.model.total_params == a.logical_params()
    assert report.model.weight_bytes_overhead == aux
    assert report.model.kv_cache is not None
    per_token = a.layers * a.kv_heads * 2 * a.head_dim  # one byte per element
    assert report.model.kv_cache.bytes_per_token == per_token


def test_fp8_kv_cache_in_the_compute_dtype(tmp_path: Path) -> None:
    """fp8 weights compute and cache in the config's dtype, not in fp8."""
    Q.write(tmp_path, Q.LLAMA, Q.fp8_block(), {**Q.fp8_block_config()})
    report = audit(tmp_path)
    assert {b.kv_cache_dtype for b in report.blocks} == {"float16"}


# ----------------------------------------------------------------------------- nn.Module path
# Linears replaced by quantized modules that need no GPU or compiled kernel: a QuantLinear holding
# AutoGPTQ's buffers (the kernels are what need CUDA, not the storage), and transformers' FP8Linear.
# bitsandbytes and compressed-tensors modules need their packages (not installed): not covered.


class GPTQLinear(torch.nn.Module):
    """AutoGPTQ's QuantLinear storage: qweight/qzeros/scales/g_idx (and bias) as buffers."""

    def __init__(self, linear: torch.nn.Linear, bits: int = 4, group: int = 128) -> None:
        super().__init__()
        i, o = linear.in_features, linear.out_features
        for leaf, t in Q.gptq(bits, group)(i, o).items():
            self.register_buffer(leaf, t)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().half())
        self.out_features = o

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # the storage is what is inspected
        return x.new_zeros(*x.shape[:-1], self.out_features)


def _llama_module(replace: Any, quant_config: dict[str, Any]) -> tuple[Any, int, list[int]]:
    transformers = pytest.importorskip("transformers")
    a = Q.LLAMA
    cfg = transformers.LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.inter,
                                   num_hidden_layers=a.layers, num_attention_heads=a.heads,
                                   num_key_value_heads=a.kv_heads, head_dim=a.head_dim)
    model = transformers.LlamaForCausalLM(cfg).eval()
    params = sum(p.numel() for p in model.parameters())
    attention = [sum(m.weight.numel() for m in layer.self_attn.children() if isinstance(m, torch.nn.Linear))
                 for layer in model.model.layers]
    for layer in model.model.layers:
        for owner in (layer.self_attn, layer.mlp):
            for name, child in list(owner.named_children()):
                if isinstance(child, torch.nn.Linear):
                    setattr(owner, name, replace(child))
    model.config.quantization_config = quant_config
    return model, params, attention


def _module_bytes(model: Any, aux: tuple[str, ...]) -> tuple[int, int]:
    """(every tensor's bytes, the bytes of quantization data and of buffers that are no weight)."""
    params = dict(model.named_parameters())
    tensors = {**params, **dict(model.named_buffers())}
    seen: dict[int, int] = {}
    overhead = 0
    for name, t in tensors.items():
        if t.data_ptr() not in seen:
            seen[t.data_ptr()] = t.numel() * t.element_size()
            leaf = name.rpartition(".")[2]
            if leaf in aux or (name not in params and leaf not in ("qweight", "bias")):
                overhead += seen[t.data_ptr()]  # scales, zeros, g_idx; rotary tables
    return sum(seen.values()), overhead


@pytest.mark.parametrize("kind", ["gptq", "fp8"])
@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_module_with_quantized_linears(kind: str) -> None:
    from mhainspect import inspect

    if kind == "gptq":
        model, params, attention = _llama_module(GPTQLinear, Q.gptq_config(4, 128, False))
        aux: tuple[str, ...] = ("qzeros", "scales", "g_idx")
    else:
        fp8 = pytest.importorskip("transformers.integrations.finegrained_fp8")
        model, params, attention = _llama_module(
            lambda lin: fp8.FP8Linear(lin.in_features, lin.out_features, block_size=(128, 128)),
            Q.fp8_block_config())
        aux = ("weight_scale_inv",)
    report = inspect(model)
    assert [(b.num_heads, b.num_kv_heads, b.d_k, b.d_model) for b in report.blocks] == \
        [(Q.LLAMA.heads, Q.LLAMA.kv_heads, Q.LLAMA.head_dim, Q.LLAMA.hidden)] * Q.LLAMA.layers
    assert [b.params.total for b in report.blocks] == attention
    assert report.model.total_params == params
    total, overhead = _module_bytes(model, aux)
    assert (report.model.weight_bytes, report.model.weight_bytes_overhead) == (total, overhead)


def test_mlx_quantization_key_per_module_bits_and_quantized_embedding(tmp_path: Path) -> None:
    """mlx-lm writes only ``quantization`` (no quant_method): its bits and group size, a module's own
    entry overriding them (8-bit v_proj), and a quantized embedding (uint32 + scales + biases).
    Before: the uint32 words were read as the in-features (d_model 32 for 256) and not counted."""
    a = Q.LLAMA
    tensors, aux = Q.tensors_of(a, Q.mlx(4, 64))
    quantization: dict[str, Any] = {"group_size": 64, "bits": 4}
    for i in range(a.layers):
        path = f"{a.prefix}.{i}.self_attn.v_proj"
        old = [tensors.pop(f"{path}.{leaf}") for leaf in ("weight", "scales", "biases")]
        aux -= sum(t.numel() * t.element_size() for t in old[1:])
        for leaf, t in Q.mlx(8, 32)(a.hidden, a.kv_heads * a.head_dim).items():
            tensors[f"{path}.{leaf}"] = t
            aux += t.numel() * t.element_size() if leaf != "weight" else 0
        quantization[path] = {"group_size": 32, "bits": 8}
    embed = tensors.pop("model.embed_tokens.weight")
    for leaf, t in Q.mlx(4, 64)(a.hidden, a.vocab).items():
        tensors[f"model.embed_tokens.{leaf}"] = t
        aux += t.numel() * t.element_size() if leaf != "weight" else 0
    Q.save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({**a.config(), "quantization": quantization}))
    report = audit(tmp_path)
    assert [(b.num_heads, b.num_kv_heads, b.d_k, b.d_model) for b in report.blocks] == \
        [(a.heads, a.kv_heads, a.head_dim, a.hidden)] * a.layers
    assert [b.params.total for b in report.blocks] == a.attention_params()
    assert report.model.total_params == a.logical_params() - embed.numel() + a.vocab * a.hidden
    assert report.model.weight_bytes_overhead == aux
    assert not report.warnings and not [f for f in report.flags if f.code == "MHA007"]
    v_bits = {e.value for b in report.blocks for e in b.evidence if e.field == "packing" and "v_proj" in e.detail}
    assert v_bits == {8}


def test_exl2_mixed_bits(tmp_path: Path) -> None:
    """EXL2's rows hold groups at different bits: in-features from q_invperm, the bits an average
    (before: no block at all, q_weight was not a weight)."""
    written = Q.write(tmp_path, Q.LLAMA, Q.exl2((4, 6, 3, 4)), Q.exl2_config(4.25))
    report = audit(tmp_path)
    _check(report, Q.LLAMA, written)
    packing = [e for e in report.blocks[0].evidence if e.field == "packing"]
    assert packing and all(e.value is None and "on average" in e.detail for e in packing)
