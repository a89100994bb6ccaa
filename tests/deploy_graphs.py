"""Hand-built ONNX graphs of deployment patterns (onnx.helper, no export): one attention core whose
Q/K/V/O projections are written the way a quantizer or runtime optimizer writes them.

``attention_model(proj, heads, kv_heads, d_k, d_model, packed=...)`` builds a decomposed attention
block (Reshape -> Transpose -> Q·Kᵀ -> scale -> Softmax -> ·V -> merge heads, HF repeat_kv for
GQA) whose projections come from ``proj``, one of PROJECTIONS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"


@dataclass
class Builder:
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    count: int = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def const(self, stem: str, value: np.ndarray) -> str:
        n = self.name(stem)
        self.inits.append(numpy_helper.from_array(value, n))
        return n

    def int4(self, stem: str, shape: tuple[int, ...], signed: bool = True) -> str:
        n = self.name(stem)
        vals = np.random.randint(-8 if signed else 0, 8 if signed else 16, size=shape)
        self.inits.append(helper.make_tensor(n, TensorProto.INT4 if signed else TensorProto.UINT4, shape,
                                             vals.flatten().tolist()))
        return n

    def op(self, op: str, inputs: list[str], n_out: int = 1, domain: str = "", **attrs: object) -> list[str]:
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op), domain=domain, **attrs))
        return outs

    def one(self, op: str, inputs: list[str], domain: str = "", **attrs: object) -> str:
        return self.op(op, inputs, 1, domain, **attrs)[0]


def _f(*shape: int) -> np.ndarray:
    return (np.random.randn(*shape) * 0.02).astype(np.float32)


# A projection writer: (builder, activation, in_features, out_features, bias?) -> output tensor name.
Projection = Callable[[Builder, str, int, int, bool], str]


def float_matmul(b: Builder, x: str, k: int, n: int, bias: bool) -> str:
    y = b.one("MatMul", [x, b.const("w", _f(k, n))])
    return b.one("Add", [y, b.const("b", _f(n))]) if bias else y


def qdq_per_axis(b: Builder, x: str, k: int, n: int, bias: bool) -> str:
    """quantize_static QDQ: int8 weight, per-output-channel DequantizeLinear, int32 bias through DQ,
    and a Q/DQ pair on the activation and the product."""
    w = b.one("DequantizeLinear", [b.const("wq", np.random.randint(-127, 127, (k, n)).astype(np.int8)),
                                   b.const("ws", np.full(n, 0.01, np.float32)),
                                   b.const("wz", np.zeros(n, np.int8))], axis=1)
    x = _qdq(b, x)
    y = _qdq(b, b.one("MatMul", [x, w]))
    if bias:
        bq = b.one("DequantizeLinear", [b.const("bq", np.random.randint(-99, 99, n).astype(np.int32)),
                                        b.const("bs", np.full(n, 1e-4, np.float32))], axis=0)
        y = _qdq(b, b.one("Add", [bq, y]))
    return y


def qdq_float_weight(b: Builder, x: str, k: int, n: int, bias: bool) -> str:
    """Fake quantization (TensorRT-style QAT exports): a float weight through QuantizeLinear -> DequantizeLinear."""
    s, z = b.const("ws", np.array(0.01, np.float32)), b.const("wz", np.array(0, np.int8))
    w = b.one("DequantizeLinear", [b.one("QuantizeLinear", [b.const("w", _f(k, n)), s, z]), s, z])
    y = b.one("MatMul", [_qdq(b, x), w])
    return b.one("Add", [y, b.const("b", _f(n))]) if bias else y


def _qdq(b: Builder, x: str) -> str:
    s, z = b.const("s", np.array(0.02, np.float32)), b.const("z", np.array(128, np.uint8))
    return b.one("DequantizeLinear", [b.one("QuantizeLinear", [x, s, z]), s, z])


def dq_blocked_int4(b: Builder, x: str, k: int, n: int, bias: bool) -> str:
    """MatMulNBits' QDQ form: an int4 [K, N] weight dequantized in blocks of 16 along K."""
    w = b.one("DequantizeLinear", [b.int4("w4", (k, n)), b.const("ws", np.full((k // 16, n), 0.01, np.float32))],
              axis=0, block_size=16)
    y = b.one("MatMul", [x, w])
    return b.one("Add", [y, b.const("b", _f(n))]) if bias else y


def dq_float8(b: Builder, x: str, k: int, n: int, bias: bool) -> str:
    """A float8 (e4m3fn) weight with a per-tensor scale, the bias stored as fp16 and cast."""
    n8 = b.name("w8")
    b.inits.append(helper.make_tensor(n8, TensorProto.FLOAT8E4M3FN, (k, n), _f(k, n).flatten().tolist()))
    w = b.one("DequantizeLinear", [n8, b.const("ws", np.array(0.01, np.float32))])
    y = b.one("MatMul", [x, w])
    if not bias:
        return y
    return b.one("Add", [y, b.one("Cast", [b.const("b16", _f(n).astype(np.float16))], to=TensorProto.FLOAT)])


def matmul_nbits(b: Builder, x: str, k: int, n: int, bias: bool) -> str:
    """onnxruntime MatMulNBits: B stored [N, K/32, 16] uint8, logical [K, N] from attributes; bias as input 5."""
    blocks = k // 32
    inputs = [x, b.const("b4", np.random.randint(0, 255, (n, blocks, 16)).astype(np.uint8)),
              b.const("sc", np.full(n * blocks, 0.01, np.float32))]
    if bias:
        inputs += ["", "", b.const("b", _f(n))]
    return b.one("MatMulNBits", inputs, MS, K=k, N=n, bits=4, block_size=32)


def matmul_nbits_add(b: Builder, x: str, k: int, n: int, bias: bool) -> str:
    """MatMulNBits without its bias input, the bias in a following Add (what older quantizers write)."""
    y = matmul_nbits(b, x, k, n, False)
    return b.one("Add", [y, b.const("b", _f(n))]) if bias else y


def dynamic_int8(b: Builder, x: str, k: int, n: int, bias: bool) -> str:
    """quantize_dynamic: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(scales) -> Add(bias)."""
    xq, xs, xz = b.op("DynamicQuantizeLinear", [x], 3)
    scale = b.one("Mul", [xs, b.const("ws", np.array(0.01, np.float32))])
    acc = b.one("MatMulInteger", [xq, b.const("wq", np.random.randint(0, 255, (k, n)).astype(np.uint8)), xz,
                                  b.const("wz", np.array(128, np.uint8))])
    y = b.one("Mul", [b.one("Cast", [acc], to=TensorProto.FLOAT), scale])
    return b.one("Add", [b.const("b", _f(n)), y]) if bias else y


def matmul_integer_to_float(b: Builder, x: str, k: int, n: int, bias: bool) -> str:
    """onnxruntime's fused dynamic int8 product, bias as input 6."""
    xq, xs, xz = b.op("DynamicQuantizeLinear", [x], 3)
    inputs = [xq, b.const("wq", np.random.randint(-127, 127, (k, n)).astype(np.int8)), xs,
              b.const("ws", np.array(0.01, np.float32)), xz, ""]
    if bias:
        inputs.append(b.const("b", _f(n)))
    return b.one("MatMulIntegerToFloat", inputs, MS)


def qlinear_matmul(b: Builder, x: str, k: int, n: int, bias: bool) -> str:
    """QOperator static int8: QuantizeLinear -> QLinearMatMul -> DequantizeLinear (+ Add bias)."""
    s, z = b.const("s", np.array(0.02, np.float32)), b.const("z", np.array(128, np.uint8))
    xq = b.one("QuantizeLinear", [x, s, z])
    ys, yz = b.const("ys", np.array(0.05, np.float32)), b.const("yz", np.array(128, np.uint8))
    yq = b.one("QLinearMatMul", [xq, s, z, b.const("wq", np.random.randint(0, 255, (k, n)).astype(np.uint8)),
                                 b.const("ws", np.array(0.01, np.float32)), b.const("wz", np.array(128, np.uint8)),
                                 ys, yz])
    y = b.one("DequantizeLinear", [yq, ys, yz])
    return b.one("Add", [y, b.const("b", _f(n))]) if bias else y


def fp16_cast(b: Builder, x: str, k: int, n: int, bias: bool) -> str:
    """An fp16 weight cast to float (keep_io_types conversions)."""
    w = b.one("Cast", [b.const("w16", _f(k, n).astype(np.float16))], to=TensorProto.FLOAT)
    y = b.one("MatMul", [x, w])
    return b.one("Add", [y, b.const("b", _f(n))]) if bias else y


def _stored_int(b: Builder, shape: tuple[int, ...], dtype: type = np.int8) -> str:
    info = np.iinfo(dtype)
    return b.const("wq", np.random.randint(info.min, info.max, shape).astype(dtype))


def cast_mul_int8(b: Builder, x: str, k: int, n: int, bias: bool) -> str:
    """Weight-only int8 dequantized by plain arithmetic: int8 [K, N] -> Cast(float) -> Mul(scale), the
    scale per tensor (a scalar)."""
    w = b.one("Mul", [b.one("Cast", [_stored_int(b, (k, n))], to=TensorProto.FLOAT),
                      b.const("ws", np.array(0.01, np.float32))])
    y = b.one("MatMul", [x, w])
    return b.one("Add", [y, b.const("b", _f(n))]) if bias else y


def cast_sub_mul_uint8(b: Builder, x: str, k: int, n: int, bias: bool) -> str:
    """uint8 [K, N] -> Cast(float) -> Sub(zero point [N]) -> Mul(scale [N]): per output channel."""
    w = b.one("Cast", [_stored_int(b, (k, n), np.uint8)], to=TensorProto.FLOAT)
    w = b.one("Mul", [b.one("Sub", [w, b.const("wz", np.full(n, 128.0, np.float32))]),
                      b.const("ws", np.full(n, 0.01, np.float32))])
    y = b.one("MatMul", [x, w])
    return b.one("Add", [y, b.const("b", _f(n))]) if bias else y


def int_sub_cast_mul(b: Builder, x: str, k: int, n: int, bias: bool) -> str:
    """The zero point taken off in integers: int8 -> Cast(int32) -> Sub(int32 zero point [N]) ->
    Cast(float) -> Mul(scale [N])."""
    w = b.one("Cast", [_stored_int(b, (k, n))], to=TensorProto.INT32)
    w = b.one("Cast", [b.one("Sub", [w, b.const("wz", np.full(n, 3, np.int32))])], to=TensorProto.FLOAT)
    w = b.one("Mul", [b.const("ws", np.full(n, 0.01, np.float32)), w])
    y = b.one("MatMul", [x, w])
    return b.one("Add", [y, b.const("b", _f(n))]) if bias else y


def mul_sub_transposed_int8(b: Builder, x: str, k: int, n: int, bias: bool) -> str:
    """Stored [N, K] as nn.Linear keeps it: Cast -> Mul(scale [N, 1]) -> Sub(scaled zero point [N, 1])
    -> Transpose -> MatMul (the scale first, then the offset)."""
    w = b.one("Mul", [b.one("Cast", [_stored_int(b, (n, k))], to=TensorProto.FLOAT),
                      b.const("ws", np.full((n, 1), 0.01, np.float32))])
    w = b.one("Sub", [w, b.const("wz", np.full((n, 1), 0.03, np.float32))])
    y = b.one("MatMul", [x, b.one("Transpose", [w], perm=[1, 0])])
    return b.one("Add", [y, b.const("b", _f(n))]) if bias else y


PROJECTIONS: dict[str, Projection] = {
    "float": float_matmul, "qdq_per_axis": qdq_per_axis, "qdq_float_weight": qdq_float_weight,
    "dq_blocked_int4": dq_blocked_int4, "dq_float8": dq_float8,
    "matmul_nbits": matmul_nbits, "matmul_nbits_add": matmul_nbits_add, "dynamic_int8": dynamic_int8,
    "matmul_integer_to_float": matmul_integer_to_float, "qlinear_matmul": qlinear_matmul, "fp16_cast": fp16_cast,
    "cast_mul_int8": cast_mul_int8, "cast_sub_mul_uint8": cast_sub_mul_uint8, "int_sub_cast_mul": int_sub_cast_mul,
    "mul_sub_transposed_int8": mul_sub_transposed_int8,
}
# Weight-only integer weights dequantized by plain arithmetic (Cast, Mul by a scale, Sub a zero point).
ARITHMETIC_DEQUANT = ("cast_mul_int8", "cast_sub_mul_uint8", "int_sub_cast_mul", "mul_sub_transposed_int8")


def _i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def attention_model(proj: Projection, heads: int = 8, kv_heads: int = 2, d_k: int = 16, d_model: int = 64,
                    bias: bool = True, packed: str | None = None, embed: bool = False,
                    quantized_scale: bool = False) -> onnx.ModelProto:
    """One self-attention block. ``packed``: None (separate Q/K/V), "split" (one QKV projection split
    by a constant Split), "heads" (reshaped to [B, S, h + 2g, d] and split on the heads axis),
    "split_runtime" (split sizes computed at run time: unidentifiable).
    ``embed``: the block reads a 4-bit GatherBlockQuantized embedding of token ids (uint8 storage,
    two elements a byte), so every activation shape starts at that op."""
    b = Builder()
    x = "x"
    if embed:
        table = b.const("emb", np.random.randint(0, 255, (100, d_model // 2)).astype(np.uint8))
        x = b.one("GatherBlockQuantized", [table, "ids", b.const("es", np.full((100, d_model // 16), 0.01, np.float32))],
                  MS, bits=4, block_size=16, gather_axis=0, quantize_axis=1)
    qw, kw = heads * d_k, kv_heads * d_k
    if packed is None:
        q, k, v = (proj(b, x, d_model, w, bias) for w in (qw, kw, kw))
    elif packed == "heads":  # the heads separated first: [B, S, h + 2g, d], split on the heads axis
        qkv = b.one("Reshape", [proj(b, x, d_model, qw + 2 * kw, bias),
                                b.const("shape", _i64(0, 0, heads + 2 * kv_heads, d_k))])
        q, k, v = b.op("Split", [qkv, b.const("sizes", _i64(heads, kv_heads, kv_heads))], 3, axis=2)
    else:
        qkv = proj(b, x, d_model, qw + 2 * kw, bias)
        sizes = b.const("sizes", _i64(qw, kw, kw)) if packed == "split" else "split_sizes"
        q, k, v = b.op("Split", [qkv, sizes], 3, axis=-1)

    def heads_first(t: str, n: int) -> str:
        if packed == "heads":
            return b.one("Transpose", [t], perm=[0, 2, 1, 3])
        return b.one("Transpose", [b.one("Reshape", [t, b.const("shape", _i64(0, 0, n, d_k))])], perm=[0, 2, 1, 3])

    qh, kh, vh = heads_first(q, heads), heads_first(k, kv_heads), heads_first(v, kv_heads)
    if kv_heads != heads:  # HF repeat_kv: [B, g, S, d] -> [B, g, h/g, S, d] -> [B, h, S, d]
        rep = heads // kv_heads

        def repeat(t: str) -> str:
            t5 = b.one("Unsqueeze", [t, b.const("ax", _i64(2))])
            shp = b.one("Concat", [b.const("bg", _i64(1, kv_heads, rep)), b.one("Slice", [
                b.one("Shape", [t]), b.const("st", _i64(2)), b.const("en", _i64(4))])], axis=0)
            return b.one("Reshape", [b.one("Expand", [t5, shp]), b.const("shape", _i64(0, heads, -1, d_k))])
        kh, vh = repeat(kh), repeat(vh)
    scores = b.one("MatMul", [qh, b.one("Transpose", [kh], perm=[0, 1, 3, 2])])
    if quantized_scale:  # the constant as a static quantizer stores it: uint8 255 · (1/sqrt(d_k))/255
        factor = b.one("DequantizeLinear", [b.const("scale_q", np.array(255, np.uint8)),
                                            b.const("scale_s", np.array(1 / np.sqrt(d_k) / 255, np.float32)),
                                            b.const("scale_z", np.array(0, np.uint8))])
    else:
        factor = b.const("scale", np.array(1 / np.sqrt(d_k), np.float32))
    scores = b.one("Mul", [scores, factor])
    ctx = b.one("MatMul", [b.one("Softmax", [scores], axis=-1), vh])
    merged = b.one("Reshape", [b.one("Transpose", [ctx], perm=[0, 2, 1, 3]), b.const("shape", _i64(0, 0, qw))])
    y = proj(b, merged, qw, d_model, bias)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d_model])]
    if embed:
        inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])]
    if packed == "split_runtime":
        inputs.append(helper.make_tensor_value_info("split_sizes", TensorProto.INT64, [3]))
    graph = helper.make_graph(b.nodes, "attn", inputs,
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], b.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])


def block_params(heads: int, kv_heads: int, d_k: int, d_model: int, bias: bool) -> dict[str, int]:
    """q, k, v, o (weights + biases) and bias of a standard block of these dimensions."""
    qw, kw = heads * d_k, kv_heads * d_k
    b = int(bias)
    q, k, o = d_model * qw + b * qw, d_model * kw + b * kw, qw * d_model + b * d_model
    return {"q": q, "k": k, "v": k, "o": o, "bias": b * (qw + 2 * kw + d_model)}


def _model(b: Builder, inputs: list[onnx.ValueInfoProto], y: str) -> onnx.ModelProto:
    graph = helper.make_graph(b.nodes, "attn", inputs, [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)],
                              b.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])


def _x(d_model: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d_model])


