"""The worker processes of a run with ``jobs > 1`` (``mhainspect.batch.run_many``): how jobs are
spread over processes and threads, and the pool that feeds them. Imported only by such a run: a
run in one process never starts a worker."""

from __future__ import annotations

import math
import os
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from mhainspect.batch import AuditFailure, BatchAbort, failure_of
from mhainspect.errors import ErrorKind

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import DefaultContext, ForkServerContext, SpawnContext
    from multiprocessing.process import BaseProcess

T = TypeVar("T")

__all__ = ["Pool", "Workers", "workers_for"]


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


class Pool(Generic[T]):
    """Worker processes fed by the caller's process: each holds at most ``threads`` inputs, so the
    inputs a dead worker held are known exactly."""

    def __init__(self, task: Callable[[str], T], workers: Workers, preload: Sequence[str]) -> None:
        self.task, self.shape = task, workers
        self.ctx = _context(preload)
        self.workers: list[_Worker[T]] = []

    def __enter__(self) -> Pool[T]:
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
