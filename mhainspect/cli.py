"""Command line: the only module that reads options, prints, writes files and picks exit codes.

Exit codes: 0 the audit ran; 1 a gate failed; 2 usage or input error (one line on stderr).
"""

import os
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from mhainspect import __version__
from mhainspect.errors import InputError
from mhainspect.render.safe import printable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mhainspect.config import Settings
    from mhainspect.findings import Report
    from mhainspect.gates import GateFailure

V = TypeVar("V")
R = TypeVar("R")
EXIT_OK, EXIT_GATE, EXIT_INPUT = 0, 1, 2

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Audit the multi-head-attention blocks of a model without running it.")


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    jsonl = "jsonl"
    markdown = "markdown"
    github = "github"
    sarif = "sarif"
    html = "html"


def one_line(text: str) -> str:
    """``text`` on one line with control characters escaped: names from a hostile file can hold
    newlines or terminal escape sequences, and an error stays one line that cannot drive the terminal."""
    return printable(text.strip())


def say_error(message: str) -> None:
    typer.echo(f"mhainspect: error: {one_line(message)}", err=True)


def fail(message: str, code: int = EXIT_INPUT) -> typer.Exit:
    say_error(message)
    return typer.Exit(code)


def _stdout_unwritable(exc: OSError) -> str:
    return f"stdout: cannot write: {exc.strerror or exc}"


def write_stdout(text: str) -> None:
    """The report on stdout, flushed here so that a full disk or a closed descriptor is one error
    line and exit 2 (not a traceback, and not lost in the flush at exit)."""
    try:
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
        sys.stdout.flush()
    except OSError as exc:
        raise fail(_stdout_unwritable(exc)) from None


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
    return 160  # logs and pipes: no terminal to fit, so keep every column


class _ProgressBar:
    """A rich progress bar on stderr, shown once a model takes more than ~1 s; off when stderr is no terminal.

    The loader reports through ``reporting_progress(callback)``; after it, the bar spins while the
    analysis runs. Nothing is imported or started unless stderr is a terminal.
    """

    def __init__(self, model: Path) -> None:
        self.model = model
        self.progress: Any = None

    def __enter__(self) -> "_ProgressBar":
        if not sys.stderr.isatty() or os.environ.get("MHAINSPECT_NO_PROGRESS"):
            return self
        import threading

        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        from mhainspect.loaders.onnx_loader import reporting_progress

        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=True)
        self.task = self.progress.add_task(f"reading {self.model.name}", total=None)
        self.lock, self.closed = threading.Lock(), False
        self.timer = threading.Timer(1.0, self._show)
        self.timer.daemon = True
        self.timer.start()
        self.scope = reporting_progress(self._update)
        self.scope.__enter__()
        return self

    def _show(self) -> None:
        with self.lock:
            if not self.closed:
                self.progress.start()

    def _update(self, stage: str, done: int, total: int) -> None:
        name = self.model.name
        if stage == "graph" and done >= total:
            self.progress.update(self.task, description=f"analysing {name}", total=None, completed=0)
        else:
            label = "reading" if stage == "read" else "building the graph of"
            self.progress.update(self.task, description=f"{label} {name}", total=total or None, completed=done)

    def __exit__(self, *exc: object) -> None:
        if self.progress is None:
            return
        self.scope.__exit__(None, None, None)
        self.timer.cancel()
        with self.lock:
            self.closed = True
            self.progress.stop()


def _analyze_one(model: Path, what_if_heads: tuple[int, ...], factory_args: dict[str, object] | None = None
                 ) -> "Report | str":
    """The model's report, or the one-line error message when it cannot be analysed."""
    from mhainspect.analyze import check_symlink_loop
    from mhainspect.sources import analyze_source

    try:
        check_symlink_loop(model)
        with _ProgressBar(model):
            return analyze_source(str(model), factory_args=factory_args, what_if_heads=what_if_heads)
    except InputError as exc:
        return str(exc)
    except RecursionError:
        return f"{model}: graph too deeply nested to analyse"
    except MemoryError:
        return f"{model}: out of memory while reading the model"
    except Exception as exc:  # a bug must still end in one line, not a traceback
        if os.environ.get("MHAINSPECT_DEBUG"):
            raise
        return (f"{model}: internal error ({type(exc).__name__}: {exc}); "
                "rerun with MHAINSPECT_DEBUG=1 for details")


