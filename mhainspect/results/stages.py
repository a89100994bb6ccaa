"""The contract between the stages: the one result shape every front end returns (SourceResult),
with the tensor metadata and decoding evidence each hands ``mhainspect.analysis.size``.

Every reader of ``mhainspect.frontends`` (onnx, torch, archives, checkpoint, gguf, keras) builds it;
only ``mhainspect.analysis.report`` makes a Report of it. Like the rest of ``results/`` it imports
nothing above it: the analysis and the renderers read it without importing a front end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from mhainspect.results.blocks import AttentionBlock, Miss
from mhainspect.results.report import ModelFacts
from mhainspect.results.vocabulary import MixerKind

if TYPE_CHECKING:  # built by the readers that find experts; a dense model never imports their matcher
    from mhainspect.matchers.experts import ExpertInputs

# A causal mask without past/present tensors or a config that says the model decodes: the words a
# front end writes into a block's decoding reason, the analysis recognises and the renderers show.
IF_DECODED = ("the graph has no past/present tensors and no config says the model decodes: this is what "
              "the cache holds if it is decoded token by token")

# ----------------------------------------------------------------------------- size metadata
# What every front end hands mhainspect.analysis.size (in SourceResult.size): tensors as metadata and per
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
    # Values per token a sparse-attention indexer caches beside K/V (DeepSeek-V3.2's index_head_dim key).
    indexer_width: int = 0
    indexer_source: str = ""


@dataclass(frozen=True)
class MixerLayers:
    """Layers of one stack that mix tokens without softmax attention (``mhainspect.results.Mixer``
    once sized): their kind, what classified them, and the fixed state one such layer keeps per
    sequence: its convolution's last inputs and its recurrent state, in elements and each in its
    dtype (elements None: not known, ``reason`` says why)."""

    kind: MixerKind
    layers: tuple[int, ...]
    source: str
    conv_elements: int | None = None
    recurrent_elements: int | None = None
    state_source: str = ""
    reason: str | None = None
    recurrent_float32: bool = False  # the recurrent state is kept in float32 whatever the model's dtype
    dtype: str | None = None  # the model's compute dtype (the convolution state's, the recurrent one's unless float32)
    dtype_source: str = ""
    # The recurrent state's own dtype where the source gives it apart (a graph's state tensor);
    # None: float32 when ``recurrent_float32``, else ``dtype``.
    recurrent_dtype: str | None = None


@dataclass(frozen=True)
class SizeInputs:
    """A front end's metadata for the size computation."""

    tensors: tuple[StoredTensor, ...] = ()
    block_tensors: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # block -> tensor names
    decoding: tuple[BlockDecoding, ...] = ()
    mixers: tuple[MixerLayers, ...] = ()  # the layers that are no attention block (linear attention, SSM, conv)


@dataclass(frozen=True)
class SourceResult:
    """What every front end (ONNX graph, nn.Module, checkpoint) turns a source into; only
    ``mhainspect.analysis.report`` makes a Report of it."""

    blocks: tuple[AttentionBlock, ...]
    misses: tuple[Miss, ...]
    model: ModelFacts
    warnings: tuple[str, ...] = ()
    size: SizeInputs | None = None  # tensor metadata and decoding evidence for mhainspect.analysis.size
    experts: ExpertInputs | None = None  # mixture-of-experts layers and what the metadata says of them
