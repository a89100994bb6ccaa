"""Small random-weight transformers exported and rewritten the way models are deployed.

Each base model (BERT, GPT-2, Llama with grouped-query attention, Phi-3 with one packed qkv_proj)
is exported with torch.onnx (TorchScript exporter, fast), then rewritten by onnxruntime's own tools:
dynamic int8 (MatMulInteger), static QDQ int8 with random calibration data, 4-bit MatMulNBits
(QOperator and QDQ), the transformer optimizer (fused Attention / SkipLayerNormalization) and fp16.
The truth of every block comes from the torch module's config and projection weights.

Files are cached in MHAINSPECT_DEPLOY_DIR when set, else in the directory the caller gives.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Truth:
    heads: int
    kv_heads: int
    d_k: int
    d_v: int
    d_model: int
    q: int  # weight + bias params of each projection
    k: int
    v: int
    o: int
    bias: int


def add_noise(model: Any) -> None:
    from tests.random_weights import add_noise as noisy  # imports torch: only when a model is built

    noisy(model)


@dataclass(frozen=True)
class Base:
    name: str
    truth: tuple[Truth, ...]
    path: Path
    feeds: Callable[[], dict[str, Any]]  # one calibration/example batch
    model_type: str  # onnxruntime optimizer model type


def _n(t: Any) -> int:
    return 0 if t is None else int(t.numel())


def _lin(lin: Any) -> int:
    return _n(lin.weight) + _n(getattr(lin, "bias", None))


def _bias(*lins: Any) -> int:
    return sum(_n(getattr(x, "bias", None)) for x in lins)


def _export(model: Any, args: tuple[Any, ...], names: list[str], path: Path, dynamic: dict[str, dict[int, str]]) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, str(path), input_names=names, output_names=["out"], opset_version=17,
                          dynamic_axes=dynamic, dynamo=False, do_constant_folding=True)


def _ids(seq: int = 8) -> Any:
    import torch

    return torch.randint(0, 90, (2, seq))


def build_bert(out: Path) -> Base:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=32, attn_implementation="eager")
    m = BertModel(cfg).eval()
    add_noise(m)
    truth = []
    for layer in m.encoder.layer:
        a = layer.attention
        s = a.self
        truth.append(Truth(4, 4, 16, 16, 64, _lin(s.query), _lin(s.key), _lin(s.value), _lin(a.output.dense),
                           _bias(s.query, s.key, s.value, a.output.dense)))
    path = out / "bert.onnx"
    if not path.exists():
        import torch

        class Wrap(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = m

            def forward(self, ids: Any, mask: Any, tt: Any) -> Any:
                return self.m(input_ids=ids, attention_mask=mask, token_type_ids=tt).last_hidden_state

        ids = _ids()
        dyn = {n: {0: "batch", 1: "seq"} for n in ("input_ids", "attention_mask", "token_type_ids")}
        _export(Wrap(), (ids, torch.ones_like(ids), torch.zeros_like(ids)),
                ["input_ids", "attention_mask", "token_type_ids"], path, dyn)

    def feeds() -> dict[str, Any]:
        ids = np.random.randint(0, 90, (2, 8)).astype(np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    return Base("bert", tuple(truth), path, feeds, "bert")


def _decoder(name: str, out: Path, model: Any, truth: list[Truth], model_type: str) -> Base:
    path = out / f"{name}.onnx"
    if not path.exists():
        import torch

        class Wrap(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = model

            def forward(self, ids: Any, mask: Any) -> Any:
                return self.m(input_ids=ids, attention_mask=mask, use_cache=False).logits

        ids = _ids()
        dyn = {n: {0: "batch", 1: "seq"} for n in ("input_ids", "attention_mask")}
        _export(Wrap(), (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"], path, dyn)

    def feeds() -> dict[str, Any]:
        ids = np.random.randint(0, 90, (2, 8)).astype(np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    return Base(name, tuple(truth), path, feeds, model_type)


def build_gpt2(out: Path) -> Base:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=100, n_embd=64, n_layer=2, n_head=4, n_positions=32, attn_implementation="eager")
    m = GPT2LMHeadModel(cfg).eval()
    add_noise(m)
    truth = []
    for blk in m.transformer.h:
        a = blk.attn
        third = a.c_attn.weight.numel() // 3 + a.c_attn.bias.numel() // 3
        truth.append(Truth(4, 4, 16, 16, 64, third, third, third, _lin(a.c_proj),
                           a.c_attn.bias.numel() + a.c_proj.bias.numel()))
    return _decoder("gpt2", out, m, truth, "gpt2")


def build_llama(out: Path) -> Base:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                      num_key_value_heads=2, intermediate_size=96, max_position_embeddings=32,
                      attn_implementation="eager")
    m = LlamaForCausalLM(cfg).eval()
    add_noise(m)
    truth = [Truth(8, 2, 8, 8, 64, _lin(a.q_proj), _lin(a.k_proj), _lin(a.v_proj), _lin(a.o_proj),
                   _bias(a.q_proj, a.k_proj, a.v_proj, a.o_proj))
             for a in (layer.self_attn for layer in m.model.layers)]
    return _decoder("llama", out, m, truth, "gpt2")


def build_phi3(out: Path) -> Base:
    from transformers import Phi3Config, Phi3ForCausalLM

    cfg = Phi3Config(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                     num_key_value_heads=2, intermediate_size=96, max_position_embeddings=32,
                     pad_token_id=0, attn_implementation="eager")
    m = Phi3ForCausalLM(cfg).eval()
    add_noise(m)
    truth = []
    for layer in m.model.layers:
        a = layer.self_attn
        per_row = a.qkv_proj.weight.shape[1]
        truth.append(Truth(8, 2, 8, 8, 64, 64 * per_row, 16 * per_row, 16 * per_row, _lin(a.o_proj), 0))
    return _decoder("phi3", out, m, truth, "gpt2")


BASES: dict[str, Callable[[Path], Base]] = {"bert": build_bert, "gpt2": build_gpt2, "llama": build_llama,
                                            "phi3": build_phi3}


class _Reader:
    def __init__(self, feeds: Callable[[], dict[str, Any]]) -> None:
        self.batches = iter([feeds() for _ in range(2)])

    def get_next(self) -> dict[str, Any] | None:
        return next(self.batches, None)


def _quiet() -> None:
    logging.getLogger().setLevel(logging.ERROR)
    for name in ("onnxruntime", "root"):
        logging.getLogger(name).setLevel(logging.ERROR)


def variant(base: Base, kind: str) -> Path:
    """The base model rewritten as ``kind`` (cached next to it)."""
    path = base.path.with_name(f"{base.name}.{kind}.onnx")
    if path.exists():
        return path
    _quiet()
    src = str(base.path)
    if kind == "fp32":
        return base.path
    if kind == "dynamic":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(src, str(path), weight_type=QuantType.QInt8)
    elif kind == "dynamic_u8_perchannel":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(src, str(path), weight_type=QuantType.QUInt8, per_channel=True)
    elif kind == "qdq":
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

        quantize_static(src, str(path), _Reader(base.feeds), quant_format=QuantFormat.QDQ,  # type: ignore[arg-type]
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True,
                        calibrate_method=CalibrationMethod.MinMax)
    elif kind == "qoperator":
        # QOperator static int8: QLinearMatMul / QLinearAdd / QLinearMul / QLinearSoftmax, per-channel weights.
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

        quantize_static(src, str(path), _Reader(base.feeds), quant_format=QuantFormat.QOperator,  # type: ignore[arg-type]
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True,
                        calibrate_method=CalibrationMethod.MinMax)
    elif kind in ("nbits", "nbits_qdq", "nbits_gather"):
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
        from onnxruntime.quantization.quant_utils import QuantFormat

        model = onnx.load(src)
        fmt = QuantFormat.QDQ if kind == "nbits_qdq" else QuantFormat.QOperator
        # nbits_gather: embeddings too (GatherBlockQuantized), as for a model whose activations start there.
        ops = {"op_types_to_quantize": ("MatMul", "Gather"), "quant_axes": (("MatMul", 0), ("Gather", 1))} \
            if kind == "nbits_gather" else {}
        cfg = DefaultWeightOnlyQuantConfig(block_size=16, is_symmetric=True, quant_format=fmt, **ops)  # type: ignore[arg-type]
        q = MatMulNBitsQuantizer(model, algo_config=cfg)
        q.process()
        q.model.save_model_to_file(str(path), False)
    elif kind in ("opt", "opt2"):
        from onnxruntime.transformers.optimizer import optimize_model

        heads = base.truth[0].heads
        opt = optimize_model(src, model_type=base.model_type, num_heads=heads, hidden_size=base.truth[0].d_model,
                             opt_level=0 if kind == "opt" else 2, only_onnxruntime=False)
        opt.save_model_to_file(str(path))
    elif kind in ("opt_dynamic", "opt_qdq"):
        # Quantizing an ORT-optimized model: QAttention (dynamic) or Attention with DequantizeLinear weights.
        import onnx
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

        fused = str(variant(base, "opt"))
        extra = {"DefaultTensorType": onnx.TensorProto.FLOAT}  # the contrib ops defeat shape inference
        if kind == "opt_dynamic":
            quantize_dynamic(fused, str(path), weight_type=QuantType.QInt8, extra_options=extra)
        else:
            quantize_static(fused, str(path), _Reader(base.feeds),  # type: ignore[arg-type]
                            quant_format=QuantFormat.QDQ, extra_options=extra)
    elif kind == "fp16":
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = convert_float_to_float16(onnx.load(src), keep_io_types=True)
        onnx.save(model, str(path))
    else:
        raise ValueError(kind)
    return path


KINDS = ("fp32", "dynamic", "dynamic_u8_perchannel", "qdq", "qoperator", "nbits", "nbits_qdq", "nbits_gather", "opt", "opt2",
         "fp16")


@dataclass(frozen=True)
class VisionTruth:
    heads: int
    d_k: int
    d_v: int
    total: int  # every parameter of the attention module (projections, BatchNorm scale/shift, bias table)


def build_levit(out: Path) -> tuple[tuple[VisionTruth, ...], Path]:
    """LeViT: Linear + BatchNorm projections, packed per-head Q/K/V split [key_dim, key_dim,
    ratio·key_dim], a learned per-head bias table gathered into the scores, HardSwish before the
    output projection, and subsampling attention blocks."""
    import torch
    from transformers import LevitConfig, LevitModel

    cfg = LevitConfig(image_size=64, hidden_sizes=[32, 48], num_attention_heads=[2, 3], depths=[1, 1],
                      key_dim=[8, 8], attention_ratio=[2, 2], mlp_ratio=[2, 2],
                      down_ops=[["Subsample", 8, 32 // 8, 4, 2, 2]])
    m = LevitModel(cfg).eval()
    add_noise(m)
    truth = []
    for _, mod in m.named_modules():
        kind = type(mod).__name__
        if kind in ("LevitAttention", "LevitAttentionSubsample"):
            ratio = mod.attention_ratio
            truth.append(VisionTruth(mod.num_attention_heads, mod.key_dim, ratio * mod.key_dim,
                                     sum(p.numel() for p in mod.parameters())))
    path = out / "levit.onnx"
    if not path.exists():
        class Wrap(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = m

            def forward(self, x: Any) -> Any:
                return self.m(pixel_values=x).last_hidden_state

        _export(Wrap(), (torch.randn(1, 3, 64, 64),), ["x"], path, {})
    return tuple(truth), path
