"""Attention as third-party toolchains write it, from the graph side: 1x1 convolutions as projections,
relative-position tables as the block's extra parameters, weight-only int8 dequantized by plain
arithmetic, older exporters' shape arithmetic, learned Constant nodes, windowed attention, ONNX's
own Attention function body, and the block kind read from the dataflow.

Every module is built here with random weights plus noise (tests/frontier_modules.py) and is its own
ground truth: heads and head size are its attributes, the block's parameters its own count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import onnx  # noqa: E402

from mhainspect.pipeline import audit, audit_module  # noqa: E402
from mhainspect.results import AttentionBlock, Report  # noqa: E402
from tests import deploy_graphs as g  # noqa: E402
from tests import frontier_modules as fm  # noqa: E402

EXPORTERS = {"dynamo": True, "torchscript": False}


def _only_block(report: Report) -> AttentionBlock:
    assert len(report.blocks) == 1, [(b.name, b.kind, b.num_heads) for b in report.blocks]
    return report.blocks[0]


def _numbers(block: AttentionBlock) -> tuple[Any, ...]:
    return (block.kind, block.num_heads, block.num_kv_heads, block.d_k, block.d_v,
            block.params.total + block.params.extra, block.params.extra)


def _truth(truth: fm.BlockTruth) -> tuple[Any, ...]:
    return ("self", truth.heads, truth.heads, truth.d_k, truth.d_k, truth.params, truth.extra)


# ----------------------------------------------------------------------------- 1x1 convolutions

CONV_CASES = {
    "vits-conv1d-relative": (lambda: fm.VitsAttention(channels=32, heads=4, window=4), (2, 32, 7),
                             {0: "batch", 2: "time"}),
    "vae-conv2d-1x1": (lambda: fm.VaeAttention(channels=32), (2, 32, 4, 5), {0: "batch", 2: "h", 3: "w"}),
    "unet-conv2d-1x1-heads": (lambda: fm.UNetConvAttention(channels=32, heads=4), (2, 32, 4, 5),
                              {0: "batch", 2: "h", 3: "w"}),
    "adm-packed-conv1d": (lambda: fm.PackedConvAttention(channels=32, heads=4), (2, 32, 7), {0: "batch", 2: "time"}),
}


def _conv_case(name: str) -> tuple[torch.nn.Module, torch.Tensor, dict[int, str]]:
    build, shape, axes = CONV_CASES[name]
    torch.manual_seed(0)
    return fm.with_noise(build()), torch.randn(*shape), axes


@pytest.mark.parametrize("exporter", sorted(EXPORTERS))
@pytest.mark.parametrize("case", sorted(CONV_CASES))
@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_pointwise_convolutions_are_projections_in_exports(tmp_path: Path, case: str, exporter: str) -> None:
    model, x, axes = _conv_case(case)
    path = fm.export(model, (x,), str(tmp_path / "m.onnx"), dynamo=EXPORTERS[exporter], dynamic={"x0": axes})
    if path is None:
        pytest.skip(f"the {exporter} exporter cannot export {case}")
    report = audit(path)
    assert _numbers(_only_block(report)) == _truth(model.truth())
    assert report.model.total_params == fm.own_params(model)


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_pointwise_convolutions_are_projections_in_modules(case: str) -> None:
    model, x, _ = _conv_case(case)
    report = audit_module(model, (x,))
    assert _numbers(_only_block(report)) == _truth(model.truth())
    assert report.model.total_params == fm.own_params(model)


# ----------------------------------------------------------------------------- kind from the dataflow


@pytest.mark.parametrize("exporter", sorted(EXPORTERS))
@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_kind_is_unknown_when_projections_are_not_resolved(tmp_path: Path, exporter: str) -> None:
    """Q, K and V made by 3-wide convolutions: no projection is resolved, and the tensors they come
    from are outputs of ops the matcher does not see through. Nothing shows a second source of K/V,
    so the kind is unknown, not cross (and not a guessed self)."""
    torch.manual_seed(0)
    model = fm.with_noise(fm.WideConvAttention(channels=16, heads=2))
    path = fm.export(model, (torch.randn(2, 16, 7),), str(tmp_path / "m.onnx"), dynamo=EXPORTERS[exporter],
                     dynamic={"x0": {0: "batch", 2: "time"}})
    if path is None:
        pytest.skip(f"the {exporter} exporter cannot export it")
    block = _only_block(audit(path))
    assert (block.kind, block.num_heads, block.params.total) == ("unknown", 2, 0)


# ----------------------------------------------------------------------------- weight-only int8 by arithmetic


@pytest.mark.parametrize("proj", g.ARITHMETIC_DEQUANT)
def test_integer_weight_dequantized_by_arithmetic_is_the_weight(tmp_path: Path, proj: str) -> None:
    """int8 initializers -> Cast -> (Sub zero point) -> Mul scale (in any order) feeding Q/K/V/O: each is a
    weight of the integer tensor's shape; the scales and zero points are no parameters."""
    path = tmp_path / "m.onnx"
    onnx.save(g.attention_model(g.PROJECTIONS[proj], heads=4, kv_heads=4, d_k=16, d_model=64), path)
    report = audit(str(path))
    b = _only_block(report)
    expected = g.block_params(4, 4, 16, 64, bias=True)
    assert (b.kind, b.num_heads, b.num_kv_heads, b.d_k, b.d_v, b.d_model) == ("self", 4, 4, 16, 16, 64)
    assert (b.params.q, b.params.k, b.params.v, b.params.o, b.params.bias) == \
        (expected["q"], expected["k"], expected["v"], expected["o"], expected["bias"])
    assert report.model.total_params == b.params.total
    assert all(p.weight is not None and p.weight.startswith("wq") for p in b.projections)


