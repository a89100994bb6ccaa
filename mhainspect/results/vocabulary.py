"""The closed vocabularies a report is written in: severities, evidence sources, matchers, block
kinds, cache and verify statuses, warning codes."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum


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


class FitStatus(Vocabulary):
    """What --gpu-memory found (``GpuFit.status``)."""

    FITS = "fits"  # the weights fit: max_context / max_batch say how much cache fits beside them
    WEIGHTS_DO_NOT_FIT = "weights_do_not_fit"  # the weights' share alone exceeds one GPU's memory
    UNKNOWN = "unknown"  # the weights' bytes or the KV cache are unknown (reason)


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
    """Where Q and K/V come from, read from the dataflow (or, without a graph, from names)."""

    SELF = "self"  # Q, K and V read the same tensor
    CROSS = "cross"  # K/V read a tensor Q does not (an encoder output, a memory; a learned query's pooling)
    ADDITIVE = "additive"  # Bahdanau attention: one head, no Q·Kᵀ
    # Q's and K's projections are not resolved and the tensors they come from are computed by ops
    # the matcher does not see through: nothing shows whether K/V have a source of their own.
    UNKNOWN = "unknown"


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


class MixerKind(Vocabulary):
    """What mixes tokens in a layer that has no softmax attention (``Mixer.kind``): such a layer
    caches a fixed state per sequence, not K/V per token."""

    LINEAR_ATTENTION = "linear_attention"  # a recurrent key-value state: Gated DeltaNet, lightning, KDA
    STATE_SPACE = "state_space"  # a selective state-space model: Mamba, Mamba-2
    CONVOLUTION = "convolution"  # a short causal convolution (LFM2): its last inputs
    # A layer type the reader does not know (a config's layer_types entry it has no rule for): what it
    # caches is not counted, and the model's KV figure is a lower bound.
    UNKNOWN = "unknown"


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
    CONTEXT_BEYOND_POSITIONS = "context_beyond_positions"  # --context above the model's maximum positions
    OPTION_WITHOUT_EFFECT = "option_without_effect"  # an option the report could not use (--context, no cache figure)
    MADE_UP_INPUTS = "made_up_inputs"  # a module traced on inputs the caller did not give
    NOT_TRACED = "not_traced"
    # The model's total is below its attention blocks' parameters: some parameter the blocks count is
    # not in the total (a weight refused or dropped, or a tensor the accounting does not see as one).
    ACCOUNTING_GAP = "accounting_gap"


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
