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


@pytest.mark.parametrize(("given", "meant"), [("hf:/org/x", "hf://org/x"), ("hf:org/x", "hf://org/x"),
                                              ("s3:/bucket/m.onnx", "s3://bucket/m.onnx")])
def test_a_remote_address_with_one_slash_gets_a_hint(run: Callable[..., Run], given: str, meant: str) -> None:
    r = run(given)
    assert r.code == 2
    assert r.err.strip() == (f"mhainspect: error: {given}: no such file; did you mean {meant}? "
                             "(a remote address takes two slashes)")


def test_no_trailing_spaces(run: Callable[..., Run]) -> None:
    for args in ((ROOT / "sample_models",), (ROOT / "sample_models" / "t5_unscaled.onnx", "-v"),
                 (ROOT / "sample_models" / "gqa_llama.onnx", "--heads", "3")):
        for columns in (None, 80):
            out = run(*args, columns=columns).out
            assert not [line for line in out.splitlines() if line != line.rstrip()], args
