"""Size in bytes: the stored weights (by dtype, parameters vs overhead, per block) and the KV cache.

One module for every front end. A front end (ONNX graph, PyTorch module, checkpoint) supplies
metadata only -- each stored tensor's dtype, element count, storage key and whether it is a
parameter, the tensors each block uses, and per block what the source says about decoding (a
past/present tensor, a causal mask, a config) -- and ``apply`` turns that into the report's size
fields. Nothing here reads tensor data.

Rules (each number in one place):

- a tensor occupies ``dtypes.nbytes(dtype, numel)`` bytes (packed int4 and GGML block types
  rounded up per tensor); tensors sharing a storage key count once;
- ``weight_bytes`` is every stored tensor, ``weight_bytes_overhead`` the part that is not a
  parameter (quantization scales and zero points, rotary tables, shape constants, buffers);
- a block that caches holds ``num_kv_heads · (d_k + d_v) · itemsize`` bytes per token (per
  encoder token for cross-attention); a sliding-window layer holds at most ``window - 1`` past
  tokens between decoding steps (what transformers' sliding cache keeps; the token being decoded
  adds its own K/V inside the step).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from math import prod
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from mhainspect import dtypes
from mhainspect.dataflow import SHAPE_INPUTS
from mhainspect.findings import AttentionBlock, CacheStatus, Evidence, KVCache, Miss, Report
from mhainspect.source_result import BlockDecoding, SizeInputs, StoredTensor
from mhainspect.source_result import byte_rate as _rate

if TYPE_CHECKING:
    from mhainspect.accounting import StoredScan
    from mhainspect.dataflow import GraphIndex
    from mhainspect.graph import Node, Tensor

__all__ = [
    "BlockDecoding",
    "SizeInputs",
    "SizeOptions",
    "StoredTensor",
    "apply",
    "cache_bytes_at_context",
    "cache_reason",
    "check_kv_dtype",
    "format_bytes",
    "parse_size",
    "layer_bytes",
    "config_causal",
    "config_decoding",
    "graph_size_inputs",
    "layer_index",
    "metas_size_inputs",
    "with_options",
]


@cache
def _canonical(dtype: str) -> str:
    return dtypes.canonical(dtype)


@dataclass(frozen=True, eq=False)  # never compared or hashed: no __eq__/__hash__ built at import
class SizeOptions:
    """--context, --batch, --kv-dtype."""

    context: int | None = None
    batch: int = 1
    kv_dtype: str | None = None


# ----------------------------------------------------------------------------- bytes as typed and shown
# Pattern strings here and below are compiled by re on first use (its cache): a plain run parses no
# size option and reads no config, and compiling them all cost every run ~1 ms.
_SIZE_RE = r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*"


def parse_size(text: str) -> int:
    """Bytes as typed on a command line: '2G' -> 2 GiB, '512M', '4GiB', '100k', '1.5G', '4096'.

    K/M/G/T are powers of 1024 whether or not an 'i' follows (512M = 512MiB = 536,870,912):
    memory is sized in binary units. Raises ValueError for anything else or below 1 byte.
    """
    m = re.fullmatch(_SIZE_RE, text)
    if not m:
        raise ValueError(f"invalid size '{text}': expected bytes or a number with K, M, G or T (512M, 2G, 4GiB)")
    value = float(m.group(1)) * 1024 ** " KMGT".index((m.group(2) or " ").upper())
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"invalid size '{text}': must be at least 1 byte")
    return int(value)


def format_bytes(n: int) -> str:
    """Binary units for display, one decimal where it says something: 1536 -> '1.5 KiB',
    2048 -> '2 KiB'; exact bytes below 1 KiB ('1,023 B'). The one byte formatter of every output."""
    if abs(n) < 1024:
        return f"{n:,} B"
    value = n / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.1f} {unit}".replace(".0 ", " ")
        value /= 1024
    return f"{value:.1f} TiB".replace(".0 ", " ")


# ----------------------------------------------------------------------------- weights


@dataclass(frozen=True, eq=False)  # never compared or hashed: no __eq__/__hash__ built at import
class WeightSizes:
    total: int
    by_dtype: tuple[tuple[str, int], ...]
    overhead: int
    per_block: Mapping[str, int]
    unsized: tuple[str, ...]  # tensors whose dtype has no size (not counted)


def weight_sizes(tensors: Iterable[StoredTensor], blocks: Sequence[AttentionBlock],
                 block_tensors: Mapping[str, tuple[str, ...]]) -> WeightSizes:
    """Bytes of every stored tensor, shared storage once; per block, a tensor counts in the first
    block that uses it (as parameters do), so the blocks never add up past the model.

    Plain types (whole bytes per element) are summed as elements per (dtype, parameter or not)
    and multiplied once; packed and block types are rounded up tensor by tensor."""
    tensors = tuple(tensors)
    seen: set[str] = set()
    seen_add = seen.add
    elements: Counter[tuple[str, bool]] = Counter()
    rounded: Counter[tuple[str, bool]] = Counter()  # bytes of packed / block-typed tensors
    unsized: list[str] = []
    for t in tensors:
        key = t.storage_key
        if key in seen:
            continue
        seen_add(key)
        dtype = t.dtype
        rate = _rate(dtype)
        if rate is None:
            if t.stored_bytes is None:
                unsized.append(t.name)
            else:
                rounded[dtype, t.is_parameter] += t.stored_bytes
        elif rate[0] == 1 and rate[2] == 1:
            elements[dtype, t.is_parameter] += t.numel
        else:
            rounded[dtype, t.is_parameter] += t.nbytes or 0
    by_dtype: Counter[str] = Counter()
    total = overhead = 0
    for (dtype, is_parameter), n in elements.items():
        rate = _rate(dtype)
        rounded[dtype, is_parameter] += n * rate[1] if rate is not None else 0
    for (dtype, is_parameter), n in rounded.items():
        total += n
        by_dtype[_canonical(dtype)] += n
        overhead += 0 if is_parameter else n
    per_block: dict[str, int] = {}
    if block_tensors:
        wanted = {n for names in block_tensors.values() for n in names}
        by_name = {t.name: t for t in tensors if t.name in wanted}
        counted: set[str] = set()
        for b in blocks:
            names = block_tensors.get(b.name, ())
            if not names:
                continue
            size = 0
            for name in names:
                used = by_name.get(name)
                if used is None or used.storage_key in counted:
                    continue
                counted.add(used.storage_key)
                size += used.nbytes or 0
            per_block[b.name] = size
    ordered = tuple(sorted(((k, v) for k, v in by_dtype.items() if v), key=lambda kv: (-kv[1], kv[0])))
    return WeightSizes(total, ordered, overhead, per_block, tuple(unsized))


def projection_tensor_names(block: AttentionBlock) -> tuple[str, ...]:
    """The weights and biases a block's projections name (for front ends without a graph)."""
    out: list[str] = []
    for p in block.projections:
        out.extend(x for x in (p.weight, p.bias) if x)
    return tuple(dict.fromkeys(out))


