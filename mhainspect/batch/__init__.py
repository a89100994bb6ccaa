"""Many models at once: every input audited by a worker, each result handed back as it finishes
(``mhainspect.pipeline.runner`` with ``jobs``: the CLI's --from-file and --jobs, and ``mhainspect.audit_many``).
The unit of work is the pipeline's (``pipeline.runner.audit_source``); this module only runs it.

``jobs`` audits run at a time, in ``min(jobs, CPUs)`` worker processes of ``ceil(jobs /
processes)`` threads each. A local audit is CPU-bound Python: threads of one process take turns
on the interpreter lock, so only processes add speed. A remote audit mostly waits for the network:
threads overlap those waits without a process (and its memory) each. benchmarks/batch_jobs.py
measures both. ``jobs=1`` audits in the calling process, one input after the other.

A failed input is a value (AuditFailure: its input, a stable kind and one line), never the end of
the run. A worker process that dies (killed, out of memory, a crash in a native library) fails
the inputs it held, and a new worker takes its place. Only BatchAbort, a problem every input would
meet (a usage error), ends the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from mhainspect.errors import ErrorKind, InputError
from mhainspect.lazy import lazy_exports

if TYPE_CHECKING:
    from mhainspect.batch.pool import Workers, workers_for

T = TypeVar("T")

__all__ = ["AuditFailure", "BatchAbort", "Workers", "failure_of", "read_inputs", "run_many", "workers_for"]


@dataclass(frozen=True)
class AuditFailure:
    """An input that could not be audited: what it was, why (a stable kind), and one line."""

    input: str
    kind: ErrorKind
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "message": self.message}


class BatchAbort(Exception):
    """Raised by a task for a problem that is not the input's own (a usage error every input would
    meet): it ends the whole run, in the caller's process, with this message."""


def failure_of(input: str, exc: BaseException) -> AuditFailure:
    """The record of ``exc`` raised while auditing ``input``."""
    if isinstance(exc, InputError):
        return AuditFailure(input, exc.kind, " ".join(str(exc).split()))
    if isinstance(exc, RecursionError):
        return AuditFailure(input, ErrorKind.RESOURCES, f"{input}: graph too deeply nested to analyse")
    if isinstance(exc, MemoryError):
        return AuditFailure(input, ErrorKind.RESOURCES, f"{input}: out of memory while reading the model")
    detail = " ".join(f"{type(exc).__name__}: {exc}".split())
    return AuditFailure(input, ErrorKind.INTERNAL,
                        f"{input}: internal error ({detail}); rerun with MHAINSPECT_DEBUG=1 for details")


def read_inputs(lines: Iterable[str]) -> list[str]:
    """The inputs of a list file: one per line, stripped; blank lines and lines starting with #
    skipped; an input listed twice kept once, at its first place."""
    out: dict[str, None] = {}
    for line in lines:
        text = line.strip()
        if text and not text.startswith("#"):
            out.setdefault(text, None)
    return list(out)


def run_many(task: Callable[[str], T], inputs: Sequence[str], jobs: int = 1, *, workers: Workers | None = None,
             preload: Sequence[str] = ()) -> Iterator[tuple[str, T | AuditFailure]]:
    """``(input, task(input))`` for every input, in the order they finish; an exception from the
    task becomes the input's AuditFailure (BatchAbort and KeyboardInterrupt end the run). With
    ``jobs > 1`` the task and its results cross process boundaries: both must pickle (a function
    at module level, a functools.partial of one). ``workers``: another spread than workers_for's
    (benchmarks/batch_jobs.py compares them). ``preload``: modules the task imports, imported once
    by the fork server rather than by every worker (the pipeline names its own)."""
    if workers is None and (jobs <= 1 or len(inputs) <= 1):
        yield from _in_process(task, inputs)
        return
    from mhainspect.batch.pool import Pool, workers_for  # imported when taken: jobs > 1 only

    with Pool(task, workers or workers_for(min(jobs, len(inputs))), preload) as pool:
        yield from pool.run(inputs)


def _in_process(task: Callable[[str], T], inputs: Sequence[str]) -> Iterator[tuple[str, T | AuditFailure]]:
    for text in inputs:
        try:
            result: T | AuditFailure = task(text)
        except (BatchAbort, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 -- any failure of one input is that input's record
            if os.environ.get("MHAINSPECT_DEBUG"):
                raise
            result = failure_of(text, exc)
        yield text, result


# The worker pool (mhainspect.batch.pool) is imported by a run with jobs > 1 only; its names are
# still reachable here.
__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(("Workers", "workers_for"), "mhainspect.batch.pool"),
                                    globals())
