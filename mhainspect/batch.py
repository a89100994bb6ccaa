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

import math
import os
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from mhainspect.errors import ErrorKind, InputError

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import DefaultContext, ForkServerContext, SpawnContext
    from multiprocessing.process import BaseProcess

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


@dataclass(frozen=True)
class Workers:
    """How ``jobs`` concurrent audits are spread: processes, and threads in each."""

    processes: int
    threads: int


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the CPUs this process may use (containers, taskset)
    except AttributeError:  # not on macOS or Windows
        return os.cpu_count() or 1


def workers_for(jobs: int) -> Workers:
    """One process per CPU at most, the rest of ``jobs`` as threads in them (see the module docstring)."""
    processes = max(1, min(jobs, _cpus()))
    return Workers(processes, math.ceil(jobs / processes))


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
    with _Pool(task, workers or workers_for(min(jobs, len(inputs))), preload) as pool:
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


# ----------------------------------------------------------------------------- worker processes


def _worker_main(conn: Connection, task: Callable[[str], Any], threads: int, environ: dict[str, str]) -> None:
    """A worker process: tasks (index, input) arrive on ``conn``; ``threads`` threads audit them and
    send back (index, kind, value): kind "done" (the task's result or the AuditFailure) or "abort"
    (the BatchAbort). None ends the worker. ``environ``: the caller's environment now (a fork
    server's children would inherit the one it started with: HF_TOKEN, HF_ENDPOINT set since)."""
    import queue  # a worker's own: a run in one process never queues
    import signal

    os.environ.clear()
    os.environ.update(environ)

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what an interrupt ends
    todo: queue.SimpleQueue[tuple[int, str] | None] = queue.SimpleQueue()
    send_lock = threading.Lock()

    def send(index: int, text: str, kind: str, value: Any) -> None:
        with send_lock:
            try:
                conn.send((index, kind, value))
            except (OSError, EOFError):  # the parent is gone: nothing left to tell
                pass
            except Exception as exc:  # noqa: BLE001 -- a result that does not pickle is its input's failure
                conn.send((index, "done", failure_of(text, exc)))

    def loop() -> None:
        while (item := todo.get()) is not None:
            index, text = item
            try:
                result = task(text)
            except BatchAbort as exc:
                send(index, text, "abort", exc)
                continue
            except BaseException as exc:  # noqa: BLE001 -- one input's failure, recorded
                if os.environ.get("MHAINSPECT_DEBUG"):
                    traceback.print_exc()
                send(index, text, "done", failure_of(text, exc))
                continue
            send(index, text, "done", result)

    pool = [threading.Thread(target=loop, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    conn.send((-1, "ready", None))
    while True:
        try:
            item = conn.recv()
        except (EOFError, OSError):
            break
        if item is None:
            break
        todo.put(item)
    for _ in pool:
        todo.put(None)
    for t in pool:
        t.join()


def _context(preload: Sequence[str]) -> ForkServerContext | SpawnContext | DefaultContext:
    """Workers forked from a server that has imported ``preload`` once (fast and thread-safe: the
    caller may run threads, which plain fork would copy mid-operation); spawned where there is no
    fork server."""
    import multiprocessing

    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(preload))
        return ctx
    return multiprocessing.get_context("spawn")


@dataclass
class _Worker(Generic[T]):
    process: BaseProcess
    conn: Connection
    held: dict[int, str]  # index -> input, sent and not answered
    ready: bool = False  # started: a death before is the pool's failure, not an input's


class _Pool(Generic[T]):
    """Worker processes fed by the caller's process: each holds at most ``threads`` inputs, so the
    inputs a dead worker held are known exactly."""

    def __init__(self, task: Callable[[str], T], workers: Workers, preload: Sequence[str]) -> None:
        self.task, self.shape = task, workers
        self.ctx = _context(preload)
        self.workers: list[_Worker[T]] = []

    def __enter__(self) -> _Pool[T]:
        for _ in range(self.shape.processes):
            self.workers.append(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        for w in self.workers:
            try:
                w.conn.send(None)
            except (OSError, EOFError):
                pass
        for w in self.workers:
            w.process.join(timeout=5 if exc[0] is None else 0.1)
            if w.process.is_alive():
                w.process.terminate()
                w.process.join(timeout=5)
            w.conn.close()

    def _start(self) -> _Worker[T]:
        ours, theirs = self.ctx.Pipe()
        process = self.ctx.Process(target=_worker_main, args=(theirs, self.task, self.shape.threads, dict(os.environ)),
                                   daemon=True)
        process.start()
        theirs.close()
        return _Worker(process, ours, {})

    def run(self, inputs: Sequence[str]) -> Iterator[tuple[str, T | AuditFailure]]:
        from multiprocessing.connection import wait

        self.waiting = list(enumerate(inputs))
        self.waiting.reverse()  # popped from the end: first inputs first
        self.suspects: set[int] = set()  # held by a worker that died beside others: each runs alone next
        while self.waiting or any(w.held for w in self.workers):
            for w in self.workers:
                self._feed(w)
            by_handle: dict[Any, _Worker[T]] = {}
            for w in self.workers:
                by_handle[w.conn] = w
                by_handle[w.process.sentinel] = w
            for handle in wait(list(by_handle)):
                w = by_handle[handle]
                if w in self.workers:  # not replaced earlier in this round
                    yield from self._receive(w)

    def _feed(self, w: _Worker[T]) -> None:
        """Up to ``threads`` inputs for ``w``; a suspect only to an idle worker, and then alone."""
        while self.waiting and len(w.held) < self.shape.threads and not self.suspects.intersection(w.held):
            index, text = self.waiting[-1]
            if index in self.suspects and w.held:
                return
            self.waiting.pop()
            w.held[index] = text
            w.conn.send((index, text))

    def _receive(self, w: _Worker[T]) -> Iterator[tuple[str, T | AuditFailure]]:
        """What ``w`` has finished. If it died: the input it held alone is a failure; several held
        inputs become suspects, each run alone next, so only the input that kills a worker fails."""
        try:
            while w.conn.poll():
                index, kind, value = w.conn.recv()
                if kind == "ready":
                    w.ready = True
                    continue
                text = w.held.pop(index)
                self.suspects.discard(index)
                if kind == "abort":
                    raise value
                yield text, value
            if w.process.is_alive():
                return
        except (EOFError, OSError):
            pass
        w.process.join(timeout=1)
        code = w.process.exitcode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        if not w.ready:
            raise BatchAbort(f"a worker process could not start ({how}); a script that runs audits in worker "
                             "processes must start them under `if __name__ == \"__main__\":`")
        lost = sorted(w.held.items(), reverse=True)
        w.held.clear()
        w.conn.close()
        self.workers[self.workers.index(w)] = self._start()
        if len(lost) == 1:
            index, text = lost[0]
            self.suspects.discard(index)
            yield text, AuditFailure(text, ErrorKind.INTERNAL, f"{text}: the worker process auditing it died ({how})")
            return
        self.suspects.update(index for index, _ in lost)
        self.waiting.extend(lost)  # next in line, in their order