# ----------------------------------------------------------------------------- older exporters


def _old_export(tmp_path: Path, model: torch.nn.Module, opset: int, target: int) -> str:
    path = fm.export(model, (torch.randn(2, 7, 32),), str(tmp_path / "m.onnx"), dynamo=False, opset=opset,
                     dynamic={"x0": {0: "batch", 1: "seq"}})
    assert path is not None, f"the TorchScript exporter writes opset {opset}"
    old = tmp_path / f"m{target}.onnx"
    onnx.save(fm.older_opset(onnx.load(path), target), old)
    return str(old)


@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
@pytest.mark.parametrize("target", [9, 11])
def test_annotated_transformer_attention_from_an_older_exporter(tmp_path: Path, target: int) -> None:
    """torch.onnx.export(opset_version=9) of the Annotated Transformer's attention, its shape constants
    written as int32 Constants cast to int64 (as older exporters wrote them): heads from the folding."""
    torch.manual_seed(0)
    model = fm.with_noise(fm.AnnotatedMHA(d_model=32, h=4))
    report = audit(_old_export(tmp_path, model, 9, target))
    assert _numbers(_only_block(report)) == _truth(model.truth())
    assert report.model.total_params == fm.own_params(model)


@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
@pytest.mark.parametrize("target", [9, 11])
def test_multihead_attention_in_older_opset_forms(tmp_path: Path, target: int) -> None:
    """nn.MultiheadAttention (torch exports it from opset 13 on) rewritten into opset 9 / 11 forms:
    attribute-form Slice (9), Unsqueeze/Squeeze/Split with attribute axes and sizes, int32 shape
    constants cast to int64, the Mod of two constants folded."""
    torch.manual_seed(0)
    model = fm.with_noise(fm.TorchMHA(d_model=32, h=4, need_weights=True))
    path = _old_export(tmp_path, model, 13, target)
    ops = {n.op_type: n for n in onnx.load(path).graph.node}
    assert "Mod" not in ops and not any(len(n.input) > 1 for n in onnx.load(path).graph.node
                                        if n.op_type in ("Unsqueeze", "Squeeze"))
    if target == 9:
        assert any(len(n.input) == 1 for n in onnx.load(path).graph.node if n.op_type == "Slice")
    report = audit(path)
    assert _numbers(_only_block(report)) == _truth(model.truth())
    assert report.model.total_params == fm.own_params(model)


