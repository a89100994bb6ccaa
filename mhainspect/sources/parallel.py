"""Reads in flight at once, bounded: shard headers, split GGUF parts, small tensors of one file.

Each task runs in a copy of the caller's context (the model's deadline goes with it), and the
first failure stops the work not yet started: a model that cannot be read is not read further.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import copy_context
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future

# concurrent.futures (and the logging it imports) only where a pool is made: a local read runs its
# jobs in turn and never needs it (every reader imports this module through sources.blob).

CONCURRENCY = 16  # reads in flight at once, and connections per host

T = TypeVar("T")
R = TypeVar("R")
T_co = TypeVar("T_co", covariant=True)


class Pool:
    """A thread pool for one model's reads: each task sees the caller's context, and the tasks not
    started yet are cancelled when the block ends by an exception (the reads in flight end by
    their own deadlines)."""

    def __init__(self, workers: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=max(1, workers))

    def submit(self, fn: Callable[..., R], *args: Any) -> Future[R]:
        return self._pool.submit(copy_context().run, fn, *args)

    def cancel(self) -> None:
        """Drop every task not started yet."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=exc_type is not None)


def in_parallel(fn: Callable[[T], R], items: Sequence[T], remote: bool = True) -> list[R]:
    """``[fn(x) for x in items]``, run at most CONCURRENCY at a time when ``remote`` (each is a round
    trip), in order otherwise. The first failure cancels the items not started; once the ones in
    flight are done, the first failure in the items' order is raised."""
    if not remote or len(items) < 2:
        return [fn(x) for x in items]
    from concurrent.futures import FIRST_EXCEPTION, wait

    with Pool(min(CONCURRENCY, len(items))) as pool:
        futures = [pool.submit(fn, x) for x in items]
        done, _pending = wait(futures, return_when=FIRST_EXCEPTION)
        if any(not f.cancelled() and f.exception() is not None for f in done):
            pool.cancel()
    for f in futures:
        if not f.cancelled() and f.exception() is not None:
            raise f.exception()  # type: ignore[misc]
    return [f.result() for f in futures]


class Result(Protocol[T_co]):
    """A job's outcome, asked for once it is needed (a Future, or a local job run then)."""

    def result(self) -> T_co: ...


class _Later(Generic[R]):
    """A job run where its result is first asked for (a local read: no thread, and a job whose
    result nobody asks for never runs)."""

    def __init__(self, fn: Callable[[], R]) -> None:
        self._fn: Callable[[], R] | None = fn
        self._value: R | None = None

    def result(self) -> R:
        if self._fn is not None:
            self._value, self._fn = self._fn(), None
        return self._value  # type: ignore[return-value]  # set on the line above


class Jobs:
    """Reads started ahead of their use: on a Pool of CONCURRENCY threads when ``remote`` (each a
    round trip), else run lazily, in the order their results are asked for (local reads)."""

    def __init__(self, remote: bool) -> None:
        self._pool = Pool(CONCURRENCY) if remote else None

    def submit(self, fn: Callable[..., R], *args: Any) -> Result[R]:
        if self._pool is None:
            return _Later(lambda: fn(*args))
        return self._pool.submit(fn, *args)

    def __enter__(self) -> Jobs:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self._pool is not None:
            self._pool.__exit__(exc_type, *exc)
