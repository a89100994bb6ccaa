"""Result types: what the analysis found. Pure data; rendering happens in mhainspect.render."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any


class Vocabulary(str, Enum):
    """A closed set of words written into reports. A member is its own value as text (f-strings,
    JSON), so replacing a bare string by a member leaves every output byte-identical."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Severity(Vocabulary):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class EvidenceSource(Vocabulary):
    """Where a number was read. Ranked for conflicts in ``mhainspect.matchers.assembly.PRIORITY``."""

    ATTRIBUTE = "attribute"  # an operator attribute (num_heads of a fused op)
    KERNEL_SHAPE = "kernel_shape"  # a 3-D per-head kernel [in, heads, head_dim]
    HEAD_SHAPE = "head_shape"  # a tensor one head wide (a per-head Q/K norm)
    SHAPE = "shape"  # a constant reshape target / declared shape in the graph
    SCORE_SHAPE = "score_shape"  # the head axis of the attention scores
    WEIGHT_SHAPE = "weight_shape"  # a projection width divided by another known number
    RESHAPE = "reshape"  # a reshape of Q/K/V read symbolically
    MODULE = "module"  # an attribute of the nn.Module (num_heads, head_dim, ...)
    CONFIG = "config"  # a model config (config.json, PretrainedConfig)
    GGUF = "gguf"  # a GGUF file's metadata (a claim, like a config)
    SCALE = "scale"  # 1/sqrt(d) read off the score scale (a fallback: custom scales are legitimate)
    REPEAT = "repeat"  # K/V repeated to the query heads (grouped-query attention)
    MISSING = "missing"  # a projection the matcher looked for and did not find
    SAME_WEIGHTS = "same_weights"  # one module reached from several anchors, or a weight counted in another block
    CACHE_TENSOR = "cache_tensor"  # a past/present (KV cache) input or output of the graph reaching the block
    CAUSAL_MASK = "causal_mask"  # a causal mask (Trilu, position comparison, causal attribute) reaching the scores
    OPTION = "option"  # a command-line option (--kv-dtype)


_SOURCES: dict[str, EvidenceSource] = {m.value: m for m in EvidenceSource}


class Matcher(Vocabulary):
    """What found a block (``AttentionBlock.matcher``, ``Miss.matcher``). A graph's fused matcher
    names the operator after a colon ("fused:com.microsoft.Attention")."""

    DECOMPOSED = "decomposed"  # MatMul -> Softmax -> MatMul in a graph
    FUSED = "fused"  # one attention operator in a graph
    ADDITIVE = "additive"  # Bahdanau scores vᵀ·tanh(W·q + U·k) in a graph
    MODULE = "module"  # a known nn.Module, recognised without tracing
    CHECKPOINT = "checkpoint"  # weight names and shapes of a checkpoint, plus its config
    GGUF = "gguf"  # tensor names and shapes of a GGUF file, plus its metadata

    @classmethod
    def checked(cls, text: str) -> str:
        """``text`` as a member, or unchanged when qualified ("fused:Attention"); ValueError when
        the part before the colon is not a matcher."""
        head, colon, _ = text.partition(":")
        member = cls(head)
        return text if colon else member


class BlockKind(Vocabulary):
    SELF = "self"  # Q, K and V read the same tensor
    CROSS = "cross"  # K/V come from another source than Q
    ADDITIVE = "additive"  # Bahdanau attention: one head, no Q·Kᵀ


class CacheStatus(Vocabulary):
    """What a block (``AttentionBlock.kv_cache_status``) or the model (``KVCache.status``) caches
    per token during autoregressive decoding."""

    CACHES = "caches"  # the source says it decodes token by token (cache tensors, a config, GGUF metadata)
    IF_DECODED = "if_decoded"  # only a causal mask says so: what it caches if it is decoded token by token
    NONE = "none"  # it does not cache (it runs once over the input: an encoder)
    # Whether it caches cannot be told; for the model: some block's cache cannot be told or sized,
    # or a near miss caches (Miss.caches).
    UNKNOWN = "unknown"

    @property
    def caches(self) -> bool:
        return self is CacheStatus.CACHES or self is CacheStatus.IF_DECODED


class VerifyStatus(Vocabulary):
    """Outcome of --verify for one block (see ``BlockVerification``)."""

    CONFIRMED = "confirmed"
    CONTRADICTED = "contradicted"
    OBSERVED = "observed"
    UNCHECKED = "unchecked"


class WarningCode(Vocabulary):
    """What a report warning is about; decisions (the CLI refusing --verify) test the code."""

    LOADER = "loader"  # noticed while reading the file or tracing the module
    IMPOSSIBLE_SHAPE = "impossible_shape"  # weights dropped: a negative dim or more than int64 elements
    DUPLICATE_PRODUCER = "duplicate_producer"  # a tensor produced by several nodes
    NODE_WITHOUT_OUTPUTS = "node_without_outputs"
    EXTERNAL_DATA_OUTSIDE = "external_data_outside"  # external data outside the model folder: never opened
    CONFIG_BESIDE = "config_beside"  # heads read from a config.json next to a checkpoint file
    MADE_UP_INPUTS = "made_up_inputs"  # a module traced on inputs the caller did not give
    NOT_TRACED = "not_traced"


