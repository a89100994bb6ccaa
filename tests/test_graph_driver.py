"""The graph driver (mhainspect.matchers.graph): anchors tried against an explicit, ordered pattern
registry; a miss says why and where; a pattern that does not recognise an anchor hands it on;
front ends reach the patterns only through the driver (an import-linter contract in pyproject.toml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from attention_graphs import Nodes, Weights, mha_nodes, model, shape_consts, value, weight
from onnx import helper

import mhainspect
from mhainspect.frontends.onnx.loader import model_to_graph
from mhainspect.ir.dataflow import GraphIndex
from mhainspect.ir.graph import Node
from mhainspect.matchers.block import BlockBuilder
from mhainspect.matchers.graph import PATTERNS, VIEWS, find_blocks, graph_blocks
from mhainspect.matchers.patterns import Pattern, additive, decomposed, fused
from mhainspect.render.json_render import report_to_dict
from mhainspect.results import Miss


def _index(g: Nodes, out: str = "y") -> GraphIndex:
    m = model(g.nodes, g.inits, [value("x", 2, 8, 16)], [value(out, 2, 8, "n")])
    return GraphIndex(model_to_graph(m, "g.onnx"))


def _mha(heads: int = 2, d: int = 16) -> Nodes:
    g = Nodes()
    w = Weights("attn", d)
    g.inits += w.tensors() + shape_consts(heads, d // heads)
    out = mha_nodes(g, "/attn", "x", "attn", heads, d // heads)
    g.add("Identity", [out], "y")
    return g


def test_the_registry_orders_q_k_scores_before_additive_ones_and_names_every_pattern() -> None:
    assert [p.name for p in PATTERNS] == ["decomposed", "additive", "fused"]
    assert PATTERNS.index(decomposed.PATTERN) < PATTERNS.index(additive.PATTERN)
    assert fused.PATTERN.anchors == fused.FUSED_OP_NAMES and "Exp" in {op for v in VIEWS for op in v.ops}


def test_a_written_out_attention_is_one_block_with_its_four_projections() -> None:
    found = graph_blocks(_index(_mha()))
    assert not found.misses and len(found.blocks) == 1
    b = found.blocks[0]
    assert (b.matcher, b.num_heads, b.d_k) == ("decomposed", 2, 8)
    assert b.params.total == Weights("attn", 16).numel()


def test_a_softmax_without_q_k_is_handed_to_the_next_pattern_and_its_miss_says_where() -> None:
    """A classifier's Softmax: decomposed does not claim it (no Q·Kᵀ), additive does not either
    (no vᵀ·tanh): the first pattern's miss is reported, naming the node the walk met."""
    g = Nodes()
    g.inits.append(weight("w", 16, 4))
    logits = g.add("MatMul", ["x", "w"], "logits_out")
    g.add("Softmax", [logits], "y", axis=-1)
    builders, misses = find_blocks(_index(g))
    assert not builders and len(misses) == 1
    miss = misses[0]
    assert (miss.matcher, miss.anchor, miss.node, miss.claimed) == ("decomposed", "y", "logits", False)
    assert "classifier or router" in miss.reason


def test_additive_scores_are_found_by_the_pattern_after_decomposed() -> None:
    """softmax(vᵀ·tanh(W·q + U·k))·V: no Q·Kᵀ, so decomposed hands the Softmax on; additive finds it."""
    g = Nodes()
    g.inits += [weight("W", 16, 8), weight("U", 16, 8), weight("v", 8, 1)]
    q = g.add("MatMul", ["q_in", "W"], "wq_out")
    k = g.add("MatMul", ["x", "U"], "uk_out")
    t = g.add("Tanh", [g.add("Add", [q, k], "sum_out")], "tanh_out")
    s = g.add("Squeeze", [g.add("MatMul", [t, "v"], "e_out"), "axis2"], "scores_out")
    g.inits.append(helper.make_tensor("axis2", 7, [1], [2]))
    p = g.add("Unsqueeze", [g.add("Softmax", [s], "probs_out", axis=-1), "axis1"], "p3_out")
    g.inits.append(helper.make_tensor("axis1", 7, [1], [1]))
    g.add("MatMul", [p, "x"], "y")
    m = model(g.nodes, g.inits, [value("x", 2, 8, 16), value("q_in", 2, 1, 16)], [value("y", 2, 1, 16)])
    builders, misses = find_blocks(GraphIndex(model_to_graph(m, "g.onnx")))
    assert not misses and [b.matcher for b in builders] == ["additive"]


