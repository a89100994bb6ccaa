"""Units: counts and byte sizes as a person types and reads them (1.5M, 7B, 2G, 512 MiB). Display
only: JSON always carries exact ints."""

from __future__ import annotations

import operator
import re
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import SupportsIndex

_UNITS: tuple[tuple[int, str], ...] = (
    (10**12, "T"),
    (10**9, "B"),
    (10**6, "M"),
    (10**3, "k"),
)

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


class Unit(Enum):
    """What a typed number counts, which settles the one letter that differs: B is a billion in a
    count (7B parameters) and the byte symbol in a size (4GiB, 512MB)."""

    COUNT = "count"
    BYTES = "bytes"


# One rule for every number typed anywhere (options, config files, the Python API, calc): k, M, G, T
# are SI (10^3 ...), any case; Ki, Mi, Gi, Ti are binary (2^10 ...). Only an "i" makes a unit binary,
# never the letter's case. A count also takes B for a billion.
_SCALE: dict[str, int] = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
                          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}

# Digits with Python-style underscores (1_000) or strict comma grouping (1,050,624), an optional
# fraction, then an optional exponent (1e9) or unit suffix (1.5M, 8Ki, 4GiB). Compiled by re on first
# use (a number option given): not every run pays ~1M instructions.
_NUMBER_RE = r"""
    (?P<int>\d+(?:_\d+)*|\d{1,3}(?:,\d{3})+)
    (?:\.(?P<frac>\d+(?:_\d+)*))?
    (?:
        [eE](?P<exp>[+-]?\d{1,2})
      | \s*(?P<suffix>[kmgt]i?)?(?P<b>b)?
    )?
    """
_NUMBER_FLAGS = re.VERBOSE | re.ASCII | re.IGNORECASE
_EXAMPLES = {Unit.COUNT: "1000, 1_000, 120k, 1.5M, 7B, 8Ki", Unit.BYTES: "4096, 512MB, 80G, 24GiB"}


def parse_number(value: str | int, unit: Unit = Unit.COUNT, noun: str = "a count", examples: str = "") -> int:
    """A whole number as typed on a command line, in a config file or to the Python API: 8000,
    '8_000', '8,000', '8k' (8,000), '8Ki' (8,192), '1.5M', '7B' (a count), '4GiB' or '512MB' (bytes),
    '1e6'. The one parser of every count and size (see _SCALE). Raises ValueError (one line, naming
    ``noun``) for anything else, for negative values and for non-whole results ('1.2345k')."""
    if isinstance(value, bool):
        raise ValueError(f"not {noun}: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"not {noun}: {value!r} (negative)")
        return value
    if not isinstance(value, str):
        raise ValueError(f"not {noun}: {value!r}")
    match = re.fullmatch(_NUMBER_RE, value.strip(), _NUMBER_FLAGS)
    # B is a billion in a count (7B) but the byte symbol in a size (4GiB, 512MB, 4096B): a count
    # refuses it after a unit (1MB is a size), a size reads it as no scale.
    if match is None or unit is Unit.COUNT and match["b"] is not None and match["suffix"] is not None:
        raise ValueError(f"not {noun}: {value!r} (expected e.g. {examples or _EXAMPLES[unit]})")
    suffix = None if match["suffix"] is None else match["suffix"].lower()
    if suffix is None and match["b"] is not None and unit is Unit.COUNT:
        suffix = "g"
    digits = match["int"].replace("_", "").replace(",", "")
    frac = (match["frac"] or "").replace("_", "")
    try:
        number = Decimal(f"{digits}.{frac}" if frac else digits)
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only digits
        raise ValueError(f"not {noun}: {value!r}") from exc
    if match["exp"] is not None:
        number = number.scaleb(int(match["exp"]))
    if suffix is not None:
        number *= _SCALE[suffix]
    if number != number.to_integral_value():
        raise ValueError(f"not {'a whole count' if noun == 'a count' else noun}: {value!r} = {number}")
    return int(number)


def has_unit(value: str | int) -> bool:
    """Whether a typed number carries a unit or an exponent ('8k', '4GiB', '1e6'), so that what it
    resolved to is worth saying beside it; plain digits (8192, '8_192') are not."""
    return isinstance(value, str) and re.search(r"[a-z]", value, re.IGNORECASE) is not None


def resolved(value: str | int, n: int, what: str = "") -> str:
    """What a typed number came to, said where it is used: '8k = 8,000 tokens', '24GiB =
    25,769,803,776 bytes'; the text alone when it has no unit ('8192')."""
    text = str(value).strip()
    if not has_unit(value):
        return text
    shown = f"{text} = {n:,}" + (f" {what}" if what else "")
    return shown + (f" ({format_bytes(n)})" if what == "bytes" and n >= 1024 else "")


def parse_count(text: str | int) -> int:
    """A count (--max-params, --max-attention-params): '1.5M', '7B', '120k', '1_000', '1e6'; 0 allowed."""
    return parse_number(text, Unit.COUNT, "a count")


MAX_TOKENS = 2**32  # per option: more tokens (or sequences) than any cache is sized at
# context × batch: keeps every cache total (bytes per token × tokens) well inside a signed 64-bit
# integer, which is what JSON readers and the page's axes can hold.
MAX_CACHED_TOKENS = 2**40


def parse_tokens(value: str | int, what: str = "tokens") -> int:
    """A token, sequence or GPU count (--context, --batch, --gpus, --require-context): 8192, '8_192',
    '8k' (8,000), '8Ki' (8,192), '128Ki' (131,072), '1M' (1,000,000). Raises ValueError (one line)
    for anything else, below 1, or above MAX_TOKENS."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        n = parse_number(value, Unit.COUNT, f"a whole number of {what}", "8192, 8_192, 8k, 8Ki, 128Ki, 1M")
    if n < 1:
        raise ValueError(f"{n:,} is not a positive number of {what}")
    if n > MAX_TOKENS:
        raise ValueError(f"{_shown(value)} {what} is more than any cache is sized at (at most {MAX_TOKENS:,})")
    return n


def _shown(value: str | int) -> str:
    text = str(value).strip()
    return text if len(text) <= 24 else text[:21] + "..."


def parse_size(text: str | int) -> int:
    """Bytes (--gpu-memory, --max-weight-bytes, --max-kv-cache, --max-verify-bytes): '80G' and '80GB'
    are 80,000,000,000, '24GiB' 25,769,803,776, '512MiB', '4096'. Raises ValueError below 1 byte."""
    n = parse_number(text, Unit.BYTES, "a size in bytes")
    if n < 1:
        raise ValueError(f"invalid size {_shown(text)!r}: must be at least 1 byte")
    return n


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
