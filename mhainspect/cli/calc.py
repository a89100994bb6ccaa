"""`mhainspect calc CONVENTION name=value...`: a layer's parameters under a framework's convention."""

import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from mhainspect.analysis.whatif import check_head_counts
from mhainspect.cli.output import count_option, fail, one_line, terminal_width, write_atomic, write_stdout
from mhainspect.errors import InputError
from mhainspect.ir.units import format_bytes, has_unit, parse_tokens, resolved
from mhainspect.render.json_render import to_json

if TYPE_CHECKING:
    from collections.abc import Sequence


V = TypeVar("V")
R = TypeVar("R")
EXIT_OK, EXIT_GATE, EXIT_INPUT = 0, 1, 2



class CalcFormat(str, Enum):
    text = "text"
    json = "json"
    html = "html"


def _calc_pairs(items: "Sequence[str]", option: str = "") -> dict[str, str]:
    """name=value pairs; a name given twice (in any spelling calc accepts) is refused."""
    # The conventions (and their renderers, below) are the calc command's: an inspect run never loads them.
    from mhainspect.conventions import spelling_key

    values: dict[str, str] = {}
    seen: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise fail(f"{option}expected name=value, got '{item}'")
        key = spelling_key(name)
        if key in seen:
            raise fail(f"{option}{name} given twice ({seen[key]}={values[seen[key]]} and {item}); give each argument once")
        seen[key] = name
        values[name] = value
    return values


CalcArgs = Annotated[list[str], typer.Argument(
    metavar="[CONVENTION] NAME=VALUE...", show_default=False,
    help="pytorch, keras, matlab, hf or t5, then the layer's arguments as name=value, e.g. pytorch embed_dim=512 "
         "num_heads=8. Without a convention: --compare.")]
CompareOpt = Annotated[bool, typer.Option("--compare", help="Read the same numbers under every convention.")]
CalcHeadsOpt = Annotated[list[int] | None, typer.Option(
    "--heads", metavar="N", show_default=False, parser=count_option,
    help="Also count at N heads, other arguments unchanged (repeatable).")]
VsOpt = Annotated[list[str] | None, typer.Option(
    "--vs", metavar="NAME=VALUE...", show_default=False,
    help="Put a second argument set beside the first: the same arguments with these changed, e.g. --vs "
         "NumHeads=8 NumKeyChannels=392; says which argument moved the count.")]


OutputOpt = Annotated[Path | None, typer.Option(
    "--output", "-o", metavar="FILE", show_default=False,
    help="Write to FILE (atomically) instead of stdout; without -f, FILE's suffix (.json, .html) picks the format.")]
FormatOpt = Annotated[CalcFormat | None, typer.Option("--format", "-f", case_sensitive=False, show_default=False,
                                                      help="Output format (default: text, or from -o's suffix).")]

_SUFFIX_FORMATS = {".json": CalcFormat.json, ".html": CalcFormat.html, ".htm": CalcFormat.html,
                   ".txt": CalcFormat.text}


@dataclass(frozen=True)
class _CalcRequest:
    """One calc run: the convention (None: --compare), its arguments and what to add."""

    convention: str | None
    values: dict[str, str]
    changes: dict[str, str]  # --vs
    heads: tuple[int, ...]
    fmt: CalcFormat
    width: int | None
    sized: bool
    dtype: str | None
    context: int | None
    kv_heads: tuple[int, ...]


def calc_cmd(
    arguments: CalcArgs,
    compare_all: CompareOpt = False,
    heads: CalcHeadsOpt = None,
    vs: VsOpt = None,
    output_format: FormatOpt = None,
    output: OutputOpt = None,
    dtype: Annotated[str | None, typer.Option("--dtype", metavar="DTYPE", help="Also give the layer in bytes: "
                                              "weights and KV cache per token in DTYPE (float32, bfloat16, "
                                              "float16, float8e4m3fn, int8, ...).", show_default=False)] = None,
    context_text: Annotated[str | None, typer.Option("--context", metavar="N", help="KV cache at N tokens: 8192, "
                                                     "8k (8,000), 8Ki (8,192), 128Ki, 1M (implies --dtype "
                                                     "float32 unless given).", show_default=False)] = None,
    kv_heads: Annotated[list[int] | None, typer.Option("--kv-heads", metavar="G", parser=count_option,
                                                       help="What-if: the layer with "
                                                       "G K/V heads, side by side (repeatable: MHA, GQA, MQA).",
                                                       show_default=False)] = None,
) -> None:
    """Count the parameters of an attention layer under pytorch, keras, matlab, hf or t5 conventions."""
    convention = None if not arguments or "=" in arguments[0] else arguments[0].lower()
    values = _calc_pairs(arguments[1:] if convention is not None else arguments)
    changes = _calc_pairs(vs or [], "--vs: ")
    try:
        check_head_counts(heads or ())
    except ValueError as exc:
        raise fail(str(exc)) from None
    try:
        context = None if context_text is None else parse_tokens(context_text)
    except ValueError as exc:
        raise fail(f"--context: {exc}") from None
    if context_text is not None and context is not None and has_unit(context_text):
        typer.echo(f"mhainspect: note: --context {resolved(context_text, context, 'tokens')}", err=True)
    to_file = output is not None and str(output) != "-"
    fmt, fmt_source = _calc_format(output_format, output if to_file else None)
    if kv_heads and any(g <= 0 for g in kv_heads):
        raise fail("--kv-heads takes positive integers")
    request = _CalcRequest(None if compare_all else convention, values, changes, tuple(heads or ()), fmt,
                           None if to_file else terminal_width(),
                           dtype is not None or context is not None or bool(kv_heads), dtype, context,
                           tuple(kv_heads or ()))
    _check_request(request)
    try:
        text = _calc_output(request)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if output is not None and to_file:
        _write_file(output, text, fmt.value + (f" {fmt_source}" if fmt_source else ""))
    else:
        write_stdout(text)


