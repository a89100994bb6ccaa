"""What a front end hands the size pass (SizeInputs): every stored tensor as metadata, the tensors
each block reads, and per block what the source says about decoding: cache tensors and causal masks
of a graph (matchers.cache), or a Hugging Face config. Here, beside the config reader it asks
(every front end reads a config the checkpoint's way), so the import runs one way."""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from math import prod
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from mhainspect.ir import dtypes
from mhainspect.ir.dtypes import byte_rate as _rate
from mhainspect.ir.limits import MAX_CONFIG_INT, config_int
from mhainspect.results import AttentionBlock, BlockKind, projection_tensor_names
from mhainspect.results.stages import IF_DECODED, BlockDecoding, SizeInputs, StoredTensor

if TYPE_CHECKING:
    from mhainspect.frontends.checkpoint.layer_types import LayerPlan
    from mhainspect.ir.dataflow import GraphIndex
    from mhainspect.ir.graph import Tensor
    from mhainspect.ir.parameters import StoredScan



# ----------------------------------------------------------------------------- config evidence

_LAYER = r"(?:^|[./_])(?:layers?|h|blocks?|block|transformer_blocks?)[./_](\d+)(?:[./_]|$)"
_ANY_INT = r"(?:^|[./_])(\d+)(?:[./_]|$)"
_CAUSAL_ARCH = r"(ForCausalLM|LMHeadModel|ForConditionalGeneration|ForSpeechSeq2Seq)$"
_ENCODER_ARCH = (r"(ForMaskedLM|ForSequenceClassification|ForTokenClassification|ForQuestionAnswering|"
                 r"ForImageClassification|ForMultipleChoice|ForPreTraining|ForAudioClassification|"
                 r"ForCTC|ForNextSentencePrediction)$")
_DECODER_WORDS = ("decoder", "dec.")
_ENCODER_WORDS = ("encoder", "enc.")


def layer_index(block_name: str) -> int | None:
    """The layer number in a block's name (layers.3, h.3, block.3, ...), else its first number."""
    m = re.search(_LAYER, block_name) or re.search(_ANY_INT, block_name)
    return int(m.group(1)) if m else None


def _sub_config(cfg: Mapping[str, Any], block_name: str) -> Mapping[str, Any]:
    # The config reader is imported where a config is read: most graphs come without one.
    from mhainspect.frontends.checkpoint.hf_config import sub_config

    return sub_config(cfg, block_name)[1]


def _window(cfg: Mapping[str, Any], block_name: str) -> tuple[int | None, str]:
    """The block's sliding window from the config: layer_types, sliding_window_pattern, Gemma 2's
    alternation, Qwen2's use_sliding_window/max_window_layers, or sliding_window for every layer."""
    from mhainspect.frontends.checkpoint.layer_types import LayerType  # with the config reader, see _plan

    c = _sub_config(cfg, block_name)
    i = layer_index(block_name)
    plan = _plan(c)
    if plan is not None and plan.chunk is not None and plan.kind(i) is LayerType.CHUNKED:
        # transformers caches a chunked layer as a sliding one of the chunk's size (DynamicSlidingWindowLayer)
        return plan.chunk, f"config layer {i} chunked attention ({plan.said}), {plan.chunk_said}"
    # RecurrentGemma names its window attention_window_size (its attribute_map's sliding_window)
    window = config_int(c.get("sliding_window", c.get("attention_window_size")))
    if window is None:
        return None, ""
    types = c.get("layer_types")
    if isinstance(types, list) and types:
        if i is None or i >= len(types):
            return None, ""
        kind = str(types[i])
        return (window, f"config layer_types[{i}] = {kind}, sliding_window = {window}") if "sliding" in kind else (None, "")
    pattern = config_int(c.get("sliding_window_pattern"))
    if pattern is not None and i is not None:
        sliding = (i + 1) % pattern != 0
        return (window, f"config sliding_window_pattern = {pattern}, sliding_window = {window}") if sliding else (None, "")
    if c.get("model_type") == "gemma2" and i is not None:  # Gemma 2 alternates: even layers slide
        return (window, f"Gemma 2 alternates sliding (even) and full layers, sliding_window = {window}") \
            if i % 2 == 0 else (None, "")
    if c.get("use_sliding_window") is False:
        return None, ""
    max_window_layers = c.get("max_window_layers")
    if c.get("use_sliding_window") is True and isinstance(max_window_layers, int) and i is not None \
            and abs(max_window_layers) <= MAX_CONFIG_INT:
        return (window, f"config max_window_layers = {max_window_layers}, sliding_window = {window}") \
            if i >= max_window_layers else (None, "")
    return window, f"config sliding_window = {window}"


