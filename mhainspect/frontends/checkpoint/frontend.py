"""Checkpoint -> blocks: the front end for safetensors / PyTorch state dicts / Hugging Face folders.

The loader (``mhainspect.frontends.checkpoint.reader``) reads names, shapes and the config; the name
grouping and assembly (``mhainspect.matchers.static``) make the blocks, with head counts from
the config table (``mhainspect.frontends.checkpoint.hf_config``); ``mhainspect.analysis.report`` makes the Report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from mhainspect.frontends.checkpoint.files import read_file, read_folder
from mhainspect.frontends.checkpoint.hf_config import (
    Tie,
    expert_claims,
    max_positions,
    offers_from_config,
    producer_from_config,
)
from mhainspect.frontends.checkpoint.mixers import classify_mixers, kv_source_of, with_mixers
from mhainspect.frontends.checkpoint.quantized import quantization_notes
from mhainspect.frontends.checkpoint.reader import apply_ties
from mhainspect.frontends.checkpoint.size_inputs import (
    config_causal,
    metas_size_inputs,
)
from mhainspect.ir.weights import HeadOffers, WeightMeta, parameter_names, parameters_counted
from mhainspect.matchers.experts import weight_experts
from mhainspect.matchers.static import blocks_from_weights
from mhainspect.results import AttentionBlock, Miss, ModelFacts, ReportWarning, WarningCode
from mhainspect.results.stages import SourceResult
from mhainspect.sources.blob import Blob
from mhainspect.sources.tree import Tree


def checkpoint_blocks(weights: Mapping[str, WeightMeta], config: Mapping[str, Any] | None,
                      *, config_label: str = "config.json", stated: HeadOffers | None = None
                      ) -> tuple[list[AttentionBlock], list[Miss]]:
    """Blocks (and near misses) from weight names and shapes, heads from ``config`` when there is
    one and from ``stated`` (--num-heads / --num-kv-heads) when given: shapes outrank both, and a
    disagreement is a conflict of the block."""
    if config is None and stated is None:
        return blocks_from_weights(weights, None)

    def offers_for(block_name: str) -> list[HeadOffers]:
        offers = [stated] if stated is not None else []
        if config is not None:
            offers.append(offers_from_config(config, block_name, label=config_label))
        return offers

    return blocks_from_weights(weights, offers_for, kv_source_of(config))


def checkpoint_file_result(tree: Tree, path: str, display: str, blob: Blob, safetensors: bool,
                           stated: HeadOffers | None, *, remote: bool, config_name: str) -> SourceResult:
    """A checkpoint file of any tree (local or remote), named ``display``; ``config_name``: how the
    warning names a config.json beside it."""
    weights, config = read_file(tree, path, blob, "safetensors" if safetensors else "pytorch", remote)
    return weights_result(weights, config, "safetensors" if safetensors else "pytorch", display, folder=False,
                          config_path=config_name, stated=stated)


def checkpoint_folder_result(tree: Tree, folder: str, display: str, stated: HeadOffers | None, *,
                             remote: bool) -> SourceResult:
    """A Hugging Face folder of any tree (local or remote), named ``display``."""
    weights, config = read_folder(tree, folder, display, remote)
    return weights_result(weights, config, "huggingface", display, folder=True, config_path=None, stated=stated)


def weights_result(weights: Mapping[str, WeightMeta], config: Mapping[str, Any] | None, fmt: str, path: str, *,
                   folder: bool, config_path: str | None, stated: HeadOffers | None = None) -> SourceResult:
    """The checkpoint front end once the weights and the config are read (from a local or a remote
    file or folder): ``folder`` when the config is the folder's own, else ``config_path`` names the
    config.json found beside the file; ``stated``: head counts the caller gives (--num-heads)."""
    names = parameter_names(weights)  # is_parameter once per tensor: the ties and the count read it
    weights, ties = apply_ties(weights, config, names)
    warnings: list[ReportWarning] = []
    if config is not None and not folder:
        warnings.append(ReportWarning(f"heads read from {config_path} next to the checkpoint",
                                      WarningCode.CONFIG_BESIDE))
    if ties:
        warnings.append(ReportWarning(tie_note(ties, weights), WarningCode.LOADER))
    warnings.extend(ReportWarning(note, WarningCode.LOADER) for note in quantization_notes(weights))
    producer = producer_from_config(config) if config is not None else ""
    parameters, total_params = parameters_counted(weights, names)
    positions, positions_source = max_positions(config, "config.json" if folder else "config.json beside the checkpoint")
    facts = ModelFacts(path=str(path), format=fmt, total_params=total_params, producer=producer,
                       max_positions=positions, max_positions_source=positions_source)
    blocks, misses = checkpoint_blocks(weights, config, stated=stated)
    # Linear-attention, state-space and convolution layers are no attention blocks: listed apart.
    blocks, misses, mixers = classify_mixers(config, weights, blocks, misses)
    if config is not None:  # a latent-attention module of a decoder caches what no block sizes
        misses = [dataclasses.replace(m, caches=not m.caches_nothing and config_causal(config, m.anchor)[0] is True)
                  for m in misses]
    label = "config.json" if folder else "config.json beside the checkpoint"
    experts = weight_experts(weights, parameters, expert_claims(config, label))
    size = metas_size_inputs(weights, blocks, config, parameters,
                             label="config.json" if folder else "config.json beside the checkpoint",
                             no_config="checkpoint without config.json: nothing says whether the model decodes "
                                       "autoregressively")
    size = with_mixers(size, mixers, config, label)
    return SourceResult(tuple(blocks), tuple(misses), facts, tuple(warnings), size, experts)


_MAX_TIES_LISTED = 4


def tie_note(ties: tuple[Tie, ...], weights: Mapping[str, WeightMeta]) -> str:
    """The warning for stored copies of tied weights: which, what says so, what they count."""
    shown = "; ".join(f"{t.copy} = {t.source} ({t.said})" for t in ties[:_MAX_TIES_LISTED])
    if len(ties) > _MAX_TIES_LISTED:
        shown += f"; and {len(ties) - _MAX_TIES_LISTED} more"
    repeated = sum(weights[t.copy].numel for t in ties)
    return (f"tied weights stored twice ({len(ties)}): {shown}; the config ties them, so their parameters count "
            f"once ({repeated:,} not counted again); the bytes of both copies are stored")