def _calc_format(given: CalcFormat | None, output: Path | None) -> tuple[CalcFormat, str]:
    """-f, else the suffix of -o FILE (.json, .html, .txt), else text; and what chose it (the
    suffix, said in the 'wrote' line)."""
    if given is not None:
        return given, ""
    by_suffix = _SUFFIX_FORMATS.get(output.suffix.lower()) if output is not None else None
    if by_suffix is not None and output is not None:
        return by_suffix, f"from the suffix {output.suffix}"
    return CalcFormat.text, ""


def _check_request(r: _CalcRequest) -> None:
    """Exit 2 (one line) for options that do not go together."""
    from mhainspect import conventions

    if r.convention is None:
        if r.sized:
            raise fail("--dtype, --context and --kv-heads apply to one convention (not --compare)")
        if (r.heads and r.fmt is not CalcFormat.html) or r.changes:
            raise fail(f"{'--vs' if r.changes else '--heads'} applies to one convention (calc CONVENTION ...); "
                       "with --compare, change the arguments themselves (num_heads=N) and run again")
    elif r.convention not in conventions.CONVENTIONS:
        raise fail(f"unknown convention '{r.convention}'; choose one of: " + ", ".join(conventions.CONVENTIONS))
    if r.sized and r.fmt is CalcFormat.html:
        raise fail("--dtype, --context and --kv-heads are given in text and json (--format text|json), not html")


def _write_file(output: Path, text: str, how: str) -> None:
    """``text`` into ``output`` atomically, then one stderr line saying what was written."""
    try:
        write_atomic(output, text)
    except InputError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"{output}: cannot write: {exc.strerror or exc}") from None
    typer.echo(f"mhainspect: wrote {one_line(str(output))} ({how}, {format_bytes(len(text.encode('utf-8')))})",
               err=True)


def _calc_output(r: _CalcRequest) -> str:
    """The text of one calc run in its format; ValueError for arguments a convention refuses."""
    from mhainspect import conventions
    from mhainspect.render import calc_render

    if r.convention is None:
        entries = conventions.compare(r.values)
        if r.fmt is CalcFormat.html:
            from mhainspect.render import calc_html

            return calc_html.render_compare_html(entries, r.heads)
        return (json.dumps(calc_render.compare_json(entries), indent=2) + "\n" if r.fmt is CalcFormat.json
                else calc_render.compare_text(entries, r.width))
    calc = conventions.calculate(r.convention, r.values)
    result = conventions.vs(r.convention, r.values, r.changes) if r.changes else None
    if r.fmt is CalcFormat.html:
        from mhainspect.render import calc_html

        return (calc_html.render_vs_html(result, r.heads) if result is not None
                else calc_html.render_calc_html(calc, r.heads))
    rows = conventions.what_if(r.convention, calc.what_if_arguments, [calc.num_heads, *r.heads]) if r.heads else ()
    if r.fmt is CalcFormat.json:
        text = to_json(calc_render.calc_document(calc, rows, result))
    else:
        # --vs asks "why did the count change?": that answer first, then the first set's breakdown
        parts = [calc_render.vs_text(result, r.width)] if result is not None else []
        parts.append(calc_render.calc_text(calc, r.width))
        if rows:
            parts.append(calc_render.what_if_text(r.convention, rows, r.width))
        text = "\n".join(parts)
    if r.sized:
        text = _calc_sized(text, r.convention, r.values, calc, r.dtype or "float32", r.context, list(r.kv_heads),
                           r.fmt is CalcFormat.json, r.width)
    return text


def _calc_sized(text: str, convention: str, values: dict[str, str], calc: Any, dtype: str, context: int | None,
                kv_heads: list[int], as_json: bool, width: int | None) -> str:
    """``text`` (the calc output) with the layer in bytes and the --kv-heads what-if (JSON: keys
    ``size`` and ``kv_heads_what_if`` beside the calculation's)."""
    from mhainspect import conventions
    from mhainspect.render import calc_render

    rows = conventions.kv_what_if(convention, values, kv_heads) if kv_heads else ()
    if as_json:
        doc = json.loads(text)
        doc["size"] = calc_render.size_json(calc, dtype, context)
        doc["kv_heads_what_if"] = calc_render.kv_heads_json(rows, dtype, context)
        return to_json(doc)
    text += "\n" + calc_render.size_text(calc, dtype, context, width)
    if kv_heads:
        text += "\n" + calc_render.kv_heads_text(convention, rows, dtype, context, width)
    return text
