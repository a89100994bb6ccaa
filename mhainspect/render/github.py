"""Reports -> GitHub Actions workflow commands (annotations). Pure: returns text.

One line per flag (``::warning`` for warnings, ``::notice`` for info, ``::error`` for errors),
one ``::warning`` per block a --verify run contradicts, and one ``::error`` line per failed gate, each with ``file=`` the model path so the annotation
lands on the model file in a pull request.
"""

from __future__ import annotations

from collections.abc import Iterable

from mhainspect.analysis.gates import GateFailure
from mhainspect.render.cells import verify_label
from mhainspect.render.safe import github_message, github_property
from mhainspect.results import FailedInput, Flag, Report, Severity, contradicted

__all__ = ["render_github"]

_COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _line(command: str, file: str, title: str, message: str) -> str:
    return f"::{command} file={github_property(file)},title={github_property(title)}::{github_message(message)}"


def _flag(path: str, flag: Flag) -> str:
    severity = flag.severity if isinstance(flag.severity, Severity) else Severity(str(flag.severity))
    where = f"{flag.block}: " if flag.block is not None else ""
    return _line(_COMMAND[severity], path, flag.code, where + " ".join(flag.message.split()))


def _gate(failure: GateFailure) -> str:
    title = f"{failure.gate} {failure.code}" if failure.code else failure.gate
    return _line("error", failure.model, f"mhainspect {title}", f"gate failed: {failure.message}")


def _contradictions(report: Report) -> list[str]:
    return [_line("warning", report.model.path, "mhainspect verify", f"{b.name}: {verify_label(v)}")
            for b, v in contradicted(report)]


def render_github(reports: Iterable[Report], failures: Iterable[GateFailure] = (),
                  failed: Iterable[FailedInput] = ()) -> str:
    """Annotation lines model by model (flags, then blocks the --verify run contradicts), then the
    failed gates, then an ``::error`` per input that could not be audited; empty text when none."""
    lines = [line for r in reports for line in [*(_flag(r.model.path, f) for f in r.flags), *_contradictions(r)]]
    lines.extend(_gate(f) for f in failures)
    lines.extend(_line("error", f.input, f"mhainspect {f.kind}", f.message) for f in failed)
    return "".join(line + "\n" for line in lines)
