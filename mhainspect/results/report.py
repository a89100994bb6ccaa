"""The report of one model: its summary, blocks, flags and misses. Pure data; rendering happens in
mhainspect.render."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mhainspect.results.blocks import (
    AttentionBlock,
    Flag,
    KVCache,
    MemoryAtContext,
    Miss,
)
from mhainspect.results.vocabulary import VerifyStatus

if TYPE_CHECKING:
    from mhainspect.results.optional import BlockVerification, GpuFit, Mixer, MixtureOfExperts, WeightDtypeWhatIf


@dataclass(frozen=True)
class ModelSummary:
    """The model as a whole: where it came from and its parameter totals."""

    path: str
    format: str  # "onnx", ...
    total_params: int
    num_nodes: int
    opset: int | None
    producer: str
    attention_params: int
    weight_bytes: int | None = None  # every stored tensor as stored: parameters and overhead
    weight_bytes_by_dtype: tuple[tuple[str, int], ...] = ()  # (canonical dtype name, bytes), largest first
    weight_bytes_overhead: int | None = None  # the part of weight_bytes that is not parameters
    kv_cache: KVCache | None = None
    trainable_params: int | None = None  # nn.Modules only: parameters with requires_grad (None: not known)
    experts: MixtureOfExperts | None = None  # a mixture-of-experts model: routed experts, active parameters
    memory: MemoryAtContext | None = None  # weights + KV cache at --context (or the model's maximum)
    weight_dtype: WeightDtypeWhatIf | None = None  # --weight-dtype
    fit: GpuFit | None = None  # --gpu-memory: the longest context and largest batch that fit
    # Layers that mix tokens without softmax attention (linear attention, state-space, convolution),
    # one entry per kind: they are not attention blocks and cache a fixed state, not K/V per token.
    mixers: tuple[Mixer, ...] = ()


@dataclass(frozen=True)
class Report:
    """Everything one analysis found in one model."""

    schema_version: str
    model: ModelSummary
    blocks: tuple[AttentionBlock, ...]
    flags: tuple[Flag, ...]
    misses: tuple[Miss, ...]
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of ``--format json`` (docs/report.schema.json) as plain Python data."""
        data: dict[str, Any] = _render_layer().to_dict(self)  # the one JSON implementation, render.json_render
        return data

    def to_json(self) -> str:
        """``--format json``'s text for this report."""
        return _render(self, "json")

    def to_text(self, width: int | None = None) -> str:
        """The terminal report as plain text (no colour), fitted to ``width`` columns (default 100)."""
        return _render(self, "text", width)

    def to_markdown(self) -> str:
        """``--format markdown``'s text for this report."""
        return _render(self, "markdown")

    def __str__(self) -> str:
        """``print(report)``: the terminal report (``to_text()``)."""
        return self.to_text()

    def __repr__(self) -> str:
        """One line (the dataclass repr of a 12-layer model is 30,000 characters); to_dict() has it all."""
        m = self.model
        return (f"<Report {m.path!r}: {m.format}, {m.total_params:,} params, attention {m.attention_params:,}, "
                f"{len(self.blocks)} block{'s' if len(self.blocks) != 1 else ''}, "
                f"{len(self.flags)} flag{'s' if len(self.flags) != 1 else ''}>")

    def _repr_html_(self) -> str:
        """Jupyter shows a Report as the HTML report's body (charts included)."""
        return _render(self, "html")


@dataclass(frozen=True)
class FailedInput:
    """An input of a many-model run that could not be audited, as every output lists it beside the
    reports that succeeded: what it was, why (an ErrorKind word: not_found, invalid, ...), one line."""

    input: str
    kind: str
    message: str


class Reports(list[Report]):
    """Several reports (``mhainspect.inspect_all``): a list, that Jupyter shows as the comparison
    page and that reads as text or markdown with one row per model first."""

    def to_text(self, width: int | None = None) -> str:
        """One row per model, then each model's terminal report, as plain text (default 100 columns)."""
        return _render(self, "text", width)

    def to_markdown(self) -> str:
        return _render(self, "markdown")

    def to_dict(self) -> dict[str, Any]:
        """The multi-model JSON document of ``--format json`` (docs/multi-report.schema.json)."""
        data: dict[str, Any] = _render_layer().to_dict(self)
        return data

    def to_json(self) -> str:
        return _render(self, "json")

    def __str__(self) -> str:
        """``print(inspect_all(...))``: one row per model, then each model's report (``to_text()``)."""
        return self.to_text()

    def __repr__(self) -> str:
        return f"<Reports: {len(self)} model{'s' if len(self) != 1 else ''}: " + ", ".join(
            repr(r.model.path) for r in self[:3]) + (", ..." if len(self) > 3 else "") + ">"

    def _repr_html_(self) -> str:
        return _render(self, "html")


def _render_layer() -> Any:
    """``mhainspect.render``, looked up when a Report is asked to render itself: the renderers sit
    above this module (imports only point down), so Report's convenience methods find them by name
    at call time; nothing is attached at import, and importing a Report imports no renderer."""
    return importlib.import_module("mhainspect.render")


def _render(reports: Report | Sequence[Report], fmt: str, width: int | None = None) -> str:
    text: str = _render_layer().render(reports, fmt, width=width)
    return text


SCHEMA_VERSION = "1.0"


@dataclass(frozen=True)
class ModelFacts:
    """What a front end knows about the model as a whole (the report adds totals and flags)."""

    path: str
    format: str  # "onnx", "torch", "huggingface", "safetensors", "pytorch", ...
    total_params: int
    num_nodes: int = 0
    opset: int | None = None
    producer: str = ""
    trainable_params: int | None = None  # nn.Modules only: parameters with requires_grad
    # The most token positions the model was built for (a config's max_position_embeddings, GGUF
    # context_length) and where that was read: a --context beyond it is warned about.
    max_positions: int | None = None
    max_positions_source: str = ""


def attention_params(blocks: Sequence[AttentionBlock]) -> int:
    """The blocks' projections, with what their totals hold beside them (latent parameters, K/V
    rows, an indexer, an output gate), summed. A weight several blocks use counts in one block
    already: every front end's blocks pass ``matchers.sharing.count_shared_once`` (the one sharing
    rule), which counts it 0 in the others."""
    return sum(sum(p.params for p in b.projections) + b.params.latent + b.params.kv_rows + b.params.indexer
               + b.params.gate for b in blocks)


def contradicted(report: Report) -> list[tuple[AttentionBlock, BlockVerification]]:
    """The blocks whose static head count a --verify run contradicted, with that run's verdict."""
    return [(b, b.verification) for b in report.blocks
            if b.verification is not None and b.verification.status == VerifyStatus.CONTRADICTED]
