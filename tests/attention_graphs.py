"""Small ONNX attention graphs built with onnx.helper, for the identity and accounting tests.

``mha_nodes`` writes one decomposed multi-head attention (projections with biases, head split,
softmax(Q·Kᵀ·scale)·V, head merge, output projection) as nodes reading named weights, so the same
weights can be read from several places: both branches of an If, or one layer applied N times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)


def weight(name: str, *shape: int, dtype: type = np.float32) -> onnx.TensorProto:
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        data = RNG.integers(info.min, info.max, size=shape, dtype=dtype)
    else:
        data = RNG.normal(0, 0.02, size=shape).astype(dtype)
    return numpy_helper.from_array(data, name)


def ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


@dataclass
class Weights:
    """Initializers of one attention module: Q/K/V/O [d, d] and biases [d]."""

    prefix: str
    d: int
    with_kv: bool = True

    def tensors(self) -> list[onnx.TensorProto]:
        roles = ("q", "k", "v", "o") if self.with_kv else ("q", "o")
        out = []
        for r in roles:
            out.append(weight(f"{self.prefix}.{r}_proj.weight", self.d, self.d))
            out.append(weight(f"{self.prefix}.{r}_proj.bias", self.d))
        return out

    def numel(self) -> int:
        return (4 if self.with_kv else 2) * (self.d * self.d + self.d)


@dataclass
class Nodes:
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)

    def add(self, op: str, inputs: list[str], output: str, **attrs: object) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=output.replace("_out", ""), **attrs))
        return output


def shape_consts(heads: int, d_k: int) -> list[onnx.TensorProto]:
    return [ints("split_heads", [0, -1, heads, d_k]), ints("merge_heads", [0, -1, heads * d_k])]


def _project(g: Nodes, scope: str, src: str, prefix: str, role: str) -> str:
    mm = g.add("MatMul", [src, f"{prefix}.{role}_proj.weight"], f"{scope}/{role}_proj/MatMul_out")
    return g.add("Add", [mm, f"{prefix}.{role}_proj.bias"], f"{scope}/{role}_proj/Add_out")


def _heads(g: Nodes, scope: str, t: str, role: str, perm: list[int]) -> str:
    r = g.add("Reshape", [t, "split_heads"], f"{scope}/{role}/Reshape_out")
    return g.add("Transpose", [r], f"{scope}/{role}/Transpose_out", perm=perm)


def mha_nodes(g: Nodes, scope: str, x: str, prefix: str, heads: int, d_k: int, *, kv_src: str | None = None,
              past_k: str | None = None, past_v: str | None = None, cache_kv: tuple[str, str] | None = None,
              scale: float | None = None) -> str:
    """Nodes of one attention, scope '{scope}/...'; returns the output tensor name.

    ``kv_src``: the tensor K/V are projected from (default x: self-attention). ``past_k``/``past_v``:
    K [b, h, d_k, T] / V [b, h, T, d_k] read as they are (cross-attention from a cache: no K/V
    projection). ``cache_kv``: past K/V [b, h, T, d_k] concatenated before the new ones (self-attention
    with a cache).
    """
    q = _heads(g, scope, _project(g, scope, x, prefix, "q"), "q", [0, 2, 1, 3])
    if past_k is not None and past_v is not None:
        k_t, v = past_k, past_v
    else:
        src = kv_src or x
        k = _heads(g, scope, _project(g, scope, src, prefix, "k"), "k", [0, 2, 1, 3])
        v = _heads(g, scope, _project(g, scope, src, prefix, "v"), "v", [0, 2, 1, 3])
        if cache_kv is not None:
            k = g.add("Concat", [cache_kv[0], k], f"{scope}/k/Concat_out", axis=2)
            v = g.add("Concat", [cache_kv[1], v], f"{scope}/v/Concat_out", axis=2)
        k_t = g.add("Transpose", [k], f"{scope}/k/TransposeT_out", perm=[0, 1, 3, 2])
    ctx = core_nodes(g, scope, q, k_t, v, "scores", 1.0 / math.sqrt(d_k) if scale is None else scale)
    t = g.add("Transpose", [ctx], f"{scope}/ctx/Transpose_out", perm=[0, 2, 1, 3])
    merged = g.add("Reshape", [t, "merge_heads"], f"{scope}/ctx/Reshape_out")
    return _project(g, scope, merged, prefix, "o")


def value(name: str, *shape: int | str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], inputs: list[onnx.ValueInfoProto],
          outputs: list[onnx.ValueInfoProto], opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def runtime_root_scale(g: Nodes, scope: str, of: str, tag: str) -> str:
    """√(1/√d_k) computed at run time from the last dimension of ``of``: Sqrt(1/Sqrt(Cast(Gather(Shape))))."""
    shape = g.add("Shape", [of], f"{scope}/{tag}/Shape_out")
    g.inits.append(numpy_helper.from_array(np.array(-1, dtype=np.int64), f"{scope}.{tag}.last"))
    dim = g.add("Gather", [shape, f"{scope}.{tag}.last"], f"{scope}/{tag}/Gather_out", axis=0)
    as_float = g.add("Cast", [dim], f"{scope}/{tag}/Cast_out", to=TensorProto.FLOAT)
    root = g.add("Sqrt", [as_float], f"{scope}/{tag}/Sqrt_out")
    g.inits.append(numpy_helper.from_array(np.array(1.0, dtype=np.float32), f"{scope}.{tag}.one"))
    inv = g.add("Div", [f"{scope}.{tag}.one", root], f"{scope}/{tag}/Div_out")
    return g.add("Sqrt", [inv], f"{scope}/{tag}/Sqrt2_out")


def core_nodes(g: Nodes, scope: str, q: str, k_t: str, v: str, mode: str, scale: float = 1.0) -> str:
    """softmax(scale · q·k_t)·v with the scale placed by ``mode``: "scores" (a constant on the scores),
    "q" / "k" (a constant on Q / on Kᵀ), "split" (√scale on Q and on Kᵀ), "split_runtime"
    (√(1/√d_k) computed from Q's shape, on Q and on Kᵀ), "none"."""
    def const(tag: str, value: float) -> str:
        g.inits.append(numpy_helper.from_array(np.array(value, dtype=np.float32), f"{scope}.{tag}"))
        return f"{scope}.{tag}"

    if mode in ("q", "split", "split_runtime"):
        factor = (runtime_root_scale(g, scope, q, "qscale") if mode == "split_runtime"
                  else const("q_scale", scale if mode == "q" else math.sqrt(scale)))
        q = g.add("Mul", [q, factor], f"{scope}/q/Mul_out")
    if mode in ("k", "split", "split_runtime"):
        factor = (runtime_root_scale(g, scope, q, "kscale") if mode == "split_runtime"
                  else const("k_scale", scale if mode == "k" else math.sqrt(scale)))
        k_t = g.add("Mul", [k_t, factor], f"{scope}/k/Mul_out")
    scores = g.add("MatMul", [q, k_t], f"{scope}/scores/MatMul_out")
    if mode == "scores":
        scores = g.add("Mul", [scores, const("scale_value", scale)], f"{scope}/scores/Mul_out")
    probs = g.add("Softmax", [scores], f"{scope}/Softmax_out", axis=-1)
    return g.add("MatMul", [probs, v], f"{scope}/ctx/MatMul_out")
