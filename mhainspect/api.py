"""Python API.

- ``inspect(obj, example_inputs=None, ...) -> Report``: an ``nn.Module`` or a path (``.onnx``,
  ``.safetensors``, ``.pt/.pth/.bin``, a Hugging Face folder, or a folder holding one model).
- ``inspect_all(*paths) -> Reports``: files and folders, expanded as the CLI does (a list of
  Report that Jupyter shows as the comparison page).
- ``audit_many(inputs, jobs=N, ...)``: many models (paths, folders, ``hf://`` ids, URLs) audited in
  worker processes, ``(input, Report | AuditFailure)`` as each finishes (picklable values).
- ``audit_records(input, ...)``: one input's JSON records, as ``--from-file`` writes them (the
  function a cluster maps over ids: docs/batch.md).
- ``calc(convention, **arguments) -> Calculation`` and ``compare(**arguments)``: the ``calc`` command.
- ``run(AuditRequest(...))``: the CLI's run itself (gates, per-model config, --verify), one outcome
  per model in input order; the functions above are adapters over it.

``ignore`` (flag codes dropped, as --ignore), ``config`` (True: each model's nearest pyproject.toml
``[tool.mhainspect]``, as the CLI; a path: that file for every model; None: none) and ``verify``
(one onnxruntime run per ONNX model, as --verify) work in every function that audits a path.

Pure service: returns results, raises InputError (ValueError for bad calc arguments); never prints.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mhainspect import conventions
from mhainspect.analysis.gates import parse_byte_limit, parse_codes
from mhainspect.analysis.size import check_kv_dtype, check_weight_dtype
from mhainspect.analysis.stated_heads import stated_offer
from mhainspect.batch import AuditFailure
from mhainspect.errors import InputError, missing_torch
from mhainspect.ir.units import parse_count, parse_tokens
from mhainspect.pipeline import AuditRequest, InMemory, ModuleSource, VerifyRequest, expand, report_of, run
from mhainspect.pipeline.config import ConfigFinder, Settings
from mhainspect.render.json_render import error_record, input_record, report_to_dict
from mhainspect.results import Report, Reports

if TYPE_CHECKING:
    from mhainspect.conventions import Calculation, Comparison, UserValue
    from mhainspect.ir.weights import HeadOffers
    from mhainspect.pipeline import Source
    from mhainspect.results.diff import ReportDiff

__all__ = ["AuditRequest", "audit_many", "audit_records", "calc", "compare", "diff", "inspect", "inspect_all", "run"]

Count = int | float | str  # 8192, 8192.0, "8Ki", "8k" (8,000): what --context and --batch take, and a whole float


def _count(value: Count, option: str, what: str) -> int:
    """A token or sequence count as the CLI reads it (one parser: ir.units.parse_tokens), a whole
    float as its int; ValueError (one line, naming the argument) for anything else."""
    if isinstance(value, float) and not isinstance(value, bool):
        if not value.is_integer():
            raise ValueError(f"{option}: not a whole number of {what}: {value!r}")
        value = int(value)
    try:
        return parse_tokens(value, what)
    except ValueError as exc:
        raise ValueError(f"{option}: {exc}") from None


def _settings(what_if_heads: Iterable[int | str] = (), context: Count | None = None, batch: Count = 1,
              kv_dtype: str | None = None, decoder: bool | None = None, weight_dtype: str | None = None,
              ignore: Iterable[str] = (), gpu_memory: int | str | None = None, gpus: int = 1) -> Settings:
    """The Settings of the API's keyword arguments (ValueError for bad ones)."""
    if weight_dtype is not None:
        check_weight_dtype(weight_dtype)
    codes = list(ignore)
    heads = tuple(h if isinstance(h, int) else parse_count(h) for h in what_if_heads)  # 16, "16", "1Ki"
    memory = None if gpu_memory is None else parse_byte_limit(gpu_memory).value
    if memory is None and gpus != 1:
        raise ValueError("gpus needs gpu_memory (one GPU's memory, e.g. \"24GiB\")")
    return Settings(heads=heads or None, context=None if context is None else _count(context, "context", "tokens"),
                    batch=_count(batch, "batch", "sequences"),
                    kv_dtype=None if kv_dtype is None else check_kv_dtype(kv_dtype), decoder=decoder,
                    weight_dtype=weight_dtype, ignore=parse_codes(codes) if codes else None, gpu_memory=memory,
                    gpus=None if memory is None else _count(gpus, "gpus", "GPUs"))


