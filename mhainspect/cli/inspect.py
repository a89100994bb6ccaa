"""`mhainspect inspect MODEL...`: options, settings, one audit per model, gates, and the output."""

import dataclasses
import os
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from mhainspect.analysis.gates import (
    ModelExtras,
    parse_byte_limit,
    parse_codes,
    parse_fail_on,
    parse_limit,
)
from mhainspect.analysis.size import check_kv_dtype, check_weight_dtype
from mhainspect.analysis.stated_heads import heads_hint, stated_offer
from mhainspect.analysis.whatif import check_head_counts
from mhainspect.batch import AuditFailure, BatchAbort, failure_of, read_inputs
from mhainspect.cli.output import (
    OutputFormat,
    color_wanted,
    count_option,
    fail,
    one_line,
    report_width,
    terminal_width,
    version_callback,
    write_atomic,
    write_stdout,
)
from mhainspect.cli.progress import BatchProgress, ProgressBar
from mhainspect.errors import InputError
from mhainspect.ir.units import format_bytes, has_unit, parse_size, parse_tokens, resolved
from mhainspect.pipeline import Audited, AuditRequest, run_unordered
from mhainspect.pipeline.config import ConfigError, ConfigFinder, Settings, merge, require_context_limit
from mhainspect.render.json_render import error_record, report_to_dict, reports_to_dict, to_json, to_jsonl
from mhainspect.results import FailedInput, WarningCode, warning_code

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mhainspect.ir.weights import HeadOffers
    from mhainspect.pipeline import Expansion, Source
    from mhainspect.pipeline.verify import VerifyRequest
    from mhainspect.results import Report

V = TypeVar("V")
R = TypeVar("R")
EXIT_OK, EXIT_GATE, EXIT_INPUT = 0, 1, 2



def _cli_settings(output_format: "OutputFormat | None", heads: list[int] | None, max_params: str | None,
                  max_attention_params: str | None, fail_on: list[str] | None, ignore: list[str] | None,
                  exit_zero: bool | None, *, context: str | None = None, batch: str | None = None,
                  kv_dtype: str | None = None, decoder: bool | None = None, weight_dtype: str | None = None,
                  max_weight_bytes: str | None = None, max_kv_cache: str | None = None, gpu_memory: str | None = None,
                  gpus: str | None = None, require_context: str | None = None) -> "Settings":
    """The options given on the command line (None where not given); one-line error on bad values."""
    def parsed(option: str, parse: Callable[[V], R], value: V | None) -> R | None:
        try:
            return None if value is None else parse(value)
        except ValueError as exc:
            raise fail(f"{option}: {exc}") from None

    try:
        check_head_counts(heads or ())
    except ValueError as exc:
        raise fail(str(exc)) from None
    limit = parsed("--max-params", parse_limit, max_params)
    attention_limit = parsed("--max-attention-params", parse_limit, max_attention_params)
    fail_codes = parsed("--fail-on", parse_fail_on, fail_on)
    ignore_codes = parsed("--ignore", parse_codes, ignore)

    tokens = parsed("--context", lambda v: parse_tokens(v, "tokens"), context)
    sequences = parsed("--batch", lambda v: parse_tokens(v, "sequences"), batch)
    weight_limit = parsed("--max-weight-bytes", parse_byte_limit, max_weight_bytes)
    kv_limit = parsed("--max-kv-cache", parse_byte_limit, max_kv_cache)
    gpu_memory_limit = parsed("--gpu-memory", parse_byte_limit, gpu_memory)
    required = parsed("--require-context", require_context_limit, require_context)
    return Settings(max_params=limit and dataclasses.replace(limit, source="--max-params"),
                    max_attention_params=attention_limit and dataclasses.replace(attention_limit,
                                                                                 source="--max-attention-params"),
                    fail_on=fail_codes, ignore=ignore_codes, exit_zero=exit_zero,
                    format=None if output_format is None else output_format.value,
                    heads=None if heads is None else tuple(sorted(set(heads))),
                    max_weight_bytes=weight_limit and dataclasses.replace(weight_limit, source="--max-weight-bytes"),
                    max_kv_cache=kv_limit and dataclasses.replace(kv_limit, source="--max-kv-cache"),
                    context=tokens, batch=sequences,
                    kv_dtype=parsed("--kv-dtype", check_kv_dtype, kv_dtype), decoder=decoder,
                    weight_dtype=parsed("--weight-dtype", _weight_dtype, weight_dtype),
                    gpu_memory=None if gpu_memory_limit is None else gpu_memory_limit.value,
                    gpus=parsed("--gpus", lambda v: parse_tokens(v, "GPUs"), gpus),
                    require_context=required and dataclasses.replace(required, source="--require-context"))


