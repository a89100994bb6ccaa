"""Neutral data for sources without a graph (checkpoints, module parameter lists, configs), and the
one result shape every front end returns (SourceResult).

Loaders produce these; the name grouping and block assembly in ``mhainspect.matchers`` consume
them. Like ``mhainspect.graph``, this module imports nothing above the vocabulary in findings.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import NamedTuple

from mhainspect import dtypes
from mhainspect.dtypes import is_float
from mhainspect.findings import AttentionBlock, Evidence, EvidenceSource, Miss, ModelFacts


class QuantRole(str, Enum):
    """What a tensor of a quantized Linear is (``mhainspect.loaders.quantized`` tells)."""

    WEIGHT = "weight"  # the quantized values: a parameter whatever its dtype, counted by its logical shape
    AUX = "aux"  # scales, zero points, group indices, a stored shape, a quant state: overhead


@dataclass(frozen=True)
class Quantized:
    """How a tensor of a quantized Linear is stored: its role, the shape in the file (the
    WeightMeta's ``shape`` is the logical one), what says so, and a disagreement between the
    config and the shapes (the shapes won)."""

    role: QuantRole
    stored_shape: tuple[int, ...]
    method: str = ""  # the layout's name ("gptq", "awq", "bitsandbytes-4bit", ...)
    bits: int | None = None  # bits per logical element of a WEIGHT
    provenance: str = ""
    conflict: str = ""


@dataclass(frozen=True)
class WeightMeta:
    """One tensor: name, shape and identity. ``layout`` is "out_in" (nn.Linear), "in_out" (Conv1D,
    Keras/Flax kernels) or "" when only the name can tell. ``quant``: set on the tensors of a
    quantized Linear; then ``shape`` is the logical shape (a packed int32 qweight: the [out, in]
    it encodes) and ``quant.stored_shape`` the one in the file."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    storage_key: str
    layout: str = ""
    quant: Quantized | None = None
    # The name of the stored tensor whose parameters this one repeats, when the model's config
    # ties them (``mhainspect.loaders.hf_config.tied_copies``): a second copy on disk, its bytes
    # stored, its parameters counted once.
    tied_to: str = ""

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def stored_numel(self) -> int:
        """Elements as stored (of ``dtype``): what the file's bytes hold."""
        return math.prod(self.quant.stored_shape) if self.quant is not None else math.prod(self.shape)

    @property
    def is_parameter(self) -> bool:
        """Float tensors and quantized weights; integer buffers and quantization data are not."""
        if self.quant is not None:
            return self.quant.role is QuantRole.WEIGHT
        return is_float(self.dtype)


@dataclass(frozen=True)
class HeadOffers:
    """What a module or config says about one block (None: it does not say)."""

    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    v_head_dim: int | None = None
    source: str = EvidenceSource.CONFIG  # an EvidenceSource (module, config, gguf, head_shape); checked
    detail: str = ""
    scale: float | None = None  # the factor the scores are multiplied by, when it says
    applications: int | None = None  # how many times one run applies the block's weights (a shared layer)

    def __post_init__(self) -> None:
        if type(self.source) is not EvidenceSource:
            object.__setattr__(self, "source", EvidenceSource(self.source))

    def evidence(self) -> list[Evidence]:
        out: list[Evidence] = []
        for field, value in (("num_heads", self.num_heads), ("num_kv_heads", self.num_kv_heads),
                             ("d_k", self.head_dim), ("d_v", self.v_head_dim)):
            if isinstance(value, int) and value > 0:
                out.append(Evidence(field, value, self.source, self.detail))
        return out


def parameter_keys(weights: Mapping[str, WeightMeta]) -> frozenset[str]:
    """Storage keys of the parameters of a weight list: unique float tensors (tied weights once)
    and quantized weights; integer buffers and quantization data are not parameters.
    count_weights counts them; mhainspect.size calls every other stored tensor overhead."""
    return frozenset(t.storage_key for t in weights.values() if t.is_parameter)


def count_weights(weights: Mapping[str, WeightMeta]) -> int:
    """Unique float tensors and quantized weights by storage (tied weights once: shared storage, or
    a stored copy the config ties to another, ``WeightMeta.tied_to``), a quantized
    weight by the logical elements it encodes; integer buffers and quantization data are not
    parameters.

    The one counter for weight lists (checkpoints, module parameters); graphs are counted by use
    in ``mhainspect.analyze.count_parameters``."""
    seen: set[str] = set()
    total = 0
    for t in weights.values():
        key = parameter_identity(weights, t)
        if key in seen or not t.is_parameter:
            continue
        seen.add(key)
        total += t.numel
    return total


def parameter_identity(weights: Mapping[str, WeightMeta], t: WeightMeta) -> str:
    """What makes two stored tensors one parameter: their storage, or a tied copy's source's."""
    source = weights.get(t.tied_to) if t.tied_to else None
    return source.storage_key if source is not None else t.storage_key


# ----------------------------------------------------------------------------- size metadata
# What every front end hands mhainspect.size (in SourceResult.size): tensors as metadata and per
# block what the source says about decoding.


class StoredTensor(NamedTuple):
    """One stored tensor as metadata. ``stored_bytes``: what the file says it occupies (an
    external-data length), used only when the dtype has no size (strings). A NamedTuple: a 70B
    graph has thousands and they are built on the hot path."""

    name: str
    dtype: str
    numel: int
    storage_key: str
    is_parameter: bool
    stored_bytes: int | None = None

    @property
    def nbytes(self) -> int | None:
        rate = byte_rate(self.dtype)
        if rate is None:
            return self.stored_bytes
        block_size, num, den = rate
        blocks = -(-self.numel // block_size)
        return -(-(blocks * num) // den)


@cache
def byte_rate(dtype: str) -> tuple[int, int, int] | None:
    """(elements per block, bytes per block as numerator, denominator) of ``dtype``; None: no size."""
    found = dtypes.lookup(dtype)
    if found is None or found.block_bytes == 0:
        return None
    return found.block_size, found.block_bytes.numerator, found.block_bytes.denominator


@dataclass(frozen=True)
class BlockDecoding:
    """What the source says about one block during autoregressive decoding.

    ``caches``: True (it caches K/V per token), False (it does not), None (cannot be told);
    ``reason`` is the evidence either way. ``dtype`` is the cache's element type with where it
    came from (a past/present tensor, the projection's compute dtype, the config).
    """

    block: str
    caches: bool | None
    reason: str
    dtype: str | None = None
    dtype_source: str = ""
    window: int | None = None  # sliding window (tokens the layer attends to), None: full attention
    window_source: str = ""
    source: str = "config"  # evidence kind: "cache_tensor", "causal_mask", "config", "gguf", ...
    # True when only a causal mask says the block caches (no cache tensor, no config): the figure is
    # what it caches if the model is decoded token by token (CLIP's causal text tower runs once).
    if_decoded: bool = False


@dataclass(frozen=True)
class SizeInputs:
    """A front end's metadata for the size computation."""

    tensors: tuple[StoredTensor, ...] = ()
    block_tensors: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # block -> tensor names
    decoding: tuple[BlockDecoding, ...] = ()


@dataclass(frozen=True)
class SourceResult:
    """What every front end (ONNX graph, nn.Module, checkpoint) turns a source into; only
    ``mhainspect.report`` makes a Report of it."""

    blocks: tuple[AttentionBlock, ...]
    misses: tuple[Miss, ...]
    model: ModelFacts
    warnings: tuple[str, ...] = ()
    size: SizeInputs | None = None  # tensor metadata and decoding evidence for mhainspect.size
