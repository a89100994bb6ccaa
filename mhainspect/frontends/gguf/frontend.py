"""GGUF -> blocks: the front end for llama.cpp files.

The loader (``mhainspect.frontends.gguf.reader``) reads the header and knows what the metadata means; here
the tensors are grouped by llama.cpp's names into attention blocks (blk.N.attn_q/k/v/output, fused
attn_qkv, their biases, per-head attn_q_norm/attn_k_norm, T5's enc./dec. and cross_attn_*,
multimodal v.blk.N) and the shared assembler decides every number, shapes first.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from mhainspect.frontends.checkpoint.size_inputs import prefix_block_tensors, tensors_from_metas
from mhainspect.frontends.gguf.mixers import LayerMixers, classify_layers
from mhainspect.frontends.gguf.reader import (
    KV_CACHE_DTYPE,
    KV_CACHE_DTYPE_SOURCE,
    Decoding,
    GGUFModel,
    architecture,
    context_length,
    decoding,
    expert_claims,
    file_type_warnings,
    latent_offers_for,
    layer_of,
    model_weights,
    namespace,
    offers_for,
    producer,
    read_model_tree,
    swa_warnings,
    weight_meta,
)
from mhainspect.ir.weights import WeightMeta, count_weights
from mhainspect.matchers.experts import weight_experts
from mhainspect.matchers.grouping import GroupedBlock, HeadNorm, IndexerParts, LatentParts, RoleWeights, natural_key
from mhainspect.matchers.sharing import count_shared_once
from mhainspect.matchers.static import assemble
from mhainspect.results import AttentionBlock, Evidence, Miss, ModelFacts
from mhainspect.results.stages import BlockDecoding, MixerLayers, SizeInputs, SourceResult
from mhainspect.sources.blob import Blob
from mhainspect.sources.tree import Tree

# blk.N.attn_q.weight, enc.blk.N.attn_o.bias, dec.blk.N.cross_attn_k.weight, v.blk.N.attn_qkv.weight ...
_ATTN = re.compile(r"^(?P<scope>.+)\.(?P<kind>(?:[a-z]+_)?attn)_(?P<role>q|k|v|qkv|output|out|o)\.(?P<leaf>weight|bias)$")
_HEAD_NORM = re.compile(r"^(?P<scope>.+)\.(?P<kind>(?:[a-z]+_)?attn)_(?P<role>q|k)_norm\.weight$")
_EXTRA = re.compile(r"^(?P<scope>.+)\.(?P<kind>(?:[a-z]+_)?attn)_(?:rel_b|sinks)\.weight$")
# Latent attention (llama.cpp's deepseek2, minicpm3, ...): blk.N.attn_q_a, attn_kv_a_mqa, attn_k_b, ...
_LATENT = re.compile(r"^(?P<scope>.+)\.(?P<kind>(?:[a-z]+_)?attn)_(?P<part>q_a_norm|kv_a_norm|q_a|q_b|kv_a_mqa|kv_b|k_b|v_b)"
                     r"\.(?P<leaf>weight|bias)$")
_LATENT_PARTS = {"q_a": "q_down", "q_b": "q_up", "kv_a_mqa": "kv_down", "kv_b": "kv_up", "k_b": "k_up", "v_b": "v_up",
                 "q_a_norm": "norm", "kv_a_norm": "norm"}
# A sparse-attention indexer beside the layer's attention (llama.cpp's DeepSeek-V3.2 / GLM-DSA names:
# blk.N.indexer.attn_q_b, indexer.attn_k, indexer.k_norm, indexer.proj): the indexer of blk.N.attn.
_INDEXER = re.compile(r"^(?P<scope>.+)\.indexer\.(?P<part>[a-z_]+)\.(?P<leaf>weight|bias)$")
# An output gate (llama.cpp's attn_gate: Laguna's, Step3.5's per-head g_proj, GLM-MoE-DSA's head-wise gate).
_GATE = re.compile(r"^(?P<scope>.+)\.(?P<kind>(?:[a-z]+_)?attn)_gate\.(?P<leaf>weight|bias)$")
_OTHER_ATTN = re.compile(r"^(?P<scope>.+)\.(?P<kind>(?:[a-z]+_)?attn)_[a-z_]+\.weight$")
_ROLE = {"q": "q", "k": "k", "v": "v", "qkv": "qkv", "output": "o", "out": "o", "o": "o"}


@dataclasses.dataclass(frozen=True)
class _Tensors:
    """The attention tensors of one GGUF block, by llama.cpp's names."""

    roles: dict[str, dict[str, WeightMeta]]  # role -> {"weight"/"bias": meta}
    norms: dict[str, WeightMeta]  # "q"/"k" -> per-head norm
    extras: list[WeightMeta]  # relative-position bias, attention sinks
    others: list[str]  # other attn_* tensors (latent K/V, ...)
    latent: dict[str, dict[str, WeightMeta]] = dataclasses.field(default_factory=dict)  # part -> {leaf: meta}
    latent_norms: list[WeightMeta] = dataclasses.field(default_factory=list)
    indexer: dict[str, dict[str, WeightMeta]] = dataclasses.field(default_factory=dict)  # part -> {leaf: meta}
    gate: dict[str, WeightMeta] = dataclasses.field(default_factory=dict)  # attn_gate: {leaf: meta}