def _unit_notes(given: "Settings", **typed: str | None) -> tuple[str, ...]:
    """A stderr note per number typed with a unit, saying what it came to ('--context 8k = 8,000
    tokens'): k is 1,000 here, as in every option, which a reader used to 8k = 8,192 should see. The
    gates' budgets say it in their own lines ('--max-params 7B (7,000,000,000)')."""
    notes: list[str] = []
    values: dict[str, tuple[int | None, str]] = {
        "context": (given.context, "tokens"), "batch": (given.batch, "sequences"),
        "gpu_memory": (given.gpu_memory, "bytes"), "gpus": (given.gpus, "GPUs")}
    for name, text in typed.items():
        value, what = values[name]
        if text is not None and value is not None and has_unit(text):
            notes.append(f"mhainspect: note: --{name.replace('_', '-')} {resolved(text, value, what)}")
    return tuple(notes)


def _weight_dtype(name: str) -> str:
    check_weight_dtype(name)
    return name


def _dims(items: list[str]) -> dict[str, int]:
    """--dim NAME=VALUE options by name; one line and exit 2 for a bad or repeated one."""
    dims: dict[str, int] = {}
    for item in items:
        name, sep, text = item.partition("=")
        try:  # the one rule of every typed number: 128, 1_024, 1Ki
            value = parse_tokens(text, "elements") if sep and name.strip() else 0
        except ValueError:
            value = 0
        if value < 1:
            raise fail(f"--dim: expected NAME=VALUE with a positive integer VALUE, got '{item}'")
        if name.strip() in dims and dims[name.strip()] != value:
            raise fail(f"--dim {name.strip()} given twice ({dims[name.strip()]} and {value})")
        dims[name.strip()] = value
    return dims


def _verify_request(verify: bool, dim: list[str] | None, max_verify_bytes: str | None) -> "VerifyRequest | None":
    """--verify's options (None without --verify); one line and exit 2 for a bad one, or when
    onnxruntime is missing."""
    if not verify:
        if dim or max_verify_bytes is not None:
            raise fail("--dim and --max-verify-bytes apply only with --verify")
        return None
    from mhainspect.analysis import verify as verify_mod  # --verify only: the onnxruntime path
    from mhainspect.pipeline.verify import VerifyRequest  # --verify only, as the stage itself

    dims = _dims(dim or [])
    try:
        budget = verify_mod.default_max_verify_bytes() if max_verify_bytes is None else parse_size(max_verify_bytes)
    except ValueError as exc:
        raise fail(f"--max-verify-bytes: {exc}") from None
    try:
        verify_mod.require_runtime()
    except InputError as exc:
        raise fail(str(exc)) from None
    return VerifyRequest(dims, budget)


@dataclass(frozen=True)
class _View:
    """How the reports are shown: everything a renderer needs besides the reports themselves."""

    fmt: OutputFormat
    several: bool  # several models (or a folder of them): a multi-model document
    errors: int  # models that could not be read
    width: int | None
    wrap: bool  # a terminal (or COLUMNS) to wrap text for; a pipe keeps one line per flag
    color: bool
    verbose: bool
    group: bool
    what_if_heads: tuple[int, ...]
    quiet: bool
    summary: bool = False  # --summary: one row per model
    failed: "tuple[FailedInput, ...]" = ()  # inputs that could not be audited: an entry each in the output
    notes: tuple[str, ...] = ()  # what options typed with a unit came to, said on stderr beside reports


def _render(view: _View, reports: "list[Report]", extras: "list[ModelExtras]") -> str:
    """The report text; only the chosen format's renderer is imported (the table's rich is a run's
    slowest import)."""
    fmt, failed = view.fmt, view.failed
    failures = [g for e in extras for g in e.gates if not g.passed]
    if fmt is OutputFormat.json or fmt is OutputFormat.jsonl:
        docs = [report_to_dict(r, gates=e.gates, ignored=e.ignored) for r, e in zip(reports, extras)]
        if fmt is OutputFormat.jsonl:
            return to_jsonl([*docs, *(error_record(f.input, f.kind, f.message) for f in failed)])
        return to_json(reports_to_dict(reports, docs=docs, failed=failed) if view.several or failed else docs[0])
    if fmt is OutputFormat.csv:
        from mhainspect.render.csv_render import render_csv

        return render_csv(reports, summary=view.summary, failed=failed)
    if fmt is OutputFormat.markdown:
        from mhainspect.render.markdown import render_markdown, render_overview_markdown

        if view.summary:
            return render_overview_markdown(reports, failed=failed)
        return render_markdown(reports, extras=extras, verbose=view.verbose, what_if_heads=view.what_if_heads,
                               group_repeats=view.group, failed=failed)
    if fmt is OutputFormat.github:
        from mhainspect.render.github import render_github

        return render_github([] if view.quiet else reports, failures, failed)
    if fmt is OutputFormat.html:
        from mhainspect.render.html import render_html

        return render_html(reports, extras=extras, failed=failed)
    if fmt is OutputFormat.sarif:
        from mhainspect.render.sarif import render_sarif

        return render_sarif(reports, failures, execution_successful=not view.errors, failed=failed)
    return _render_table(view, reports, extras)


