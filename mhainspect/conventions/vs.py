"""``calc ... --vs``: two argument sets of one layer, and which changed argument moved the count."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from mhainspect.conventions.common import ArgValue, Calculation, UserValue, spelling_key, thousands
from mhainspect.conventions.registry import calculate


@dataclass(frozen=True)
class VsChange:
    """One argument that differs between the two sets, and what changing it alone does.

    ``alone``: "moves" (the count changes with this argument alone), "same" (it does not), or
    "invalid" (the layer cannot take it alone; ``reason`` says why)."""

    argument: str
    before: ArgValue
    after: ArgValue
    alone: Literal["moves", "same", "invalid"]
    alone_total: int | None
    reason: str = ""


@dataclass(frozen=True)
class VsResult:
    """Two argument sets of one layer side by side (``calc ... --vs ...``)."""

    base: Calculation
    other: Calculation
    changes: tuple[VsChange, ...]
    sentence: str  # which argument moved the count, in one sentence


def _same_keys(args: Mapping[str, UserValue], changes: Mapping[str, UserValue]) -> dict[str, UserValue]:
    """``args`` with ``changes`` applied, names matched as calculate() matches them."""
    out = {k: v for k, v in args.items() if spelling_key(k) not in {spelling_key(c) for c in changes}}
    out.update(changes)
    return out


def vs(convention: str, args: Mapping[str, UserValue], changes: Mapping[str, UserValue]) -> VsResult:
    """The layer with ``args`` (A) and with ``changes`` applied to them (B), and for each changed
    argument whether changing it alone moves the count. Raises ValueError when A or B is invalid."""
    base = calculate(convention, args)
    other = calculate(convention, _same_keys(args, changes))
    before = {spelling_key(k): (k, v) for k, v in base.arguments}
    after = {spelling_key(k): v for k, v in other.arguments}
    moved: list[VsChange] = []
    for given, raw in changes.items():  # only what the user changed, not defaults that follow it
        name, old = before.get(spelling_key(given), (given, None))
        value = after.get(spelling_key(given))
        if old == value:
            continue
        try:
            alone = calculate(convention, _same_keys(args, {given: raw}))
        except ValueError as exc:
            moved.append(VsChange(name, old, value, "invalid", None, str(exc)))
            continue
        moved.append(VsChange(name, old, value, "moves" if alone.total != base.total else "same", alone.total))
    return VsResult(base, other, tuple(moved), _vs_sentence(base, other, moved))


def _vs_sentence(base: Calculation, other: Calculation, changes: Sequence[VsChange]) -> str:
    def arrow(c: VsChange) -> str:
        return f"{c.argument} ({c.before} → {c.after})"

    diff = other.total - base.total
    movers = [c for c in changes if c.alone == "moves"]
    still = [c for c in changes if c.alone == "same"]
    invalid = [c for c in changes if c.alone == "invalid"]
    if not changes:
        return f"Both sets are the same layer: {thousands(base.total)} parameters."
    if diff == 0:
        head = f"The count is the same ({thousands(base.total)}): "
    else:
        head = f"The count goes from {thousands(base.total)} to {thousands(other.total)} ({diff:+,}): "
    parts = []
    if movers:
        parts.append(", ".join(arrow(c) for c in movers) + (" moves" if len(movers) == 1 else " move") + " it")
    if still:
        parts.append(", ".join(arrow(c) for c in still) + " alone " + ("does" if len(still) == 1 else "do")
                     + " not change it")
    if invalid:
        parts.append(", ".join(arrow(c) for c in invalid) + " cannot change alone ("
                     + "; ".join(c.reason for c in invalid) + ")")
    if diff != 0 and not movers:
        parts.append("only the changes together move it")
    return head + "; ".join(parts) + "."