def _plan(c: Mapping[str, Any]) -> LayerPlan | None:
    """The config's layer plan (``layer_types``), for a config of a stack with one."""
    # The layer-type tables are imported where a config is read, as the config reader: most graphs
    # come without one (a checkpoint's front end imports them anyway).
    from mhainspect.frontends.checkpoint.arch_defaults import ConfigView
    from mhainspect.frontends.checkpoint.layer_types import layer_plan

    kind = c.model_type if isinstance(c, ConfigView) else c.get("model_type")
    return layer_plan(c, kind if isinstance(kind, str) else None)


def _prediction_layer(cfg: Mapping[str, Any], block_name: str) -> str | None:
    """Why the block is a multi-token-prediction layer that plain decoding never runs (None when it
    is not one): a block under a module named ``mtp`` / ``mtp_*`` (Qwen3-Next's ``mtp.layers.0``,
    LongCat-Flash's ``model.mtp``), or a layer numbered from num_hidden_layers on, of a config with
    num_nextn_predict_layers (DeepSeek-V3's layer 61, GLM-4.5's 92 / Air's 46). transformers builds num_hidden_layers layers
    and leaves the checkpoint's extra ones unloaded (``_keys_to_ignore_on_load_unexpected``), and
    llama.cpp's converter drops DeepSeek's (``skip_mtp``); only an engine that runs the layer as a
    speculative draft (vLLM, SGLang multi-token prediction) caches its K/V."""
    module = next((part for part in re.split(r"[./]", block_name) if part == "mtp" or part.startswith("mtp_")), None)
    if module is not None:
        return (f"the block is in the checkpoint's multi-token-prediction module '{module}': its weights are stored "
                "and counted, but decoding never runs it (transformers does not load it: Qwen3-Next, Qwen3.5, "
                "ERNIE 4.5, LongCat-Flash, DeepSeek-V4 list it in _keys_to_ignore_on_load_unexpected), so it caches "
                "nothing; an engine that runs it as a speculative draft (vLLM, SGLang) caches it")
    tower = _sub_config(cfg, block_name)
    extra = config_int(tower.get("num_nextn_predict_layers"))
    layers = config_int(tower.get("num_hidden_layers"))
    i = layer_index(block_name)
    if not extra or layers is None or i is None or not layers <= i < layers + extra:
        return None
    return (f"layer {i} is a multi-token-prediction layer (num_hidden_layers = {layers}, num_nextn_predict_layers "
            f"= {extra}): its weights are stored and counted, but decoding runs the first {layers} layers only "
            "(transformers does not load it, llama.cpp's converter drops DeepSeek's), so it caches nothing; an "
            "engine that runs it as a speculative draft (vLLM, SGLang) caches one more layer")


