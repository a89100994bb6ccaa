"""``compare``: the same numbers read under every convention, side by side."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from mhainspect.conventions.arguments import parse_value
from mhainspect.conventions.common import (
    ArgValue,
    Calculation,
    Comparison,
    Kind,
    UserValue,
    spelling_key,
    with_notes,
)
from mhainspect.conventions.registry import REGISTRY
from mhainspect.conventions.roles import BOOL_ROLES, ROLE_WORDS, ROLES, role_int


def _compare_roles(args: Mapping[str, UserValue]) -> tuple[dict[str, ArgValue], list[str]]:
    lookup: dict[str, tuple[str, str]] = {}
    for role, names in ROLES.items():
        for name in names:
            lookup[spelling_key(name)] = (role, name)
    ignorable = {spelling_key(n) for c in REGISTRY.values() for n in c.spec.ignored}
    values: dict[str, ArgValue] = {}
    given_as: dict[str, str] = {}
    ignored: list[str] = []
    for given, raw in args.items():
        hit = lookup.get(spelling_key(given))
        if hit is None:
            if spelling_key(given) in ignorable:
                ignored.append(f"{given}={raw}")
                continue
            valid = ", ".join(n for names in ROLES.values() for n in names)
            raise ValueError(f"unknown argument {given!r} for compare; valid: {valid}")
        role, name = hit
        kind: Kind = "bool" if role in BOOL_ROLES else "opt_int"
        value = parse_value(name, kind, raw)
        if role in values and values[role] != value:
            raise ValueError(
                f"conflicting values for {ROLE_WORDS[role]}: {given_as[role]}={values[role]} and {given}={value}"
            )
        values[role] = value
        given_as[role] = given
    for role in ("width", "heads"):
        if values.get(role) is None:
            raise ValueError(
                f"compare needs {ROLE_WORDS[role]} ({'/'.join(ROLES[role])}); got {', '.join(args) or 'nothing'}"
            )
    notes = []
    if "bias" not in values:
        notes.append(
            "No bias switch given: each layer keeps its own default (biases on in PyTorch, "
            "Keras and MATLAB; off in Llama-style and T5)."
        )
    if ignored:
        notes.append("Ignored (no effect on the parameter count): " + ", ".join(ignored) + ".")
    return values, notes


def compare(args: Mapping[str, UserValue]) -> Comparison:
    """Read the same numbers under every convention, side by side.

    Argument names from any convention are mapped by meaning: embed_dim / hidden_size / d_model /
    query_dim / InputSize are the model width; num_heads / NumHeads / num_attention_heads the head
    count; key_dim / d_kv / head_dim per-head widths; NumKeyChannels a total width. Arguments a
    convention does not have keep its own default (bias differs: on in PyTorch, Keras and MATLAB,
    off in Llama and T5). Where a convention cannot take the arguments, its entry is the reason.
    Raises ValueError for unknown, conflicting or missing (width, heads) arguments.
    """
    values, common_notes = _compare_roles(args)
    E = role_int(values, "width")
    h = role_int(values, "heads")
    assert E is not None and h is not None  # checked in _compare_roles
    rows: list[tuple[str, Calculation | str]] = []
    for convention, c in REGISTRY.items():
        built = c.for_compare(values, E, h)
        if isinstance(built, str):
            rows.append((convention, built))
            continue
        conv_args, notes = built
        try:
            calc = c.count(**conv_args)
        except ValueError as exc:
            rows.append((convention, str(exc)))
            continue
        rows.append((convention, dataclasses.replace(with_notes(calc, [*notes, *common_notes]), assumed=tuple(notes),
                                                     comparison_notes=tuple(common_notes))))
    return Comparison(rows)
