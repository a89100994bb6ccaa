"""Gates for pre-deployment checks: parameter budgets and flag codes that fail a run.

Pure: reports and a GateConfig in, a tuple of GateFailure out. The CLI prints the failures and
picks the exit code; nothing here prints or exits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace

from mhainspect.analysis.decoding import DECODER_HINT
from mhainspect.analysis.flags import FLAG_CODES
from mhainspect.analysis.size import cache_bytes_at_context
from mhainspect.ir.units import format_bytes, group, has_unit, parse_count, parse_size
from mhainspect.results import CacheStatus, FitStatus, Flag, Report, Severity, contradicted

__all__ = [
    "SEVERITIES",
    "GateConfig",
    "GateFailure",
    "GateResult",
    "Limit",
    "ModelExtras",
    "NO_EXTRAS",
    "check_gates",
    "drop_ignored",
    "evaluate_gates",
    "ignored_counts",
    "parse_byte_limit",
    "parse_codes",
    "parse_fail_on",
    "parse_limit",
]

# --fail-on also takes a severity: a flag of that severity or a worse one fails the gate.
SEVERITIES: tuple[str, ...] = tuple(s.value for s in Severity)  # info < warning < error


@dataclass(frozen=True)
class Limit:
    """A parameter budget: its value and how the user spelled it (7B), for messages."""

    value: int
    text: str
    source: str = ""  # where the budget was set: "--max-params" or a pyproject.toml path


@dataclass(frozen=True)
class GateConfig:
    """Which gates are on: budgets, flag codes, run-time contradictions."""

    max_params: Limit | None = None
    max_attention_params: Limit | None = None
    fail_on: frozenset[str] = frozenset()  # flag codes and/or severities (SEVERITIES)
    fail_on_contradiction: bool = False  # a --verify run that contradicts a static head count
    fail_on_source: str = ""  # where fail_on was set: "--fail-on" or a pyproject.toml path
    max_weight_bytes: Limit | None = None  # bytes of every stored tensor
    max_kv_cache: Limit | None = None  # KV cache bytes at --context (and --batch)
    require_context: Limit | None = None  # tokens that must fit on the GPUs (--gpu-memory, --gpus)


@dataclass(frozen=True)
class GateResult:
    """One gate checked for one model, passed or failed. ``gate`` is the option name without dashes."""

    gate: str  # "max-params" | "max-attention-params" | "max-weight-bytes" | "max-kv-cache" | "fail-on" | ...
    model: str  # the model's path as reported
    actual: int  # the parameter count, the number of flags with ``code``, or of contradicted blocks
    limit: int | None  # the budget (None for fail-on)
    code: str | None  # the flag code or severity (fail-on only)
    message: str  # one line, e.g. "m.onnx has 7,241,732,096 parameters > --max-params 7B"
    passed: bool = False
    source: str = ""  # where the gate was set: the option ("--max-params") or a pyproject.toml path


GateFailure = GateResult  # a failed GateResult (the name the renderers and older callers use)


@dataclass(frozen=True)
class ModelExtras:
    """What a run adds to a report beyond the analysis, shown by the renderers where the format
    has room: gate results (passed and failed) and (code, count) of the flags --ignore dropped."""

    gates: tuple[GateResult, ...] = ()
    ignored: tuple[tuple[str, int], ...] = ()


NO_EXTRAS = ModelExtras()


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
    """A size budget: 512MB, 4GiB, 1.5G, 4096 (G = 10^9 bytes, GiB = 2^30: ir.units). ValueError else."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"invalid size {value!r}: must be at least 1 byte")
        return Limit(value, str(value))
    return Limit(parse_size(value), value.strip())