def group_tensors(model: GGUFModel) -> dict[str, _Tensors]:
    """Attention tensors by block name (``{scope}.{kind}``: blk.3.attn, dec.blk.0.cross_attn)."""
    out: dict[str, _Tensors] = {}

    def block(m: re.Match[str]) -> _Tensors:
        name = f"{m.group('scope')}.{m.group('kind')}"
        return out.setdefault(name, _Tensors({}, {}, [], []))

    for source, t in model.tensors:
        meta = weight_meta(source, t)
        if ".indexer." in t.name and (m := _INDEXER.match(t.name)) is not None:  # before its attn_* names
            out.setdefault(f"{m.group('scope')}.attn", _Tensors({}, {}, [], [])).indexer.setdefault(
                m.group("part"), {})[m.group("leaf")] = meta
        elif (m := _LATENT.match(t.name)) is not None:
            part = _LATENT_PARTS[m.group("part")]
            if part == "norm":
                block(m).latent_norms.append(meta)
            else:
                block(m).latent.setdefault(part, {})[m.group("leaf")] = meta
        elif (m := _ATTN.match(t.name)) is not None:
            block(m).roles.setdefault(_ROLE[m.group("role")], {})[m.group("leaf")] = meta
        elif (m := _HEAD_NORM.match(t.name)) is not None:
            block(m).norms[m.group("role")] = meta
        elif (m := _EXTRA.match(t.name)) is not None:
            block(m).extras.append(meta)
        elif (m := _GATE.match(t.name)) is not None:
            block(m).gate[m.group("leaf")] = meta

        elif (m := _OTHER_ATTN.match(t.name)) is not None and not t.name.endswith("_norm.weight"):
            block(m).others.append(t.name)
    return out


_MAIN_ATTN = re.compile(r"^blk\.(\d+)\.attn$")


def _layer_mixers(model: GGUFModel, arch: str, groups: Mapping[str, _Tensors]) -> LayerMixers:
    """Each main-stack layer's mixer (``mhainspect.frontends.gguf.mixers``), told which layers hold
    attention tensors and whether those include an output projection."""
    attention = {int(m.group(1)): "o" in found.roles for name, found in groups.items()
                 if (m := _MAIN_ATTN.match(name)) is not None}
    return classify_layers(model, namespace(arch, "blk.0", model.metadata), attention)


