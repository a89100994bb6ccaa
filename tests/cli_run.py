"""Running the CLI in process for a test: main() with its exit code, stdout and stderr."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from mhainspect.cli.app import main


class Run:
    """One run: exit code, stdout, stderr."""

    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def json(self) -> Any:
        return json.loads(self.out)


def in_process(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    """A runner of ``mhainspect ARGS...`` (no colour, no progress bar, no COLUMNS from the caller;
    ``columns=N`` runs it as on a terminal N columns wide)."""
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("MHAINSPECT_NO_PROGRESS", "1")

    def run(*args: object, columns: int | None = None) -> Run:
        if columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", str(columns))
        with pytest.raises(SystemExit) as exc:
            main([str(a) for a in args])
        captured = capsys.readouterr()
        code = exc.value.code
        return Run(code if isinstance(code, int) else 0, captured.out, captured.err)

    return run
