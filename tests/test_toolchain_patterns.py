"""Attention as other toolchains write it (tf2onnx, Keras on torch, jax2onnx, paddle2onnx), built in
memory from the descriptions of issue #37: the score product in either operand order, masks lowered
to arithmetic, probabilities masked and renormalised after the Softmax, a Where before the output
projection, a block without an output projection flagged, and parameters told by what a tensor is."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mhainspect.frontends.onnx.loader import model_to_graph
from mhainspect.pipeline import audit_graph
from mhainspect.results import Report

D, H, DK, S = 32, 4, 8, 6
RNG = np.random.default_rng(7)


class G:
    """A graph under construction: x [1, S, D] (float), m [1, 1, S, S] (bool mask) as inputs."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.meta: dict[str, dict[str, str]] = {}

    def init(self, name: str, value: np.ndarray, **meta: str) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        if meta:
            self.meta[name] = meta
        return name

    def weight(self, name: str, *shape: int) -> str:
        return self.init(name, RNG.normal(0, 0.02, size=shape).astype(np.float32))

    def ints(self, name: str, values: list[int]) -> str:
        return self.init(name, np.array(values, dtype=np.int64))

    def op(self, op: str, inputs: list[str], out: str, **attrs: object) -> str:
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def project(self, x: str, role: str, width: int = D, bias: bool = True) -> str:
        y = self.op("MatMul", [x, self.weight(f"attn.{role}.weight", D, width)], f"{role}_mm")
        return self.op("Add", [y, self.weight(f"attn.{role}.bias", width)], f"{role}_proj") if bias else y

    def heads(self, t: str, role: str) -> str:
        r = self.op("Reshape", [t, self.ints(f"{role}_shape", [1, S, H, DK])], f"{role}_r")
        return self.op("Transpose", [r], f"{role}_h", perm=[0, 2, 1, 3])

    def qkv(self) -> tuple[str, str, str]:
        return tuple(self.heads(self.project("x", r), r) for r in ("q", "k", "v"))  # type: ignore[return-value]

    def scale(self, s: str, name: str = "scale") -> str:
        return self.op("Mul", [s, self.init(name, np.array([DK ** -0.5], dtype=np.float32))], "scaled")

    def merge_and_project(self, ctx: str) -> str:
        t = self.op("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3])
        merged = self.op("Reshape", [t, self.ints("merge", [1, S, D])], "ctx_m")
        return self.project(merged, "o")

    def report(self, out: str) -> Report:
        self.op("Identity", [out], "y")
        graph = helper.make_graph(self.nodes, "g", [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, S, D]),
            helper.make_tensor_value_info("m", TensorProto.BOOL, [1, 1, S, S])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, S, D])], self.inits)
        for name, props in self.meta.items():
            vi = helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
            for k, v in props.items():
                vi.metadata_props.add(key=k, value=v)
            graph.value_info.append(vi)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="test")
        model.ir_version = 8
        return audit_graph(model_to_graph(model, "g.onnx"))


def _block(report: Report) -> tuple[object, ...]:
    assert len(report.blocks) == 1, (report.blocks, report.misses)
    b = report.blocks[0]
    return str(b.kind), b.num_heads, b.num_kv_heads, b.d_k, b.d_v, b.d_model, b.params.total


STANDARD = ("self", H, H, DK, DK, D, 4 * (D * D + D))


def test_scores_written_k_q_transposed_are_q_k() -> None:
    """tf2onnx: MatMul(K, Transpose(Q)) then a Transpose of the last two axes into the scores."""
    g = G()
    q, k, v = g.qkv()
    qt = g.op("Transpose", [q], "q_t", perm=[0, 1, 3, 2])
    kq = g.op("MatMul", [k, qt], "kq")
    s = g.scale(g.op("Transpose", [kq], "scores", perm=[0, 1, 3, 2]))
    p = g.op("Softmax", [s], "probs", axis=-1)
    report = g.report(g.merge_and_project(g.op("MatMul", [p, v], "ctx")))
    assert _block(report) == STANDARD
    assert report.blocks[0].scale is not None and abs(report.blocks[0].scale - DK ** -0.5) < 1e-6
    assert any("K·Qᵀ" in e.detail for e in report.blocks[0].evidence if e.field == "d_k")


