"""Tasks the batch tests hand to worker processes (importable there by name, as pickling needs)."""

from __future__ import annotations

import os

from mhainspect.batch import BatchAbort
from mhainspect.errors import ErrorKind, InputError


def echo(text: str) -> tuple[str, int]:
    """The input and the process that ran it; inputs named like failures fail that way."""
    if text.startswith("missing"):
        raise InputError(f"{text}: no such file", ErrorKind.NOT_FOUND)
    if text.startswith("bug"):
        raise ValueError("a bug")
    if text.startswith("die"):
        os._exit(3)  # the worker process ends mid-audit, as a crash in a native library would end it
    if text.startswith("abort"):
        raise BatchAbort("every input would fail this way")
    return text, os.getpid()
