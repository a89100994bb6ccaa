"""Command line: the only module that reads options, prints, writes files and picks exit codes.

Exit codes: 0 the audit ran; 1 a gate failed; 2 usage or input error (one line on stderr).
"""

import difflib
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, TextIO, TypeVar

import typer

try:
    from typer._click import exceptions as click_exceptions  # typer >= 0.20 vendors its click
except ImportError:  # older typer on upstream click
    from click import exceptions as click_exceptions  # type: ignore[no-redef]

from mhainspect.cli.calc import calc_cmd
from mhainspect.cli.diff import diff_cmd
from mhainspect.cli.inspect import inspect_cmd
from mhainspect.cli.output import one_line, say_error, stdout_unwritable, version_callback

if TYPE_CHECKING:


    pass

V = TypeVar("V")
R = TypeVar("R")
EXIT_OK, EXIT_GATE, EXIT_INPUT = 0, 1, 2



# Plain click help (rich_markup_mode=None): it wraps at word boundaries and never cuts an option name.
app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]})


app.command("inspect", short_help="Audit models (the default command: mhainspect MODEL...).")(inspect_cmd)
app.command("calc", short_help="Count an attention layer's parameters under a framework's convention.")(calc_cmd)
app.command("diff", short_help="Compare the attention blocks of two models (A B).")(diff_cmd)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True,
                                          help="Show the version and exit.")] = False,
) -> None:
    """Audit the multi-head-attention blocks of a model without running it.

    \b
    mhainspect MODEL...               same as: mhainspect inspect MODEL...
    mhainspect calc CONVENTION k=v... count an attention layer's parameters
    mhainspect diff A B               what changed between two models, block by block
    mhainspect help [COMMAND]         this help, or a command's

    MODEL is an ONNX file, a checkpoint, a Hugging Face folder, a factory spec or a folder of models.
    """


_SUBCOMMANDS = ("inspect", "calc", "diff")
# Options of the program itself, not of `inspect`: shell completion is typer's (bash, zsh, fish, PowerShell).
_ROOT_OPTIONS = ("--help", "-h", "--version", "--install-completion", "--show-completion")


def _misspelled(word: str) -> str | None:
    """The subcommand ``word`` looks like a typo of, when it cannot be a model (no such path, no
    file-like or module-like spelling)."""
    if word.startswith("-") or any(c in word for c in "./:\\") or Path(word).exists():
        return None
    close = difflib.get_close_matches(word.lower(), [*_SUBCOMMANDS, "help"], n=1, cutoff=0.6)
    return close[0] if close else None


def _click_exceptions() -> tuple[type[Exception], type[Exception]]:
    """(UsageError, ClickException) of the click that typer runs on (typer >= 0.20 vendors one)."""
    return click_exceptions.UsageError, click_exceptions.ClickException


def _spread_vs(args: list[str]) -> list[str]:
    """`--vs A=1 B=2` -> `--vs A=1 --vs B=2`: every name=value after --vs (up to the next option)
    belongs to the second argument set, as the help and the issue spell it."""
    out: list[str] = []
    in_vs = False
    for token in args:
        if token == "--vs":
            in_vs = True
            continue
        if token.startswith("-"):
            in_vs = False
        elif in_vs and "=" in token:
            out.append("--vs")
        out.append(token)
    if in_vs and (not out or out[-1] != "--vs") and args[-1] == "--vs":
        out.append("--vs")  # a bare --vs at the end: let click say it needs a value
    return out


def main(argv: list[str] | None = None) -> None:
    """Entry point: `mhainspect MODEL ...` means `mhainspect inspect MODEL ...`."""
    usage_error, click_exception = _click_exceptions()
    if os.environ.get("_MHAINSPECT_COMPLETE"):  # a shell asking for completions (typer's protocol)
        app(prog_name="mhainspect")
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        typer.echo("mhainspect: error: no model given; usage: mhainspect MODEL... (see mhainspect --help)",
                   err=True)
        sys.exit(EXIT_INPUT)
    if args[0] == "calc":
        args = _spread_vs(args)
    if args[0] == "help":  # mhainspect help [COMMAND]
        if args[1:2] and args[1] not in _SUBCOMMANDS:
            close = difflib.get_close_matches(args[1].lower(), _SUBCOMMANDS, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'? " if close else ""
            typer.echo(f"mhainspect: error: no command '{one_line(args[1])}'; {hint}commands: "
                       f"{', '.join(_SUBCOMMANDS)}", err=True)
            sys.exit(EXIT_INPUT)
        args = [*args[1:2], "--help"] if args[1:2] else ["--help"]
    if args[0] not in _SUBCOMMANDS and args[0] not in _ROOT_OPTIONS:
        guess = _misspelled(args[0])
        if guess is not None:
            typer.echo(f"mhainspect: error: unknown command '{one_line(args[0])}'; did you mean '{guess}'? "
                       "(a model path must exist)", err=True)
            sys.exit(EXIT_INPUT)
        args.insert(0, "inspect")
    code: object
    try:
        code = app(args=args, prog_name="mhainspect", standalone_mode=False)
    except typer.Exit as exc:
        code = exc.exit_code
    except usage_error as exc:
        # Usage errors are one line like every other input error, not a boxed panel.
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        typer.echo(f"mhainspect: error: {' '.join(message.split())}", err=True)
        code = EXIT_INPUT
    except click_exception as exc:
        typer.echo(f"mhainspect: error: {exc}", err=True)
        code = EXIT_INPUT
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("mhainspect: interrupted", err=True)
        code = 130
    sys.exit(code if isinstance(code, int) else EXIT_OK)



def run() -> NoReturn:
    """Console-script entry: main(), with what only a whole process may do.

    A reader that stops early (``| head``) ends the process by SIGPIPE, as it ends cat or grep:
    the shell sees 141, not the 1 that click would turn a broken pipe into (1 means a gate failed).
    Tests and embedders call main(), which raises SystemExit as usual.
    """
    if hasattr(signal, "SIGPIPE"):  # not on Windows
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        main()
        code: object = EXIT_OK
    except SystemExit as exc:
        code = exc.code
    if code is not None and not isinstance(code, int):  # what sys.exit does with a message
        sys.stderr.write(f"{code}\n")
        code = 1
    status = code or EXIT_OK
    try:  # what typer itself printed (--help, --version); reports are flushed by write_stdout
        sys.stdout.flush()
    except OSError as exc:
        if status == EXIT_OK:  # else the run has said why it failed (write_stdout's bytes fail here again)
            say_error(stdout_unwritable(exc))
            status = EXIT_INPUT
        _drop_unwritable(sys.stdout)
    except ValueError:  # closed by an embedding caller
        pass
    try:
        sys.stderr.flush()
    except OSError:  # nowhere left to say it
        _drop_unwritable(sys.stderr)
    except ValueError:
        pass
    sys.exit(status)


def _drop_unwritable(stream: TextIO) -> None:
    """Point a stream that cannot be written at os.devnull: the interpreter's own flush at exit
    would fail on the same buffered bytes again, print a traceback and exit 120."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
