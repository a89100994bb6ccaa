"""timm attention modules with learned score bias tables, from their checkpoints: LeViT (packed
qkv of per-head d_k + d_k + attn_ratio·d_k rows behind a BatchNorm, a [K; V] packed downsampling
attention, ``attention_biases`` [h, N]) and Swin (``relative_position_bias_table`` [N, h], each
stage its own heads). The heads are read off each block's own table; a --num-heads that
contradicts a stage's table is a conflict of that block, not applied.

The modules (tests/timm_like.py) name and shape their parameters as timm's do; truth is the
modules' own attributes and parameters, and the ONNX export of the same module."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from mhainspect.analysis.stated_heads import stated_offer
from mhainspect.pipeline import AuditOptions, audit, audit_module

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from tests.random_weights import add_noise  # noqa: E402
from tests.timm_like import Levit, LevitAttention, LevitAttentionDownsample, Swin, WindowAttention  # noqa: E402


def _model(cls: Any) -> Any:
    torch.manual_seed(0)
    model = add_noise(cls()).eval()
    for m in model.modules():  # BatchNorm statistics a training run would have left: buffers, not parameters
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    return model


def _save(model: Any, path: Path) -> Path:
    safetensors_torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def _truth(model: Any, kinds: tuple[type, ...]) -> dict[str, tuple[Any, ...]]:
    """Per attention module: heads, d_k, d_v, its parameters outside the score table, the table."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, kinds):
            table = m.attention_biases if hasattr(m, "attention_biases") else m.relative_position_bias_table
            d = (m.key_dim, m.val_dim) if hasattr(m, "key_dim") else (m.qkv.out_features // 3 // m.num_heads,) * 2
            out[name] = (m.num_heads, *d, sum(p.numel() for p in m.parameters()) - table.numel(), table.numel())
    return out


def _found(report: Any) -> dict[str, tuple[Any, ...]]:
    return {b.name: (b.num_heads, b.d_k, b.d_v, b.params.total, b.params.extra) for b in report.blocks}


def test_levit_checkpoint(tmp_path: Path) -> None:
    model = _model(Levit)
    truth = _truth(model, (LevitAttention, LevitAttentionDownsample))
    assert len(truth) == 8 and {t[1] != t[2] for t in truth.values()} == {True}  # d_k ≠ d_v everywhere
    report = audit(_save(model, tmp_path / "levit.safetensors"))
    assert _found(report) == truth
    assert report.model.total_params == sum(p.numel() for p in model.parameters())  # BatchNorm statistics not in it
    assert not report.misses and not [f for f in report.flags if f.code in ("MHA004", "MHA007")]
    # The graph of the same module finds the same blocks (its names repeat the Sequential's: stages.stages.0...).
    x = torch.randn(2, 3, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(tmp_path / "levit.onnx"), dynamo=False, opset_version=17)
    graph = audit(tmp_path / "levit.onnx")
    assert sorted(_found(graph).values()) == sorted(truth.values())


def test_levit_module() -> None:
    model = _model(Levit)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = audit_module(model)
    assert _found(report) == _truth(model, (LevitAttention, LevitAttentionDownsample))


def test_swin_heads_per_stage_from_the_tables(tmp_path: Path) -> None:
    model = _model(Swin)
    truth = _truth(model, (WindowAttention,))
    assert {t[0] for t in truth.values()} == {2, 4}
    path = _save(model, tmp_path / "swin.safetensors")
    assert _found(audit(path)) == truth
    # --num-heads 4: the stage whose tables say 2 keeps 2, with the disagreement flagged; the other agrees.
    report = audit(path, AuditOptions(stated_heads=stated_offer(4, None)))
    assert _found(report) == truth
    flagged = {f.block for f in report.flags if f.code == "MHA007"}
    assert flagged == {n for n, t in truth.items() if t[0] != 4}
    for b in report.blocks:
        if b.name in flagged:
            assert any("option says 4" in c for c in b.conflicts), b.conflicts


def test_wrapped_linear_is_its_wrappers_role(tmp_path: Path) -> None:
    """transformers' Gemma 4 vision attention wraps each projection's Linear (``q_proj.linear``, with
    clipping bounds as buffers): the wrapper names the role, as timm's LinearNorm does."""
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Gemma4VisionModel"):
        pytest.skip("this transformers has no Gemma 4")
    transformers.logging.set_verbosity_error()
    config = transformers.Gemma4VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=4, head_dim=8,
                                             use_clipped_linears=True)
    torch.manual_seed(0)
    model = add_noise(transformers.Gemma4VisionModel(config))
    model.save_pretrained(tmp_path)
    report = audit(tmp_path)
    attns = [m for n, m in model.named_modules() if n.endswith("self_attn")]
    assert len(report.blocks) == len(attns) == 2
    for b, a in zip(report.blocks, attns):
        # Its projections and its per-head q_norm/k_norm ([8] each; v_norm has no weight).
        linears = [m for m in a.modules() if isinstance(m, torch.nn.Linear)]
        norms = [a.q_norm, a.k_norm]
        assert (b.num_heads, b.d_k, b.params.total) == (4, 8, sum(p.numel() for m in linears + norms for p in m.parameters()))
    assert report.model.total_params == sum(p.numel() for p in model.parameters())  # the clipping bounds are buffers
