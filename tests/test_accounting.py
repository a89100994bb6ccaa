"""Whole-model totals: every stored weight counted once as its logical element count, whatever op reads it.

Truth is the element count of the stored weights (built here, or the torch module's parameters),
never what the counter itself says: quantized weights (MatMulInteger, ConvInteger,
DynamicQuantizeLSTM, QLinearMatMul, QLinearConv, MatMulNBits, GatherBlockQuantized,
DequantizeLinear, Cast-decoded int8) count, their scales and zero points do not, nor do shape
constants, index tables, masks and initial recurrent states.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from attention_graphs import Nodes, Weights, mha_nodes, model, shape_consts, value
from onnx import TensorProto, helper, numpy_helper

from mhainspect.frontends.onnx.loader import load_onnx, model_to_graph
from mhainspect.pipeline import audit_graph
from mhainspect.render.json_render import report_to_dict

D, H = 16, 4
RNG = np.random.default_rng(1)


def arr(name: str, shape: tuple[int, ...], dtype: type = np.float32) -> onnx.TensorProto:
    if np.issubdtype(dtype, np.integer):
        return numpy_helper.from_array(RNG.integers(-100, 100, size=shape).astype(dtype), name)
    return numpy_helper.from_array(RNG.normal(size=shape).astype(dtype), name)


def total(m: onnx.ModelProto) -> int:
    return audit_graph(model_to_graph(m, "m")).model.total_params


def test_weights_stored_in_constant_nodes_count() -> None:
    w = Weights("enc.attn", D)
    g = Nodes()
    out = mha_nodes(g, "/enc/attn", "x", w.prefix, H, D // H)
    constants = [helper.make_node("Constant", [], [t.name], value=t) for t in w.tensors()]
    m = model(constants + g.nodes, g.inits + shape_consts(H, D // H), [value("x", 1, "s", D)], [value(out, 1, "s", D)])
    report = audit_graph(model_to_graph(m, "m"))
    assert report.model.total_params == w.numel() == report.model.attention_params
    assert report_to_dict(report)["model"]["attention_share"] == 1.0


def quantized_ops_model() -> tuple[onnx.ModelProto, int]:
    """One graph with every kind of stored weight the counter must see, and their element count."""
    n, k = 8, 64  # MatMulNBits: N x K weights in uint8 blocks of 32 (4 bits)
    inits = [
        # MatMulNBits: packed blob [N, K/32, 16] holds N·K weights; scales, zero points: no weights.
        arr("nbits.B", (n, k // 32, 16), np.uint8), arr("nbits.scales", (n * k // 32,)),
        arr("nbits.zp", (n * ((k // 32 + 1) // 2),), np.uint8),
        # QLinearMatMul: int8 weight, its scale/zero point; QLinearConv with an int32 bias.
        arr("qmm.b", (k, n), np.int8), arr("qmm.b_scale", (n,)), arr("qmm.b_zp", (n,), np.int8),
        arr("x_scale", ()), arr("x_zp", (), np.uint8), arr("y_scale", ()), arr("y_zp", (), np.uint8),
        arr("qconv.w", (4, 2, 3, 3), np.int8), arr("qconv.w_scale", (4,)), arr("qconv.w_zp", (4,), np.int8),
        arr("qconv.bias", (4,), np.int32),
        # DequantizeLinear: per-axis int8 weight and an int32 bias (static quantization).
        arr("dq.w", (k, n), np.int8), arr("dq.w_scale", (n,)), arr("dq.w_zp", (n,), np.int8),
        arr("dq.bias", (n,), np.int32), arr("dq.bias_scale", (n,)),
        # An int8 weight decoded by Cast and multiplied by its per-channel scale (as some OCR exports do).
        arr("cast.w", (k, n), np.int8), arr("cast.w_scale", (n,)),
        # GatherBlockQuantized: a uint8 blob of 4-bit values: two weights a byte.
        arr("gbq.data", (10, 16), np.uint8), arr("gbq.scales", (10, 1)),
        # A float embedding read by Gather, and what is not a parameter: an index table, a shape,
        # a bool mask, an LSTM's zero initial state.
        arr("emb.weight", (10, k)), arr("index_table", (6,), np.int64),
        numpy_helper.from_array(np.array([1, -1], dtype=np.int64), "flat_shape"),
        numpy_helper.from_array(np.ones((1, k), dtype=bool), "mask"),
        arr("lstm.W", (1, 4 * 4, k)), arr("lstm.R", (1, 4 * 4, 4)), arr("lstm.h0", (1, 1, 4)),
    ]
    expected = (n * k + k * n + 4 * 2 * 3 * 3 + 4 + k * n + n + k * n + 10 * 16 * 2 + 10 * k
                + 16 * k + 16 * 4)
    nodes = [
        helper.make_node("MatMulNBits", ["x", "nbits.B", "nbits.scales", "nbits.zp"], ["y_nbits"], domain="com.microsoft",
                         K=k, N=n, bits=4, block_size=32),
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"]),
        helper.make_node("QLinearMatMul", ["xq", "x_scale", "x_zp", "qmm.b", "qmm.b_scale", "qmm.b_zp", "y_scale",
                                           "y_zp"], ["y_qmm"]),
        helper.make_node("QLinearConv", ["img_q", "x_scale", "x_zp", "qconv.w", "qconv.w_scale", "qconv.w_zp",
                                         "y_scale", "y_zp", "qconv.bias"], ["y_conv"]),
        helper.make_node("DequantizeLinear", ["dq.w", "dq.w_scale", "dq.w_zp"], ["dq.w_f"], axis=1),
        helper.make_node("DequantizeLinear", ["dq.bias", "dq.bias_scale"], ["dq.bias_f"]),
        helper.make_node("MatMul", ["x", "dq.w_f"], ["y_dq0"]),
        helper.make_node("Add", ["y_dq0", "dq.bias_f"], ["y_dq"]),
        helper.make_node("Cast", ["cast.w"], ["cast.w_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["cast.w_f", "cast.w_scale"], ["cast.w_scaled"]),
        helper.make_node("MatMul", ["x", "cast.w_scaled"], ["y_cast"]),
        helper.make_node("GatherBlockQuantized", ["gbq.data", "ids", "gbq.scales"], ["y_gbq"], domain="com.microsoft",
                         bits=4, block_size=32),
        helper.make_node("Gather", ["index_table", "ids"], ["picked"]),
        helper.make_node("Gather", ["emb.weight", "picked"], ["y_emb0"]),
        helper.make_node("Reshape", ["y_emb0", "flat_shape"], ["y_emb"]),
        helper.make_node("Where", ["mask", "x", "x"], ["y_mask"]),
        helper.make_node("Expand", ["lstm.h0", "h0_shape"], ["h0"]),
        helper.make_node("LSTM", ["seq", "lstm.W", "lstm.R", "", "", "h0"], ["y_lstm"], hidden_size=4),
    ]
    inputs = [value("x", 1, k), helper.make_tensor_value_info("img_q", TensorProto.UINT8, [1, 2, 5, 5]),
              helper.make_tensor_value_info("ids", TensorProto.INT64, [3]), value("seq", 2, 1, k),
              helper.make_tensor_value_info("h0_shape", TensorProto.INT64, [3])]
    outputs = [value(o, 1) for o in ("y_nbits", "y_qmm", "y_conv", "y_dq", "y_cast", "y_gbq", "y_emb", "y_mask",
                                     "y_lstm")]
    graph = helper.make_graph(nodes, "quantized", inputs, outputs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    return m, expected


def test_every_quantized_weight_counts_by_its_logical_elements() -> None:
    m, expected = quantized_ops_model()
    assert total(m) == expected


def test_int4_weights_count_as_elements_not_bytes() -> None:
    w = helper.make_tensor("w4", TensorProto.INT4, [16, 8], [1] * 128)
    scale = numpy_helper.from_array(np.ones(8, dtype=np.float32), "w4_scale")
    nodes = [helper.make_node("DequantizeLinear", ["w4", "w4_scale"], ["w"], axis=1),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    m = model(nodes, [w, scale], [value("x", 1, 16)], [value("y", 1, 8)], opset=21)
    assert total(m) == 16 * 8


class _Small:
    """A small torch model with an embedding, a Conv1d, an LSTM, an nn.MultiheadAttention and a
    Linear: every op onnxruntime's dynamic quantizer rewrites."""

    @staticmethod
    def export(path: Path) -> int:
        torch = pytest.importorskip("torch")
        nn = torch.nn

        class Small(nn.Module):  # type: ignore[misc, name-defined]
            def __init__(self) -> None:
                super().__init__()
                self.emb = nn.Embedding(50, 16)
                self.conv = nn.Conv1d(16, 16, 3, padding=1)
                self.lstm = nn.LSTM(16, 16, batch_first=True)
                self.attn = nn.MultiheadAttention(16, 4, batch_first=True)
                self.out = nn.Linear(16, 10)

            def forward(self, ids: object) -> object:
                x = self.emb(ids)
                x = self.conv(x.transpose(1, 2)).transpose(1, 2)
                x, _ = self.lstm(x)
                x, _ = self.attn(x, x, x, need_weights=False)
                return self.out(x)

        torch.manual_seed(0)
        module = Small().eval()
        with torch.no_grad():
            for p in module.parameters():
                p.add_(torch.randn_like(p) * 0.02)  # exporters drop all-zero biases
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (torch.randint(0, 50, (1, 6)),), str(path), input_names=["ids"], dynamo=False,
                              opset_version=17)
        return int(sum(p.numel() for p in module.parameters()))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("small") / "float.onnx"
    return path, _Small.export(path)


@pytest.mark.parametrize("per_channel", [False, True])
def test_dynamically_quantized_model_totals_equal_the_modules_parameters(
        exported: tuple[Path, int], per_channel: bool, tmp_path: Path) -> None:
    quantization = pytest.importorskip("onnxruntime.quantization")
    float_path, params = exported
    assert audit_graph(load_onnx(float_path)).model.total_params == params
    out = tmp_path / "int8.onnx"
    quantization.quantize_dynamic(str(float_path), str(out), per_channel=per_channel,
                                  weight_type=quantization.QuantType.QInt8 if per_channel
                                  else quantization.QuantType.QUInt8)
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert {"MatMulInteger", "ConvInteger", "DynamicQuantizeLSTM"} <= ops  # the quantizer did rewrite them
    assert audit_graph(load_onnx(out)).model.total_params == params
