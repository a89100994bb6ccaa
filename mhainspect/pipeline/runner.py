"""One run: ``run(request)`` -> one outcome per model, for the CLI, the Python API and the batch runner.

    AuditRequest --expand--> models --audit--> Report --verify--> --ignore--> gates --> Audited | AuditFailure

Every model's settings are the caller's (the CLI's options, the API's keyword arguments), with the
nearest ``[tool.mhainspect]`` filling what the caller left unset (``AuditRequest.config``). A model
that cannot be audited is an AuditFailure (a stable kind and one line), never the end of the run;
only a setting no model could run with ends it (BatchAbort).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mhainspect.analysis.gates import GateConfig, ModelExtras, check_gates, drop_ignored, ignored_counts
from mhainspect.analysis.size import SizeOptions
from mhainspect.batch import AuditFailure, BatchAbort, failure_of, run_many
from mhainspect.errors import InputError
from mhainspect.frontends.folders import ModelRef, expand_models, model_argument
from mhainspect.frontends.formats import check_symlink_loop
from mhainspect.ir.units import MAX_CACHED_TOKENS
from mhainspect.pipeline.config import ConfigError, ConfigFinder, Settings, merge, shown_path
from mhainspect.pipeline.stages import AuditOptions, InMemory, Source, analyse, audit

if TYPE_CHECKING:
    from mhainspect.ir.weights import HeadOffers
    from mhainspect.pipeline.verify import VerifyPlan, VerifyRequest
    from mhainspect.results import Report

__all__ = ["Audited", "AuditRequest", "Outcome", "report_of", "run", "run_unordered"]


@dataclass(frozen=True)
class Audited:
    """One model's report (flags --ignore drops already dropped) with its gate results; it pickles,
    so it travels from worker processes. ``input``: the source it was listed under."""

    report: Report
    extras: ModelExtras = ModelExtras()
    input: str = ""


Outcome = Audited | AuditFailure


@dataclass(frozen=True)
class AuditRequest:
    """What one run audits, and how.

    ``sources``: model arguments (files, folders, factory specs, ``hf://`` ids, URLs) and models
    in memory (``ModuleSource``, ``GraphSource``: one model each); with ``expand`` an argument may
    name several models (a folder of models, a repo), listed when its turn comes, and a listing
    that fails is that source's one failure. ``settings``: the options and
    gates the caller sets (None fields: not set, so a config file may set them); ``config``: where
    each model's ``[tool.mhainspect]`` comes from (None: no file is read). ``verify``: run each
    ONNX model once in onnxruntime (``fail_on_contradiction`` makes a contradicted head count a
    failed gate). ``jobs``: audits at a time, in worker processes (mhainspect.batch; a run with a
    model in memory audits in this process).
    ``raise_errors``: a model that cannot be audited raises its error (the Python API's
    ``inspect``) instead of becoming an AuditFailure; one job only. ``progress``: a context each
    model is audited in (a progress bar; one job only). ``timeout``: the deadline of each model's
    remote reads, and of each remote listing (--timeout)."""

    sources: tuple[Source, ...]
    settings: Settings = Settings()
    config: ConfigFinder | None = None
    factory_args: Mapping[str, Any] = field(default_factory=dict)
    stated_heads: HeadOffers | None = None
    verify: VerifyRequest | None = None
    fail_on_contradiction: bool = False
    expand: bool = True
    jobs: int = 1
    raise_errors: bool = False
    progress: Callable[[ModelRef], AbstractContextManager[object]] | None = None
    timeout: float | None = None  # seconds each model's remote reads may take (None: the default)


@dataclass(frozen=True)
class _Unit:
    """What every model of one run is audited with (pickled to the workers)."""

    request: AuditRequest
    verify: VerifyPlan | None


def _plan(request: AuditRequest) -> _Unit:
    """The request checked once before any model is audited (InputError for a --verify request
    that no model could satisfy)."""
    if request.verify is None:
        return _Unit(request, None)
    from mhainspect.pipeline.verify import prepare  # imported when taken: --verify only (most runs never verify)

    paths = None if request.expand else [model_argument(s) for s in request.sources if isinstance(s, str)]
    return _Unit(request, prepare(request.verify, paths))


# What an audit imports (the front ends import lazily): once in the fork server, not in every worker.
_PRELOAD = ("mhainspect.pipeline", "mhainspect.frontends.dispatch", "mhainspect.frontends.onnx.frontend",
            "mhainspect.frontends.checkpoint.frontend", "mhainspect.frontends.gguf.frontend",
            "mhainspect.matchers.static", "mhainspect.render.json_render")


def run(request: AuditRequest) -> Iterator[Outcome]:
    """Every model of ``request``, audited: one outcome per model, in the order of the sources (a
    source's models in listing order), each as soon as it and those before it are done."""
    waiting: dict[Source, list[Outcome]] = {}
    order = iter(dict.fromkeys(request.sources))
    next_source = next(order, None)
    for source, outcomes in run_unordered(request):
        waiting[source] = outcomes
        while next_source is not None and next_source in waiting:
            yield from waiting.pop(next_source)
            next_source = next(order, None)


def run_unordered(request: AuditRequest) -> Iterator[tuple[Source, list[Outcome]]]:
    """``(source, its outcomes)`` for every source of ``request``, in the order they finish (what a
    run that streams its records as they come reads)."""
    unit = _plan(request)
    sources = list(dict.fromkeys(request.sources))
    texts = [s for s in sources if isinstance(s, str)]
    if request.raise_errors or request.jobs <= 1 or len(texts) < len(sources):
        for source in sources:
            yield source, audit_source(unit, source)
        return
    for source, result in run_many(functools.partial(audit_source, unit), texts, request.jobs, preload=_PRELOAD):
        yield source, [result] if isinstance(result, AuditFailure) else result


def audit_source(unit: _Unit, source: Source) -> list[Outcome]:
    """Every model one source names, audited: the unit of work of a run (in this process or in a
    worker). Never raises for a bad input unless the request says so."""
    from mhainspect.sources.deadline import model_deadline

    if isinstance(source, InMemory):
        return [_audit_model(source, unit, str(source))]
    text, timeout = source, unit.request.timeout
    ref = model_argument(text)
    if not unit.request.expand:
        with model_deadline(timeout):
            return [_audit_model(ref, unit, text)]
    try:
        with model_deadline(timeout):  # listing a repo is a remote step of its own, with its own time
            refs = expand_models([ref])
    except Exception as exc:  # the source's one record
        if unit.request.raise_errors or os.environ.get("MHAINSPECT_DEBUG") and not isinstance(exc, InputError):
            raise
        return [failure_of(text, exc)]
    out: list[Outcome] = []
    for r in refs:
        with model_deadline(timeout):
            out.append(_audit_model(r, unit, text))
    return out


def model_settings(request: AuditRequest, path: ModelRef | InMemory) -> tuple[Settings, Path | None]:
    """The settings ``path`` is audited with (the caller's over its config file's) and that file (a
    model in memory: the working directory's, as a factory spec)."""
    if request.config is None:
        return request.settings, None
    file_settings, config_path = request.config.for_model(Path.cwd() if isinstance(path, InMemory) else path)
    return merge(request.settings, file_settings), config_path


def _options(request: AuditRequest, settings: Settings) -> AuditOptions:
    if settings.max_kv_cache is not None and settings.context is None:
        raise BatchAbort("--max-kv-cache needs --context N (the token count the cache is sized at)")
    if settings.context is not None and settings.context * (settings.batch or 1) > MAX_CACHED_TOKENS:
        raise BatchAbort(f"--context {settings.context:,} × --batch {settings.batch or 1:,} is more tokens than any "
                         f"cache holds (at most {MAX_CACHED_TOKENS:,} in all)")
    if settings.gpu_memory is None and (settings.require_context is not None or settings.gpus is not None):
        raise BatchAbort(f"{'--require-context' if settings.require_context else '--gpus'} needs --gpu-memory SIZE "
                         "(one GPU's memory, e.g. 24GiB)")
    size = SizeOptions(settings.context, settings.batch or 1, settings.kv_dtype, settings.decoder, settings.weight_dtype,
                       settings.gpu_memory, settings.gpus or 1)
    return AuditOptions(settings.heads or (), size, request.factory_args or None, request.stated_heads)


def _gate_config(request: AuditRequest, settings: Settings, config_path: Path | None) -> GateConfig:
    source = "--fail-on" if request.settings.fail_on is not None else shown_path(str(config_path or ""))
    return GateConfig(settings.max_params, settings.max_attention_params, settings.fail_on or frozenset(),
                      request.fail_on_contradiction, fail_on_source=source, max_weight_bytes=settings.max_weight_bytes,
                      max_kv_cache=settings.max_kv_cache, require_context=settings.require_context)


def _read(path: ModelRef | InMemory, options: AuditOptions, request: AuditRequest) -> Report:
    if isinstance(path, Path):
        check_symlink_loop(path)
    progress = request.progress
    if isinstance(path, InMemory):  # read in this process already: analysed as it is
        with progress(str(path)) if progress is not None else nullcontext():
            return analyse(path.result(), options)
    with progress(path) if progress is not None else nullcontext():
        return audit(path, options)


def _audit_model(path: ModelRef | InMemory, unit: _Unit, text: str) -> Outcome:
    """One model's report and gate results, or its failure (recorded under the source ``text``)."""
    request = unit.request
    try:
        settings, config_path = model_settings(request, path)
    except ConfigError as exc:
        if request.raise_errors:
            raise
        return failure_of(text, exc)
    options = _options(request, settings)
    try:
        report = _read(path, options, request)
    except Exception as exc:  # a bug must still end in one line, not a traceback
        if request.raise_errors or os.environ.get("MHAINSPECT_DEBUG") and not isinstance(exc, InputError):
            raise
        return dataclasses.replace(failure_of(str(path), exc), input=text)
    if unit.verify is not None:
        from mhainspect.pipeline.verify import verify_model  # imported when taken, as in _plan

        report = verify_model(path, report, unit.verify)
    ignored = settings.ignore or frozenset()
    kept = drop_ignored(report, ignored)
    gates = check_gates(kept, _gate_config(request, settings, config_path))
    return Audited(kept, ModelExtras(gates=gates, ignored=ignored_counts(report, ignored)), text)


def report_of(outcome: Outcome) -> Report:
    """The report of ``outcome``; InputError (its kind and line) for a model that could not be audited."""
    if isinstance(outcome, AuditFailure):
        raise InputError(outcome.message, outcome.kind)
    return outcome.report


def reports(outcomes: Sequence[Outcome]) -> list[Report]:
    """The reports of ``outcomes``, failures left out."""
    return [o.report for o in outcomes if isinstance(o, Audited)]
