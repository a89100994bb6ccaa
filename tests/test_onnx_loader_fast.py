"""The fast ONNX path (no `import onnx`, weight payloads skipped) returns exactly the ModelGraph of
``model_to_graph(read_model_proto(path))``; plus a smoke test of the benchmark model generator."""

from __future__ import annotations

import math
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mhainspect.errors import InputError
from mhainspect.frontends.onnx import loader as onnx_loader
from mhainspect.frontends.onnx import wire as onnx_wire
from mhainspect.frontends.onnx.loader import load_onnx, model_to_graph, read_model_proto
from mhainspect.ir.dtypes import ONNX_FLOAT_CODES, ONNX_INTEGER_CODES
from mhainspect.ir.graph import ModelGraph, TensorKind
from mhainspect.pipeline import audit

REPO = Path(__file__).resolve().parents[1]


def _norm(g: ModelGraph) -> tuple[Any, ...]:
    def fv(x: float | None) -> object:
        return "nan" if isinstance(x, float) and math.isnan(x) else x

    weights = [(k, v.name, v.shape, v.dtype, v.storage_key, v.int_value, fv(v.float_value), v.is_constant_node)
               for k, v in g.weights.items()]
    return (g.source, g.kind, g.nodes, weights, g.inputs, g.outputs, g.value_info, g.opset, g.producer, g.warnings)


def _reference(path: Path) -> ModelGraph:
    return model_to_graph(read_model_proto(path), source=str(path))


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "sample_models").glob("*.onnx")))
def test_fast_path_matches_onnx_load_on_samples(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = REPO / "sample_models" / name
    assert _norm(load_onnx(path)) == _norm(_reference(path))
    assert repr(load_onnx(path)) == repr(_reference(path))
    monkeypatch.setattr(onnx_wire, "SCAN_MIN_FILE_BYTES", 0)  # force the payload-skipping scan
    monkeypatch.setattr(onnx_wire, "SCAN_MIN_MESSAGE_BYTES", 0)
    assert _norm(load_onnx(path)) == _norm(_reference(path))


def _big(name: str, shape: tuple[int, ...], dtype: Any = np.float32) -> TensorProto:
    return numpy_helper.from_array(np.arange(math.prod(shape)).reshape(shape).astype(dtype), name)


def _tricky_model() -> onnx.ModelProto:
    """Big payloads everywhere the scanner looks, next to small values the loader must still read."""
    w = _big("w", (64, 64))                                     # strippable initializer (16 KiB)
    idx = _big("idx", (2048,), np.int64)                        # int tensor, numel > 64: strippable
    shape = numpy_helper.from_array(np.array([1, -1, 8, 8], np.int64), "shape")      # must keep its value
    scale = numpy_helper.from_array(np.array(0.125, np.float32), "scale")             # must keep its value
    odd = numpy_helper.from_array(np.arange(3000, dtype=np.int64), "odd")
    odd.ClearField("dims")
    odd.dims.extend([-1])                                       # negative dims: never stripped
    typed = helper.make_tensor("typed", TensorProto.FLOAT, [40, 40], [0.5] * 1600)  # float_data, packed
    big_const = helper.make_node("Constant", [], ["c"], name="c", value=_big("v", (32, 64)))
    then_g = helper.make_graph([helper.make_node("MatMul", ["x", "w_then"], ["y_then"], name="mm_then")], "then",
                               [], [helper.make_tensor_value_info("y_then", TensorProto.FLOAT, None)],
                               initializer=[_big("w_then", (64, 32))])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["y_else"], name="id_else")], "else",
                               [], [helper.make_tensor_value_info("y_else", TensorProto.FLOAT, None)])
    nodes = [
        big_const,
        helper.make_node("MatMul", ["x", "w"], ["h"], name="/layer/mm"),
        helper.make_node("Reshape", ["h", "shape"], ["r"], name="/layer/rs"),
        helper.make_node("Mul", ["r", "scale"], ["s"], name="/layer/mul"),
        helper.make_node("Gather", ["idx", "s"], ["g"], name="gather", axis=0),
        helper.make_node("Add", ["odd", "typed"], ["a"], name="add"),
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Sp", ["x", "sp_values"], ["z"], name="sp", domain="custom"),
    ]
    sparse = helper.make_sparse_tensor(_big("sp_values", (1500,)), _big("sp_idx", (1500,), np.int64), [3000])
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 64]),
                                           helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[w, idx, shape, scale, odd, typed], sparse_initializer=[sparse])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)])


