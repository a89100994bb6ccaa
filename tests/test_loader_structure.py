"""The ONNX loader walks functions and subgraphs, never needs external data, and counts each
weight once: structure-level checks built from the bundled sample models."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from mhainspect.frontends.onnx.loader import model_to_graph
from mhainspect.pipeline import audit, audit_graph

SAMPLES = Path(__file__).resolve().parent.parent / "sample_models"


def _standard() -> onnx.ModelProto:
    return onnx.load(str(SAMPLES / "standard_mha.onnx"))


def _baseline() -> tuple[int, int, int]:
    report = audit(SAMPLES / "standard_mha.onnx")
    (block,) = report.blocks
    assert block.num_heads is not None and block.d_k is not None
    return block.num_heads, block.d_k, block.params.total


def test_attention_inside_a_local_function_is_found() -> None:
    model = _standard()
    graph = model.graph
    weight_names = [t.name for t in graph.initializer]
    inputs = [i.name for i in graph.input] + weight_names
    func = helper.make_function(
        "custom.blocks", "SelfAttentionBlock", inputs, [o.name for o in graph.output], list(graph.node),
        opset_imports=list(model.opset_import),
    )
    call = helper.make_node("SelfAttentionBlock", inputs, [o.name for o in graph.output], domain="custom.blocks",
                            name="/encoder/layer.0/SelfAttentionBlock")
    new_graph = helper.make_graph([call], "wrapped", list(graph.input), list(graph.output),
                                  initializer=list(graph.initializer))
    wrapped = helper.make_model(new_graph, opset_imports=list(model.opset_import)
                                + [helper.make_opsetid("custom.blocks", 1)], functions=[func])
    report = audit_graph(model_to_graph(wrapped, source="wrapped.onnx"))
    (block,) = report.blocks
    assert (block.num_heads, block.d_k, block.params.total) == _baseline()


def test_attention_inside_an_if_branch_is_found() -> None:
    model = _standard()
    graph = model.graph
    out = graph.output[0]
    then_branch = helper.make_graph(list(graph.node), "then", [], [out])
    identity_out = helper.make_tensor_value_info(out.name, TensorProto.FLOAT, None)
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], [out.name])], "else", [], [identity_out])
    cond = helper.make_tensor_value_info("use_attention", TensorProto.BOOL, [])
    if_node = helper.make_node("If", ["use_attention"], [out.name], then_branch=then_branch,
                               else_branch=else_branch, name="/maybe_attention/If")
    new_graph = helper.make_graph([if_node], "branchy", list(graph.input) + [cond], list(graph.output),
                                  initializer=list(graph.initializer))
    branchy = helper.make_model(new_graph, opset_imports=list(model.opset_import))
    report = audit_graph(model_to_graph(branchy, source="branchy.onnx"))
    (block,) = report.blocks
    assert (block.num_heads, block.d_k, block.params.total) == _baseline()


def test_external_data_is_never_needed(tmp_path: Path) -> None:
    model = _standard()
    path = tmp_path / "external.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    (tmp_path / "weights.bin").unlink()  # the audit must not need the data
    report = audit(path)
    (block,) = report.blocks
    assert (block.num_heads, block.d_k, block.params.total) == _baseline()
    assert report.model.total_params == audit(SAMPLES / "standard_mha.onnx").model.total_params


def test_tied_weights_count_once_and_shape_only_constants_are_not_parameters() -> None:
    model = _standard()
    graph = model.graph
    baseline_total = audit(SAMPLES / "standard_mha.onnx").model.total_params
    # A second consumer of an existing weight (tying) adds no parameters.
    weight = next(t for t in graph.initializer if len(t.dims) == 2)
    graph.node.append(helper.make_node("MatMul", [graph.output[0].name, weight.name], ["tied_out"], name="/tied"))
    # tf2onnx writes duplicate weights that only Shape reads: not parameters either.
    dup = onnx.TensorProto()
    dup.CopyFrom(weight)
    dup.name = "shape_only_copy"
    graph.initializer.append(dup)
    graph.node.append(helper.make_node("Shape", ["shape_only_copy"], ["dup_shape"], name="/dup/Shape"))
    graph.output.append(helper.make_tensor_value_info("tied_out", TensorProto.FLOAT, None))
    graph.output.append(helper.make_tensor_value_info("dup_shape", TensorProto.INT64, None))
    report = audit_graph(model_to_graph(model, source="tied.onnx"))
    assert report.model.total_params == baseline_total
