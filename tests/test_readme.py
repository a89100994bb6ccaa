"""The README's sample output is what the command it shows prints (kept true as the report changes)."""

from __future__ import annotations

import os
import re
import shlex
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


# ----------------------------------------------------------------------------- every example block

_BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)
_USAGE = ("No such option", "Got unexpected extra", "Invalid value", "Missing argument", "unknown command")


def _commands() -> list[tuple[list[str], list[str], str]]:
    """Every `mhainspect ...` command of the README's code blocks: its arguments, the output lines
    shown under it ('$ ' samples; empty for a bare command), and a grep pattern it is piped to."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    out: list[tuple[list[str], list[str], str]] = []
    for lang, body in _BLOCK.findall(text):
        if lang == "python":
            continue
        current: tuple[list[str], list[str], str] | None = None
        for line in body.splitlines():
            command = line[2:] if line.startswith("$ ") else line
            if command.startswith("mhainspect "):
                command = re.split(r"\s{2,}#", command)[0]  # a comment after the command
                command, _, grep = command.partition(" | grep ")
                current = (shlex.split(command)[1:], [], grep.strip())
                out.append(current)
            elif current is not None and not line.startswith(("$ ", "pip ", "python")) and line.strip():
                current[1].append(line)
    return out


def _local(args: list[str]) -> bool:
    """Whether every path the command names is in the repository (no placeholder, nothing remote)."""
    paths = [a for a in args if "/" in a or a.endswith((".onnx", ".safetensors", ".gguf"))]
    return all("://" not in a and (ROOT / a).exists() for a in paths) and not any("://" in a for a in args)


@pytest.mark.parametrize("command", _commands(), ids=lambda c: " ".join(c[0])[:60])
def test_every_readme_command(cli: Callable[..., Run], command: tuple[list[str], list[str], str]) -> None:
    """A command on a bundled sample prints every line the README shows under it ('...' elides); a
    command on a placeholder path (model.onnx, models/) or a remote one is checked for its options
    only: the run stops at the missing input, never at an option (nothing is fetched)."""
    args, shown, grep = command
    if any("://" in a for a in args):
        args = [a for a in args if "://" not in a] + ["missing-placeholder.onnx"]
    width = max((len(line) for line in shown), default=100)
    run = cli(*args, columns=width)
    text = run.out + run.err
    assert not any(u in run.err for u in _USAGE), run.err
    if not _local(args):
        assert run.code == 2 and ("no such file" in run.err or "no models" in run.err), run.err
        return
    assert run.code in (0, 1), run.err
    lines = [ln for ln in text.splitlines() if grep in ln] if grep else text.splitlines()
    for line in shown:
        if line.strip() == "...":
            continue
        assert line in lines, f"README shows {line!r}; the command printed:\n{text}"


def test_readme_python_block(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The Python block runs, its placeholder paths pointed at the bundled samples."""
    monkeypatch.chdir(ROOT)
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    (code,) = [body for lang, body in _BLOCK.findall(text) if lang == "python"]
    code = code.replace('"model.onnx"', '"sample_models/llama_kv_cache.onnx"').replace('"models/"', '"sample_models/"')
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own example
    report = namespace["report"]
    assert report.model.kv_cache.total_bytes == 128 * 8000  # type: ignore[attr-defined]  # context="8k": k is 1,000
    assert "Models (" in capsys.readouterr().out
    import mhainspect

    assert mhainspect.calc("pytorch", embed_dim=512, num_heads=8).total == 1050624
