"""Neutral data for sources without a graph (checkpoints, module parameter lists, configs).

Loaders produce these; the name grouping and block assembly in ``mhainspect.matchers`` consume
them. Like ``mhainspect.ir.graph``, this module imports nothing above the vocabulary in results
The result every front end returns is ``mhainspect.results.stages.SourceResult``: an ONNX run
never builds these types (three frozen dataclasses and an enum fewer at start-up).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from mhainspect.ir.dtypes import is_block_quantized, is_float
from mhainspect.results import Evidence, EvidenceSource


class QuantRole(str, Enum):
    """What a tensor of a quantized Linear is (``mhainspect.frontends.checkpoint.quantized`` tells)."""

    WEIGHT = "weight"  # the quantized values: a parameter whatever its dtype, counted by its logical shape
    AUX = "aux"  # scales, zero points, group indices, a stored shape, a quant state: overhead


@dataclass(frozen=True, slots=True)  # slots: checkpoints hold 100k+ of them (no __dict__ each)
class Quantized:
    """How a tensor of a quantized Linear is stored: its role, the shape in the file (the
    WeightMeta's ``shape`` is the logical one), what says so, and a disagreement between the
    config and the shapes (the shapes won)."""

    role: QuantRole
    stored_shape: tuple[int, ...]
    method: str = ""  # the layout's name ("gptq", "awq", "bitsandbytes-4bit", ...)
    bits: int | None = None  # bits per logical element of a WEIGHT
    # How the logical shape was read, after the weight's name ("float8e4m3fn [2048, 7168] one value per
    # element, ..."): without the name, one mark serves every weight of a shape and layout.
    provenance: str = ""
    conflict: str = ""

    def provenance_of(self, name: str) -> str:
        """The provenance text of the weight ``name`` carrying this mark."""
        return f"{self.method}: {name} {self.provenance}" if self.provenance else ""


# A 3-D per-head kernel stored [heads, in, head_dim] (keras-hub Gemma's EinsumDense "btd,ndh->btnh"),
# not Keras' usual [in, heads, head_dim] (WeightMeta.layout).
HEADS_FIRST = "heads_in"


class WeightMeta(NamedTuple):
    """One tensor: name, shape and identity. ``layout`` is "out_in" (nn.Linear), "in_out" (Conv1D,
    Keras/Flax kernels), HEADS_FIRST (a 3-D kernel [heads, in, head_dim]) or "" when only the name
    can tell. ``quant``: set on the tensors of a
    quantized Linear; then ``shape`` is the logical shape (a packed int32 qweight: the [out, in]
    it encodes) and ``quant.stored_shape`` the one in the file.

    A NamedTuple, not a frozen dataclass: a large checkpoint builds 100k+ of them twice (read, then
    marked by the quantization pass), and a frozen dataclass's ``__init__`` (one
    ``object.__setattr__`` per field) costs about 4x a tuple's (0.58 against 0.15 us): 0.08 s of
    a 92k-tensor run."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    storage_key: str
    layout: str = ""
    quant: Quantized | None = None
    # The name of the stored tensor whose parameters this one repeats, when the model's config
    # ties them (``mhainspect.frontends.checkpoint.hf_config.tied_copies``): a second copy on disk, its bytes
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
        """Float tensors and quantized weights (a checkpoint's by its quantization, a GGUF file's by
        its GGML block type); integer buffers, float tensors named as torch names its buffers
        (``is_buffer_name``) and quantization data are not."""
        if self.quant is not None:
            return self.quant.role is QuantRole.WEIGHT
        if is_float(self.dtype):
            return not is_buffer_name(self.name)
        return is_block_quantized(self.dtype)


# The leaf names torch modules register as buffers, not parameters: state a checkpoint saves
# beside the parameters (``model.parameters()`` does not count them; their bytes are stored).
# BatchNorm's statistics; rotary frequencies and cos/sin caches (Llama-family inv_freq, Phi's
# _cos_cached, Meta's freqs_cis); position id tables (HF embeddings' position_ids / token_type_ids);
# timm's index tables (Swin relative_position_index, LeViT attention_bias_idxs) and Swin's shifted
# window attn_mask; fairseq's _float_tensor; GPT-2's masked_bias; MiniMax's lightning-attention decay
# tables (slope_rate, query_decay, key_decay, diagonal_decay); rotary original_inv_freq (dynamic
# RoPE's copy); the MoE router's e_score_correction_bias (DeepSeek-V3 and its family); BART's
# final_logits_bias; Gemma 4's clipped Linear bounds (input_min/max, output_min/max). Integer ones are not parameters
# by their dtype already; the names say it for the float ones, and for a checkpoint stored in one dtype.
BUFFER_LEAVES = frozenset({
    "running_mean", "running_var", "num_batches_tracked",
    "inv_freq", "cos_cached", "sin_cached", "_cos_cached", "_sin_cached", "freqs_cis",
    "position_ids", "token_type_ids",
    "relative_position_index", "attention_bias_idxs", "attn_mask",
    "_float_tensor", "masked_bias",
    "slope_rate", "query_decay", "key_decay", "diagonal_decay",
    "original_inv_freq", "e_score_correction_bias", "final_logits_bias",
    "input_min", "input_max", "output_min", "output_max",
})