def _lowered_select(g: G, value: str, masked: float, tag: str) -> str:
    """Where(m, value, masked) as tf2onnx lowers SelectV2: Mul(Cast(m), value) + Mul(masked, Cast(Not(m)))."""
    keep = g.op("Cast", ["m"], f"{tag}_keep", to=TensorProto.FLOAT)
    hide = g.op("Cast", [g.op("Not", ["m"], f"{tag}_not")], f"{tag}_hide", to=TensorProto.FLOAT)
    kept = g.op("Mul", [keep, value], f"{tag}_kept")
    fill = g.op("Mul", [g.init(f"{tag}_fill", np.array(masked, dtype=np.float32)), hide], f"{tag}_fill_m")
    return g.op("Add", [kept, fill], f"{tag}_sel")


def test_a_boolean_mask_lowered_to_arithmetic_on_the_scores_and_the_probabilities() -> None:
    g = G()
    q, k, v = g.qkv()
    s = g.scale(g.op("MatMul", [q, g.op("Transpose", [k], "k_t", perm=[0, 1, 3, 2])], "qk"))
    p = g.op("Softmax", [_lowered_select(g, s, -1e9, "smask")], "probs", axis=-1)
    p = _lowered_select(g, p, 0.0, "pmask")  # masked again after the Softmax (keras-hub)
    report = g.report(g.merge_and_project(g.op("MatMul", [p, v], "ctx")))
    assert _block(report) == STANDARD and report.model.total_params == 4 * (D * D + D)


def test_renormalised_probabilities_and_a_where_before_the_output_projection() -> None:
    """Flax through jax2onnx: P masked by Where, divided by Where(ReduceSum(P) > 0, ReduceSum(P), 1),
    and the result selected by a Where before the output projection."""
    g = G()
    q, k, v = g.qkv()
    s = g.scale(g.op("MatMul", [q, g.op("Transpose", [k], "k_t", perm=[0, 1, 3, 2])], "qk"))
    p = g.op("Softmax", [s], "probs", axis=-1)
    zero = g.init("zero", np.array(0.0, dtype=np.float32))
    p = g.op("Where", ["m", p, zero], "p_masked")
    total = g.op("ReduceSum", [p, g.ints("last", [-1])], "p_sum", keepdims=1)
    safe = g.op("Where", [g.op("Greater", [total, zero], "p_pos"), total,
                          g.init("one", np.array(1.0, dtype=np.float32))], "p_den")
    p = g.op("Div", [p, safe], "p_norm")
    ctx = g.op("MatMul", [p, v], "ctx")
    any_key = g.op("Cast", [g.op("ReduceMax", [g.op("Cast", ["m"], "m_f", to=TensorProto.FLOAT),
                                               g.ints("keys", [-1])], "m_any", keepdims=1)], "m_b", to=TensorProto.BOOL)
    ctx = g.op("Where", [any_key, ctx, zero], "ctx_sel")
    report = g.report(g.merge_and_project(ctx))
    assert _block(report) == STANDARD
    assert not [f for f in report.flags if f.code == "MHA008"]


