"""User-given arguments (strings as typed, or typed values) read against a convention's spec."""

from __future__ import annotations

from collections.abc import Mapping

from mhainspect.conventions.common import ArgValue, Kind, Spec, UserValue, spelling_key
from mhainspect.ir.units import parse_count

_TRUE = frozenset({"true", "yes", "1", "on"})
_FALSE = frozenset({"false", "no", "0", "off"})
_NONE = frozenset({"none", "null", "auto", ""})


def _valid_list(spec: Spec) -> str:
    parts = []
    for p in spec.params:
        if p.required:
            parts.append(p.name)
        elif p.kind == "bool":
            parts.append(f"{p.name}={str(p.default).lower()}")
        elif p.default is None:
            parts.append(f"{p.name}=None")
        else:
            parts.append(f"{p.name}={p.default}")
    return ", ".join(parts)


def parse_value(name: str, kind: Kind, raw: UserValue) -> ArgValue:
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, int) and raw in (0, 1):
            return bool(raw)
        if isinstance(raw, str):
            text = raw.strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
        raise ValueError(f"{name} must be true/false/yes/no/1/0, got {raw!r}")
    if raw is None:
        if kind == "opt_int":
            return None
        raise ValueError(f"{name} must be a positive integer, got None")
    if isinstance(raw, bool):
        raise ValueError(f"{name} must be a positive integer, got {raw!r}")  # noqa: TRY004
    if isinstance(raw, int):
        value = raw
    else:
        text = raw.strip()
        if kind == "opt_int" and text.lower() in _NONE:
            return None
        try:
            value = parse_count(text)  # the one rule of every typed number: 4096, 4_096, 4Ki
        except ValueError:
            raise ValueError(f"{name} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return value


def parse(convention: str, spec: Spec, args: Mapping[str, UserValue]) -> tuple[dict[str, ArgValue], list[str]]:
    """``args`` by the names of ``spec`` (the spec of ``convention``), and a note naming the ignored ones."""
    by_key: dict[str, str] = {spelling_key(p.name): p.name for p in spec.params}
    for alias, target in spec.aliases.items():
        by_key[spelling_key(alias)] = target
    ignored_keys = {spelling_key(n): n for n in spec.ignored}
    kinds = {p.name: p.kind for p in spec.params}
    parsed: dict[str, ArgValue] = {}
    ignored: list[str] = []
    for given, raw in args.items():
        key = spelling_key(given)
        name = by_key.get(key)
        if name is None:
            if key in ignored_keys:
                ignored.append(f"{given}={raw}")
                continue
            raise ValueError(f"unknown argument {given!r} for {convention}; valid: {_valid_list(spec)}")
        if name in parsed:
            raise ValueError(f"argument {name!r} given twice for {convention}")
        parsed[name] = parse_value(name, kinds[name], raw)
    missing = [p.name for p in spec.params if p.required and p.name not in parsed]
    if missing:
        raise ValueError(
            f"missing required argument{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)} for {convention}; valid: {_valid_list(spec)}"
        )
    notes = []
    if ignored:
        notes.append("Ignored (no effect on the parameter count): " + ", ".join(ignored) + ".")
    return parsed, notes
