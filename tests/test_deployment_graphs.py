"""Blocks are exact on the files people deploy: quantized, cast, runtime-optimized graphs.

Two sources: small transformers models (random weights) exported and rewritten by onnxruntime's own
tools (tests/deployment_models.py; truth from the torch modules), and hand-built graphs of single
patterns (tests/deploy_graphs.py; truth from the dimensions they are built with).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import onnx
import pytest

from mhainspect.pipeline import audit
from mhainspect.results import AttentionBlock, Report
from tests import deploy_graphs as g

MODEL_KINDS = ("dynamic", "qdq", "qoperator", "nbits", "nbits_qdq", "nbits_gather", "opt", "fp16")


def _analyze(tmp_path: Path, model: onnx.ModelProto, name: str = "m.onnx") -> Report:
    path = tmp_path / name
    onnx.save(model, path)
    return audit(path)


def _dims(b: AttentionBlock) -> tuple[int | None, ...]:
    return b.num_heads, b.num_kv_heads, b.d_k, b.d_v, b.d_model


def _params(b: AttentionBlock) -> dict[str, int]:
    p = b.params
    return {"q": p.q, "k": p.k, "v": p.v, "o": p.o, "bias": p.bias}


# ----------------------------------------------------------------------------- exported models

@pytest.fixture(scope="session")
def deploy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(os.environ.get("MHAINSPECT_DEPLOY_DIR") or tmp_path_factory.mktemp("deploy"))


@pytest.fixture(scope="session")
def bases(deploy_dir: Path) -> dict[str, object]:
    pytest.importorskip("transformers")
    pytest.importorskip("onnxruntime")
    from tests.deployment_models import BASES

    deploy_dir.mkdir(parents=True, exist_ok=True)
    return {name: build(deploy_dir) for name, build in BASES.items()}


@pytest.mark.parametrize("kind", MODEL_KINDS)
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "phi3"])
@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_exported_model_blocks_are_exact(bases: dict[str, object], name: str, kind: str) -> None:
    from tests.deploy_measure import mismatch
    from tests.deployment_models import Base, variant

    base = bases[name]
    assert isinstance(base, Base)
    report = audit(variant(base, kind))
    assert len(report.blocks) == len(base.truth), [m.reason for m in report.misses]
    for block, truth in zip(report.blocks, base.truth):
        assert mismatch(block, truth) == [], (block.name, block.unknown_reason)
        # The scale is the module's 1/sqrt(d_k), also where a quantizer stored its constant as an integer.
        assert block.scale is None or math.isclose(block.scale, truth.d_k ** -0.5, rel_tol=1e-3), block.scale


@pytest.mark.parametrize("kind", ["opt_dynamic", "opt_qdq"])
def test_quantized_ort_optimized_bert(bases: dict[str, object], kind: str) -> None:
    """onnxruntime's quantizers on a fused model: QAttention, or Attention over DequantizeLinear weights."""
    from tests.deploy_measure import mismatch
    from tests.deployment_models import Base, variant

    base = bases["bert"]
    assert isinstance(base, Base)
    report = audit(variant(base, kind))
    assert [b.matcher.rsplit(".", 1)[-1] for b in report.blocks] == \
        ["QAttention" if kind == "opt_dynamic" else "Attention"] * len(base.truth)
    for block, truth in zip(report.blocks, base.truth):
        assert mismatch(block, truth) == [], (block.name, block.unknown_reason)


# ----------------------------------------------------------------------------- hand-built patterns