def _finder(config: bool | str | os.PathLike[str] | None) -> ConfigFinder | None:
    """``config``: True, each model's nearest pyproject.toml (the CLI's rule); a path, that file; None or
    False, no file."""
    if config is None or config is False:
        return None
    return ConfigFinder(None, config_file=None if config is True else Path(config))


def _request(sources: Iterable[str | os.PathLike[str] | InMemory], settings: Settings, *, num_heads: int | None = None,
             num_kv_heads: int | None = None, config: bool | str | os.PathLike[str] | None = None,
             verify: bool = False, **fields: Any) -> AuditRequest:
    stated: HeadOffers | None = stated_offer(num_heads, num_kv_heads)
    return AuditRequest(tuple(s if isinstance(s, InMemory) else os.fspath(s) for s in sources), settings=settings, config=_finder(config),
                        stated_heads=stated, verify=VerifyRequest() if verify else None, **fields)


def inspect_all(*paths: str | os.PathLike[str], what_if_heads: tuple[int, ...] = (), ignore: Iterable[str] = (),
                config: bool | str | os.PathLike[str] | None = None, verify: bool = False) -> Reports:
    """Every model the paths name, folders expanded as on the command line (every model file below
    them, a Hugging Face folder as one model), in the CLI's order: a list of Report that Jupyter
    shows as the comparison page and ``to_text()``/``to_markdown()`` give with one row per model first."""
    request = _request(expand(paths).sources, _settings(what_if_heads, ignore=ignore), config=config,
                       verify=verify, expand=False, raise_errors=True)
    return Reports(report_of(o) for o in run(request))


def diff(a: str | os.PathLike[str] | Report, b: str | os.PathLike[str] | Report) -> ReportDiff:
    """``mhainspect diff A B``: two models (paths, or reports already made) compared block by block;
    ``str()`` is the terminal form, ``to_dict()`` the JSON, ``.changed`` what --fail-on-change exits on."""
    from mhainspect.analysis.diff import diff_reports

    return diff_reports(a if isinstance(a, Report) else inspect(a), b if isinstance(b, Report) else inspect(b))


def calc(convention: str, /, **arguments: UserValue) -> Calculation:
    """``mhainspect calc CONVENTION name=value ...``: the layer's parameters term by term, e.g.
    ``calc("matlab", NumHeads=4, NumKeyChannels=784, InputSize=3136).weights == 9_834_496``.
    Raises ValueError (one line) for an unknown convention or bad arguments."""
    if convention.lower() not in conventions.CONVENTIONS:
        raise ValueError(f"unknown convention '{convention}'; choose one of: " + ", ".join(conventions.CONVENTIONS))
    return conventions.calculate(convention.lower(), arguments)


def compare(**arguments: UserValue) -> Comparison:
    """``mhainspect calc --compare``: the same numbers under every convention (or why one cannot take
    them), as (convention, calculation or reason) rows; prints as the CLI's table, shows as its page."""
    return conventions.compare(arguments)


def inspect(obj: Any, example_inputs: Any = None, *, what_if_heads: tuple[int, ...] = (),
            trace: bool | None = None, name: str | None = None, context: Count | None = None, batch: Count = 1,
            kv_dtype: str | None = None, decoder: bool | None = None, num_heads: int | None = None,
            num_kv_heads: int | None = None, weight_dtype: str | None = None, ignore: Iterable[str] = (),
            config: bool | str | os.PathLike[str] | None = None, verify: bool = False,
            gpu_memory: int | str | None = None, gpus: int = 1) -> Report:
    """Audit the attention blocks of a module or a model file.

    For a module, known attention modules (nn.MultiheadAttention, Hugging Face attention) are read
    from their attributes; the model is traced (torch.export on fake tensors) when
    ``example_inputs`` are given, when an attention-like module is not recognised, or when
    ``trace=True``. Traced blocks whose weights belong to a recognised module are dropped, so
    nothing counts twice. ``trace=False`` never traces. ``context``, ``batch`` and ``kv_dtype``
    size the KV cache (``report.model.kv_cache.total_bytes``) as --context, --batch and --kv-dtype do;
    ``weight_dtype`` ("int4", "q4_k_m", ...) adds the weights' bytes in that type, as --weight-dtype does;
    ``decoder=True`` / ``False`` says the model decodes with a cache the source does not show / runs
    once, as --decoder / --no-decoder do. ``num_heads`` / ``num_kv_heads`` give a checkpoint
    without a config its head counts, as --num-heads / --num-kv-heads do (shapes still win).
    ``ignore``, ``config`` and ``verify`` (a path only): as --ignore, the config files and --verify.
    ``context`` and ``batch`` are read as the options are (8192, "8Ki", "8k" = 8,000: k is SI;
    ValueError below 1); ``gpu_memory`` ("80GiB", "80GB" = 8·10¹⁰, or bytes) and ``gpus``: what
    fits, as --gpu-memory and --gpus
    (``report.model.fit``). A folder holding several models: InputError (``inspect_all`` reads them).
    """
    settings = _settings(what_if_heads, context, batch, kv_dtype, decoder, weight_dtype, ignore, gpu_memory, gpus)
    if isinstance(obj, (str, os.PathLike)):
        found = expand((obj,))  # a folder of models, as the CLI
        if len(found.models) != 1:
            raise InputError(f"{found.arguments[0]}: holds {len(found.models)} models; use mhainspect.inspect_all() "
                             "for a list of reports")
        source: Source = found.sources[0]
    else:
        source = _module_source(obj, example_inputs, trace, name)
        if config is not None and config is not False or verify:
            raise ValueError("config= and verify= apply to a model path (a file or folder), not to an nn.Module")
    request = _request((source,), settings, num_heads=num_heads, num_kv_heads=num_kv_heads, config=config,
                       verify=verify, expand=False, raise_errors=True)
    (outcome,) = run(request)
    return report_of(outcome)