def _packed_opset9(slice_form: str) -> onnx.ModelProto:
    """A packed QKV projection cut by attribute-form Slices (opset 9) or an attribute Split, heads split
    by Reshape targets built from Shape -> Gather -> Unsqueeze(axes attribute) and int32 constants cast
    to int64, concatenated."""
    from onnx import TensorProto, helper, numpy_helper

    h, d, dm = 4, 8, 32
    b = g.Builder()
    qkv = b.one("Add", [b.one("MatMul", ["x", b.const("attn.qkv.weight", g._f(dm, 3 * dm))]),
                        b.const("attn.qkv.bias", g._f(3 * dm))])
    if slice_form == "slice":
        q, k, v = (b.one("Slice", [qkv], starts=[i * dm], ends=[(i + 1) * dm], axes=[2]) for i in range(3))
    else:
        q, k, v = b.op("Split", [qkv], 3, axis=2, split=[dm, dm, dm])

    def int32_cast(*values: int) -> str:
        c = b.name("c32")
        b.nodes.append(helper.make_node("Constant", [], [c], value=numpy_helper.from_array(
            g.np.array(values, dtype=g.np.int32))))
        return b.one("Cast", [c], to=TensorProto.INT64)

    shape = b.one("Shape", ["x"])
    batch = b.one("Unsqueeze", [b.one("Gather", [shape, int32_cast(0)], axis=0)], axes=[0])
    seq = b.one("Unsqueeze", [b.one("Gather", [shape, int32_cast(1)], axis=0)], axes=[0])
    split = b.one("Concat", [batch, seq, int32_cast(h), int32_cast(d)], axis=0)
    qh, kh, vh = (b.one("Transpose", [b.one("Reshape", [t, split])], perm=[0, 2, 1, 3]) for t in (q, k, v))
    scores = b.one("Mul", [b.one("MatMul", [qh, b.one("Transpose", [kh], perm=[0, 1, 3, 2])]),
                           b.const("scale", g.np.array(d ** -0.5, g.np.float32))])
    ctx = b.one("Transpose", [b.one("MatMul", [b.one("Softmax", [scores], axis=3), vh])], perm=[0, 2, 1, 3])
    merged = b.one("Reshape", [ctx, b.one("Concat", [batch, seq, int32_cast(dm)], axis=0)])
    y = b.one("Add", [b.one("MatMul", [merged, b.const("attn.out.weight", g._f(dm, dm))]),
                      b.const("attn.out.bias", g._f(dm))])
    graph = helper.make_graph(b.nodes, "old", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", dm])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], b.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])


@pytest.mark.parametrize("slice_form", ["slice", "split"])
def test_packed_projection_cut_by_attribute_slices(tmp_path: Path, slice_form: str) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_packed_opset9(slice_form), path)
    b = _only_block(audit(str(path)))
    per = 32 * 32 + 32
    assert (b.kind, b.num_heads, b.num_kv_heads, b.d_k, b.d_v, b.d_model) == ("self", 4, 4, 8, 8, 32)
    assert (b.params.q, b.params.k, b.params.v, b.params.o) == (per, per, per, per)


