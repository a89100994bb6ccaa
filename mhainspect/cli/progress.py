"""Progress bars on stderr: a model that takes more than a moment to read, a run of many models.
Only for a person watching a terminal (bar_wanted); stdout never carries one."""

import os
import sys
import threading
from pathlib import Path
from typing import Any

_OFF = frozenset({"", "0", "false", "no", "off"})


def bar_wanted() -> bool:
    """Whether a live bar helps: stderr is a terminal that can redraw (not TERM=dumb), the run is
    not in CI (CI set, as every CI service sets it: a log that keeps a pseudo-terminal's output
    would keep each redraw as a line) and MHAINSPECT_NO_PROGRESS is not set."""
    if os.environ.get("MHAINSPECT_NO_PROGRESS") or os.environ.get("CI", "").strip().lower() not in _OFF:
        return False
    if os.environ.get("TERM", "").lower() in ("dumb", "unknown"):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def _same_terminal() -> bool:
    """Whether stdout is the terminal the bar is drawn on, so that what the run prints there while
    the bar runs (a list's JSON Lines) is better printed above the bar. rich's live display would
    otherwise take over stdout whatever it is: a pipe's or a file's records would land on stderr."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


class ProgressBar:
    """A rich progress bar on stderr, shown once a model takes more than ~1 s; off unless
    bar_wanted.

    The loader reports through ``reporting_progress(callback)``; after it, the bar spins while the
    analysis runs. Nothing is imported or started unless the bar is wanted.
    """

    def __init__(self, model: Path | str) -> None:
        self.model = model
        self.label = model.name if isinstance(model, Path) else model.rstrip("/").rsplit("/", 1)[-1]
        self.progress: Any = None

    def __enter__(self) -> "ProgressBar":
        if not bar_wanted():
            return self
        # rich's live display is a run's slowest import: only for a terminal.
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        from mhainspect.pipeline import reporting_progress

        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=True, redirect_stdout=_same_terminal())
        self.task = self.progress.add_task(f"reading {self.label}", total=None)
        self.lock, self.closed = threading.Lock(), False
        self.timer = threading.Timer(1.0, self._show)
        self.timer.daemon = True
        self.timer.start()
        self.scope = reporting_progress(self._update)
        self.scope.__enter__()
        return self

    def _show(self) -> None:
        with self.lock:
            if not self.closed:
                self.progress.start()

    def _update(self, stage: str, done: int, total: int) -> None:
        name = self.label
        if stage == "graph" and done >= total:
            self.progress.update(self.task, description=f"analysing {name}", total=None, completed=0)
        else:
            label = "reading" if stage == "read" else "building the graph of"
            self.progress.update(self.task, description=f"{label} {name}", total=total or None, completed=done)

    def __exit__(self, *exc: object) -> None:
        if self.progress is None:
            return
        self.scope.__exit__(None, None, None)
        self.timer.cancel()
        with self.lock:
            self.closed = True
            self.progress.stop()


class BatchProgress:
    """A run of many models on a terminal: one bar of inputs done (and how many failed), with the
    error and gate lines printed above it; off unless bar_wanted (the lines still go to stderr,
    one by one)."""

    def __init__(self, total: int, done: int = 0, enabled: bool = True) -> None:
        self.total, self.done, self.failed = total, done, 0
        self.enabled = enabled and bar_wanted()
        self.progress: Any = None

    def __enter__(self) -> "BatchProgress":
        if not self.enabled:
            return self
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[failed]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                                 console=Console(stderr=True), transient=True, redirect_stdout=_same_terminal())
        self.task = self.progress.add_task("auditing", total=self.total, completed=self.done, failed="")
        self.progress.start()
        return self

    def say(self, line: str) -> None:
        """A line on stderr, above the bar while it runs."""
        if self.progress is not None:
            self.progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def advance(self, failed: bool) -> None:
        self.done += 1
        self.failed += failed
        if self.progress is not None:
            self.progress.update(self.task, completed=self.done,
                                 failed=f"{self.failed} failed" if self.failed else "")

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()
