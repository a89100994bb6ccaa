"""audit(source, options) -> Report: the one way through the tool, for the CLI and the Python API.

    source --frontends--> SourceResult --analysis--> Report (blocks, totals, flags, what-if, sizes)

A front end reads its source into a SourceResult and never builds a Report; the analysis turns any
SourceResult into a Report and never reads a source. Gates and rendering come after, in the CLI.
"""

from __future__ import annotations

import dataclasses
import gc
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mhainspect.analysis.charts import with_charts
from mhainspect.analysis.decoding import as_told, decoder_warnings, size_option_warnings
from mhainspect.analysis.report import report_from
from mhainspect.analysis.size import (
    SizeOptions,
    context_warning,
    memory_at_context,
    weight_dtype_what_if,
    with_options,
)
from mhainspect.analysis.stated_heads import stated_warnings
from mhainspect.frontends.dispatch import source_result
from mhainspect.results.stages import SourceResult

if TYPE_CHECKING:
    from mhainspect.ir.weights import HeadOffers
    from mhainspect.results import ModelFacts, Report


@dataclass(frozen=True)
class AuditOptions:
    """What the caller asks beside the source: head counts to compare (what-if), the context, batch
    and cache dtype the KV cache is sized at, a factory's keyword arguments, and head counts the
    caller states for a checkpoint that has no config (``stated_offer``: --num-heads, --num-kv-heads)."""

    what_if_heads: tuple[int, ...] = ()
    size: SizeOptions = field(default_factory=SizeOptions)
    factory_args: Mapping[str, Any] | None = None
    stated_heads: HeadOffers | None = None


def analyse(result: SourceResult, options: AuditOptions | None = None) -> Report:
    """The analysis stage: one front end's SourceResult -> Report."""
    options = options or AuditOptions()
    size = options.size
    told, changed = as_told(result.blocks, result.size, size.decoder)
    if told is not result.size:
        result = dataclasses.replace(result, size=told)
    report = with_options(report_from(result, what_if_heads=options.what_if_heads), size)
    beyond = context_warning(result.model, size)
    notes = (*(() if beyond is None else (beyond,)), *decoder_warnings(report, size.decoder, changed),
             *stated_warnings(report, options.stated_heads),
             *size_option_warnings(report, context=size.context is not None, batch=size.batch != 1,
                                   kv_dtype=size.kv_dtype is not None, decoder=size.decoder,
                                   sized_at=result.model.max_positions is not None or size.gpu_memory is not None))
    report = dataclasses.replace(report, warnings=(*report.warnings, *notes)) if notes else report
    return with_charts(with_memory(report, size, result.model))


def with_memory(report: Report, size: SizeOptions, model: ModelFacts) -> Report:
    """``report`` with weights + KV cache at the context, with --weight-dtype the weights in that type,
    and with --gpu-memory what fits on the GPUs."""
    summary = dataclasses.replace(report.model, memory=memory_at_context(report, size, model))
    if size.weight_dtype is not None:
        summary = dataclasses.replace(summary, weight_dtype=weight_dtype_what_if(
            dataclasses.replace(report, model=summary), size.weight_dtype))
    if size.gpu_memory is not None:
        from mhainspect.analysis.fit import FitOptions, gpu_fit  # imported when taken: --gpu-memory only

        summary = dataclasses.replace(summary, fit=gpu_fit(dataclasses.replace(report, model=summary),
                                                           FitOptions(size.gpu_memory, size.gpus), model,
                                                           size.context, size.batch))
    return dataclasses.replace(report, model=summary)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector off while a source is read and analysed, then as it was.

    What a front end builds (a checkpoint's WeightMetas, a graph's nodes) is new and lives until
    the report is made, so each collection re-walks all of it to free next to nothing. Whole
    processes, paused -> not paused (CPU, median of paired runs, docs/performance.md): a
    DeepSeek-V3-shaped folder of 92k tensors 0.93 -> 1.24 s, a Kimi-K2-shaped one of 140k
    1.28 -> 2.05 s, the 70B ONNX graph 0.24 -> 0.25 s. Process-wide: audits overlapping in
    threads may resume it early, which costs time, never a result.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def audit(source: str | os.PathLike[str], options: AuditOptions | None = None) -> Report:
    """Audit a model file, a Hugging Face folder, a factory spec (``pkg.module:callable``), or a model
    where it lives (``hf://org/name``, a Hub or HTTP(S) URL, ``s3://``, ``gs://``, ``az://``), read
    by ranges: only the bytes its header needs."""
    options = options or AuditOptions()
    with collector_paused():
        return analyse(source_result(os.fspath(source), factory_args=options.factory_args,
                                     stated=options.stated_heads), options)


def reporting_progress(callback: Callable[[str, int, int], None]) -> AbstractContextManager[None]:
    """A context in which reading a model reports ``(stage, done, total)`` to ``callback`` (the
    CLI's progress bar): stage "read" while the file is read, "graph" while its graph is built."""
    from mhainspect.frontends.onnx.loader import reporting_progress as reporting

    return reporting(callback)


class InMemory(ABC):
    """A model already in this process's memory (an nn.Module, a graph built in the neutral IR): a
    source kind of a run beside paths and addresses. It is one model (nothing to expand), has no
    file to run (--verify leaves its blocks unchecked) and takes the working directory's config
    file, as a factory spec does; it cannot travel to a worker process, so a run that holds one
    audits in this process. ``str()``: its label (the report's path, the outcome's input)."""

    @abstractmethod
    def result(self) -> SourceResult:
        """What its front end finds (the analysis then makes the Report)."""


Source = str | InMemory  # what a run takes: a MODEL argument as text, or a model in memory