@pytest.mark.parametrize("opset", [9, 11])
def test_pad_and_attribute_reshape_shapes_fold(tmp_path: Path, opset: int) -> None:
    """Pad (attribute pads before opset 11, an input after) grows the padded axes; a symbolic axis padded
    becomes a new symbol; a Reshape whose target is an attribute (opset <= 4 form) folds like one whose
    target is an input."""
    from onnx import TensorProto, helper, numpy_helper

    from mhainspect.frontends.onnx.loader import load_onnx
    from mhainspect.ir.dataflow import GraphIndex

    pads = [0, 0, 1, 0, 0, 0, 2, 0]
    pad = (helper.make_node("Pad", ["x"], ["p"], pads=pads) if opset < 11 else
           helper.make_node("Pad", ["x", "pads"], ["p"]))
    nodes = [pad, helper.make_node("Pad", ["p"], ["q"], pads=[0, 1, 0, 0, 0, 0, 0, 0]) if opset < 11 else
             helper.make_node("Pad", ["p", "pads_seq"], ["q"]),
             helper.make_node("Reshape", ["p"], ["r"], shape=[0, 0, 32])]
    inits = [numpy_helper.from_array(g.np.array(pads, g.np.int64), "pads"),
             numpy_helper.from_array(g.np.array([0, 1, 0, 0, 0, 0, 0, 0], g.np.int64), "pads_seq")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 1, 8])],
                              [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)], inits)
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    shapes = GraphIndex(load_onnx(path)).shapes
    assert [str(d) for d in shapes.shape("p") or ()] == ["b", "s", "4", "8"]
    q = shapes.shape("q")
    assert q is not None and str(q[0]) == "b" and str(q[1]) not in ("s", "b") and str(q[2]) == "4"
    assert [str(d) for d in shapes.shape("r") or ()] == ["b", "s", "32"]


# ----------------------------------------------------------------------------- learned constants


def _classifier(plain: bool) -> tuple[torch.nn.Module, int]:
    """The model (its classifier a plain tensor attribute when ``plain``) and the parameter count of the
    same model holding it as an nn.Parameter."""
    torch.manual_seed(0)
    learned = fm.with_noise(fm.PooledClassifier())
    if not plain:
        return learned, fm.own_params(learned)
    model = fm.PooledClassifier(plain=True)
    model.load_state_dict(learned.state_dict(), strict=False)
    model.head_weight = learned.head_weight.detach().clone()
    return model.eval(), fm.own_params(learned)


@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
@pytest.mark.parametrize("exporter", sorted(EXPORTERS))
def test_classifier_kept_as_a_plain_tensor_is_a_parameter(tmp_path: Path, exporter: str) -> None:
    """A learned matrix held as a plain tensor attribute (TorchScript writes it as a Constant node, the
    dynamo exporter as a lifted constant) is the weight of a product with the activations: a
    parameter. The learned one-element temperature and gate count too."""
    model, expected = _classifier(plain=True)
    path = fm.export(model, (torch.randn(2, 7, 32),), str(tmp_path / "m.onnx"), dynamo=EXPORTERS[exporter],
                     dynamic={"x0": {0: "batch", 1: "seq"}})
    assert path is not None
    report = audit(path)
    assert report.model.total_params == expected
    b = _only_block(report)
    assert (b.num_heads, b.d_k, b.params.total) == (4, 8, 32 * 96 + 96 + 32 * 32 + 32)


@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_weights_written_as_constant_nodes_are_parameters(tmp_path: Path) -> None:
    """Every weight a Constant node (some converters write them so): the matrices and biases by the
    usual rules; a one-element Constant named by a module path ("attn.temperature") and read by
    arithmetic with the activations is a learned scalar, not an exporter's constant."""
    model, expected = _classifier(plain=False)
    path = fm.export(model, (torch.randn(2, 7, 32),), str(tmp_path / "m.onnx"), dynamo=False,
                     dynamic={"x0": {0: "batch", 1: "seq"}})
    assert path is not None
    rewritten = tmp_path / "constants.onnx"
    onnx.save(fm.weights_as_constant_nodes(onnx.load(path)), rewritten)
    assert not onnx.load(rewritten).graph.initializer
    report = audit(str(rewritten))
    assert report.model.total_params == expected
    b = _only_block(report)
    assert (b.num_heads, b.d_k, b.params.total) == (4, 8, 32 * 96 + 96 + 32 * 32 + 32)


# ----------------------------------------------------------------------------- windowed attention


SWIN_AXES = {"static": None, "image": {"x0": {0: "batch", 1: "h", 2: "w"}}}


def _swin(shift: bool) -> fm.SwinWindowBlock:
    torch.manual_seed(0)
    return fm.with_noise(fm.SwinWindowBlock(dim=32, window=4, heads=4, shift=shift))  # type: ignore[return-value]