class ReportWarning(str):
    """A warning: its text (what every format prints, unchanged) with a ``code``.

    A str so that renderers, JSON and comparisons treat it as the text it always was."""

    code: WarningCode

    def __new__(cls, text: str, code: WarningCode) -> ReportWarning:
        obj = super().__new__(cls, text)
        obj.code = code
        return obj

    def __reduce__(self) -> tuple[type[ReportWarning], tuple[str, WarningCode]]:
        return ReportWarning, (str(self), self.code)


def warning_code(text: str) -> WarningCode:
    """The code of a warning; a bare string comes from a loader."""
    return text.code if isinstance(text, ReportWarning) else WarningCode.LOADER


def coded(texts: Iterable[str], code: WarningCode = WarningCode.LOADER) -> tuple[ReportWarning, ...]:
    """Each text as a ReportWarning, keeping the code of those that have one."""
    return tuple(t if isinstance(t, ReportWarning) else ReportWarning(t, code) for t in texts)


@dataclass(frozen=True)
class Evidence:
    """Where one recovered number came from.

    ``field`` is the quantity ("num_heads", "d_k", ...), ``source`` a stable kind
    ("reshape", "weight_shape", "attribute", "scale", "score_shape", "config", "module"),
    ``detail`` names the node/tensor and what was read from it.
    """

    field: str
    value: int | float | None
    source: str  # an EvidenceSource; a bare string is checked and converted on construction
    detail: str

    def __post_init__(self) -> None:
        if type(self.source) is not EvidenceSource:  # a dict lookup: thousands per large model
            member = _SOURCES.get(self.source)
            if member is None:
                raise ValueError(f"{self.source!r} is not a valid EvidenceSource")
            object.__setattr__(self, "source", member)


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


VERIFY_STATUSES = tuple(s.value for s in VerifyStatus)


@dataclass(frozen=True)
class BlockVerification:
    """What one onnxruntime run (``--verify``) saw for one block.

    ``status``: "confirmed" (the run agrees with the static head counts), "contradicted" (it
    does not), "observed" (the static pass had no head count; the run supplies it),
    "unchecked" (nothing comparable was seen; ``reason`` says why).
    """

    block: str
    status: str  # a VerifyStatus; a bare string is checked and converted on construction
    observed_heads: int | None = None
    observed_kv_heads: int | None = None
    reason: str | None = None  # the tensor that was read, or why nothing could be checked
    disagreement: str | None = None  # contradicted: what differed ("saw 4 heads, static 8"), without the detail

    def __post_init__(self) -> None:
        if type(self.status) is not VerifyStatus:
            object.__setattr__(self, "status", VerifyStatus(self.status))


@dataclass(frozen=True)
class KVCache:
    """The model's key/value cache during autoregressive decoding (issue: size in bytes).

    ``bytes_per_token`` sums every caching block's kv_heads · (d_k + d_v) · itemsize;
    ``total_bytes`` is that at ``context`` tokens and ``batch`` sequences (sliding-window layers
    capped at their window); ``bytes_per_encoder_token`` is what cross-attention caches once per
    encoder token. ``status`` says whether the model caches (NONE: no block does; UNKNOWN: some
    block's cache cannot be told or sized, or a near miss caches, ``Miss.caches``; IF_DECODED: only
    causal masks say the blocks cache); ``reason`` says why, in words.
    """

    bytes_per_token: int | None
    dtype: str | None
    context: int | None = None
    batch: int = 1
    total_bytes: int | None = None
    bytes_per_encoder_token: int | None = None
    reason: str | None = None
    status: CacheStatus = CacheStatus.CACHES

    def __post_init__(self) -> None:
        if type(self.status) is not CacheStatus:
            object.__setattr__(self, "status", CacheStatus(self.status))


