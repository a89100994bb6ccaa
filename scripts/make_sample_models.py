#!/usr/bin/env python3
"""Build the small ONNX sample models in ``sample_models/`` plus their ground truth.

Every graph is written by hand with ``onnx.helper`` but mimics, node for node, what a
real exporter writes for that kind of attention (TorchScript ``torch.onnx.export``,
the torch 2.x dynamo exporter, tf2onnx for Keras, the onnxruntime transformer
optimizer, the ONNX opset-23 ``Attention`` op).  Weights are small seeded random
float32 values so onnxruntime can run every model.

``sample_models/expected.json`` is derived from the construction parameters used
below (heads, widths, which projections carry a bias), never from an analysis tool.
After writing, the script checks each model with ``onnx.checker`` (full_check) and
runs it in onnxruntime on random inputs (batch 2, seq 5); pass ``--no-verify`` to skip.

Usage::

    python scripts/make_sample_models.py [--out sample_models] [--no-verify]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
INT64_MAX = int(np.iinfo(np.int64).max)
FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64

# Values used for symbolic dims when the models are run for verification.
DIM_VALUES = {"batch": 2, "seq": 5, "enc_seq": 7, "unk__0": 2, "unk__1": 5, "past_seq": 3, "total_seq": 8}


# --------------------------------------------------------------------------------------
# Ground truth (computed from construction parameters only)
# --------------------------------------------------------------------------------------


def proj(d_in: int, d_out: int, bias: bool) -> tuple[int, int]:
    """(weight+bias numel, bias numel) of a dense projection d_in -> d_out."""
    b = d_out if bias else 0
    return d_in * d_out + b, b


def block_truth(
    name_hint: str,
    kind: str,
    *,
    num_heads: int,
    num_kv_heads: int,
    d_model: int,
    d_k: int,
    d_v: int,
    q: tuple[int, int],
    k: tuple[int, int],
    v: tuple[int, int],
    o: tuple[int, int],
) -> dict:
    """One block of expected.json; q/k/v/o are (weight+bias numel, bias numel) pairs."""
    params = {"q": q[0], "k": k[0], "v": v[0], "o": o[0]}
    params["bias"] = q[1] + k[1] + v[1] + o[1]
    params["total"] = params["q"] + params["k"] + params["v"] + params["o"]
    return {
        "name_hint": name_hint,
        "kind": kind,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "d_model": d_model,
        "d_k": d_k,
        "d_v": d_v,
        "params": params,
    }


@dataclass
class Sample:
    """A built model plus its ground truth."""

    model: onnx.ModelProto
    blocks: list[dict]
    total_params: int
    description: str
    style: str
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------
# Generic graph builder: nodes, initializers, model assembly
# --------------------------------------------------------------------------------------


class GraphBuilder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.value_info: list[onnx.ValueInfoProto] = []
        self.param_numel = 0  # tally of real parameters, cross-checked against the truth

    def node(self, op_type, inputs, outputs, name, domain="", metadata=None, **attrs):
        n = helper.make_node(op_type, list(inputs), list(outputs), name=name, domain=domain or None, **attrs)
        if metadata:
            helper.set_metadata_props(n, metadata)
        self.nodes.append(n)
        return outputs[0] if len(outputs) == 1 else list(outputs)

    def init(self, name: str, value) -> str:
        """A non-parameter initializer (shape constant, scalar, ...)."""
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def param(self, name: str, shape, kind: str = "weight") -> str:
        """A float32 parameter initializer with small random values."""
        shape = tuple(shape)
        if kind == "weight":
            arr = self.rng.standard_normal(shape) * 0.1
        elif kind == "bias":
            arr = self.rng.standard_normal(shape) * 0.02
        elif kind == "norm":  # LayerNorm / RMSNorm scale, close to 1
            arr = 1.0 + self.rng.standard_normal(shape) * 0.02
        else:
            raise ValueError(kind)
        self.initializers.append(numpy_helper.from_array(arr.astype(np.float32), name))
        self.param_numel += int(np.prod(shape))
        return name

    def model(self, inputs, outputs, *, opsets, ir_version, producer, graph_name="main_graph"):
        graph = helper.make_graph(
            self.nodes, graph_name, inputs, outputs, initializer=self.initializers, value_info=self.value_info
        )
        m = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
            producer_name=producer[0],
            producer_version=producer[1],
        )
        m.ir_version = ir_version
        return m


def tensor(name, shape, elem_type=FLOAT, metadata=None):
    vi = helper.make_tensor_value_info(name, elem_type, shape)
    if metadata:
        helper.set_metadata_props(vi, metadata)
    return vi


# --------------------------------------------------------------------------------------
# TorchScript exporter naming: "/scope/Op_k" nodes, "/scope/Op_k_output_0" values,
# Constant nodes for every literal, "onnx::MatMul_N" for transposed Linear weights.
# --------------------------------------------------------------------------------------


class TorchScriptStyle:
    def __init__(self, gb: GraphBuilder, first_id: int = 100):
        self.gb = gb
        self.counts: dict[tuple[str, str], int] = {}
        self.next_id = first_id

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    def op(self, scope, op_type, inputs, num_outputs=1, output=None, domain="", **attrs):
        k = self.counts.get((scope, op_type), 0)
        self.counts[(scope, op_type)] = k + 1
        name = f"{scope}/{op_type}" + (f"_{k}" if k else "")
        outs = [output] if output else [f"{name}_output_{i}" for i in range(num_outputs)]
        return self.gb.node(op_type, inputs, outs, name, domain=domain, **attrs)

    def const(self, scope, value):
        return self.op(scope, "Constant", [], value=numpy_helper.from_array(np.asarray(value)))

    def unsqueeze0(self, scope, x):
        # TorchScript emits the axes as an unscoped "Constant_N" -> "onnx::Unsqueeze_M".
        axes = f"onnx::Unsqueeze_{self._id()}"
        self.gb.node("Constant", [], [axes], f"Constant_{self._id()}", value=numpy_helper.from_array(np.array([0])))
        return self.op(scope, "Unsqueeze", [x, axes])

    def dim(self, scope, x, axis):
        """x.size(axis) -> Shape, Constant, Gather (a 0-d int64)."""
        shape = self.op(scope, "Shape", [x])
        return self.op(scope, "Gather", [shape, self.const(scope, np.int64(axis))], axis=0)

    def shape_of(self, scope, *parts):
        """Concat of 1-d pieces: 0-d tensors are unsqueezed, ints become Constant nodes."""
        pieces = [self.const(scope, [p]) if isinstance(p, int) else self.unsqueeze0(scope, p) for p in parts]
        return self.op(scope, "Concat", pieces, axis=0)

    def linear(self, scope, x, d_in, d_out, bias_name=None):
        """nn.Linear: MatMul with the pre-transposed weight, then Add(bias, .) as TorchScript orders it."""
        w = self.gb.param(f"onnx::MatMul_{self._id()}", (d_in, d_out))
        y = self.op(scope, "MatMul", [x, w])
        if bias_name:
            self.gb.param(bias_name, (d_out,), "bias")
            y = self.op(scope, "Add", [bias_name, y])
        return y


# --------------------------------------------------------------------------------------
# torch 2.x dynamo exporter naming: "node_<fx>" nodes producing "<fx>" values, helper
# nodes "node_<Op>_N" -> "val_N", literals as deduplicated "val_N" initializers, and the
# per-node metadata_props (namespace, class_hierarchy, fx_node, name_scopes, stack_trace).
# --------------------------------------------------------------------------------------

Module = list[tuple[str, str]]  # [(qualified name, class path), ...] from the root module down


class DynamoStyle:
    def __init__(self, gb: GraphBuilder, source_file: str):
        self.gb = gb
        self.val = 0
        self.fx_counts: dict[str, int] = {}
        self.consts: dict[tuple, str] = {}
        self.param_names: set[str] = set()
        self.source_file = source_file

    def _val(self) -> str:
        name = f"val_{self.val}"
        self.val += 1
        return name

    def fx(self, base: str) -> str:
        """A fresh FX node name: base, base_1, base_2, ..."""
        k = self.fx_counts.get(base, 0)
        self.fx_counts[base] = k + 1
        return base if k == 0 else f"{base}_{k}"

    def const(self, value, dtype=np.int64) -> str:
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self.consts:
            self.consts[key] = self.gb.init(self._val(), arr)
        return self.consts[key]

    def param(self, name, shape, kind="weight") -> str:
        self.param_names.add(name)
        self.gb.param(name, shape, kind)
        # The exporter records the torch.export signature of every parameter in value_info.
        arr_shape = list(shape)
        self.gb.value_info.append(
            tensor(
                name,
                arr_shape,
                metadata={
                    "pkg.torch.export.graph_signature.InputSpec.kind": "PARAMETER",
                    "pkg.torch.export.graph_signature.InputSpec.persistent": "None",
                    "pkg.torch.onnx.original_node_name": "p_" + name.replace(".", "_"),
                },
            )
        )
        return name

    def metadata(self, module: Module, fx: str, target: str, inputs) -> dict[str, str]:
        scopes = [s for s, _ in module] + [fx]
        classes = [c for _, c in module] + [target]
        namespace = "/".join(f"{s}: {c}" for s, c in module) + f"/{fx}: {target}"
        args = ", ".join(("%p_" + i.replace(".", "_")) if i in self.param_names else f"%{i}" for i in inputs)
        fx_node = f"%{fx} : [num_users=1] = call_function[target=torch.ops.{target}](args = ({args}), kwargs = {{}})"
        trace = f'File "{self.source_file}", line 1, in forward'
        return {
            "namespace": namespace,
            "pkg.torch.onnx.class_hierarchy": str(classes),
            "pkg.torch.onnx.fx_node": fx_node,
            "pkg.torch.onnx.name_scopes": str(scopes),
            "pkg.torch.onnx.stack_trace": trace,
        }

    def op(self, op_type, inputs, module: Module, fx: str, target: str, helper_node=False, output=None, **attrs):
        """One ONNX node lowered from the FX node ``fx`` (an aten ``target``).

        The node that produces the FX value is "node_<fx>" -> "<fx>"; extra nodes of the
        same lowering (``helper_node``) are "node_<Op>_N" -> "val_N".
        """
        if helper_node:
            out = self._val()
            name = f"node_{op_type}_{out[4:]}"
        else:
            out, name = fx, f"node_{fx}"
        md = self.metadata(module, fx, target, inputs)
        return self.gb.node(op_type, inputs, [output or out], name, metadata=md, **attrs)


INPUT_SPEC = {
    "pkg.torch.export.graph_signature.InputSpec.kind": "USER_INPUT",
    "pkg.torch.export.graph_signature.InputSpec.persistent": "None",
}
OUTPUT_SPEC = {"pkg.torch.export.graph_signature.OutputSpec.kind": "USER_OUTPUT"}

TORCHSCRIPT = ("pytorch", "2.13.0")
DYNAMO = ("pytorch", "2.13.0+cpu")


# --------------------------------------------------------------------------------------
# Shared block builders
# --------------------------------------------------------------------------------------


def ts_bert_layer(ts: TorchScriptStyle, x: str, mask: str, layer: int, num_heads: int, d_model: int, out_name: str):
    """BertSelfAttention + BertSelfOutput (dense, residual, LayerNorm) as TorchScript exports them."""
    d_k = d_model // num_heads
    pre = f"encoder.layer.{layer}.attention"
    sc = f"/encoder/layer.{layer}/attention/self"

    def split_heads(t):  # view(B, S, h, d_k)
        shape = ts.shape_of(sc, ts.dim(sc, t, 0), ts.dim(sc, t, 1), num_heads, d_k)
        return ts.op(sc, "Reshape", [t, shape], allowzero=0)

    q = ts.linear(f"{sc}/query", x, d_model, d_model, f"{pre}.self.query.bias")
    q = ts.op(sc, "Transpose", [split_heads(q)], perm=[0, 2, 1, 3])
    k = split_heads(ts.linear(f"{sc}/key", x, d_model, d_model, f"{pre}.self.key.bias"))
    v = ts.linear(f"{sc}/value", x, d_model, d_model, f"{pre}.self.value.bias")
    v = ts.op(sc, "Transpose", [split_heads(v)], perm=[0, 2, 1, 3])
    kt = ts.op(sc, "Transpose", [k], perm=[0, 2, 3, 1])  # permute(0,2,1,3) + transpose(-1,-2), fused
    scores = ts.op(sc, "MatMul", [q, kt])
    scores = ts.op(sc, "Div", [scores, ts.const(sc, np.float32(math.sqrt(d_k)))])
    scores = ts.op(sc, "Add", [scores, mask])
    probs = ts.op(sc, "Softmax", [scores], axis=-1)
    ctx = ts.op(sc, "MatMul", [probs, v])
    ctx = ts.op(sc, "Transpose", [ctx], perm=[0, 2, 1, 3])
    shape = ts.shape_of(sc, ts.dim(sc, ctx, 0), ts.dim(sc, ctx, 1), d_model)
    ctx = ts.op(sc, "Reshape", [ctx, shape], allowzero=0)

    osc = f"/encoder/layer.{layer}/attention/output"
    y = ts.linear(f"{osc}/dense", ctx, d_model, d_model, f"{pre}.output.dense.bias")
    y = ts.op(osc, "Add", [y, x])
    gamma = ts.gb.param(f"{pre}.output.LayerNorm.weight", (d_model,), "norm")
    beta = ts.gb.param(f"{pre}.output.LayerNorm.bias", (d_model,), "bias")
    ts.op(f"{osc}/LayerNorm", "LayerNormalization", [y, gamma, beta], output=out_name, axis=-1, epsilon=1e-12)

    dense = proj(d_model, d_model, bias=True)
    truth = block_truth(
        pre,
        "self",
        num_heads=num_heads,
        num_kv_heads=num_heads,
        d_model=d_model,
        d_k=d_k,
        d_v=d_k,
        q=dense,
        k=dense,
        v=dense,
        o=dense,
    )
    return out_name, truth, 2 * d_model  # LayerNorm params


def ts_t5_rmsnorm(ts: TorchScriptStyle, scope: str, x: str, weight: str, d_model: int) -> str:
    """T5LayerNorm: weight * x * rsqrt(mean(x^2) + eps) (no bias, no mean subtraction)."""
    ts.gb.param(weight, (d_model,), "norm")
    var = ts.op(
        scope, "ReduceMean", [ts.op(scope, "Pow", [x, ts.const(scope, np.float32(2.0))])], axes=[-1], keepdims=1
    )
    std = ts.op(scope, "Sqrt", [ts.op(scope, "Add", [var, ts.const(scope, np.float32(1e-6))])])
    rstd = ts.op(scope, "Div", [ts.const(scope, np.float32(1.0)), std])
    return ts.op(scope, "Mul", [weight, ts.op(scope, "Mul", [x, rstd])])


def ts_t5_attention(ts, scope, hidden, kv_source, d_model, n_heads, d_kv, rel_bias=None):
    """T5Attention (no bias, no 1/sqrt(d) scaling); rel_bias = (embedding weight, bucket input)."""
    inner = n_heads * d_kv
    batch = ts.dim(scope, hidden, 0)

    def heads(t):  # view(B, -1, h, d_kv)
        return ts.op(scope, "Reshape", [t, ts.shape_of(scope, batch, -1, n_heads, d_kv)], allowzero=0)

    q = ts.op(scope, "Transpose", [heads(ts.linear(f"{scope}/q", hidden, d_model, inner))], perm=[0, 2, 1, 3])
    k = heads(ts.linear(f"{scope}/k", kv_source, d_model, inner))
    v = ts.op(scope, "Transpose", [heads(ts.linear(f"{scope}/v", kv_source, d_model, inner))], perm=[0, 2, 1, 3])
    kt = ts.op(scope, "Transpose", [k], perm=[0, 2, 3, 1])  # transpose(1,2) then transpose(3,2), fused
    scores = ts.op(scope, "MatMul", [q, kt])
    if rel_bias is not None:
        weight, buckets = rel_bias
        rsc = f"{scope}/relative_attention_bias"
        values = ts.op(rsc, "Gather", [weight, buckets], axis=0)  # [S, S, h]
        values = ts.op(scope, "Transpose", [values], perm=[2, 0, 1])  # [h, S, S]
        scores = ts.op(scope, "Add", [scores, ts.unsqueeze0(scope, values)])  # + [1, h, S, S]
    probs = ts.op(scope, "Softmax", [scores], axis=-1)
    ctx = ts.op(scope, "Transpose", [ts.op(scope, "MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = ts.op(scope, "Reshape", [ctx, ts.shape_of(scope, batch, -1, inner)], allowzero=0)
    return ts.linear(f"{scope}/o", ctx, inner, d_model)


# --------------------------------------------------------------------------------------
# The models
# --------------------------------------------------------------------------------------


def standard_mha() -> Sample:
    gb = GraphBuilder(seed=1)
    ts = TorchScriptStyle(gb)
    out, truth, extra = ts_bert_layer(ts, "x", "mask", 0, num_heads=8, d_model=64, out_name="output")
    m = gb.model(
        [tensor("x", ["batch", "seq", 64]), tensor("mask", ["batch", 1, 1, "seq"])],
        [tensor(out, ["batch", "seq", 64])],
        opsets=[("", 17)],
        ir_version=8,
        producer=TORCHSCRIPT,
    )
    return Sample(
        m,
        [truth],
        truth["params"]["total"] + extra,
        "BERT self-attention + output dense/residual/LayerNorm, TorchScript exporter style, opset 17",
        "torchscript",
    )


def bert_two_layers() -> Sample:
    gb = GraphBuilder(seed=9)
    ts = TorchScriptStyle(gb)
    h, t0, e0 = ts_bert_layer(
        ts,
        "x",
        "mask",
        0,
        num_heads=8,
        d_model=64,
        out_name="/encoder/layer.0/attention/output/LayerNorm/LayerNormalization_output_0",
    )
    out, t1, e1 = ts_bert_layer(ts, h, "mask", 1, num_heads=4, d_model=64, out_name="output")
    m = gb.model(
        [tensor("x", ["batch", "seq", 64]), tensor("mask", ["batch", 1, 1, "seq"])],
        [tensor(out, ["batch", "seq", 64])],
        opsets=[("", 17)],
        ir_version=8,
        producer=TORCHSCRIPT,
    )
    total = t0["params"]["total"] + t1["params"]["total"] + e0 + e1
    return Sample(
        m,
        [t0, t1],
        total,
        "two stacked BERT attention layers (8 heads then 4 heads), TorchScript style, opset 17",
        "torchscript",
    )


def keras_per_head() -> Sample:
    """Keras MultiHeadAttention through tf2onnx: Einsum projections with 3-D kernels."""
    gb = GraphBuilder(seed=2)
    d_model, h, dk = 32, 4, 16
    sc = "model/multi_head_attention"

    def node(op, inputs, name, **attrs):
        return gb.node(op, inputs, [f"{name}:0"], name, **attrs)

    def dense(role, x):
        kern = gb.param(f"multi_head_attention/{role}/kernel:0", (d_model, h, dk))
        bias = gb.param(f"multi_head_attention/{role}/bias:0", (h, dk), "bias")
        y = node("Einsum", [x, kern], f"{sc}/{role}/einsum/Einsum", equation="abc,cde->abde")
        return node("Add", [y, bias], f"{sc}/{role}/add")

    q = dense("query", "input_1")
    k = dense("key", "input_1")
    v = dense("value", "input_1")
    q = node("Mul", [q, gb.init(f"{sc}/Mul/y:0", np.float32(1.0 / math.sqrt(dk)))], f"{sc}/Mul")
    scores = node("Einsum", [k, q], f"{sc}/einsum/Einsum", equation="aecd,abcd->acbe")
    probs = node("Softmax", [scores], f"{sc}/softmax/Softmax", axis=-1)
    ctx = node("Einsum", [probs, v], f"{sc}/einsum_1/Einsum", equation="acbe,aecd->abcd")
    kern = gb.param("multi_head_attention/attention_output/kernel:0", (h, dk, d_model))
    bias = gb.param("multi_head_attention/attention_output/bias:0", (d_model,), "bias")
    y = node("Einsum", [ctx, kern], f"{sc}/attention_output/einsum/Einsum", equation="abcd,cde->abe")
    gb.node("Add", [y, bias], ["multi_head_attention"], f"{sc}/attention_output/add")

    m = gb.model(
        [tensor("input_1", ["unk__0", "unk__1", d_model])],
        [tensor("multi_head_attention", ["unk__0", "unk__1", d_model])],
        opsets=[("", 15)],
        ir_version=8,
        producer=("tf2onnx", "1.16.1 15c810"),
        graph_name="tf2onnx",
    )
    qkv = (d_model * h * dk + h * dk, h * dk)
    truth = block_truth(
        "multi_head_attention",
        "self",
        num_heads=h,
        num_kv_heads=h,
        d_model=d_model,
        d_k=dk,
        d_v=dk,
        q=qkv,
        k=qkv,
        v=qkv,
        o=(h * dk * d_model + d_model, d_model),
    )
    return Sample(
        m,
        [truth],
        truth["params"]["total"],
        "Keras MultiHeadAttention via tf2onnx: Einsum with per-head 3-D kernels, h*d_k=64 != d_model=32",
        "tf2onnx",
    )


LLAMA = "transformers.models.llama.modeling_llama"


def gqa_llama(cache: bool = False) -> Sample:
    """One LlamaDecoderLayer's input RMSNorm + LlamaAttention (GQA 8/2, RoPE), dynamo exporter style.

    ``cache``: the layer as a decoding step exports it, with its KV cache: the past keys and values
    come in as graph inputs (``past_key_values.0.key/value``), the new ones are concatenated after
    them and leave as ``present.0.key/value`` (keys after RoPE), and the mask covers past + new keys.
    """
    d_model, h, kvh, hd = 64, 8, 2, 8
    gb = GraphBuilder(seed=9 if cache else 3)
    dy = DynamoStyle(gb, f"/usr/lib/python3/site-packages/{LLAMA.replace('.', '/')}.py")
    root: Module = [("", f"{LLAMA}.LlamaForCausalLM"), ("model", f"{LLAMA}.LlamaModel")]
    layer = root + [("model.layers.0", f"{LLAMA}.LlamaDecoderLayer")]
    norm = layer + [("model.layers.0.input_layernorm", f"{LLAMA}.LlamaRMSNorm")]
    attn = layer + [("model.layers.0.self_attn", f"{LLAMA}.LlamaAttention")]
    empty: Module = [("_empty_nn_module_stack_from_metadata_hook", "_empty_nn_module_stack_from_metadata_hook")]
    x = "inputs_embeds"

    def a(op, inputs, base, target, module=attn, helper_node=False, **attrs):
        return dy.op(op, inputs, module, dy.fx(base), target, helper_node=helper_node, **attrs)

    # symbolic batch / seq, as 1-d int64 tensors (Shape with start/end)
    sym_b = dy.fx("sym_size_int")
    batch = dy.op("Shape", [x], empty, sym_b, "aten.sym_size.int", helper_node=True, start=0, end=1)
    sym_s = dy.fx("sym_size_int")
    seq = dy.op("Shape", [x], empty, sym_s, "aten.sym_size.int", helper_node=True, start=1, end=2)

    # input_layernorm (LlamaRMSNorm)
    w_norm = dy.param("model.layers.0.input_layernorm.weight", (d_model,), "norm")
    t = a("Pow", [x, dy.const(2.0, np.float32)], "pow", "aten.pow.Tensor_Scalar", norm)
    t = a("ReduceMean", [t, dy.const([-1])], "mean", "aten.mean.dim", norm, keepdims=1, noop_with_empty_axes=0)
    t = a("Add", [t, dy.const(1e-6, np.float32)], "add", "aten.add.Tensor", norm)
    fx = dy.fx("rsqrt")
    t = dy.op("Sqrt", [t], norm, fx, "aten.rsqrt.default", helper_node=True)
    t = dy.op("Reciprocal", [t], norm, fx, "aten.rsqrt.default")
    t = a("Mul", [x, t], "mul", "aten.mul.Tensor", norm)
    hs = a("Mul", [w_norm, t], "mul", "aten.mul.Tensor", norm)

    # q/k/v projections; view(*input_shape, -1, head_dim) with one shared shape tensor
    def linear(name, inp, d_in, d_out):
        w = dy.param(f"model.layers.0.self_attn.{name}.weight", (d_in, d_out))  # already [in, out]
        mod = attn + [(f"model.layers.0.self_attn.{name}", "torch.nn.modules.linear.Linear")]
        return a("MatMul", [inp, w], "linear", "aten.linear.default", mod)

    hidden_shape = None
    states = []
    for name, width in (("q_proj", h * hd), ("k_proj", kvh * hd), ("v_proj", kvh * hd)):
        y = linear(name, hs, d_model, width)
        fx = dy.fx("view")
        if hidden_shape is None:  # the exporter builds it once, under the first view
            hidden_shape = dy.op(
                "Concat",
                [batch, seq, dy.const([-1]), dy.const([hd])],
                attn,
                fx,
                "aten.view.default",
                helper_node=True,
                axis=0,
            )
        view = dy.op("Reshape", [y, hidden_shape], attn, fx, "aten.view.default", allowzero=1)
        states.append(a("Transpose", [view], "transpose", "aten.transpose.int", perm=[0, 2, 1, 3]))
    q, k, v = states

    # apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, rotate_half = cat(-x2, x1)
    cos = a("Unsqueeze", ["cos", dy.const([1])], "unsqueeze", "aten.unsqueeze.default")
    sin = a("Unsqueeze", ["sin", dy.const([1])], "unsqueeze", "aten.unsqueeze.default")

    def rope(t):
        t_cos = a("Mul", [t, cos], "mul", "aten.mul.Tensor")
        x1 = a(
            "Slice", [t, dy.const([0]), dy.const([hd // 2]), dy.const([3]), dy.const([1])], "slice", "aten.slice.Tensor"
        )
        x2 = a(
            "Slice",
            [t, dy.const([hd // 2]), dy.const([INT64_MAX]), dy.const([3]), dy.const([1])],
            "slice",
            "aten.slice.Tensor",
        )
        rot = a("Concat", [a("Neg", [x2], "neg", "aten.neg.default"), x1], "cat", "aten.cat.default", axis=-1)
        return a("Add", [t_cos, a("Mul", [rot, sin], "mul", "aten.mul.Tensor")], "add", "aten.add.Tensor")

    q, k = rope(q), rope(k)
    kv_seq = seq
    if cache:  # torch.cat([past, new], dim=-2): the present cache holds past + new tokens
        k = a("Concat", ["past_key_values.0.key", k], "cat", "aten.cat.default", axis=2, output="present.0.key")
        v = a("Concat", ["past_key_values.0.value", v], "cat", "aten.cat.default", axis=2, output="present.0.value")
        kv_seq = dy.op("Shape", [k], empty, dy.fx("sym_size_int"), "aten.sym_size.int", helper_node=True, start=2, end=3)

    # repeat_kv: [B, kvh, S, hd] -> unsqueeze(2) -> expand(B, kvh, h/kvh, S, hd) -> reshape(B, h, S, hd)
    expand_shape = reshape_shape = None

    def repeat_kv(t):
        nonlocal expand_shape, reshape_shape
        u = a("Unsqueeze", [t, dy.const([2])], "unsqueeze", "aten.unsqueeze.default")
        fx_e = dy.fx("expand")
        if expand_shape is None:
            expand_shape = dy.op(
                "Concat",
                [batch, dy.const([kvh]), dy.const([h // kvh]), kv_seq, dy.const([hd])],
                attn,
                fx_e,
                "aten.expand.default",
                helper_node=True,
                axis=0,
            )
        e = dy.op("Expand", [u, expand_shape], attn, fx_e, "aten.expand.default")
        fx_v = dy.fx("_unsafe_view")
        if reshape_shape is None:
            reshape_shape = dy.op(
                "Concat",
                [batch, dy.const([h]), kv_seq, dy.const([hd])],
                attn,
                fx_v,
                "aten._unsafe_view.default",
                helper_node=True,
                axis=0,
            )
        return dy.op("Reshape", [e, reshape_shape], attn, fx_v, "aten._unsafe_view.default", allowzero=1)

    k, v = repeat_kv(k), repeat_kv(v)

    # eager_attention_forward
    kt = a("Transpose", [k], "transpose", "aten.transpose.int", perm=[0, 1, 3, 2])
    scores = a("MatMul", [q, kt], "matmul", "aten.matmul.default")
    scores = a("Mul", [scores, dy.const(1.0 / math.sqrt(hd), np.float32)], "mul", "aten.mul.Tensor")
    scores = a("Add", [scores, "attention_mask"], "add", "aten.add.Tensor")
    probs = a("Softmax", [scores], "softmax", "aten.softmax.int", helper_node=True, axis=-1)
    ctx = a("MatMul", [probs, v], "matmul", "aten.matmul.default")
    ctx = a("Transpose", [ctx], "transpose", "aten.transpose.int", perm=[0, 2, 1, 3])
    fx = dy.fx("view")
    out_shape = dy.op("Concat", [batch, seq, dy.const([-1])], attn, fx, "aten.view.default", helper_node=True, axis=0)
    ctx = dy.op("Reshape", [ctx, out_shape], attn, fx, "aten.view.default", allowzero=1)
    o = linear("o_proj", ctx, h * hd, d_model)
    a("Add", [x, o], "add", "aten.add.Tensor", layer, output="hidden_states")

    inputs = [
        tensor(x, ["batch", "seq", d_model], metadata=INPUT_SPEC),
        tensor("cos", ["batch", "seq", hd], metadata=INPUT_SPEC),
        tensor("sin", ["batch", "seq", hd], metadata=INPUT_SPEC),
        tensor("attention_mask", ["batch", 1, "seq", "total_seq" if cache else "seq"], metadata=INPUT_SPEC),
    ]
    outputs = [tensor("hidden_states", ["batch", "seq", d_model], metadata=OUTPUT_SPEC)]
    if cache:
        inputs += [tensor(f"past_key_values.0.{kv}", ["batch", kvh, "past_seq", hd], metadata=INPUT_SPEC)
                   for kv in ("key", "value")]
        outputs += [tensor(f"present.0.{kv}", ["batch", kvh, "total_seq", hd], metadata=OUTPUT_SPEC)
                    for kv in ("key", "value")]
    m = gb.model(inputs, outputs, opsets=[("", 18)], ir_version=10, producer=DYNAMO)
    truth = block_truth(
        "model.layers.0.self_attn",
        "self",
        num_heads=h,
        num_kv_heads=kvh,
        d_model=d_model,
        d_k=hd,
        d_v=hd,
        q=proj(d_model, h * hd, False),
        k=proj(d_model, kvh * hd, False),
        v=proj(d_model, kvh * hd, False),
        o=proj(h * hd, d_model, False),
    )
    description = "Llama GQA attention (8 q heads / 2 kv heads, RoPE, repeat_kv, RMSNorm), dynamo exporter style, opset 18"
    if cache:
        description += ("; one decoding step with its KV cache: past_key_values.0.key/value in, concatenated with "
                        "the new K/V, present.0.key/value out (float32: 2 kv heads × (8 + 8) × 4 = 128 bytes per token)")
    return Sample(m, [truth], truth["params"]["total"] + d_model, description, "dynamo")


def t5_unscaled() -> Sample:
    d_model, h, d_kv, buckets = 32, 4, 16, 32
    gb = GraphBuilder(seed=4)
    ts = TorchScriptStyle(gb)
    inner = h * d_kv
    # encoder self-attention with relative position bias
    esc = "/encoder/block.0/layer.0"
    rel_w = gb.param("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", (buckets, h))
    hs = ts_t5_rmsnorm(ts, f"{esc}/layer_norm", "x", "encoder.block.0.layer.0.layer_norm.weight", d_model)
    o = ts_t5_attention(ts, f"{esc}/SelfAttention", hs, hs, d_model, h, d_kv, rel_bias=(rel_w, "position_bucket"))
    ts.op(esc, "Add", ["x", o], output="encoder_out")
    # decoder-style cross-attention: Q from x, K/V from encoder_hidden, no position bias
    dsc = "/decoder/block.0/layer.1"
    hs = ts_t5_rmsnorm(ts, f"{dsc}/layer_norm", "x", "decoder.block.0.layer.1.layer_norm.weight", d_model)
    o = ts_t5_attention(ts, f"{dsc}/EncDecAttention", hs, "encoder_hidden", d_model, h, d_kv)
    ts.op(dsc, "Add", ["x", o], output="decoder_out")

    m = gb.model(
        [
            tensor("x", ["batch", "seq", d_model]),
            tensor("encoder_hidden", ["batch", "enc_seq", d_model]),
            tensor("position_bucket", ["seq", "seq"], INT64),
        ],
        [tensor("encoder_out", ["batch", "seq", d_model]), tensor("decoder_out", ["batch", "seq", d_model])],
        opsets=[("", 17)],
        ir_version=8,
        producer=TORCHSCRIPT,
    )
    p_in, p_out = proj(d_model, inner, False), proj(inner, d_model, False)
    common = dict(num_heads=h, num_kv_heads=h, d_model=d_model, d_k=d_kv, d_v=d_kv, q=p_in, k=p_in, v=p_in, o=p_out)
    blocks = [
        block_truth("encoder.block.0.layer.0.SelfAttention", "self", **common),
        block_truth("decoder.block.0.layer.1.EncDecAttention", "cross", **common),
    ]
    total = sum(b["params"]["total"] for b in blocks) + buckets * h + 2 * d_model
    return Sample(
        m,
        blocks,
        total,
        "T5 self-attention (relative position bias, no scaling) then cross-attention, TorchScript style, opset 17",
        "torchscript",
        notes=["relative_attention_bias.weight (32x4) counts in total_params but not in any block's params"],
    )


def packed_qkv() -> Sample:
    """nn.MultiheadAttention(32, 4), batch_first=False: packed in_proj + Split, heads folded into batch."""
    d_model, h = 32, 4
    d_k = d_model // h
    gb = GraphBuilder(seed=5)
    ts = TorchScriptStyle(gb, first_id=160)
    sc = "/attn"
    tgt_len = ts.dim(sc, "x", 0)
    bsz = ts.dim(sc, "x", 1)
    qkv = ts.linear(sc, "x", d_model, 3 * d_model, "attn.in_proj_bias")  # in_proj_weight.T packed [32, 96]
    q, k, v = ts.op(sc, "Split", [qkv, ts.const(sc, [d_model] * 3)], num_outputs=3, axis=-1)
    bsz_heads = ts.op(sc, "Mul", [bsz, ts.const(sc, np.int64(h))])

    def fold_heads(t):  # view(L, N*h, d_k).transpose(0, 1)
        t = ts.op(sc, "Reshape", [t, ts.shape_of(sc, tgt_len, bsz_heads, d_k)], allowzero=0)
        return ts.op(sc, "Transpose", [t], perm=[1, 0, 2])

    q, k, v = fold_heads(q), fold_heads(k), fold_heads(v)
    q = ts.op(sc, "Mul", [q, ts.const(sc, np.float32(1.0 / math.sqrt(d_k)))])
    scores = ts.op(sc, "MatMul", [q, ts.op(sc, "Transpose", [k], perm=[0, 2, 1])])
    probs = ts.op(sc, "Softmax", [scores], axis=-1)
    ctx = ts.op(sc, "Transpose", [ts.op(sc, "MatMul", [probs, v])], perm=[1, 0, 2])  # [L, N*h, d_k]
    rows = ts.op(sc, "Mul", [tgt_len, bsz])
    ctx = ts.op(sc, "Reshape", [ctx, ts.shape_of(sc, rows, d_model)], allowzero=0)  # [L*N, E]
    w_o = gb.param("attn.out_proj.weight", (d_model, d_model))
    b_o = gb.param("attn.out_proj.bias", (d_model,), "bias")
    y = ts.op(sc, "Gemm", [ctx, w_o, b_o], alpha=1.0, beta=1.0, transB=1)
    ts.op(sc, "Reshape", [y, ts.shape_of(sc, tgt_len, bsz, d_model)], output="output", allowzero=0)

    m = gb.model(
        [tensor("x", ["seq", "batch", d_model])],
        [tensor("output", ["seq", "batch", d_model])],
        opsets=[("", 17)],
        ir_version=8,
        producer=TORCHSCRIPT,
    )
    p = proj(d_model, d_model, True)  # each role's share of the packed [32, 96] weight + [96] bias
    truth = block_truth(
        "attn", "self", num_heads=h, num_kv_heads=h, d_model=d_model, d_k=d_k, d_v=d_k, q=p, k=p, v=p, o=p
    )
    return Sample(
        m,
        [truth],
        truth["params"]["total"],
        "nn.MultiheadAttention (seq-first): packed in_proj MatMul+Split, (L, N*h, d) head folding, Gemm out_proj",
        "torchscript",
    )


def ms_attention() -> Sample:
    """com.microsoft Attention (as the onnxruntime transformer optimizer fuses BERT) + output dense."""
    d_model, h = 32, 4
    gb = GraphBuilder(seed=6)
    w = gb.param("Attention_0_qkv_weight", (d_model, 3 * d_model))
    b = gb.param("Attention_0_qkv_bias", (3 * d_model,), "bias")
    gb.node("Attention", ["x", w, b], ["attention_output"], "Attention_0", domain="com.microsoft", num_heads=h)
    sc = "/encoder/layer.0/attention/output/dense"
    w_o = gb.param("onnx::MatMul_120", (d_model, d_model))
    b_o = gb.param("encoder.layer.0.attention.output.dense.bias", (d_model,), "bias")
    y = gb.node("MatMul", ["attention_output", w_o], [f"{sc}/MatMul_output_0"], f"{sc}/MatMul")
    gb.node("Add", [b_o, y], ["output"], f"{sc}/Add")
    m = gb.model(
        [tensor("x", ["batch", "seq", d_model])],
        [tensor("output", ["batch", "seq", d_model])],
        opsets=[("", 17), ("com.microsoft", 1)],
        ir_version=8,
        producer=("onnxruntime.transformers", "1.31.1"),
    )
    p = proj(d_model, d_model, True)
    truth = block_truth(
        "encoder.layer.0.attention",
        "self",
        num_heads=h,
        num_kv_heads=h,
        d_model=d_model,
        d_k=d_model // h,
        d_v=d_model // h,
        q=p,
        k=p,
        v=p,
        o=p,
    )
    return Sample(
        m,
        [truth],
        truth["params"]["total"],
        "com.microsoft Attention (packed [32,96] QKV weight, num_heads=4) + MatMul/Add output projection",
        "ort-fused",
    )


def onnx_attention_23() -> Sample:
    """ONNX opset-23 Attention with 3-D Q/K/V and q_num_heads/kv_num_heads (GQA 8/4)."""
    d_model, h, kvh, hd = 64, 8, 4, 8
    gb = GraphBuilder(seed=7)
    dy = DynamoStyle(gb, "/tmp/gqa_model.py")
    root: Module = [("", "__main__.GQAAttention")]

    def linear(name, d_in, d_out, inp="x", output=None):
        w = dy.param(f"{name}.weight", (d_in, d_out))
        return dy.op(
            "MatMul",
            [inp, w],
            root + [(name, "torch.nn.modules.linear.Linear")],
            dy.fx("linear"),
            "aten.linear.default",
            output=output,
        )

    q = linear("q_proj", d_model, h * hd)
    k = linear("k_proj", d_model, kvh * hd)
    v = linear("v_proj", d_model, kvh * hd)
    y = dy.op(
        "Attention",
        [q, k, v],
        root,
        dy.fx("scaled_dot_product_attention"),
        "aten.scaled_dot_product_attention.default",
        q_num_heads=h,
        kv_num_heads=kvh,
        is_causal=0,
    )
    linear("o_proj", h * hd, d_model, inp=y, output="output")

    m = gb.model(
        [tensor("x", ["batch", "seq", d_model], metadata=INPUT_SPEC)],
        [tensor("output", ["batch", "seq", d_model], metadata=OUTPUT_SPEC)],
        opsets=[("", 23)],
        ir_version=10,
        producer=DYNAMO,
    )
    truth = block_truth(
        "",
        "self",
        num_heads=h,
        num_kv_heads=kvh,
        d_model=d_model,
        d_k=hd,
        d_v=hd,
        q=proj(d_model, h * hd, False),
        k=proj(d_model, kvh * hd, False),
        v=proj(d_model, kvh * hd, False),
        o=proj(h * hd, d_model, False),
    )
    return Sample(
        m,
        [truth],
        truth["params"]["total"],
        "ONNX opset-23 Attention op, 3-D inputs, q_num_heads=8 kv_num_heads=4, MatMul projections",
        "onnx-op",
    )


def no_attention() -> Sample:
    """Token classifier MLP ending in Softmax: must produce no attention block."""
    d_in, d_hidden, n_cls = 32, 64, 10
    gb = GraphBuilder(seed=8)
    ts = TorchScriptStyle(gb, first_id=10)
    y = ts.linear("/fc1", "x", d_in, d_hidden, "fc1.bias")
    y = ts.op("/act", "Relu", [y])
    y = ts.linear("/classifier", y, d_hidden, n_cls, "classifier.bias")
    ts.op("", "Softmax", [y], output="probs", axis=-1)
    m = gb.model(
        [tensor("x", ["batch", "seq", d_in])],
        [tensor("probs", ["batch", "seq", n_cls])],
        opsets=[("", 17)],
        ir_version=8,
        producer=TORCHSCRIPT,
    )
    total = proj(d_in, d_hidden, True)[0] + proj(d_hidden, n_cls, True)[0]
    return Sample(
        m, [], total, "MLP token classifier (MatMul+Add, Relu, MatMul+Add, Softmax): no attention", "torchscript"
    )


MODELS: dict[str, Callable[[], Sample]] = {
    "standard_mha": standard_mha,
    "keras_per_head": keras_per_head,
    "gqa_llama": gqa_llama,
    "t5_unscaled": t5_unscaled,
    "packed_qkv": packed_qkv,
    "ms_attention": ms_attention,
    "onnx_attention_23": onnx_attention_23,
    "no_attention": no_attention,
    "bert_two_layers": bert_two_layers,
    "llama_kv_cache": lambda: gqa_llama(cache=True),
}


# --------------------------------------------------------------------------------------
# Verification: checker, parameter tally, onnxruntime run
# --------------------------------------------------------------------------------------


def random_feeds(model: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for inp in model.graph.input:
        tt = inp.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else DIM_VALUES[d.dim_param] for d in tt.shape.dim]
        if tt.elem_type == INT64:  # relative position buckets
            feeds[inp.name] = rng.integers(0, 32, size=shape, dtype=np.int64)
        elif inp.name == "mask":  # BERT additive mask: last position of batch 1 masked out
            mask = np.zeros(shape, np.float32)
            mask[1, ..., -1] = -10000.0
            feeds[inp.name] = mask
        elif inp.name == "attention_mask":  # causal additive mask; with a cache, query i sees past + i + 1 keys
            queries, keys = shape[-2], shape[-1]
            causal = np.triu(np.full((queries, keys), -1e9, np.float32), 1 + keys - queries)
            feeds[inp.name] = np.broadcast_to(causal, shape).copy()
        elif inp.name in ("cos", "sin"):  # real rotary tables
            b, s, hd = shape
            inv_freq = 1.0 / (10000 ** (np.arange(0, hd, 2) / hd))
            ang = np.outer(np.arange(s), inv_freq)
            ang = np.concatenate([ang, ang], axis=-1)
            tab = np.cos(ang) if inp.name == "cos" else np.sin(ang)
            feeds[inp.name] = np.broadcast_to(tab, (b, s, hd)).astype(np.float32)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def float_param_numel(model: onnx.ModelProto) -> int:
    """Numel of float initializers with rank >= 1 (scalar constants excluded)."""
    return sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.data_type == FLOAT and len(t.dims) >= 1)


def verify(name: str, path: Path, sample: Sample) -> str:
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    tally = float_param_numel(model)
    if tally != sample.total_params:
        raise AssertionError(
            f"{name}: float initializers hold {tally} values, expected total_params {sample.total_params}"
        )
    for b in sample.blocks:
        p = b["params"]
        assert p["total"] == p["q"] + p["k"] + p["v"] + p["o"], name
    try:
        import onnxruntime as ort
    except ImportError:
        return "checker ok (onnxruntime not installed, not run)"
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = random_feeds(model, np.random.default_rng(0))
    outs = sess.run(None, feeds)
    for o in outs:
        if not np.all(np.isfinite(o)):
            raise AssertionError(f"{name}: non-finite output")
    shapes = ", ".join(str(tuple(o.shape)) for o in outs)
    return f"checker ok, onnxruntime {ort.__version__} CPU ok -> {shapes}"


# --------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "sample_models")
    ap.add_argument("--no-verify", action="store_true", help="skip onnx.checker and the onnxruntime run")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    expected = {}
    for name, build in MODELS.items():
        sample = build()
        path = args.out / f"{name}.onnx"
        path.write_bytes(sample.model.SerializeToString())
        size = path.stat().st_size
        assert size < 1_000_000, f"{path} is {size} bytes"
        entry = {
            "file": path.name,
            "style": sample.style,
            "opset_imports": {(o.domain or "ai.onnx"): o.version for o in sample.model.opset_import},
            "description": sample.description,
            "blocks": sample.blocks,
            "total_params": sample.total_params,
        }
        if sample.notes:
            entry["notes"] = sample.notes
        expected[name] = entry
        status = "written" if args.no_verify else verify(name, path, sample)
        print(f"{name:18s} {size:7d} B  blocks={len(sample.blocks)}  params={sample.total_params:6d}  {status}")

    (args.out / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    print(f"wrote {len(expected)} models + expected.json to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