def _module_source(obj: Any, example_inputs: Any, trace: bool | None, name: str | None) -> ModuleSource:
    """``obj`` as a source of a run; InputError when it is no nn.Module (or torch is missing)."""
    try:
        from torch import nn
    except ImportError:
        raise missing_torch(f"auditing a {type(obj).__name__}") from None
    if not isinstance(obj, nn.Module):
        raise InputError(f"expected an nn.Module or a model path, got {type(obj).__name__}")
    return ModuleSource(obj, example_inputs, trace, name)


def audit_many(inputs: Iterable[str | os.PathLike[str]], *, jobs: int = 1, what_if_heads: tuple[int, ...] = (),
               context: Count | None = None, batch: Count = 1, kv_dtype: str | None = None, decoder: bool | None = None,
               num_heads: int | None = None, num_kv_heads: int | None = None, weight_dtype: str | None = None,
               ignore: Iterable[str] = (), config: bool | str | os.PathLike[str] | None = None, verify: bool = False
               ) -> Iterator[tuple[str, Report | AuditFailure]]:
    """Audit many models, ``jobs`` at a time in worker processes (docs/batch.md), yielding
    ``(input, Report)`` for every model an input names (a folder or a repo of several models gives
    several) and ``(input, AuditFailure)`` for each that cannot be audited (``kind``: a stable
    ErrorKind, ``message``: one line), in the order they finish. Inputs are paths, folders,
    ``hf://org/name`` ids, Hub or HTTP(S) URLs and object-store URLs; the keyword arguments are
    ``inspect``'s. Reports and failures pickle, so they travel from workers (and between machines).

    With ``jobs > 1`` the workers are separate processes: a script that calls this must do so under
    ``if __name__ == "__main__":``."""
    from mhainspect.pipeline import run_unordered

    request = _request(inputs, _settings(what_if_heads, context, batch, kv_dtype, decoder, weight_dtype, ignore),
                       num_heads=num_heads, num_kv_heads=num_kv_heads, config=config, verify=verify, jobs=jobs)
    for text, outcomes in run_unordered(request):
        for one in outcomes:
            yield str(text), one if isinstance(one, AuditFailure) else one.report


def audit_records(input: str | os.PathLike[str], *, what_if_heads: tuple[int, ...] = (), context: Count | None = None,
                  batch: Count = 1, kv_dtype: str | None = None, decoder: bool | None = None,
                  num_heads: int | None = None, num_kv_heads: int | None = None,
                  weight_dtype: str | None = None, ignore: Iterable[str] = (),
                  config: bool | str | os.PathLike[str] | None = None, verify: bool = False) -> list[dict[str, Any]]:
    """One input's records as ``mhainspect --from-file LIST -f jsonl`` writes them: per model the
    report's JSON document with ``input`` first (gate results and ignored flags included when a
    config file sets them), or an error record (``error``: ``kind``, ``message``); never raises for
    a bad input. Plain data, for a cluster's map (docs/batch.md)."""
    text = os.fspath(input)
    request = _request((text,), _settings(what_if_heads, context, batch, kv_dtype, decoder, weight_dtype, ignore),
                       num_heads=num_heads, num_kv_heads=num_kv_heads, config=config, verify=verify)
    return [error_record(text, o.kind.value, o.message) if isinstance(o, AuditFailure)
            else input_record(text, report_to_dict(o.report, gates=o.extras.gates, ignored=o.extras.ignored))
            for o in run(request)]