# ----------------------------------------------------------------------------- KV cache


def _itemsize(dtype: str | None) -> int | None:
    if dtype is None:
        return None
    found = dtypes.lookup(dtype)
    if found is None or found.block_size != 1 or found.block_bytes == 0 or found.block_bytes.denominator != 1:
        return None
    return int(found.block_bytes)


def kv_elements_per_token(kv_heads: int, d_k: int, d_v: int) -> int:
    """What one caching block stores per token: K and V of every K/V head."""
    return kv_heads * (d_k + d_v)


def _elements_per_token(b: AttentionBlock) -> int | None:
    if b.num_kv_heads is None or b.d_k is None or b.d_v is None:
        return None
    return kv_elements_per_token(b.num_kv_heads, b.d_k, b.d_v)


@dataclass(frozen=True)
class LayerBytes:
    """One attention layer in bytes (the calc side): weights and its KV cache."""

    dtype: str
    itemsize: int
    weight_bytes: int
    kv_heads: int
    kv_bytes_per_token: int
    context: int | None
    kv_bytes: int | None  # at ``context`` tokens, one sequence


def layer_bytes(params: int, kv_heads: int, d_k: int, d_v: int, dtype: str, context: int | None) -> LayerBytes:
    """Bytes of a layer with ``params`` parameters stored in ``dtype`` and its cache at ``context``.
    ValueError for a dtype without whole bytes per element."""
    name = check_kv_dtype(dtype)
    size = _itemsize(name) or 0
    per_token = kv_elements_per_token(kv_heads, d_k, d_v) * size
    weight = dtypes.nbytes(name, params) or 0
    return LayerBytes(name, size, weight, kv_heads, per_token, context,
                      None if context is None else per_token * context)


KV_FIELD = "kv_cache_bytes_per_token"  # the Evidence field that says where a block's cache figure came from


def _block_cache(b: AttentionBlock, d: BlockDecoding | None, kv_dtype: str | None
                 ) -> tuple[int | None, str | None, str, CacheStatus]:
    """(bytes per token, dtype, text, status) for one block: with bytes, the text is the figure's
    evidence; without (it does not cache, or something is unknown), the reason."""
    if d is None:
        return None, None, "nothing in the source says whether this block decodes autoregressively", \
            CacheStatus.UNKNOWN
    if d.caches is False:
        return None, None, d.reason, CacheStatus.NONE
    if d.caches is None:
        return None, None, d.reason, CacheStatus.UNKNOWN
    status = CacheStatus.IF_DECODED if d.if_decoded else CacheStatus.CACHES
    dtype = dtypes.canonical(kv_dtype) if kv_dtype else d.dtype
    size = _itemsize(dtype)
    elements = _elements_per_token(b)
    if elements is None or size is None:  # cache_reason says which (--kv-dtype can size the second)
        return None, dtype, d.reason, status
    how = "--kv-dtype" if kv_dtype else d.dtype_source
    return elements * size, dtype, _cache_detail(b, size, dtype, how, d.reason, d.window, d.window_source), status


def _cache_detail(b: AttentionBlock, size: int, dtype: str | None, how: str, why: str, window: int | None,
                  window_source: str) -> str:
    """The evidence text of a block's bytes-per-token figure."""
    per = "per encoder token, cached once per input" if b.kind == "cross" else "per token"
    detail = f"{b.num_kv_heads} kv heads × (d_k {b.d_k} + d_v {b.d_v}) × {size} bytes ({dtype}, {how}) {per}; {why}"
    if window is not None and b.kind != "cross":
        detail += f"; sliding window {window} ({window_source}): keeps at most {window - 1} past tokens"
    return detail


def _held_tokens(context: int, window: int | None) -> int:
    return context if window is None else min(context, max(window - 1, 0))


def self_cache_bytes(blocks: Sequence[AttentionBlock], context: int, batch: int = 1) -> int:
    """Bytes the self-attention caches of ``blocks`` hold after ``context`` tokens for ``batch``
    sequences: each caching block's bytes per token, times its applications (a shared layer keeps
    one cache per application), times the tokens it holds (a sliding layer at most window - 1).
    The one rule for KVCache.total_bytes and for every figure drawn from it."""
    return batch * sum((b.kv_cache_bytes_per_token or 0) * b.applications * _held_tokens(context, b.sliding_window)
                       for b in blocks if b.kind != "cross" and b.kv_cache_bytes_per_token is not None)


# A causal mask without past/present tensors or a config that says the model decodes.
IF_DECODED = ("the graph has no past/present tensors and no config says the model decodes: this is what "
              "the cache holds if it is decoded token by token")


