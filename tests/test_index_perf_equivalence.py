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

from mhainspect.errors import InputError
from mhainspect.frontends.onnx.loader import load_onnx
from mhainspect.ir.dataflow import (
    SHAPE_INPUTS,
    GraphIndex,
    _kahn,
    _learned_tokens,
    _producer_positions,
    topological_order,
)
from mhainspect.ir.graph import AttrValue, ModelGraph, Node, Tensor, ValueInfo
from mhainspect.ir.symbolic import (
    _DISPATCH,
    MAX_RANK,
    Dim,
    Shape,
    ShapeEvaluator,
    Value,
    _broadcast,
    _broadcast2,
    _ints_of,
    _resolve_reshape,
    numel,
    sym_dim,
)

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
                not n.inputs and n.op != "Constant" and n.op.startswith("Random")) or (
                n.op in ("Expand", "Tile") and _learned_tokens(graph, n.inputs)):
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


# -- the evaluator's fast paths against the straightforward handlers --------------------------------

def _plain_reshape(ev: ShapeEvaluator, node: Node) -> None:
    """Reshape always through _resolve_reshape and the fully checked _set (no target-as-is path)."""
    target = ev._in_value(node, 1)
    if target is None:
        tshape = ev._in_shape(node, 1)
        if tshape is not None and len(tshape) == 1 and tshape[0].is_int and 0 <= tshape[0].coef <= MAX_RANK:
            ev._set(node, tuple(sym_dim(ev._new_sym()) for _ in range(tshape[0].coef)))
        return
    out = _resolve_reshape(ev._in_shape(node, 0), target, bool(node.attrs.get("allowzero", 0)))
    if out is None:
        out = tuple(t if isinstance(t, Dim) and not (t.is_int and t.coef <= 0) else sym_dim(ev._new_sym())
                    for t in target)
    ev._set(node, out, ev._in_value(node, 0) if len(out) <= 1 else None)


def _plain_concat(ev: ShapeEvaluator, node: Node) -> None:
    """Concat with list-built shapes and values and the fully checked _set."""
    axis = int(node.attrs.get("axis", 0) or 0)  # type: ignore[arg-type]
    shapes = [ev.shapes.get(x) if x else None for x in node.inputs]
    values = [ev.values.get(x) if x else None for x in node.inputs]
    value = tuple(x for v in values if v is not None for x in v) if None not in values else None
    if None in shapes or not shapes:
        if value is not None:
            ev._set(node, (Dim(len(value)),), value)
        return
    known = [s for s in shapes if s is not None]
    a = axis + len(known[0]) if axis < 0 else axis
    total: Dim | None = None
    coef = 0
    for s in known:
        d = s[a]
        if total is None and not d.factors:
            coef += d.coef
        elif total is None:
            total = d if coef == 0 else sym_dim(f"({Dim(coef)}+{d})")
        else:
            total = sym_dim(f"({total}+{d})")
    ev._set(node, known[0][:a] + (total if total is not None else Dim(coef),) + known[0][a + 1:], value)


class _PlainEvaluator(ShapeEvaluator):
    """Every store fully checked by _set, int_values recomputed on every call."""

    def _put(self, node: Node, shape: Shape | None, value: Value | None) -> None:
        self._set(node, shape, value)

    def int_values(self, name: str) -> tuple[int, ...] | None:
        v = self.values.get(name)
        return None if v is None else _ints_of(v)


def _shape_arith_graph(seed: int, *, untrusted: bool) -> ModelGraph:
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains with 0, -1, symbols and big ints."""
    r = random.Random(seed)
    big = [2**70] if untrusted else []
    weights: dict[str, Tensor] = {}
    nodes: list[Node] = [Node("shape", "Shape", ("x",), ("s",))]
    for i in range(r.randint(1, 6)):
        parts: list[str] = []
        for j in range(r.randint(1, 5)):
            if r.random() < 0.4:
                nodes.append(Node(f"g{i}_{j}", "Gather", ("s", f"i{i}_{j}"), (f"gv{i}_{j}",), {"axis": 0}))
                weights[f"i{i}_{j}"] = Tensor(f"i{i}_{j}", (), "int64", f"i{i}_{j}", int_value=(r.randint(0, 2),))
                weights[f"a{i}_{j}"] = Tensor(f"a{i}_{j}", (1,), "int64", f"a{i}_{j}", int_value=(0,))
                nodes.append(Node(f"u{i}_{j}", "Unsqueeze", (f"gv{i}_{j}", f"a{i}_{j}"), (f"uv{i}_{j}",)))
                parts.append(f"uv{i}_{j}")
            else:
                c = r.choice([-1, -1, 0, 1, 2, 4, 8, 16, -2, *big])
                weights[f"c{i}_{j}"] = Tensor(f"c{i}_{j}", (1,), "int64", f"c{i}_{j}", int_value=(c,))
                parts.append(f"c{i}_{j}")
        nodes.append(Node(f"cat{i}", "Concat", tuple(parts), (f"t{i}",), {"axis": r.choice([0, -1])}))
        source = r.choice(["x"] + [f"r{k}" for k in range(i)])
        nodes.append(Node(f"reshape{i}", "Reshape", (source, f"t{i}"), (f"r{i}",),
                          {"allowzero": 1} if r.random() < 0.2 else {}))
    symbol = "s" * 300 if untrusted and r.random() < 0.5 else "seq"
    return ModelGraph("arith", "onnx", tuple(nodes), weights, (ValueInfo("x", ("batch", symbol, 8), "float32"),))


@pytest.mark.parametrize("untrusted", [False, True])
def test_evaluator_fast_paths_match_plain_handlers(untrusted: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    graphs = [_shape_arith_graph(seed, untrusted=untrusted) for seed in range(200)]
    graphs += [_random_graph(seed, untrusted=untrusted) for seed in range(200)]
    graphs += [load_onnx(p) for p in SAMPLES]
    fast: list[tuple[list[tuple[str, Shape]], list[tuple[str, Value]]]] = []
    orders: list[list[Node]] = []
    for graph in graphs:
        try:
            order = topological_order(graph)
        except InputError:  # a cyclic random graph
            order = []
        orders.append(order)
        ev = ShapeEvaluator(graph, order)
        fast.append((list(ev.shapes.items()), list(ev.values.items())))
        for name in ev.values:  # memoized answers, asked twice, equal the recomputed ones
            assert ev.int_values(name) == ev.int_values(name) == _ints_of(ev.values[name])
    monkeypatch.setitem(_DISPATCH, "Reshape", _plain_reshape)
    monkeypatch.setitem(_DISPATCH, "Concat", _plain_concat)
    reshaped = 0
    for graph, order, (shapes, values) in zip(graphs, orders, fast):
        plain = _PlainEvaluator(graph, order)
        assert shapes == list(plain.shapes.items())
        assert values == list(plain.values.items())
        reshaped += sum(1 for n in graph.nodes if n.op == "Reshape" and n.outputs[0] in plain.shapes)
    assert reshaped > 200  # the chains do reach the Reshapes
