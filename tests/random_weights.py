"""Random-weight models for export tests: noise on every parameter, and a plain-tensor wrapper.

Exporters drop all-zero biases, so a freshly initialised model would hold fewer parameters in the
file than in the module; a little noise on every parameter keeps the two equal.
"""

from __future__ import annotations

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