@pytest.mark.parametrize("packed", [None, "split", "heads"])
@pytest.mark.parametrize("proj", sorted(g.PROJECTIONS))
def test_projection_through_quantization_is_its_logical_weight(tmp_path: Path, proj: str, packed: str | None) -> None:
    """GQA 8/2 heads of 16, d_model 64, biases: every quantized form, separate or packed (split on
    the last axis or on the heads axis), reads as the float block: the walk back from the scores
    goes through every cast, Q/DQ pair and packed split to the weights."""
    report = _analyze(tmp_path, g.attention_model(g.PROJECTIONS[proj], packed=packed))
    assert not report.misses
    (b,) = report.blocks
    assert _dims(b) == (8, 2, 16, 16, 64) and b.kind == "self"
    assert _params(b) == g.block_params(8, 2, 16, 64, bias=True)
    assert b.unknown_reason is None


def test_scales_and_zero_points_are_not_parameters(tmp_path: Path) -> None:
    report = _analyze(tmp_path, g.attention_model(g.qdq_per_axis, heads=4, kv_heads=4, bias=False))
    (b,) = report.blocks
    assert b.params.total == 4 * 64 * 64
    names = {p.weight for p in b.projections}
    assert not any(n.startswith(("ws", "wz", "s_", "z_")) for n in names), names


@pytest.mark.parametrize("proj", ["float", "matmul_nbits", "dynamic_int8"])
def test_packed_split_computed_at_run_time_is_unknown_not_equal_thirds(tmp_path: Path, proj: str) -> None:
    report = _analyze(tmp_path, g.attention_model(g.PROJECTIONS[proj], packed="split_runtime"))
    (b,) = report.blocks
    assert b.num_heads is None and b.num_kv_heads is None
    assert b.unknown_reason is not None and "does not show how its outputs are split" in b.unknown_reason
    assert [f.code for f in report.flags if f.block == b.name] == ["MHA004"]
    # The packed weight still counts once: Q/K/V together hold all of it.
    assert b.params.q + b.params.k + b.params.v == 64 * 192 + 192


def test_quantized_classifier_softmax_is_still_not_attention(tmp_path: Path) -> None:
    """Q/DQ transparency must not turn a weight product into a Q·Kᵀ: a quantized classifier head."""
    b = g.Builder()
    logits = g.qdq_per_axis(b, "x", 64, 10, True)
    y = b.one("Softmax", [logits], axis=-1)
    model = g._model(b, [g._x(64)], y)
    report = _analyze(tmp_path, model)
    assert report.blocks == ()
    (miss,) = report.misses
    assert "no Q·Kᵀ product of two activations" in miss.reason


@pytest.mark.parametrize("proj", ["float", "matmul_nbits", "dynamic_int8"])
@pytest.mark.parametrize("packed", [True, False])
def test_genai_group_query_attention(tmp_path: Path, proj: str, packed: bool) -> None:
    """onnxruntime-genai: GroupQueryAttention with a KV cache, fed by packed or separate projections."""
    report = _analyze(tmp_path, g.genai_gqa(g.PROJECTIONS[proj], packed=packed, rotary=not packed, bias=True))
    (b,) = report.blocks
    assert _dims(b) == (8, 2, 16, 16, 64)
    assert _params(b) == g.block_params(8, 2, 16, 64, bias=True)


@pytest.mark.parametrize("variant", [{"packed": True, "do_rotary": True}, {"packed": False, "rotary": True}])
def test_rotary_caches_of_fused_ops_are_not_parameters(tmp_path: Path, variant: dict[str, bool]) -> None:
    """The cos/sin caches onnxruntime-genai writes for GroupQueryAttention(do_rotary=1) (inputs 7, 8) or
    RotaryEmbedding (inputs 2, 3) are tables, overhead like a torch export's folded ones: the model's
    parameters are the projections' alone, and the tables' bytes are overhead."""
    report = _analyze(tmp_path, g.genai_gqa(g.PROJECTIONS["float"], **variant))
    (b,) = report.blocks
    assert report.model.total_params == b.params.total == sum(g.block_params(8, 2, 16, 64, bias=False).values())
    assert report.model.weight_bytes_overhead == 2 * 32 * 8 * 4  # cos + sin [32, 8] float32, read once


