"""The last step of every front end (ONNX graph, PyTorch module, checkpoint): finished blocks ->
Report, with what-if counts, flags, sizes in bytes and the model summary."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mhainspect.analysis.flags import evaluate
from mhainspect.analysis.size import apply
from mhainspect.analysis.whatif import default_what_ifs
from mhainspect.results import SCHEMA_VERSION, AttentionBlock, Miss, ModelSummary, Report, attention_params, coded
from mhainspect.results.stages import SizeInputs, SourceResult

if TYPE_CHECKING:
    from mhainspect.results import MixtureOfExperts, ReportWarning


def build_report(blocks: Sequence[AttentionBlock], *, path: str, fmt: str, total_params: int, num_nodes: int = 0,
                 opset: int | None = None, producer: str = "", misses: Sequence[Miss] = (),
                 warnings: Sequence[str] = (), what_if_heads: tuple[int, ...] = (),
                 size: SizeInputs | None = None) -> Report:
    """A Report from finished blocks: what-if counts, flags, sizes (``size``: the front end's tensor
    metadata and decoding evidence; mhainspect.analysis.size computes every byte) and the model summary."""
    what_ifs = [{"what_if": default_what_ifs(b, what_if_heads)} for b in blocks]
    sized, fields, size_warnings = apply(blocks, size or SizeInputs(), also=what_ifs,  # one copy per block
                                         misses=misses)
    summary = ModelSummary(path=path, format=fmt, total_params=total_params, num_nodes=num_nodes, opset=opset,
                           producer=producer, attention_params=attention_params(sized), **fields)
    return Report(SCHEMA_VERSION, summary, sized, evaluate(sized), tuple(misses),
                  warnings=coded(warnings) + coded(size_warnings))


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
