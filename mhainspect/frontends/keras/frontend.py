"""Keras file -> blocks: the front end for ``.keras`` archives and legacy ``.h5`` models.

The reader (``frontends.keras.reader``) gives the variables by Keras layer names with their
shapes, and the config; the name grouping and assembly of ``matchers.static`` make the blocks,
with each attention layer's arguments (``frontends.keras.config``) as its claims: the same
assembler as a checkpoint's, so a .keras file gives the blocks its ONNX exports give.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from mhainspect.frontends.checkpoint.size_inputs import metas_size_inputs
from mhainspect.frontends.keras.config import Claims, LayerClaim, model_class
from mhainspect.frontends.keras.reader import KerasModel, read_archive, read_hdf5
from mhainspect.frontends.kinds import KERAS_WEIGHTS
from mhainspect.frontends.zips import ZIP_MAGIC, is_zip
from mhainspect.ir.weights import HEADS_FIRST, HeadOffers, WeightMeta, parameters_counted
from mhainspect.matchers.grouping import group_attention
from mhainspect.matchers.static import blocks_from_weights, by_widths_only
from mhainspect.results import AttentionBlock, BlockKind, Evidence, EvidenceSource, ModelFacts
from mhainspect.results.stages import SourceResult

if TYPE_CHECKING:
    from mhainspect.sources.blob import Blob
    from mhainspect.sources.tree import Tree

_NO_DECODING = "a Keras model: its config does not say whether it decodes autoregressively"


def keras_file_result(tree: Tree, path: str, display: str, blob: Blob, stated: HeadOffers | None = None
                      ) -> SourceResult:
    """A Keras file wherever it lives (on this machine, a URL, a store), the file ``path`` of
    ``tree`` (``blob``) named ``display``, by its first bytes: a .keras archive (a zip, read by
    ranges through its blob), else an HDF5 file (a legacy .h5 model, or Keras weights with the
    archive's config.json beside them in the tree); ``stated``: head counts the caller gives."""
    if is_zip(blob.read(0, len(ZIP_MAGIC))):
        return model_result(read_archive(blob), display, stated)
    return model_result(read_hdf5(tree, path, blob), display, stated)


def keras_folder_result(tree: Tree, path: str, display: str, stated: HeadOffers | None = None) -> SourceResult:
    """A folder holding an extracted .keras archive (``kinds.is_keras_folder``): its weights file
    read with its config.json, named as the folder."""
    weights = f"{path}/{KERAS_WEIGHTS}" if path else KERAS_WEIGHTS
    return model_result(read_hdf5(tree, weights, tree.blob(weights)), display, stated)


def model_result(model: KerasModel, path: str, stated: HeadOffers | None = None) -> SourceResult:
    """The blocks and facts of a Keras file once read."""
    claims = Claims(model.config, model.config_label)

    def offers_for(block_name: str) -> list[HeadOffers]:
        claim = claims.for_block(block_name)
        return [o for o in (stated, claim.offers if claim is not None else None) if o is not None]

    weights = with_kernel_layouts(model.weights, offers_for)
    blocks, misses = blocks_from_weights(weights, offers_for)
    blocks = [_called_kind(b, claims.for_block(b.name), model.config_label) for b in blocks]
    parameters, total_params = parameters_counted(weights)
    facts = ModelFacts(path=path, format=model.fmt, total_params=total_params,
                       producer=model_class(model.config))
    size = metas_size_inputs(weights, blocks, None, parameters, label=model.config_label, no_config=_NO_DECODING)
    return SourceResult(tuple(blocks), tuple(misses), facts, (), size)


def _called_kind(block: AttentionBlock, claim: LayerClaim | None, label: str) -> AttentionBlock:
    """A block whose layer the model calls with a value other than its query is cross-attention
    (the config's record of the call; the weights cannot tell)."""
    if claim is None or not claim.cross:
        return block
    evidence = block.evidence
    if block.kind is BlockKind.CROSS and by_widths_only(block):  # the call says it, not only the widths
        evidence = tuple(e for e in evidence if e.field != "kind")
    elif block.kind is not BlockKind.SELF:
        return block
    said = Evidence("kind", None, EvidenceSource.CONFIG, f"{label}: {claim.class_name} '{claim.name}' {claim.cross}")
    return dataclasses.replace(block, kind=BlockKind.CROSS, evidence=(*evidence, said))


def with_kernel_layouts(weights: Mapping[str, WeightMeta], offers_for: Callable[[str], list[HeadOffers]]
                        ) -> dict[str, WeightMeta]:
    """Which axis of a block's 3-D Q/K/V kernels is the heads': an EinsumDense kernel is
    ``[in, heads, head_dim]`` (MultiHeadAttention, GroupQueryAttention, keras-hub's Llama) or
    ``[heads, in, head_dim]`` (keras-hub's Gemma), and the file keeps no equation. The output
    kernel ``[heads, head_dim, out]`` names the query heads: the Q kernel's axis that has them and
    the other does not is the head axis (else the layers' claimed head count decides; else Keras'
    own ``[in, heads, head_dim]``). K and V follow Q's layout."""
    out = dict(weights)
    for group in group_attention(weights):
        q, o = group.role("q"), group.role("o")
        if q is None or len(q.weight.shape) != 3:
            continue
        heads = o.weight.shape[0] if o is not None and len(o.weight.shape) == 3 else None
        if heads is None:
            heads = next((off.num_heads for off in offers_for(group.name) if off.num_heads), None)
        first, second = q.weight.shape[0], q.weight.shape[1]
        if heads is None or not (first == heads and second != heads):
            continue
        for role in ("q", "k", "v"):
            rw = group.role(role)
            if rw is not None and len(rw.weight.shape) == 3:
                out[rw.weight.name] = rw.weight._replace(layout=HEADS_FIRST)
    return out