def blocks_from_model(model: GGUFModel) -> tuple[list[AttentionBlock], dict[str, Decoding], list[Miss], list[str],
                                                 tuple[MixerLayers, ...]]:
    """Blocks, what each does during decoding, near misses, warnings and the layers that mix tokens
    without softmax attention."""
    arch, warnings = architecture(model.metadata)
    blocks: list[AttentionBlock] = []
    decodings: dict[str, Decoding] = {}
    misses: list[Miss] = []
    groups = group_tensors(model)
    mixers = _layer_mixers(model, arch, groups)
    for name, found in sorted(groups.items(), key=lambda kv: natural_key(kv[0])):
        have = {r for r, tensors in found.roles.items() if "weight" in tensors}
        scope, kind = name.rsplit(".", 1)
        layer = layer_of(scope)
        if _MAIN_ATTN.match(name) is not None and layer in mixers.owned:
            continue  # a recurrent mixer's own projections, listed with the mixer
        ns = namespace(arch, scope, model.metadata)
        swa_layout = ns.swa()
        swa = bool(swa_layout is not None and layer is not None and layer < len(swa_layout.slides)
                   and swa_layout.slides[layer])
        cross = kind.startswith("cross")
        latent = _latent_group(name, found)
        if latent is not None:
            offers = latent_offers_for(ns, layer) if arch else []
            blocks.append(assemble(latent, offers, matcher="gguf", no_heads_reason="GGUF metadata gives no head count "
                                   f"for '{name}' ({ns.prefix}attention.head_count) and no per-head tensor fixes it"))
            decodings[name] = decoding(name, cross, ns, layer, model.metadata, latent_expanded=latent.latent is not None
                                       and latent.latent.kv_up is not None)
            continue
        if not ("qkv" in have or ("q" in have and have & {"k", "v"})):
            listed = sorted(t.name for r in (*found.roles.values(), *found.latent.values()) for t in r.values()) \
                + found.others
            d = decoding(name, cross, ns, layer, model.metadata)
            misses.append(Miss("gguf", name, "attention tensors without separate K/V projections or a fused QKV "
                                             f"(e.g. latent K/V, MLA): {', '.join(listed[:6])}", caches=d.caches))
            continue
        role_weights = tuple(RoleWeights(r, f"{name}_{r}", found.roles[r]["weight"], found.roles[r].get("bias"))
                             for r in ("q", "k", "v", "qkv", "o") if r in have and (r != "qkv" or "q" not in have))
        # attn_q_norm / attn_k_norm: the block's Q/K norms (counted in Q and K; a per-head one fixes d_k).
        norms = tuple(HeadNorm(f"{name}_{r}_norm", r, found.norms[r], None) for r in ("q", "k") if r in found.norms)
        group = GroupedBlock(name, name, role_weights, tuple(found.extras), cross=cross, head_norms=norms,
                             indexer=_indexer_parts(name, found), gates=_gate(name, found))
        offers = offers_for(ns, layer, swa) if arch else []
        blocks.append(assemble(group, offers, matcher="gguf", no_heads_reason="GGUF metadata gives no head count "
                               f"for '{name}' ({ns.prefix}attention.head_count) and no per-head tensor fixes it"))
        decodings[name] = decoding(name, cross, ns, layer, model.metadata)
    return blocks, decodings, misses, warnings, mixers.mixers


def _latent_group(name: str, found: _Tensors) -> GroupedBlock | None:
    """A latent-attention block's tensors (deepseek2: attn_q_a/attn_q_b or attn_q, attn_kv_a_mqa,
    attn_kv_b or attn_k_b + attn_v_b, attn_output) as a grouped block, or None."""
    parts = found.latent

    def rw(part: str, tensors: Mapping[str, WeightMeta] | None) -> RoleWeights | None:
        if tensors is None or "weight" not in tensors:
            return None
        return RoleWeights(part, f"{name}_{part}", tensors["weight"], tensors.get("bias"))

    kv_down, kv_up = rw("kv_down", parts.get("kv_down")), rw("kv_up", parts.get("kv_up"))
    k_up, v_up = rw("k_up", parts.get("k_up")), rw("v_up", parts.get("v_up"))
    q = rw("q", parts.get("q_up") or found.roles.get("q"))
    o = rw("o", found.roles.get("o"))
    if kv_down is None or q is None or (kv_up is None and (k_up is None or v_up is None)):
        return None
    latent = LatentParts(kv_down, kv_up, k_up, v_up, rw("q_down", parts.get("q_down")), tuple(found.latent_norms))
    return GroupedBlock(name, name, tuple(r for r in (q, o) if r is not None), tuple(found.extras), latent=latent,
                        indexer=_indexer_parts(name, found), gates=_gate(name, found))


def _gate(name: str, found: _Tensors) -> tuple[RoleWeights, ...]:
    """The block's ``attn_gate`` as a candidate output gate (taken when its widths fit: ``matchers.gate``)."""
    weight = found.gate.get("weight")
    return (RoleWeights("gate", f"{name}_gate", weight, found.gate.get("bias")),) if weight is not None else ()


def _indexer_parts(name: str, found: _Tensors) -> IndexerParts | None:
    """The layer's sparse-attention indexer (``blk.N.indexer.*``) as the block's ``IndexerParts``: its
    K projection (``attn_k``, ``k_proj``), its other projections and every tensor; None without a K."""
    scope = name.rpartition(".")[0]

    def rw(part: str) -> RoleWeights:
        tensors = found.indexer[part]
        return RoleWeights(part, f"{scope}.indexer.{part}", tensors["weight"], tensors.get("bias"))

    keys = [p for p, t in found.indexer.items()
            if "weight" in t and (_ROLE.get(p.removeprefix("attn_")) == "k" or p == "k_proj")]
    if len(keys) != 1:
        return None
    others = tuple(rw(p) for p, t in sorted(found.indexer.items()) if p != keys[0] and "weight" in t
                   and len(t["weight"].shape) == 2)
    tensors = tuple(m for _, t in sorted(found.indexer.items()) for _, m in sorted(t.items()))
    return IndexerParts(f"{scope}.indexer", rw(keys[0]), others, tensors)


