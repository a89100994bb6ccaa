"""Pretty JSON text, identical to ``json.dumps(value, indent=2, allow_nan=False)``, in half the time.

With ``indent`` the standard library falls back to its pure-Python, generator-based encoder; a
70B model's 450 KB report then takes ~18 ms of a run whose whole budget is a few hundred. This
writer appends to one list and uses the C string escapers. It covers the types the renderers
produce (dict with str keys, list, tuple, str, int, float, bool, None); anything else, a
non-finite float included, is handed to ``json.dumps`` so errors and output stay the stdlib's.
"""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any

__all__ = ["dumps_pretty"]


class _Unsupported(Exception):
    """A value this writer does not format itself; the stdlib does the whole document."""


def dumps_pretty(value: Any, *, ensure_ascii: bool = True) -> str:
    """``json.dumps(value, indent=2, allow_nan=False, ensure_ascii=ensure_ascii)``, faster."""
    try:
        return _write(value, encode_basestring_ascii if ensure_ascii else encode_basestring)
    except (_Unsupported, RecursionError):
        return json.dumps(value, indent=2, allow_nan=False, ensure_ascii=ensure_ascii)


def _write(value: Any, quote: Any) -> str:
    out: list[str] = []
    append = out.append

    def emit(v: Any, pad: str) -> None:
        # Same order of checks as json.encoder: str, None, True, False, int, float, list/tuple, dict.
        if isinstance(v, str):
            append(quote(v))
        elif v is None:
            append("null")
        elif v is True:
            append("true")
        elif v is False:
            append("false")
        elif isinstance(v, int):
            append(int.__repr__(v))
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise _Unsupported
            append(float.__repr__(v))
        elif isinstance(v, (list, tuple)):
            if not v:
                append("[]")
                return
            inner = pad + "  "
            sep = "[\n" + inner
            for item in v:
                append(sep)
                emit(item, inner)
                sep = ",\n" + inner
            append("\n" + pad + "]")
        elif isinstance(v, dict):
            if not v:
                append("{}")
                return
            inner = pad + "  "
            sep = "{\n" + inner
            for key, item in v.items():
                if not isinstance(key, str):
                    raise _Unsupported  # json converts int/float/bool/None keys; leave that to it
                append(sep)
                append(quote(key))
                append(": ")
                emit(item, inner)
                sep = ",\n" + inner
            append("\n" + pad + "}")
        else:
            raise _Unsupported

    emit(value, "")
    return "".join(out)