def _cli_settings(output_format: OutputFormat | None, heads: list[int] | None, max_params: str | None,
                  max_attention_params: str | None, fail_on: list[str] | None, ignore: list[str] | None,
                  exit_zero: bool | None, size: "dict[str, Any] | None" = None) -> "Settings":
    """The options given on the command line (None where not given); one-line error on bad values."""
    from mhainspect.config import Settings
    from mhainspect.gates import parse_byte_limit, parse_codes, parse_limit
    from mhainspect.size import check_kv_dtype

    if heads and any(h <= 0 for h in heads):
        raise fail("--heads takes positive integers")
    def parsed(option: str, parse: Callable[[V], R], value: V | None) -> R | None:
        try:
            return None if value is None else parse(value)
        except ValueError as exc:
            raise fail(f"{option}: {exc}") from None

    limit = parsed("--max-params", parse_limit, max_params)
    attention_limit = parsed("--max-attention-params", parse_limit, max_attention_params)
    fail_codes = parsed("--fail-on", parse_codes, fail_on)
    ignore_codes = parsed("--ignore", parse_codes, ignore)
    size = size or {}
    for option in ("context", "batch"):
        if size.get(option) is not None and size[option] <= 0:
            raise fail(f"--{option} takes a positive integer")
    return Settings(max_params=limit, max_attention_params=attention_limit, fail_on=fail_codes,
                    ignore=ignore_codes, exit_zero=exit_zero,
                    format=None if output_format is None else output_format.value,
                    heads=None if heads is None else tuple(heads),
                    max_weight_bytes=parsed("--max-weight-bytes", parse_byte_limit, size.get("max_weight_bytes")),
                    max_kv_cache=parsed("--max-kv-cache", parse_byte_limit, size.get("max_kv_cache")),
                    context=size.get("context"), batch=size.get("batch"),
                    kv_dtype=parsed("--kv-dtype", check_kv_dtype, size.get("kv_dtype")))


def _verify_setup(paths: "Sequence[Path]", verify: bool, dim: list[str] | None,
                  max_verify_bytes: str | None) -> dict[str, int]:
    """--verify options as symbolic dims; refuses (exit 2) a model whose weights exceed the budget."""
    if not verify:
        if dim or max_verify_bytes is not None:
            raise fail("--dim and --max-verify-bytes apply only with --verify")
        return {}
    from mhainspect import verify as verify_mod

    dims: dict[str, int] = {}
    for item in dim or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit() or int(value) < 1:
            raise fail(f"--dim: expected NAME=VALUE with a positive integer VALUE, got '{item}'")
        dims[name.strip()] = int(value)
    try:
        budget = (verify_mod.default_max_verify_bytes() if max_verify_bytes is None
                  else verify_mod.parse_size(max_verify_bytes))
    except ValueError as exc:
        raise fail(f"--max-verify-bytes: {exc}") from None
    try:
        verify_mod.require_runtime()
    except InputError as exc:
        raise fail(str(exc)) from None
    for path in paths:
        try:
            verify_mod.check_budget(path, budget)
        except verify_mod.VerifyBudgetError as exc:
            raise fail(str(exc)) from None
        except InputError:
            pass  # an unreadable model is reported by the analysis
    return dims


def _verify_one(path: Path, report: "Report", dims: dict[str, int]) -> "Report":
    """``report`` with the run's verdict per block; a failure leaves every block unchecked with the reason."""
    from mhainspect.analyze import EXTERNAL_DATA_WARNING
    from mhainspect.findings import BlockVerification
    from mhainspect.verify import attach, verify_report

    if any(w.startswith(EXTERNAL_DATA_WARNING) for w in report.warnings):
        # Running would read weights from outside the model's folder: refused, nothing is opened.
        reason = "--verify refused: external data location outside the model folder (see warnings)"
        return attach(report, tuple(BlockVerification(b.name, "unchecked", reason=reason) for b in report.blocks))
    try:
        return attach(report, verify_report(path, report, dims=dims))
    except Exception as exc:  # the static report must survive any failure of the run
        if os.environ.get("MHAINSPECT_DEBUG"):
            raise
        reason = f"--verify failed ({type(exc).__name__}: {exc})"
        return attach(report, tuple(BlockVerification(b.name, "unchecked", reason=reason) for b in report.blocks))


