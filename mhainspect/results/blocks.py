"""What an audit finds per block: the evidence behind each number, projections and their parameter
counts, the KV cache, flags and near misses. Pure data; text is made in mhainspect.render."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mhainspect.results.vocabulary import (
    _SOURCES,
    BlockKind,
    CacheStatus,
    EvidenceSource,
    Matcher,
    Severity,
    VerifyStatus,
)

if TYPE_CHECKING:
    from mhainspect.results.optional import BlockVerification, LatentKV, SparseIndexer


@dataclass(frozen=True)
class CacheFactors:
    """The values behind a block's KV-cache bytes per token: kv_heads × (d_k + d_v) × itemsize, or
    for a latent block (``latent``) its latent and rotary key × itemsize.

    Kept with the figure's evidence so that the figure and its text are remade from values when
    an option changes one of them (--kv-dtype), never patched inside the text."""

    kv_heads: int | None  # None only for a latent block whose per-head equivalent is unknown
    d_k: int | None
    d_v: int | None
    itemsize: float  # bytes per element (0.5 for int4)
    dtype: str | None
    dtype_source: str  # where the cache dtype came from (a past/present tensor, the projections, --kv-dtype)
    cross: bool  # cross-attention: per encoder token, cached once per input
    reason: str  # why the block caches
    window: int | None = None  # sliding window (self-attention only)
    window_source: str = ""
    latent: LatentKV | None = None  # the block's latent K/V (what an MLA runtime caches)
    indexer_width: int = 0  # a sparse-attention indexer's key, cached beside K/V (DeepSeek-V3.2)
    indexer_source: str = ""


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
    factors: CacheFactors | None = None  # the values ``detail`` was made from (the KV-cache figure)

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
    # A norm of this role's output held by the attention module, applied before the scores (Qwen3's,
    # Gemma 3's, OLMo 2's q_norm/k_norm): its weight's name, and its weight and bias, counted in the
    # role's params (not in bias_params).
    norm: str | None = None
    norm_params: int = 0
    # Whether the norm is one vector for every head (d_k wide: it follows d_k, not the head count);
    # False for a norm over the projection's whole width or one vector per head ([h, d_k]).
    norm_shared: bool = False
    # A depthwise convolution over the sequence applied to this role's output before the scores, held
    # by the attention module (Inkling's k_sconv/v_sconv): its weight's name, and its parameters,
    # counted in the role's params.
    conv: str | None = None
    conv_params: int = 0

    @property
    def params(self) -> int:
        """What this projection adds to its role: its share of the weight, its bias, its norm, its conv."""
        return self.weight_params + self.bias_params + self.norm_params + self.conv_params


@dataclass(frozen=True)
class ParamBreakdown:
    """A block's parameters by role; shared weights are counted in the first block that uses them.

    ``total`` is the attention module's parameters that make Q, K, V and the output: the four
    projections (Q's and K's with the norms applied to them before the scores), a latent block's down-projections and their norms (``latent``: they make Q's and
    the K/V latent), learned K/V rows appended to K and V (``kv_rows``: nn.MultiheadAttention's
    bias_k/bias_v, also counted in ``bias``), and a sparse-attention indexer held by the module
    (``indexer``: DeepSeek-V3.2's lightning indexer, its own Q and K projections that choose the
    keys the attention reads), and an output gate's own projection (``gate``: the attention's result
    times sigmoid(x W) before O, AFMoE's ``gate_proj``, Laguna's per-head ``g_proj``; a gate packed into
    Q's projection, Qwen3-Next's, is in ``q``). ``extra`` is what is added to the scores instead
    (relative-position tables, an additive attention's score vector), outside ``total``."""

    q: int
    k: int
    v: int
    o: int
    bias: int  # part of total that is biases
    total: int  # q + k + v + o + latent + kv_rows + indexer + gate
    extra: int = 0  # other params of the block, outside total (relative position tables)
    latent: int = 0  # a latent (MLA) block's down-projections and their norms, in total
    kv_rows: int = 0  # learned K/V rows (bias_k/bias_v), in total and in bias
    indexer: int = 0  # a sparse-attention indexer's parameters (every tensor of its module), in total
    gate: int = 0  # an output gate's own projection (weight and bias), in total (its bias not in bias)

    @classmethod
    def from_projections(cls, projections: Iterable[Projection], extra: int = 0, *, latent: int = 0,
                         kv_rows: int = 0, indexer: int = 0, gate: int = 0) -> ParamBreakdown:
        per = {"q": 0, "k": 0, "v": 0, "o": 0}
        bias = kv_rows
        for p in projections:
            per[p.role] += p.params
            bias += p.bias_params
        return cls(q=per["q"], k=per["k"], v=per["v"], o=per["o"], bias=bias,
                   total=sum(per.values()) + latent + kv_rows + indexer + gate, extra=extra, latent=latent,
                   kv_rows=kv_rows, indexer=indexer, gate=gate)


@dataclass(frozen=True)
class WhatIf:
    """Parameter count of a block under another head count."""

    num_heads: int
    total_width_fixed: int | None  # standard layout: h*d_k stays the same (None: not divisible by num_heads)
    head_dim_fixed: int  # per-head width stays the block's d_k


VERIFY_STATUSES = tuple(s.value for s in VerifyStatus)


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
    # When some caching block is latent attention (AttentionBlock.latent): what the cache would hold
    # if every such block kept its per-head K and V instead of the latent (the other blocks as they
    # are), per token and at ``context``; None for a model without latent blocks.
    expanded_bytes_per_token: int | None = None
    expanded_total_bytes: int | None = None
    # (context tokens, bytes) at the points the KV chart draws (analysis.charts: even steps up to 32k
    # or twice the context, every sliding window, the context); drawn by the HTML report, not in the JSON.
    by_context: tuple[tuple[int, int], ...] = ()
    # (context tokens, bytes) of the non-attention mixers' fixed state (state_bytes_per_sequence times
    # batch) at the same points: constant whatever the context; drawn by the HTML report, not in the JSON.
    state_by_context: tuple[tuple[int, int], ...] = ()
    # Of bytes_per_token: the keys a sparse-attention indexer caches (DeepSeek-V3.2's lightning
    # indexer, one key of index_head_dim per token per layer); None for a model without one.
    indexer_bytes_per_token: int | None = None
    # What the non-attention mixers (``ModelSummary.mixers``) hold per sequence whatever the context:
    # recurrent and convolution states; None when no layer has such a state, or when one cannot be
    # sized (``state_reason`` says which layers). Times ``batch`` in the memory figure.
    state_bytes_per_sequence: int | None = None
    state_reason: str | None = None
    # The figure leaves layers out (layers of a kind the reader cannot classify): bytes_per_token and
    # total_bytes are then at least what the model caches, and ``not_counted`` says what is missing.
    lower_bound: bool = False
    not_counted: str | None = None

    def __post_init__(self) -> None:
        if type(self.status) is not CacheStatus:
            object.__setattr__(self, "status", CacheStatus(self.status))


@dataclass(frozen=True)
class AttentionBlock:
    """One attention block: what was recovered, from which evidence, and what it holds."""

    name: str
    matcher: str  # a Matcher; a bare string is checked and converted on construction
    kind: BlockKind  # checked and converted likewise (a caller may pass its text: "self", "cross", ...)
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
    # The counts at every head count the what-if chart draws (analysis.charts: 1, powers of two up to
    # 2h or the largest --heads, h); drawn by the HTML report, not part of the JSON document.
    what_if_curve: tuple[WhatIf, ...] = ()
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
    latent: LatentKV | None = None  # multi-head latent attention: K/V from one compressed latent
    # A latent block's per-head equivalent of its cache figure: num_kv_heads · (d_k + d_v) · itemsize
    # (None for other blocks, whose figure is that already).
    kv_cache_expanded_bytes_per_token: int | None = None
    # Of kv_cache_bytes_per_token: a sparse-attention indexer's cached key (DeepSeek-V3.2), 0 without one.
    kv_cache_indexer_bytes_per_token: int = 0
    indexer: SparseIndexer | None = None  # the sparse-attention indexer the module holds (its weights)
    # The block whose K/V cache this one reads (a KV-sharing layer: Gemma-3n's last layers, cross-layer
    # attention): it caches nothing of its own, and its K/V projections, if it names them, are that block's.
    kv_cache_shared_from: str | None = None

    def __post_init__(self) -> None:
        if type(self.matcher) is not Matcher:
            object.__setattr__(self, "matcher", Matcher.checked(self.matcher))
        if type(self.kind) is not BlockKind:
            object.__setattr__(self, "kind", BlockKind(self.kind))
        if self.kv_cache_status is not None and type(self.kv_cache_status) is not CacheStatus:
            object.__setattr__(self, "kv_cache_status", CacheStatus(self.kv_cache_status))

    def role_weights(self) -> tuple[int, int, int, int]:
        """Q, K, V and O without their biases (``params.q`` ... hold each role's bias too), so that
        Q + K + V + O + bias + latent = total: what a breakdown with a Bias column shows."""
        p = self.params
        per = {"q": p.q, "k": p.k, "v": p.v, "o": p.o}
        for proj in self.projections:
            if proj.role in per:
                per[proj.role] -= min(proj.bias_params, per[proj.role])
        return per["q"], per["k"], per["v"], per["o"]


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
    # The node where the match failed (the op a walk stopped at; "" when it is the anchor itself,
    # as for a weight-only source's module). The JSON's ``misses[].node`` (the anchor for "").
    node: str = ""
    # Whether the anchor is the matcher's own (its signature was found, so the miss is final); False
    # when the anchor does not look like the pattern at all (a Softmax with no Q·Kᵀ behind it): the
    # graph driver then lets the next pattern in its order try the anchor.
    claimed: bool = True
    # The source says this module caches K/V during decoding (a decoder's latent attention, MLA):
    # the model's KV cache then holds something no block sizes, so it is unknown, not "none".
    caches: bool = False
    # The module's weights show it caches nothing per token whatever the model decodes (deformable
    # attention samples points of a feature map): ``caches`` stays False.
    caches_nothing: bool = False

    def __post_init__(self) -> None:
        if type(self.matcher) is not Matcher:
            object.__setattr__(self, "matcher", Matcher.checked(self.matcher))

def projection_tensor_names(block: AttentionBlock) -> tuple[str, ...]:
    """The weights and biases a block's projections name, and a latent block's down-projections and
    norms (for front ends without a graph)."""
    out: list[str] = []
    for p in block.projections:
        out.extend(x for x in (p.weight, p.bias) if x)
    if block.latent is not None:
        out.extend(block.latent.tensors)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class MemoryAtContext:
    """Weights + KV cache: what decoding ``context`` tokens for ``batch`` sequences holds in memory
    (activations and runtime buffers not counted). ``context_source``: --context, or the model's
    maximum positions when no --context was given."""

    context: int
    context_source: str
    batch: int
    weight_bytes: int | None
    kv_cache_bytes: int | None
    total_bytes: int | None
    reason: str | None = None  # why total_bytes is None, or what it leaves out (cross-attention)
    # The non-attention mixers' fixed state (KVCache.state_bytes_per_sequence × batch), in total_bytes.
    state_bytes: int | None = None