def _render_table(view: _View, reports: "list[Report]", extras: "list[ModelExtras]") -> str:
    """The terminal table: the overview of several models (--summary: only it and the totals), each
    model's report, the run's totals; in a file, the inputs that could not be audited too."""
    from mhainspect.render.table import render_overview, render_summary, render_table

    several = view.several or view.summary
    overview = [render_overview(reports, width=view.width, color=view.color)] if several and reports else []
    parts = [*overview, *([] if view.summary else (
        render_table(r, width=view.width, color=view.color, verbose=view.verbose, extras=e,
                     what_if_heads=view.what_if_heads, group_repeats=view.group, wrap=view.wrap)
        for r, e in zip(reports, extras)))]
    lines = [f"Could not audit ({f.kind}): {f.message}" for f in view.failed]
    if several:
        lines += _summary_lines(reports, extras, view.errors)
    if lines:
        parts.append(render_summary(lines, width=view.width, color=view.color, wrap=view.wrap))
    return "\n".join(parts)


def _summary_lines(reports: "Sequence[Report]", extras: "Sequence[ModelExtras]", errors: int) -> list[str]:
    """The end of a many-model run (ruff: "Found 1 error."): what was audited and what failed."""
    from mhainspect.render.cells import blocks_word  # the table's cells, imported with the table (its only caller)

    def n(count: int, word: str) -> str:
        return f"{count:,} {word}{'' if count == 1 else 's'}"

    severities = Counter(str(getattr(f.severity, "value", f.severity)) for r in reports for f in r.flags)
    flags = sum(severities.values())
    detail = f" ({', '.join(f'{c} {s}' for s, c in sorted(severities.items()))})" if flags else ""
    blocks = sum(len(r.blocks) for r in reports)
    line = (f"Audited {n(len(reports), 'model')}: {blocks_word(blocks)}, {n(flags, 'flag')}{detail}")
    failed = sum(1 for e in extras for g in e.gates if not g.passed)
    checked = sum(len(e.gates) for e in extras)
    lines = [line + "."]
    if checked:
        lines.append(f"Gates: {n(failed, 'failure')} in {n(checked, 'check')}." if failed
                     else f"Gates: all {n(checked, 'check')} passed.")
    if errors:
        lines.append(f"{n(errors, 'model')} could not be read (the errors above).")
    return lines


# Output file suffixes that name a format: -o report.html without -f writes html.
_SUFFIX_FORMATS = {".json": OutputFormat.json, ".jsonl": OutputFormat.jsonl, ".md": OutputFormat.markdown,
                   ".markdown": OutputFormat.markdown, ".sarif": OutputFormat.sarif, ".html": OutputFormat.html,
                   ".htm": OutputFormat.html, ".csv": OutputFormat.csv}


def _output_format(cli_format: str | None, output: Path | None, config_format: str | None,
                   listed: bool = False) -> tuple[OutputFormat, str]:
    """The format and what chose it: -f, else the suffix of -o FILE (.json .jsonl .md .sarif .html),
    else jsonl for a --from-file run, else the config file's ``format``, else the table. The text is
    empty unless the suffix chose."""
    if cli_format is not None:
        return OutputFormat(cli_format).canonical, ""
    if output is not None and str(output) != "-":
        by_suffix = _SUFFIX_FORMATS.get(output.suffix.lower())
        if by_suffix is not None:
            return by_suffix, f"from the suffix {output.suffix}"
    if listed:
        return OutputFormat.jsonl, ""
    return OutputFormat(config_format or OutputFormat.table.value).canonical, ""


def _timeout(raw: str | None) -> float | None:
    from mhainspect.pipeline import parse_timeout

    try:
        return None if raw is None else parse_timeout(raw)
    except ValueError as exc:
        raise fail(str(exc)) from None


def _stated_heads(num_heads: int | None, num_kv_heads: int | None) -> "HeadOffers | None":
    try:
        return stated_offer(num_heads, num_kv_heads)
    except ValueError as exc:
        raise fail(str(exc)) from None


def _deliver(view: _View, reports: "list[Report]", extras: "list[ModelExtras]", output: Path | None,
             fmt_source: str) -> None:
    """The report to stdout or to ``output`` (confirmed on stderr), then on stderr: the hints, the
    warnings about options and one line per failed gate, the last two unless the table on this
    terminal already shows them."""
    failures = [g for e in extras for g in e.gates if not g.passed]
    to_stdout = output is None
    on_screen = False  # the report's own Gates and Warnings sections are on the person's screen
    if reports and to_stdout and (not view.quiet or view.fmt is OutputFormat.github and failures) \
            or not to_stdout and (reports or view.failed):
        # In a file, nothing is lost: the reports that succeeded and an entry per input that failed.
        text = _render(view if output is not None else dataclasses.replace(
            view, failed=() if view.fmt is OutputFormat.table else view.failed), reports, extras)
        if output is not None:
            _write_file(output, text, view, fmt_source, len(reports))
        else:
            write_stdout(text)
            on_screen = view.fmt in (OutputFormat.table, OutputFormat.markdown) and not view.quiet and _same_terminal()
    if not view.quiet:
        for note in view.notes if reports else ():
            typer.echo(note, err=True)
        for report in reports:
            path = one_line(report.model.path)
            for kind, note in _notes(report, on_screen):
                typer.echo(f"mhainspect: {kind}: {path}: {one_line(note)}", err=True)
    if not on_screen:
        for failure in failures:
            typer.echo(f"mhainspect: gate failed: {one_line(failure.message)}", err=True)