def _render(fmt: OutputFormat, reports: "list[Report]", failures: "Sequence[GateFailure]", *, several: bool,
            errors: int, width: int | None, color: bool, verbose: bool) -> str:
    """The report text; only the chosen renderer is imported (rich alone costs a short run 60 ms)."""
    if fmt is OutputFormat.json or fmt is OutputFormat.jsonl:
        from mhainspect.render.json_render import report_to_json, reports_to_json, reports_to_jsonl

        if fmt is OutputFormat.jsonl:
            return reports_to_jsonl(reports)
        return reports_to_json(reports) if several else report_to_json(reports[0])
    if fmt is OutputFormat.markdown:
        from mhainspect.render.markdown import render_markdown

        return render_markdown(reports)
    if fmt is OutputFormat.github:
        from mhainspect.render.github import render_github

        return render_github(reports, failures)
    if fmt is OutputFormat.html:
        from mhainspect.render.html import render_html

        return render_html(reports)
    if fmt is OutputFormat.sarif:
        from mhainspect.render.sarif import render_sarif

        return render_sarif(reports, failures, execution_successful=not errors)
    from mhainspect.render.table import render_table

    return "\n".join(render_table(r, width=width, color=color, verbose=verbose) for r in reports)


@app.command("inspect")
def inspect_cmd(
    models: Annotated[list[Path], typer.Argument(help="ONNX model files, checkpoints (.safetensors, .pt/.pth/.bin, "
                                                 "Hugging Face folders with config.json), factory specs "
                                                 "(pkg.module:callable, file.py:callable), or directories (every *.onnx below "
                                                 "them, sorted).", show_default=False)],
    output_format: Annotated[OutputFormat | None, typer.Option("--format", "-f", help="Output format "
                                                              "(default: table).", show_default=False)] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report to FILE "
                                                   "(atomically) instead of stdout.")] = None,
    explain: Annotated[bool, typer.Option("--explain", "-v", help="Show evidence per block and near misses.")] = False,
    heads: Annotated[list[int] | None, typer.Option("--heads", help="What-if: each block's parameter count "
                                                       "under N heads (repeatable).")] = None,
    no_color: Annotated[bool, typer.Option("--no-color", help="Plain text without colors (also NO_COLOR).")] = False,
    max_params: Annotated[str | None, typer.Option("--max-params", metavar="COUNT", help="Gate: fail (exit 1) "
                                                   "when a model has more parameters, e.g. 7B, 1.5M, 120k.",
                                                   show_default=False)] = None,
    max_attention_params: Annotated[str | None, typer.Option("--max-attention-params", metavar="COUNT",
                                                             help="Gate: fail when a model's attention blocks "
                                                             "hold more parameters.", show_default=False)] = None,
    fail_on: Annotated[list[str] | None, typer.Option("--fail-on", metavar="CODE[,CODE]", help="Gate: fail when "
                                                      "a flag with one of these codes is raised.",
                                                      show_default=False)] = None,
    ignore: Annotated[list[str] | None, typer.Option("--ignore", metavar="CODE[,CODE]", help="Drop flags with "
                                                     "these codes from the output and the gates.",
                                                     show_default=False)] = None,
    exit_zero: Annotated[bool | None, typer.Option("--exit-zero/--no-exit-zero", help="Exit 0 even when a gate "
                                                   "fails (failures are still printed).", show_default=False)] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only failures (failed gates and errors); "
                                        "nothing on success.")] = False,
    verify: Annotated[bool, typer.Option("--verify", help="Also run each model once in onnxruntime (CPU) on "
                                         "synthetic inputs and check every block's head count against the "
                                         "tensors it produces. Loads the model's external weight data, which "
                                         "the static audit never reads.")] = False,
    dim: Annotated[list[str] | None, typer.Option("--dim", metavar="NAME=VALUE", help="--verify: value of a "
                                                  "symbolic input dimension (repeatable; default: batch 2, "
                                                  "other dims 8).", show_default=False)] = None,
    max_verify_bytes: Annotated[str | None, typer.Option("--max-verify-bytes", metavar="SIZE", help="--verify: "
                                                         "refuse (exit 2) when the weights alone exceed SIZE, "
                                                         "e.g. 512M, 2G (default: half the machine's memory).",
                                                         show_default=False)] = None,
    arg: Annotated[list[str] | None, typer.Option("--arg", metavar="KEY=VALUE", help="Keyword argument for a "
                                                  "factory spec (repeatable; Python literals where they parse, "
                                                  "else strings).", show_default=False)] = None,
    fail_on_contradiction: Annotated[bool, typer.Option("--fail-on-contradiction", help="Gate: fail when the "
                                                        "run contradicts a static head count (implies "
                                                        "--verify).")] = False,
    context: Annotated[int | None, typer.Option("--context", metavar="N", help="KV cache total at N tokens "
                                                "(per sequence).", show_default=False)] = None,
    batch: Annotated[int | None, typer.Option("--batch", metavar="B", help="KV cache total for B sequences "
                                              "(default 1).", show_default=False)] = None,
    kv_dtype: Annotated[str | None, typer.Option("--kv-dtype", metavar="DTYPE", help="KV cache element type "
                                                 "(float16, bfloat16, float8e4m3fn, int8, ...) instead of the "
                                                 "graph's or the projections' own.", show_default=False)] = None,
    max_weight_bytes: Annotated[str | None, typer.Option("--max-weight-bytes", metavar="SIZE", help="Gate: fail "
                                                         "when the stored weights exceed SIZE, e.g. 512M, 4GiB "
                                                         "(K/M/G/T are binary).", show_default=False)] = None,
    max_kv_cache: Annotated[str | None, typer.Option("--max-kv-cache", metavar="SIZE", help="Gate: fail when "
                                                     "the KV cache at --context (and --batch) exceeds SIZE.",
                                                     show_default=False)] = None,
) -> None:
    """Audit MODELS: find every attention block, its heads, d_k, d_v and parameter count."""
    from mhainspect.config import ConfigError, load_settings, merge
    from mhainspect.gates import GateConfig, drop_ignored, evaluate_gates
    from mhainspect.inputs import expand_models
    from mhainspect.size import SizeOptions, with_options
    from mhainspect.sources import parse_factory_args

    given = _cli_settings(output_format, heads, max_params, max_attention_params, fail_on, ignore, exit_zero,
                          {"context": context, "batch": batch, "kv_dtype": kv_dtype,
                           "max_weight_bytes": max_weight_bytes, "max_kv_cache": max_kv_cache})
    try:
        from_file, _ = load_settings(Path.cwd(), [f.value for f in OutputFormat])
        paths = expand_models(models)
        factory_args = parse_factory_args(arg or [])
    except ConfigError as exc:
        raise fail(str(exc)) from None
    except InputError as exc:
        raise fail(str(exc)) from None
    settings = merge(given, from_file)
    fmt = OutputFormat(settings.format or OutputFormat.table.value)
    ignored = settings.ignore or frozenset()
    verify = verify or fail_on_contradiction
    verify_dims = _verify_setup(list(paths), verify, dim, max_verify_bytes)
    if settings.max_kv_cache is not None and settings.context is None:
        raise fail("--max-kv-cache needs --context N (the token count the cache is sized at)")
    size_options = SizeOptions(settings.context, settings.batch or 1, settings.kv_dtype)

    # An unreadable model is reported on its own line and the others are still analysed; the run
    # then exits 2, and -o FILE is left untouched (a report missing a model is not written).
    reports: list[Report] = []
    errors = 0
    for path in paths:
        result = _analyze_one(path, settings.heads or (), factory_args)
        if isinstance(result, str):
            say_error(result)
            errors += 1
        else:
            if verify:
                result = _verify_one(path, result, verify_dims)
            reports.append(drop_ignored(with_options(result, size_options), ignored))
    failures = evaluate_gates(reports, GateConfig(settings.max_params, settings.max_attention_params,
                                                  settings.fail_on or frozenset(), fail_on_contradiction,
                                                  settings.max_weight_bytes, settings.max_kv_cache))

    if reports and (output is None and not quiet or output is not None and not errors):
        several = len(models) > 1 or any(m.is_dir() for m in models)
        text = _render(fmt, reports, failures, several=several, errors=errors, width=_width(),
                       color=_color_wanted(no_color, output is not None), verbose=explain)
        if output is not None:
            try:
                write_atomic(output, text)
            except InputError as exc:
                raise fail(str(exc)) from None
            except OSError as exc:
                raise fail(f"{output}: cannot write: {exc.strerror or exc}") from None
        else:
            write_stdout(text)
    for failure in failures:
        typer.echo(f"mhainspect: gate failed: {one_line(failure.message)}", err=True)
    if errors:
        raise typer.Exit(EXIT_INPUT)
    if failures and not settings.exit_zero:
        raise typer.Exit(EXIT_GATE)


