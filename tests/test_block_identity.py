"""Blocks identified by the weights they use; kind, scale and additive attention read from the graph.

- an If whose branches read the same outer weights is one block per attention module, named once,
  with projections found in either branch (a merged decoder's cross-attention K/V exist only in
  its no-past branch) and its biases;
- a layer applied N times (ALBERT) is one block with ``applications`` N, its weights counted once;
- K/V from another source than Q is cross-attention, with or without projections;
- the scale is one number composed of every factor (split, run-time), or unknown with the reason;
- additive (Bahdanau) attention is its own kind with one head.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import onnx
import pytest
from attention_graphs import Nodes, Weights, core_nodes, mha_nodes, model, shape_consts, value, weight
from onnx import TensorProto, helper

from mhainspect.frontends.onnx.loader import load_onnx, model_to_graph
from mhainspect.pipeline import audit_graph
from mhainspect.render.json_render import report_to_dict
from mhainspect.render.markdown import render_markdown
from mhainspect.results import Report

D, H = 16, 4
DK = D // H
BLOCK = 4 * (D * D + D)  # Q/K/V/O weights and biases of one module


def analyze(m: onnx.ModelProto, tmp_path: Path | None = None) -> Report:
    """The report of ``m`` through the file loader (when tmp_path is given) or the proto path."""
    if tmp_path is not None:
        path = tmp_path / "m.onnx"
        onnx.save(m, str(path))
        return audit_graph(load_onnx(path))
    return audit_graph(model_to_graph(m, "m"))


def shares(report: Report) -> list[float]:
    return [b["share"] for b in report_to_dict(report)["blocks"]]


def if_model(then_nodes: Nodes, else_nodes: Nodes, then_out: str, else_out: str, inits: list[onnx.TensorProto],
             inputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
    def graph(g: Nodes, out: str, name: str) -> onnx.GraphProto:
        y = g.add("Identity", [out], "branch_y")  # the same local name in both branches
        return helper.make_graph(g.nodes, name, [], [value(y, 1, "s", D)], g.inits)

    node = helper.make_node("If", ["use_cache_branch"], ["y"], name="/model/If",
                            then_branch=graph(then_nodes, then_out, "with_past"),
                            else_branch=graph(else_nodes, else_out, "no_past"))
    cond = helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [])
    m = model([node], inits, [*inputs, cond], [value("y", 1, "s", D)])
    onnx.checker.check_model(m)
    return m


# ----------------------------------------------------------------------------- If branches


def test_if_branches_reading_the_same_weights_are_one_block(tmp_path: Path) -> None:
    w = Weights("model.layers.0.self_attn", D)
    branches = []
    for _ in range(2):
        g = Nodes()
        branches.append((g, mha_nodes(g, "/model/layers.0/self_attn", "x", w.prefix, H, DK)))
    (a, out_a), (b, out_b) = branches
    report = analyze(if_model(a, b, out_a, out_b, w.tensors() + shape_consts(H, DK), [value("x", 1, "s", D)]),
                     tmp_path)
    assert len(report.blocks) == 1
    block = report.blocks[0]
    assert block.name == "model.layers.0.self_attn"
    assert (block.num_heads, block.d_k, block.d_model, block.applications) == (H, DK, D, 1)
    assert block.params.total == BLOCK and block.params.bias == 4 * D
    assert {p.role for p in block.projections} == {"q", "k", "v", "o"}
    assert report.model.total_params == BLOCK == report.model.attention_params
    assert "applications" not in report_to_dict(report)["blocks"][0]
    assert any(e.source == "same_weights" for e in block.evidence)


def test_branches_with_their_own_weights_stay_two_blocks() -> None:
    first, second = Weights("model.a", D), Weights("model.b", D)
    a, b = Nodes(), Nodes()
    out_a = mha_nodes(a, "/model/a", "x", first.prefix, H, DK)
    out_b = mha_nodes(b, "/model/b", "x", second.prefix, H, DK)
    report = analyze(if_model(a, b, out_a, out_b, first.tensors() + second.tensors() + shape_consts(H, DK),
                              [value("x", 1, "s", D)]))
    assert sorted(b.name for b in report.blocks) == ["model.a", "model.b"]
    assert sum(shares(report)) == pytest.approx(1.0)


def merged_decoder(layers_applied: int = 1) -> onnx.ModelProto:
    """A hand-built merged decoder: with-past branch (self-attention over a cache, cross-attention
    reading the cached encoder K/V, no K/V projection) and no-past branch (K/V projected from the
    encoder output). ``layers_applied``: how often each branch applies the same two modules."""
    sa = Weights("model.decoder.layers.0.self_attn", D)
    ca = Weights("model.decoder.layers.0.encoder_attn", D)

    def branch(past: bool) -> tuple[Nodes, str]:
        g = Nodes()
        y = "x"
        for i in range(layers_applied):
            tag = "" if i == 0 else f"_{i}"
            if past:
                y = mha_nodes(g, f"/model/decoder/layers.0{tag}/self_attn", y, sa.prefix, H, DK,
                              cache_kv=("past_self_k", "past_self_v"))
                y = mha_nodes(g, f"/model/decoder/layers.0{tag}/encoder_attn", y, ca.prefix, H, DK,
                              past_k="past_cross_kT", past_v="past_cross_v")
            else:
                y = mha_nodes(g, f"/model/decoder/layers.0{tag}/self_attn", y, sa.prefix, H, DK)
                y = mha_nodes(g, f"/model/decoder/layers.0{tag}/encoder_attn", y, ca.prefix, H, DK, kv_src="enc")
        return g, y

    (a, out_a), (b, out_b) = branch(True), branch(False)
    inputs = [value("x", 1, "s", D), value("enc", 1, "t", D), value("past_self_k", 1, H, "p", DK),
              value("past_self_v", 1, H, "p", DK), value("past_cross_kT", 1, H, DK, "t"),
              value("past_cross_v", 1, H, "t", DK)]
    return if_model(a, b, out_a, out_b, sa.tensors() + ca.tensors() + shape_consts(H, DK), inputs)


def test_merged_decoder_one_block_per_module_with_projections_from_either_branch(tmp_path: Path) -> None:
    report = analyze(merged_decoder(), tmp_path)
    by_name = {b.name: b for b in report.blocks}
    assert sorted(by_name) == ["model.decoder.layers.0.encoder_attn", "model.decoder.layers.0.self_attn"]
    cross, own = by_name["model.decoder.layers.0.encoder_attn"], by_name["model.decoder.layers.0.self_attn"]
    assert (own.kind, cross.kind) == ("self", "cross")
    for block in (own, cross):
        # The with-past branch has no cross K/V projection: they come from the no-past branch.
        assert {p.role for p in block.projections} == {"q", "k", "v", "o"}
        assert block.params.total == BLOCK and block.params.bias == 4 * D  # biases in the outer graph
        assert (block.num_heads, block.num_kv_heads, block.d_k, block.applications) == (H, H, DK, 1)
    assert report.model.total_params == 2 * BLOCK == report.model.attention_params
    assert sum(shares(report)) == pytest.approx(1.0)


def test_a_shared_layer_inside_each_branch_counts_its_applications_not_the_branches() -> None:
    report = analyze(merged_decoder(layers_applied=2))
    assert len(report.blocks) == 2
    assert [b.applications for b in report.blocks] == [2, 2]
    assert report.model.total_params == 2 * BLOCK
    assert sum(shares(report)) == pytest.approx(1.0)


# ----------------------------------------------------------------------------- shared layers


def shared_layer_model(times: int, shared: str = "qkvo") -> onnx.ModelProto:
    """Attention applied ``times`` times in sequence: with every role in ``shared`` one module
    applied ``times`` times (ALBERT); else each application has its own weights but for the roles in
    ``shared``, which it reads from the first (cross-layer KV sharing; one Linear as two modules' Q)."""
    first = Weights("encoder.layer.attention", D)
    g = Nodes()
    inits = first.tensors() + shape_consts(H, DK)
    y = "x"
    for i in range(times):
        prefix = first.prefix
        if shared != "qkvo" and i > 0:
            prefix = f"encoder.layer{i}.attention"
            for role in "qkvo":
                names = (f"{prefix}.{role}_proj.weight", f"{prefix}.{role}_proj.bias")
                if role not in shared:
                    inits += [weight(names[0], D, D), weight(names[1], D)]
                    continue
                g.add("Identity", [f"{first.prefix}.{role}_proj.weight"], names[0])
                g.add("Identity", [f"{first.prefix}.{role}_proj.bias"], names[1])
        y = mha_nodes(g, f"/encoder/layer{'' if i == 0 else f'_{i}'}/attention", y, prefix, H, DK)
    return model(g.nodes, inits + g.inits, [value("x", 1, "s", D)], [value(y, 1, "s", D)])


def test_a_layer_applied_n_times_is_one_block_counted_once() -> None:
    report = analyze(shared_layer_model(3))
    assert len(report.blocks) == 1
    block = report.blocks[0]
    assert block.applications == 3 and block.params.total == BLOCK
    assert report.model.total_params == BLOCK == report.model.attention_params
    doc = report_to_dict(report)
    assert doc["blocks"][0]["applications"] == 3 and doc["blocks"][0]["share"] == 1.0
    assert "self ×3" in render_markdown(report)


def test_layers_sharing_only_k_and_v_stay_separate_modules() -> None:
    report = analyze(shared_layer_model(2, shared="kv"))
    assert len(report.blocks) == 2
    assert all(b.applications == 1 for b in report.blocks)
    assert report.model.attention_params <= report.model.total_params
    assert sum(shares(report)) <= 1.0 + 1e-9


@pytest.mark.parametrize("shared", ["q", "k", "o", "kv", "qk", "qkv", "qko"])
def test_modules_sharing_some_weights_are_two_blocks_each_counting_its_own(shared: str) -> None:
    """Identity is every weight a block uses, not its Q alone: a second module that reads some of
    the first's weights (the same nn.Linear as both modules' Q) is a block of its own, with the shared
    weights counted in the first (same_weights note), so no weight of either module is lost."""
    report = analyze(shared_layer_model(2, shared))
    assert [b.applications for b in report.blocks] == [1, 1]
    per_role = D * D + D
    assert [b.params.total for b in report.blocks] == [BLOCK, BLOCK - len(shared) * per_role]
    assert report.model.attention_params == report.model.total_params == (8 - len(shared)) * per_role
    assert sum(shares(report)) == pytest.approx(1.0)
    later = report.blocks[1]
    noted = {e.field for e in later.evidence if e.source == "same_weights"}
    assert noted == set(shared)


def test_a_module_sharing_all_four_weights_is_one_module_applied_twice() -> None:
    assert [(b.applications, b.params.total) for b in analyze(shared_layer_model(2, "qkvo")).blocks] == [(2, BLOCK)]


def two_torch_modules(shared: str) -> Any:
    """A tiny torch model (d_model 32, 4 heads, biases): attention module a, then module b reading
    a's projections for the roles in ``shared`` (the same nn.Linear objects); "loop": module a
    applied twice (a universal transformer looping one layer). torch is imported here, on use."""
    import torch
    from torch import nn

    d, h = 32, 4

    class Attn(nn.Module):
        def __init__(self, given: dict[str, nn.Linear]) -> None:
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj, self.o_proj = (given.get(r) or nn.Linear(d, d) for r in "qkvo")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, n, _ = x.shape
            q, k, v = (p(x).view(b, n, h, d // h).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
            a = torch.softmax(q @ k.transpose(-1, -2) / (d // h) ** 0.5, dim=-1)
            return self.o_proj((a @ v).transpose(1, 2).reshape(b, n, d))

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = Attn({})
            self.b = self.a if shared == "loop" else Attn({r: getattr(self.a, f"{r}_proj") for r in shared})

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x))

    torch.manual_seed(0)
    return Two().eval()


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize(("shared", "expected"), [
    ("q", [(1, 4224), (1, 3168)]), ("qkv", [(1, 4224), (1, 1056)]), ("loop", [(2, 4224)])])
@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_torch_modules_sharing_a_projection_exported_by_both_exporters(
        tmp_path: Path, dynamo: bool, shared: str, expected: list[tuple[int, int]]) -> None:
    torch = pytest.importorskip("torch")
    module = two_torch_modules(shared)
    path = tmp_path / "m.onnx"
    kwargs: dict[str, Any] = {} if dynamo else {"opset_version": 17}
    torch.onnx.export(module, (torch.randn(1, 5, 32),), str(path), dynamo=dynamo, **kwargs)
    report = audit_graph(load_onnx(path))
    assert [(b.applications, b.params.total) for b in report.blocks] == expected
    total = sum(p.numel() for p in module.parameters())  # a shared Linear once
    assert report.model.attention_params == report.model.total_params == total
    assert [b.num_heads for b in report.blocks] == [4] * len(expected)


def test_albert_exported_by_torch_is_one_module_applied_per_layer(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.AlbertConfig(vocab_size=64, embedding_size=16, hidden_size=32, num_attention_heads=4,
                                       intermediate_size=48, num_hidden_layers=3, max_position_embeddings=32,
                                       attn_implementation="eager")
    torch.manual_seed(0)
    module = transformers.AlbertModel(config).eval()
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.02)  # exporters drop all-zero biases
    path = tmp_path / "albert.onnx"
    torch.onnx.export(module, (torch.randint(0, 64, (1, 8)),), str(path), input_names=["input_ids"], dynamo=False,
                      opset_version=17)
    report = audit_graph(load_onnx(path))
    assert len(report.blocks) == 1
    block = report.blocks[0]
    assert block.name.endswith("albert_layers.0.attention")
    assert (block.applications, block.num_heads, block.d_k) == (3, 4, 8)
    assert block.params.total == 4 * (32 * 32 + 32)
    assert report.model.total_params == sum(p.numel() for p in module.parameters())
    doc = json.loads(json.dumps(report_to_dict(report)))
    assert sum(b["share"] for b in doc["blocks"]) <= 1.0


# ----------------------------------------------------------------------------- kind


@pytest.mark.parametrize("state_from_an_op", [False, True])
def test_k_and_v_from_a_graph_input_without_projections_are_cross_attention(state_from_an_op: bool) -> None:
    """A GRU-decoder-style attention: Q is projected from the decoder state, K/V are the encoder memory
    (or a decoder-with-past step's cached encoder K/V). The state may come out of an op (a norm, the
    layer before): what makes the block cross is where K/V come from, a graph input."""
    w = Weights("dec.attn", D, with_kv=False)
    g = Nodes()
    state = g.add("Relu", ["h"], "/dec/norm/Relu_out") if state_from_an_op else "h"
    mm = g.add("MatMul", [state, "dec.attn.q_proj.weight"], "/dec/q/MatMul_out")
    q = g.add("Add", [mm, "dec.attn.q_proj.bias"], "/dec/q/Add_out")
    k_t = g.add("Transpose", ["memory"], "/dec/k/Transpose_out", perm=[0, 2, 1])
    out = core_nodes(g, "/dec", q, k_t, "memory", "none")
    report = analyze(model(g.nodes, g.inits + w.tensors(), [value("h", 2, 3, D), value("memory", 2, 5, D)],
                           [value(out, 2, 3, D)]))
    assert [b.kind for b in report.blocks] == ["cross"]


def test_self_attention_without_projections_is_self() -> None:
    g = Nodes()
    k_t = g.add("Transpose", ["x"], "/a/k/Transpose_out", perm=[0, 1, 3, 2])
    out = core_nodes(g, "/a", "x", k_t, "x", "scores", 0.5)
    report = analyze(model(g.nodes, g.inits, [value("x", 1, 2, "s", DK)], [value(out, 1, 2, "s", DK)]))
    assert [b.kind for b in report.blocks] == ["self"]


# ----------------------------------------------------------------------------- scale


def core_report(mode: str, d_k: int | str, scale: float) -> Report:
    g = Nodes()
    out = core_nodes(g, "/attn", "q", "kT", "v", mode, scale)
    inputs = [value("q", 1, 2, "s", d_k), value("kT", 1, 2, d_k, "t"), value("v", 1, 2, "t", d_k)]
    return analyze(model(g.nodes, g.inits, inputs, [value(out, 1, 2, "s", d_k)]))


@pytest.mark.parametrize("mode", ["scores", "q", "k", "split", "split_runtime"])
def test_a_scale_anywhere_between_projections_and_softmax_is_one_scale(mode: str) -> None:
    report = core_report(mode, 8, 1 / math.sqrt(8))
    block = report.blocks[0]
    assert block.scale_known and block.scale == pytest.approx(1 / math.sqrt(8), rel=1e-5)
    assert not [f for f in report.flags if f.code == "MHA003"]


def test_a_custom_split_scale_is_reported_as_its_product() -> None:
    report = core_report("split", 8, 0.125)
    assert report.blocks[0].scale == pytest.approx(0.125, rel=1e-5)
    assert [f.code for f in report.flags] == ["MHA008", "MHA003"]  # the core alone: no output projection


def test_a_runtime_scale_over_a_symbolic_dimension_is_unknown_with_the_reason() -> None:
    report = core_report("split_runtime", "dk", 1.0)
    block = report.blocks[0]
    assert block.scale is None and not block.scale_known
    detail = next(e.detail for e in block.evidence if e.field == "scale")
    assert detail.startswith("unknown:") and "computed at run time" in detail and "qscale" in detail
    assert not [f for f in report.flags if f.code == "MHA003"]


def test_no_factor_at_all_says_no_scaling_without_guessing_where_it_went() -> None:
    report = core_report("none", 8, 1.0)
    assert report.blocks[0].scale == 1.0 and report.blocks[0].scale_known
    (flag,) = [f for f in report.flags if f.code == "MHA003"]
    assert "no scale" in flag.message and "T5" not in flag.message and "folded" not in flag.message


# ----------------------------------------------------------------------------- additive attention


def test_bahdanau_attention_exported_by_torch_is_additive_with_one_head(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")

    class Bahdanau(torch.nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.W = torch.nn.Linear(12, 8)
            self.U = torch.nn.Linear(10, 8)
            self.v = torch.nn.Linear(8, 1)

        def forward(self, query: object, keys: object) -> object:
            e = self.v(torch.tanh(self.W(query).unsqueeze(1) + self.U(keys))).squeeze(-1)
            return torch.bmm(torch.softmax(e, dim=-1).unsqueeze(1), keys).squeeze(1)

    torch.manual_seed(0)
    module = Bahdanau().eval()
    path = tmp_path / "bahdanau.onnx"
    torch.onnx.export(module, (torch.randn(2, 12), torch.randn(2, 5, 10)), str(path), input_names=["query", "keys"],
                      dynamo=False, opset_version=17)
    report = audit_graph(load_onnx(path))
    (block,) = report.blocks
    assert (block.kind, block.matcher, block.num_heads, block.num_kv_heads) == ("additive", "additive", 1, 1)
    assert (block.d_model, block.d_k, block.d_v) == (12, 8, 10)
    assert (block.params.q, block.params.k, block.params.extra) == (12 * 8 + 8, 10 * 8 + 8, 8 + 1)
    assert block.scale is None and not block.scale_known
    assert report.model.total_params == sum(p.numel() for p in module.parameters())
    assert not report.flags and not report.misses


def keras_additive(with_values: bool = True) -> onnx.ModelProto:
    """Keras' Bahdanau tutorial: V(tanh(W1(q) + W2(values))) as ReduceSum(Mul(tanh, v)), context as
    ReduceSum(Mul(probs, values)) over the time axis."""
    g = Nodes()
    inits = [helper.make_tensor(n, TensorProto.FLOAT, s, [0.01] * math.prod(s))
             for n, s in (("W1.kernel", [D, 8]), ("W2.kernel", [D, 8]), ("V.kernel", [8]))]
    inits.append(helper.make_tensor("axes_last", TensorProto.INT64, [1], [-1]))
    inits.append(helper.make_tensor("axes_time", TensorProto.INT64, [1], [1]))
    wq = g.add("MatMul", ["query", "W1.kernel"], "/attn/W1/MatMul_out")
    wk = g.add("MatMul", ["values", "W2.kernel"], "/attn/W2/MatMul_out")
    t = g.add("Tanh", [g.add("Add", [wq, wk], "/attn/Add_out")], "/attn/Tanh_out")
    e = g.add("ReduceSum", [g.add("Mul", [t, "V.kernel"], "/attn/V/Mul_out"), "axes_last"], "/attn/V/ReduceSum_out",
              keepdims=1)
    probs = g.add("Softmax", [e], "/attn/Softmax_out", axis=1)
    out = probs
    if with_values:
        out = g.add("ReduceSum", [g.add("Mul", [probs, "values"], "/attn/ctx/Mul_out"), "axes_time"],
                    "/attn/ctx/ReduceSum_out", keepdims=0)
    return model(g.nodes, inits, [value("query", 2, 1, D), value("values", 2, 5, D)], [value(out, 2, D)], opset=18)


def test_keras_style_additive_attention_is_recognised() -> None:
    report = analyze(keras_additive())
    (block,) = report.blocks
    assert (block.kind, block.num_heads, block.d_k, block.d_v, block.d_model) == ("additive", 1, 8, D, D)
    assert (block.params.q, block.params.k, block.params.extra) == (D * 8, D * 8, 8)
    assert report.model.total_params == 2 * D * 8 + 8


def test_additive_scores_without_a_value_product_are_a_near_miss_named_as_such() -> None:
    report = analyze(keras_additive(with_values=False))
    assert not report.blocks
    (miss,) = report.misses
    assert miss.matcher == "additive" and "vᵀ·tanh" in miss.reason and "router" not in miss.reason


def test_fused_multi_head_attention_reading_encoder_memory_is_cross_attention() -> None:
    w = Weights("dec.attn", D, with_kv=False)
    g = Nodes()
    q = g.add("Add", [g.add("MatMul", ["x", "dec.attn.q_proj.weight"], "/dec/q/MatMul_out"), "dec.attn.q_proj.bias"],
              "/dec/q/Add_out")
    g.nodes.append(helper.make_node("MultiHeadAttention", [q, "memory", "memory"], ["y"], name="/dec/MHA",
                                    domain="com.microsoft", num_heads=H))
    m = model(g.nodes, w.tensors(), [value("x", 1, "s", D), value("memory", 1, "t", D)], [value("y", 1, "s", D)])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    report = analyze(m)
    assert [(b.kind, b.num_heads) for b in report.blocks] == [("cross", H)]


def test_k_and_v_over_memory_concatenated_with_the_input_are_still_self_attention() -> None:
    """Transformer-XL: K/V are projected from Concat(mems, h), Q from h."""
    w = Weights("layer.attn", D)
    g = Nodes()
    kv = g.add("Concat", ["mems", "h"], "/layer/attn/Concat_out", axis=1)
    out = mha_nodes(g, "/layer/attn", "h", w.prefix, H, DK, kv_src=kv)
    report = analyze(model(g.nodes, g.inits + w.tensors() + shape_consts(H, DK),
                           [value("h", 1, "s", D), value("mems", 1, "m", D)], [value(out, 1, "s", D)]))
    assert [(b.kind, b.params.total) for b in report.blocks] == [("self", BLOCK)]


def test_two_softmaxes_over_one_projection_are_not_one_module_applied_twice() -> None:
    """Two attention maps over the same Q/K projection nodes (as differential attention has): the
    anchors reach the weights through one node, so they are not applications of a shared layer."""
    g = Nodes()
    q = g.add("MatMul", ["x", "attn.q.weight"], "/attn/q/MatMul_out")
    k_t = g.add("Transpose", [g.add("MatMul", ["x", "attn.k.weight"], "/attn/k/MatMul_out")], "/attn/k/T_out",
                perm=[0, 2, 1])
    v = g.add("MatMul", ["x", "attn.v.weight"], "/attn/v/MatMul_out")
    one = core_nodes(g, "/attn/map1", q, k_t, v, "scores", 0.25)
    two = core_nodes(g, "/attn/map2", q, k_t, v, "scores", 0.25)
    diff = g.add("Sub", [one, two], "/attn/Sub_out")
    inits = [helper.make_tensor(f"attn.{r}.weight", TensorProto.FLOAT, [D, D], [0.01] * D * D) for r in "qkv"]
    report = analyze(model(g.nodes, g.inits + inits, [value("x", 1, "s", D)], [value(diff, 1, "s", D)]))
    assert len(report.blocks) == 2 and all(b.applications == 1 for b in report.blocks)
