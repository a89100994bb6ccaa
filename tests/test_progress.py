"""The progress bars on stderr, driven on a terminal the test stands in for: a run of many small
models shows a bar of models done on stderr while it runs, and never puts a byte of it on stdout
(the table, the JSON, the JSON Lines of a list stay what a run without a terminal prints); no bar
where nobody watches a terminal that redraws: stderr not a terminal, CI set, TERM=dumb, -q,
MHAINSPECT_NO_PROGRESS."""

from __future__ import annotations

import io
import json
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from mhainspect.cli.app import main
from mhainspect.cli.progress import BatchProgress, ProgressBar, bar_wanted

SAMPLES = Path(__file__).resolve().parent.parent / "sample_models"
ESCAPE = re.compile(r"\x1b\[")
MODELS = 24


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as a person's stderr is."""

    def isatty(self) -> bool:
        return True


class Pipe(io.StringIO):
    """A stream that says it is not a terminal: a pipe, a file, a CI log."""

    def isatty(self) -> bool:
        return False


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Many small models (the bundled samples, each several times under its own name), one corrupt."""
    models = tmp_path / "models"
    models.mkdir()
    samples = sorted(p for p in SAMPLES.glob("*.onnx") if p.stat().st_size < 200_000)
    for i in range(MODELS - 1):
        shutil.copy(samples[i % len(samples)], models / f"m{i:02d}_{samples[i % len(samples)].name}")
    (models / "m99_corrupt.onnx").write_bytes(b"\x08\x07not a protobuf" * 10)
    return models


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Ran]:
    for name in ("MHAINSPECT_NO_PROGRESS", "CI", "FORCE_COLOR", "FORCE_TERMINAL", "TTY_COMPATIBLE",
                 "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("NO_COLOR", "1")

    def go(*args: object, stderr_tty: bool = True, **env: str) -> Ran:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        out, err = Pipe(), (Terminal() if stderr_tty else Pipe())
        with monkeypatch.context() as m:
            m.setattr(sys, "stdout", out)
            m.setattr(sys, "stderr", err)
            with pytest.raises(SystemExit) as exc:
                main([str(a) for a in args])
            # what a bar left behind: rich puts stdout back when it stops, so read from ours
            written_out, written_err = out.getvalue(), err.getvalue()
        for key in env:
            monkeypatch.delenv(key)
        code = exc.value.code
        return Ran(code if isinstance(code, int) else 0, written_out, written_err)

    return go


def _bar_drawn(err: str) -> bool:
    """Whether stderr holds a drawn bar: rich's cursor controls and the bar's count of models."""
    return bool(ESCAPE.search(err)) and re.search(rf"\b\d+/{MODELS}\b", err) is not None


def _quiet_stderr(err: str) -> list[str]:
    """stderr as a run without a terminal prints it: its lines, no control sequences."""
    return [line for line in err.splitlines() if line.strip()]


def test_a_folder_run_draws_a_bar_on_stderr_and_nothing_on_stdout(run: Callable[..., Ran], folder: Path) -> None:
    shown = run(folder, "-f", "json")
    plain = run(folder, "-f", "json", stderr_tty=False)
    assert shown.code == plain.code == 2  # the corrupt model
    assert _bar_drawn(shown.err), shown.err
    assert "auditing" in shown.err
    assert shown.out == plain.out  # the JSON, byte for byte, bar or not
    doc = json.loads(shown.out)
    assert len(doc["models"]) == MODELS - 1 and not ESCAPE.search(shown.out)
    # the error line is printed above the bar, whole, as without a terminal
    (error,) = [line for line in _quiet_stderr(plain.err) if "m99_corrupt.onnx" in line]
    assert error in shown.err
    assert not _bar_drawn(plain.err) and "auditing" not in plain.err


def test_the_table_and_a_parallel_run_keep_stdout_clean(run: Callable[..., Ran], folder: Path) -> None:
    for args in ((folder, "--summary"), (folder, "-f", "json", "--jobs", "2")):
        shown, plain = run(*args), run(*args, stderr_tty=False)
        assert _bar_drawn(shown.err), (args, shown.err)
        assert shown.out == plain.out and not ESCAPE.search(shown.out)


def test_a_list_streams_its_records_to_stdout_while_the_bar_runs(run: Callable[..., Ran], folder: Path, tmp_path: Path) -> None:
    """--from-file in JSON Lines writes each record as its input finishes, while the bar is drawn:
    every record still goes to stdout, none to the terminal on stderr."""
    listing = tmp_path / "models.txt"
    listing.write_text("".join(f"{p}\n" for p in sorted(folder.iterdir())), encoding="utf-8")
    shown = run("--from-file", listing)
    plain = run("--from-file", listing, stderr_tty=False)
    assert _bar_drawn(shown.err), shown.err
    records = [json.loads(line) for line in shown.out.splitlines()]
    assert len(records) == MODELS and sorted(shown.out.splitlines()) == sorted(plain.out.splitlines())
    assert '"schema_version"' not in shown.err and not ESCAPE.search(shown.out)


@pytest.mark.parametrize(("why", "env", "args"), [
    ("CI", {"CI": "true"}, ()),
    ("CI=1", {"CI": "1"}, ()),
    ("a terminal that cannot redraw", {"TERM": "dumb"}, ()),
    ("turned off", {"MHAINSPECT_NO_PROGRESS": "1"}, ()),
    ("-q", {}, ("-q",)),
])
def test_no_bar_where_nobody_watches_it_redraw(run: Callable[..., Ran], folder: Path, why: str, env: dict[str, str],
                                              args: tuple[str, ...]) -> None:
    ran = run(folder, "-f", "json", *args, **env)
    assert not _bar_drawn(ran.err) and "auditing" not in ran.err and not ESCAPE.search(ran.err), why
    if not args:
        assert ran.out == run(folder, "-f", "json", stderr_tty=False).out


def test_ci_set_to_false_is_no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", Terminal())
    for name in ("MHAINSPECT_NO_PROGRESS", "CI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert bar_wanted()
    for value in ("false", "0", ""):
        monkeypatch.setenv("CI", value)
        assert bar_wanted(), value
    monkeypatch.setenv("CI", "true")
    assert not bar_wanted()
    monkeypatch.setattr(sys, "stderr", Pipe())
    monkeypatch.delenv("CI")
    assert not bar_wanted()


def test_the_bars_start_nothing_when_not_wanted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off, neither bar imports or starts rich's live display (nor a timer thread)."""
    pipe = Pipe()
    monkeypatch.setattr(sys, "stderr", pipe)
    with ProgressBar("models/m.onnx") as single:
        assert single.progress is None
    with BatchProgress(3) as batch:
        batch.say("mhainspect: error: x")
        batch.advance(True)
        assert batch.progress is None
    assert pipe.getvalue() == "mhainspect: error: x\n"


def test_one_slow_model_gets_its_own_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    """One model that takes more than a moment: after ~1 s (the timer, fired here at once) a bar
    names what is being read, and it goes when the model is done."""
    for name in ("MHAINSPECT_NO_PROGRESS", "CI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    err, out = Terminal(), Pipe()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", out)
    with ProgressBar("models/big.onnx") as bar:
        assert bar.progress is not None
        bar._show()
        bar._update("read", 5, 10)
        bar.progress.refresh()
        print("the report")  # stdout is a pipe: it stays stdout's while the bar runs
    assert "reading big.onnx" in err.getvalue() and ESCAPE.search(err.getvalue())
    assert out.getvalue() == "the report\n"
