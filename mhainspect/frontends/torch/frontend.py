"""nn.Module -> blocks: known modules first, tracing for the rest, nothing counted twice.

The front end for PyTorch modules. Known modules are recognised from what the module says
(``mhainspect.frontends.torch.modules``: parameter metadata, head attributes, config) through the
same name grouping and assembly as checkpoints (``mhainspect.matchers.static``); the rest is
traced to a graph and matched like an ONNX file. Imports torch; only loaded when a module (or a
factory spec) is audited.
"""

from __future__ import annotations

import dataclasses
import inspect as pyinspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from mhainspect.errors import InputError
from mhainspect.frontends.checkpoint.hf_config import max_positions, offers_from_config
from mhainspect.frontends.checkpoint.mixers import classify_mixers, with_mixers
from mhainspect.frontends.checkpoint.quantized import quantization_notes
from mhainspect.frontends.checkpoint.size_inputs import metas_size_inputs
from mhainspect.frontends.graphs.result import graph_result
from mhainspect.frontends.torch.fx import storage_key, trace_module
from mhainspect.frontends.torch.modules import (
    ModuleTensors,
    config_dict,
    count_parameters,
    is_cross_module,
    module_offers,
    module_scale,
    module_tensors,
)
from mhainspect.ir.weights import HeadOffers, count_weights, identity_by_name
from mhainspect.matchers.grouping import GroupedBlock, group_attention
from mhainspect.matchers.sharing import count_shared_once
from mhainspect.matchers.static import assemble
from mhainspect.results import (
    AttentionBlock,
    BlockKind,
    Matcher,
    Miss,
    ModelFacts,
    ReportWarning,
    WarningCode,
    coded,
)
from mhainspect.results.stages import BlockDecoding, SizeInputs, SourceResult

EXAMPLE_BATCH, EXAMPLE_SEQ = 2, 8


@dataclass(frozen=True)
class KnownModules:
    """What the recogniser found without tracing."""

    blocks: tuple[AttentionBlock, ...]
    storage_keys: frozenset[str]  # weights of recognised blocks (a traced block using them is a duplicate)
    covered: tuple[str, ...]  # module paths of recognised blocks
    pending: tuple[str, ...]  # attention-like modules left for tracing
    # Name-grouped blocks whose heads no attribute or config gives (MHA004), used when tracing
    # does not find them either.
    headless: tuple[AttentionBlock, ...] = ()




def recognise(model: nn.Module, tensors: ModuleTensors | None = None) -> KnownModules:
    """Known attention modules of ``model`` as AttentionBlocks, in module order (``tensors``: its
    module_tensors, when the caller has them)."""
    modules = dict(model.named_modules(remove_duplicate=False))
    order = {name: i for i, name in enumerate(modules)}
    metas = (tensors or module_tensors(model)).for_grouping()
    root_cfg = config_dict(model)
    blocks: list[tuple[int, AttentionBlock]] = []
    keys: set[str] = set()
    covered: list[str] = []
    pending: list[str] = []
    headless: list[tuple[int, AttentionBlock]] = []
    for group in group_attention(metas):
        owner = modules.get(group.owner)
        if owner is None:
            continue
        offers = _module_group_offers(owner, group, group.owner or type(model).__name__, config_dict(owner) or root_cfg)
        block = _module_block(model, owner, group, offers)
        if not offers:
            pending.append(group.owner)
            headless.append((order.get(group.owner, len(order)), block))
            continue
        blocks.append((order.get(group.owner, len(order)), block))
        covered.append(group.name)
        keys.update(_group_storage(group))
    pending.extend(name for name in _unrecognised_attention(modules, covered) if name not in pending)
    blocks.sort(key=lambda x: x[0])
    headless.sort(key=lambda x: x[0])
    return KnownModules(tuple(b for _, b in blocks), frozenset(keys), tuple(covered), tuple(pending),
                        tuple(b for _, b in headless))


def _module_group_offers(owner: nn.Module, group: GroupedBlock, label: str,
                         cfg: Mapping[str, Any] | None) -> list[HeadOffers]:
    """What the owning module's attributes, then its (or the root's) config, say about the group's heads."""
    offers: list[HeadOffers] = []
    own = module_offers(owner, label)
    if own is not None:
        offers.append(own)
    if cfg is not None:
        cfg_offer = offers_from_config(cfg, group.name, label="config")
        if cfg_offer.num_heads or cfg_offer.head_dim or cfg_offer.alternatives:
            offers.append(cfg_offer)
    return offers


def _module_block(model: nn.Module, owner: nn.Module, group: GroupedBlock, offers: list[HeadOffers]) -> AttentionBlock:
    """The group's block from the offers; cross-attention by the group or the module; the root's
    class name for a block of the root module itself."""
    label = group.owner or type(model).__name__
    scale, scale_detail = module_scale(owner)
    block = assemble(group, offers, matcher=Matcher.MODULE, scale=scale, scale_detail=scale_detail,
                     no_heads_reason=f"{type(owner).__name__} at '{label}' has projections but no head count "
                                     "attribute or config, and tracing did not find it")
    if group.cross or is_cross_module(owner):
        block = _as_cross(block)
    if not block.name:
        block = _renamed(block, type(model).__name__)
    return block


