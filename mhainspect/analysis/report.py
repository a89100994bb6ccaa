"""The last step of every front end (ONNX graph, PyTorch module, checkpoint): finished blocks ->
Report, with what-if counts, flags, sizes in bytes and the model summary."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mhainspect.analysis.flags import evaluate
from mhainspect.analysis.size import apply
from mhainspect.analysis.whatif import default_what_ifs
from mhainspect.results import (
    SCHEMA_VERSION,
    AttentionBlock,
    Miss,
    ModelSummary,
    Report,
    ReportWarning,
    WarningCode,
    attention_params,
    coded,
)
from mhainspect.results.stages import SizeInputs, SourceResult

if TYPE_CHECKING:
    from mhainspect.results import MixtureOfExperts


def build_report(blocks: Sequence[AttentionBlock], *, path: str, fmt: str, total_params: int, num_nodes: int = 0,
                 opset: int | None = None, producer: str = "", misses: Sequence[Miss] = (),
                 warnings: Sequence[str] = (), what_if_heads: tuple[int, ...] = (),
                 size: SizeInputs | None = None) -> Report:
    """A Report from finished blocks: what-if counts, flags, sizes (``size``: the front end's tensor
    metadata and decoding evidence; mhainspect.analysis.size computes every byte) and the model summary."""
    what_ifs = [{"what_if": default_what_ifs(b, what_if_heads)} for b in blocks]
    sized, fields, size_warnings = apply(blocks, size or SizeInputs(), also=what_ifs,  # one copy per block
                                         misses=misses)
    attention = attention_params(sized)
    summary = ModelSummary(path=path, format=fmt, total_params=total_params, num_nodes=num_nodes, opset=opset,
                           producer=producer, attention_params=attention, **fields)
    gap = accounting_gap(total_params, attention)
    return Report(SCHEMA_VERSION, summary, sized, evaluate(sized), tuple(misses),
                  warnings=coded(warnings) + coded(size_warnings) + ((gap,) if gap is not None else ()))


def accounting_gap(total: int, attention: int) -> ReportWarning | None:
    """A warning when the model's total is below its attention blocks' parameters: the blocks count
    a weight the total does not (one the audit refused or dropped, or one the accounting does not
    see as a parameter). Never true of a well-formed file; the test suite fails on it
    (tests/conftest.py) wherever no refused or impossible weight explains it."""
    if total >= attention:
        return None
    return ReportWarning(f"the model's total ({total:,} parameters) is below its attention blocks' ({attention:,}): "
                         f"{attention - total:,} parameters the blocks count are not in the total",
                         WarningCode.ACCOUNTING_GAP)


def report_from(result: SourceResult, *, what_if_heads: tuple[int, ...] = ()) -> Report:
    """The Report of what a front end found (its size metadata included: ``result.size``)."""
    m = result.model
    report = build_report(result.blocks, path=m.path, fmt=m.format, total_params=m.total_params,
                          num_nodes=m.num_nodes, opset=m.opset, producer=m.producer, misses=result.misses,
                          warnings=result.warnings, what_if_heads=what_if_heads, size=result.size)
    moe: MixtureOfExperts | None = None
    moe_warnings: tuple[ReportWarning, ...] = ()
    if result.experts is not None:  # the experts' analysis (and matchers) imported for a mixture of experts only
        from mhainspect.analysis.experts import mixture_of_experts

        moe, moe_warnings = mixture_of_experts(result.experts, m.total_params)
    if m.trainable_params is None and moe is None:
        return report
    model = dataclasses.replace(report.model, trainable_params=m.trainable_params, experts=moe)
    return dataclasses.replace(report, model=model, warnings=(*report.warnings, *moe_warnings))
