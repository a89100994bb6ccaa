"""The graph index and the shape folding, held to what they promise rather than to how they do it.

- The order is topological whatever order the file stores its nodes in (file order kept when it
  is one already); a cycle is one InputError naming a node, the same from every entry point.
- Producers and consumers describe the graph's edges.
- Folded shapes are the shapes a runtime computes (onnxruntime runs the same shape arithmetic),
  and broadcasting is numpy's.
- Hostile values (int64 overflows, huge symbols) never become dims: whatever is stored stays
  within the documented bounds, and nothing but InputError escapes.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from mhainspect.errors import InputError
from mhainspect.frontends.onnx.loader import load_onnx, model_to_graph
from mhainspect.ir.dataflow import GraphIndex, topological_order
from mhainspect.ir.graph import AttrValue, GraphKind, ModelGraph, Node, Tensor, ValueInfo
from mhainspect.ir.symbolic import Dim

SAMPLES = sorted((Path(__file__).resolve().parents[1] / "sample_models").glob("*.onnx"))

# The evaluator's bounds on anything it stores (ir/symbolic.py): coefficients, symbols per dim,
# symbol length, rank, value length.
MAX_ABS_COEF, MAX_FACTORS, MAX_SYMBOL_LEN, MAX_VALUE_LEN = 1 << 64, 16, 256, 4096


def _random_graph(seed: int, *, untrusted: bool) -> ModelGraph:
    """Random ops over random weights (shape-like int constants among them); 30% stored out of order,
    some reading their own or a later output (cycles)."""
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
    return ModelGraph("random", GraphKind.ONNX, tuple(nodes), weights, inputs)


def _check_topological(graph: ModelGraph, order: list[Node]) -> None:
    assert sorted(id(n) for n in order) == sorted(id(n) for n in graph.nodes)  # every node, once
    made_by = {o: n for n in graph.nodes for o in n.outputs if o}
    done: set[int] = set()
    for n in order:
        for x in n.inputs:
            producer = made_by.get(x)
            if producer is not None and producer is not n and x not in graph.weights:
                assert id(producer) in done, f"{n.name} before the producer of {x}"
        done.add(id(n))


@pytest.mark.parametrize("untrusted", [False, True])
def test_order_is_topological_however_the_file_stores_the_nodes(untrusted: bool) -> None:
    checked = 0
    for seed in range(300):
        graph = _random_graph(seed, untrusted=untrusted)
        if len({o for n in graph.nodes for o in n.outputs}) < sum(len(n.outputs) for n in graph.nodes):
            continue  # a name written twice: which write a reader sees is the sanitizer's business
        try:
            index = GraphIndex(graph)
        except InputError as exc:
            with pytest.raises(InputError) as again:
                topological_order(graph)
            assert str(again.value) == str(exc) and ("cycle" in str(exc) or "its own output" in str(exc))
            continue
        assert [id(n) for n in topological_order(graph)] == [id(n) for n in index.order]
        _check_topological(graph, index.order)
        checked += 1
    assert checked > 150


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_sample_models_keep_their_file_order_and_edges(path: Path) -> None:
    graph = load_onnx(path)
    index = GraphIndex(graph)
    assert [id(n) for n in index.order] == [id(n) for n in graph.nodes]  # exporters write dependency order
    shuffled = ModelGraph(graph.source, graph.kind, tuple(random.Random(0).sample(graph.nodes, len(graph.nodes))),
                          graph.weights, graph.inputs, graph.outputs, graph.value_info, graph.opset)
    _check_topological(shuffled, GraphIndex(shuffled).order)
    for n in graph.nodes:
        for o in n.outputs:
            if o:
                assert index.producer[o] is n
        for i, x in enumerate(n.inputs):
            if x:
                assert (n, i) in index.consumers[x]
    assert sum(len(v) for v in index.consumers.values()) == sum(1 for n in graph.nodes for x in n.inputs if x)


def test_self_loop_message() -> None:
    nodes = (Node("a", "Relu", ("x",), ("y",)), Node("b", "Add", ("y", "z"), ("z",)))
    graph = ModelGraph("loop", GraphKind.ONNX, nodes, {}, (ValueInfo("x", (1,), "float32"),))
    with pytest.raises(InputError, match=r"node 'b' \(Add\) reads its own output"):
        GraphIndex(graph)
    with pytest.raises(InputError, match=r"node 'b' \(Add\) reads its own output"):
        topological_order(graph)


def _concrete(d: Dim, sizes: dict[str, int]) -> int | None:
    value = d.coef
    for f in d.factors:
        if f not in sizes:
            return None
        value *= sizes[f]
    return value


def test_broadcast_is_numpys() -> None:
    r = random.Random(0)
    sizes = {"b": 3, "s": 5}
    pool: list[int | str] = [1, 2, 3, 5, 8, "b", "s"]
    compared = 0
    for _ in range(400):
        a = tuple(r.choice(pool) for _ in range(r.randint(0, 4)))
        b = tuple(r.choice(pool) for _ in range(r.randint(0, 4)))
        graph = ModelGraph("bc", GraphKind.ONNX, (Node("add", "Add", ("a", "b"), ("y",)),), {},
                           (ValueInfo("a", a, "float32"), ValueInfo("b", b, "float32")))
        got = GraphIndex(graph).shapes.shape("y")
        concrete = [tuple(sizes[d] if isinstance(d, str) else d for d in s) for s in (a, b)]
        try:
            expected = np.broadcast_shapes(*concrete)
        except ValueError:
            continue  # not broadcastable: the evaluator may say anything but must not claim a wrong shape
        if got is None:
            continue
        assert tuple(_concrete(d, sizes) for d in got) == expected, (a, b, got)
        compared += 1
    assert compared > 200


def _shape_arithmetic_model(seed: int) -> onnx.ModelProto:
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains as exporters write them: each target
    a factorization of the input's 48 elements, its parts read from the input's shape, written as
    constants, or -1, now and then a wrong one (the runtime then refuses the model)."""
    r = random.Random(seed)
    inits: list[TensorProto] = []
    nodes = [helper.make_node("Shape", ["x"], ["s"])]
    outputs = []
    from_shape = {2: 0, 3: 1, 8: 2}  # a dim of x [2, 3, 8] by its size
    for i in range(r.randint(1, 4)):
        factors = r.choice([[2, 3, 8], [6, 8], [2, 24], [2, 3, 2, 4], [48], [4, 12], [2, 2, 2, 2, 3]])
        r.shuffle(factors)
        if r.random() < 0.1:
            factors[0] += 1  # a target of the wrong size
        minus_one = r.randrange(len(factors)) if r.random() < 0.5 else -1
        parts = []
        for j, f in enumerate(factors):
            if j == minus_one:
                value = -1
            elif f in from_shape and r.random() < 0.5:
                inits.append(helper.make_tensor(f"i{i}_{j}", TensorProto.INT64, [], [from_shape[f]]))
                inits.append(helper.make_tensor(f"a{i}_{j}", TensorProto.INT64, [1], [0]))
                nodes.append(helper.make_node("Gather", ["s", f"i{i}_{j}"], [f"g{i}_{j}"], axis=0))
                nodes.append(helper.make_node("Unsqueeze", [f"g{i}_{j}", f"a{i}_{j}"], [f"u{i}_{j}"]))
                parts.append(f"u{i}_{j}")
                continue
            else:
                value = f
            inits.append(helper.make_tensor(f"c{i}_{j}", TensorProto.INT64, [1], [value]))
            parts.append(f"c{i}_{j}")
        nodes.append(helper.make_node("Concat", parts, [f"t{i}"], axis=0))
        source = r.choice(["x"] + [f"r{k}" for k in range(i)])
        nodes.append(helper.make_node("Reshape", [source, f"t{i}"], [f"r{i}"]))
        outputs.append(helper.make_tensor_value_info(f"r{i}", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "arith", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8])],
                              outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_folded_shapes_are_what_onnxruntime_computes() -> None:
    ort = pytest.importorskip("onnxruntime")
    x = np.zeros((2, 3, 8), np.float32)
    quiet = ort.SessionOptions()
    quiet.log_severity_level = 4  # the refused reshapes are expected
    compared = symbolic_compared = 0
    for seed in range(120):
        model = _shape_arithmetic_model(seed)
        try:
            session = ort.InferenceSession(model.SerializeToString(), quiet, providers=["CPUExecutionProvider"])
            results = session.run(None, {"x": x})
        except Exception:  # noqa: BLE001 - a reshape the runtime refuses: nothing to compare
            continue
        concrete = GraphIndex(model_to_graph(model, "arith")).shapes
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
        model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "seq"
        symbolic = GraphIndex(model_to_graph(model, "arith")).shapes
        for out, result in zip(model.graph.output, results):
            got = concrete.shape(out.name)
            assert got is not None and tuple(d.coef for d in got) == result.shape, (seed, out.name)
            sym = symbolic.shape(out.name)
            if sym is not None and all(_concrete(d, {"batch": 2, "seq": 3}) is not None for d in sym):
                assert tuple(_concrete(d, {"batch": 2, "seq": 3}) for d in sym) == result.shape, (seed, out.name)
                symbolic_compared += 1
            compared += 1
    assert compared > 100 and symbolic_compared > 50


def _within_bounds(dims: tuple[object, ...], max_len: int) -> bool:
    if len(dims) > max_len:
        return False
    for d in dims:
        if isinstance(d, Dim) and (abs(d.coef) > MAX_ABS_COEF or len(d.factors) > MAX_FACTORS
                                   or any(len(f) > MAX_SYMBOL_LEN for f in d.factors)):
            return False
    return True


def test_hostile_values_never_become_dims() -> None:
    stored = 0
    for seed in range(300):
        graph = _random_graph(seed, untrusted=True)
        try:
            index = GraphIndex(graph)
        except InputError:
            continue
        for n in index.order:
            for o in n.outputs:
                if o in graph.weights or o in {v.name for v in graph.inputs}:
                    continue
                shape, value = index.shapes.shape(o), index.shapes.value(o)
                if shape is not None:
                    assert _within_bounds(shape, 64), (seed, o, shape)
                    stored += 1
                if value is not None:
                    assert _within_bounds(value, MAX_VALUE_LEN), (seed, o)
    assert stored > 300
