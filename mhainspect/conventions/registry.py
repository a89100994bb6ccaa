"""The conventions by name, and what is asked of one: its count from user arguments, the same layer
at other head counts or K/V head counts."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from mhainspect.conventions.arguments import parse
from mhainspect.conventions.common import Calculation, Convention, Spec, UserValue, spelling_key, with_notes
from mhainspect.conventions.huggingface import CONVENTION as HF
from mhainspect.conventions.keras import CONVENTION as KERAS
from mhainspect.conventions.matlab import CONVENTION as MATLAB
from mhainspect.conventions.pytorch import CONVENTION as PYTORCH
from mhainspect.conventions.roles import ROLES
from mhainspect.conventions.t5 import CONVENTION as T5

REGISTRY: Mapping[str, Convention] = MappingProxyType(
    {c.name: c for c in (PYTORCH, KERAS, MATLAB, HF, T5)}
)

CONVENTIONS: Mapping[str, Callable[..., Calculation]] = MappingProxyType({n: c.count for n, c in REGISTRY.items()})
"""Convention name -> calculation function."""

LAYER_NAMES: Mapping[str, str] = MappingProxyType({n: c.layer_name for n, c in REGISTRY.items()})
"""Human-readable layer name per convention."""


def _spec(convention: str) -> Spec:
    c = REGISTRY.get(convention)
    if c is None:
        raise ValueError(f"unknown convention {convention!r}; choose one of: {', '.join(CONVENTIONS)}")
    return c.spec


def calculate(convention: str, args: Mapping[str, UserValue]) -> Calculation:
    """Parse user-given arguments (strings as typed, or already-typed values) and calculate.

    Argument names are matched ignoring case, ``_`` and ``-``. Integers are decimal; booleans
    true/false/yes/no/1/0; optional integers also None/auto. Raises ValueError with a one-line
    message (naming the valid arguments for unknown or missing ones).
    """
    parsed, notes = parse(convention, _spec(convention), args)
    calc = with_notes(CONVENTIONS[convention](**parsed), notes)
    return dataclasses.replace(calc, given=tuple(args.items()))


def heads_argument(convention: str) -> str:
    """The name of the head-count argument of a convention (num_heads, NumHeads, ...)."""
    return _spec(convention).heads


def what_if(
    calc_fn_name: str, args: Mapping[str, UserValue], heads: Sequence[int]
) -> tuple[tuple[int, Calculation | str], ...]:
    """The same layer at other head counts, every other argument kept as the user gave it.

    Arguments left out keep their defaults, which may themselves follow the heads (e.g. hf's
    num_key_value_heads). A head count the layer rejects gives the reason instead of a count.
    """
    spec = _spec(calc_fn_name)
    head_key = spelling_key(spec.heads)
    base = {k: v for k, v in args.items() if spelling_key(k) != head_key}
    rows: list[tuple[int, Calculation | str]] = []
    for h in heads:
        try:
            rows.append((h, calculate(calc_fn_name, {**base, spec.heads: h})))
        except ValueError as exc:
            rows.append((h, str(exc)))
    return tuple(rows)


def kv_heads_of(calc: Calculation) -> int:
    """K/V heads of a calculated layer: the value projection is kv_heads × d_v wide."""
    return calc.v_width // calc.d_v if calc.d_v else calc.num_heads


def kv_what_if(convention: str, args: Mapping[str, UserValue], kv_heads: Sequence[int]
               ) -> tuple[tuple[int, Calculation | str], ...]:
    """The same layer with other K/V head counts (MHA: as many as query heads; GQA: fewer; MQA: one),
    every other argument as given. A convention without a K/V head argument gives the reason."""
    spec = _spec(convention)
    kv_names = {spelling_key(n) for n in ROLES["kv_heads"]}
    param = next((p.name for p in spec.params if spelling_key(p.name) in kv_names), None)
    rows: list[tuple[int, Calculation | str]] = []
    for g in kv_heads:
        if param is None:
            rows.append((g, f"{LAYER_NAMES.get(convention, convention)} has no separate K/V head count: K and V "
                            "have as many heads as Q"))
            continue
        base = {k: v for k, v in args.items() if spelling_key(k) != spelling_key(param)}
        try:
            rows.append((g, calculate(convention, {**base, param: g})))
        except ValueError as exc:
            rows.append((g, str(exc)))
    return tuple(rows)