def is_buffer_name(name: str) -> bool:
    """Whether a stored tensor's name ends in a leaf torch registers as a buffer (``BUFFER_LEAVES``)."""
    return name.rpartition(".")[2] in BUFFER_LEAVES  # rpartition: fewer steps than rfind + a slice


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
    # Latent attention (DeepSeek's MLA): the compressed K/V latent's width, the rotary key's width
    # shared by the heads, and Q's latent width (kv_lora_rank, qk_rope_head_dim, q_lora_rank).
    kv_rank: int | None = None
    rope_dim: int | None = None
    q_rank: int | None = None
    # The model widths of what the offer describes (a config's hidden size): a block of another
    # width is not the one it describes unless its heads × head size are the block's Q width.
    widths: tuple[int, ...] = ()
    # Other readings of what made the offer (another config of a composite model's tree, a stage of
    # per-stage lists), best first: the assembler takes one whose widths describe the block where
    # this one does not (``matchers.assembly.offer_fit``).
    alternatives: tuple[HeadOffers, ...] = ()

    def __post_init__(self) -> None:
        if type(self.source) is not EvidenceSource:
            object.__setattr__(self, "source", EvidenceSource(self.source))

    def evidence(self) -> list[Evidence]:
        out: list[Evidence] = []
        for field, value in (("num_heads", self.num_heads), ("num_kv_heads", self.num_kv_heads),
                             ("d_k", self.head_dim), ("d_v", self.v_head_dim), ("kv_rank", self.kv_rank),
                             ("rope_dim", self.rope_dim), ("q_rank", self.q_rank)):
            if isinstance(value, int) and value > 0:
                out.append(Evidence(field, value, self.source, self.detail))
        return out


def parameter_keys(weights: Mapping[str, WeightMeta]) -> frozenset[str]:
    """Storage keys of the parameters of a weight list: unique float tensors (tied weights once)
    and quantized weights; integer buffers, quantization data and a stored copy the config ties
    to another weight (``WeightMeta.tied_to``: its parameters are its source's) are not.
    count_weights counts them; mhainspect.analysis.size calls every other stored tensor overhead."""
    return parameters_counted(weights)[0]


def count_weights(weights: Mapping[str, WeightMeta]) -> int:
    """Unique float tensors and quantized weights by storage (tied weights once: shared storage, or
    a stored copy the config ties to another, ``WeightMeta.tied_to``), a quantized
    weight by the logical elements it encodes; integer buffers and quantization data are not
    parameters.

    The one counter for weight lists (checkpoints, Keras files, GGUF files, a quantized module's
    parameters); graphs are counted by use in ``mhainspect.ir.parameters.count_parameters``."""
    return parameters_counted(weights)[1]


def parameter_names(weights: Mapping[str, WeightMeta]) -> frozenset[str]:
    """The names of the tensors that are parameters (``WeightMeta.is_parameter``, which a tie,
    ``tied_to``, does not change): asked once per tensor (100k+ in a mixture of experts) by a front
    end that then ties, keys and counts them."""
    return frozenset([n for n, t in weights.items() if t.is_parameter])


def parameters_counted(weights: Mapping[str, WeightMeta], names: frozenset[str] | None = None
                       ) -> tuple[frozenset[str], int]:
    """``parameter_keys`` and ``count_weights`` of one weight list in one pass; ``names``: its
    ``parameter_names`` when the caller has them."""
    if names is None:
        names = parameter_names(weights)
    keys: set[str] = set()
    seen: set[str] = set()
    total = 0
    for n, t in weights.items():
        if n not in names:
            continue
        key = parameter_identity(weights, t) if t.tied_to else t.storage_key
        if key == t.storage_key:  # a tied copy's parameters are its source's
            keys.add(key)
        if key not in seen:
            seen.add(key)
            total += t.numel
    return frozenset(keys), total


def parameter_identity(weights: Mapping[str, WeightMeta], t: WeightMeta) -> str:
    """What makes two stored tensors one parameter: their storage, or a tied copy's source's."""
    source = weights.get(t.tied_to) if t.tied_to else None
    return source.storage_key if source is not None else t.storage_key


def identity_by_name(weights: Mapping[str, WeightMeta], others: Mapping[str, str] | None = None
                     ) -> Callable[[str], str]:
    """``parameter_identity`` of a tensor by its name, for ``matchers.sharing.count_shared_once`` (a weight
    used by several blocks counts in the first); ``others``: identities of names not in ``weights``
    (a traced graph's weights by storage); any other name is its own."""
    def identity(name: str) -> str:
        t = weights.get(name)
        if t is not None:
            return parameter_identity(weights, t)
        return others.get(name, name) if others is not None else name
    return identity


def tied_copy_by_name(weights: Mapping[str, WeightMeta]) -> Callable[[str], bool]:
    """Whether a tensor, by its name, is a stored copy the config ties to another
    (``WeightMeta.tied_to``), for ``matchers.sharing.count_shared_once`` (the tie's source counts the weight)."""
    def is_copy(name: str) -> bool:
        t = weights.get(name)
        return t is not None and bool(t.tied_to)
    return is_copy
