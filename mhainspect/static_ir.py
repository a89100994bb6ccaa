"""Neutral data for sources without a graph (checkpoints, module parameter lists, configs).

Loaders produce these; the name grouping and block assembly in ``mhainspect.matchers`` consume
them. Like ``mhainspect.graph``, this module imports nothing above the vocabulary in findings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from mhainspect.dtypes import is_float
from mhainspect.findings import Evidence, EvidenceSource


@dataclass(frozen=True)
class WeightMeta:
    """One tensor: name, shape and identity. ``layout`` is "out_in" (nn.Linear), "in_out" (Conv1D,
    Keras/Flax kernels) or "" when only the name can tell."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    storage_key: str
    layout: str = ""

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class HeadOffers:
    """What a module or config says about one block (None: it does not say)."""

    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    v_head_dim: int | None = None
    source: str = EvidenceSource.CONFIG  # an EvidenceSource (module, config, gguf, head_shape); checked
    detail: str = ""

    def __post_init__(self) -> None:
        if type(self.source) is not EvidenceSource:
            object.__setattr__(self, "source", EvidenceSource(self.source))

    def evidence(self) -> list[Evidence]:
        out: list[Evidence] = []
        for field, value in (("num_heads", self.num_heads), ("num_kv_heads", self.num_kv_heads),
                             ("d_k", self.head_dim), ("d_v", self.v_head_dim)):
            if isinstance(value, int) and value > 0:
                out.append(Evidence(field, value, self.source, self.detail))
        return out


def count_weights(weights: Mapping[str, WeightMeta]) -> int:
    """Unique float tensors by storage (tied weights once); integer buffers are not parameters.

    The one counter for weight lists (checkpoints, module parameters); graphs are counted by use
    in ``mhainspect.analyze.count_parameters``."""
    seen: set[str] = set()
    total = 0
    for t in weights.values():
        if t.storage_key in seen or not is_float(t.dtype):
            continue
        seen.add(t.storage_key)
        total += t.numel
    return total