def cache_reason(b: AttentionBlock) -> str | None:
    """Why ``b`` has no bytes-per-token figure, in words (None when it has one, or before the size
    pass): the status says whether it caches; for a block that caches, what keeps it from a size."""
    if b.kv_cache_bytes_per_token is not None or b.kv_cache_status is None:
        return None
    why = b.kv_cache_reason or ""
    if not b.kv_cache_status.caches:
        return why
    if _elements_per_token(b) is None:
        return f"caches during decoding, but its K/V heads or d_k/d_v are unknown; {why}"
    return f"caches during decoding, but the cache dtype ({b.kv_cache_dtype or 'unknown'}) has no size; " \
           f"give --kv-dtype; {why}"


def cache_bytes_at_context(kv: KVCache | None) -> int | None:
    """What the cache holds at the report's context: total_bytes, 0 when nothing caches (an
    encoder), None when unknown or no context was given."""
    if kv is None:
        return None
    if kv.total_bytes is not None:
        return kv.total_bytes
    if kv.context is not None and kv.status is CacheStatus.NONE:
        return 0
    return None


def _model_cache(blocks: Sequence[AttentionBlock], options: SizeOptions, misses: Sequence[Miss] = ()) -> KVCache:
    unsized = [m for m in misses if m.caches]
    if unsized:
        names = ", ".join(m.anchor for m in unsized[:3]) + (f" and {len(unsized) - 3} more" if len(unsized) > 3 else "")
        return KVCache(None, None, options.context, options.batch, None, None,
                       reason=f"{len(unsized)} attention module(s) that cache K/V during decoding are not blocks "
                              f"({names}): {unsized[0].reason}", status=CacheStatus.UNKNOWN)
    self_blocks = [b for b in blocks if b.kind != "cross"]
    cross_blocks = [b for b in blocks if b.kind == "cross"]
    caching = [b for b in self_blocks if b.kv_cache_bytes_per_token is not None]
    # Blocks whose cache cannot be told, or caches without a size.
    unknown = [b for b in blocks if b.kv_cache_status is CacheStatus.UNKNOWN
               or (b.kv_cache_status is not None and b.kv_cache_status.caches and b.kv_cache_bytes_per_token is None)]
    dtype_set = {b.kv_cache_dtype for b in blocks if b.kv_cache_bytes_per_token is not None and b.kv_cache_dtype}
    dtype = dtype_set.pop() if len(dtype_set) == 1 else ("mixed" if dtype_set else None)
    cross = [b for b in cross_blocks if b.kv_cache_bytes_per_token is not None]
    # A module applied N times (shared layers) caches once per application.
    per_encoder = sum((b.kv_cache_bytes_per_token or 0) * b.applications for b in cross) if cross else None
    if unknown:
        names = ", ".join(b.name for b in unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
        return KVCache(None, dtype, options.context, options.batch, None, None,
                       reason=f"unknown for {len(unknown)} block(s) ({names}): {cache_reason(unknown[0])}",
                       status=CacheStatus.UNKNOWN)
    if not caching:
        why = next((r for b in blocks if (r := cache_reason(b))), None) or "the model has no attention blocks"
        return KVCache(None, None, options.context, options.batch, None, per_encoder, reason=why,
                       status=CacheStatus.NONE)
    per_token = sum((b.kv_cache_bytes_per_token or 0) * b.applications for b in caching)
    total = None
    reason = None
    if options.context is not None:
        total = self_cache_bytes(caching, options.context, options.batch)
        if per_encoder:
            reason = ("total_bytes covers the decoder's self-attention at the context; cross-attention adds "
                      "bytes_per_encoder_token per encoder token per sequence")
    status = CacheStatus.CACHES
    if all(b.kv_cache_status is CacheStatus.IF_DECODED for b in caching):
        reason = f"{IF_DECODED}; {reason}" if reason else IF_DECODED
        status = CacheStatus.IF_DECODED
    return KVCache(per_token, dtype, options.context, options.batch, total, per_encoder, reason=reason, status=status)


def _figure_fields(b: AttentionBlock, per_token: int, dtype: str | None, detail: str, source: str) -> dict[str, Any]:
    """The fields of ``b`` caching ``per_token`` bytes: the figure, its dtype, and its evidence
    (replacing an older one)."""
    evidence = tuple(e for e in b.evidence if e.field != KV_FIELD) + (Evidence(KV_FIELD, per_token, source, detail),)
    return {"kv_cache_bytes_per_token": per_token, "kv_cache_reason": None, "kv_cache_dtype": dtype,
            "evidence": evidence}


def _with_figure(b: AttentionBlock, per_token: int, dtype: str | None, detail: str, source: str,
                 status: CacheStatus) -> AttentionBlock:
    """``b`` caching ``per_token`` bytes (``_figure_fields``)."""
    return dataclasses.replace(b, kv_cache_status=status, **_figure_fields(b, per_token, dtype, detail, source))


def _with_cache(blocks: Sequence[AttentionBlock], decoding: Mapping[str, BlockDecoding], options: SizeOptions,
                weight_bytes: Mapping[str, int], also: Sequence[Mapping[str, Any]] = ()) -> tuple[AttentionBlock, ...]:
    """``blocks`` with their weight bytes and KV-cache fields (and ``also``: more fields per block,
    set in the same copy), one copy per block."""
    out = []
    for i, b in enumerate(blocks):
        more = also[i] if also else {}
        d = decoding.get(b.name)
        per_token, dtype, text, status = _block_cache(b, d, options.kv_dtype)
        window = d.window if d is not None and d.caches and b.kind != "cross" else None
        if per_token is not None and d is not None:
            out.append(dataclasses.replace(b, weight_bytes=weight_bytes.get(b.name), sliding_window=window,
                                           kv_cache_status=status,
                                           **_figure_fields(b, per_token, dtype, text, d.source), **more))
        else:
            out.append(dataclasses.replace(b, weight_bytes=weight_bytes.get(b.name), sliding_window=window,
                                           kv_cache_bytes_per_token=None, kv_cache_reason=text,
                                           kv_cache_dtype=dtype if status.caches else None, kv_cache_status=status,
                                           **more))
    return tuple(out)


def apply(blocks: Sequence[AttentionBlock], inputs: SizeInputs, options: SizeOptions | None = None,
          also: Sequence[Mapping[str, Any]] = (), misses: Sequence[Miss] = ()
          ) -> tuple[tuple[AttentionBlock, ...], dict[str, Any], tuple[str, ...]]:
    """Blocks with their size fields, the ModelSummary size fields, and warnings. ``also``: other
    fields of each block (by position) that the caller sets, in the same copy; ``misses``: the
    near misses (one that caches makes the model's cache unknown)."""
    options = options or SizeOptions()
    weights = weight_sizes(inputs.tensors, blocks, inputs.block_tensors)
    decoding = {d.block: d for d in inputs.decoding}
    sized = _with_cache(blocks, decoding, options, weights.per_block, also)
    warnings: list[str] = []
    if weights.unsized:
        shown = ", ".join(f"'{n}'" for n in weights.unsized[:5])
        warnings.append(f"tensors of a type without a size ({len(weights.unsized)}): {shown}; not in weight_bytes")
    summary: dict[str, Any] = {
        "weight_bytes": weights.total if inputs.tensors else None,
        "weight_bytes_by_dtype": weights.by_dtype,
        "weight_bytes_overhead": weights.overhead if inputs.tensors else None,
        "kv_cache": _model_cache(sized, options, misses),
    }
    return sized, summary, tuple(warnings)


def check_kv_dtype(name: str) -> str:
    """The canonical name of a --kv-dtype value; ValueError for a type without whole bytes per element."""
    if _itemsize(name) is None:
        raise ValueError(f"'{name}' is not an element type with whole bytes per element "
                         "(float32, float16, bfloat16, float8e4m3fn, int8, ...)")
    return dtypes.canonical(name)


def with_options(report: Report, options: SizeOptions) -> Report:
    """``report`` with the KV cache at ``--context``/``--batch`` and, with ``--kv-dtype``, in that
    dtype; the per-block figures are recomputed from the block's own fields."""
    if options.context is None and options.batch == 1 and options.kv_dtype is None:
        return report
    blocks = report.blocks
    if options.kv_dtype is not None:
        name = check_kv_dtype(options.kv_dtype)
        new_size = _itemsize(name) or 0
        changed = []
        for b in blocks:
            elements = _elements_per_token(b)
            status = b.kv_cache_status
            if elements is None or status is None or not status.caches:
                changed.append(b)
                continue
            if b.kv_cache_bytes_per_token is None:  # caches, in a dtype the source did not size
                detail = _cache_detail(b, new_size, name, "--kv-dtype", b.kv_cache_reason or "", None, "")
                source = "option"
            else:
                before = next((e for e in b.evidence if e.field == KV_FIELD), None)
                detail = re.sub(r"× \d+ bytes \([^)]*\)", f"× {new_size} bytes ({name}, --kv-dtype)",
                                before.detail if before is not None else "", count=1)
                source = before.source if before is not None else "option"
            changed.append(_with_figure(b, elements * new_size, name, detail, source, status))
        blocks = tuple(changed)
    model = dataclasses.replace(report.model, kv_cache=_model_cache(blocks, options, report.misses))
    return dataclasses.replace(report, blocks=blocks, model=model)


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
    from mhainspect.loaders.hf_config import sub_config

    return sub_config(cfg, block_name)[1]


def _window(cfg: Mapping[str, Any], block_name: str) -> tuple[int | None, str]:
    """The block's sliding window from the config: layer_types, sliding_window_pattern, Gemma 2's
    alternation, Qwen2's use_sliding_window/max_window_layers, or sliding_window for every layer."""
    c = _sub_config(cfg, block_name)
    window = c.get("sliding_window")
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return None, ""
    i = layer_index(block_name)
    types = c.get("layer_types")
    if isinstance(types, list) and types:
        if i is None or i >= len(types):
            return None, ""
        kind = str(types[i])
        return (window, f"config layer_types[{i}] = {kind}, sliding_window = {window}") if "sliding" in kind else (None, "")
    pattern = c.get("sliding_window_pattern")
    if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0 and i is not None:
        sliding = (i + 1) % pattern != 0
        return (window, f"config sliding_window_pattern = {pattern}, sliding_window = {window}") if sliding else (None, "")
    if c.get("model_type") == "gemma2" and i is not None:  # Gemma 2 alternates: even layers slide
        return (window, f"Gemma 2 alternates sliding (even) and full layers, sliding_window = {window}") \
            if i % 2 == 0 else (None, "")
    if c.get("use_sliding_window") is False:
        return None, ""
    if c.get("use_sliding_window") is True and isinstance(c.get("max_window_layers"), int) and i is not None:
        return (window, f"config max_window_layers = {c['max_window_layers']}, sliding_window = {window}") \
            if i >= c["max_window_layers"] else (None, "")
    return window, f"config sliding_window = {window}"


def config_causal(cfg: Mapping[str, Any], block_name: str, cross: bool = False) -> tuple[bool | None, str]:
    """Whether the config says the module ``block_name`` caches K/V during decoding (None: it does
    not say), and why."""
    from mhainspect.loaders.hf_config import TOWER_PREFIXES, decoder_only_model_type, sub_config

    name = block_name.lower()
    archs = [a for a in cfg.get("architectures") or () if isinstance(a, str)]
    prefix = sub_config(cfg, block_name)[0]
    if prefix in TOWER_PREFIXES and cfg.get("is_encoder_decoder") is not True:
        return False, f"the block belongs to the config's {prefix.rstrip('.')} (an encoder tower, run once per input)"
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
    family = decoder_only_model_type(_sub_config(cfg, block_name)) or decoder_only_model_type(cfg)
    if family is not None:
        return True, f"config model_type {family}: a decoder-only language model"
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


def config_decoding(cfg: Mapping[str, Any] | None, blocks: Sequence[AttentionBlock],
                    compute_dtypes: Mapping[str, tuple[str | None, str]], *, label: str = "config",
                    no_config: str = "") -> tuple[BlockDecoding, ...]:
    """Per block, from a Hugging Face style config: does it cache, its window, its dtype
    (``compute_dtypes``: block -> (dtype, where it came from), the projection's own dtype)."""
    out = []
    for b in blocks:
        dtype, dsource = compute_dtypes.get(b.name, (None, ""))
        if cfg is None:
            out.append(BlockDecoding(b.name, None, no_config or "no config says whether the model decodes "
                                     "autoregressively", dtype, dsource))
            continue
        caches, reason = config_causal(cfg, b.name, b.kind == "cross")
        window, wsource = _window(cfg, b.name) if b.kind != "cross" else (None, "")
        out.append(BlockDecoding(b.name, caches, f"{label}: {reason}", dtype, dsource, window,
                                 f"{label} {wsource.removeprefix('config ')}" if window else ""))
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
            counts[_canonical(spelling)] += n
    return counts.most_common(1)[0][0] if counts else None


# ----------------------------------------------------------------------------- graph evidence

_CACHE_NAME = re.compile(r"past|present|cache|key_values", re.IGNORECASE)
_COMPARE_OPS = {"Less", "LessOrEqual", "Greater", "GreaterOrEqual"}
# Ops a stored weight passes through on its way to a projection (dequantization, layout, casts).
_WEIGHT_PATH = {"DequantizeLinear", "Cast", "Transpose", "Reshape", "Identity", "Unsqueeze", "Squeeze",
                "Mul", "Sub", "Add", "Concat", "Split", "Slice", "Gather", "Expand", "MatMulNBits",
                "GatherBlockQuantized"}
# Input positions of an op that are indices or shape arguments, not values reaching the scores.
_NOT_MASK_INPUTS: dict[str, frozenset[int]] = {
    **SHAPE_INPUTS, "Gather": frozenset({1}), "GatherElements": frozenset({1}), "GatherND": frozenset({1})}
_MASK_WALK_LIMIT = 400  # nodes visited walking back from a block's scores looking for a causal mask
_IO_WALK_LIMIT = 600  # nodes visited from a past/present tensor to the nearest block


def _block_nodes(blocks: Sequence[AttentionBlock]) -> dict[str, str]:
    """Node name -> block name, for the anchors and the projection nodes."""
    out: dict[str, str] = {}
    for b in blocks:
        if b.anchor:
            out.setdefault(b.anchor, b.name)
        for p in b.projections:
            if p.node:
                out.setdefault(p.node, b.name)
    return out


def _stored_sources(index: GraphIndex, name: str, memo: dict[str, tuple[str, ...] | None],
                    depth: int = 0) -> tuple[str, ...] | None:
    """The stored tensors ``name`` is computed from when it is computed from stored tensors alone
    (through dequantization, casts, layout ops), else None (an activation)."""
    weights = index.graph.weights
    if name in weights:
        t = weights[name]
        return (name,) if not t.is_constant_node or t.numel > 1 else ()
    if name in memo:
        return memo[name]
    memo[name] = None  # a cycle or a deep chain is an activation
    producer = index.producer.get(name)
    if producer is None or producer.op not in _WEIGHT_PATH or depth >= 6:
        return None
    found: list[str] = []
    for x in producer.inputs:
        if not x:
            continue
        sub = _stored_sources(index, x, memo, depth + 1)
        if sub is None:
            return None
        found.extend(sub)
    memo[name] = tuple(found)
    return memo[name]


def _graph_block_tensors(index: GraphIndex, blocks: Sequence[AttentionBlock]) -> dict[str, tuple[str, ...]]:
    """Per block, the stored tensors its projection nodes read, directly or through dequantization,
    casts and layout ops (scales and zero points included)."""
    weights = index.graph.weights
    memo: dict[str, tuple[str, ...] | None] = {}
    out: dict[str, tuple[str, ...]] = {}
    for b in blocks:
        names: list[str] = [x for x in projection_tensor_names(b) if x in weights]
        for p in b.projections:
            node = index.by_name.get(p.node)
            if node is None:
                continue
            for x in node.inputs:
                if x:
                    found = memo[x] if x in memo else _stored_sources(index, x, memo)
                    if found:
                        names.extend(found)
        out[b.name] = tuple(dict.fromkeys(names))
    return out


def _nearest_block(index: GraphIndex, start: str, nodes: Mapping[str, str], forward: bool) -> str | None:
    """The block whose anchor or projection node is nearest to tensor ``start`` (breadth first)."""
    frontier = [start]
    seen = {start}
    visited = 0
    while frontier and visited < _IO_WALK_LIMIT:
        nxt: list[str] = []
        for tensor in frontier:
            if forward:
                steps: list[Node] = [u for u, _ in index.users(tensor)]
            else:
                p = index.producer.get(tensor)
                steps = [p] if p is not None else []
            for node in steps:
                visited += 1
                hit = nodes.get(node.name)
                if hit is not None:
                    return hit
                for x in (node.outputs if forward else node.inputs):
                    if x and x not in seen and x not in index.graph.weights:
                        seen.add(x)
                        nxt.append(x)
        frontier = nxt
    return None


def _cache_io(index: GraphIndex, blocks: Sequence[AttentionBlock]) -> dict[str, list[tuple[str, str]]]:
    """Block -> [(past/present tensor, dtype)] for the graph's cache inputs and outputs."""
    nodes = _block_nodes(blocks)
    out: dict[str, list[tuple[str, str]]] = {}
    g = index.graph
    for forward, infos in ((True, g.inputs), (False, g.outputs)):
        for v in infos:
            if not _CACHE_NAME.search(v.name) or not dtypes.is_float(v.dtype):
                continue
            block = _nearest_block(index, v.name, nodes, forward)
            if block is not None:
                out.setdefault(block, []).append((v.name, dtypes.canonical(v.dtype)))
    return out


def _from_range(index: GraphIndex, name: str, depth: int = 8) -> bool:
    """True when ``name`` is computed from a Range (position indices) within a few ops."""
    stack = [(name, 0)]
    seen: set[str] = set()
    while stack:
        cur, d = stack.pop()
        p = index.producer.get(cur)
        if p is None or cur in seen or d > depth:
            continue
        seen.add(cur)
        if p.op in ("Range", "CumSum"):
            return True
        stack.extend((x, d + 1) for x in p.inputs if x)
    return False


_CAUSAL_ATTRS = (("is_causal", "ONNX Attention is_causal = 1"), ("unidirectional", "Attention unidirectional = 1"))


_PRODUCTS = {"MatMul", "Gemm", "Einsum", "MatMulNBits", "MatMulInteger", "QLinearMatMul", "FusedMatMul"}


def _scalar_int(index: GraphIndex, name: str) -> int | None:
    t = index.graph.weights.get(name)
    if t is None or t.int_value is None or len(t.int_value) != 1:
        return None
    return t.int_value[0]


def _minus_constant(index: GraphIndex, name: str) -> int | None:
    """c when ``name`` is (position indices) - c, from Sub(x, c) or Add(x, -c); else None."""
    node = index.producer.get(name)
    if node is None or len(node.inputs) != 2 or not _from_range(index, node.inputs[0]):
        return None
    c = _scalar_int(index, node.inputs[1])
    if c is None:
        return None
    return c if node.op == "Sub" else -c if node.op == "Add" else None


def _difference_of_positions(index: GraphIndex, name: str) -> bool:
    node = index.producer.get(name)
    return (node is not None and node.op == "Sub" and len(node.inputs) == 2
            and all(_from_range(index, x) for x in node.inputs))


# (op, which side holds "q - c") -> tokens attended beyond c: kv > q - c keeps c tokens, kv >= q - c keeps c + 1.
_WINDOW_FORMS = {("Greater", 1): 0, ("GreaterOrEqual", 1): 1, ("Less", 0): 0, ("LessOrEqual", 0): 1}
# (op, which side holds the constant) for q - kv compared with c: q - kv < c keeps c tokens.
_WINDOW_DIFF_FORMS = {("Less", 1): 0, ("LessOrEqual", 1): 1, ("Greater", 0): 0, ("GreaterOrEqual", 0): 1}


def _window_in_mask(index: GraphIndex, node: Node) -> int | None:
    """The sliding window a position comparison encodes: kv > q - W (transformers' sliding
    overlay) or q - kv < W, in any of their spellings; None for a plain causal comparison."""
    for side in (0, 1):
        c = _minus_constant(index, node.inputs[side])
        extra = _WINDOW_FORMS.get((node.op, side))
        if c is not None and extra is not None and c + extra > 0:
            return c + extra
        c = _scalar_int(index, node.inputs[side])
        extra = _WINDOW_DIFF_FORMS.get((node.op, side))
        if c is not None and extra is not None and _difference_of_positions(index, node.inputs[1 - side]) \
                and c + extra > 0:
            return c + extra
    return None


def _stored_mask(t: Any) -> bool:
    """A stored tensor that may be a folded causal or sliding mask (a static-shape export writes
    one as a constant): [batch, 1, ..., q, k], the same for every head (a position bias has a
    head axis; the batch may be folded in), and not a learned parameter. Its values are data the
    audit does not read."""
    shape = t.shape
    if len(shape) < 3 or shape[-2] == 1 or shape[-1] == 1 or any(d != 1 for d in shape[1:-2]):
        return False
    return t.kind in (None, "constant", "derived", "buffer") and (t.dtype == "bool" or dtypes.is_float(t.dtype))


@dataclass(frozen=True, eq=False)  # never compared or hashed: no __eq__/__hash__ built at import
class _MaskEvidence:
    causal: bool | None
    reason: str
    window: int | None = None
    window_source: str = ""


_MASKED_BELOW = -1e4  # an additive mask entry at or below this hides the key (0 / -inf, 0 / finfo.min)

def _constant_mask(values: Sequence[float], shape: Sequence[int]) -> tuple[str, int | None]:
    """What a small constant mask [..., queries, keys] does: ("causal", None), ("window", W),
    ("none", None) when some query sees a later key or nothing is hidden (not causal), ("other",
    None) when it cannot be told.

    Which entries hide a key: those at or below -1e4 when there are any (an additive mask); else,
    with two values, those unlike the diagonal entry (a boolean or 1/0 mask, either polarity; a
    query always sees itself); else none (a bias). With keys = queries + past, query q's own key
    is q + past."""
    queries, keys = shape[-2], shape[-1]
    past = keys - queries
    size = queries * keys
    if past < 0 or not values or len(values) % size:
        return "other", None
    additive = any(v <= _MASKED_BELOW for v in values)
    if not additive and len(set(values)) > 2:
        return "none", None  # a bias: it shifts scores, it hides no key
    pattern: tuple[tuple[int, ...], ...] | None = None
    for start in range(0, len(values), size):
        plane = values[start:start + size]
        keep = plane[past]  # query 0 sees its own key
        rows = tuple(tuple(k for k in range(keys) if (plane[q * keys + k] > _MASKED_BELOW if additive
                                                      else plane[q * keys + k] == keep))
                     for q in range(queries))
        if pattern is not None and rows != pattern:
            return "other", None
        pattern = rows
    assert pattern is not None
    if any(row and row[-1] > q + past for q, row in enumerate(pattern)):
        return "none", None  # a query sees a later key: not causal
    if any(not row or row[-1] != q + past or row != tuple(range(row[0], row[-1] + 1))
           for q, row in enumerate(pattern)):
        return "other", None
    widths = {len(row) for row in pattern if row[0] > 0}
    if not widths:
        return "causal", None
    width = widths.pop()
    if not widths and all(len(row) == min(width, q + past + 1) for q, row in enumerate(pattern)):
        return "window", width
    return "other", None


def _causal_mask(index: GraphIndex, block: AttentionBlock) -> _MaskEvidence:
    """Whether the graph makes this block causal: True for a causal attribute, a
    GroupQueryAttention, a mask from Trilu or from comparing position indices (Range), or a small
    constant mask whose values are causal, with the sliding window when the comparison or the
    constant has one; None when a mask the tool cannot read reaches the scores (a graph input with
    a query axis, a larger constant, a constant of another pattern); False only when nothing that
    reaches the scores has a query axis or the constant mask lets every query see every key.

    The walk goes back from the scores (Softmax or fused op) and stops at products, so it sees
    what is added to the scores, not the activations Q and K come from; it follows values only,
    not indices, shapes or bounds (a relative-position bucket selects a bias, it hides no key)."""
    anchor = index.by_name.get(block.anchor)
    if anchor is None:
        return _MaskEvidence(None, "the block's anchor node is not in the graph")
    for attr, text in _CAUSAL_ATTRS:
        if anchor.attrs.get(attr) == 1:
            return _MaskEvidence(True, text)
    if anchor.op in ("GroupQueryAttention", "PagedAttention", "SparseAttention"):
        return _MaskEvidence(True, f"{anchor.op} (always causal)")
    inputs = {v.name: v for v in index.graph.inputs}
    weights = index.graph.weights
    # A Softmax (or the Exp of one written out) reads the scores; a fused op reads Q, K, V (or the
    # input, packed weights, bias) first, the mask after.
    frontier = [x for x in (anchor.inputs if anchor.op in ("Softmax", "Exp") else anchor.inputs[3:]) if x]
    seen = set(frontier)
    visited = 0
    open_masks: list[str] = []
    full_constants: list[str] = []
    causal: str | None = None
    window: tuple[int, str] | None = None
    while frontier and visited < _MASK_WALK_LIMIT:
        cur = frontier.pop(0)
        stored = weights.get(cur)
        if stored is not None:
            shape = stored.shape
            if len(shape) < 2 or shape[-2] <= 1 or shape[-1] < shape[-2] or (len(shape) == 2 and shape[0] != shape[1]) \
                    or stored.kind == "parameter":
                continue  # no [queries, keys] plane (a bias per key or per head, a table, a scale), or learned
            label = f"constant '{cur}' {list(shape)}"
            if stored.mask_values is None:
                if _stored_mask(stored):  # with a head axis, a position bias: not a mask
                    open_masks.append(f"a stored mask '{cur}' {list(shape)} ({stored.dtype}), whose values are not "
                                      "read (only small constants are): whether it is causal is not visible")
                continue
            kind, w = _constant_mask(stored.mask_values, shape)
            if kind == "causal":
                causal = causal or f"causal mask ({label}: each query sees itself and earlier keys)"
            elif kind == "window":
                assert w is not None
                window = window or (w, f"the values of {label}")
            elif kind == "none":
                full_constants.append(label)  # hides nothing, or lets queries see later keys
            else:
                open_masks.append(f"{label} of a pattern neither causal nor full: whether the block is causal is not "
                                  "visible")
            continue
        node = index.producer.get(cur)
        if node is None:
            info = inputs.get(cur)
            # [batch, 1, 1, keys] pads keys; only a mask with a query axis can be causal.
            if info is not None and (info.shape is None or (len(info.shape) >= 3 and info.shape[-2] != 1)):
                shown = list(info.shape) if info.shape is not None else "(rank unknown)"
                open_masks.append(f"graph input '{cur}' {shown}: whether it is causal is up to the caller")
            continue
        visited += 1
        if node.op == "Trilu":
            causal = causal or f"causal mask (Trilu '{node.name}')"
        elif node.op in _COMPARE_OPS and len(node.inputs) == 2 and all(_from_range(index, x) for x in node.inputs):
            w = _window_in_mask(index, node)
            if w is not None:
                window = window or (w, f"the mask's position comparison {node.op} '{node.name}'")
            else:
                causal = causal or f"causal mask (position comparison {node.op} '{node.name}')"
        elif node.op in _COMPARE_OPS and len(node.inputs) == 2:
            w = _window_in_mask(index, node)  # q - kv < W
            if w is not None:
                window = window or (w, f"the mask's position comparison {node.op} '{node.name}'")
        if node.op in _PRODUCTS:
            continue  # Q·Kᵀ or a projection: the activations behind it are not the mask
        # A mask reaches the scores as a value: indices (a relative-position bucket, DeBERTa/T5
        # comparing q - kv with a bucket bound) and shape arguments select values, they mask none.
        skip = _NOT_MASK_INPUTS.get(node.op, ())
        for i, x in enumerate(node.inputs):
            if x and x not in seen and i not in skip:
                seen.add(x)
                frontier.append(x)
    if causal is not None or window is not None:
        reason = causal or f"causal sliding-window mask ({window[1] if window else ''})"
        return _MaskEvidence(True, reason, window[0] if window else None, window[1] if window else "")
    if open_masks:
        return _MaskEvidence(None, f"the scores take a mask from {open_masks[0]}, and the graph has no "
                                   "past/present tensors")
    if frontier:
        return _MaskEvidence(None, f"the mask path to the scores is longer than {_MASK_WALK_LIMIT} nodes: whether "
                                   "it is causal was not followed to the end")
    if full_constants:
        return _MaskEvidence(False, f"no past/present inputs or outputs, and the {full_constants[0]} lets queries "
                                    "see later keys or hides none: the block attends both ways, run once over the "
                                    "input (an encoder)")
    # Nothing with a [queries, keys] plane reaches the scores: no mask of any kind could hide keys.
    return _MaskEvidence(False, "no past/present inputs or outputs, and no causal mask reaches the scores: the block "
                                "attends both ways, run once over the input (an encoder)")


def _compute_dtype(index: GraphIndex, block: AttentionBlock, fallback: str | None) -> tuple[str | None, str]:
    """The dtype K and V are computed in: a float stored tensor the K/V projection reads (a float
    weight, or the scales of a quantized one), else the model's prevailing float dtype."""
    weights = index.graph.weights
    for role in ("k", "v", "q"):
        for p in block.projections:
            if p.role != role:
                continue
            node = index.by_name.get(p.node)
            for name in (p.weight, *(node.inputs if node is not None else ())):
                if name and name in weights and dtypes.is_float(weights[name].dtype):
                    return dtypes.canonical(weights[name].dtype), f"{role} projection '{p.node}' computes in it"
            info = index.graph.value_info.get(node.outputs[0]) if node is not None and node.outputs else None
            if info is not None and dtypes.is_float(info.dtype):
                return dtypes.canonical(info.dtype), f"{role} projection output '{info.name}'"
    if fallback:
        return fallback, "the model's prevailing float dtype"
    return None, ""


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
    tensors = _graph_tensors(index, scan)
    fallback = model_float_dtype(tensors)
    io = _cache_io(index, blocks)
    any_io = bool(io)
    compute = {b.name: _compute_dtype(index, b, fallback) for b in blocks}
    from_config = {d.block: d for d in config_decoding(config, blocks, compute, label=config_label)} \
        if config is not None else {}
    causal_self = unknown_self = False
    decoding: list[BlockDecoding] = []
    pending_cross: list[AttentionBlock] = []
    for b in blocks:
        cfg = from_config.get(b.name)
        window, wsource = (cfg.window, cfg.window_source) if cfg is not None else (None, "")
        tensors_io = io.get(b.name)
        mask = _causal_mask(index, b) if b.kind != "cross" else None
        if mask is not None and mask.window is not None:  # the graph's own mask outranks the config
            window, wsource = mask.window, mask.window_source
        if tensors_io:
            io_dtype = tensors_io[0][1]
            names = ", ".join(n for n, _ in tensors_io[:4])
            decoding.append(BlockDecoding(b.name, True, f"cache tensors {names} in the graph", io_dtype,
                                          f"graph cache tensor '{tensors_io[0][0]}'", window, wsource, "cache_tensor"))
            causal_self = causal_self or b.kind != "cross"
            continue
        if b.kind == "cross":
            pending_cross.append(b)
            continue
        assert mask is not None
        causal, why = mask.causal, mask.reason
        mask_dtype, mask_dsource = compute[b.name]
        if causal and cfg is not None and cfg.caches is False:
            decoding.append(BlockDecoding(b.name, False, f"{cfg.reason} (a causal mask reaches the scores, but the "
                                          "graph has no past/present tensors)"))
        elif causal:
            # A causal mask says the block can cache, not that it is ever decoded token by token
            # (CLIP's text tower is causal and runs once): say which, when a config tells.
            if_decoded = cfg is None or not cfg.caches
            why = f"{why}; {IF_DECODED if cfg is None or not cfg.caches else cfg.reason}"
            decoding.append(BlockDecoding(b.name, True, why, mask_dtype, mask_dsource, window, wsource, "causal_mask",
                                          if_decoded))
            causal_self = True
        elif any_io:
            decoding.append(BlockDecoding(b.name, False, "no past/present tensor of the graph reaches this block and "
                                          "no causal mask does: it runs once over the input (an encoder)"))
        elif cfg is not None and cfg.caches is not None:
            decoding.append(cfg)
            causal_self = causal_self or bool(cfg.caches)
        else:
            decoding.append(BlockDecoding(b.name, causal, why, mask_dtype, mask_dsource))
            unknown_self = unknown_self or causal is None
    # Every self block that caches does so on a causal mask alone: so does the cross-attention.
    self_blocks = {b.name for b in blocks if b.kind != "cross"}
    assumed_self = all(d.if_decoded for d in decoding if d.caches and d.block in self_blocks)
    for b in pending_cross:
        cross_dtype, cross_dsource = compute[b.name]
        if causal_self:
            decoding.append(BlockDecoding(b.name, True, "cross-attention of a causal decoder: K/V of the encoder "
                                          "output, computed once per input", cross_dtype, cross_dsource,
                                          source="causal_mask", if_decoded=assumed_self))
        elif unknown_self:
            decoding.append(BlockDecoding(b.name, None, "cross-attention of a graph whose self-attention may decode "
                                          "autoregressively (see its blocks): whether it caches is up to the caller"))
        else:
            decoding.append(BlockDecoding(b.name, False, "cross-attention, and no block of the graph decodes "
                                          "autoregressively"))
    order = {b.name: i for i, b in enumerate(blocks)}
    decoding.sort(key=lambda d: order[d.block])
    return SizeInputs(tensors, _graph_block_tensors(index, blocks), tuple(decoding))


def metas_size_inputs(weights: Mapping[str, Any], blocks: Sequence[AttentionBlock], config: Mapping[str, Any] | None,
                      parameters: frozenset[str], *, label: str = "config.json", no_config: str = "") -> SizeInputs:
    """Size metadata of a weight list (a checkpoint, a module's parameters and buffers): every
    tensor (``parameters``: the storage keys that are parameters), the tensors under each block's
    module path, and what the config says about decoding (no graph to show a cache or a mask)."""
    # Imported here: the quantization tables matter to checkpoints and modules, not to a graph run.
    from mhainspect.loaders.quantized import kv_cache_dtype

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
    out: dict[str, tuple[str, ...]] = {}
    for b in blocks:
        own = list(projection_tensor_names(b))
        # Beside the weights only: a bias held on the attention module itself (DeBERTa's q_bias)
        # would make the whole module (its position projections too) a prefix.
        prefixes = {w.rsplit(".", 1)[0] + "." for p in b.projections if (w := p.weight) and "." in w}
        own.extend(n for n in all_names if any(n.startswith(pre) for pre in prefixes))
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
