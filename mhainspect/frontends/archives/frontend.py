"""PyTorch archives -> SourceResult: torch.export programs (.pt2) and TorchScript archives.

Each reader hands an ArchiveProgram: a graph in the neutral IR (built by the converter a traced
module's graph goes through) and the archive's stored tensors. The blocks come from the graph, as
a traced module's do; the totals and the size metadata from the stored tensors, as a module's do
(parameters by unique storage, trainable = requires_grad, buffers are overhead); a block the graph
shows caching (a causal mask) decodes where nothing else says. A config.json beside the archive
says what only a config says, as beside a checkpoint; without one, the root module's class is read
as a config's ``architectures`` entry (LlamaForCausalLM decodes). Imports no torch.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mhainspect.frontends.archives.known_blocks import KnownBlocks
from mhainspect.frontends.archives.program import ArchiveProgram, ArchiveWeight
from mhainspect.frontends.torch.known import MHA_CLASS, class_name, mha_scale
from mhainspect.ir.weights import WeightMeta, identity_by_name
from mhainspect.matchers.sharing import count_shared_once
from mhainspect.results import AttentionBlock, Evidence, EvidenceSource, ReportWarning, WarningCode
from mhainspect.results.stages import SourceResult

if TYPE_CHECKING:
    from mhainspect.sources.blob import Blob
    from mhainspect.sources.tree import Tree

_CONFIG_LABEL = "config.json beside the archive"


def archive_result(tree: Tree, path: str, display: str, program: ArchiveProgram, *, fmt: str,
                   known: KnownBlocks | None = None) -> SourceResult:
    """The SourceResult of an archive's program, the file ``path`` of ``tree`` named ``display``
    (see the module docstring); ``known``: blocks of modules recognised by class and attributes,
    which a graph block using their weights repeats."""
    from mhainspect.frontends.checkpoint.size_inputs import metas_size_inputs
    from mhainspect.frontends.graphs.result import graph_result

    config, config_warning = _config_beside(tree, path, display)
    found = graph_result(program.graph, path=display, fmt=fmt, config=config, config_label=_CONFIG_LABEL)
    scopes = {n.name: n.scope for n in program.graph.nodes}
    traced = [_named(_known_scale(b, program.module_classes), scopes, program.root_class) for b in found.blocks]
    # A block the graph shows caching (a causal mask, cache tensors) decodes where nothing else says.
    renamed = {old.name: new.name for old, new in zip(found.blocks, traced)}
    graph_caches = {renamed.get(d.block, d.block): dataclasses.replace(d, block=renamed.get(d.block, d.block))
                    for d in (found.size.decoding if found.size else ()) if d.caches}
    blocks = _merged(known, traced, program) if known is not None else traced
    metas = {w.name: WeightMeta(w.name, w.shape, w.dtype, w.storage_key) for w in program.weights}
    parameters = frozenset(w.storage_key for w in program.weights if w.is_parameter)
    # Without a config, the root module's class is read as a config's architectures entry is
    # (LlamaForCausalLM: a causal language model; BertForMaskedLM: an encoder).
    said, label = (config, _CONFIG_LABEL) if config is not None else _class_config(
        program.root_class, program.module_classes.get("", ""))
    size = metas_size_inputs(metas, blocks, said, parameters, label=label,
                             no_config=f"{Path(display).name} has no config: nothing says whether it decodes autoregressively")
    decoding = tuple(graph_caches.get(d.block, d) if d.caches is None else d for d in size.decoding)
    size = dataclasses.replace(size, decoding=decoding)
    total, trainable = _totals(program.weights)
    facts = dataclasses.replace(found.model, total_params=total, trainable_params=trainable)
    warnings = [ReportWarning(n, WarningCode.LOADER) for n in program.notes] + list(found.warnings)
    if config_warning is not None:
        warnings.append(config_warning)
    return SourceResult(tuple(blocks), found.misses, facts, tuple(warnings), size)


def _class_config(root_class: str, qualified: str) -> tuple[dict[str, Any] | None, str]:
    """The root class as a config's ``architectures`` entry (and a transformers class's module as
    its ``model_type``: transformers.models.bert.modeling_bert.BertModel is model_type bert), when
    that says whether the model decodes."""
    from mhainspect.frontends.checkpoint.size_inputs import config_causal

    said: dict[str, Any] = {"architectures": [root_class]}
    family = re.match(r"transformers\.models\.([a-z0-9_]+)\.modeling_", qualified)
    if family is not None:
        said["model_type"] = family.group(1)
    if not root_class or config_causal(said, "")[0] is None:
        return None, ""
    return said, f"the root module's class {qualified or root_class}"


def _merged(known: KnownBlocks, traced: list[AttentionBlock], program: ArchiveProgram) -> list[AttentionBlock]:
    """Recognised blocks first, then the graph's blocks that are not theirs, then recognised
    groups without heads that the graph did not find either; a weight several blocks use counts
    in the first (as for a live module)."""
    keys = {w.name: w.storage_key for w in program.weights}
    graph_keys = {t.name: t.storage_key for t in program.graph.weights.values()}
    used: set[str] = set()
    kept: list[AttentionBlock] = []
    for b in traced:
        mine = {graph_keys[p.weight] for p in b.projections if p.weight is not None and p.weight in graph_keys}
        if mine & known.storage_keys:
            continue
        used |= mine
        kept.append(b)
    headless = [b for b in known.headless
                if not any(keys.get(p.weight or "") in used for p in b.projections)]
    metas = {w.name: WeightMeta(w.name, w.shape, w.dtype, w.storage_key) for w in program.weights}
    return count_shared_once(list(known.blocks) + kept + headless, identity_by_name(metas, graph_keys))


def _named(block: AttentionBlock, scopes: dict[str, str], root_class: str) -> AttentionBlock:
    """A block whose attention core is the root module's own code, named after the root's class
    (as a traced module's is)."""
    if root_class and not scopes.get(block.anchor, "x"):
        return dataclasses.replace(block, name=root_class)
    return block


def _known_scale(block: AttentionBlock, classes: Mapping[str, str]) -> AttentionBlock:
    """The scale a known module class applies, where the graph leaves it implicit (nn.MultiheadAttention
    calls scaled_dot_product_attention with its default, 1/sqrt(head_dim))."""
    if block.scale_known or not block.d_k or class_name(classes.get(block.name, "")) != MHA_CLASS:
        return block
    scale, detail = mha_scale(block.d_k)
    return dataclasses.replace(block, scale=scale, scale_known=True,
                               evidence=(*block.evidence, Evidence("scale", scale, EvidenceSource.MODULE, detail)))


def _totals(weights: Sequence[ArchiveWeight]) -> tuple[int, int]:
    """(parameters, trainable parameters), each storage once (tied weights count once)."""
    seen: set[str] = set()
    total = trainable = 0
    for w in weights:
        if not w.is_parameter or w.storage_key in seen:
            continue
        seen.add(w.storage_key)
        n = 1
        for d in w.shape:
            n *= d
        total += n
        if w.trainable:
            trainable += n
    return total, trainable


def _config_beside(tree: Tree, path: str, display: str) -> tuple[dict[str, Any] | None, ReportWarning | None]:
    """The config.json in the archive's folder of ``tree`` (a broken one is not this file's problem)."""
    from mhainspect.frontends.checkpoint.files import config_at
    from mhainspect.sources import beside

    config = config_at(tree, beside(path, "config.json"), required=False)
    if config is None:
        return None, None
    return config, ReportWarning(f"config read from {beside(display, 'config.json')} next to the archive",
                                 WarningCode.CONFIG_BESIDE)


def export_result(tree: Tree, path: str, display: str, blob: Blob) -> SourceResult:
    """A torch.export program (.pt2), the file ``path`` of ``tree`` (``blob``) named ``display``,
    read from its JSON (mhainspect.frontends.archives.export_reader)."""
    from mhainspect.frontends.archives.export_reader import read_export_program

    return archive_result(tree, path, display, read_export_program(display, blob), fmt="torch.export")


def torchscript_result(tree: Tree, path: str, display: str, blob: Blob) -> SourceResult:
    """A TorchScript archive, the file ``path`` of ``tree`` (``blob``) named ``display``, read
    without loading it (mhainspect.frontends.archives.torchscript_reader)."""
    from mhainspect.frontends.archives.known_blocks import ModuleFacts, recognise
    from mhainspect.frontends.archives.torchscript_code import convert
    from mhainspect.frontends.archives.torchscript_reader import read_archive

    archive = read_archive(display, blob)
    graph, notes = convert(archive)
    modules = {m.path: ModuleFacts(m.class_name, m.attrs) for m in archive.modules.values()}
    known = recognise(archive.weights, modules)
    # Code not followed inside a module its attributes already describe costs nothing: no note.
    owners = tuple(f" at '{b.anchor}'" for b in known.blocks)
    kept = tuple(n for n in notes if not any(o in n for o in owners))
    program = ArchiveProgram(graph, tuple(archive.weights.values()), archive.root.class_name.rsplit(".", 1)[-1],
                             kept, {p: m.class_name for p, m in modules.items()})
    return archive_result(tree, path, display, program, fmt="torchscript", known=known)