def _write_file(output: Path, text: str, view: _View, fmt_source: str, reports: int = 1) -> None:
    """``text`` into ``output`` (atomically), then one stderr line saying what was written (not with
    -q): with inputs that failed, how many reports and error entries it holds, and which failed."""
    try:
        write_atomic(output, text)
    except InputError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"{output}: cannot write: {exc.strerror or exc}") from None
    if not view.quiet:
        how = f"{view.fmt.value} {fmt_source}" if fmt_source else view.fmt.value
        what = ""
        if view.failed:
            names = ", ".join(one_line(f.input) for f in view.failed[:3]) + (
                f" and {len(view.failed) - 3} more" if len(view.failed) > 3 else "")
            what = (f": {reports} report{'s' if reports != 1 else ''} and {len(view.failed)} error "
                    f"entr{'ies' if len(view.failed) != 1 else 'y'} ({names} could not be audited)")
        typer.echo(f"mhainspect: wrote {one_line(str(output))} ({how}, {format_bytes(len(text.encode('utf-8')))})"
                   + what, err=True)


def _notes(report: "Report", on_screen: bool) -> list[tuple[str, str]]:
    """What stderr says about a report: a hint when heads are unknown for lack of a config (the
    report itself does not say what would help), and the warnings about the options themselves
    (one that had no effect, a context beyond the model's positions), where a JSON or file run
    would bury them; not those when the table on the screen shows them."""
    notes = [] if (hint := heads_hint(report)) is None else [("hint", hint)]
    if not on_screen:
        about_options = (WarningCode.OPTION_WITHOUT_EFFECT, WarningCode.CONTEXT_BEYOND_POSITIONS)
        notes.extend(("warning", str(w)) for w in report.warnings if warning_code(w) in about_options)
    return notes


def _same_terminal() -> bool:
    """stdout and stderr both on a terminal: what one prints, the person sees beside the other."""
    try:
        return sys.stdout.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed by an embedding caller
        return False


# ----------------------------------------------------------------------------- inspect options
# One Annotated alias per option, grouped by concern (the help lists them under these panels);
# a new option is one alias here and one parameter of inspect_cmd.

_OUT, _GATES, _CONFIG, _WHATIF, _VERIFY, _FACTORY = ("Output", "Gates", "Configuration", "What-if", "Run-time check",
                                                      "Factory specs")
_SIZE = "Size in bytes"
_MANY = "Many models"
_HEADS = "Head counts"
_REMOTE = "Remote models"

ModelsArg = Annotated[list[str] | None, typer.Argument(
    metavar="MODEL...", show_default=False,
    help="ONNX files (.onnx), GGUF files (.gguf; split parts as one model), checkpoints (.safetensors, "
         ".pt/.pth/.bin/.ckpt), Hugging Face model folders "
         "(config.json with weights: one model), factory specs (pkg.module:function, file.py:function), "
         "folders (every model below them, sorted), or models where they live, read by ranges: "
         "hf://org/name[@revision][/path], Hub web URLs, http(s):// URLs, s3://, gs://, az://.")]
# Output
FormatOpt = Annotated[OutputFormat | None, typer.Option(
    "--format", "-f", show_default=False, rich_help_panel=_OUT, case_sensitive=False,
    help="Output format (default: table, or format from the config file).")]
OutputOpt = Annotated[Path | None, typer.Option(
    "--output", "-o", metavar="FILE", rich_help_panel=_OUT,
    help="Write the report to FILE (atomically) instead of stdout; - is stdout.")]
ExplainOpt = Annotated[bool, typer.Option(
    "--explain", "--verbose", "-v", rich_help_panel=_OUT,
    help="Show the evidence per block, every flag on its own line and the near misses.")]
NoGroupOpt = Annotated[bool, typer.Option(
    "--no-group", rich_help_panel=_OUT,
    help="List identical flags of several blocks one by one (default: one line with ×N).")]
NoColorOpt = Annotated[bool, typer.Option("--no-color", rich_help_panel=_OUT,
                                          help="Plain text without colors (also NO_COLOR).")]
SummaryOpt = Annotated[bool, typer.Option(
    "--summary", rich_help_panel=_OUT,
    help="One row per model and the run's totals, not each model's report (table, markdown; csv: a row per "
         "model instead of per block).")]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-q", rich_help_panel=_OUT,
    help="Print only failures (failed gates and errors; with -f github their annotations); nothing on success.")]