def _group_storage(group: GroupedBlock) -> set[str]:
    """Storage keys of the group's projection weights and biases."""
    keys = {r.weight.storage_key for r in group.roles}
    keys.update(r.bias.storage_key for r in group.roles if r.bias is not None)
    keys.update(b.storage_key for _, b in group.role_biases)
    return keys


def _unrecognised_attention(modules: dict[str, nn.Module], covered: list[str]) -> list[str]:
    """Modules named like attention, with parameters, neither inside nor around a recognised one."""
    found = []
    for name, m in modules.items():
        cls = type(m).__name__.lower()
        if ("attention" in cls or "attn" in cls) and not _inside(name, covered) and not _contains(name, covered):
            if any(True for _ in m.parameters(recurse=True)):
                found.append(name)
    return found


def _inside(name: str, scopes: list[str]) -> bool:
    return any(s == "" or name == s or name.startswith(s + ".") for s in scopes)


def _contains(name: str, scopes: list[str]) -> bool:
    return any(name == "" or s.startswith(name + ".") for s in scopes)


def _as_cross(block: AttentionBlock) -> AttentionBlock:
    return dataclasses.replace(block, kind=BlockKind.CROSS)


def _renamed(block: AttentionBlock, name: str) -> AttentionBlock:
    return dataclasses.replace(block, name=name)


@dataclass(frozen=True)
class _Traced:
    """What tracing the module adds: the blocks of attention no recognised module holds, the
    traced graph's near misses and warnings, and what sizing them needs."""

    blocks: list[AttentionBlock] = field(default_factory=list)
    misses: list[Miss] = field(default_factory=list)
    warnings: list[ReportWarning] = field(default_factory=list)
    num_nodes: int = 0
    used_keys: set[str] = field(default_factory=set)  # storage the traced blocks use
    weight_keys: dict[str, str] = field(default_factory=dict)  # the traced graph's weight names -> storage
    graph_causal: dict[str, BlockDecoding] = field(default_factory=dict)  # blocks the graph shows caching


def module_result(model: nn.Module, example_inputs: Any = None, *, trace: bool | None = None,
                  name: str | None = None) -> SourceResult:
    label = name or type(model).__name__
    tensors = module_tensors(model)
    known = recognise(model, tensors)
    warnings = [ReportWarning(note, WarningCode.LOADER) for note in quantization_notes(tensors.metas)]
    want = trace if trace is not None else (example_inputs is not None or bool(known.pending) or not known.blocks)
    traced = _trace(model, example_inputs, known, label) if want else _Traced()
    warnings.extend(traced.warnings)
    headless = [b for b in known.headless if not _uses(b, model, traced.used_keys)]
    # A module several blocks use under different names (one Linear in two attentions) counts in
    # the first, as in a graph: by storage, whichever door found the block.
    blocks = count_shared_once(list(known.blocks) + traced.blocks + headless,
                               identity_by_name(tensors.metas, traced.weight_keys))
    # torchinfo's split: a live module knows which parameters train (a file does not).
    total = (count_weights({n: m for n, m in tensors.metas.items() if m.storage_key in tensors.parameters})
             if tensors.quantized else count_parameters(model))
    positions, positions_source = max_positions(config_dict(model), "the model's config")
    facts = ModelFacts(path=label, format="torch", total_params=total, num_nodes=traced.num_nodes,
                       producer=f"torch {torch.__version__}",
                       trainable_params=count_parameters(model, trainable_only=True),
                       max_positions=positions, max_positions_source=positions_source)
    # Linear-attention, state-space and convolution layers are no attention blocks: listed apart.
    config = config_dict(model)
    blocks, misses, mixers = classify_mixers(config, tensors.metas, blocks, traced.misses)
    size = with_mixers(module_size_inputs(model, blocks, traced.graph_causal, tensors), mixers, config,
                       "the model's config")
    return SourceResult(tuple(blocks), tuple(misses), facts, tuple(warnings), size)