@pytest.mark.parametrize("op_bias", [False, True])
@pytest.mark.parametrize("proj", ["float", "matmul_nbits", "dynamic_int8"])
def test_ort_multi_head_attention_packed_kv(tmp_path: Path, proj: str, op_bias: bool) -> None:
    """MultiHeadAttention with packed K/V ([B, L, h, 2, d] as its key, no value): the one K/V
    projection is half K and half V, d_v its head size; not all K and no V."""
    report = _analyze(tmp_path, g.ort_mha_packed_kv(g.PROJECTIONS[proj], op_bias=op_bias))
    (b,) = report.blocks
    assert (b.kind, *_dims(b)) == ("cross", 4, 4, 16, 16, 64)
    assert _params(b) == g.block_params(4, 4, 16, 64, bias=True)


@pytest.mark.parametrize("quantized", [False, True])
def test_ort_attention_and_skip_layer_norm_bias(tmp_path: Path, quantized: bool) -> None:
    """ORT-optimized BERT: the O projection's bias is SkipLayerNormalization's 5th input."""
    report = _analyze(tmp_path, g.ort_bert_attention(quantized=quantized))
    (b,) = report.blocks
    assert _dims(b) == (4, 4, 16, 16, 64)
    assert _params(b) == g.block_params(4, 4, 16, 64, bias=True)
    o = next(p for p in b.projections if p.role == "o")
    assert o.bias is not None and o.bias.startswith("o_b")


def test_ort_attention_qkv_hidden_sizes(tmp_path: Path) -> None:
    report = _analyze(tmp_path, g.ort_bert_attention(hidden_sizes=(64, 64, 48)))
    (b,) = report.blocks
    assert (b.d_k, b.d_v) == (16, 12)
    assert (b.params.q, b.params.k, b.params.v, b.params.o) == (64 * 64 + 64, 64 * 64 + 64, 64 * 48 + 48, 48 * 64 + 64)


@pytest.mark.parametrize("proj", ["dynamic_int8", "qdq_per_axis", "matmul_nbits_add"])
def test_ort_multi_head_attention_with_quantized_projections(tmp_path: Path, proj: str) -> None:
    report = _analyze(tmp_path, g.ort_mha(g.PROJECTIONS[proj]))
    (b,) = report.blocks
    assert _dims(b) == (4, 4, 16, 16, 64)
    assert _params(b) == g.block_params(4, 4, 16, 64, bias=True)


@pytest.mark.parametrize("proj", ["qdq_per_axis", "qlinear_matmul"])
def test_quantized_score_scale_is_its_dequantized_value(tmp_path: Path, proj: str) -> None:
    """A static quantizer stores the score scale as an integer with a scale and zero point: the
    block's scale is the dequantized value, not the stored integer."""
    report = _analyze(tmp_path, g.attention_model(g.PROJECTIONS[proj], quantized_scale=True))
    (b,) = report.blocks
    assert b.scale_known and b.scale is not None and math.isclose(b.scale, 16 ** -0.5, rel_tol=1e-6)
    assert [e.value for e in b.evidence if e.field == "d_k" and e.source == "scale"] == [16]


@pytest.mark.parametrize("kv_heads", [1, 2])
@pytest.mark.parametrize("proj", ["float", "matmul_nbits"])
def test_ort_multi_head_attention_after_head_repeat(tmp_path: Path, proj: str, kv_heads: int) -> None:
    """Grouped K/V repeated to every head before MultiHeadAttention (onnxscript's sdpa_via_mha fusion
    of a dynamo export): the op's num_heads is not the K/V head count, the projection widths are."""
    report = _analyze(tmp_path, g.ort_mha(g.PROJECTIONS[proj], heads=8, d_k=8, kv_heads=kv_heads))
    (b,) = report.blocks
    assert _dims(b) == (8, kv_heads, 8, 8, 64)
    assert _params(b) == g.block_params(8, kv_heads, 8, 64, bias=True)
    assert not b.conflicts