# Many models
FromFileOpt = Annotated[str | None, typer.Option(
    "--from-file", metavar="FILE", show_default=False, rich_help_panel=_MANY,
    help="Audit the models listed in FILE (- for stdin): ids, URLs or paths, one per line; blank lines and # "
         "comments skipped. Each line is its own record: with -f jsonl (the default here) one JSON line per model, "
         "written as it finishes; a model that fails is a record with its error. -o FILE appends, and a rerun "
         "skips the inputs FILE already records.")]
JobsOpt = Annotated[int, typer.Option(
    "--jobs", "-j", metavar="N", min=1, rich_help_panel=_MANY,
    help="Audit N models at a time (processes up to the CPU count, threads in them beyond it).")]
RetryErrorsOpt = Annotated[bool, typer.Option(
    "--retry-errors", rich_help_panel=_MANY,
    help="--from-file with -o FILE: drop FILE's error records and audit those inputs again.")]
# What-if
HeadsOpt = Annotated[list[int] | None, typer.Option(
    "--heads", metavar="N", show_default=False, rich_help_panel=_WHATIF, parser=count_option,
    help="What-if: each block's parameter count at N heads (repeatable), shown in its own section.")]
# Gates
MaxParamsOpt = Annotated[str | None, typer.Option(
    "--max-params", metavar="COUNT", show_default=False, rich_help_panel=_GATES,
    help="Gate: fail (exit 1) when a model has more parameters, e.g. 7B, 1.5M, 120k (SI: k = 1,000).")]
MaxAttentionParamsOpt = Annotated[str | None, typer.Option(
    "--max-attention-params", metavar="COUNT", show_default=False, rich_help_panel=_GATES,
    help="Gate: fail when a model's attention blocks hold more parameters.")]
FailOnOpt = Annotated[list[str] | None, typer.Option(
    "--fail-on", metavar="CODE|SEVERITY", show_default=False, rich_help_panel=_GATES,
    help="Gate: fail when a flag with one of these codes (MHA001,...) or of this severity or worse "
         "(info, warning, error) is raised. Repeatable, comma-separated.")]
IgnoreOpt = Annotated[list[str] | None, typer.Option(
    "--ignore", metavar="CODE[,CODE]", show_default=False, rich_help_panel=_GATES,
    help="Drop flags with these codes from the output and the gates (the report says how many).")]
ExitZeroOpt = Annotated[bool | None, typer.Option(
    "--exit-zero/--no-exit-zero", show_default=False, rich_help_panel=_GATES,
    help="Exit 0 even when a gate fails (failures are still printed).")]
FailOnContradictionOpt = Annotated[bool, typer.Option(
    "--fail-on-contradiction", rich_help_panel=_GATES,
    help="Gate: fail when the run contradicts a static head count (implies --verify).")]
MaxWeightBytesOpt = Annotated[str | None, typer.Option(
    "--max-weight-bytes", metavar="SIZE", show_default=False, rich_help_panel=_GATES,
    help="Gate: fail when the stored weights exceed SIZE, e.g. 512MB, 4GiB (G = 10⁹ bytes, GiB = 2³⁰).")]
MaxKvCacheOpt = Annotated[str | None, typer.Option(
    "--max-kv-cache", metavar="SIZE", show_default=False, rich_help_panel=_GATES,
    help="Gate: fail when the KV cache at --context (and --batch) exceeds SIZE.")]
RequireContextOpt = Annotated[str | None, typer.Option(
    "--require-context", metavar="N", show_default=False, rich_help_panel=_GATES,
    help="Gate: fail when fewer than N tokens (per sequence, at --batch) fit on the GPUs of --gpu-memory.")]
# Size in bytes
ContextOpt = Annotated[str | None, typer.Option(
    "--context", metavar="N", show_default=False, rich_help_panel=_SIZE,
    help="KV cache total at N tokens per sequence: 8192, 8k (8,000), 8Ki (8,192), 128Ki, 1M.")]
BatchOpt = Annotated[str | None, typer.Option(
    "--batch", metavar="B", show_default=False, rich_help_panel=_SIZE,
    help="KV cache total for B sequences (default 1).")]
KvDtypeOpt = Annotated[str | None, typer.Option(
    "--kv-dtype", metavar="DTYPE", show_default=False, rich_help_panel=_SIZE,
    help="KV cache element type (float16, bfloat16, float8e4m3fn, int8, ...) instead of the graph's or the "
         "projections' own.")]
WeightDtypeOpt = Annotated[str | None, typer.Option(
    "--weight-dtype", metavar="DTYPE", show_default=False, rich_help_panel=_SIZE,
    help="What-if: the weights' bytes if every parameter were stored in DTYPE (bfloat16, float16, fp8, int8, int4, "
         "q8_0, q4_k, llama.cpp mixes such as q4_k_m by their main type), and with the KV cache at the context.")]
