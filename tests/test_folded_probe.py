"""Attention pooling whose learned probe the exporter folded into a stored batch of tokens.

A static-shape dynamo export of SigLIP's pooling head (nn.MultiheadAttention from a learned probe
[1, 1, d] to the encoder output) has no broadcast of the probe left: ``probe.repeat(1, 1, 1)`` and
the batch-first transpose fold into one stored tensor [1, 1, d] that the Q projection's MatMul reads.
Those tokens are a value of the run as a broadcast probe is, so the head is a cross-attention block
with its Q projection; a stored matrix times a weight (a factorized weight) and a stored tensor the
exporter says is no parameter stay what they are. The same holds for tokens that are the query
themselves (Aimv2: folded with their head split and √scale, so the scale is unknown) and for tokens
normalised before their projections (BLIP-2's Q-Former).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from attention_graphs import Nodes, Weights, ints, mha_nodes, model, shape_consts, value, weight

from mhainspect.frontends.onnx.loader import model_to_graph
from mhainspect.pipeline import audit, audit_graph
from mhainspect.results import Report

D, HEADS = 16, 4
_KIND_KEY = "pkg.torch.export.graph_signature.InputSpec.kind"
_FOLDED_KEY = "pkg.onnxscript.optimizer.folded_from"


def _pooling(probe_shape: tuple[int, ...], probe_kind: str | None = None) -> Report:
    """Encoder tokens x [1, 6, D] pooled by attention from a stored probe: Q = probe·Wq + bq, K/V
    from x, as the static export writes it."""
    g = Nodes()
    w = Weights("head.attention", D)
    g.inits += w.tensors() + shape_consts(HEADS, D // HEADS) + [weight("probe", *probe_shape)]
    mha_nodes(g, "head", "probe", "head.attention", HEADS, D // HEADS, kv_src="x")
    g.nodes[-1].output[0] = "y"
    m = model(g.nodes, g.inits, [value("x", 1, 6, D)], [value("y", 1, 1, D)])
    if probe_kind is not None:
        info = onnx.helper.make_tensor_value_info("probe", onnx.TensorProto.FLOAT, list(probe_shape))
        info.metadata_props.add(key=_KIND_KEY, value=probe_kind)
        m.graph.value_info.append(info)
    return audit_graph(model_to_graph(m, "pool.onnx"))


def test_a_folded_probe_is_the_query_of_a_cross_attention_block() -> None:
    report = _pooling((1, 1, D))
    assert not report.misses, report.misses
    (b,) = report.blocks
    assert (b.kind, b.num_heads, b.num_kv_heads, b.d_model, b.d_k, b.d_v) == ("cross", HEADS, HEADS, D, D // HEADS,
                                                                               D // HEADS)
    assert (b.params.q, b.params.k, b.params.v, b.params.o) == (D * D + D,) * 4
    assert b.params.total == Weights("head.attention", D).numel()
    assert report.model.total_params == Weights("head.attention", D).numel() + D


@pytest.mark.parametrize(("shape", "kind"), [((1, D), None), ((1, 1, D), "BUFFER")])
def test_a_stored_matrix_or_a_buffer_projected_is_no_query(shape: tuple[int, ...], kind: str | None) -> None:
    """A stored matrix times a weight is a factorized weight as far as the graph shows, and a tensor
    the exporter calls a buffer holds no learned tokens: the Softmax stays a near miss, scores of the
    input against a stored value."""
    report = _pooling(shape, kind)
    assert not report.blocks
    (miss,) = report.misses
    assert not miss.claimed and miss.reason.startswith("no Q·Kᵀ product of two activations"), miss.reason


def _unprojected_query(query_shape: tuple[int, ...], folded_from: str | None) -> Report:
    """Aimv2's pooling head as a static export writes it: the class token is the query with no
    projection, expanded, split into heads [1, h, 1, d_k] and multiplied by √scale, all folded into
    one stored tensor; K/V projected from x [1, 6, D] and scaled by the other √scale."""
    d_k = D // HEADS
    g = Nodes()
    w = Weights("head", D)
    g.inits += [t for t in w.tensors() if ".q_proj." not in t.name]
    g.inits += shape_consts(HEADS, d_k) + [weight("query", *query_shape), ints("one_axis", [1])]
    g.inits.append(onnx.numpy_helper.from_array(np.array(d_k ** -0.25, dtype=np.float32), "k_scale"))
    k = g.add("Add", [g.add("MatMul", ["x", "head.k_proj.weight"], "k_mm_out"), "head.k_proj.bias"], "k_out")
    v = g.add("Add", [g.add("MatMul", ["x", "head.v_proj.weight"], "v_mm_out"), "head.v_proj.bias"], "v_out")
    k_t = g.add("Transpose", [g.add("Reshape", [k, "split_heads"], "k_heads_out")], "k_t_out", perm=[0, 2, 3, 1])
    k_t = g.add("Mul", [k_t, "k_scale"], "k_scaled_out")
    v_h = g.add("Transpose", [g.add("Reshape", [v, "split_heads"], "v_heads_out")], "v_h_out", perm=[0, 2, 1, 3])
    probs = g.add("Softmax", [g.add("MatMul", ["query", k_t], "scores_out")], "probs_out", axis=-1)
    ctx = g.add("Transpose", [g.add("MatMul", [probs, v_h], "ctx_out")], "ctx_t_out", perm=[0, 2, 1, 3])
    # The mean over the one query (a view), then the output projection, as Aimv2 writes it.
    pooled = g.add("ReduceMean", [g.add("Reshape", [ctx, "merge_heads"], "merged_out"), "one_axis"], "pooled_out",
                   keepdims=0)
    g.add("Add", [g.add("MatMul", [pooled, "head.o_proj.weight"], "o_mm_out"), "head.o_proj.bias"], "y")
    m = model(g.nodes, g.inits, [value("x", 1, 6, D)], [value("y", 1, D)], opset=18)
    if folded_from is not None:
        info = onnx.helper.make_tensor_value_info("query", onnx.TensorProto.FLOAT, list(query_shape))
        info.metadata_props.add(key=_FOLDED_KEY, value=folded_from)
        m.graph.value_info.append(info)
        m.graph.metadata_props.add(key="pkg.torch.export.ExportedProgram.graph_signature",
                                   value="\n# inputs\np_head_cls_token: PARAMETER target='head.cls_token'\n")
    return audit_graph(model_to_graph(m, "pool.onnx"))


def test_folded_query_tokens_without_a_projection_are_the_query() -> None:
    """Q is the stored tokens themselves: a cross-attention block with K/V only, and its scale unknown,
    since a factor on Q is inside the folded values (the graph shows only K's √scale)."""
    report = _unprojected_query((1, HEADS, 1, D // HEADS), "['expand', 'head.cls_token', 'val_1', 'val_2']")
    assert not report.misses, report.misses
    (b,) = report.blocks
    assert (b.kind, b.num_heads, b.d_k, b.d_v) == ("cross", HEADS, D // HEADS, D // HEADS)
    assert (b.params.q, b.params.k, b.params.v, b.params.o) == (0, D * D + D, D * D + D, D * D + D)
    assert b.d_model == D  # the output projection found after the mean over the one query
    assert b.scale is None and not b.scale_known
    assert any(e.field == "scale" and "folded from head.cls_token" in e.detail for e in b.evidence)


def test_stored_keys_scored_by_the_input_stay_a_near_miss() -> None:
    """The same product with a stored matrix on the query side (rank 2: a weight) is scores of the run
    against a stored table, no attention."""
    report = _unprojected_query((1, D // HEADS), None)
    assert not report.blocks
    (miss,) = report.misses
    assert not miss.claimed and miss.reason.startswith("no Q·Kᵀ product of two activations"), miss.reason


def test_normalised_query_tokens_are_projected_to_self_attention() -> None:
    """BLIP-2's Q-Former in a static export: the query tokens, expanded and folded into a stored
    [1, N, D], go through a LayerNorm and then Q/K/V of one self-attention among themselves."""
    g = Nodes()
    w = Weights("qformer.attention", D)
    g.inits += w.tensors() + shape_consts(HEADS, D // HEADS)
    g.inits += [weight("expand", 1, 6, D), weight("qformer.layernorm.weight", D), weight("qformer.layernorm.bias", D)]
    tokens = g.add("LayerNormalization", ["expand", "qformer.layernorm.weight", "qformer.layernorm.bias"], "norm_out",
                   axis=-1)
    x = g.add("Add", [tokens, "x"], "mixed_out")  # the run's input joins after the attention in the real model
    mha_nodes(g, "qformer", tokens, "qformer.attention", HEADS, D // HEADS)
    g.add("Add", [g.nodes[-1].output[0], x], "y")
    report = audit_graph(model_to_graph(model(g.nodes, g.inits, [value("x", 1, 6, D)], [value("y", 1, 6, D)]),
                                        "qformer.onnx"))
    assert not report.misses, report.misses
    (b,) = report.blocks
    assert (b.kind, b.num_heads, b.d_k, b.params.total) == ("self", HEADS, D // HEADS, w.numel())


def _folded_query(concat: bool) -> Report:
    """Idefics2's perceiver resampler as a static export writes it: the latents' Q computed at export
    into one stored [1, h, N, d_k] the exporter says it folded from the latents, their norm's weight
    and q_proj.weight (the latents are also stored, for K/V). ``concat``: the provenance lists two
    biases beside a tensor with room for both (an LSTM's biases side by side): nothing folded away."""
    d_k = D // HEADS
    g = Nodes()
    w = Weights("r.attn", D)
    g.inits += [t for t in w.tensors() if ".q_proj." not in t.name] + shape_consts(HEADS, d_k)
    g.inits += [weight("latents", 1, 4, D), weight("q_folded", 1, HEADS, 4, d_k)]
    if concat:
        g.inits.append(weight("val_9", 2 * D))
    kv = g.add("Concat", ["x", "latents"], "kv_in_out", axis=1)
    k_t = g.add("Transpose", [g.add("Reshape", [g.add("Add", [g.add("MatMul", [kv, "r.attn.k_proj.weight"], "k_mm_out"),
                                                                  "r.attn.k_proj.bias"], "k_out"), "split_heads"],
                                    "k_h_out")], "k_t_out", perm=[0, 2, 3, 1])
    v = g.add("Transpose", [g.add("Reshape", [g.add("Add", [g.add("MatMul", [kv, "r.attn.v_proj.weight"], "v_mm_out"),
                                                            "r.attn.v_proj.bias"], "v_out"), "split_heads"],
                                  "v_h_out")], "v_t_out", perm=[0, 2, 1, 3])
    probs = g.add("Softmax", [g.add("MatMul", ["q_folded", k_t], "scores_out")], "probs_out", axis=-1)
    ctx = g.add("Transpose", [g.add("MatMul", [probs, v], "ctx_out")], "ctx_t_out", perm=[0, 2, 1, 3])
    merged = g.add("Reshape", [ctx, "merge_heads"], "merged_out")
    out = g.add("Add", [g.add("MatMul", [merged, "r.attn.o_proj.weight"], "o_mm_out"), "r.attn.o_proj.bias"], "o_out")
    outputs = [value("y", 1, 4, D)]
    g.add("Add", [out, "latents"], "y")
    if concat:
        g.add("Mul", ["val_9", "val_9"], "z")
        outputs.append(value("z", 2 * D))
    m = model(g.nodes, g.inits, [value("x", 1, 6, D)], outputs)
    folded = {"latents": "['r.latents', 'expand', 'val_1']",
              "q_folded": "['r.latents', 'r.norm.weight', 'r.attn.q_proj.weight', 'val_2']"}
    if concat:
        folded["val_9"] = "['lstm.bias_ih', 'lstm.bias_hh']"
    for name, sources in folded.items():
        t = next(i for i in g.inits if i.name == name)
        info = onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(t.dims))
        info.metadata_props.add(key=_FOLDED_KEY, value=sources)
        m.graph.value_info.append(info)
    params = ["r.latents", "r.norm.weight", "r.attn.q_proj.weight", "lstm.bias_ih", "lstm.bias_hh"]
    m.graph.metadata_props.add(key="pkg.torch.export.ExportedProgram.graph_signature", value="\n# inputs\n" + "".join(
        f"p_{n.replace('.', '_')}: PARAMETER target='{n}'\n" for n in params))
    return audit_graph(model_to_graph(m, "resampler.onnx"))


def test_a_query_computed_at_export_says_its_projection_is_folded_away() -> None:
    report = _folded_query(concat=False)
    assert not report.misses, report.misses
    (b,) = report.blocks
    assert (b.num_heads, b.d_k, b.params.q, b.params.k) == (HEADS, D // HEADS, 0, D * D + D)
    # Q and K/V made of the same latents (the provenance of the stored Q and of the stored latents
    # joined to the context): self, as the unfolded graph says.
    assert b.kind == "self"
    (missing,) = [e for e in b.evidence if e.field == "q"]
    assert "computed at export from r.attn.q_proj.weight, r.latents, r.norm.weight" in missing.detail
    (note,) = [w for w in report.warnings if "held nowhere on their own" in w]
    assert "r.attn.q_proj.weight (in q_folded); r.norm.weight (in q_folded)" in note
    assert "r.latents" not in note  # held by the stored latents


def test_parameters_side_by_side_are_not_folded_away() -> None:
    """A tensor folded from two biases with room for both holds them: no warning for it."""
    report = _folded_query(concat=True)
    (note,) = [w for w in report.warnings if "held nowhere on their own" in w]
    assert "lstm" not in note


# ----------------------------------------------------------------------------- a real export


def _static_export(module: Any, inputs: tuple[Any, ...], path: Path) -> Report:
    """``module`` exported by the dynamo exporter with static shapes (batch 1), audited."""
    torch = pytest.importorskip("torch")

    class Outputs(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.model = module

        def forward(self, *args: Any) -> Any:
            out = self.model(*args)
            return out if isinstance(out, tuple) else out.to_tuple()

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(Outputs().eval(), inputs, None, dynamo=True, verbose=False, report=False,
                                    opset_version=18)
        program.save(str(path), external_data=False)
    return audit(str(path))


def _transformers() -> Any:
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tests.conformance.zoo import _hf_quiet

    _hf_quiet()
    return transformers


_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, image_size=16,
               patch_size=4)


@pytest.mark.slow  # seconds: a transformers model exported (-m 'not slow' leaves it out)
def test_siglip_static_dynamo_export_finds_the_pooling_head(tmp_path: Path) -> None:
    import torch

    from tests.conformance.zoo import _eval, count_params

    transformers = _transformers()
    torch.manual_seed(0)
    siglip = _eval(transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**_VISION)))
    report = _static_export(siglip, (torch.randn(1, 3, 16, 16),), tmp_path / "siglip.onnx")
    attention = siglip.head.attention
    d = attention.embed_dim
    blocks = {b.name.removeprefix("model."): b for b in report.blocks}
    assert set(blocks) == {"encoder.layers.0.self_attn", "head.attention"}, report.misses
    pool = blocks["head.attention"]
    assert (pool.kind, pool.num_heads, pool.d_k, pool.d_model) == ("cross", attention.num_heads,
                                                                    d // attention.num_heads, d)
    assert pool.params.total == count_params(attention)
    assert blocks["encoder.layers.0.self_attn"].kind == "self"
    assert report.model.total_params == count_params(siglip)
    assert not report.misses


@pytest.mark.slow
def test_aimv2_static_export_finds_the_pooling_head(tmp_path: Path) -> None:
    """Aimv2's head attends from its class token with no Q projection: K/V only, the scale unknown
    (half of it folded into the stored query)."""
    import torch

    from tests.conformance.zoo import _eval, count_params

    transformers = _transformers()
    torch.manual_seed(0)
    aim = _eval(transformers.Aimv2VisionModel(transformers.Aimv2VisionConfig(**_VISION, use_head=True)))
    report = _static_export(aim, (torch.randn(1, 3, 16, 16),), tmp_path / "aimv2.onnx")
    assert not report.misses, report.misses
    pool = next(b for b in report.blocks if b.name == "model.head")
    head = aim.head
    assert (pool.kind, pool.num_heads, pool.d_k) == ("cross", head.num_heads, head.hidden_size // head.num_heads)
    assert (pool.params.q, pool.d_model) == (0, head.hidden_size)
    assert pool.params.total == count_params(head) - head.cls_token.numel()  # K, V and output_proj
    assert pool.scale is None
    assert report.model.total_params == count_params(aim)


@pytest.mark.slow
def test_qformer_static_export_finds_both_attentions(tmp_path: Path) -> None:
    """BLIP-2's Q-Former: its query tokens (expanded, folded, normalised) attend to each other and to
    the image features."""
    import torch

    from tests.conformance.zoo import _eval, count_params

    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.Blip2QFormerConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                             num_attention_heads=4, encoder_hidden_size=24, vocab_size=100)

    class QFormer(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.qformer = transformers.Blip2QFormerModel(config)
            self.query_tokens = torch.nn.Parameter(torch.randn(1, 4, 32))

        def forward(self, image: Any) -> Any:
            tokens = self.query_tokens.expand(image.shape[0], -1, -1)
            return self.qformer(query_embeds=tokens, encoder_hidden_states=image).to_tuple()

    model = _eval(QFormer())
    report = _static_export(model, (torch.randn(1, 6, 24),), tmp_path / "qformer.onnx")
    assert not report.misses, report.misses
    layer = model.qformer.encoder.layer[0]

    def projections(block: Any) -> int:  # Q, K, V and O (the output LayerNorm is no projection)
        a = block.attention
        return sum(count_params(m) for m in (a.query, a.key, a.value, block.output.dense))

    kinds = {b.name.removeprefix("model.qformer.encoder.layer.0."): (b.kind, b.num_heads, b.params.total)
             for b in report.blocks}
    assert kinds == {"attention": ("self", 4, projections(layer.attention)),
                     "crossattention": ("cross", 4, projections(layer.crossattention))}
    assert report.model.total_params == count_params(model)