@pytest.mark.parametrize("op_bias", [False, True])
def test_ort_multi_head_attention_over_cross_cache(tmp_path: Path, op_bias: bool) -> None:
    """Cross-attention of a decoder with past as onnxruntime fuses it: Q projected, K/V the cache
    inputs [B, h, S, d] as they are; the op's packed bias holds Q's bias (and the cache's parts)."""
    report = _analyze(tmp_path, g.ort_mha(g.PROJECTIONS["float"], op_bias=op_bias, cross_cache=True))
    (b,) = report.blocks
    assert (b.kind, *_dims(b)) == ("cross", 4, 4, 16, 16, 64)
    full = g.block_params(4, 4, 16, 64, bias=True)
    assert _params(b) == {"q": full["q"], "k": 0, "v": 0, "o": full["o"], "bias": 64 + 64}


@pytest.mark.parametrize("proj", ["float", "dynamic_int8", "qlinear_matmul"])
def test_ort_multi_head_attention_packed_bias_input(tmp_path: Path, proj: str) -> None:
    """The Q/K/V biases moved into MultiHeadAttention's bias input are the projections' biases."""
    report = _analyze(tmp_path, g.ort_mha(g.PROJECTIONS[proj], op_bias=True))
    (b,) = report.blocks
    assert _dims(b) == (4, 4, 16, 16, 64)
    assert _params(b) == g.block_params(4, 4, 16, 64, bias=True)
    assert all((p.bias or "").startswith("qkv_bias") for p in b.projections if p.role != "o")


@pytest.mark.parametrize("variant", [
    {}, {"four_d": True}, {"mask": True}, {"past": True}, {"four_d": True, "mask": True, "past": True},
    {"softcap": 30.0}, {"causal": True, "four_d": True, "past": True},
])
@pytest.mark.parametrize("kv_heads", [2, 8])
def test_onnx_attention_function_body(tmp_path: Path, kv_heads: int, variant: dict[str, object]) -> None:
    """What onnx expands opset-23 Attention into (its own GQA head repeat): exact heads and kv heads."""
    report = _analyze(tmp_path, g.onnx_attention_expanded(g.float_matmul, kv_heads=kv_heads, **variant))  # type: ignore[arg-type]
    (b,) = report.blocks
    assert b.matcher == "decomposed" and not b.conflicts
    assert _dims(b) == (8, kv_heads, 16, 16, 64)
    assert _params(b) == g.block_params(8, kv_heads, 16, 64, bias=True)


@pytest.mark.parametrize("variant", [{}, {"four_d": True, "mask": True, "past": True}, {"softcap": 30.0, "causal": True}])
def test_onnx_attention_function_body_without_projections(tmp_path: Path, variant: dict[str, object]) -> None:
    """No K projection to measure: the KV head count comes from the body's own head repeat."""
    report = _analyze(tmp_path, g.onnx_attention_expanded(None, kv_heads=2, **variant))  # type: ignore[arg-type]
    (b,) = report.blocks
    assert b.matcher == "decomposed"
    assert (b.num_heads, b.num_kv_heads, b.d_k, b.d_v) == (8, 2, 16, 16)
    assert any(e.field == "num_kv_heads" and "head repeat" in e.detail for e in b.evidence)
    assert b.params.total == 0


def test_onnx_attention_fused_node(tmp_path: Path) -> None:
    report = _analyze(tmp_path, g.onnx_attention_expanded(g.matmul_nbits, kv_heads=2, expand=False))
    (b,) = report.blocks
    assert b.matcher == "fused:Attention"
    assert _dims(b) == (8, 2, 16, 16, 64)
    assert _params(b) == g.block_params(8, 2, 16, 64, bias=True)


