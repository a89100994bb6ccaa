"""The shortcuts in count_parameters and sanitize_graph give exactly what the plain code gives.

count_parameters walks to Cos/Sin (_only_feeds_trig) only from tensors that reach a Cos/Sin input;
sanitize_graph checks each distinct weight shape once and looks for repeated output names only
when some name repeats. The plain versions below are the code before those shortcuts; both sides
run on the sample models, the zoo (MHAINSPECT_ZOO_DIR) and random graphs built to hit every branch
(rotary tables, duplicate producers, nodes without outputs, impossible shapes).
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
from pathlib import Path

import pytest

from mhainspect.errors import InputError
from mhainspect.frontends.onnx.frontend import _SUBGRAPH_PREFIX, _impossible_shape, _listed, sanitize_graph
from mhainspect.frontends.onnx.loader import load_onnx
from mhainspect.frontends.result import StoredTensor, byte_rate
from mhainspect.frontends.size_inputs import _graph_tensors
from mhainspect.ir.dataflow import SHAPE_INPUTS, GraphIndex
from mhainspect.ir.dtypes import is_float
from mhainspect.ir.graph import ModelGraph, Node, Tensor, ValueInfo
from mhainspect.ir.parameters import (
    _TRIG_PATH,
    QUANT_PARAM_INPUTS,
    QUANT_WEIGHT_INPUTS,
    _only_feeds_trig,
    _trig_sources,
    count_parameters,
    parameter_counts,
    scan_stored,
)

_ROOT = Path(__file__).resolve().parents[1]
_ZOO = os.environ.get("MHAINSPECT_ZOO_DIR")
MODELS = sorted((_ROOT / "sample_models").glob("*.onnx")) + (sorted(Path(_ZOO).glob("*.onnx")) if _ZOO else [])


_NARROW_INTS = {"int8", "uint8", "int4", "uint4", "int2", "uint2"}
_STATE = {"LSTM": {4, 5, 6}, "GRU": {4, 5, 6}, "RNN": {4, 5, 6}, "DynamicQuantizeLSTM": {4, 5, 6}}
_LAYOUT = {"Expand", "Tile", "Reshape", "Unsqueeze", "Squeeze", "Identity", "Flatten", "Slice"}
_COMPARE = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}


_INTS = {"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "int4", "uint4", "int2", "uint2"}


def _scale_operand(index: GraphIndex, tensor: str, hops: int = 3) -> bool:
    """``tensor`` is a quantization scale, an integer product, or a Cast of a stored integer weight."""
    node = index.producer.get(tensor)
    if node is None:
        return False
    if node.op in ("DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "QuantizeLinear"):
        return node.op != "DynamicQuantizeLinear" or tensor != node.outputs[0]
    if node.op not in ("Cast", "Mul", "Reshape", "Identity", "Transpose"):
        return False
    source = index.graph.weights.get(node.inputs[0]) if node.op == "Cast" and node.inputs else None
    if source is not None:
        return source.dtype in _INTS and source.numel > 1
    return hops > 1 and _scale_operand(index, node.inputs[0], hops - 1)


def _read_as_data(index: GraphIndex, name: str, hops: int = 4) -> bool:
    """Some use reads ``name`` as values (not shape, scale, zero point or recurrent state)."""
    for u, pos in index.users(name):
        if pos in QUANT_PARAM_INPUTS.get(u.op, ()) or pos in _STATE.get(u.op, ()) or pos in SHAPE_INPUTS.get(u.op, ()):
            continue
        if u.op == "Mul" and len(u.inputs) == 2 and _scale_operand(index, u.inputs[1 - pos]):
            continue  # multiplied with a quantization scale or a decoded integer weight: a scale
        if u.op in ("Mul", "Div", "Sub", "Add") and index.has_op("Cast") and index.affine_operand(u) not in (None, pos):
            continue  # the scale or zero point of an integer weight dequantized by arithmetic
        if u.op in _COMPARE or (u.op == "Cast" and u.attrs.get("to") == 9):
            continue  # made a bool: a mask
        if u.op in _LAYOUT and pos == 0:
            if hops > 1 and any(_read_as_data(index, o, hops - 1) for o in u.outputs if o):
                return True
            continue
        return True
    return False


def _decodes(index: GraphIndex, name: str, hops: int = 4) -> bool:
    for u, pos in index.users(name):
        if (u.op == "Cast" and u.attrs.get("to") in (1, 10, 11, 16, 17, 18, 19, 20, 23, 24)) or (
                u.op in ("CastLike", "DequantizeLinear") and pos == 0) or (
                u.op in QUANT_WEIGHT_INPUTS and pos not in QUANT_PARAM_INPUTS.get(u.op, ())):
            return True
        if hops > 1 and pos == 0 and u.op in ("Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten",
                                              "Expand", "Slice", "Gather", "Split", "Concat", "Cast"):
            if any(_decodes(index, o, hops - 1) for o in u.outputs if o):
                return True
        if hops > 1 and u.op in ("Mul", "Div", "Sub", "Add") and index.affine_operand(u) == pos:
            if any(_decodes(index, o, hops - 1) for o in u.outputs if o):
                return True  # integer casts and affine steps of a dequantization by arithmetic
    return False


def _plain_learned_scalar(index: GraphIndex, name: str, t: Tensor) -> bool:
    """A one-element Constant named by a module path, a float, read by arithmetic with an activation."""
    if not t.shape or "." not in name or "/" in name or ":" in name or name.startswith(".") or not is_float(t.dtype):
        return False
    return any(u.op in ("Mul", "Add", "Sub", "Div") and len(u.inputs) == 2 and index.is_activation(u.inputs[1 - pos])
               for u, pos in index.users(name))


def _feeds_product(index: GraphIndex, name: str, hops: int = 4) -> bool:
    """The constant operand of a MatMul/Gemm/FusedMatMul/Einsum/Conv with an activation, through layout ops."""
    for u, pos in index.users(name):
        if u.op in ("MatMul", "Gemm", "FusedMatMul", "Einsum", "Conv") and pos < 2 and len(u.inputs) >= 2 \
                and index.is_activation(u.inputs[1 - pos]):
            return True
        if hops > 1 and pos == 0 and u.op in ("Transpose", "Reshape", "Cast", "Identity", "Unsqueeze", "Squeeze",
                                              "Flatten"):
            if any(_feeds_product(index, o, hops - 1) for o in u.outputs if o):
                return True
    return False


def _plain_count(index: GraphIndex) -> int:
    """The counting rules of mhainspect.ir.parameters written plainly: every weight walked to Cos/Sin."""
    seen: set[str] = set()
    total = 0
    for name, t in index.graph.weights.items():
        if not t.shape or t.storage_key in seen:
            continue
        if t.kind is not None and t.kind != "parameter" and not (t.kind == "constant" and _feeds_product(index, name)):
            continue
        if t.numel == 1 and t.is_constant_node and not _plain_learned_scalar(index, name, t):
            continue
        if t.numel == 1 and not t.is_constant_node and "." not in t.name and t.kind != "parameter":
            continue
        quantized = [(u, pos) for u, pos in index.users(name) if pos in QUANT_WEIGHT_INPUTS.get(u.op, ())]
        if quantized:
            u, pos = quantized[0]
            count = t.numel
            if u.op == "MatMulNBits" and pos == 1 and isinstance(u.attrs.get("K"), int) and isinstance(u.attrs.get("N"), int):
                count = int(u.attrs["K"]) * int(u.attrs["N"])  # type: ignore[call-overload]
            elif u.op == "GatherBlockQuantized" and pos == 0 and t.dtype == "uint8":
                count = t.numel * (8 // int(u.attrs.get("bits", 4)))  # type: ignore[call-overload]
        elif not _read_as_data(index, name):
            continue
        elif is_float(t.dtype):
            if _only_feeds_trig(index, name):
                continue
            count = t.numel
        elif t.dtype in _NARROW_INTS and _decodes(index, name):
            count = t.numel
        else:
            continue
        seen.add(t.storage_key)
        total += count
    return total


def _plain_sanitize(graph: ModelGraph) -> ModelGraph:
    import dataclasses

    warnings = list(graph.warnings)
    bad = {name: why for name, t in graph.weights.items() if (why := _impossible_shape(t)) is not None}
    weights = graph.weights
    if bad:
        weights = {name: t for name, t in graph.weights.items() if name not in bad}
        warnings.append(_listed("weights with an impossible shape",
                                [f"'{n}' {list(graph.weights[n].shape)} ({why})" for n, why in bad.items()],
                                "the file is corrupt; these are not counted"))
    seen: set[str] = set()
    repeated: set[str] = set()
    for n in graph.nodes:
        for o in n.outputs:
            if o in seen:
                repeated.add(o)
            seen.add(o)
    repeated.discard("")
    producers: dict[tuple[str, str], int] = {}
    for n in graph.nodes if repeated else ():
        if not repeated.intersection(n.outputs):
            continue
        m = re.match(_SUBGRAPH_PREFIX, n.name)
        scope = m.group(1) if m else ""
        for o in n.outputs:
            if o in repeated:
                producers[scope, o] = producers.get((scope, o), 0) + 1
    dup = [f"'{name}' ({count} nodes)" for (_, name), count in producers.items() if count > 1]
    if dup:
        warnings.append(_listed("tensors produced by more than one node", dup,
                                "not valid ONNX; the analysis follows one producer of each"))
    nodes = graph.nodes
    dead = [n.name for n in nodes if not n.outputs]
    if dead:
        nodes = tuple(n for n in nodes if n.outputs)
        warnings.append(_listed("nodes without outputs", [f"'{n}'" for n in dead], "not valid ONNX; ignored"))
    if not bad and not dup and not dead:
        return graph
    return dataclasses.replace(graph, nodes=nodes, weights=weights, warnings=tuple(warnings))


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_models_count_and_sanitize_as_plain_code(path: Path) -> None:
    graph = load_onnx(path)
    clean = sanitize_graph(graph)
    assert clean == _plain_sanitize(graph)
    index = GraphIndex(clean)
    assert count_parameters(index) == _plain_count(index)


_OPS = sorted(_TRIG_PATH) + ["Cos", "Sin", "Softmax", "Add", "Relu", "Shape", "Reshape", "Gather", "DequantizeLinear",
                             "MatMulInteger", "DynamicQuantizeLinear", "Expand", "LSTM", "MatMulNBits", "Mul", "Cast",
                             "Cast", "Mul", "Less", "Equal", "Slice"]


def _random_graph(rng: random.Random) -> ModelGraph:
    """A dependency-ordered graph over a few weights, with rotary-like Cos/Sin chains and oddities."""
    weights: dict[str, Tensor] = {}
    for i in range(rng.randint(1, 6)):
        shape = rng.choice([(4,), (4, 4), (1,), (8, 2), (3, -1), (2**40, 2**40)])
        name = rng.choice([f"layer{i}.w", f"w{i}"])
        weights[name] = Tensor(name, shape, rng.choice(["float32", "int64", "int8"]), f"s{i % 4}",
                               kind=rng.choice([None, None, "parameter", "buffer"]), is_constant_node=rng.random() < 0.2)
    tensors = list(weights) + ["x"]
    nodes: list[Node] = []
    for i in range(rng.randint(1, 30)):
        ins = tuple(rng.choice(tensors) for _ in range(rng.randint(1, 4)))
        n_out = rng.choice([1, 1, 1, 2, 0])
        # Mostly fresh names; sometimes empty, sometimes a name already produced (not valid ONNX).
        outs = tuple(rng.choice([f"t{i}_{j}"] * 8 + ["", rng.choice([t for t in tensors if t not in ins] or [""])])
                     for j in range(n_out))
        name = rng.choice([f"n{i}", f"a/body0/n{i}", f"a/body1/n{i}"])
        nodes.append(Node(name, rng.choice(_OPS), ins, outs))
        tensors.extend(o for o in outs if o and o not in weights)
    return ModelGraph("random", "onnx", tuple(nodes), weights, inputs=(ValueInfo("x", (2, 4), "float32"),))


def test_random_graphs_count_and_sanitize_as_plain_code() -> None:
    compared = 0
    for seed in range(400):
        graph = _random_graph(random.Random(seed))
        clean = sanitize_graph(graph)
        assert clean == _plain_sanitize(graph), seed
        try:
            index = GraphIndex(clean)
        except InputError as exc:  # a cycle: the index refuses the graph before anything is counted
            assert "cycle" in str(exc), seed
            continue
        assert count_parameters(index) == _plain_count(index), seed
        compared += 1
    assert compared >= 250  # most random graphs are acyclic: the comparison really ran


def test_trig_sources_give_up_on_duplicate_producers() -> None:
    w = Tensor("inv_freq", (4,), "float32", "k")
    nodes = (Node("a", "Mul", ("inv_freq", "x"), ("t",)), Node("b", "Identity", ("x",), ("t",)),
             Node("c", "Cos", ("t",), ("cos",)))
    index = GraphIndex(ModelGraph("dup", "onnx", nodes, {"inv_freq": w}, inputs=(ValueInfo("x", (4,), "float32"),)))
    # The index follows node b for "t"; the walk back from Cos would miss inv_freq behind node a.
    assert _trig_sources(index) is None
    assert count_parameters(index) == _plain_count(index) == 0


def _plain_graph_tensors(index: GraphIndex, parameter_keys: frozenset[str]) -> list[StoredTensor]:
    """size._graph_tensors before the shared walk: every stored tensor in file order, plain-typed
    non-parameter Constant values summed per dtype."""
    out: list[StoredTensor] = []
    constants: dict[str, int] = {}
    for name, t in index.graph.weights.items():
        rate = byte_rate(t.dtype)
        plain = rate is not None and rate[0] == 1 and rate[2] == 1
        if plain and t.is_constant_node and t.storage_key not in parameter_keys:
            constants[t.dtype] = constants.get(t.dtype, 0) + t.numel
            continue
        out.append(StoredTensor(name, t.dtype, t.numel, t.storage_key, t.storage_key in parameter_keys,
                                None if rate is not None else t.external_length))
    out.extend(StoredTensor(f"(Constant values, {d})", d, n, f"constants:{d}", False) for d, n in constants.items())
    return out


def _stored_as_plain_code(index: GraphIndex) -> None:
    scan = scan_stored(index)
    assert scan.parameters == parameter_counts(index)
    fast = _graph_tensors(index, scan)
    plain = _plain_graph_tensors(index, frozenset(scan.parameters))
    # The same tensors; only the order of the per-dtype sums of Constant values may differ.
    listed = [t for t in plain if not t.storage_key.startswith("constants:")]
    assert [t for t in fast if not t.storage_key.startswith("constants:")] == listed
    assert sorted(fast) == sorted(plain)
    assert len(scan.scalar_constants) + len(scan.others) == len(index.graph.weights)


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_models_stored_tensors_as_plain_code(path: Path) -> None:
    _stored_as_plain_code(GraphIndex(sanitize_graph(load_onnx(path))))


def test_random_stored_tensors_as_plain_code() -> None:
    """Constant values of every kind: one-element ones of sized and unsized types, some sharing a
    parameter's storage key (then listed on their own, in file order), rank 0 initializers."""
    fast_path = fallback = 0
    for seed in range(300):
        rng = random.Random(seed)
        graph = _random_graph(rng)
        weights = dict(graph.weights)
        for i in range(rng.randint(0, 8)):
            shape = rng.choice([(), (1,), (1, 1), (3,), (0,)])
            dtype = rng.choice(["int64", "int64", "float32", "float16", "string", "int4", "bool"])
            key = rng.choice([f"const:c{i}"] * 6 + ["s0", "s1"])
            weights[f"c{i}"] = Tensor(f"c{i}", shape, dtype, key, is_constant_node=rng.random() < 0.8,
                                      external_length=rng.choice([None, 7]))
        names = list(weights)
        rng.shuffle(names)
        graph = dataclasses.replace(graph, weights={n: weights[n] for n in names})
        try:
            index = GraphIndex(sanitize_graph(graph))
        except InputError:
            continue
        _stored_as_plain_code(index)
        scan = scan_stored(index)
        plain_only = all(byte_rate(t.dtype) is not None and byte_rate(t.dtype)[0] == 1  # type: ignore[index]
                         and byte_rate(t.dtype)[2] == 1 for t in scan.scalar_constants)  # type: ignore[index]
        if plain_only and not {t.storage_key for t in scan.scalar_constants} & set(scan.parameters):
            fast_path += 1
        else:
            fallback += 1
    assert fast_path >= 50 and fallback >= 20  # both branches of _graph_tensors really ran
