"""Units: counts and byte sizes as a person types and reads them (1.5M, 7B, 2G, 512 MiB). Display
only: JSON always carries exact ints."""

from __future__ import annotations

import math
import operator
import re
from decimal import Decimal, InvalidOperation
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
    return _parse_number(text, _SUFFIX_SCALE, "a count", "1000, 1_000, 120k, 1.5M, 7B")


# Token and sequence counts (--context, --batch): k and M are binary, as context windows are sized
# ("8k context" is 8,192 tokens, "128k" 131,072, "1M" 1,048,576).
_TOKEN_SCALE: dict[str, int] = {"k": 2**10, "m": 2**20}
MAX_TOKENS = 2**32  # per option: more tokens (or sequences) than any cache is sized at
# context × batch: keeps every cache total (bytes per token × tokens) well inside a signed 64-bit
# integer, which is what JSON readers and the page's axes can hold.
MAX_CACHED_TOKENS = 2**40


def parse_tokens(value: str | int, what: str = "tokens") -> int:
    """A token or sequence count as typed on a command line or in a config file: 8192, '8_192',
    '8k' (8,192), '128k' (131,072), '1M' (1,048,576), '1.5k' (1,536). ``k`` and ``M`` are powers of
    1024 (any case). Raises ValueError (one line) for anything else, below 1, or above MAX_TOKENS."""
    if isinstance(value, bool):
        raise ValueError(f"not a whole number of {what}: {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and not re.search(r"[bBtT]\s*$", value):
        n = _parse_number(value, _TOKEN_SCALE, f"a whole number of {what}", "8192, 8_192, 8k, 128k, 1M")
    else:
        raise ValueError(f"not a whole number of {what}: {value!r} (expected e.g. 8192, 8_192, 8k, 128k, 1M; "
                         "k and M are 1024 and 1024²)")
    if n < 1:
        raise ValueError(f"{n:,} is not a positive number of {what}")
    if n > MAX_TOKENS:
        raise ValueError(f"{_shown(value)} {what} is more than any cache is sized at (at most {MAX_TOKENS:,})")
    return n


def _shown(value: str | int) -> str:
    text = str(value).strip()
    return text if len(text) <= 24 else text[:21] + "..."


def _parse_number(text: str, scale: dict[str, int], noun: str, examples: str) -> int:
    """``text`` as a whole number: digits (1_000, 1,000), a fraction, an exponent or a suffix in ``scale``."""
    if not isinstance(text, str):
        raise ValueError(f"not {noun}: {text!r}")
    stripped = text.strip()
    match = re.fullmatch(_COUNT_RE, stripped, _COUNT_FLAGS)
    if match is None or match["suffix"] is not None and match["suffix"].lower() not in scale:
        raise ValueError(f"not {noun}: {text!r} (expected e.g. {examples})")

    digits = match["int"].replace("_", "").replace(",", "")
    frac = (match["frac"] or "").replace("_", "")
    try:
        number = Decimal(f"{digits}.{frac}" if frac else digits)
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only digits
        raise ValueError(f"not {noun}: {text!r}") from exc
    if match["exp"] is not None:
        number = number.scaleb(int(match["exp"]))
    if match["suffix"] is not None:
        number *= scale[match["suffix"].lower()]
    if number != number.to_integral_value():
        raise ValueError(f"not {'a whole count' if noun == 'a count' else noun}: {text!r} = {number}")
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
    return f"{value:,.1f} TiB".replace(".0 ", " ")  # 97,656.2 TiB: separators, as every count has