def test_an_earlier_pattern_that_claims_an_anchor_ends_the_search_and_one_that_does_not_hands_it_on() -> None:
    """A pattern is one Pattern value and its place in the order: the driver needs nothing else."""
    index = _index(_mha())
    seen: list[str] = []

    def passes(index: GraphIndex, node: Node) -> BlockBuilder | Miss:
        seen.append(node.name)
        return Miss("fused", node.name, "not mine", node=node.name, claimed=False)

    def claims(index: GraphIndex, node: Node) -> BlockBuilder | Miss:
        return Miss("fused", node.name, "mine, but broken", node=node.name)

    hand_on = (Pattern("fused", frozenset({"Softmax"}), passes), *PATTERNS)
    builders, misses = find_blocks(index, hand_on)
    assert len(builders) == 1 and not misses and seen == ["/attn/Softmax"]
    builders, misses = find_blocks(index, (Pattern("fused", frozenset({"Softmax"}), claims), *PATTERNS))
    assert not builders and [m.reason for m in misses] == ["mine, but broken"]


def test_a_softmax_written_out_is_read_by_its_view_and_matched_as_a_softmax() -> None:
    g = Nodes()
    g.inits += [weight("wq", 16, 16), weight("wk", 16, 16), weight("wv", 16, 16), weight("wo", 16, 16)]
    q, k, v = (g.add("MatMul", ["x", f"w{r}"], f"{r}_out") for r in "qkv")
    s = g.add("MatMul", [q, g.add("Transpose", [k], "kt_out", perm=[0, 2, 1])], "s_out")
    e = g.add("Exp", [s], "e_out")
    p = g.add("Div", [e, g.add("ReduceSum", [e, "last"], "sum_out", keepdims=1)], "p_out")
    g.inits.append(helper.make_tensor("last", 7, [1], [-1]))
    g.add("MatMul", [g.add("MatMul", [p, v], "ctx_out"), "wo"], "y")
    builders, misses = find_blocks(_index(g))
    assert not misses and [(b.anchor.name, b.anchor.op) for b in builders] == [("e", "Softmax")]
    assert find_blocks(_index(g), views=()) == ([], [])  # without the view, an Exp is no anchor


def test_a_decomposed_miss_names_the_node_where_it_failed() -> None:
    g = Nodes()
    g.inits += [weight("wq", 16, 16), weight("wk", 16, 16)]
    q, k = (g.add("MatMul", ["x", f"w{r}"], f"{r}_out") for r in "qk")
    s = g.add("MatMul", [q, g.add("Transpose", [k], "kt_out", perm=[0, 2, 1])], "s_out")
    g.add("ReduceMean", [g.add("Softmax", [s], "p_out", axis=-1)], "y")
    _, misses = find_blocks(_index(g))
    assert [(m.matcher, m.node, m.claimed) for m in misses] == [("decomposed", "p", True)]
    assert "does not feed a product with V" in misses[0].reason


def test_the_json_names_the_node_where_each_near_miss_failed(tmp_path: Path, schema_validator: Any) -> None:
    """``misses[].node`` is ``Miss.node``: the score product a walk stopped at, not the anchor; a miss
    that failed at its anchor (a weight-only source's module) names the anchor."""
    g = Nodes()
    g.inits += [weight("wq", 16, 16), weight("wk", 16, 16), weight("cls", 16, 4)]
    q, k = (g.add("MatMul", ["x", f"w{r}"], f"{r}_out") for r in "qk")
    s = g.add("MatMul", [q, g.add("Transpose", [k], "kt_out", perm=[0, 2, 1])], "s_out")
    g.add("ReduceMean", [g.add("Softmax", [s], "p_out", axis=-1)], "r_out")
    g.add("Softmax", [g.add("MatMul", ["x", "cls"], "logits_out")], "y", axis=-1)  # a classifier
    path = tmp_path / "m.onnx"
    onnx.save(model(g.nodes, g.inits, [value("x", 2, 8, 16)], [value("y", 2, 8, 4), value("r_out", 2, 8)]), path)
    data = report_to_dict(mhainspect.inspect(str(path)))
    schema_validator.validate(data)
    assert [(m["anchor"], m["node"]) for m in data["misses"]] == [("p", "p"), ("y", "logits")]

    from safetensors.numpy import save_file  # a latent-attention module: the miss is the module's own

    save_file({f"attn.{n}.weight": np.ones((8, 8), np.float32) for n in ("q_proj", "kv_a_proj", "o_proj")},
              str(tmp_path / "model.safetensors"))
    data = report_to_dict(mhainspect.inspect(str(tmp_path / "model.safetensors")))
    schema_validator.validate(data)
    assert [(m["anchor"], m["node"]) for m in data["misses"]] == [("attn", "attn")]
