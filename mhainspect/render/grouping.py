"""Fold repeated findings for display: 16 identical MHA005 flags of a 16-layer model are one line
naming ``model.layers.{0–15}.self_attn``, and 16 blocks with the same numbers one row
(``model.layers.{0–15}.self_attn ×16``). Pure; shared by the table, markdown and HTML renderers."""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from mhainspect.results import AttentionBlock, Flag

__all__ = ["BlockGroup", "FlagGroup", "common_prefix", "fold_names", "group_blocks", "group_flags", "join_names",
           "number_ranges"]

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


@dataclass(frozen=True)
class BlockGroup:
    """Blocks shown as one row: the same numbers, names that differ in one number (layers 0–31)."""

    blocks: tuple[AttentionBlock, ...]
    label: str  # 'model.layers.{0–31}.self_attn', or the one block's name

    @property
    def count(self) -> int:
        return len(self.blocks)

    @property
    def first(self) -> AttentionBlock:
        return self.blocks[0]


def fold_names(names: Sequence[str]) -> str | None:
    """'model.layers.{0–31}.self_attn' for distinct names that differ in one number only (spelled
    without leading zeros); None when they differ otherwise. One name is itself."""
    unique = list(dict.fromkeys(names))
    if len(unique) != len(names):
        return None
    if len(unique) == 1:
        return unique[0]
    label = join_names(unique)
    return label if "{" in label else None


def _template(name: str) -> tuple[str, ...]:
    """The name with every number blanked: names of one template may fold into one label."""
    return tuple("#" if i % 2 else part for i, part in enumerate(_DIGITS.split(name)))


def group_blocks(blocks: Sequence[AttentionBlock], key: Callable[[AttentionBlock], Hashable], *,
                 group: bool = True) -> list[BlockGroup]:
    """Blocks in report order, those with the same ``key`` (the numbers a view shows) whose names
    differ in one number folded into one group, placed where its first block is. Where names
    differ in several numbers (encoder.block.{i}.layer.{j}), the number that leaves the fewest
    groups is folded."""
    if not group:
        return [BlockGroup((b,), b.name) for b in blocks]
    buckets: dict[tuple[Hashable, tuple[str, ...]], list[int]] = {}
    for i, b in enumerate(blocks):
        buckets.setdefault((key(b), _template(b.name)), []).append(i)
    found: list[list[int]] = []
    for members in buckets.values():
        found.extend(_fold_bucket(blocks, members))
    placed: list[tuple[int, BlockGroup]] = []
    for members in found:
        chosen = tuple(blocks[i] for i in members)
        label = fold_names([b.name for b in chosen]) if len(chosen) > 1 else None
        if label is None:
            placed.extend((i, BlockGroup((blocks[i],), blocks[i].name)) for i in members)
        else:
            placed.append((members[0], BlockGroup(chosen, label)))
    return [g for _, g in sorted(placed, key=lambda item: item[0])]


def _fold_bucket(blocks: Sequence[AttentionBlock], members: list[int]) -> list[list[int]]:
    """Split one bucket (same key, same template) into sets whose names differ in one number."""
    parts = [_DIGITS.split(blocks[i].name) for i in members]
    differing = [p for p in range(1, len(parts[0]), 2) if len({s[p] for s in parts}) > 1]
    if len(differing) <= 1:
        return [members]

    def split_by(fold: int) -> list[list[int]]:
        sets: dict[tuple[str, ...], list[int]] = {}
        for i, s in zip(members, parts):
            sets.setdefault(tuple(s[p] for p in differing if p != fold), []).append(i)
        return list(sets.values())

    return min((split_by(p) for p in differing), key=len)


_SEPARATORS = "./"


def common_prefix(names: Sequence[str]) -> str:
    """What every name starts with, up to a '.' or '/', keeping the word before the first number
    that differs: ['model.layers.0.attn', 'model.layers.1.attn'] -> 'model.' (the rows then read
    'layers.0.attn'). '' for fewer than two names or nothing in common."""
    unique = list(dict.fromkeys(names))
    if len(unique) < 2:
        return ""
    first, last = min(unique), max(unique)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    cuts = [i + 1 for i in range(n) if first[i] in _SEPARATORS]
    while cuts:
        rest = [name[cuts[-1]:] for name in unique]
        prefix = first[:cuts[-1]]
        if all(r and not r[0].isdigit() for r in rest) and prefix.strip(_SEPARATORS):
            return prefix  # not a bare '/' or './': that says nothing a reader could drop
        cuts.pop()
    return ""
