"""The index's fast paths give exactly what the general code gives.

GraphIndex takes one fused pass when the file is already in dependency order and falls back to
Kahn's algorithm otherwise; ShapeEvaluator skips re-checking dims it stored before. These tests
run both sides on the sample models and on random graphs (shuffled, cyclic, with out-of-bounds
seeds) and compare every field.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from mhainspect.dataflow import SHAPE_INPUTS, GraphIndex, _kahn, _producer_positions, topological_order
from mhainspect.errors import InputError
from mhainspect.graph import AttrValue, ModelGraph, Node, Tensor, ValueInfo
from mhainspect.loaders.onnx_loader import load_onnx
from mhainspect.symbolic import Dim, ShapeEvaluator, _broadcast, _broadcast2, numel, sym_dim

SAMPLES = sorted((Path(__file__).resolve().parents[1] / "sample_models").glob("*.onnx"))


def _general_index(graph: ModelGraph) -> GraphIndex:
    """GraphIndex built the plain way: Kahn's order, then separate passes; the oracle for the fused pass."""
    index = GraphIndex.__new__(GraphIndex)
    index.graph = graph
    order = _kahn(graph, _producer_positions(graph))
    index.order = order
    index.position = {id(n): i for i, n in enumerate(order)}
    index.by_name = {n.name: n for n in order}
    index.producer, index.consumers = {}, {}
    for n in order:
        for o in n.outputs:
            if o:
                index.producer[o] = n
        for i, x in enumerate(n.inputs):
            if x:
                index.consumers.setdefault(x, []).append((n, i))
    act = {v.name for v in graph.inputs if v.name not in graph.weights}
    for n in order:
        if n.op in ("Shape", "Size"):
            continue
        shape_only = SHAPE_INPUTS.get(n.op, frozenset())
        if any(x in act for i, x in enumerate(n.inputs) if i not in shape_only) or (
                not n.inputs and n.op != "Constant" and n.op.startswith("Random")):
            act.update(o for o in n.outputs if o)
    index.activations = act
    index.shapes = ShapeEvaluator(graph, index.order)
    return index


def _same_index(a: GraphIndex, b: GraphIndex) -> None:
    assert [id(n) for n in a.order] == [id(n) for n in b.order]
    assert list(a.position.items()) == list(b.position.items())
    assert [(k, id(v)) for k, v in a.by_name.items()] == [(k, id(v)) for k, v in b.by_name.items()]
    assert [(k, id(v)) for k, v in a.producer.items()] == [(k, id(v)) for k, v in b.producer.items()]
    assert [(k, [(id(n), i) for n, i in v]) for k, v in a.consumers.items()] == [
        (k, [(id(n), i) for n, i in v]) for k, v in b.consumers.items()]
    assert a.activations == b.activations and list(a.activations) == list(b.activations)
    assert list(a.shapes.shapes.items()) == list(b.shapes.shapes.items())
    assert list(a.shapes.values.items()) == list(b.shapes.values.items())


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_fused_index_matches_general_on_samples(path: Path) -> None:
    graph = load_onnx(path)
    _same_index(GraphIndex(graph), _general_index(graph))


def _random_graph(seed: int, *, untrusted: bool) -> ModelGraph:
    r = random.Random(seed)
    ops = ["Unsqueeze", "Concat", "Mul", "Add", "Reshape", "MatMul", "Transpose", "Slice", "Gather", "Shape",
           "Expand", "ReduceMean", "Cast", "Sqrt", "Squeeze", "Where", "Equal", "Identity", "Split", "Relu"]
    ints = [0, 1, 2, 3, 4, 8, 64, -1, -2, 2**63 - 1] + ([2**70, -(2**66)] if untrusted else [])
    weights: dict[str, Tensor] = {}
    names: list[str] = []
    for i in range(r.randint(1, 6)):
        iv = tuple(r.choice(ints) for _ in range(r.randint(0, 4))) if r.random() < 0.6 else None
        shape = (len(iv),) if iv is not None else tuple(r.choice([1, 2, 4, 8]) for _ in range(r.randint(0, 3)))
        weights[f"w{i}"] = Tensor(f"w{i}", shape, "float32", f"w{i}", int_value=iv)
        names.append(f"w{i}")
    symbol = "s" * 300 if untrusted else "seq"
    inputs = (ValueInfo("x", ("batch", symbol, 8), "float32"),)
    names.append("x")
    nodes: list[Node] = []
    attr_values: list[AttrValue] = [0, 1, -1, (0,), (-1,), (1, 0), (0, 2, 1)]
    for i in range(r.randint(1, 30)):
        op = r.choice(ops)
        ins = tuple(r.choice(names) for _ in range(r.choice([1, 2, 2, 3, 5])))
        outs = (f"t{i}",) if r.random() < 0.95 else (r.choice(names),)
        attrs: dict[str, AttrValue] = {k: r.choice(attr_values)
                 for k in r.sample(["axis", "axes", "perm", "keepdims", "to"], r.randint(0, 2))}
        nodes.append(Node(f"n{i}", op, ins, outs, attrs))
        names.extend(outs)
    if r.random() < 0.3:
        r.shuffle(nodes)
    return ModelGraph("random", "onnx", tuple(nodes), weights, inputs)


@pytest.mark.parametrize("untrusted", [False, True])
def test_fused_index_matches_general_on_random_graphs(untrusted: bool) -> None:
    for seed in range(300):
        graph = _random_graph(seed, untrusted=untrusted)
        try:
            fast = GraphIndex(graph)
        except InputError as e:
            with pytest.raises(InputError) as general:
                _general_index(graph)
            assert str(general.value) == str(e)
            continue
        _same_index(fast, _general_index(graph))
        assert [id(n) for n in topological_order(graph)] == [id(n) for n in fast.order]


def test_self_loop_message_is_unchanged() -> None:
    nodes = (Node("a", "Relu", ("x",), ("y",)), Node("b", "Add", ("y", "z"), ("z",)))
    graph = ModelGraph("loop", "onnx", nodes, {}, (ValueInfo("x", (1,), "float32"),))
    with pytest.raises(InputError, match=r"node 'b' \(Add\) reads its own output"):
        GraphIndex(graph)
    with pytest.raises(InputError, match=r"node 'b' \(Add\) reads its own output"):
        topological_order(graph)


def test_binary_broadcast_and_numel_match_the_general_forms() -> None:
    r = random.Random(0)
    pool = [Dim(1), Dim(2), Dim(8), Dim(0), sym_dim("b"), sym_dim("s"), Dim(3, ("b", "s"))]
    for _ in range(2000):
        a = tuple(r.choice(pool) for _ in range(r.randint(0, 4)))
        b = tuple(r.choice(pool) for _ in range(r.randint(0, 4)))
        assert _broadcast2(a, b) == _broadcast([a, b])
        slow = Dim(1)
        for d in a:
            slow = Dim(slow.coef * d.coef, tuple(sorted(slow.factors + d.factors)))
        assert numel(a) == slow