def test_a_block_without_an_output_projection_says_so() -> None:
    """The result is added back to the input (a residual) and normalised: no projection follows, and
    a residual Add is no mask the walk passes. O counts 0, and MHA008 says where the walk stopped."""
    g = G()
    q, k, v = g.qkv()
    s = g.scale(g.op("MatMul", [q, g.op("Transpose", [k], "k_t", perm=[0, 1, 3, 2])], "qk"))
    ctx = g.op("MatMul", [g.op("Softmax", [s], "probs", axis=-1), v], "ctx")
    t = g.op("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3])
    merged = g.op("Reshape", [t, g.ints("merge", [1, S, D])], "ctx_m")
    res = g.op("Add", [merged, "x"], "residual")
    out = g.project(res, "mlp")  # a projection after the residual: never the block's O
    report = g.report(out)
    b = report.blocks[0]
    assert b.params.o == 0 and not [p for p in b.projections if p.role == "o"]
    flags = [f for f in report.flags if f.code == "MHA008"]
    assert len(flags) == 1 and flags[0].block == b.name and "no output projection after ctx" in flags[0].message


def test_a_scale_or_a_mask_a_converter_computed_is_no_parameter() -> None:
    """paddle2onnx stores the score scale as a [1] initializer; tf2onnx folds a causal mask into a 0/1
    table multiplied into the scores. Both are the converter's numbers: the total is the projections'."""
    g = G()
    q, k, v = g.qkv()
    s = g.scale(g.op("MatMul", [q, g.op("Transpose", [k], "k_t", perm=[0, 1, 3, 2])], "qk"), "auto.cast.4")
    causal = np.tril(np.ones((S, S), dtype=np.float32))[None, None]
    s = g.op("Mul", [g.init("const_fold_opt__1", causal), s], "masked")
    s = g.op("Add", [s, g.init("const_fold_opt__2", ((1 - causal) * -1e9).astype(np.float32))], "masked_add")
    report = g.report(g.merge_and_project(g.op("MatMul", [g.op("Softmax", [s], "probs", axis=-1), v], "ctx")))
    assert _block(report) == STANDARD
    assert report.model.total_params == 4 * (D * D + D)


_KIND = "pkg.torch.export.graph_signature.InputSpec.kind"
_FOLDED = "pkg.onnxscript.optimizer.folded_from"


def test_variables_the_exporter_lifted_are_parameters_by_what_reads_them() -> None:
    """Keras on torch: every variable is a lifted constant (CONSTANT_TENSOR). A norm's scale multiplied
    into the activations and a bias added are parameters like the kernels a product reads; a rotary
    table the exporter computed from several constants is not; the total never falls below the
    attention's parameters."""
    g = G()
    norm = g.op("Mul", ["x", g.init("lifted_tensor_0", np.full(D, 1.5, np.float32), **{_KIND: "CONSTANT_TENSOR"})],
                "normed")
    for r in ("q", "k", "v", "o"):
        g.init(f"lifted_{r}_w", RNG.normal(0, 0.02, size=(D, D)).astype(np.float32), **{_KIND: "CONSTANT_TENSOR"})
        g.init(f"lifted_{r}_b", RNG.normal(0, 0.02, size=(D,)).astype(np.float32), **{_KIND: "CONSTANT_TENSOR"})
    g.init("lifted_f1", np.ones(4, np.float32), **{_KIND: "CONSTANT_TENSOR"})
    g.init("lifted_f2", np.ones(4, np.float32), **{_KIND: "CONSTANT_TENSOR"})
    cos = g.init("cos", RNG.normal(size=(1, 1, S, DK)).astype(np.float32),
                 **{_FOLDED: "['lifted_f1', 'lifted_f2', 'arange_1', 'mul_3']"})

    def proj(src: str, r: str) -> str:
        return g.op("Add", [g.op("MatMul", [src, f"lifted_{r}_w"], f"{r}_mm"), f"lifted_{r}_b"], f"{r}_proj")

    q, k, v = (g.heads(proj(norm, r), r) for r in ("q", "k", "v"))
    q = g.op("Mul", [q, cos], "q_rot")
    s = g.scale(g.op("MatMul", [q, g.op("Transpose", [k], "k_t", perm=[0, 1, 3, 2])], "qk"))
    ctx = g.op("MatMul", [g.op("Softmax", [s], "probs", axis=-1), v], "ctx")
    t = g.op("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3])
    out = proj(g.op("Reshape", [t, g.ints("merge", [1, S, D])], "ctx_m"), "o")
    report = g.report(out)
    assert _block(report) == STANDARD
    assert report.model.total_params == 4 * (D * D + D) + D  # the projections and the norm; no rotary table
    assert report.model.total_params >= report.model.attention_params


def _einsum_dense_kernel(g: G, name: str, shape: tuple[int, ...], keep: list[int]) -> str:
    """A kernel reshaped by a target computed from its own shape, as tf2onnx writes EinsumDense:
    Reshape(W, Concat(-1, ReduceProd(Gather(Shape(W), keep))))."""
    w = g.weight(name, *shape)
    dims = g.op("Gather", [g.op("Shape", [w], f"{name}_shape"), g.ints(f"{name}_keep", keep)], f"{name}_dims", axis=0)
    prod = g.op("ReduceProd", [dims], f"{name}_prod", keepdims=1)
    target = g.op("Concat", [g.ints(f"{name}_minus1", [-1]), prod], f"{name}_target", axis=0)
    return g.op("Reshape", [w, target], f"{name}_2d")


def test_a_kernel_reshaped_by_a_target_computed_from_its_own_shape_is_a_projection() -> None:
    """Keras EinsumDense through tf2onnx: Q/K/V kernels [d, h, k] and the output kernel [h, k, d]
    (its target computed the other way round, into a Gemm reading it transposed) are projections;
    their shapes fold symbolically, so the output projection is found and counted."""
    g = G()

    def proj(x: str, r: str) -> str:
        w = _einsum_dense_kernel(g, f"{r}_kernel", (D, H, DK), [1, 2])
        return g.heads(g.op("MatMul", [x, w], f"{r}_mm"), r)

    q, k, v = (proj("x", r) for r in ("q", "k", "v"))
    s = g.scale(g.op("MatMul", [q, g.op("Transpose", [k], "k_t", perm=[0, 1, 3, 2])], "qk"))
    ctx = g.op("MatMul", [g.op("Softmax", [s], "probs", axis=-1), v], "ctx")
    t = g.op("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3])
    merged = g.op("Reshape", [t, g.ints("merge", [S, D])], "ctx_m")
    wo = _einsum_dense_kernel(g, "o_kernel", (D, H, DK), [1, 2])  # stored [d, h, k]: read transposed
    out = g.op("Gemm", [merged, wo, g.weight("o_bias", D)], "o_gemm", transB=1)
    report = g.report(out)
    assert _block(report) == ("self", H, H, DK, DK, D, 4 * D * D + D)
    assert not [f for f in report.flags if f.code == "MHA008"]
    # The heads come from the kernels' head axis, with the kernel named: no guess from the scale.
    kernel = [e for e in report.blocks[0].evidence if e.field == "num_heads" and e.source == "kernel_shape"]
    assert kernel and kernel[0].value == H and "q_kernel [32, 4, 8]" in kernel[0].detail


def _rotate_half(g: G, x: str, tag: str) -> str:
    """keras-hub's rotate-half as tf2onnx writes it: Split the last axis, stack (-x2, x1), Reshape back."""
    x1, x2 = f"{tag}_x1", f"{tag}_x2"
    g.nodes.append(helper.make_node("Split", [x, g.ints(f"{tag}_halves", [DK // 2, DK // 2])], [x1, x2],
                                    name=f"{tag}_split", axis=-1))
    axis = g.ints(f"{tag}_axis", [-2])
    neg = g.op("Unsqueeze", [g.op("Neg", [x2], f"{tag}_neg"), axis], f"{tag}_u2")
    stacked = g.op("Concat", [neg, g.op("Unsqueeze", [x1, axis], f"{tag}_u1")], f"{tag}_stack", axis=-2)
    return g.op("Reshape", [stacked, g.ints(f"{tag}_back", [1, H, S, DK])], f"{tag}_rot")


def test_rotary_tables_and_a_zeros_like_a_converter_stored_are_no_parameters() -> None:
    """tf2onnx keeps what it computed as plain initializers: the rotary cos/sin tables (read as
    x·cos + rotate_half(x)·sin, told by that use, not by their values) and the zeros_like of a select
    it lowered to arithmetic (all zeros, read only by a product). Neither is a parameter; a learned
    table multiplied into the activations without the rotate-half is one."""
    g = G()
    q, k, v = g.qkv()
    angles = np.arange(S)[:, None] * (1e4 ** (-np.arange(DK) % (DK // 2) / (DK // 2)))[None]
    cos = g.init("rotary/Cos:0", np.cos(angles).astype(np.float32)[None, None])
    sin = g.init("rotary/Sin:0", np.sin(angles).astype(np.float32)[None, None])
    q, k = (g.op("Add", [g.op("Mul", [t, cos], f"{t}_c"), g.op("Mul", [_rotate_half(g, t, t), sin], f"{t}_s")],
                 f"{t}_rope") for t in (q, k))
    s = g.scale(g.op("MatMul", [q, g.op("Transpose", [k], "k_t", perm=[0, 1, 3, 2])], "qk"))
    ctx = g.op("MatMul", [g.op("Softmax", [s], "probs", axis=-1), v], "ctx")
    zeros = g.init("attention/zeros_like:0", np.zeros((1, H, S, DK), dtype=np.float32))
    keep = g.op("Cast", ["m"], "keep", to=TensorProto.FLOAT)
    ctx = g.op("Add", [g.op("Mul", [ctx, g.op("ReduceMax", [keep, g.ints("keys", [-1])], "any", keepdims=1)],
                             "kept"), g.op("Mul", [g.op("Neg", [keep], "hide"), zeros], "filled")], "ctx_sel")
    gate = g.weight("attn.gate", 1, H, S, DK)  # learned, multiplied in: a parameter
    report = g.report(g.merge_and_project(g.op("Mul", [ctx, gate], "gated")))
    assert _block(report) == STANDARD
    assert report.model.total_params == 4 * (D * D + D) + H * S * DK


def test_a_table_multiplied_in_without_a_rotate_half_is_a_parameter() -> None:
    """The same Add of two products, but the second activation is no rearrangement of the first
    (a different value of the run joins in): the stored tensors are read as weights."""
    g = G()
    q, k, v = g.qkv()
    a = g.weight("attn.a", 1, 1, S, DK)
    b = g.weight("attn.b", 1, 1, S, DK)
    other = g.op("Neg", [k], "k_neg")  # negated, but of K: not q's halves swapped
    q = g.op("Add", [g.op("Mul", [q, a], "q_a"), g.op("Mul", [other, b], "k_b")], "q_mix")
    s = g.scale(g.op("MatMul", [q, g.op("Transpose", [k], "k_t", perm=[0, 1, 3, 2])], "qk"))
    report = g.report(g.merge_and_project(g.op("MatMul", [g.op("Softmax", [s], "probs", axis=-1), v], "ctx")))
    assert report.model.total_params == 4 * (D * D + D) + 2 * S * DK


def test_a_nan_fill_a_converter_stored_is_no_parameter() -> None:
    """jax2onnx stores the fill of ``where(cond, y, nan)`` as a [1, S, 1] tensor of NaN: no trained
    value is NaN, so it is no parameter; a learned [1, S, 1] tensor in the same place is one."""
    totals = []
    for fill in (np.full((1, S, 1), np.nan, dtype=np.float32), RNG.normal(size=(1, S, 1)).astype(np.float32)):
        g = G()
        q, k, v = g.qkv()
        s = g.scale(g.op("MatMul", [q, g.op("Transpose", [k], "k_t", perm=[0, 1, 3, 2])], "qk"))
        ctx = g.merge_and_project(g.op("MatMul", [g.op("Softmax", [s], "probs", axis=-1), v], "ctx"))
        norm = g.op("ReduceSum", [ctx, g.ints("last", [-1])], "norm", keepdims=1)
        pos = g.op("Greater", [norm, g.init("zero", np.array(0.0, dtype=np.float32))], "pos")
        safe = g.op("Where", [pos, norm, g.init("const_53", fill)], "safe")
        report = g.report(g.op("Div", [ctx, safe], "out"))
        assert _block(report) == STANDARD
        totals.append(report.model.total_params)
    assert totals == [4 * (D * D + D), 4 * (D * D + D) + S]