def _trace(model: nn.Module, example_inputs: Any, known: KnownModules, label: str) -> _Traced:
    """Trace the module (on made-up inputs when none are given) and keep the traced blocks that no
    recognised module already gives; a module that cannot be traced is a warning."""
    warnings: list[ReportWarning] = []
    inputs = example_inputs
    if inputs is None:
        inputs, how = make_example_inputs(model)
        if inputs is not None:
            warnings.append(ReportWarning(f"traced on made-up inputs: {how}", WarningCode.MADE_UP_INPUTS))
    if inputs is None:
        if known.pending:
            warnings.append(ReportWarning("not traced (pass example_inputs to find custom attention): "
                                          + ", ".join(p or label for p in known.pending), WarningCode.NOT_TRACED))
        return _Traced(warnings=warnings)
    try:
        graph = trace_module(model, inputs, source=label)
    except InputError as exc:
        warnings.append(ReportWarning(f"not traced: {exc}", WarningCode.NOT_TRACED))
        return _Traced(warnings=warnings)
    found = graph_result(graph, path=label, fmt="torch")
    warnings.extend(coded(found.warnings))
    out = _Traced(misses=list(found.misses), warnings=warnings, num_nodes=len(graph.nodes),
                  weight_keys={n: t.storage_key for n, t in graph.weights.items()})
    scopes = {n.name: n.scope for n in graph.nodes}
    for b in found.blocks:
        keys = {graph.weights[p.weight].storage_key for p in b.projections
                if p.weight is not None and p.weight in graph.weights}
        if keys & known.storage_keys:
            continue  # a recognised module: its block is already there
        out.used_keys.update(keys)
        decided = next((d for d in (found.size.decoding if found.size else ()) if d.block == b.name and d.caches), None)
        if not scopes.get(b.anchor, "x"):
            # The attention core is the root module's own code: name the block after it.
            b = dataclasses.replace(b, name=type(model).__name__)
        if decided is not None:
            out.graph_causal[b.name] = dataclasses.replace(decided, block=b.name)
        out.blocks.append(b)
    return out


def module_size_inputs(model: nn.Module, blocks: list[AttentionBlock],
                       graph_causal: dict[str, BlockDecoding], tensors: ModuleTensors | None = None) -> SizeInputs:
    """Size metadata of a module: its parameters and buffers (rotary tables, masks: overhead), the
    tensors under each block's module path, and what the model's config says about decoding;
    ``graph_causal``: traced blocks whose graph shows them caching, used where the config does not
    decide."""
    # A module says what its parameters are: buffers are overhead (but a quantized Linear's weight).
    tensors = tensors or module_tensors(model)
    size = metas_size_inputs(tensors.metas, blocks, config_dict(model), tensors.parameters, label="the model's config",
                             no_config=f"{type(model).__name__} has no config: nothing says whether it decodes "
                                       "autoregressively")
    if not graph_causal:
        return size
    decoding = tuple(graph_causal.get(d.block, d) if d.caches is None else d for d in size.decoding)
    return dataclasses.replace(size, decoding=decoding)


def _uses(block: AttentionBlock, model: nn.Module, keys: set[str]) -> bool:

    params = dict(model.named_parameters(remove_duplicate=False))
    for p in block.projections:
        t = params.get(p.weight or "")
        if t is not None and storage_key(t) in keys:
            return True
    return False


def _accepts(model: nn.Module, argument: str) -> bool:
    try:
        return argument in pyinspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def make_example_inputs(model: nn.Module) -> tuple[Any, str]:
    """Inputs for tracing when the caller gave none: token ids for transformers models, else one
    [2, 8, d] tensor per required forward argument (d: the first Linear's in_features)."""
    first = next(iter(model.parameters()), None)
    device = first.device if first is not None else torch.device("cpu")
    dtype = first.dtype if first is not None and first.is_floating_point() else torch.float32
    config = getattr(model, "config", None)
    main = getattr(model, "main_input_name", None)
    if config is not None and main == "input_ids":
        ids = torch.zeros(EXAMPLE_BATCH, EXAMPLE_SEQ, dtype=torch.long, device=device)
        if _accepts(model, "use_cache"):  # a KV-cache object in the outputs cannot be traced
            return {"input_ids": ids, "use_cache": False}, (f"input_ids of shape [{EXAMPLE_BATCH}, {EXAMPLE_SEQ}], "
                                                            "use_cache=False")
        return {"input_ids": ids}, f"input_ids of shape [{EXAMPLE_BATCH}, {EXAMPLE_SEQ}]"
    if config is not None and main == "pixel_values":
        size = getattr(config, "image_size", None)
        channels = getattr(config, "num_channels", 3)
        if isinstance(size, int) and isinstance(channels, int):
            px = torch.zeros(EXAMPLE_BATCH, channels, size, size, dtype=dtype, device=device)
            return {"pixel_values": px}, f"pixel_values of shape [{EXAMPLE_BATCH}, {channels}, {size}, {size}]"
    try:
        sig = pyinspect.signature(model.forward)
    except (TypeError, ValueError):
        return None, ""
    required = [p for p in sig.parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not required:
        return None, ""
    leaf = next((m for m in model.modules() if isinstance(m, (nn.Linear, nn.Embedding, nn.MultiheadAttention))),
                None)
    if isinstance(leaf, nn.Embedding):
        ids = torch.zeros(EXAMPLE_BATCH, EXAMPLE_SEQ, dtype=torch.long, device=device)
        return (ids,) * len(required), f"{len(required)} token-id tensor(s) of shape [{EXAMPLE_BATCH}, {EXAMPLE_SEQ}]"
    width = leaf.in_features if isinstance(leaf, nn.Linear) else getattr(leaf, "embed_dim", None)
    if not isinstance(width, int):
        return None, ""
    x = torch.zeros(EXAMPLE_BATCH, EXAMPLE_SEQ, width, dtype=dtype, device=device)
    return (x,) * len(required), (f"the same [{EXAMPLE_BATCH}, {EXAMPLE_SEQ}, {width}] tensor for "
                                  + ", ".join(p.name for p in required))
