"""Graphs that are not valid ONNX, and rotary tables, through the public entry points.

- Weights with an impossible shape, tensors written by two nodes and nodes without outputs are
  each named in one warning; the rest of the graph is still audited.
- A rotary table's frequencies (what reaches Cos/Sin) are no parameters; where two nodes write
  the tensor on that path the walk gives up rather than guess.
- Random graphs with all of these oddities: nothing but InputError escapes, and the same graph
  gives the same report twice.
- The weight bytes of the sample models are their stored tensors' bytes, shared storage once.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from mhainspect.errors import InputError
from mhainspect.frontends.onnx.loader import load_onnx
from mhainspect.ir.dataflow import GraphIndex
from mhainspect.ir.dtypes import lookup
from mhainspect.ir.graph import GraphKind, ModelGraph, Node, Tensor, TensorKind, ValueInfo
from mhainspect.ir.parameters import count_parameters
from mhainspect.pipeline import audit_graph
from mhainspect.render.json_render import report_to_dict

SAMPLES = sorted((Path(__file__).resolve().parents[1] / "sample_models").glob("*.onnx"))
X = (ValueInfo("x", (2, 4), "float32"),)


def _warning(report_warnings: tuple[str, ...], start: str) -> str:
    found = [w for w in report_warnings if w.startswith(start)]
    assert len(found) == 1, report_warnings
    return found[0]


def test_impossible_shapes_duplicate_writers_and_dead_nodes_are_each_one_warning() -> None:
    weights = {"w": Tensor("w", (4, 4), "float32", "w"), "huge": Tensor("huge", (2**40, 2**40), "float32", "huge"),
               "neg": Tensor("neg", (3, -1), "float32", "neg")}
    nodes = (Node("mm", "MatMul", ("x", "w"), ("h",)), Node("dup", "Relu", ("x",), ("h",)),
             Node("dead", "Identity", ("h",), ()), Node("out", "Relu", ("h",), ("y",)))
    report = audit_graph(ModelGraph("odd", GraphKind.ONNX, nodes, weights, X))
    impossible = _warning(report.warnings, "weights with an impossible shape")
    assert "'huge'" in impossible and "'neg'" in impossible and "'w'" not in impossible
    assert "'h' (2 nodes)" in _warning(report.warnings, "tensors produced by more than one node")
    assert "'dead'" in _warning(report.warnings, "nodes without outputs")
    assert report.model.total_params == 16  # w still counts; the impossible ones do not


def test_a_valid_graph_has_none_of_these_warnings() -> None:
    nodes = (Node("mm", "MatMul", ("x", "w"), ("y",)),)
    report = audit_graph(ModelGraph("ok", GraphKind.ONNX, nodes, {"w": Tensor("w", (4, 4), "float32", "w")}, X))
    assert report.warnings == () and report.model.total_params == 16


def _rotary(duplicate: bool) -> ModelGraph:
    inv_freq = Tensor("inv_freq", (4,), "float32", "k")
    nodes = [Node("a", "Mul", ("inv_freq", "x"), ("t",))]
    if duplicate:
        nodes.append(Node("b", "Identity", ("x",), ("t",)))  # a second writer of the tensor Cos reads
    nodes.append(Node("c", "Cos", ("t",), ("cos",)))
    return ModelGraph("rotary", GraphKind.ONNX, tuple(nodes), {"inv_freq": inv_freq}, (ValueInfo("x", (4,), "float32"),))


@pytest.mark.parametrize("duplicate", [False, True])
def test_rotary_frequencies_are_no_parameters(duplicate: bool) -> None:
    assert count_parameters(GraphIndex(_rotary(duplicate))) == 0


def _random_graph(rng: random.Random) -> ModelGraph:
    """A dependency-ordered graph over a few weights, with rotary-like Cos/Sin chains and oddities."""
    ops = ["Cos", "Sin", "Mul", "Concat", "Unsqueeze", "Reshape", "Transpose", "Softmax", "Add", "Relu", "Shape",
           "Gather", "DequantizeLinear", "MatMulInteger", "DynamicQuantizeLinear", "Expand", "LSTM", "MatMulNBits",
           "Cast", "Less", "Equal", "Slice", "MatMul"]
    weights: dict[str, Tensor] = {}
    for i in range(rng.randint(1, 6)):
        shape = rng.choice([(4,), (4, 4), (1,), (8, 2), (3, -1), (2**40, 2**40)])
        name = rng.choice([f"layer{i}.w", f"w{i}"])
        weights[name] = Tensor(name, shape, rng.choice(["float32", "int64", "int8"]), f"s{i % 4}",
                               kind=rng.choice([None, None, TensorKind.PARAMETER, TensorKind.BUFFER]), is_constant_node=rng.random() < 0.2)
    tensors = list(weights) + ["x"]
    nodes: list[Node] = []
    for i in range(rng.randint(1, 30)):
        ins = tuple(rng.choice(tensors) for _ in range(rng.randint(1, 4)))
        n_out = rng.choice([1, 1, 1, 2, 0])
        # Mostly fresh names; sometimes empty, sometimes a name already produced (not valid ONNX).
        outs = tuple(rng.choice([f"t{i}_{j}"] * 8 + ["", rng.choice([t for t in tensors if t not in ins] or [""])])
                     for j in range(n_out))
        name = rng.choice([f"n{i}", f"a/body0/n{i}", f"a/body1/n{i}"])
        nodes.append(Node(name, rng.choice(ops), ins, outs))
        tensors.extend(o for o in outs if o and o not in weights)
    return ModelGraph("random", GraphKind.ONNX, tuple(nodes), weights, inputs=X)


def test_random_invalid_graphs_give_a_report_or_one_input_error() -> None:
    reports = 0
    for seed in range(300):
        graph = _random_graph(random.Random(seed))
        try:
            first = report_to_dict(audit_graph(graph))
        except InputError as exc:  # a cycle: refused before anything is counted
            assert "\n" not in str(exc) and "cycle" in str(exc), seed
            continue
        assert json.dumps(first) == json.dumps(report_to_dict(audit_graph(graph))), seed
        assert 0 <= first["model"]["total_params"] <= sum(
            math.prod(t.shape) for t in graph.weights.values() if all(d >= 0 for d in t.shape)), seed
        reports += 1
    assert reports > 200


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_weight_bytes_are_the_stored_tensors_once_each(path: Path) -> None:
    graph = load_onnx(path)
    report = audit_graph(graph, path=str(path), fmt="onnx")
    storages = {t.storage_key: t for t in graph.weights.values()}
    expected = 0
    for t in storages.values():
        found = lookup(t.dtype)
        assert found is not None and found.block_size == 1, t.dtype
        expected += int(t.numel * found.block_bytes)
    assert report.model.weight_bytes == expected