def test_payload_skipping_keeps_the_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tricky.onnx"
    onnx.save(_tricky_model(), path)
    monkeypatch.setattr(onnx_wire, "SCAN_MIN_FILE_BYTES", 0)
    reference = _reference(path)
    graph = load_onnx(path)
    assert _norm(graph) == _norm(reference)
    assert graph.weights["shape"].int_value == (1, -1, 8, 8)
    assert graph.weights["scale"].float_value == 0.125
    odd = graph.weights["odd"].int_value  # numel counts -1 as 0, so to_array reads all 3000 values
    assert odd is not None and len(odd) == 3000
    stripped = onnx_wire.stripped(memoryview(path.read_bytes()))
    assert len(stripped) < 3000 * 8 + 2000 < path.stat().st_size // 3, "payloads were not skipped"  # odd kept
    kept = onnx.ModelProto.FromString(stripped)
    by_name = {t.name: t for t in kept.graph.initializer}
    assert not by_name["w"].raw_data and not by_name["typed"].float_data and by_name["odd"].raw_data


def test_corrupt_file_falls_back_to_onnx_load_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x0a\xff\xff\xff\xff\x0f garbage")
    with pytest.raises(Exception) as fast:
        load_onnx(path)
    with pytest.raises(Exception) as ref:
        read_model_proto(path)
    assert type(fast.value) is type(ref.value) and str(fast.value) == str(ref.value)


def _old_values(t: TensorProto) -> tuple[Any, Any]:
    """The loader's original decoding, through numpy_helper.to_array."""
    shape = tuple(int(d) for d in t.dims)
    numel = math.prod(max(d, 0) for d in shape)
    ints = floats = None
    if t.data_type in ONNX_INTEGER_CODES and numel <= 64:
        try:
            ints = tuple(int(x) for x in numpy_helper.to_array(t).reshape(-1).tolist())
        except Exception:
            ints = None
    if t.data_type in ONNX_FLOAT_CODES and numel == 1:
        try:
            floats = float(numpy_helper.to_array(t).reshape(-1)[0])
        except Exception:
            floats = None
    return ints, floats


def test_small_value_decoding_matches_numpy_helper() -> None:
    rng = np.random.default_rng(0)
    fields = {1: "float_data", 11: "double_data", 7: "int64_data", 12: "uint64_data", 13: "uint64_data"}
    cases = 0
    for dt in sorted(ONNX_INTEGER_CODES) + sorted(ONNX_FLOAT_CODES):
        for dims in ([], [1], [3], [2, 2], [-1], [2, -1], [0], [5], [1, 1]):
            for count in (0, 1, 3, 4, 5):
                for raw in (True, False):
                    t = TensorProto()
                    t.data_type = dt
                    t.dims.extend(dims)
                    vals = [int(v) for v in rng.integers(-70000, 70000, count)]
                    if raw:
                        size = helper.tensor_dtype_to_np_dtype(dt).itemsize
                        t.raw_data = bytes(rng.integers(0, 256, count * size, dtype=np.uint8))
                    elif dt in (1, 11):
                        getattr(t, fields[dt]).extend(float(v) / 8 for v in vals)
                    else:
                        field = fields.get(dt, "int32_data")
                        if field == "uint64_data":
                            vals = [abs(v) for v in vals]
                        getattr(t, field).extend(vals)
                    new = onnx_loader.tensor_from_proto(t, "t")
                    old = _old_values(t)
                    got = (new.int_value, new.float_value)
                    if isinstance(old[1], float) and math.isnan(old[1]):
                        assert got[0] is None and got[1] is not None and math.isnan(got[1])
                    else:
                        assert got == old, (dt, dims, count, raw)
                    cases += 1
    assert cases > 1000


def test_onnx_package_not_needed_for_the_fast_path() -> None:
    import subprocess

    code = ("import sys; from mhainspect.frontends.onnx.loader import load_onnx; "
            f"g = load_onnx({str(REPO / 'sample_models' / 'gqa_llama.onnx')!r}); "
            "print(len(g.nodes), 'onnx' in sys.modules, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    nodes, onnx_imported, numpy_imported = out.stdout.split()
    assert int(nodes) > 0 and onnx_imported == "False" and numpy_imported == "False"


def test_progress_callback_reports_read_and_graph() -> None:
    calls: list[tuple[str, int, int]] = []
    load_onnx(REPO / "sample_models" / "bert_two_layers.onnx", progress=lambda *a: calls.append(a))
    assert calls[0][0] == "read" and calls[-1][0] == "graph" and calls[-1][1] == calls[-1][2] > 0
    calls.clear()
    with onnx_loader.reporting_progress(lambda *a: calls.append(a)):
        load_onnx(REPO / "sample_models" / "bert_two_layers.onnx")
    assert calls


def test_graph_progress_every_2048_top_level_nodes(tmp_path: Path) -> None:
    count = 5000
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"/l{i // 100}/Relu_{i}") for i in range(count)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info(f"t{count}", TensorProto.FLOAT, [1])])
    path = tmp_path / "chain.onnx"
    onnx.save(helper.make_model(graph), path)
    calls: list[tuple[str, int, int]] = []
    loaded = load_onnx(path, progress=lambda *a: calls.append(a))
    assert [c for c in calls if c[0] == "graph"] == [("graph", 2048, count), ("graph", 4096, count),
                                                     ("graph", count, count)]
    assert _norm(loaded) == _norm(_reference(path)) and len(loaded.nodes) == count


