"""The last step of every front end (ONNX graph, PyTorch module, checkpoint): finished blocks ->
Report, with what-if counts, flags, sizes in bytes and the model summary."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mhainspect.findings import SCHEMA_VERSION, AttentionBlock, Miss, ModelSummary, Report, attention_params
from mhainspect.flags import evaluate
from mhainspect.size import SizeInputs, apply
from mhainspect.whatif import default_what_ifs


def build_report(blocks: Sequence[AttentionBlock], *, path: str, fmt: str, total_params: int, num_nodes: int = 0,
                 opset: int | None = None, producer: str = "", misses: Sequence[Miss] = (),
                 warnings: Sequence[str] = (), what_if_heads: tuple[int, ...] = (),
                 size: SizeInputs | None = None) -> Report:
    """A Report from finished blocks: what-if counts, flags, sizes (``size``: the front end's tensor
    metadata and decoding evidence; mhainspect.size computes every byte) and the model summary."""
    final = tuple(dataclasses.replace(b, what_if=default_what_ifs(b, what_if_heads)) for b in blocks)
    sized, fields, size_warnings = apply(final, size or SizeInputs())
    summary = ModelSummary(path=path, format=fmt, total_params=total_params, num_nodes=num_nodes, opset=opset,
                           producer=producer, attention_params=attention_params(sized), **fields)
    return Report(SCHEMA_VERSION, summary, sized, evaluate(sized), tuple(misses),
                  warnings=tuple(warnings) + size_warnings)