def _with_decoding(block: AttentionBlock, d: Decoding) -> AttentionBlock:
    """The decoding facts on the block itself (sliding window; why a block caches nothing)."""
    evidence = block.evidence
    if d.window is not None:
        evidence += (Evidence("sliding_window", d.window, "gguf", d.window_source),)
    latent = block.latent
    if latent is not None and d.latent_expanded:  # llama.cpp's cache of a file with the unsplit attn_kv_b
        latent = dataclasses.replace(latent, runtime_expands=True)
    source = _at_layer(block.name, d.kv_from) if d.kv_from is not None else None
    if source is not None:  # a layer reusing another's cache: which block's, said (counted there once)
        evidence += (Evidence("kv_cache_shared_from", d.kv_from, "gguf", f"{d.reason}: the cache of {source}"),)
    return dataclasses.replace(block, sliding_window=d.window, kv_cache_reason=None if d.caches else d.reason,
                               evidence=evidence, latent=latent, kv_cache_shared_from=source)


def _at_layer(name: str, layer: int) -> str | None:
    """``name`` (``blk.N.attn``, ``dec.blk.N.attn``) with its layer number N replaced by ``layer``."""
    parts = name.split(".")
    at = next((i for i, p in enumerate(parts) if p.isdigit()), None)
    return None if at is None else ".".join([*parts[:at], str(layer), *parts[at + 1:]])


def gguf_tree_result(tree: Tree, path: str, display: str, blob: Blob, *, remote: bool) -> SourceResult:
    """The GGUF file ``path`` of any tree (local or remote), named ``display``: its header and those
    of the other parts of a split model."""
    return gguf_model_result(read_model_tree(tree, path, display, blob, remote), display)


def gguf_model_result(model: GGUFModel, path: str) -> SourceResult:
    """Blocks, near misses and model facts of a model whose headers are read (local or remote)."""
    blocks, decodings, misses, warnings, mixers = blocks_from_model(model)
    # A tensor several blocks name counts in the first: the one sharing rule of every front end,
    # which results.report.attention_params relies on.
    blocks = count_shared_once([_with_decoding(b, decodings[b.name]) for b in blocks])
    arch, _ = architecture(model.metadata)
    warnings += swa_warnings(model.metadata, arch) + file_type_warnings(model.metadata)
    positions = context_length(model.metadata, arch)
    weights = model_weights(model)
    facts = ModelFacts(path=path, format="gguf", total_params=count_weights(weights),
                       producer=producer(model.metadata, arch), max_positions=positions,
                       max_positions_source=f"GGUF {arch}.context_length = {positions:,}" if positions else "")
    experts = weight_experts(weights, frozenset(m.storage_key for m in weights.values() if m.is_parameter),
                             expert_claims(model.metadata, arch))
    return SourceResult(tuple(blocks), tuple(misses), facts, tuple(warnings),
                        size_inputs(model, blocks, decodings, mixers), experts)


def size_inputs(model: GGUFModel, blocks: list[AttentionBlock], decodings: Mapping[str, Decoding],
                mixers: tuple[MixerLayers, ...] = ()) -> SizeInputs:
    """What mhainspect.analysis.size needs: every tensor (GGML types sized by their blocks; float and
    block-quantized tensors are parameters), each block's tensors, and the metadata's decoding facts
    with llama.cpp's default cache type."""
    weights = model_weights(model)
    parameters = frozenset(m.storage_key for m in weights.values() if m.is_parameter)
    decoding = tuple(BlockDecoding(b.name, d.caches, d.reason, KV_CACHE_DTYPE, KV_CACHE_DTYPE_SOURCE, d.window,
                                   d.window_source, "gguf", indexer_width=b.indexer.d_k if b.indexer else 0,
                                   indexer_source=f"the indexer's key projection under {b.indexer.module}"
                                   if b.indexer else "")
                     for b in blocks if (d := decodings.get(b.name)) is not None)
    return SizeInputs(tensors_from_metas(weights.values(), parameters), prefix_block_tensors(blocks, weights),
                      decoding, mixers)