def _size_gates(report: Report, config: GateConfig) -> list[GateResult]:
    """--max-weight-bytes and --max-kv-cache; a figure the analysis could not determine fails the
    gate with the reason (a budget cannot pass on an unknown)."""
    path, m = report.model.path, report.model
    out: list[GateResult] = []
    limit = config.max_weight_bytes
    if limit is not None:
        where = _limit_where("max-weight-bytes", limit, "bytes")
        source = limit.source or "--max-weight-bytes"
        if m.weight_bytes is None:
            out.append(GateResult("max-weight-bytes", path, 0, limit.value, None,
                                  f"{path}: weight bytes unknown (the source lists no tensors), cannot check {where}",
                                  False, source))
        else:
            passed = m.weight_bytes <= limit.value
            out.append(GateResult("max-weight-bytes", path, m.weight_bytes, limit.value, None,
                                  f"{path} stores {group(m.weight_bytes)} bytes of weights "
                                  f"({format_bytes(m.weight_bytes)}) {'<=' if passed else '>'} {where}",
                                  passed, source))
    limit = config.max_kv_cache
    kv = m.kv_cache
    if limit is not None:
        where = _limit_where("max-kv-cache", limit, "bytes")
        source = limit.source or "--max-kv-cache"
        total = cache_bytes_at_context(kv)  # 0 when nothing caches (an encoder)
        if total is None:
            # A budget cannot pass on an unknown; the caller can settle whether the model decodes.
            why = kv.reason if kv is not None and kv.reason else "no --context given"
            hint = f"; {DECODER_HINT}" if any(b.kv_cache_status is CacheStatus.UNKNOWN for b in report.blocks) else ""
            out.append(GateResult("max-kv-cache", path, 0, limit.value, None,
                                  f"{path}: KV cache unknown ({why}), cannot check {where}{hint}", False, source))
        else:
            passed = total <= limit.value
            at = f" at context {kv.context} × batch {kv.batch}" if kv is not None else ""
            out.append(GateResult("max-kv-cache", path, total, limit.value, None,
                                  f"{path} caches {group(total)} bytes of K/V ({format_bytes(total)}){at} "
                                  f"{'<=' if passed else '>'} {where}", passed, source))
    return out


def _context_gate(report: Report, limit: Limit) -> GateResult:
    """--require-context: the longest context that fits on the GPUs (GpuFit.max_context) is at least
    the limit; a fit the analysis could not work out fails with the reason."""
    path, fit = report.model.path, report.model.fit
    where = _limit_where("require-context", limit, "tokens")
    source = limit.source or "--require-context"
    if fit is None or fit.status is FitStatus.UNKNOWN:
        why = fit.reason if fit is not None else "no --gpu-memory given"
        return GateResult("require-context", path, 0, limit.value, None,
                          f"{path}: what fits on the GPUs is unknown ({why}), cannot check {where}", False, source)
    gpus = f"{fit.gpus} × {format_bytes(fit.gpu_memory_bytes)}"
    if fit.status is FitStatus.WEIGHTS_DO_NOT_FIT:
        return GateResult("require-context", path, 0, limit.value, None,
                          f"{path}: the weights alone take {format_bytes(fit.weight_bytes_per_gpu or 0)} per GPU, more "
                          f"than {format_bytes(fit.gpu_memory_bytes)}: no context fits < {where}", False, source)
    if fit.max_context is None:  # the cache stops growing (or nothing caches): any context fits
        return GateResult("require-context", path, limit.value, limit.value, None,
                          f"{path} fits any context on {gpus} ({fit.reason}) >= {where}", True, source)
    passed = fit.max_context >= limit.value
    batch = f" × batch {group(fit.batch)}" if fit.batch != 1 else ""
    return GateResult("require-context", path, fit.max_context, limit.value, None,
                      f"{path} fits at most {group(fit.max_context)} tokens{batch} on {gpus} "
                      f"{'>=' if passed else '<'} {where}", passed, source)


def parse_codes(items: Iterable[str], *, severities: bool = False) -> frozenset[str]:
    """Flag codes from repeated and/or comma-separated values ("MHA001,mha004"); with
    ``severities`` also info/warning/error (kept lower-case, codes upper-case).

    Raises ValueError naming the first unknown code.
    """
    codes: set[str] = set()
    for item in items:
        for part in item.split(","):
            code = part.strip().upper()
            if not code:
                continue
            if severities and code.lower() in SEVERITIES:
                codes.add(code.lower())
                continue
            if code not in FLAG_CODES:
                known = ", ".join([*FLAG_CODES, *(SEVERITIES if severities else ())])
                raise ValueError(f"unknown flag code '{part.strip()}'; known: {known}")
            codes.add(code)
    return frozenset(codes)


def parse_fail_on(items: Iterable[str]) -> frozenset[str]:
    """--fail-on values: flag codes and severities ("warning" = every warning or error flag)."""
    return parse_codes(items, severities=True)