@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
@pytest.mark.parametrize("exporter", sorted(EXPORTERS))
@pytest.mark.parametrize("axes", sorted(SWIN_AXES))
@pytest.mark.parametrize("shift", [False, True], ids=["windows", "shifted-windows"])
@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_window_attention_heads(tmp_path: Path, shift: bool, axes: str, exporter: str) -> None:
    """Swin-style window partition (padded to whole windows, shifted with its mask added through a 5-D
    view of the scores) around an attention with a relative position bias table: the heads, head
    size and projections of the window attention. The bias table, folded into a stored tensor gathered
    by its index (TorchScript: [N·N, h] rows, reshaped and permuted before it is added to the scores;
    dynamo: [1, h, N, N]), is the block's extra with its (2W-1)² x h, and the model holds the module's
    parameters."""
    model = _swin(shift)
    path = fm.export(model, (torch.randn(2, 7, 9, 32),), str(tmp_path / "m.onnx"), dynamo=EXPORTERS[exporter],
                     dynamic=SWIN_AXES[axes])
    if path is None:
        pytest.skip(f"the {exporter} exporter cannot export it")
    report = audit(path)
    b = _only_block(report)
    qkv, proj = model.attn.qkv, model.attn.proj
    assert (b.kind, b.num_heads, b.num_kv_heads, b.d_k, b.d_v, b.d_model) == ("self", 4, 4, 8, 8, 32)
    assert b.params.total == fm.own_params(qkv) + fm.own_params(proj)
    assert _numbers(b) == _truth(model.truth())
    assert report.model.total_params == fm.own_params(model)


@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
@pytest.mark.parametrize("shift", [False, True], ids=["windows", "shifted-windows"])
@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_window_attention_table_is_the_blocks_extra(tmp_path: Path, shift: bool) -> None:
    """Unfolded (the table gathered by its index in the graph), the relative position bias table is the
    block's extra and the model holds exactly the module's parameters; the module door says the same."""
    model = _swin(shift)
    x = torch.randn(2, 7, 9, 32)
    path = fm.export(model, (x,), str(tmp_path / "m.onnx"), dynamo=False, dynamic=SWIN_AXES["image"], fold=False)
    assert path is not None
    report = audit(path)
    assert _numbers(_only_block(report)) == _truth(model.truth())
    assert report.model.total_params == fm.own_params(model)
    by_module = audit_module(model, (x,))
    assert _numbers(_only_block(by_module)) == _truth(model.truth())


# ----------------------------------------------------------------------------- ONNX Attention, expanded


