"""Text taken from a model file is untrusted: names can hold newlines or terminal escapes."""

from __future__ import annotations

import dataclasses
import re
from typing import TypeVar

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with control characters escaped (\\xNN, \\uNNNN): it prints on one line and cannot
    drive the terminal (no ESC sequences reach it)."""
    return _CONTROL.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


T = TypeVar("T")


def printable_fields(obj: T) -> T:
    """A copy of a frozen dataclass tree (a Report) with every string made ``printable``.

    Text renderers call it once at their entry, so no name or message from the file reaches the
    terminal raw; JSON needs no such step (the encoder escapes control characters itself).
    """
    if isinstance(obj, str):
        return printable(obj)  # type: ignore[return-value]
    if isinstance(obj, tuple):
        return tuple(printable_fields(x) for x in obj)  # type: ignore[return-value]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: printable_fields(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        return dataclasses.replace(obj, **changes)
    return obj
