"""Fold repeated findings for display: 16 identical MHA005 flags of a 16-layer model are one line
naming ``model.layers.{0–15}.self_attn``. Pure; shared by the table and markdown renderers."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from mhainspect.results import Flag

__all__ = ["FlagGroup", "group_flags", "join_names", "number_ranges"]

_DIGITS = re.compile(r"(\d+)")
_LISTED = 4  # names listed before "and N more" when they share no numbered pattern


@dataclass(frozen=True)
class FlagGroup:
    """Flags with the same code, severity and message, raised for ``blocks`` (in report order)."""

    flag: Flag  # the first one (its block is the first of ``blocks``)
    blocks: tuple[str | None, ...]

    @property
    def count(self) -> int:
        return len(self.blocks)


def group_flags(flags: Sequence[Flag], *, group: bool = True) -> list[FlagGroup]:
    """Flags in report order, identical ones (same code, severity, message) folded into the first."""
    if not group:
        return [FlagGroup(f, (f.block,)) for f in flags]
    order: list[tuple[object, ...]] = []
    members: dict[tuple[object, ...], list[Flag]] = {}
    for f in flags:
        key = (f.code, f.severity, f.message)
        if key not in members:
            members[key] = []
            order.append(key)
        members[key].append(f)
    return [FlagGroup(members[k][0], tuple(f.block for f in members[k])) for k in order]


def number_ranges(numbers: Sequence[int]) -> str:
    """[0, 1, 2, 3, 5, 7, 8] -> '0–3, 5, 7–8' (sorted, each number once)."""
    values = sorted(set(numbers))
    parts: list[str] = []
    start = prev = values[0] if values else 0
    following: list[int | None] = [*values[1:], None]
    for n in following:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}–{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(parts) if values else ""


def join_names(names: Sequence[str]) -> str:
    """Block names in one short label: 'model.layers.{0–15}.self_attn' when they differ in one
    number only, else the names themselves (the first few and how many more)."""
    unique = list(dict.fromkeys(names))
    if len(unique) == 1:
        return unique[0]
    split = [_DIGITS.split(n) for n in unique]
    if len({len(s) for s in split}) == 1:
        differing = [i for i in range(len(split[0])) if len({s[i] for s in split}) > 1]
        if len(differing) == 1 and differing[0] % 2 == 1:  # odd positions are the digit runs
            i = differing[0]
            spelled = [s[i] for s in split]
            if all(str(int(x)) == x for x in spelled):  # no leading zeros: the numbers are the names
                head, tail = "".join(split[0][:i]), "".join(split[0][i + 1:])
                return f"{head}{{{number_ranges([int(x) for x in spelled])}}}{tail}"
    if len(unique) <= _LISTED:
        return ", ".join(unique)
    return ", ".join(unique[:_LISTED - 1]) + f" and {len(unique) - _LISTED + 1} more"