def config_causal(cfg: Mapping[str, Any], block_name: str, cross: bool = False) -> tuple[bool | None, str]:
    """Whether the config says the module ``block_name`` caches K/V during decoding (None: it does
    not say), and why."""
    from mhainspect.frontends.checkpoint.arch_defaults import encoder_model_type
    from mhainspect.frontends.checkpoint.hf_config import TOWER_PREFIXES, decoder_only_model_type, sub_config
    from mhainspect.frontends.checkpoint.layer_types import LayerType

    name = block_name.lower()
    listed = cfg.get("architectures")
    archs = [a for a in listed if isinstance(a, str)] if isinstance(listed, list) else []
    prefix = sub_config(cfg, block_name)[0]
    if prefix in TOWER_PREFIXES and cfg.get("is_encoder_decoder") is not True:
        return False, f"the block belongs to the config's {prefix.rstrip('.')} (an encoder tower, run once per input)"
    draft = _prediction_layer(cfg, block_name)
    if draft is not None:
        return False, draft
    plan = _plan(_sub_config(cfg, block_name)) if not cross else None
    layer = layer_index(block_name)
    source = plan.kv_source(layer) if plan is not None else None
    if plan is not None and source is not None:
        return False, f"layer {layer} reads the K/V cache of layer {source} ({plan.reuse_said}), so it adds none"
    if plan is not None and plan.kind(layer) is LayerType.UNKNOWN and layer is not None:
        return None, (f"layer {layer}'s type in the config ({plan.names[layer]!r}) is not known here: whether and what "
                      "it caches is not told")
    if cfg.get("is_encoder_decoder") is True:
        if cross or any(w in name for w in _DECODER_WORDS):
            return True, "config is_encoder_decoder: a decoder layer"
        if any(w in name for w in _ENCODER_WORDS):
            return False, "config is_encoder_decoder: an encoder layer, run once over the input"
        return None, "config is_encoder_decoder, but the block's name says neither encoder nor decoder"
    if any(re.search(_CAUSAL_ARCH, a) for a in archs):
        return True, f"config architectures {archs[0]}: a causal language model"
    if cfg.get("is_decoder") is True:
        return True, "config is_decoder = true"
    if archs and all(re.search(_ENCODER_ARCH, a) for a in archs):
        return False, f"config architectures {archs[0]}: an encoder, run once over the input"
    tower = _sub_config(cfg, block_name)
    family = decoder_only_model_type(tower) or decoder_only_model_type(cfg)
    if family is not None:
        return True, f"config model_type {family}: a decoder-only language model"
    encoder = encoder_model_type(tower) or encoder_model_type(cfg)
    if encoder is not None:
        where = f"the block's {prefix.rstrip('.')} is " if prefix else ""
        return False, (f"config model_type {encoder}: {where}an encoder that runs once over its input (no is_decoder, "
                       "no causal architecture)")
    return None, "the config does not say whether the model decodes autoregressively (no causal architecture, " \
                 "decoder-only model_type, is_decoder or is_encoder_decoder)"


def config_dtype(cfg: Mapping[str, Any] | None) -> str | None:
    if cfg is None:
        return None
    for key in ("torch_dtype", "dtype"):
        v = cfg.get(key)
        if isinstance(v, str) and dtypes.is_float(v):
            return dtypes.canonical(v)
    return None


def _indexer(plan: LayerPlan | None, layer: int | None, block: AttentionBlock, weighed: bool) -> tuple[int, str]:
    """The key width a block's sparse-attention indexer caches, and what says so (0: none).

    The weights decide where they show indexers (``weighed``: some block of the model holds one): a
    block with one caches its key (its K projection's width), a block without one caches none (a layer
    that reuses an earlier layer's selection: GLM-MoE-DSA's and HunYuan-V4's "shared" ``indexer_types``),
    whatever the config's layer types say. Without indexer weights, an indexed layer of the config
    caches ``index_head_dim``."""
    from mhainspect.frontends.checkpoint.layer_types import LayerType  # with the config reader, see _plan

    if block.indexer is not None:
        return block.indexer.d_k, f"the indexer's key projection under {block.indexer.module}"
    if weighed:
        return 0, ""
    if plan is not None and plan.indexer_width and plan.kind(layer) is LayerType.INDEXED:
        return plan.indexer_width, plan.indexer_said.removeprefix("config.json ")
    return 0, ""


def config_decoding(cfg: Mapping[str, Any] | None, blocks: Sequence[AttentionBlock],
                    compute_dtypes: Mapping[str, tuple[str | None, str]], *, label: str = "config",
                    no_config: str = "") -> tuple[BlockDecoding, ...]:
    """Per block, from a Hugging Face style config: does it cache, its window, its dtype
    (``compute_dtypes``: block -> (dtype, where it came from), the projection's own dtype)."""
    out = []
    weighed = any(b.indexer is not None for b in blocks)
    for b in blocks:
        dtype, dsource = compute_dtypes.get(b.name, (None, ""))
        if cfg is None:
            out.append(BlockDecoding(b.name, None, no_config or "no config says whether the model decodes "
                                     "autoregressively", dtype, dsource))
            continue
        caches, reason = config_causal(cfg, b.name, b.kind == BlockKind.CROSS)
        window, wsource = _window(cfg, b.name) if b.kind != BlockKind.CROSS else (None, "")
        plan = _plan(_sub_config(cfg, b.name)) if b.kind != BlockKind.CROSS else None
        indexer, isource = _indexer(plan, layer_index(b.name), b, weighed) if b.kind != BlockKind.CROSS else (0, "")
        out.append(BlockDecoding(b.name, caches, f"{label}: {reason}", dtype, dsource, window,
                                 f"{label} {wsource.removeprefix('config ')}" if window else "",
                                 indexer_width=indexer, indexer_source=(isource if b.indexer is not None else f"{label} {isource}")
                                 if indexer else ""))
    return tuple(out)


