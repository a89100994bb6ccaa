"""The parts of a Report that only an option or a rarer kind of model adds: --verify's per-block
outcome, a latent (MLA) cache, the experts of a mixture-of-experts model, the layers of a hybrid
stack that mix tokens without attention, --gpu-memory's fit and --weight-dtype's what-if. Part of the one vocabulary (``mhainspect.results`` exports them); kept in
their own module so that what builds or shows them imports it, behind the same door as the pass
that makes them: a plain run creates none of these classes (each costs as much to create as a
small module; docs/performance.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mhainspect.results.vocabulary import FitStatus, MixerKind, VerifyStatus

if TYPE_CHECKING:
    from mhainspect.results.blocks import Evidence


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
class LatentKV:
    """Multi-head latent attention (DeepSeek-V2/V3's MLA; Kimi-K2, MiniCPM3, ...): K and V of every
    head are up-projected from one compressed latent ``kv_rank`` wide, and each head's key also
    carries a rotary part ``rope_dim`` wide that is computed once for all heads. Such a block stays
    ``kind`` "self" (Q and the latent read the same input; the kind says where K/V come from, the
    latent how they are made); its d_k is the per-head key (the non-rotary part + ``rope_dim``),
    its K and V projections are the up-projection's shares, and the down-projections with their
    norms (``tensors``) are counted in its total as ``params.latent``.

    What decoding caches per token: the latent and the rotary key, ``kv_rank + rope_dim`` values
    (what inference engines that implement MLA keep), not the per-head K and V they expand to."""

    kv_rank: int  # kv_lora_rank: the compressed K/V latent's width
    rope_dim: int  # qk_rope_head_dim: the rotary key, one for all heads (0: none)
    q_rank: int | None = None  # q_lora_rank: Q's own latent (None: Q is projected from the input directly)
    tensors: tuple[str, ...] = ()  # the down-projections and their norms, counted in params.latent
    # The runtime the source is made for keeps the per-head K/V instead of the latent (llama.cpp with a
    # GGUF that stores the unsplit attn_kv_b): the cache figure is then the expanded one.
    runtime_expands: bool = False

    @property
    def cached_width(self) -> int:
        """Values cached per token: the latent and the rotary key."""
        return self.kv_rank + self.rope_dim


@dataclass(frozen=True)
class SparseIndexer:
    """A sparse-attention indexer held by an attention module (DeepSeek-V3.2's lightning indexer,
    GLM-MoE-DSA's, HunYuan-V4's): a sub-module with its own K projection from the block's input and
    no V, whose scores choose the keys the attention reads. Its parameters (every tensor of its
    module: ``tensors``) count in the block's total as ``params.indexer``; it caches its key, ``d_k``
    values per token, beside the block's K/V (``kv_cache_indexer_bytes_per_token``)."""

    module: str  # the indexer's module path (a graph: the TopK node whose choice reaches the scores)
    d_k: int  # its key's width (the K projection's output): what it caches per token
    num_heads: int | None  # its query heads (its Q projection's width over d_k; None: not told)
    tensors: tuple[str, ...] = ()  # every tensor of the module, counted in params.indexer


@dataclass(frozen=True)
class MixtureOfExperts:
    """The routed experts of a mixture-of-experts model and the parameters one token uses.

    ``active_params`` = total − every routed expert + per layer ``experts_per_token`` routed experts
    (shared experts, routers, attention and the rest run for every token); None with ``reason``
    when something it needs is not known (how many experts a token uses, experts of unequal size)."""

    moe_layers: int
    num_experts: int | None  # routed experts per layer (None: layers differ or cannot be counted)
    experts_per_token: int | None  # top-k of the router (config / GGUF metadata)
    num_shared_experts: int | None  # as the metadata says (their parameters: shared_expert_params)
    expert_params: int  # every routed expert of every layer
    params_per_expert: int | None  # one routed expert of one layer (None: they differ)
    shared_expert_params: int
    active_params: int | None
    reason: str | None = None
    evidence: tuple[Evidence, ...] = ()


@dataclass(frozen=True)
class GpuFit:
    """--gpu-memory (and --gpus): what fits on ``gpus`` GPUs of ``gpu_memory_bytes`` each under tensor
    parallelism: the weights split over the GPUs, every caching block's K/V heads split over them
    (replicated when a layer has fewer K/V heads than GPUs; a latent cache on every GPU), and each
    sequence's fixed state. ``max_context``: the most tokens ``batch`` sequences can each hold (None:
    no limit, the cache stops growing, or not known); ``max_batch``: the most sequences at
    ``context`` (None: no limit, nothing grows with the batch, or no context known). Activations and
    the runtime's buffers are not counted."""

    gpu_memory_bytes: int  # per GPU
    gpus: int
    status: FitStatus
    weight_dtype: str  # "as stored", or the --weight-dtype type
    weight_bytes_per_gpu: int | None
    kv_dtype: str | None
    kv_bytes_per_token_per_gpu: int | None  # every caching layer's per-GPU share, before a sliding window caps it
    state_bytes_per_sequence_per_gpu: int  # fixed per sequence, whatever the context
    batch: int  # the sequences max_context is for (--batch)
    max_context: int | None
    context: int | None  # the tokens max_batch is for (--context, else the model's maximum)
    context_source: str
    max_batch: int | None
    free_bytes_per_gpu: int | None  # gpu_memory_bytes - weight_bytes_per_gpu: what the cache may take
    notes: tuple[str, ...] = ()  # how the KV heads split, what is not counted
    reason: str | None = None  # why a figure is None


@dataclass(frozen=True)
class WeightDtypeWhatIf:
    """--weight-dtype: the bytes of every parameter stored in ``dtype`` (``asked``: as given, e.g.
    q4_k_m for llama.cpp's mix whose floor is q4_k), and with the KV cache at the memory context."""

    asked: str
    dtype: str
    bits_per_element: float
    bytes: int
    memory_bytes: int | None
    note: str


@dataclass(frozen=True)
class Mixer:
    """Layers of one kind that mix tokens without softmax attention (linear attention, state-space,
    convolution): no K/V per token, a fixed state per sequence (``state_bytes_per_layer``: the
    recurrent state and the convolution's last inputs, at ``dtype``; None when it cannot be sized,
    ``reason`` says why). ``source`` says what classified the layers (a config's layer types, the
    weights only such a mixer has)."""

    kind: MixerKind
    layers: tuple[int, ...]  # layer numbers in the stack, in order
    source: str
    state_bytes_per_layer: int | None = None
    dtype: str | None = None
    state_source: str = ""  # the widths the state is made of, and where they were read
    reason: str | None = None  # why the state has no size

    def __post_init__(self) -> None:
        if type(self.kind) is not MixerKind:
            object.__setattr__(self, "kind", MixerKind(self.kind))

    @property
    def count(self) -> int:
        return len(self.layers)

    @property
    def state_bytes_per_sequence(self) -> int | None:
        """Every layer's state, one sequence."""
        return None if self.state_bytes_per_layer is None else self.state_bytes_per_layer * len(self.layers)
