"""Q/K norms held by the attention module are part of its block: found by shape, not by name.

A module under the attention module that holds a vector (or one per head) and is none of its
projections is a norm of Q or K when its width is one head's (Qwen3, Gemma 3, HunYuan, EXAONE 4:
[d_k]), the projection's (OLMo 2/3: [h·d_k], [g·d_k]) or one vector per head (Cohere: [h, d_k]);
its name's q/query or k/key word says the side, else its width does. In a graph, the norm is what
the path from the projection to the scores normalises with (a norm op's scale and shift, or the
vectors a written-out norm multiplies and adds). Each block's params must equal the attention
module's parameters as torch counts them, in checkpoint folders built from the families' configs
(random weights, noise on every parameter), and the what-if counts must equal the module built at
the other head count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from attention_graphs import Nodes, model, value, weight
from onnx import helper

import mhainspect
from mhainspect.analysis.whatif import what_if
from mhainspect.matchers.grouping import norm_side
from mhainspect.render.json_render import report_to_dict

TINY = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=96)
# model_type -> (config arguments, the norm's layout: shared by the heads, or not)
FAMILIES: dict[str, tuple[dict[str, Any], bool]] = {
    "qwen3": ({"head_dim": 24}, True),  # per-head [d_k], h·d_k = 96 ≠ d_model
    "gemma3_text": ({"head_dim": 24}, True),  # RMSNorm scaling by 1 + weight
    "hunyuan_v1_dense": ({"head_dim": 16}, True),  # query_layernorm / key_layernorm
    "exaone4": ({}, True),
    "olmo2": ({}, False),  # over the whole projection: q_norm [h·d_k], k_norm [g·d_k]
    "olmo3": ({}, False),
    "cohere": ({"use_qk_norm": True}, False),  # one vector per head: [h, d_k], [g, d_k]
}


def _tiny(model_type: str, tmp_path: Path, **over: Any) -> tuple[Any, Path]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if model_type not in transformers.models.auto.configuration_auto.CONFIG_MAPPING:
        pytest.skip(f"transformers {transformers.__version__} has no {model_type}")
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, **{**TINY, **FAMILIES[model_type][0], **over})
    module = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.01)  # no parameter keeps its initial value (norms start at 1)
    folder = tmp_path / f"{model_type}-{over.get('num_attention_heads', TINY['num_attention_heads'])}"
    module.save_pretrained(folder)
    return module, folder


def _attention_params(module: Any) -> dict[str, int]:
    return {n[n.index("layers."):]: sum(p.numel() for p in m.parameters())
            for n, m in module.named_modules() if n.endswith("self_attn")}


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_a_checkpoint_block_counts_its_q_and_k_norms(model_type: str, tmp_path: Path) -> None:
    module, folder = _tiny(model_type, tmp_path)
    report = mhainspect.inspect(str(folder))
    truth = _attention_params(module)
    assert len(report.blocks) == TINY["num_hidden_layers"]
    for b in report.blocks:
        assert b.params.total == truth[b.name[b.name.index("layers."):]], b.name
        norms = {p.role: p for p in b.projections if p.norm is not None}
        assert sorted(norms) == ["k", "q"] and {p.norm_shared for p in norms.values()} == {FAMILIES[model_type][1]}
        assert b.d_k is not None and norms["q"].norm_params == (b.d_k if FAMILIES[model_type][1] else b.num_heads * b.d_k)
    data = report_to_dict(report)
    assert data["model"]["attention_params"] == sum(truth.values())
    assert {p["norm_params"] for p in data["blocks"][0]["projections"] if "norm" in p} == {
        p.norm_params for p in report.blocks[0].projections if p.norm}


@pytest.mark.parametrize("model_type", ["qwen3", "olmo2", "cohere"])
def test_what_if_counts_the_norms_as_the_module_at_that_head_count_holds_them(model_type: str, tmp_path: Path) -> None:
    """Twice the heads: a per-head norm keeps its d_k (Qwen3's head_dim is fixed), a whole-width
    norm keeps the width (OLMo 2's head_dim is d_model / h), one vector per head doubles."""
    _, folder = _tiny(model_type, tmp_path)
    block = mhainspect.inspect(str(folder)).blocks[0]
    wider, _ = _tiny(model_type, tmp_path, num_attention_heads=8, num_key_value_heads=4)
    at_eight = _attention_params(wider)["layers.0.self_attn"]
    counted = what_if(block, 8)
    assert counted is not None
    fixed = counted.head_dim_fixed if model_type == "qwen3" else counted.total_width_fixed
    assert fixed == at_eight


def test_a_norm_is_attributed_by_its_name_and_else_by_its_width(tmp_path: Path) -> None:
    """The side from a q/query or k/key word of the name; a vector whose name says neither side is
    the norm of the one side as wide as it; a vector that fits no side is no norm."""
    assert [norm_side(n) for n in ("attn.q_norm", "attn.query_layernorm", "attn.norm_added_k", "attn.qnorm",
                                   "attn.k_ln", "attn.norm", "attn.qk_norm")] == ["q", "q", "k", "q", "k", None, None]
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    tensors = {f"attn.{n}.weight": rng.standard_normal(s).astype(np.float32)
               for n, s in (("q_proj", (64, 32)), ("k_proj", (32, 32)), ("v_proj", (32, 32)), ("o_proj", (32, 64)),
                            ("first_norm", (64,)), ("gate", (5,)))}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    block = mhainspect.inspect(str(tmp_path / "model.safetensors"), num_heads=4).blocks[0]
    assert [(p.role, p.norm, p.norm_params) for p in block.projections if p.norm] == [("q", "attn.first_norm.weight", 64)]
    assert block.params.total == 2 * 64 * 32 + 2 * 32 * 32 + 64  # the 5-wide vector fits no side: not counted


def _graph_with_q_norm(kind: str) -> onnx.ModelProto:
    """Q and K projections, a norm of Q per head (d_k = 8, 2 heads), a rotary-like product of Q with
    a stored [4, 8] table after it, the scores, P·V and O."""
    g = Nodes()
    g.inits += [weight(f"w{r}", 16, 16) for r in "qkvo"]
    g.inits += [helper.make_tensor("heads", onnx.TensorProto.INT64, [4], [0, 0, 2, 8]),
                helper.make_tensor("axes", onnx.TensorProto.INT64, [1], [-1]),
                helper.make_tensor("merge", onnx.TensorProto.INT64, [3], [0, 0, 16]),
                weight("attn.q_norm.weight", 8), weight("attn.q_norm.bias", 8), weight("table", 4, 8),
                helper.make_tensor("eps", onnx.TensorProto.FLOAT, [], [1e-6]),
                helper.make_tensor("two", onnx.TensorProto.FLOAT, [], [2.0])]
    q, k, v = (g.add("Reshape", [g.add("MatMul", ["x", f"w{r}"], f"{r}_lin"), "heads"], f"{r}_heads") for r in "qkv")
    if kind == "op":
        q = g.add("LayerNormalization", [q, "attn.q_norm.weight", "attn.q_norm.bias"], "q_normed", axis=-1)
    else:  # RMSNorm written out, then the scale and a shift
        ms = g.add("ReduceMean", [g.add("Pow", [q, "two"], "q_sq"), "axes"], "q_ms", keepdims=1)
        inv = g.add("Reciprocal", [g.add("Sqrt", [g.add("Add", [ms, "eps"], "q_eps")], "q_rms")], "q_inv")
        q = g.add("Add", [g.add("Mul", [g.add("Mul", [q, inv], "q_n"), "attn.q_norm.weight"], "q_scaled"),
                          "attn.q_norm.bias"], "q_normed")
    q = g.add("Mul", [q, "table"], "q_rot")  # stored, [4, 8]: not the norm's
    q, v = (g.add("Transpose", [t], f"{t}_t", perm=[0, 2, 1, 3]) for t in (q, v))
    kt = g.add("Transpose", [k], "k_t", perm=[0, 2, 3, 1])
    p = g.add("Softmax", [g.add("MatMul", [q, kt], "scores")], "probs", axis=-1)
    ctx = g.add("Reshape", [g.add("Transpose", [g.add("MatMul", [p, v], "ctx")], "ctx_t", perm=[0, 2, 1, 3]), "merge"],
                "ctx_m")
    g.add("MatMul", [ctx, "wo"], "y")
    return model(g.nodes, g.inits, [value("x", 1, 4, 16)], [value("y", 1, 4, 16)])


@pytest.mark.parametrize("kind", ["op", "written"])
def test_a_graph_block_counts_the_norm_its_q_path_applies(kind: str, tmp_path: Path) -> None:
    path = tmp_path / f"{kind}.onnx"
    onnx.save(_graph_with_q_norm(kind), path)
    (block,) = mhainspect.inspect(str(path)).blocks
    assert (block.num_heads, block.d_k) == (2, 8)
    q = next(p for p in block.projections if p.role == "q")
    assert (q.norm, q.norm_params, q.norm_shared) == ("attn.q_norm.weight", 16, True)
    assert block.params.q == 256 + 16 and block.params.total == 4 * 256 + 16


def test_a_norm_with_a_weight_and_a_bias_per_head_counts_both(tmp_path: Path) -> None:
    """Chameleon's q_norm/k_norm are LayerNorms over [heads, d_k] with a bias: [4, 16] + [4, 16] on
    Q, [2, 16] + [2, 16] on K (a meta-device model: its folder holds the headers only)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "ChameleonForConditionalGeneration"):
        pytest.skip(f"transformers {transformers.__version__} has no Chameleon")
    from tests import hybrid_models as hm

    config = transformers.AutoConfig.for_model("chameleon", **TINY, vocabulary_map={"<image>": 95})
    with torch.device("meta"):
        module = transformers.ChameleonForConditionalGeneration(config).eval()
    folder = hm.write_meta_folder(module, {**config.to_dict(), "model_type": "chameleon"}, tmp_path / "chameleon")
    truth = _attention_params(module)
    blocks = [b for b in mhainspect.inspect(str(folder)).blocks if ".layers." in b.name]
    assert len(blocks) == TINY["num_hidden_layers"]
    for b in blocks:
        assert b.params.total == truth[b.name[b.name.index("layers."):]]
        assert [(p.role, p.norm_params, p.norm_shared) for p in b.projections if p.norm] == [("q", 128, False),
                                                                                             ("k", 64, False)]