@pytest.mark.parametrize("kind", ["fp32", "dynamic"])
def test_levit_linear_batchnorm_projections(deploy_dir: Path, kind: str) -> None:
    """Linear + BatchNorm projections (the norm's scale/shift count with the projection), a packed
    per-head split read from the Split sizes, d_v = ratio·d_k, the gathered bias table as extra."""
    pytest.importorskip("transformers")
    pytest.importorskip("onnxruntime")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from tests.deployment_models import build_levit

    deploy_dir.mkdir(parents=True, exist_ok=True)
    truth, path = build_levit(deploy_dir)
    if kind == "dynamic":
        quantized = path.with_name("levit.dynamic.onnx")
        if not quantized.exists():
            quantize_dynamic(str(path), str(quantized), weight_type=QuantType.QInt8)
        path = quantized
    report = audit(path)
    assert [(b.num_heads, b.num_kv_heads, b.d_k, b.d_v) for b in report.blocks] == \
        [(t.heads, t.heads, t.d_k, t.d_v) for t in truth]
    assert [b.params.total + b.params.extra for b in report.blocks] == [t.total for t in truth]


@pytest.mark.parametrize("quantized", [False, True])
def test_keras_einsum_dense_head_bias(tmp_path: Path, quantized: bool) -> None:
    """A [heads, d_k] bias Add after a Keras EinsumDense kernel belongs to the projection."""
    report = _analyze(tmp_path, g.keras_einsum_dense(quantized=quantized))
    (b,) = report.blocks
    assert _dims(b) == (4, 4, 16, 16, 64)
    assert _params(b) == g.block_params(4, 4, 16, 64, bias=True)


def test_quantized_embedding_keeps_the_shapes(tmp_path: Path) -> None:
    """A 4-bit GatherBlockQuantized embedding (uint8 storage, two elements a byte) has the logical
    width 64, so the shapes downstream (and the packed split read from them) stay known."""
    from mhainspect.frontends.onnx.loader import load_onnx
    from mhainspect.ir.dataflow import GraphIndex

    model = g.attention_model(g.matmul_nbits, packed="split", embed=True)
    report = _analyze(tmp_path, model)
    (b,) = report.blocks
    assert _dims(b) == (8, 2, 16, 16, 64)
    index = GraphIndex(load_onnx(tmp_path / "m.onnx"))
    gather = next(n for n in index.order if n.op == "GatherBlockQuantized")
    assert str(index.shapes.shape(gather.outputs[0])[-1]) == "64"
    ref = index.table_weight(gather)
    assert ref is not None and ref.shape == (100, 64) and ref.tensor.shape == (100, 32)


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_head_repeat_with_static_batch(tmp_path: Path, kv_heads: int) -> None:
    """The K/V head count read from the repeat is the axis before the grown one in repeat_kv's
    5-D form, and 1 for a 4-D broadcast of one head; never the (static) batch."""
    model = g.mqa_broadcast() if kv_heads == 1 else g.attention_model(g.float_matmul, kv_heads=2)
    report = _analyze(tmp_path, model)
    (b,) = report.blocks
    assert (b.num_heads, b.num_kv_heads) == (8, kv_heads)
    assert not b.conflicts
    assert any(e.field == "num_kv_heads" and "head repeat" in e.detail for e in b.evidence)


@pytest.mark.parametrize("packed", ["split", "heads"])
@pytest.mark.parametrize("proj", ["float", "matmul_nbits", "qdq_per_axis"])
def test_packed_split_from_constants_without_shapes(tmp_path: Path, proj: str, packed: str) -> None:
    """The input's rank unknown, so no shapes: the shares come from the Split sizes, on the
    projection's last axis or on the heads axis of the reshape that separates heads."""
    from onnx import TensorProto, helper

    model = g.attention_model(g.PROJECTIONS[proj], packed=packed)
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, None))
    report = _analyze(tmp_path, model)
    (b,) = report.blocks
    assert (b.num_heads, b.num_kv_heads) == (8, 2), b.unknown_reason
    assert _params(b) == g.block_params(8, 2, 16, 64, bias=True)
