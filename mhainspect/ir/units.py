"""Units: counts and byte sizes as a person types and reads them (1.5M, 7B, 2G, 512 MiB). Display
only: JSON always carries exact ints."""

from __future__ import annotations

import math
import operator
import re
from typing import SupportsIndex

_UNITS: tuple[tuple[int, str], ...] = (
    (10**12, "T"),
    (10**9, "B"),
    (10**6, "M"),
    (10**3, "k"),
)

_SUFFIX_SCALE: dict[str, int] = {"k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}

# Digits with Python-style underscores (1_000) or strict comma grouping (1,050,624),
# an optional fraction, then an optional exponent (1e9) or unit suffix (1.5M).
_COUNT_RE = (  # compiled by re on first use (a count option given): not every run pays ~1M instructions
    r"""
    (?P<int>\d+(?:_\d+)*|\d{1,3}(?:,\d{3})+)
    (?:\.(?P<frac>\d+(?:_\d+)*))?
    (?:
        [eE](?P<exp>[+-]?\d{1,2})
      | \s*(?P<suffix>[kKmMbBtT])
    )?
    """
)
_COUNT_FLAGS = re.VERBOSE | re.ASCII


def group(n: SupportsIndex) -> str:
    """Exact count with thousands separators: 1050624 -> '1,050,624'."""
    return f"{operator.index(n):,}"


def human_count(n: SupportsIndex) -> str:
    """Compact count: 1_050_624 -> '1.05M', 7_000_000_000 -> '7.00B', 9_999 -> '9,999'."""
    value = operator.index(n)
    if value < 0:
        return "-" + human_count(-value)
    if value < 10_000:
        return f"{value:,}"
    for i, (scale, unit) in enumerate(_UNITS):
        if value >= scale:
            text = f"{value / scale:.2f}"
            # 999_999 would print as '1000.00k': promote to the next unit instead.
            if i > 0 and float(text) >= 1000:
                bigger, bigger_unit = _UNITS[i - 1]
                return f"{value / bigger:.2f}{bigger_unit}"
            return f"{text}{unit}"
    return f"{value:,}"  # unreachable: value >= 10_000 always matches 'k'


def parse_count(text: str) -> int:
    """Parse a count as typed on a command line: '1.5M', '7B', '120k', '1_000', '1,000', '1e6'.

    Suffixes are case-insensitive decimal units (k=10^3, M=10^6, B=10^9, T=10^12).
    Raises ValueError for anything else, for negative values and for non-whole results
    ('1.2345k').
    """
    if not isinstance(text, str):
        raise ValueError(f"not a count: {text!r}")
    stripped = text.strip()
    match = re.fullmatch(_COUNT_RE, stripped, _COUNT_FLAGS)
    if match is None:
        raise ValueError(f"not a count: {text!r} (expected e.g. 1000, 1_000, 120k, 1.5M, 7B)")
    from decimal import Decimal, InvalidOperation  # only a typed count needs exact decimals

    digits = match["int"].replace("_", "").replace(",", "")
    frac = (match["frac"] or "").replace("_", "")
    try:
        number = Decimal(f"{digits}.{frac}" if frac else digits)
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only digits
        raise ValueError(f"not a count: {text!r}") from exc
    if match["exp"] is not None:
        number = number.scaleb(int(match["exp"]))
    if match["suffix"] is not None:
        number *= _SUFFIX_SCALE[match["suffix"].lower()]
    if number != number.to_integral_value():
        raise ValueError(f"not a whole count: {text!r} = {number}")
    return int(number)


# ----------------------------------------------------------------------------- bytes as typed and shown
# Pattern strings here and below are compiled by re on first use (its cache): a plain run parses no
# size option and reads no config, and compiling them all cost every run ~1 ms.
_SIZE_RE = r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*"


def parse_size(text: str) -> int:
    """Bytes as typed on a command line: '2G' -> 2 GiB, '512M', '4GiB', '100k', '1.5G', '4096'.

    K/M/G/T are powers of 1024 whether or not an 'i' follows (512M = 512MiB = 536,870,912):
    memory is sized in binary units. Raises ValueError for anything else or below 1 byte.
    """
    m = re.fullmatch(_SIZE_RE, text)
    if not m:
        raise ValueError(f"invalid size '{text}': expected bytes or a number with K, M, G or T (512M, 2G, 4GiB)")
    value = float(m.group(1)) * 1024 ** " KMGT".index((m.group(2) or " ").upper())
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"invalid size '{text}': must be at least 1 byte")
    return int(value)


def format_bytes(n: int) -> str:
    """Binary units for display, one decimal where it says something: 1536 -> '1.5 KiB',
    2048 -> '2 KiB'; exact bytes below 1 KiB ('1,023 B'). The one byte formatter of every output."""
    if abs(n) < 1024:
        return f"{n:,} B"
    value = n / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.1f} {unit}".replace(".0 ", " ")
        value /= 1024
    return f"{value:.1f} TiB".replace(".0 ", " ")