class CalcFormat(str, Enum):
    text = "text"
    json = "json"
    html = "html"


@app.command("calc")
def calc_cmd(
    arguments: Annotated[list[str], typer.Argument(help="CONVENTION then the layer's arguments as name=value, "
                                                   "e.g. pytorch embed_dim=512 num_heads=8.", show_default=False)],
    compare_all: Annotated[bool, typer.Option("--compare", help="Read the same numbers under every convention.")] = False,
    heads: Annotated[list[int] | None, typer.Option("--heads", help="Also count at N heads, other arguments "
                                                       "unchanged (repeatable).")] = None,
    output_format: Annotated[CalcFormat, typer.Option("--format", "-f", help="Output format.")] = CalcFormat.text,
    dtype: Annotated[str | None, typer.Option("--dtype", metavar="DTYPE", help="Also give the layer in bytes: "
                                              "weights and KV cache per token in DTYPE (float32, bfloat16, "
                                              "float16, float8e4m3fn, int8, ...).", show_default=False)] = None,
    context: Annotated[int | None, typer.Option("--context", metavar="N", help="KV cache at N tokens (implies "
                                                "--dtype float32 unless given).", show_default=False)] = None,
    kv_heads: Annotated[list[int] | None, typer.Option("--kv-heads", metavar="G", help="What-if: the layer with "
                                                       "G K/V heads, side by side (repeatable: MHA, GQA, MQA).",
                                                       show_default=False)] = None,
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
    sized = dtype is not None or context is not None or bool(kv_heads)
    if context is not None and context <= 0 or kv_heads and any(g <= 0 for g in kv_heads):
        raise fail("--context and --kv-heads take positive integers")
    if sized and (compare_all or convention is None):
        raise fail("--dtype, --context and --kv-heads apply to one convention (not --compare)")
    if sized and output_format is CalcFormat.html:
        raise fail("--dtype, --context and --kv-heads are given in text and json (--format text|json), not html")
    size_dtype = dtype or "float32"
    try:
        if output_format is CalcFormat.html:
            from mhainspect.render import calc_html

            if compare_all or convention is None:
                text = calc_html.render_compare_html(conventions.compare(values), heads or ())
            elif convention not in conventions.CONVENTIONS:
                raise fail(f"unknown convention '{convention}'; choose one of: " + ", ".join(conventions.CONVENTIONS))
            else:
                text = calc_html.render_calc_html(conventions.calculate(convention, values), heads or ())
        elif compare_all or convention is None:
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
            if sized:
                text = _calc_sized(text, convention, values, calc, size_dtype, context, kv_heads or [],
                                   output_format is CalcFormat.json)
    except ValueError as exc:
        raise fail(str(exc)) from None
    write_stdout(text)


def _calc_sized(text: str, convention: str, values: dict[str, str], calc: Any, dtype: str, context: int | None,
                kv_heads: list[int], as_json: bool) -> str:
    """``text`` (the calc output) with the layer in bytes and the --kv-heads what-if."""
    import json

    from mhainspect import conventions
    from mhainspect.render import calc_render

    rows = conventions.kv_what_if(convention, values, kv_heads) if kv_heads else ()
    if as_json:
        doc = json.loads(text)
        doc = doc if "calculation" in doc else {"calculation": doc}
        doc["size"] = calc_render.size_json(calc, dtype, context)
        if kv_heads:
            doc["kv_heads_what_if"] = calc_render.kv_heads_json(rows, dtype, context)
        return json.dumps(doc, indent=2) + "\n"
    text += "\n" + calc_render.size_text(calc, dtype, context)
    if kv_heads:
        text += "\n" + calc_render.kv_heads_text(convention, rows, dtype, context)
    return text


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


def run() -> NoReturn:
    """Console-script entry: main(), then end the process without tearing down its heap.

    A 70B graph leaves ~10^5 objects; freeing them one by one at interpreter exit costs ~30 ms
    that the OS does for free. Only for a whole process: tests and embedders call main(), which
    raises SystemExit as usual.

    A reader that stops early (``| head``) ends the process by SIGPIPE, as it ends cat or grep:
    the shell sees 141, not the 1 that click would turn a broken pipe into (1 means a gate failed).
    """
    import signal

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
            say_error(_stdout_unwritable(exc))
            status = EXIT_INPUT
    except ValueError:  # closed by an embedding caller
        pass
    try:
        sys.stderr.flush()
    except (OSError, ValueError):  # nowhere left to say it
        pass
    os._exit(status)