def model_float_dtype(tensors: Iterable[StoredTensor]) -> str | None:
    """The float dtype holding most parameter elements (the compute dtype's last resort)."""
    by_spelling: Counter[str] = Counter()
    for t in tensors:
        if t.is_parameter:
            by_spelling[t.dtype] += t.numel
    counts: Counter[str] = Counter()
    for spelling, n in by_spelling.items():
        if dtypes.is_float(spelling):
            counts[dtypes.canonical(spelling)] += n
    return counts.most_common(1)[0][0] if counts else None


def _graph_tensors(index: GraphIndex, scan: StoredScan) -> tuple[StoredTensor, ...]:
    """Every initializer and Constant as a StoredTensor. Constant values of whole-byte types that
    are not parameters (a 70B export has thousands, nearly all int64 shape scalars) are summed
    into one entry per dtype: their bytes are exact either way, and this keeps the pass cheap."""
    parameter_keys = scan.parameters
    # dtype spelling -> (whole bytes per element, has a size): looked up once per spelling
    kinds: dict[str, tuple[bool, bool]] = {}

    def kind(dtype: str) -> tuple[bool, bool]:
        found = kinds.get(dtype)
        if found is None:
            rate = _rate(dtype)
            found = kinds[dtype] = (rate is not None and rate[0] == 1 and rate[2] == 1, rate is not None)
        return found

    scalars = scan.scalar_constants
    scalar_dtypes = Counter(map(attrgetter("dtype"), scalars))
    if all(kind(dtype)[0] for dtype in scalar_dtypes) and \
            parameter_keys.keys().isdisjoint(map(attrgetter("storage_key"), scalars)):
        items: Iterable[tuple[str, Tensor]] = scan.others  # the one-element values: one element each, by dtype
        constants = Counter(scalar_dtypes)
    else:  # some is listed on its own: every tensor in file order, as the loop alone would
        items, constants = index.graph.weights.items(), Counter()
    out: list[StoredTensor] = []
    for name, t in items:
        key = t.storage_key
        dtype = t.dtype
        plain, sized = kinds.get(dtype) or kind(dtype)
        if plain and t.is_constant_node and key not in parameter_keys:
            constants[dtype] += prod(t.shape)
            continue
        out.append(StoredTensor(name, dtype, prod(t.shape), key, key in parameter_keys,
                                None if sized else t.external_length))
    out.extend(StoredTensor(f"(Constant values, {dtype})", dtype, n, f"constants:{dtype}", False)
               for dtype, n in constants.items())
    return tuple(out)