# ---------------------------------------------------------------------------------------------
# Benchmark generator smoke test (2 layers, tiny widths); the benchmarks themselves never run here.
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def make_models() -> Any:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import make_models as mm
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return mm


def test_generator_two_layers_external_and_inline(make_models: Any, tmp_path: Path) -> None:
    shape = make_models.LlamaShape(layers=2, d_model=128, heads=8, kv_heads=2, ffn=256, vocab=100)
    ext = tmp_path / "ext" / "model.onnx"
    ext.parent.mkdir()
    model, weights = make_models.build_llama(shape)
    data = make_models.write_external(model, weights, ext)
    inl = tmp_path / "inline.onnx"
    model, weights = make_models.build_llama(shape)
    make_models.write_inline(model, weights, inl)
    onnx.checker.check_model(str(inl))
    inits = {t.name: t for t in onnx.load(str(inl)).graph.initializer}
    assert inits[weights[0].name].raw_data == bytes(weights[0].nbytes)

    report = audit(ext)
    assert data.stat().st_blocks == 0, "tensor data was read"
    assert [(b.num_heads, b.num_kv_heads, b.d_model, b.d_k) for b in report.blocks] == [(8, 2, 128, 16)] * 2
    assert report.model.total_params == shape.total_params()  # the rotary inv_freq buffer is no parameter
    assert sum(b.params.total for b in report.blocks) == shape.attention_params()
    data.unlink()
    assert audit(ext).blocks == report.blocks  # no data file needed
    assert [b.params for b in audit(inl).blocks] == [b.params for b in report.blocks]


def test_generator_safetensors_headers(make_models: Any, tmp_path: Path) -> None:
    import json

    shape = make_models.LlamaShape(layers=3, d_model=64, heads=8, kv_heads=2, ffn=128, vocab=100)
    n = make_models.write_safetensors(tmp_path, shape, max_shard_bytes=100_000)
    assert n > 1
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    total = 0
    for shard in sorted(tmp_path.glob("*.safetensors")):
        raw = shard.read_bytes()
        (hlen,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + hlen])
        end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
        assert len(raw) == 8 + hlen + end
        total += end
    assert total == index["metadata"]["total_size"] == 2 * (shape.total_params())
    assert json.loads((tmp_path / "config.json").read_text())["num_key_value_heads"] == 2


# ---------------------------------------------------------------------------------------------
# The graph builder's value caches (repeated constants, attributes, value types) change no result.
# ---------------------------------------------------------------------------------------------


def _constants_model() -> onnx.ModelProto:
    """Constants repeating the same few values under different names, in every form the loader reads."""
    nodes = []
    values: list[Any] = [
        {"value": numpy_helper.from_array(np.array([1], np.int64))},
        {"value": numpy_helper.from_array(np.array([1], np.int64), "named")},
        {"value": numpy_helper.from_array(np.array(0.125, np.float32))},
        {"value": numpy_helper.from_array(np.array(float("nan"), np.float32))},
        {"value": numpy_helper.from_array(np.arange(100, dtype=np.int64))},
        {"value_int": 3}, {"value_ints": [1, -1]}, {"value_float": 0.5}, {"value_floats": [0.5, 2.0]},
        {"value_string": "x"},                                          # no tensor: stays a node
        {"value": numpy_helper.from_array(np.tril(np.ones((4, 4), bool)))},     # a mask: its values are read
    ]
    for layer in range(3):
        for i, kw in enumerate(values):
            nodes.append(helper.make_node("Constant", [], [f"/l{layer}/c{i}"], name=f"/l{layer}/Constant_{i}", **kw))
    nodes.append(helper.make_node("Constant", [], ["two_attrs"], name="two", value_int=1, value_float=2.0))
    nodes.append(helper.make_node("Constant", [], ["o1", "o2"], name="two_outputs", value_int=1))
    nodes.append(helper.make_node("Concat", [n.output[0] for n in nodes], ["y"], name="/l2/sub/cat", axis=0))
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_repeated_constants_match_reference(tmp_path: Path) -> None:
    path = tmp_path / "constants.onnx"
    onnx.save(_constants_model(), path)
    graph = load_onnx(path)
    assert _norm(graph) == _norm(_reference(path))
    assert graph.weights["/l1/c0"].int_value == (1,) and graph.weights["/l2/c0"].storage_key == "const:/l2/c0"
    assert graph.weights["/l2/c4"].int_value is None and graph.weights["/l2/c4"].shape == (100,)
    assert "/l0/c9" not in graph.weights and [n.scope for n in graph.nodes][-1] == "l2.sub"
    assert graph.weights["/l2/c10"].mask_values == tuple(float(v) for v in np.tril(np.ones((4, 4))).flat)
    # A repeated value is the first one's tensor under the repeat's name, every field alike.
    for i in range(11):
        if f"/l0/c{i}" in graph.weights:
            assert repr(graph.weights[f"/l2/c{i}"]) == repr(graph.weights[f"/l0/c{i}"]).replace("/l0/", "/l2/")


