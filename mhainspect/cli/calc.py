"""`mhainspect calc CONVENTION name=value...`: a layer's parameters under a framework's convention."""

from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from mhainspect.cli.output import fail, terminal_width, write_stdout

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
    "--heads", metavar="N", show_default=False,
    help="Also count at N heads, other arguments unchanged (repeatable).")]
VsOpt = Annotated[list[str] | None, typer.Option(
    "--vs", metavar="NAME=VALUE...", show_default=False,
    help="Put a second argument set beside the first: the same arguments with these changed, e.g. --vs "
         "NumHeads=8 NumKeyChannels=392; says which argument moved the count.")]


def calc_cmd(
    arguments: CalcArgs,
    compare_all: CompareOpt = False,
    heads: CalcHeadsOpt = None,
    vs: VsOpt = None,
    output_format: Annotated[CalcFormat, typer.Option("--format", "-f", case_sensitive=False, help="Output format.")] = CalcFormat.text,
    dtype: Annotated[str | None, typer.Option("--dtype", metavar="DTYPE", help="Also give the layer in bytes: "
                                              "weights and KV cache per token in DTYPE (float32, bfloat16, "
                                              "float16, float8e4m3fn, int8, ...).", show_default=False)] = None,
    context_text: Annotated[str | None, typer.Option("--context", metavar="N", help="KV cache at N tokens: 8192, "
                                                     "8k, 128k, 1M (k and M are 1024 and 1024²; implies --dtype "
                                                     "float32 unless given).", show_default=False)] = None,
    kv_heads: Annotated[list[int] | None, typer.Option("--kv-heads", metavar="G", help="What-if: the layer with "
                                                       "G K/V heads, side by side (repeatable: MHA, GQA, MQA).",
                                                       show_default=False)] = None,
) -> None:
    """Count the parameters of an attention layer under pytorch, keras, matlab, hf or t5 conventions."""
    import json

    from mhainspect import conventions
    from mhainspect.analysis.whatif import check_head_counts
    from mhainspect.render import calc_render
    from mhainspect.render.json_render import to_json

    convention = None if not arguments or "=" in arguments[0] else arguments[0].lower()
    values = _calc_pairs(arguments[1:] if convention is not None else arguments)
    changes = _calc_pairs(vs or [], "--vs: ")
    try:
        check_head_counts(heads or ())
    except ValueError as exc:
        raise fail(str(exc)) from None
    from mhainspect.ir.units import parse_tokens

    try:
        context = None if context_text is None else parse_tokens(context_text)
    except ValueError as exc:
        raise fail(f"--context: {exc}") from None
    as_json = output_format is CalcFormat.json
    width = terminal_width()
    sized = dtype is not None or context is not None or bool(kv_heads)
    if kv_heads and any(g <= 0 for g in kv_heads):
        raise fail("--kv-heads takes positive integers")
    if sized and (compare_all or convention is None):
        raise fail("--dtype, --context and --kv-heads apply to one convention (not --compare)")
    if sized and output_format is CalcFormat.html:
        raise fail("--dtype, --context and --kv-heads are given in text and json (--format text|json), not html")
    try:
        if output_format is CalcFormat.html:
            from mhainspect.render import calc_html

            if changes:
                raise fail("--vs is shown as text or JSON (--format text|json), not in the HTML page")
            if compare_all or convention is None:  # the page draws each convention's count against --heads
                text = calc_html.render_compare_html(conventions.compare(values), heads or ())
            elif convention not in conventions.CONVENTIONS:
                raise fail(f"unknown convention '{convention}'; choose one of: " + ", ".join(conventions.CONVENTIONS))
            else:
                text = calc_html.render_calc_html(conventions.calculate(convention, values), heads or ())
        elif compare_all or convention is None:
            if heads or changes:
                raise fail(f"{'--heads' if heads else '--vs'} applies to one convention (calc CONVENTION ...); "
                           "with --compare, change the arguments themselves (num_heads=N) and run again")
            entries = conventions.compare(values)
            text = (json.dumps(calc_render.compare_json(entries), indent=2) + "\n" if as_json
                    else calc_render.compare_text(entries, width))
        else:
            if convention not in conventions.CONVENTIONS:
                raise fail(f"unknown convention '{convention}'; choose one of: "
                           + ", ".join(conventions.CONVENTIONS))
            calc = conventions.calculate(convention, values)
            rows = conventions.what_if(convention, values, [calc.num_heads, *heads]) if heads else ()
            result = conventions.vs(convention, values, changes) if changes else None
            if as_json:
                text = to_json(calc_render.calc_document(calc, rows, result))
            else:
                text = calc_render.calc_text(calc, width)
                if rows:
                    text += "\n" + calc_render.what_if_text(convention, rows, width)
                if result is not None:
                    text += "\n" + calc_render.vs_text(result, width)
            if sized:
                text = _calc_sized(text, convention, values, calc, dtype or "float32", context, kv_heads or [],
                                   as_json, width)
    except ValueError as exc:
        raise fail(str(exc)) from None
    write_stdout(text)


def _calc_sized(text: str, convention: str, values: dict[str, str], calc: Any, dtype: str, context: int | None,
                kv_heads: list[int], as_json: bool, width: int | None) -> str:
    """``text`` (the calc output) with the layer in bytes and the --kv-heads what-if (JSON: keys
    ``size`` and ``kv_heads_what_if`` beside the calculation's)."""
    import json

    from mhainspect import conventions
    from mhainspect.render import calc_render
    from mhainspect.render.json_render import to_json

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