def graph_size_inputs(index: GraphIndex, blocks: Sequence[AttentionBlock], scan: StoredScan,
                      config: Mapping[str, Any] | None = None, config_label: str = "config.json") -> SizeInputs:
    """SizeInputs for an ONNX / traced graph: every initializer and Constant, the tensors each block
    reads, and per block the decoding evidence (past/present tensors, a causal mask, the config)."""
    # Imported with a graph: a checkpoint's size pass needs no graph matcher (nor the graph IR it imports).
    from mhainspect.matchers.cache import cache_io, causal_mask, compute_dtype, graph_block_tensors

    tensors = _graph_tensors(index, scan)
    fallback = model_float_dtype(tensors)
    io = cache_io(index, blocks)
    compute = {b.name: compute_dtype(index, b, fallback) for b in blocks}
    from_config = {d.block: d for d in config_decoding(config, blocks, compute, label=config_label)} \
        if config is not None else {}
    decoding: list[BlockDecoding] = []
    pending_cross: list[AttentionBlock] = []
    for b in blocks:
        cfg = from_config.get(b.name)
        mask = causal_mask(index, b) if b.kind != BlockKind.CROSS else None
        window, wsource = (cfg.window, cfg.window_source) if cfg is not None else (None, "")
        if mask is not None and mask.window is not None:  # the graph's own mask outranks the config
            window, wsource = mask.window, mask.window_source
        tensors_io = io.get(b.name)
        if tensors_io:
            names = ", ".join(n for n, _ in tensors_io[:4])
            decoding.append(BlockDecoding(b.name, True, f"cache tensors {names} in the graph", tensors_io[0][1],
                                          f"graph cache tensor '{tensors_io[0][0]}'", window, wsource, "cache_tensor"))
        elif b.kind == BlockKind.CROSS:
            pending_cross.append(b)
        else:
            assert mask is not None
            decoding.append(_self_decoding(b, (mask.causal, mask.reason), cfg, compute[b.name], bool(io),
                                           window, wsource))
    self_blocks = {b.name for b in blocks if b.kind != BlockKind.CROSS}
    self_decoding = [d for d in decoding if d.block in self_blocks]
    decoding.extend(_cross_decoding(b, compute[b.name], self_decoding) for b in pending_cross)
    order = {b.name: i for i, b in enumerate(blocks)}
    decoding.sort(key=lambda d: order[d.block])
    return SizeInputs(tensors, graph_block_tensors(index, blocks), _with_indexer_keys(decoding, blocks))


def _with_indexer_keys(decoding: Sequence[BlockDecoding], blocks: Sequence[AttentionBlock]) -> tuple[BlockDecoding, ...]:
    """A caching graph block with a sparse-attention indexer (``matchers.indexer.graph_indexer``) caches
    its key too, in the cache's dtype."""
    indexers = {b.name: b.indexer for b in blocks if b.indexer is not None}
    if not indexers:
        return tuple(decoding)
    return tuple(dataclasses.replace(d, indexer_width=found.d_k, indexer_source=f"the indexer's key behind {found.module}")
                 if d.caches and not d.indexer_width and (found := indexers.get(d.block)) is not None else d
                 for d in decoding)


def _self_decoding(b: AttentionBlock, mask: tuple[bool | None, str], cfg: BlockDecoding | None,
                   dtype: tuple[str | None, str], graph_has_io: bool, window: int | None, wsource: str) -> BlockDecoding:
    """Whether a self-attention block without cache tensors of its own caches: its causal mask
    (with the config saying whether the model is decoded), else no cache where the graph has cache
    tensors elsewhere (an encoder beside a decoder), else the config, else what the mask says."""
    causal, why = mask  # what the causal-mask matcher says, and why
    mask_dtype, mask_dsource = dtype
    if causal and cfg is not None and cfg.caches is False:
        return BlockDecoding(b.name, False, f"{cfg.reason} (a causal mask reaches the scores, but the graph has no "
                             "past/present tensors)")
    if causal:
        # A causal mask says the block can cache, not that it is ever decoded token by token
        # (CLIP's text tower is causal and runs once): say which, when a config tells.
        if_decoded = cfg is None or not cfg.caches
        why = f"{why}; {IF_DECODED if if_decoded or cfg is None else cfg.reason}"
        return BlockDecoding(b.name, True, why, mask_dtype, mask_dsource, window, wsource, "causal_mask", if_decoded)
    if graph_has_io:
        return BlockDecoding(b.name, False, "no past/present tensor of the graph reaches this block and no causal "
                             "mask does: it runs once over the input (an encoder)")
    if cfg is not None and cfg.caches is not None:
        return cfg
    return BlockDecoding(b.name, causal, why, mask_dtype, mask_dsource)


def _cross_decoding(b: AttentionBlock, dtype: tuple[str | None, str],
                    self_decoding: Sequence[BlockDecoding]) -> BlockDecoding:
    """Cross-attention caches its K/V when the self-attention decodes: every caching self block on
    a causal mask alone makes it 'if decoded' too; unknown when some self block's caching is."""
    if any(d.caches is True for d in self_decoding):
        assumed = all(d.if_decoded for d in self_decoding if d.caches)
        return BlockDecoding(b.name, True, "cross-attention of a causal decoder: K/V of the encoder output, computed "
                             "once per input", dtype[0], dtype[1], source="causal_mask", if_decoded=assumed)
    if any(d.caches is None for d in self_decoding):
        return BlockDecoding(b.name, None, "cross-attention of a graph whose self-attention may decode "
                             "autoregressively (see its blocks): whether it caches is up to the caller")
    return BlockDecoding(b.name, False, "cross-attention, and no block of the graph decodes autoregressively")