def _severity_rank(severity: Severity | str) -> int:
    value = severity.value if isinstance(severity, Severity) else str(severity)
    return SEVERITIES.index(value) if value in SEVERITIES else -1


def ignored_counts(report: Report, ignore: frozenset[str]) -> tuple[tuple[str, int], ...]:
    """(code, how many) of the flags ``drop_ignored`` drops, so a report can say what it left out."""
    counts = Counter(f.code for f in report.flags if f.code in ignore)
    return tuple(sorted(counts.items()))


def drop_ignored(report: Report, ignore: frozenset[str]) -> Report:
    """The report without flags whose code is in ``ignore`` (for output and for gates alike)."""
    if not ignore or not any(f.code in ignore for f in report.flags):
        return report
    return replace(report, flags=tuple(f for f in report.flags if f.code not in ignore))


def _where(option: str, text: str, source: str) -> str:
    """'--max-params 7B' when given on the command line, else 'max-params 7B from pyproject.toml'."""
    if not source or source.startswith("--"):
        return f"--{option} {text}"
    return f"{option} {text} from {source}"


def _limit_where(option: str, limit: Limit, what: str = "") -> str:
    """_where of a limit, which says what it came to when typed with a unit: '--max-params 7B
    (7,000,000,000)', '--max-kv-cache 4GiB (4,294,967,296 bytes)'; '--max-params 7000' as typed."""
    text = limit.text
    if has_unit(text):
        text += f" ({limit.value:,}{' ' + what if what else ''})"
    return _where(option, text, limit.source)


def _fails_on(flag: Flag, wanted: frozenset[str]) -> bool:
    if flag.code in wanted:
        return True
    return any(_severity_rank(flag.severity) >= _severity_rank(s) for s in wanted if s in SEVERITIES)


def check_gates(report: Report, config: GateConfig) -> tuple[GateResult, ...]:
    """Every gate ``config`` turns on, checked for one model: passed and failed alike."""
    path = report.model.path
    out: list[GateResult] = []
    total, attention = report.model.total_params, report.model.attention_params
    for gate, noun, actual, limit in (("max-params", "parameters", total, config.max_params),
                                      ("max-attention-params", "attention parameters", attention,
                                       config.max_attention_params)):
        if limit is None:
            continue
        passed = actual <= limit.value
        where = _limit_where(gate, limit)
        out.append(GateResult(gate, path, actual, limit.value, None,
                              f"{path} has {group(actual)} {noun} {'<=' if passed else '>'} {where}",
                              passed, limit.source or f"--{gate}"))
    out.extend(_size_gates(report, config))
    if config.require_context is not None:
        out.append(_context_gate(report, config.require_context))
    source = config.fail_on_source or "--fail-on"
    for wanted in sorted(config.fail_on, key=lambda w: (w in SEVERITIES, w)):
        n = sum(1 for f in report.flags if _fails_on(f, frozenset({wanted})))
        if wanted in SEVERITIES:
            what = f"flag{'s' if n != 1 else ''} of severity {wanted}" + ("" if wanted == "error" else " or worse")
        else:
            what = f"{wanted} flag{'s' if n != 1 else ''}"
        out.append(GateResult("fail-on", path, n, None, wanted,
                              f"{path} has {n} {what} ({_where('fail-on', wanted, source)})", n == 0, source))
    if config.fail_on_contradiction:
        names = [b.name for b, _ in contradicted(report)]
        n = len(names)
        detail = f" ({', '.join(names)})" if names else ""
        out.append(GateResult("fail-on-contradiction", path, n, None, None,
                              f"{path}: the run contradicts the static head count of {n} "
                              f"block{'s' if n != 1 else ''}{detail} (--fail-on-contradiction)",
                              n == 0, "--fail-on-contradiction"))
    return tuple(out)


def _model_gates(report: Report, config: GateConfig) -> list[GateResult]:
    return [r for r in check_gates(report, config) if not r.passed]


def evaluate_gates(reports: Iterable[Report], config: GateConfig) -> tuple[GateFailure, ...]:
    """Every failed gate, model by model in input order (budgets, flag codes, then contradictions).

    A budget fails when the count is strictly greater than it (equal passes). Apply
    ``drop_ignored`` to the reports first so ignored codes never fail a gate.
    """
    return tuple(failure for report in reports for failure in _model_gates(report, config))