def test_constant_kind_is_what_apply_provenance_says(tmp_path: Path) -> None:
    """Constant-node tensors of a torch export are constants; another producer's say nothing."""
    from mhainspect.frontends.onnx.provenance import apply_provenance

    model = _constants_model()
    for producer, kind in (("pytorch", TensorKind.CONSTANT), ("tf2onnx", None)):
        model.producer_name = producer
        path = tmp_path / f"{producer}.onnx"
        onnx.save(model, path)
        for graph in (load_onnx(path), _reference(path)):
            unmarked = {name: t._replace(kind=None) for name, t in graph.weights.items()}
            expected = apply_provenance(unmarked, [], "", producer)
            assert [repr(t) for t in graph.weights.values()] == [repr(t) for t in expected.values()]
            constants = [t for t in graph.weights.values() if t.is_constant_node]
            assert len(constants) > 20 and {t.kind for t in constants} == {kind}


def test_dangling_input_error_names_the_first_offender(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("Add", ["a", "missing1"], ["b"], name="first"),
             helper.make_node("Add", ["missing0", "b"], ["c"], name="second")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)])
    path = tmp_path / "dangling.onnx"
    onnx.save(helper.make_model(graph), path)
    with pytest.raises(Exception) as fast:
        load_onnx(path)
    assert "node 'first' (Add) reads 'missing1'" in str(fast.value)


def test_exporter_string_lists_read_as_literal_eval_reads_them() -> None:
    import ast
    import random
    import warnings

    from mhainspect.frontends.onnx.provenance import string_list

    def reference(value: str) -> list[str] | None:
        try:
            names = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
        return [str(n) for n in names] if isinstance(names, (list, tuple)) else None

    pieces = ["[", "]", "'", '"', ", ", ",", " ", "a", ".", "\\", "\n", "\r", "\x00", "\t", "\u2028", "é", "', '"]
    rng = random.Random(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # literal_eval on invalid escape sequences of the random input
        for _ in range(20000):
            body = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
            for value in (f"['{body}']", f"[{body}]", f"['{body}', '{body}']", body):
                assert string_list(value) == reference(value), repr(value)


# ---------------------------------------------------------------- attributes parsed from their bytes


def test_raw_attribute_schema_changes_only_its_bytes_field() -> None:
    model_cls, attr_cls = onnx_wire.raw_attribute_classes()
    raw_file = model_cls.DESCRIPTOR.file
    changed = ("NodeProto", "attribute")
    assert raw_file.message_types_by_name["NodeProto"].fields_by_name["attribute"].type == 12  # TYPE_BYTES
    assert attr_cls.DESCRIPTOR.full_name == "onnx.AttributeProto"
    # every other field of every message keeps its type
    normal = onnx.ModelProto.DESCRIPTOR.file
    for name, desc in normal.message_types_by_name.items():
        raw = raw_file.message_types_by_name[name]
        for f in desc.fields:
            if (name, f.name) != changed:
                assert (f.number, f.type) == (raw.fields_by_name[f.name].number, raw.fields_by_name[f.name].type)


def _write(tmp_path: Path, model: onnx.ModelProto) -> Path:
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_subgraphs_and_corrupt_attributes_read_as_onnx_load_reads_them(tmp_path: Path) -> None:
    body = helper.make_graph([helper.make_node("Identity", ["c"], ["y"])], "body", [], [])
    node = helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = _write(tmp_path, helper.make_model(graph))
    loaded = load_onnx(path)
    assert _norm(loaded) == _norm(_reference(path)) and [n.op for n in loaded.nodes] == ["If", "Identity", "Identity"]
    # an attribute whose bytes do not parse: the whole-model parse fails, and so does onnx.load
    good = helper.make_node("Unsqueeze", ["x"], ["y"], axes=[0]).SerializeToString()
    attr = helper.make_attribute("axes", [0]).SerializeToString()
    bad = good.replace(attr, b"\xff" * len(attr))
    model = helper.make_model(helper.make_graph([], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]))
    from google.protobuf.message import DecodeError

    with pytest.raises(DecodeError):
        onnx.NodeProto().ParseFromString(bad)
    data = model.SerializeToString()
    raw_model = onnx_wire.raw_attribute_classes()[0]()
    raw_model.ParseFromString(data)
    raw_model.graph.node.add().ParseFromString(bad)  # the raw schema accepts any attribute bytes
    path.write_bytes(raw_model.SerializeToString())
    with pytest.raises(InputError) as fast:
        load_onnx(path)
    with pytest.raises(InputError) as ref:
        read_model_proto(path)
    assert str(fast.value) == str(ref.value)


