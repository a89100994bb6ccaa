"""A Softmax without a Q·Kᵀ before it: the near miss says what the walk back actually met, and
calls it a classifier or router only when that is what it saw (a product with a stored weight)."""

from __future__ import annotations

from attention_graphs import Nodes, model, value, weight
from onnx import helper

from mhainspect.frontends.onnx.loader import model_to_graph
from mhainspect.pipeline import audit_graph


def _miss_reason(nodes: Nodes) -> str:
    m = model(nodes.nodes, nodes.inits, [value("x", 2, 8, 16)], [value("y", 2, 8, "n")])
    report = audit_graph(model_to_graph(m, "g.onnx"))
    assert not report.blocks and len(report.misses) == 1
    return report.misses[0].reason


def test_scores_laid_out_by_an_op_no_score_path_holds_are_named() -> None:
    """Longformer's chunked sliding window scatters Q·Kᵀ into its band (ScatterND) before the
    Softmax: the reason names that op, not a classifier."""
    g = Nodes()
    g.inits += [weight("wq", 16, 16), weight("wk", 16, 16), helper.make_tensor("pads", 7, [6], [0, 0, 0, 0, 0, 2])]
    q = g.add("MatMul", ["x", "wq"], "q_out")
    k = g.add("MatMul", ["x", "wk"], "k_out")
    kt = g.add("Transpose", [k], "kt_out", perm=[0, 2, 1])
    scores = g.add("MatMul", [q, kt], "scores_out")
    band = g.add("Pad", [scores, "pads"], "band_out")
    g.add("Softmax", [band], "y", axis=-1)
    reason = _miss_reason(g)
    assert "Pad band" in reason and "classifier" not in reason


def test_a_classifier_softmax_is_still_called_one() -> None:
    g = Nodes()
    g.inits.append(weight("w", 16, 4))
    logits = g.add("MatMul", ["x", "w"], "logits_out")
    g.add("Softmax", [logits], "y", axis=-1)
    assert "a classifier or router softmax" in _miss_reason(g)