def genai_gqa(proj: Projection, heads: int = 8, kv_heads: int = 2, d_k: int = 16, d_model: int = 64,
              packed: bool = True, rotary: bool = False, bias: bool = False, do_rotary: bool = False) -> onnx.ModelProto:
    """What onnxruntime-genai's builder writes: GroupQueryAttention fed by one packed QKV projection
    (or separate q/k/v ones, optionally through RotaryEmbedding), with a KV cache. ``do_rotary``:
    the op applies the rotary embedding itself, from the cos/sin caches at its inputs 7 and 8
    ([max positions, d_k / 2] each, as the builder writes them)."""
    b = Builder()
    qw, kw = heads * d_k, kv_heads * d_k
    if packed:
        q, k, v = proj(b, "x", d_model, qw + 2 * kw, bias), "", ""
    else:
        q, k, v = (proj(b, "x", d_model, w, bias) for w in (qw, kw, kw))
        if rotary:
            cos, sin = b.const("cos", _f(32, d_k // 2)), b.const("sin", _f(32, d_k // 2))
            q, k = (b.one("RotaryEmbedding", [t, "position_ids", cos, sin], MS, interleaved=0) for t in (q, k))
    inputs_7_8 = [b.const("cos_cache", _f(32, d_k // 2)), b.const("sin_cache", _f(32, d_k // 2))] if do_rotary else []
    out = b.op("GroupQueryAttention", [q, k, v, "past_key", "past_value", "seqlens_k", "total_seq"] + inputs_7_8, 3,
               MS, num_heads=heads, kv_num_heads=kv_heads, scale=float(1 / np.sqrt(d_k)), do_rotary=int(do_rotary))
    y = proj(b, out[0], qw, d_model, bias)
    past = ["batch", kv_heads, "past", d_k]
    inputs = [_x(d_model), helper.make_tensor_value_info("past_key", TensorProto.FLOAT, past),
              helper.make_tensor_value_info("past_value", TensorProto.FLOAT, past),
              helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["batch"]),
              helper.make_tensor_value_info("total_seq", TensorProto.INT32, [])]
    if rotary:
        inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"]))
    return _model(b, inputs, y)


def ort_bert_attention(heads: int = 4, d_model: int = 64, quantized: bool = False,
                       hidden_sizes: tuple[int, int, int] | None = None) -> onnx.ModelProto:
    """onnxruntime's optimized BERT layer: Attention (packed [D, 3D] weight + bias) -> MatMul ->
    SkipLayerNormalization whose 5th input is the output projection's bias. ``quantized``:
    QAttention (int8 weight) as quantize_dynamic writes it from a fused model."""
    b = Builder()
    width = sum(hidden_sizes) if hidden_sizes else 3 * d_model
    bias = b.const("qkv_b", _f(width))
    attrs: dict[str, object] = {"num_heads": heads}
    if hidden_sizes:
        attrs["qkv_hidden_sizes"] = list(hidden_sizes)
    if quantized:
        xq, xs, xz = b.op("DynamicQuantizeLinear", ["x"], 3)
        att = b.one("QAttention", [xq, b.const("qkv_w", np.random.randint(0, 255, (d_model, width)).astype(np.uint8)),
                                   bias, xs, b.const("ws", np.array(0.01, np.float32)), "", xz,
                                   b.const("wz", np.array(128, np.uint8))], MS, **attrs)
    else:
        att = b.one("Attention", ["x", b.const("qkv_w", _f(d_model, width)), bias, "mask"], MS, **attrs)
    v_width = hidden_sizes[2] if hidden_sizes else d_model
    y = b.one("MatMul", [att, b.const("o_w", _f(v_width, d_model))])
    out = b.op("SkipLayerNormalization", [y, "x", b.const("gamma", _f(d_model)), b.const("beta", _f(d_model)),
                                          b.const("o_b", _f(d_model))], 1, MS, epsilon=1e-12)[0]
    inputs = [_x(d_model), helper.make_tensor_value_info("mask", TensorProto.INT32, ["batch", "seq"])]
    return _model(b, inputs, out)


def ort_mha(proj: Projection, heads: int = 4, d_k: int = 16, d_model: int = 64, bias: bool = True,
            op_bias: bool = False, kv_heads: int | None = None, cross_cache: bool = False) -> onnx.ModelProto:
    """com.microsoft MultiHeadAttention with separate (quantized) projections before it; ``op_bias``:
    their biases packed [q | k | v] into the op's bias input (onnxruntime's optimizer with
    use_multi_head_attention writes it so); ``kv_heads``: grouped K/V projections repeated to
    ``heads`` heads before the op; ``cross_cache``: K and V are the cross-attention cache, graph
    inputs [B, heads, S, d_k] (a decoder with past: their projections ran with the encoder)."""
    b = Builder()
    w = heads * d_k
    kv_width = (kv_heads or heads) * d_k
    q = proj(b, "x", d_model, w, bias and not op_bias)
    if cross_cache:
        k, v = "past_key", "past_value"
    else:
        k, v = (proj(b, "x", d_model, kv_width, bias and not op_bias) for _ in range(2))
    if kv_heads:  # grouped-query K/V repeated to every head before the op (onnxscript's sdpa_via_mha)
        k, v = (b.one("Reshape", [b.one("Expand", [b.one("Reshape", [t, b.const("g", _i64(0, 0, kv_heads, 1, d_k))]),
                                                   b.const("r", _i64(1, 1, 1, heads // kv_heads, 1))]),
                                  b.const("m", _i64(0, 0, w))]) for t in (k, v))
    packed = [b.const("qkv_bias", _f(3 * w))] if op_bias else []
    att = b.one("MultiHeadAttention", [q, k, v] + packed, MS, num_heads=heads)
    y = proj(b, att, w, d_model, bias)
    cache = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", heads, "enc_seq", d_k])
             for n in ("past_key", "past_value")] if cross_cache else []
    return _model(b, [_x(d_model)] + cache, y)


def ort_mha_packed_kv(proj: Projection, heads: int = 4, d_k: int = 16, d_model: int = 64, bias: bool = True,
                      op_bias: bool = False) -> onnx.ModelProto:
    """com.microsoft MultiHeadAttention over packed K/V (onnxruntime's optimizer with
    enable_packed_kv): cross-attention whose K and V come from one projection of the encoder output
    [B, L, 2·h·d], reshaped to the op's packed-KV layout [B, L, h, 2, d] and given as its key input,
    the value input empty. ``op_bias``: the Q|K|V biases packed into the op's bias input."""
    b = Builder()
    w = heads * d_k
    q = proj(b, "x", d_model, w, bias and not op_bias)
    kv = b.one("Reshape", [proj(b, "enc", d_model, 2 * w, bias and not op_bias),
                           b.const("kv_shape", _i64(0, 0, heads, 2, d_k))])
    packed = [b.const("qkv_bias", _f(3 * w))] if op_bias else []
    att = b.one("MultiHeadAttention", [q, kv, ""] + packed, MS, num_heads=heads)
    y = proj(b, att, w, d_model, bias)
    enc = helper.make_tensor_value_info("enc", TensorProto.FLOAT, ["batch", "enc_seq", d_model])
    return _model(b, [_x(d_model), enc], y)


def onnx_attention_expanded(proj: Projection | None, heads: int = 8, kv_heads: int = 2, d_k: int = 16, d_model: int = 64,
                            four_d: bool = False, mask: bool = False, past: bool = False, softcap: float = 0.0,
                            causal: bool = False, expand: bool = True, opset: int = 23, mask_rank: int = 2,
                            bool_mask: bool = False, nonpad: bool = False, window: int | None = None
                            ) -> onnx.ModelProto:
    """Projections around an opset-23 (or later) ``Attention`` node, expanded into the function body
    that the ONNX standard defines for it (with its own grouped-query head repeat), as a backend or
    an exporter that inlines it writes the graph. ``expand=False`` keeps the fused node.
    ``mask_rank``: the mask's rank (1 to 4: [total], [seq, total], [heads, seq, total], [batch, 1,
    seq, total]), ``bool_mask`` a bool mask instead of an additive one; ``nonpad`` (opset >= 24): K/V
    padded, their valid lengths per batch an input; ``window`` (opset >= 25): a local window of that
    many positions to the left."""
    from onnx import defs, inliner

    b = Builder()
    qw, kw = heads * d_k, kv_heads * d_k
    inputs = [_x(d_model)]
    if proj is not None:
        q, k, v = (proj(b, "x", d_model, w, True) for w in (qw, kw, kw))
    else:  # Q, K, V are graph inputs: only the Attention body itself says how many heads
        q, k, v = "q", "k", "v"
        inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "seq", w])
                  for n, w in (("q", qw), ("k", kw), ("v", kw))]
    attrs: dict[str, object] = {}
    if four_d:
        def heads_first(t: str, n: int) -> str:
            return b.one("Transpose", [b.one("Reshape", [t, b.const("shape", _i64(0, 0, n, d_k))])], perm=[0, 2, 1, 3])
        q, k, v = heads_first(q, heads), heads_first(k, kv_heads), heads_first(v, kv_heads)
    else:
        attrs.update(q_num_heads=heads, kv_num_heads=kv_heads)
    if softcap:
        attrs["softcap"] = softcap
    if causal:
        attrs["is_causal"] = 1
    if window is not None:
        attrs["left_window_size"] = window
    args = [q, k, v]
    types = [_tp(["batch", "seq", qw] if not four_d else ["batch", heads, "seq", d_k]),
             _tp(["batch", "seq", kw] if not four_d else ["batch", kv_heads, "seq", d_k])] * 1
    types.append(types[1])
    mask_shape: list[int | str] = {1: ["total"], 2: ["seq", "total"], 3: [heads, "seq", "total"],
                                   4: ["batch", 1, "seq", "total"]}[mask_rank]
    mask_type = TensorProto.BOOL if bool_mask else TensorProto.FLOAT
    if mask or past or nonpad:
        args.append("mask" if mask else "")
        types.append(_tp(mask_shape, mask_type) if mask else onnx.TypeProto())
        if mask:
            inputs.append(helper.make_tensor_value_info("mask", mask_type, mask_shape))
    if past or nonpad:
        args += ["past_key", "past_value"] if past else ["", ""]
        pshape = ["batch", kv_heads, "past", d_k]
        types += [_tp(pshape), _tp(pshape)] if past else [onnx.TypeProto(), onnx.TypeProto()]
        if past:
            inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, pshape) for n in ("past_key", "past_value")]
    if nonpad:
        args.append("nonpad_kv_seqlen")
        types.append(_tp(["batch"], TensorProto.INT64))
        inputs.append(helper.make_tensor_value_info("nonpad_kv_seqlen", TensorProto.INT64, ["batch"]))
    outs = [b.name("y")] + ([b.name("pk"), b.name("pv")] if past else [])
    node = helper.make_node("Attention", args, outs, name=b.name("Attention"), **attrs)
    b.nodes.append(node)
    y = outs[0]
    if four_d:
        y = b.one("Reshape", [b.one("Transpose", [y], perm=[0, 2, 1, 3]), b.const("shape", _i64(0, 0, qw))])
    if proj is not None:
        y = proj(b, y, qw, d_model, True)
    graph = helper.make_graph(b.nodes, "attn", inputs, [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)],
                              b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    if not expand:
        return model
    body = defs.get_schema("Attention", opset).get_context_dependent_function(
        node.SerializeToString(), [t.SerializeToString() for t in types])
    func = onnx.FunctionProto()
    func.ParseFromString(body)
    func.domain = "expand"
    call = next(n for n in model.graph.node if n.name == node.name)  # the graph holds a copy of ``node``
    call.domain = "expand"
    model.functions.append(func)
    model.opset_import.append(helper.make_opsetid("expand", 1))
    inlined = inliner.inline_local_functions(model)
    assert not any(n.op_type == "Attention" for n in inlined.graph.node), "the Attention node was not expanded"
    del inlined.opset_import[:]
    inlined.opset_import.extend([helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    return inlined


def _tp(shape: list[int | str], elem: int = TensorProto.FLOAT) -> onnx.TypeProto:
    return helper.make_tensor_type_proto(elem, shape)


def keras_einsum_dense(heads: int = 4, d_k: int = 16, d_model: int = 64, quantized: bool = False) -> onnx.ModelProto:
    """Keras MultiHeadAttention as tf2onnx writes it: EinsumDense kernels [d_model, h, d_k] with a
    [h, d_k] bias Add after each Einsum, scores as an Einsum, output kernel [h, d_k, d_model]."""
    b = Builder()

    def kernel(stem: str, *shape: int) -> str:
        if not quantized:
            return b.const(stem, _f(*shape))
        return b.one("DequantizeLinear", [b.const(stem, np.random.randint(-127, 127, shape).astype(np.int8)),
                                          b.const("s", np.array(0.01, np.float32))])

    def dense(x: str) -> str:
        y = b.one("Einsum", [x, kernel("k", d_model, heads, d_k)], equation="abc,cde->abde")
        return b.one("Add", [y, b.const("bias", _f(heads, d_k))])

    q, k, v = dense("x"), dense("x"), dense("x")
    q = b.one("Mul", [q, b.const("sc", np.array(1 / np.sqrt(d_k), np.float32))])
    s = b.one("Einsum", [k, q], equation="aecd,abcd->acbe")
    ctx = b.one("Einsum", [b.one("Softmax", [s], axis=-1), v], equation="acbe,aecd->abcd")
    o = b.one("Einsum", [ctx, kernel("ok", heads, d_k, d_model)], equation="abcd,cde->abe")
    return _model(b, [_x(d_model)], b.one("Add", [o, b.const("ob", _f(d_model))]))


def mqa_broadcast(batch: int = 2, heads: int = 8, d_k: int = 16, d_model: int = 64) -> onnx.ModelProto:
    """Multi-query attention whose single K/V head is broadcast by one Expand on the head axis
    ([B, 1, S, d] -> [B, h, S, d]), with a static batch: the batch axis is not a head count."""
    b = Builder()
    q = float_matmul(b, "x", d_model, heads * d_k, False)
    k, v = (float_matmul(b, "x", d_model, d_k, False) for _ in range(2))

    def heads_first(t: str, n: int) -> str:
        return b.one("Transpose", [b.one("Reshape", [t, b.const("shape", _i64(0, 0, n, d_k))])], perm=[0, 2, 1, 3])

    qh = heads_first(q, heads)
    kh, vh = (b.one("Expand", [heads_first(t, 1), b.const("to", _i64(batch, heads, 1, d_k))]) for t in (k, v))
    scores = b.one("Mul", [b.one("MatMul", [qh, b.one("Transpose", [kh], perm=[0, 1, 3, 2])]),
                           b.const("scale", np.array(1 / np.sqrt(d_k), np.float32))])
    ctx = b.one("MatMul", [b.one("Softmax", [scores], axis=-1), vh])
    merged = b.one("Reshape", [b.one("Transpose", [ctx], perm=[0, 2, 1, 3]), b.const("shape", _i64(0, 0, heads * d_k))])
    y = float_matmul(b, merged, heads * d_k, d_model, False)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, "seq", d_model])
    return _model(b, [x], y)