GpuMemoryOpt = Annotated[str | None, typer.Option(
    "--gpu-memory", metavar="SIZE", show_default=False, rich_help_panel=_SIZE,
    help="Will it fit: one GPU's memory (24GiB, 80GB): the longest context and the largest batch whose weights "
         "+ KV cache fit (activations and runtime buffers not counted).")]
GpusOpt = Annotated[str | None, typer.Option(
    "--gpus", metavar="N", show_default=False, rich_help_panel=_SIZE,
    help="With --gpu-memory: N GPUs in tensor parallel (weights and K/V heads split over them).")]
DecoderOpt = Annotated[bool | None, typer.Option(
    "--decoder/--no-decoder", show_default=False, rich_help_panel=_SIZE,
    help="The model decodes token by token with a K/V cache the source does not show (a graph without "
         "past/present tensors, a checkpoint without a config): blocks that are causal or undecided get a KV "
         "cache figure. --no-decoder: it runs once over its input (no cache). Cache tensors, a config or GGUF "
         "metadata that decide a block win.")]
# Head counts
NumHeadsOpt = Annotated[int | None, typer.Option(
    "--num-heads", metavar="N", show_default=False, rich_help_panel=_HEADS, parser=count_option,
    help="A checkpoint without a config.json: every attention block has N query heads (evidence source "
         "'option'; shapes still win, and a disagreement is flagged).")]
NumKvHeadsOpt = Annotated[int | None, typer.Option(
    "--num-kv-heads", metavar="G", show_default=False, rich_help_panel=_HEADS, parser=count_option,
    help="With --num-heads: G K/V heads (grouped-query attention; G divides N).")]
# Remote models
TimeoutOpt = Annotated[str | None, typer.Option(
    "--timeout", metavar="SECONDS", show_default=False, rich_help_panel=_REMOTE,
    help="Seconds each remote model's reads may take in all (listing, headers, retries; default 300); one "
         "request waits at most MHAINSPECT_REMOTE_TIMEOUT for data.")]
# Configuration
ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", metavar="FILE", show_default=False, rich_help_panel=_CONFIG,
    help="Read settings from FILE (a pyproject.toml's [tool.mhainspect], or any TOML file's top level) for "
         "every model, instead of the nearest pyproject.toml above each model.")]
IsolatedOpt = Annotated[bool, typer.Option(
    "--isolated", rich_help_panel=_CONFIG, help="Ignore every configuration file.")]
# Run-time check
VerifyOpt = Annotated[bool, typer.Option(
    "--verify", rich_help_panel=_VERIFY,
    help="Also run each model once in onnxruntime (CPU) on synthetic inputs and check every block's head count "
         "against the tensors it produces. Loads the model's external weight data, which the static audit "
         "never reads.")]
DimOpt = Annotated[list[str] | None, typer.Option(
    "--dim", metavar="NAME=VALUE", show_default=False, rich_help_panel=_VERIFY,
    help="--verify: value of a symbolic input dimension (repeatable; default: batch 2, other dims 8).")]
MaxVerifyBytesOpt = Annotated[str | None, typer.Option(
    "--max-verify-bytes", metavar="SIZE", show_default=False, rich_help_panel=_VERIFY,
    help="--verify: refuse (exit 2) when the weights alone exceed SIZE, e.g. 512MiB, 2GiB (default: half the "
         "machine's memory).")]
# Factory specs
ArgOpt = Annotated[list[str] | None, typer.Option(
    "--arg", metavar="KEY=VALUE", show_default=False, rich_help_panel=_FACTORY,
    help="Keyword argument for a factory spec (repeatable; Python literals where they parse, else strings).")]
VersionOpt = Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True,
                                          help="Show the version and exit.")]