@dataclass(frozen=True)
class AttentionBlock:
    """One attention block: what was recovered, from which evidence, and what it holds."""

    name: str
    matcher: str  # a Matcher; a bare string is checked and converted on construction
    kind: str  # a BlockKind ("self" | "cross" | "additive"), checked and converted likewise
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
    # None for a block that does not cache, or caches an amount that cannot be sized (see status).
    kv_cache_bytes_per_token: int | None = None
    # Why kv_cache_bytes_per_token is None, in words (kv_cache_status says which case); a block
    # with a figure has its evidence in ``evidence`` (field "kv_cache_bytes_per_token") instead.
    kv_cache_reason: str | None = None
    sliding_window: int | None = None  # tokens a sliding-window layer attends to (its cache keeps window - 1)
    # How many times one run applies this module's weights (ALBERT's shared layer: 12); its
    # parameters are counted once whatever the number, its KV cache (kv_cache_bytes_per_token is
    # one application's) N times. Branches of an If are alternatives, not applications: a block
    # found in both is one block applied once.
    applications: int = 1
    kv_cache_dtype: str | None = None  # element type of the block's cache (None when it caches nothing)
    kv_cache_status: CacheStatus | None = None  # None until the size pass has run

    def __post_init__(self) -> None:
        if type(self.matcher) is not Matcher:
            object.__setattr__(self, "matcher", Matcher.checked(self.matcher))
        if type(self.kind) is not BlockKind:
            object.__setattr__(self, "kind", BlockKind(self.kind))
        if self.kv_cache_status is not None and type(self.kv_cache_status) is not CacheStatus:
            object.__setattr__(self, "kv_cache_status", CacheStatus(self.kv_cache_status))


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

    matcher: str  # a Matcher, checked and converted on construction
    anchor: str
    reason: str
    # Why, for code that decides on it (never rendered): "no_score_product" when a Softmax has no
    # Q·Kᵀ of two activations before it (the additive matcher then looks at it).
    code: str | None = None
    # The source says this module caches K/V during decoding (a decoder's latent attention, MLA):
    # the model's KV cache then holds something no block sizes, so it is unknown, not "none".
    caches: bool = False

    def __post_init__(self) -> None:
        if type(self.matcher) is not Matcher:
            object.__setattr__(self, "matcher", Matcher.checked(self.matcher))


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
        return REPORT_RENDERERS.to_dict(self)  # the one JSON implementation, render.json_render

    def to_json(self) -> str:
        """``--format json``'s text for this report."""
        return REPORT_RENDERERS.to_json(self)

    def __repr__(self) -> str:
        """One line (the dataclass repr of a 12-layer model is 30,000 characters); to_dict() has it all."""
        m = self.model
        return (f"<Report {m.path!r}: {m.format}, {m.total_params:,} params, attention {m.attention_params:,}, "
                f"{len(self.blocks)} block{'s' if len(self.blocks) != 1 else ''}, "
                f"{len(self.flags)} flag{'s' if len(self.flags) != 1 else ''}>")

    def _repr_html_(self) -> str:
        """Jupyter shows a Report as the HTML report's body (charts included)."""
        return REPORT_RENDERERS.html(self)


class _ReportRenderers:
    """Report's to_dict/to_json/_repr_html_ call the renderers, which sit above this module (imports
    only point down): ``mhainspect/__init__.py``, the top of the package, installs them, each
    importing its renderer only when called."""

    to_dict: Callable[[Report], dict[str, Any]]
    to_json: Callable[[Report], str]
    html: Callable[[Report], str]


REPORT_RENDERERS = _ReportRenderers()

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


def count_shared_once(blocks: Sequence[AttentionBlock], identity: Callable[[str], str] | None = None,
                      is_copy: Callable[[str], bool] | None = None) -> list[AttentionBlock]:
    """A projection whose weight an earlier block also uses (layers sharing a K/V projection, a
    decoder tied to its encoder) counts there only: in the later block its weight and bias count 0,
    with evidence naming the block it counts in, so that block shares never add up past the model.
    As attention_params does, a bias alone is not identity: exporters store equal all-zero biases
    of different layers as one tensor.

    ``identity``: what makes two weight names one parameter (a weight list's
    ``static_ir.parameter_identity``: shared storage, a tied copy's source); None: the name (a
    graph stores a weight once, under one name). ``is_copy``: the names that repeat another
    weight (a weight list's tied copies, ``static_ir.WeightMeta.tied_to``): the first block using
    the weight under a name that is not a copy counts it, before any block using a copy; None:
    no name is. The one rule of every front end."""
    owner: dict[tuple[str, str], tuple[bool, str]] = {}  # (identity, role) -> (a copy's name, block)
    for b in blocks:
        for p in b.projections:
            if p.weight is not None:
                key = (p.weight if identity is None else identity(p.weight), p.role)
                copy = is_copy is not None and is_copy(p.weight)
                if key not in owner or (owner[key][0] and not copy):
                    owner[key] = copy, b.name
    out: list[AttentionBlock] = []
    for b in blocks:
        changed: list[Projection] = []
        notes: list[Evidence] = []
        for p in b.projections:
            if p.weight is None:
                first = b.name
            else:
                first = owner[(p.weight if identity is None else identity(p.weight), p.role)][1]
            if first != b.name and (p.weight_params or p.bias_params):
                notes.append(Evidence(p.role, p.weight_params + p.bias_params, EvidenceSource.SAME_WEIGHTS,
                                      f"{p.role.upper()} projection {p.weight} is shared with {first}: counted there"))
                p = replace(p, weight_params=0, bias_params=0)
            changed.append(p)
        if notes:
            breakdown = ParamBreakdown.from_projections(changed, extra=b.params.extra)
            b = replace(b, projections=tuple(changed), params=breakdown, evidence=b.evidence + tuple(notes))
        out.append(b)
    return out


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
