"""What changed between two reports (``mhainspect diff A B``): the model's totals and each block's
numbers side by side, with the difference. Pure data; mhainspect.analysis.diff computes it and
mhainspect.render.diff writes it."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from mhainspect.results.vocabulary import Vocabulary


class Change(Vocabulary):
    """How a block of A relates to B."""

    SAME = "same"  # matched, every compared number equal
    CHANGED = "changed"  # matched, some number differs
    ONLY_A = "only_a"  # in A, no block of B matches it (lost)
    ONLY_B = "only_b"  # in B, no block of A matches it (new)


class MatchedBy(Vocabulary):
    """How two blocks were paired."""

    NAME = "name"  # the same block name
    POSITION = "position"  # the next unpaired block of the same shape (kind, d_model, Q/K/V/O parameters)
    NONE = "none"  # not paired (only_a, only_b)


@dataclass(frozen=True)
class FieldDiff:
    """One compared number (or flag list) in A and in B; ``delta``: B - A when both are numbers."""

    field: str
    a: int | str | None
    b: int | str | None
    delta: int | None

    @property
    def changed(self) -> bool:
        return self.a != self.b


@dataclass(frozen=True)
class BlockDiff:
    """A block of A beside its match in B (either name None when it has none)."""

    a: str | None
    b: str | None
    matched_by: MatchedBy
    status: Change
    fields: tuple[FieldDiff, ...]  # every compared field, changed or not (None on the missing side)


@dataclass(frozen=True)
class ReportDiff:
    """Two reports compared: the model's fields, then the blocks in A's order (B's extra blocks last)."""

    a: str  # A's model path
    b: str
    a_format: str
    b_format: str
    model: tuple[FieldDiff, ...]
    blocks: tuple[BlockDiff, ...]

    @property
    def changed(self) -> bool:
        """A block that differs or has no match: what --fail-on-change fails on. The model's totals
        are shown, not counted: an export adds constant tables a checkpoint does not store."""
        return any(b.status is not Change.SAME for b in self.blocks)

    # The renderers sit above this module: looked up by name when called (as Report's are).
    def to_dict(self) -> dict[str, Any]:
        """``diff -f json``'s document (docs/diff.schema.json) as plain Python data."""
        data: dict[str, Any] = importlib.import_module("mhainspect.render.diff").diff_to_dict(self)
        return data

    def __str__(self) -> str:
        """``print(mhainspect.diff(a, b))``: the terminal form of ``mhainspect diff A B``."""
        text: str = importlib.import_module("mhainspect.render.diff").render_diff_text(self)
        return text

    def _repr_html_(self) -> str:
        text: str = importlib.import_module("mhainspect.render.diff").render_diff_html(self)
        return text