def metas_size_inputs(weights: Mapping[str, Any], blocks: Sequence[AttentionBlock], config: Mapping[str, Any] | None,
                      parameters: frozenset[str], *, label: str = "config.json", no_config: str = "") -> SizeInputs:
    """Size metadata of a weight list (a checkpoint, a module's parameters and buffers): every
    tensor (``parameters``: the storage keys that are parameters), the tensors under each block's
    module path, and what the config says about decoding (no graph to show a cache or a mask)."""
    # Imported here: the quantization tables matter to checkpoints and modules, not to a graph run.
    from mhainspect.frontends.checkpoint.quantized import kv_cache_dtype

    tensors = tensors_from_metas(weights.values(), parameters)
    fallback = config_dtype(config) or model_float_dtype(tensors)
    # A quantized weight's dtype (fp8, int8) is its storage, not what the block computes and caches in.
    compute = weight_compute_dtypes(blocks, {n: t.dtype for n, t in weights.items() if t.quant is None}, fallback)
    if (kv := kv_cache_dtype(config)) is not None:
        compute = dict.fromkeys(compute, kv)  # the config quantizes the cache itself
    return SizeInputs(tensors, prefix_block_tensors(blocks, weights),
                      config_decoding(config, blocks, compute, label=label, no_config=no_config))


def tensors_from_metas(metas: Iterable[Any], parameter_keys: frozenset[str]) -> tuple[StoredTensor, ...]:
    """StoredTensors from name-keyed weight metadata (checkpoints, module parameters and buffers),
    as stored (a packed quantized weight: its stored elements, not the logical ones)."""
    return tuple(StoredTensor(m.name, m.dtype, m.stored_numel, m.storage_key, m.storage_key in parameter_keys)
                 for m in metas)


def prefix_block_tensors(blocks: Sequence[AttentionBlock], names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Per block, its projections' tensors plus every tensor under the block's module path
    (quantization scales and zero points stored beside a weight: q_proj.scales, .qzeros, ...)."""
    all_names = list(names)
    # The names in order once; each prefix's names are a run of them found by bisection (a scan of
    # every name per block grows with blocks x tensors). Kept in the names' own order.
    ordered = sorted(range(len(all_names)), key=all_names.__getitem__)
    keys = [all_names[i] for i in ordered]
    out: dict[str, tuple[str, ...]] = {}
    for b in blocks:
        own = list(projection_tensor_names(b))
        # Beside the weights only: a bias held on the attention module itself (DeBERTa's q_bias)
        # would make the whole module (its position projections too) a prefix.
        prefixes = {w.rsplit(".", 1)[0] + "." for p in b.projections if (w := p.weight) and "." in w}
        found: list[int] = []
        for pre in prefixes:
            i = bisect.bisect_left(keys, pre)
            while i < len(keys) and keys[i].startswith(pre):
                found.append(ordered[i])
                i += 1
        own.extend(all_names[i] for i in sorted(set(found)))
        out[b.name] = tuple(dict.fromkeys(own))
    return out


def weight_compute_dtypes(blocks: Sequence[AttentionBlock], dtype_of: Mapping[str, str],
                          fallback: str | None) -> dict[str, tuple[str | None, str]]:
    """Per block, the float dtype of its K (else V, Q) projection weight, else ``fallback``."""
    out: dict[str, tuple[str | None, str]] = {}
    for b in blocks:
        found: tuple[str | None, str] = (fallback, "the model's prevailing float dtype") if fallback else (None, "")
        for role in ("k", "v", "qkv", "q"):
            p = next((p for p in b.projections if p.role == role and p.weight in dtype_of), None)
            if p is not None and p.weight is not None and dtypes.is_float(dtype_of[p.weight]):
                found = (dtypes.canonical(dtype_of[p.weight]), f"{role} projection weight '{p.weight}'")
                break
        out[b.name] = found
    return out
