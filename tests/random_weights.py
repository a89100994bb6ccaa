"""Random-weight models for export tests: noise on every parameter, and a plain-tensor wrapper.

Exporters drop all-zero biases, so a freshly initialised model would hold fewer parameters in the
file than in the module; a little noise on every parameter keeps the two equal.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch


def add_noise(model: Any, scale: float = 0.02) -> Any:
    """``model`` (in eval mode) with N(0, scale²) noise added to every parameter; seeded, so repeatable."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)
    return model.eval()


class LastHiddenState(torch.nn.Module):  # type: ignore[misc]
    """(input_ids, attention_mask) -> last_hidden_state: a transformers model as a tensor function."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.m = model

    def forward(self, ids: Any, mask: Any) -> Any:
        return self.m(input_ids=ids, attention_mask=mask).last_hidden_state


def export_last_hidden_state(model: Any, ids: Any, path: Path, *, dynamic_batch: bool = False) -> Path:
    """``model`` (a transformers base model) to ONNX through the TorchScript exporter, opset 17, as
    (ids, mask) -> out; ``dynamic_batch``: the batch axis symbolic."""
    axes = {"ids": {0: "batch"}, "mask": {0: "batch"}, "out": {0: "batch"}} if dynamic_batch else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(LastHiddenState(model).eval(), (ids, torch.ones_like(ids)), str(path),
                          input_names=["ids", "mask"], output_names=["out"], opset_version=17, dynamo=False,
                          dynamic_axes=axes)
    return path