def _attention_grid() -> list[dict[str, Any]]:
    """Opset 24 and 25 Attention bodies: 3-D and 4-D inputs, no mask or a mask of rank 1 to 4 (additive or
    bool), with and without padded K/V (nonpad_kv_seqlen), a cache, causal masking and (opset 25) a
    local window; the other options cycled over the cases so that each meets each mask."""
    import itertools

    cases = []
    masks = [(0, False)] + [(r, b) for r in (1, 2, 3, 4) for b in (False, True)]
    for i, (opset, four_d, (rank, bool_mask)) in enumerate(itertools.product((24, 25), (False, True), masks)):
        nonpad, past, causal = bool(i % 2), bool(i // 2 % 2), bool(i // 4 % 2)
        if opset == 25 and nonpad and past:
            past = False  # the opset-25 body does not expand both a cache and padded K/V
        cases.append({"opset": opset, "four_d": four_d, "mask": rank > 0, "mask_rank": max(rank, 1),
                      "bool_mask": bool_mask, "nonpad": nonpad, "past": past, "causal": causal,
                      "window": 3 if opset == 25 and i % 3 == 0 else None})
    return cases


@pytest.mark.parametrize("projections", [False, True], ids=["inputs", "projected"])
def test_onnx_attention_function_body_heads(tmp_path: Path, projections: bool) -> None:
    """The function body ONNX defines for its Attention op (opset 24 and 25), inlined: heads, KV heads
    and head size known in every case, also when Q, K and V are graph inputs and only the body's own
    reshapes say the heads (a mask padded to the keys by a Pad whose amounts are computed at run time)."""
    import numpy as np

    wrong = []
    for case in _attention_grid():
        np.random.seed(0)
        path = tmp_path / "m.onnx"
        onnx.save(g.onnx_attention_expanded(g.float_matmul if projections else None, **case), path)
        blocks = audit(str(path)).blocks
        found = [(b.num_heads, b.num_kv_heads, b.d_k, b.d_v) for b in blocks]
        if found != [(8, 2, 16, 16)]:
            wrong.append((case, found))
    assert not wrong, wrong


# ----------------------------------------------------------------------------- attention pooling


@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_attention_pooling_head_is_cross_from_every_door(tmp_path: Path) -> None:
    """A SigLIP-style MAP head: nn.MultiheadAttention from a learned probe to the encoder output. By the
    dataflow definition (queries from a learned tensor, keys and values from the sequence: K/V read a
    source Q does not) it is cross-attention; the exports, the module (traced or recognised) and its
    checkpoint agree, and the encoder's own attention stays self."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = fm.with_noise(fm.EncoderWithPool(d=32, heads=4))
    x = torch.randn(2, 7, 32)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "model.safetensors"))
    reports = {"checkpoint": audit(str(tmp_path / "model.safetensors")), "module": audit_module(model),
               "traced": audit_module(model, (x,))}
    for exporter, dynamo in EXPORTERS.items():
        path = fm.export(model, (x,), str(tmp_path / f"{exporter}.onnx"), dynamo=dynamo, opset=None if dynamo else 17,
                         dynamic={"x0": {0: "batch", 1: "seq"}})
        if path is not None:
            reports[exporter] = audit(path)
    assert len(reports) == 5
    for door, report in reports.items():
        kinds = {b.name.removeprefix("m."): b.kind for b in report.blocks}
        assert kinds == {"encoder.attn": "self", "head.attention": "cross"}, door
        assert report.model.total_params == fm.own_params(model), door
    pool = next(b for b in reports["checkpoint"].blocks if b.name == "head.attention")
    assert any(e.field == "kind" and "head.probe" in e.detail for e in pool.evidence)


def test_pointwise_convolution_weights_in_a_checkpoint(tmp_path: Path) -> None:
    """Without a graph, a [out, in, 1] or [out, in, 1, 1] weight named as a projection is a 1x1
    convolution: its widths are out and in (a [3C, C, 1] packed qkv is no Keras [in, heads, head_dim]
    kernel with heads of width 1)."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    packed = fm.with_noise(fm.PackedConvAttention(channels=32, heads=4))
    save_file({f"blocks.0.attn.{k}": v.contiguous() for k, v in packed.state_dict().items()},
              str(tmp_path / "packed.safetensors"))
    vae = fm.with_noise(fm.VaeAttention(channels=32))
    save_file({f"mid.attn_1.{k}": v.contiguous() for k, v in vae.state_dict().items()}, str(tmp_path / "vae.safetensors"))
    (pb,) = audit(str(tmp_path / "packed.safetensors")).blocks
    assert pb.d_model == 32 and not any(e.source == "kernel_shape" for e in pb.evidence)
    # proj_out reads Q's share and writes d_model: the output projection by its shape; its input
    # width splits the packed weight (Q as wide as O's input, K and V the rest, stated), no heads.
    assert [p.node for p in pb.projections if p.role == "o"] == ["blocks.0.attn.proj_out"]
    assert (pb.params.q, pb.params.k, pb.params.v) == (32 * 32 + 32,) * 3
    assert pb.params.total == sum(p.numel() for p in packed.parameters())
    assert pb.num_heads is None and any(e.field == "qkv_split" and "O projection's input width" in e.detail
                                        for e in pb.evidence)
    (vb,) = audit(str(tmp_path / "vae.safetensors")).blocks
    assert vb.d_model == 32
    assert [(p.role, p.in_features, p.out_features) for p in vb.projections] == [("q", 32, 32), ("k", 32, 32),
                                                                               ("v", 32, 32), ("o", 32, 32)]
    assert vb.params.total == sum(p.numel() for p in vae.parameters())
