"""Gates for pre-deployment checks: parameter budgets and flag codes that fail a run.

Pure: reports and a GateConfig in, a tuple of GateFailure out. The CLI prints the failures and
picks the exit code; nothing here prints or exits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace

from mhainspect.findings import Report, contradicted
from mhainspect.flags import FLAG_CODES
from mhainspect.render.numbers import format_bytes, group, parse_count, parse_size
from mhainspect.size import cache_bytes_at_context

__all__ = [
    "GateConfig",
    "GateFailure",
    "Limit",
    "drop_ignored",
    "evaluate_gates",
    "parse_byte_limit",
    "parse_codes",
    "parse_limit",
]


@dataclass(frozen=True)
class Limit:
    """A parameter budget: its value and how the user spelled it (7B), for messages."""

    value: int
    text: str


@dataclass(frozen=True)
class GateConfig:
    """Which gates are on: budgets, flag codes, run-time contradictions."""

    max_params: Limit | None = None
    max_attention_params: Limit | None = None
    fail_on: frozenset[str] = frozenset()
    fail_on_contradiction: bool = False  # a --verify run that contradicts a static head count
    max_weight_bytes: Limit | None = None  # bytes of every stored tensor
    max_kv_cache: Limit | None = None  # KV cache bytes at --context (and --batch)


@dataclass(frozen=True)
class GateFailure:
    """One failed gate for one model. ``gate`` is the option name without dashes."""

    gate: str  # "max-params" | "max-attention-params" | "max-weight-bytes" | "max-kv-cache" | "fail-on" | ...
    model: str  # the model's path as reported
    actual: int  # the parameter count, the number of flags with ``code``, or of contradicted blocks
    limit: int | None  # the budget (None for fail-on)
    code: str | None  # the flag code (fail-on only)
    message: str  # one line, e.g. "m.onnx has 7,241,732,096 parameters > --max-params 7B"


def parse_limit(value: str | int) -> Limit:
    """A budget from the command line or the config file: 1.5M, 7B, 120k, 1_000 or an int.

    Raises ValueError for anything that is not a whole non-negative count.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a count: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"not a count: {value!r} (negative)")
        return Limit(value, group(value))
    return Limit(parse_count(value), value.strip())


def parse_byte_limit(value: str | int) -> Limit:
    """A size budget: 512M, 4GiB, 1.5G, 4096 (K/M/G/T binary, as --max-verify-bytes). ValueError else."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"invalid size {value!r}: must be at least 1 byte")
        return Limit(value, str(value))
    return Limit(parse_size(value), value.strip())


def _size_gates(report: Report, config: GateConfig) -> list[GateFailure]:
    """--max-weight-bytes and --max-kv-cache; a figure the analysis could not determine fails the
    gate with the reason (a budget cannot pass on an unknown)."""
    path, m = report.model.path, report.model
    out: list[GateFailure] = []
    limit = config.max_weight_bytes
    if limit is not None:
        if m.weight_bytes is None:
            out.append(GateFailure("max-weight-bytes", path, 0, limit.value, None,
                                   f"{path}: weight bytes unknown (the source lists no tensors), cannot check "
                                   f"--max-weight-bytes {limit.text}"))
        elif m.weight_bytes > limit.value:
            out.append(GateFailure("max-weight-bytes", path, m.weight_bytes, limit.value, None,
                                   f"{path} stores {group(m.weight_bytes)} bytes of weights "
                                   f"({format_bytes(m.weight_bytes)}) > --max-weight-bytes {limit.text}"))
    limit = config.max_kv_cache
    kv = m.kv_cache
    if limit is not None:
        total = cache_bytes_at_context(kv)  # 0 when nothing caches (an encoder)
        if total is None:
            why = kv.reason if kv is not None and kv.reason else "no --context given"
            out.append(GateFailure("max-kv-cache", path, 0, limit.value, None,
                                   f"{path}: KV cache unknown ({why}), cannot check --max-kv-cache {limit.text}"))
        elif total > limit.value:
            assert kv is not None
            out.append(GateFailure("max-kv-cache", path, total, limit.value, None,
                                   f"{path} caches {group(total)} bytes of K/V ({format_bytes(total)}) at context "
                                   f"{kv.context} × batch {kv.batch} > --max-kv-cache {limit.text}"))
    return out


def parse_codes(items: Iterable[str]) -> frozenset[str]:
    """Flag codes from repeated and/or comma-separated values ("MHA001,mha004").

    Raises ValueError naming the first unknown code.
    """
    codes: set[str] = set()
    for item in items:
        for part in item.split(","):
            code = part.strip().upper()
            if not code:
                continue
            if code not in FLAG_CODES:
                raise ValueError(f"unknown flag code '{part.strip()}'; known codes: " + ", ".join(FLAG_CODES))
            codes.add(code)
    return frozenset(codes)


def drop_ignored(report: Report, ignore: frozenset[str]) -> Report:
    """The report without flags whose code is in ``ignore`` (for output and for gates alike)."""
    if not ignore or not any(f.code in ignore for f in report.flags):
        return report
    return replace(report, flags=tuple(f for f in report.flags if f.code not in ignore))


def _model_gates(report: Report, config: GateConfig) -> list[GateFailure]:
    path = report.model.path
    out: list[GateFailure] = []
    total, attention = report.model.total_params, report.model.attention_params
    if config.max_params is not None and total > config.max_params.value:
        out.append(GateFailure("max-params", path, total, config.max_params.value, None,
                               f"{path} has {group(total)} parameters > --max-params {config.max_params.text}"))
    limit = config.max_attention_params
    if limit is not None and attention > limit.value:
        out.append(GateFailure("max-attention-params", path, attention, limit.value, None,
                               f"{path} has {group(attention)} attention parameters > "
                               f"--max-attention-params {limit.text}"))
    out.extend(_size_gates(report, config))
    counts = Counter(f.code for f in report.flags if f.code in config.fail_on)
    for code in sorted(counts):
        n = counts[code]
        out.append(GateFailure("fail-on", path, n, None, code,
                               f"{path} has {n} {code} flag{'s' if n != 1 else ''} (--fail-on {code})"))
    if config.fail_on_contradiction:
        names = [b.name for b, _ in contradicted(report)]
        if names:
            n = len(names)
            out.append(GateFailure("fail-on-contradiction", path, n, None, None,
                                   f"{path}: the run contradicts the static head count of {n} "
                                   f"block{'s' if n != 1 else ''} ({', '.join(names)}) "
                                   "(--fail-on-contradiction)"))
    return out


def evaluate_gates(reports: Iterable[Report], config: GateConfig) -> tuple[GateFailure, ...]:
    """Every failed gate, model by model in input order (budgets, flag codes, then contradictions).

    A budget fails when the count is strictly greater than it (equal passes). Apply
    ``drop_ignored`` to the reports first so ignored codes never fail a gate.
    """
    return tuple(failure for report in reports for failure in _model_gates(report, config))
