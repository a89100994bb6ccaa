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
