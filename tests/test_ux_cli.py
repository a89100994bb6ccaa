"""Command-line fixes of issue 38: `help` of an unknown command is a usage error, shell completion
through typer."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_run import Run, in_process

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    return in_process(capsys, monkeypatch)


def test_help_of_an_unknown_command_exits_2(run: Callable[..., Run]) -> None:
    r = run("help", "nope")
    assert r.code == 2 and r.err.strip() == "mhainspect: error: no command 'nope'; commands: inspect, calc, diff"
    assert "did you mean 'diff'?" in run("help", "dif").err
    assert run("help", "diff").code == 0 and "--fail-on-change" in run("help", "diff").out


def _complete(words: str) -> list[str]:
    env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1),
           "_MHAINSPECT_COMPLETE": "complete_bash", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "mhainspect"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_shell_completion(run: Callable[..., Run]) -> None:
    assert _complete("mhainspect ca") == ["calc"]
    assert set(_complete("mhainspect inspect --gpu")) == {"--gpu-memory", "--gpus"}
    script = run("--show-completion", "bash")
    assert script.code == 0 and "_MHAINSPECT_COMPLETE" in script.out
