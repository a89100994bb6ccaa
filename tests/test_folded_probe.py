"""Attention pooling whose learned probe the exporter folded into a stored batch of tokens.

A static-shape dynamo export of SigLIP's pooling head (nn.MultiheadAttention from a learned probe
[1, 1, d] to the encoder output) has no broadcast of the probe left: ``probe.repeat(1, 1, 1)`` and
the batch-first transpose fold into one stored tensor [1, 1, d] that the Q projection's MatMul reads.
Those tokens are a value of the run as a broadcast probe is, so the head is a cross-attention block
with its Q projection; a stored matrix times a weight (a factorized weight) and a stored tensor the
exporter says is no parameter stay what they are.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path
from typing import Any

import onnx
import pytest
from attention_graphs import Nodes, Weights, mha_nodes, model, shape_consts, value, weight

from mhainspect.frontends.onnx.loader import model_to_graph
from mhainspect.pipeline import audit, audit_graph
from mhainspect.results import Report

D, HEADS = 16, 4
_KIND_KEY = "pkg.torch.export.graph_signature.InputSpec.kind"


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
    assert miss.code == "no_score_product", miss.reason


# ----------------------------------------------------------------------------- a real export


@pytest.mark.slow  # seconds: a transformers model exported (-m 'not slow' leaves it out)
def test_siglip_static_dynamo_export_finds_the_pooling_head(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tests.conformance.zoo import _eval, _hf_quiet, count_params

    _hf_quiet()
    torch.manual_seed(0)
    cfg = transformers.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                          num_attention_heads=4, image_size=16, patch_size=4)
    siglip = _eval(transformers.SiglipVisionModel(cfg))

    class Outputs(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.model = siglip

        def forward(self, pixels: Any) -> Any:
            return self.model(pixels).to_tuple()

    path = tmp_path / "siglip.onnx"
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(Outputs().eval(), (torch.randn(1, 3, 16, 16),), None, dynamo=True,
                                    verbose=False, report=False, opset_version=18)
        program.save(str(path), external_data=False)
    report = audit(str(path))
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