def inspect_cmd(
    models: ModelsArg = None,
    output_format: FormatOpt = None,
    output: OutputOpt = None,
    explain: ExplainOpt = False,
    no_group: NoGroupOpt = False,
    no_color: NoColorOpt = False,
    quiet: QuietOpt = False,
    summary: SummaryOpt = False,
    from_file: FromFileOpt = None,
    jobs: JobsOpt = 1,
    retry_errors: RetryErrorsOpt = False,
    heads: HeadsOpt = None,
    max_params: MaxParamsOpt = None,
    max_attention_params: MaxAttentionParamsOpt = None,
    fail_on: FailOnOpt = None,
    ignore: IgnoreOpt = None,
    exit_zero: ExitZeroOpt = None,
    fail_on_contradiction: FailOnContradictionOpt = False,
    max_weight_bytes: MaxWeightBytesOpt = None,
    max_kv_cache: MaxKvCacheOpt = None,
    context: ContextOpt = None,
    batch: BatchOpt = None,
    kv_dtype: KvDtypeOpt = None,
    weight_dtype: WeightDtypeOpt = None,
    decoder: DecoderOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    gpus: GpusOpt = None,
    require_context: RequireContextOpt = None,
    num_heads: NumHeadsOpt = None,
    num_kv_heads: NumKvHeadsOpt = None,
    config: ConfigOpt = None,
    isolated: IsolatedOpt = False,
    verify: VerifyOpt = False,
    dim: DimOpt = None,
    max_verify_bytes: MaxVerifyBytesOpt = None,
    arg: ArgOpt = None,
    timeout: TimeoutOpt = None,
    version: VersionOpt = False,
) -> None:
    """Audit MODELS: find every attention block, its heads, d_k, d_v and parameter count."""
    if config is not None and isolated:
        raise fail("--config and --isolated exclude each other")
    from mhainspect.pipeline import factory_args  # the arguments' door, imported once options are read

    model_timeout = _timeout(timeout)
    given = _cli_settings(output_format, heads, max_params, max_attention_params, fail_on, ignore, exit_zero,
                          context=context, batch=batch, kv_dtype=kv_dtype, decoder=decoder, weight_dtype=weight_dtype,
                          max_weight_bytes=max_weight_bytes, max_kv_cache=max_kv_cache, gpu_memory=gpu_memory, gpus=gpus,
                          require_context=require_context)
    notes = () if quiet else _unit_notes(given, context=context, batch=batch, gpu_memory=gpu_memory, gpus=gpus)
    listed = from_file is not None  # a list run: every input is its own record, and may be a folder
    texts = _texts(models, from_file)
    try:
        finder = ConfigFinder([f.value for f in OutputFormat], config_file=config, isolated=isolated)
        run_settings = merge(given, finder.for_folder(Path.cwd())[0])
        inputs, expansion = _inputs(texts, listed, model_timeout)  # a remote folder argument is listed now
        keywords = factory_args(arg or [], inputs)
    except (ConfigError, InputError) as exc:
        raise fail(str(exc)) from None
    except Exception as exc:  # a bug while listing a remote folder argument: one line too
        if os.environ.get("MHAINSPECT_DEBUG"):
            raise
        raise fail(failure_of(" ".join(texts)[:200], exc).message) from None
    fmt, fmt_source = _output_format(given.format, output, run_settings.format, listed)
    target = None if output is None or str(output) == "-" else output
    if retry_errors and (fmt is not OutputFormat.jsonl or target is None or not listed):
        raise fail("--retry-errors applies to a --from-file run that appends to -o FILE in jsonl")
    parallel = jobs > 1 and len(inputs) > 1
    request = AuditRequest(tuple(inputs), settings=given, config=finder, factory_args=keywords,
                           stated_heads=_stated_heads(num_heads, num_kv_heads),
                           verify=_verify_request(verify or fail_on_contradiction, dim, max_verify_bytes),
                           fail_on_contradiction=fail_on_contradiction, expand=listed, jobs=jobs,
                           progress=None if quiet or listed or parallel or len(inputs) > 1 else ProgressBar,
                           timeout=model_timeout)
    exit_zero_now = bool(run_settings.exit_zero)
    if listed and fmt is OutputFormat.jsonl:
        _stream(request, target, notes, quiet, retry_errors, exit_zero_now)
    shown = _View(fmt=fmt, several=False, errors=0, width=report_width(),
                  wrap=target is None and terminal_width() is not None, color=color_wanted(no_color, target is not None),
                  verbose=explain, group=not no_group, what_if_heads=given.heads or run_settings.heads or (),
                  quiet=quiet, summary=summary, notes=notes)
    _audit_and_deliver(request, expansion, shown, target, fmt_source, exit_zero_now)


def _audit_and_deliver(request: AuditRequest, expansion: "Expansion | None", shown: _View, target: Path | None,
                       fmt_source: str, exit_zero: bool) -> None:
    """Every unit audited, then the reports rendered at once, in the order of the units; the exit.

    An unreadable model is reported on its own line and the others are still analysed; the run
    then exits 2. -o FILE gets every report that succeeded and an error entry per input that
    failed (one model that fails alone writes nothing: FILE keeps its content)."""
    # one model: its own bar (request.progress); several: a bar of models done; -q: failures only, no bar
    outcomes = _gather(request, progress=request.progress is None and not shown.quiet)
    reports = [o.report for o in outcomes if isinstance(o, Audited)]
    extras = [o.extras for o in outcomes if isinstance(o, Audited)]
    several = len(outcomes) > 1 if expansion is None else expansion.several
    failed = tuple(FailedInput(o.input, o.kind.value, o.message) for o in outcomes if isinstance(o, AuditFailure))
    view = dataclasses.replace(shown, several=several, errors=len(outcomes) - len(reports),
                               failed=failed if several or len(outcomes) > 1 else ())
    _deliver(view, reports, extras, target, fmt_source)
    _exit(view.errors, sum(not g.passed for e in extras for g in e.gates), exit_zero)


def _texts(models: list[str] | None, from_file: str | None) -> list[str]:
    """The MODEL arguments and the lines of --from-file; none at all is a usage error."""
    texts = [*(models or []), *(_read_list(from_file) if from_file is not None else [])]
    if not texts:
        raise fail("no model given" + (f" (--from-file {from_file} lists none)" if from_file is not None else
                                       "; usage: mhainspect MODEL... or mhainspect --from-file FILE"))
    return texts


