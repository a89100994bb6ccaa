"""Result types: what the analysis found. Pure data; rendering happens in mhainspect.render."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Severity(str, Enum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class Evidence:
    """Where one recovered number came from.

    ``field`` is the quantity ("num_heads", "d_k", ...), ``source`` a stable kind
    ("reshape", "weight_shape", "attribute", "scale", "score_shape", "config", "module"),
    ``detail`` names the node/tensor and what was read from it.
    """

    field: str
    value: int | float | None
    source: str
    detail: str


@dataclass(frozen=True)
class Projection:
    """One projection (Q, K, V or O) of a block, resolved to weight tensors."""

    role: str  # "q", "k", "v", "o"
    weight: str | None  # tensor name (storage shared with others when packed)
    in_features: int | None
    out_features: int | None
    weight_params: int  # this projection's share of the weight (a slice of a packed weight)
    bias: str | None
    bias_params: int
    node: str  # node that applies the weight


@dataclass(frozen=True)
class ParamBreakdown:
    """A block's parameters by role; shared weights are counted in the first block that uses them."""

    q: int
    k: int
    v: int
    o: int
    bias: int  # part of total that is biases
    total: int  # q + k + v + o
    extra: int = 0  # other params of the block (bias_k/bias_v, relative position tables)

    @classmethod
    def from_projections(cls, projections: Iterable[Projection], extra: int = 0) -> ParamBreakdown:
        per = {"q": 0, "k": 0, "v": 0, "o": 0}
        bias = 0
        for p in projections:
            per[p.role] += p.weight_params + p.bias_params
            bias += p.bias_params
        return cls(q=per["q"], k=per["k"], v=per["v"], o=per["o"], bias=bias, total=sum(per.values()), extra=extra)


@dataclass(frozen=True)
class WhatIf:
    """Parameter count of a block under another head count."""

    num_heads: int
    total_width_fixed: int | None  # standard layout: h*d_k stays the same (None: not divisible by num_heads)
    head_dim_fixed: int  # per-head width stays the block's d_k


VERIFY_STATUSES = ("confirmed", "contradicted", "observed", "unchecked")


@dataclass(frozen=True)
class BlockVerification:
    """What one onnxruntime run (``--verify``) saw for one block.

    ``status``: "confirmed" (the run agrees with the static head counts), "contradicted" (it
    does not), "observed" (the static pass had no head count; the run supplies it),
    "unchecked" (nothing comparable was seen; ``reason`` says why).
    """

    block: str
    status: str
    observed_heads: int | None = None
    observed_kv_heads: int | None = None
    reason: str | None = None  # the tensor that was read, or why nothing could be checked


@dataclass(frozen=True)
class KVCache:
    """The model's key/value cache during autoregressive decoding (issue: size in bytes).

    ``bytes_per_token`` sums every caching block's kv_heads · (d_k + d_v) · itemsize;
    ``total_bytes`` is that at ``context`` tokens and ``batch`` sequences (sliding-window layers
    capped at their window); ``bytes_per_encoder_token`` is what cross-attention caches once per
    encoder token. ``reason`` says why there is no cache (encoder-only) or what is unknown.
    """

    bytes_per_token: int | None
    dtype: str | None
    context: int | None = None
    batch: int = 1
    total_bytes: int | None = None
    bytes_per_encoder_token: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class AttentionBlock:
    """One attention block: what was recovered, from which evidence, and what it holds."""

    name: str
    matcher: str
    kind: str  # "self" | "cross"
    num_heads: int | None
    num_kv_heads: int | None
    d_model: int | None
    d_k: int | None
    d_v: int | None
    params: ParamBreakdown
    projections: tuple[Projection, ...]
    evidence: tuple[Evidence, ...]
    scale: float | None = None  # the scale applied to Q·K^T (None: not found)
    scale_known: bool = False  # True when scale was determined (1.0 = unscaled)
    anchor: str = ""  # the Softmax or fused op node
    unknown_reason: str | None = None  # why heads are unknown, when they are
    conflicts: tuple[str, ...] = ()  # disagreements between evidence sources
    what_if: tuple[WhatIf, ...] = ()  # counts under other head counts (h/2, 2h, --heads N)
    verification: BlockVerification | None = None  # outcome of --verify (None: not run)
    weight_bytes: int | None = None  # bytes of the block's stored weights (shared tensors once)
    kv_cache_bytes_per_token: int | None = None  # None for a block that does not cache (see reason)
    kv_cache_reason: str | None = None  # why the block caches nothing, or what is unknown
    sliding_window: int | None = None  # tokens a sliding-window layer attends to (its cache keeps window - 1)
    # How many times one run applies this module's weights (ALBERT's shared layer: 12); its
    # parameters are counted once whatever the number, its KV cache (kv_cache_bytes_per_token is
    # one application's) N times. Branches of an If are alternatives, not applications: a block
    # found in both is one block applied once.
    applications: int = 1
    kv_cache_dtype: str | None = None  # element type of the block's cache (None when it caches nothing)


@dataclass(frozen=True)
class Flag:
    """A rule (MHA001...) raised for a block or for the whole model."""

    code: str
    severity: Severity
    block: str | None
    message: str
    # Numbers behind the message, so renderers and dashboards need not parse text.
    data: tuple[tuple[str, int | float | str | None], ...] = ()


@dataclass(frozen=True)
class Miss:
    """A near miss: a candidate that looked like attention but did not match, and why."""

    matcher: str
    anchor: str
    reason: str


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
        from mhainspect.render.json_render import report_to_dict  # the one JSON implementation

        return report_to_dict(self)

    def to_json(self) -> str:
        """``--format json``'s text for this report."""
        from mhainspect.render.json_render import report_to_json

        return report_to_json(self)

    def __repr__(self) -> str:
        """One line (the dataclass repr of a 12-layer model is 30,000 characters); to_dict() has it all."""
        m = self.model
        return (f"<Report {m.path!r}: {m.format}, {m.total_params:,} params, attention {m.attention_params:,}, "
                f"{len(self.blocks)} block{'s' if len(self.blocks) != 1 else ''}, "
                f"{len(self.flags)} flag{'s' if len(self.flags) != 1 else ''}>")

    def _repr_html_(self) -> str:
        """Jupyter shows a Report as the HTML report's body (charts included).

        Imports from the render layer here are deferred to the call: Jupyter looks for this
        method on the object itself, and nothing is imported until a notebook asks."""
        from mhainspect.render.html import repr_html

        return repr_html(self)


SCHEMA_VERSION = "1.0"


def attention_params(blocks: Sequence[AttentionBlock]) -> int:
    """Sum over blocks, counting a weight shared by several blocks once (per role)."""
    seen: set[tuple[str, str]] = set()
    total = 0
    for b in blocks:
        for p in b.projections:
            if p.weight is not None:
                if (p.weight, p.role) in seen:
                    continue
                seen.add((p.weight, p.role))
            total += p.weight_params + p.bias_params
    return total


def contradicted(report: Report) -> list[tuple[AttentionBlock, BlockVerification]]:
    """The blocks whose static head count a --verify run contradicted, with that run's verdict."""
    return [(b, b.verification) for b in report.blocks
            if b.verification is not None and b.verification.status == "contradicted"]
