"""The README's sample output is what the command it shows prints (kept true as the report changes)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_run import Run, in_process

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    monkeypatch.chdir(ROOT)  # the README's paths are relative to the repository
    return in_process(capsys, monkeypatch)


def _first_sample() -> tuple[list[str], str, int]:
    """The README's first terminal sample: its command's arguments, the output it shows, and the
    width of its widest line (the terminal it was taken on is at least that wide)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```\n\$ mhainspect (.*?)\n(.*?)```", text, re.S)
    assert block is not None, "README.md has no '$ mhainspect ...' sample"
    shown = block.group(2)
    return block.group(1).split(), shown, max(len(line) for line in shown.splitlines())


def test_readme_sample_is_the_output(cli: Callable[..., Run]) -> None:
    args, shown, width = _first_sample()
    run = cli(*args, columns=width)
    assert run.code == 0, run.err
    assert run.out.rstrip("\n") + "\n" == shown, "README.md's sample differs from what the command prints"
    assert os.path.exists(ROOT / args[0])