def _exit(errors: int, gate_failures: int, exit_zero: bool) -> None:
    """The exit code of a run: 2 when a model could not be audited, else 1 when a gate failed
    (unless --exit-zero), else 0 (ruff's order: an input error outranks a finding)."""
    if errors:
        raise typer.Exit(EXIT_INPUT)
    if gate_failures and not exit_zero:
        raise typer.Exit(EXIT_GATE)


def _inputs(texts: list[str], listed: bool, timeout: float | None) -> "tuple[list[str], Expansion | None]":
    """What a run audits, one unit of work each: the arguments expanded (a folder to its models)
    with the expansion, or a list's lines as they are (each expanded when its turn comes) and None."""
    if listed:
        return read_inputs(texts), None
    from mhainspect.pipeline import expand

    expansion = expand(texts, timeout=timeout)
    return list(expansion.sources), expansion


def _read_list(source: str) -> list[str]:
    from mhainspect.cli.batch_output import read_list  # imported when taken: --from-file only

    return read_list(source)


def _gather(request: AuditRequest, *, progress: bool) -> "list[Audited | AuditFailure]":
    """Every model's outcome in the order of the inputs (audited ``jobs`` at a time); each failure
    said on stderr as it comes."""
    inputs = request.sources
    by_input: dict[Source, list[Audited | AuditFailure]] = {}
    try:
        with BatchProgress(len(inputs), enabled=progress) as bar:
            for text, outcomes in run_unordered(request):
                by_input[text] = outcomes
                for o in outcomes:
                    if isinstance(o, AuditFailure):
                        bar.say(f"mhainspect: error: {one_line(o.message)}")
                bar.advance(any(isinstance(o, AuditFailure) for o in outcomes))
    except (BatchAbort, InputError) as exc:  # a setting no model runs with, a --verify request none satisfies
        raise fail(str(exc)) from None
    return [o for text in inputs for o in by_input.get(text, ())]


def _stream(request: AuditRequest, output: Path | None, notes: tuple[str, ...], quiet: bool, retry_errors: bool,
            exit_zero: bool) -> None:
    """A --from-file run in JSON Lines: each input's records written as it finishes (appended to
    ``output``, whose recorded inputs are skipped), failures and failed gates said on stderr; then
    the run's exit (the inputs recorded before count too)."""
    from mhainspect.cli.batch_output import JsonlLog  # imported when taken: a JSON Lines run only

    inputs = request.sources
    log = JsonlLog(output, retry_errors)
    todo = [t for t in inputs if t not in log.recorded.inputs]
    if output is not None and not todo:  # a finished list: nothing to audit, nothing failed now
        log.close()
        if not quiet:
            errors = log.recorded.errors
            retry = (f" ({errors:,} error record{'s' if errors != 1 else ''}: --retry-errors audits "
                     f"{'them' if errors != 1 else 'it'} again)" if errors else "")
            typer.echo(f"mhainspect: {one_line(str(output))}: all {len(inputs):,} input{'s' if len(inputs) != 1 else ''} "
                       f"already recorded{retry}; nothing to audit", err=True)
        raise typer.Exit(EXIT_OK)
    if output is not None and not quiet and len(todo) < len(inputs):
        typer.echo(f"mhainspect: {one_line(str(output))}: {len(inputs) - len(todo):,} of {len(inputs):,} inputs "
                   f"already recorded; auditing the other {len(todo):,}", err=True)
    errors, gate_failures = log.recorded.errors, log.recorded.gate_failures
    for note in notes:
        typer.echo(note, err=True)
    try:
        with BatchProgress(len(inputs), done=len(inputs) - len(todo), enabled=not quiet) as bar:
            for text, outcomes in run_unordered(dataclasses.replace(request, sources=tuple(todo))):
                if output is not None or not quiet:
                    log.write(str(text), outcomes)
                for o in outcomes:
                    if isinstance(o, AuditFailure):
                        errors += 1
                        bar.say(f"mhainspect: error: {one_line(o.message)}")
                        continue
                    for gate in o.extras.gates:
                        if not gate.passed:
                            gate_failures += 1
                            bar.say(f"mhainspect: gate failed: {one_line(gate.message)}")
                bar.advance(any(isinstance(o, AuditFailure) for o in outcomes))
    except (BatchAbort, InputError) as exc:
        raise fail(str(exc)) from None
    finally:
        log.close()
    if output is not None and not quiet:
        typer.echo(f"mhainspect: {one_line(str(output))}: {log.written:,} record{'s' if log.written != 1 else ''} "
                   f"appended for {len(todo):,} input{'s' if len(todo) != 1 else ''} (jsonl)", err=True)
    _exit(errors, gate_failures, exit_zero)
    raise typer.Exit(EXIT_OK)
