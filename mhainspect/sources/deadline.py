"""The time one model's remote reads may take, in all: a deadline every request of the model runs
within (its connection, its answer's head and its body, its retries and their waits).

The command line sets one per model (``--timeout``, default ``DEFAULT_MODEL_TIMEOUT``); a remote
read that runs outside one (the Python API) gets the default when its front end starts. The
deadline is a context variable: the threads that read a model's files in parallel carry it
(``parallel.Pool`` copies the caller's context into each task).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from mhainspect.errors import ErrorKind, InputError

DEFAULT_MODEL_TIMEOUT = 300.0  # seconds: a header read is seconds; a few minutes covers a slow link


@dataclass(frozen=True)
class Deadline:
    at: float  # time.monotonic() when the model's time is up
    seconds: float  # what it was set to, for messages

    def left(self) -> float:
        return self.at - time.monotonic()


_MODEL: ContextVar[Deadline | None] = ContextVar("mhainspect_model_deadline", default=None)


@contextmanager
def model_deadline(seconds: float | None = None) -> Iterator[Deadline]:
    """A deadline ``seconds`` from now for the block (``None``: the one in force, else the default).
    A block given its own seconds gets its own deadline (the command line: one per model)."""
    outer = _MODEL.get()
    if seconds is None and outer is not None:
        yield outer
        return
    seconds = DEFAULT_MODEL_TIMEOUT if seconds is None else seconds
    deadline = Deadline(time.monotonic() + seconds, seconds)
    token = _MODEL.set(deadline)
    try:
        yield deadline
    finally:
        _MODEL.reset(token)


def current() -> Deadline | None:
    """The deadline in force (None outside every model)."""
    return _MODEL.get()


def check(name: str) -> None:
    """InputError when the model's time is up (before a request is sent or a wait begins)."""
    deadline = _MODEL.get()
    if deadline is not None and deadline.left() <= 0:
        raise expired(name, deadline)


def expired(name: str, deadline: Deadline) -> InputError:
    return InputError(f"{name}: reading this model remotely took longer than its {deadline.seconds:g} s "
                      "(--timeout)", ErrorKind.NETWORK)


def parse_timeout(raw: str) -> float:
    """A --timeout value: positive seconds, finite."""
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"--timeout {raw!r}: expected a number of seconds") from None
    if not 0 < value < float("inf"):
        raise ValueError(f"--timeout {raw!r}: expected a positive, finite number of seconds")
    return value
