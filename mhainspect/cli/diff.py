"""`mhainspect diff A B`: two models audited, their blocks compared (mhainspect.analysis.diff), the
difference written in a format (mhainspect.render.diff); --fail-on-change exits 1 when anything differs."""

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mhainspect.cli.output import fail, one_line, write_atomic, write_stdout
from mhainspect.errors import InputError
from mhainspect.ir.units import format_bytes

if TYPE_CHECKING:
    from mhainspect.results import Report

EXIT_OK, EXIT_CHANGED = 0, 1


class DiffFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"
    md = "md"
    html = "html"


# -o FILE's suffix picks the format when -f is not given.
_SUFFIXES = {".json": DiffFormat.json, ".md": DiffFormat.markdown, ".markdown": DiffFormat.markdown,
             ".html": DiffFormat.html, ".htm": DiffFormat.html}

ModelA = Annotated[str, typer.Argument(metavar="A", show_default=False, help="The model compared from.")]
ModelB = Annotated[str, typer.Argument(metavar="B", show_default=False, help="The model compared to.")]
DiffFormatOpt = Annotated[DiffFormat | None, typer.Option(
    "--format", "-f", case_sensitive=False, show_default=False,
    help="table (default), json, markdown (md) or html; with -o FILE and no -f, FILE's suffix decides.")]
DiffOutputOpt = Annotated[Path | None, typer.Option("--output", "-o", metavar="FILE", show_default=False,
                                                    help="Write to FILE instead of stdout.")]
FailOnChangeOpt = Annotated[bool, typer.Option(
    "--fail-on-change", help="Exit 1 when a block differs or has no match (a block lost, a layout or its bytes changed).")]


def _audit(text: str) -> "Report":
    """One model through the run every command goes through (no gates: nothing here sets one)."""
    from mhainspect.pipeline import AuditRequest, model_argument, report_of, run

    try:
        (outcome,) = run(AuditRequest((str(model_argument(text)),), expand=False, raise_errors=True))
        return report_of(outcome)
    except InputError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:  # a bug must still end in one line, not a traceback
        raise fail(f"{one_line(text)}: internal error: {type(exc).__name__}: {exc}") from None


def diff_cmd(a: ModelA, b: ModelB, output_format: DiffFormatOpt = None, output: DiffOutputOpt = None,
             fail_on_change: FailOnChangeOpt = False) -> None:
    """Compare the attention blocks of two models (a checkpoint and its export, fp32 and int8):
    blocks matched by name, else by position and shape; heads, K/V heads, d_k, d_v, parameters,
    bytes, KV cache per token and flags side by side with the difference."""
    from mhainspect.analysis.diff import diff_reports
    from mhainspect.render import diff as render

    fmt = output_format
    if fmt is None:
        fmt = _SUFFIXES.get(output.suffix.lower(), DiffFormat.table) if output is not None else DiffFormat.table
    d = diff_reports(_audit(a), _audit(b))
    text = {DiffFormat.table: render.render_diff_text, DiffFormat.json: render.render_diff_json,
            DiffFormat.markdown: render.render_diff_markdown, DiffFormat.md: render.render_diff_markdown,
            DiffFormat.html: render.render_diff_html}[fmt](d)
    if output is None or str(output) == "-":
        write_stdout(text)
    else:
        try:
            write_atomic(output, text)
        except (InputError, OSError) as exc:
            raise fail(f"{output}: cannot write: {exc}") from None
        typer.echo(f"mhainspect: wrote {one_line(str(output))} ({fmt.value}, "
                   f"{format_bytes(len(text.encode('utf-8')))})", err=True)
    raise typer.Exit(EXIT_CHANGED if fail_on_change and d.changed else EXIT_OK)
