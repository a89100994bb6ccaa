"""Writing what the CLI says: stdout, stderr, atomic files, the terminal's width and colour."""

import os
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer

from mhainspect import __version__
from mhainspect.errors import InputError
from mhainspect.ir.units import parse_count
from mhainspect.render.safe import printable

if TYPE_CHECKING:


    pass

V = TypeVar("V")
R = TypeVar("R")
EXIT_OK, EXIT_GATE, EXIT_INPUT = 0, 1, 2



class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    jsonl = "jsonl"
    markdown = "markdown"
    github = "github"
    sarif = "sarif"
    html = "html"
    csv = "csv"
    md = "md"  # markdown's short name (as -o x.md picks it)

    @property
    def canonical(self) -> "OutputFormat":
        """The format itself: md is markdown."""
        return OutputFormat.markdown if self is OutputFormat.md else self


def count_option(value: str) -> int:
    """An integer option (head counts) read by the one rule of every typed number (ir.units): 16,
    1_024, 1Ki; a fraction or a word is a usage error, one line (typer's ``parser=``)."""
    try:
        return parse_count(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def one_line(text: str) -> str:
    """``text`` on one line with control characters escaped: names from a hostile file can hold
    newlines or terminal escape sequences, and an error stays one line that cannot drive the terminal."""
    return printable(text.strip())


def say_error(message: str) -> None:
    typer.echo(f"mhainspect: error: {one_line(message)}", err=True)


def fail(message: str, code: int = EXIT_INPUT) -> typer.Exit:
    say_error(message)
    return typer.Exit(code)


def stdout_unwritable(exc: OSError) -> str:
    return f"stdout: cannot write: {exc.strerror or exc}"


def write_stdout(text: str) -> None:
    """The report on stdout, flushed here so that a full disk or a closed descriptor is one error
    line and exit 2 (not a traceback, and not lost in the flush at exit)."""
    try:
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
        sys.stdout.flush()
    except OSError as exc:
        raise fail(stdout_unwritable(exc)) from None


def write_atomic(path: Path, text: str) -> None:
    """Write through a temp file in the same folder, so a failure never leaves half a file."""
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(f"{path}: output folder does not exist")
    if path.exists() and not path.is_file():
        if path.is_dir():
            raise InputError(f"{path}: is a directory")
        # /dev/null, a FIFO, a terminal: write in place; renaming over them would replace the device.
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return
    fd, tmp = _create_temp(directory, path.name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            if path.exists():  # replacing a report keeps its permissions
                os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _create_temp(directory: Path, name: str) -> tuple[int, str]:
    """A new file beside the target, created like any new file (umask applies, unlike mkstemp's 0600).

    Not tempfile: importing it costs a short run ~15 ms (random, shutil)."""
    for attempt in range(100):
        tmp = str(directory / f".{name}.{os.getpid()}.{attempt}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise InputError(f"{directory}: cannot create a temporary file for the report")


def color_wanted(no_color: bool, to_file: bool) -> bool:
    if no_color or to_file or os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return sys.stdout.isatty()


def report_width() -> int | None:
    """The width to fit the table to: as terminal_width, but 160 for a pipe or file."""
    width = terminal_width()
    if width is None and not sys.stdout.isatty():
        return 160  # logs and pipes: no terminal to fit, so keep every column
    return width


def terminal_width() -> int | None:
    """The width to wrap prose at: COLUMNS or the terminal's; None for a pipe or file (no wrap)."""
    cols = os.environ.get("COLUMNS")
    if cols and cols.isdigit():
        return int(cols)
    if sys.stdout.isatty():
        try:
            return os.get_terminal_size().columns
        except OSError:
            return None
    return None


def version_callback(value: bool) -> None:
    if value:
        typer.echo(f"mhainspect {__version__}")
        raise typer.Exit()

