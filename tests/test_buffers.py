"""Buffers are not parameters: a checkpoint stores a module's buffers beside its parameters
(BatchNorm's running statistics, rotary inv_freq, index tables), ``model.parameters()`` does not
count them, and neither does the audit; their bytes are stored, so they count in the weight bytes,
as overhead (the part that is not parameters)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mhainspect.ir.weights import WeightMeta, count_weights, is_buffer_name
from mhainspect.pipeline import audit

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from tests.random_weights import add_noise  # noqa: E402

nn = torch.nn


class _Net(nn.Module):  # type: ignore[misc]
    """A conv stem with BatchNorm, an attention layer and a rotary frequency buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16))
        self.norm = nn.BatchNorm1d(16)
        self.attn = nn.MultiheadAttention(16, 4)
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 4, 2).float() / 4)))
        self.register_buffer("position_ids", torch.arange(32).expand((1, -1)))

    def forward(self, x: Any) -> Any:
        return self.attn(x, x, x)[0]


def _model() -> Any:
    torch.manual_seed(0)
    model = add_noise(_Net())
    for m in model.modules():  # statistics a training run would have left
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            m.num_batches_tracked.fill_(7)
    return model


def _bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize("fmt", ["safetensors", "pt"])
def test_checkpoint_buffers_are_not_parameters(fmt: str, tmp_path: Path) -> None:
    model = _model()
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    path = tmp_path / f"model.{fmt}"
    if fmt == "safetensors":
        safetensors_torch.save_file(state, str(path))
    else:
        torch.save(state, str(path))
    report = audit(path)
    m = report.model
    params = dict(model.named_parameters())
    assert m.total_params == sum(p.numel() for p in params.values())
    buffers = [v for k, v in state.items() if k not in params]
    assert {k for k in state if k not in params} >= {"stem.1.running_mean", "norm.running_var", "inv_freq"}
    assert m.weight_bytes == _bytes(state.values())
    assert m.weight_bytes_overhead == _bytes(buffers)  # the buffers' bytes, apart from the parameters'
    (b,) = report.blocks
    assert b.params.total == sum(p.numel() for p in model.attn.parameters())


def test_buffer_names() -> None:
    for name in ("bn.running_mean", "layers.0.self_attn.rotary_emb.inv_freq", "embeddings.position_ids",
                 "layers.1.blocks.0.attn.relative_position_index", "num_batches_tracked"):
        assert is_buffer_name(name), name
    for name in ("bn.weight", "bn.bias", "attn.relative_position_bias_table", "attention_biases", "freq"):
        assert not is_buffer_name(name), name
    weights = {n: WeightMeta(n, (8,), "float32", n) for n in ("bn.weight", "bn.running_mean", "bn.running_var")}
    assert count_weights(weights) == 8
