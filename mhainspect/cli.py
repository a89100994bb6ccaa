"""Command line: the only module that reads options, prints, writes files and picks exit codes.

Exit codes: 0 the audit ran; 1 a gate failed; 2 usage or input error (one line on stderr).
"""

from __future__ import annotations

import os
import sys
import tempfile
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from mhainspect import __version__
from mhainspect.errors import InputError

EXIT_OK, EXIT_GATE, EXIT_INPUT = 0, 1, 2

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Audit the multi-head-attention blocks of a model without running it.")


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    jsonl = "jsonl"
    markdown = "markdown"


def fail(message: str, code: int = EXIT_INPUT) -> typer.Exit:
    typer.echo(f"mhainspect: error: {message}", err=True)
    return typer.Exit(code)


def write_atomic(path: Path, text: str) -> None:
    """Write through a temp file in the same folder, so a failure never leaves half a file."""
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(f"{path}: output folder does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _color_wanted(no_color: bool, to_file: bool) -> bool:
    if no_color or to_file or os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return sys.stdout.isatty()


def _width() -> int | None:
    cols = os.environ.get("COLUMNS")
    if cols and cols.isdigit():
        return int(cols)
    if sys.stdout.isatty():
        try:
            return os.get_terminal_size().columns
        except OSError:
            return None
    return None


@app.command("inspect")
def inspect_cmd(
    models: Annotated[list[Path], typer.Argument(help="ONNX model files to audit.", show_default=False)],
    output_format: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format.")] = OutputFormat.table,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report to FILE "
                                                   "(atomically) instead of stdout.")] = None,
    explain: Annotated[bool, typer.Option("--explain", "-v", help="Show evidence per block and near misses.")] = False,
    heads: Annotated[list[int] | None, typer.Option("--heads", help="What-if: each block's parameter count "
                                                       "under N heads (repeatable).")] = None,
    no_color: Annotated[bool, typer.Option("--no-color", help="Plain text without colors (also NO_COLOR).")] = False,
) -> None:
    """Audit MODELS: find every attention block, its heads, d_k, d_v and parameter count."""
    from mhainspect.analyze import analyze_path
    from mhainspect.render.json_render import report_to_json, reports_to_json, reports_to_jsonl
    from mhainspect.render.markdown import render_markdown
    from mhainspect.render.table import render_table

    what_if_heads = tuple(h for h in (heads or []) if h > 0)
    if heads and len(what_if_heads) != len(heads):
        raise fail("--heads takes positive integers")
    reports = []
    for model in models:
        try:
            reports.append(analyze_path(model, what_if_heads=what_if_heads))
        except InputError as exc:
            raise fail(str(exc)) from None
        except RecursionError:
            raise fail(f"{model}: graph too deeply nested to analyse") from None
        except MemoryError:
            raise fail(f"{model}: out of memory while reading the model") from None
        except Exception as exc:  # a bug must still end in one line, not a traceback
            if os.environ.get("MHAINSPECT_DEBUG"):
                raise
            raise fail(f"{model}: internal error ({type(exc).__name__}: {exc}); "
                       "rerun with MHAINSPECT_DEBUG=1 for details") from None

    if output_format is OutputFormat.json:
        text = report_to_json(reports[0]) if len(reports) == 1 else reports_to_json(reports)
    elif output_format is OutputFormat.jsonl:
        text = reports_to_jsonl(reports)
    elif output_format is OutputFormat.markdown:
        text = render_markdown(reports)
    else:
        color = _color_wanted(no_color, output is not None)
        text = "\n".join(render_table(r, width=_width(), color=color, verbose=explain) for r in reports)
    if output is not None:
        try:
            write_atomic(output, text)
        except InputError as exc:
            raise fail(str(exc)) from None
        except OSError as exc:
            raise fail(f"{output}: cannot write: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


class CalcFormat(str, Enum):
    text = "text"
    json = "json"


@app.command("calc")
def calc_cmd(
    arguments: Annotated[list[str], typer.Argument(help="CONVENTION then the layer's arguments as name=value, "
                                                   "e.g. pytorch embed_dim=512 num_heads=8.", show_default=False)],
    compare_all: Annotated[bool, typer.Option("--compare", help="Read the same numbers under every convention.")] = False,
    heads: Annotated[list[int] | None, typer.Option("--heads", help="Also count at N heads, other arguments "
                                                       "unchanged (repeatable).")] = None,
    output_format: Annotated[CalcFormat, typer.Option("--format", "-f", help="Output format.")] = CalcFormat.text,
) -> None:
    """Count the parameters of an attention layer under pytorch, keras, matlab, hf or t5 conventions."""
    import json

    from mhainspect import conventions
    from mhainspect.render import calc_render

    convention = None if not arguments or "=" in arguments[0] else arguments[0].lower()
    pairs = arguments[1:] if convention is not None else arguments
    values: dict[str, str] = {}
    for item in pairs:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise fail(f"expected name=value, got '{item}'")
        values[name] = value
    try:
        if compare_all or convention is None:
            entries = conventions.compare(values)
            text = (json.dumps(calc_render.compare_json(entries), indent=2) + "\n"
                    if output_format is CalcFormat.json else calc_render.compare_text(entries))
        else:
            if convention not in conventions.CONVENTIONS:
                raise fail(f"unknown convention '{convention}'; choose one of: "
                           + ", ".join(conventions.CONVENTIONS))
            calc = conventions.calculate(convention, values)
            if heads:
                rows = conventions.what_if(convention, values, [calc.num_heads, *heads])
                text = (json.dumps({"calculation": calc_render.calc_json(calc),
                                    "what_if": calc_render.what_if_json(rows)}, indent=2) + "\n"
                        if output_format is CalcFormat.json
                        else calc_render.calc_text(calc) + "\n" + calc_render.what_if_text(convention, rows))
            else:
                text = (json.dumps(calc_render.calc_json(calc), indent=2) + "\n"
                        if output_format is CalcFormat.json else calc_render.calc_text(calc))
    except ValueError as exc:
        raise fail(str(exc)) from None
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"mhainspect {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True,
                                          help="Show the version and exit.")] = False,
) -> None:
    """Audit the multi-head-attention blocks of a model without running it."""


_SUBCOMMANDS = {"inspect", "calc"}


def _click_exceptions() -> tuple[type[Exception], type[Exception]]:
    """(UsageError, ClickException) of the click that typer runs on (typer >= 0.20 vendors one)."""
    try:
        from typer._click import exceptions as vendored

        return vendored.UsageError, vendored.ClickException
    except ImportError:  # older typer on upstream click
        import click

        return click.UsageError, click.ClickException


def main(argv: list[str] | None = None) -> None:
    """Entry point: `mhainspect MODEL ...` means `mhainspect inspect MODEL ...`."""
    usage_error, click_exception = _click_exceptions()
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        typer.echo("mhainspect: error: no model given; usage: mhainspect MODEL... (see mhainspect --help)",
                   err=True)
        sys.exit(EXIT_INPUT)
    if args[0] not in _SUBCOMMANDS and args[0] not in ("--help", "-h", "--version"):
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