def test_named_field_numbers_match_the_installed_descriptors() -> None:
    from google.protobuf import descriptor_pb2

    def number(message: Any, field: str) -> int:
        return int(message.DESCRIPTOR.fields_by_name[field].number)

    w = onnx_wire
    assert (number(onnx.ModelProto, "graph"), number(onnx.ModelProto, "training_info"),
            number(onnx.ModelProto, "functions")) == (w.MODEL_GRAPH, w.MODEL_TRAINING_INFO, w.MODEL_FUNCTIONS)
    assert (number(onnx.GraphProto, "node"), number(onnx.GraphProto, "initializer"),
            number(onnx.GraphProto, "sparse_initializer")) == (w.GRAPH_NODE, w.GRAPH_INITIALIZER,
                                                                w.GRAPH_SPARSE_INITIALIZER)
    assert number(onnx.NodeProto, "attribute") == w.NODE_ATTRIBUTE
    assert [number(onnx.AttributeProto, f) for f in ("t", "g", "tensors", "graphs", "sparse_tensor",
                                                     "sparse_tensors")] == [
        w.ATTR_T, w.ATTR_G, w.ATTR_TENSORS, w.ATTR_GRAPHS, w.ATTR_SPARSE_TENSOR, w.ATTR_SPARSE_TENSORS]
    assert (number(onnx.FunctionProto, "node"), number(onnx.FunctionProto, "attribute_proto")) == (
        w.FUNCTION_NODE, w.FUNCTION_ATTRIBUTE_PROTO)
    assert (number(onnx.TrainingInfoProto, "initialization"), number(onnx.TrainingInfoProto, "algorithm")) == (
        w.TRAINING_INITIALIZATION, w.TRAINING_ALGORITHM)
    assert (number(onnx.SparseTensorProto, "values"), number(onnx.SparseTensorProto, "indices")) == (
        w.SPARSE_VALUES, w.SPARSE_INDICES)
    assert (number(onnx.TensorProto, "dims"), number(onnx.TensorProto, "name")) == (w.TENSOR_DIMS, w.TENSOR_NAME)
    from mhainspect.frontends.onnx import landings

    assert (number(onnx.GraphProto, "node"), number(onnx.NodeProto, "input")) == (landings.GRAPH_NODE,
                                                                                landings.NODE_INPUT)
    assert {f: number(onnx.TensorProto, f) for f in w.TENSOR_DATA_FIELDS} == w.TENSOR_DATA_FIELDS
    assert (number(descriptor_pb2.FileDescriptorProto, "message_type"), number(descriptor_pb2.DescriptorProto, "name"),
            number(descriptor_pb2.DescriptorProto, "field")) == (w.FILE_MESSAGE_TYPE, w.MESSAGE_NAME, w.MESSAGE_FIELD)
    fields = descriptor_pb2.FieldDescriptorProto
    assert (number(fields, "name"), number(fields, "type"), number(fields, "type_name")) == (
        w.FIELD_NAME, w.FIELD_TYPE, w.FIELD_TYPE_NAME)
    assert fields.TYPE_BYTES == w.TYPE_BYTES


def test_fast_path_errors_are_narrow() -> None:
    """A bug in the fast path (not a corrupt file) is raised, never hidden by the fallback."""
    assert Exception not in onnx_wire.FAST_PATH_ERRORS
    assert not any(issubclass(NameError, e) or issubclass(AssertionError, e) for e in onnx_wire.FAST_PATH_ERRORS)
