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
from fractions import Fraction
from functools import cache
from typing import TYPE_CHECKING, Any

from mhainspect.ir import dtypes
from mhainspect.ir.dtypes import byte_rate as _rate
from mhainspect.ir.units import group
from mhainspect.results import (
    AttentionBlock,
    BlockKind,
    CacheFactors,
    CacheStatus,
    Evidence,
    KVCache,
    MemoryAtContext,
    Miss,
    MixerKind,
    ModelFacts,
    Report,
    ReportWarning,
    WarningCode,
)
from mhainspect.results.stages import IF_DECODED, BlockDecoding, MixerLayers, SizeInputs, StoredTensor

if TYPE_CHECKING:
    from mhainspect.results.optional import Mixer, WeightDtypeWhatIf


@cache
def _canonical(dtype: str) -> str:
    return dtypes.canonical(dtype)


def stored_nbytes(t: StoredTensor) -> int | None:
    """Bytes ``t`` occupies as stored: its dtype's rate (packed and block types rounded up per
    block), else what the file says (``stored_bytes``, a string tensor's external length)."""
    rate = _rate(t.dtype)
    if rate is None:
        return t.stored_bytes
    block_size, num, den = rate
    blocks = -(-t.numel // block_size)
    return -(-(blocks * num) // den)


@dataclass(frozen=True)
class SizeOptions:
    """--context, --batch, --kv-dtype, --decoder / --no-decoder (True / False; None: the source
    decides), --weight-dtype, and --gpu-memory (bytes per GPU) with --gpus (will it fit)."""

    context: int | None = None
    batch: int = 1
    kv_dtype: str | None = None
    decoder: bool | None = None
    weight_dtype: str | None = None
    gpu_memory: int | None = None
    gpus: int = 1


# ----------------------------------------------------------------------------- weights


@dataclass(frozen=True)
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
            rounded[dtype, t.is_parameter] += stored_nbytes(t) or 0
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
                size += stored_nbytes(used) or 0
            per_block[b.name] = size
    ordered = tuple(sorted(((k, v) for k, v in by_dtype.items() if v), key=lambda kv: (-kv[1], kv[0])))
    return WeightSizes(total, ordered, overhead, per_block, tuple(unsized))


# ----------------------------------------------------------------------------- KV cache


def _itemsize(dtype: str | None) -> Fraction | None:
    """Bytes per element of a plain (not block-quantized) number type: 2 for float16, 1/2 for int4."""
    if dtype is None:
        return None
    found = dtypes.lookup(dtype)
    if found is None or found.block_size != 1 or found.block_bytes == 0 or found.family is dtypes.Family.OTHER:
        return None
    return found.block_bytes


def _bytes_of(elements: int, itemsize: Fraction) -> int:
    """Bytes ``elements`` values take at ``itemsize`` bytes each (a packed type rounded up)."""
    return math.ceil(elements * itemsize)


def kv_elements_per_token(kv_heads: int, d_k: int, d_v: int) -> int:
    """What one caching block stores per token: K and V of every K/V head."""
    return kv_heads * (d_k + d_v)


def _expanded_elements(b: AttentionBlock) -> int | None:
    """K and V of every K/V head, per token (a latent block's per-head equivalent)."""
    if b.num_kv_heads is None or b.d_k is None or b.d_v is None:
        return None
    return kv_elements_per_token(b.num_kv_heads, b.d_k, b.d_v)


def _elements_per_token(b: AttentionBlock) -> int | None:
    """What the block caches per token: a latent block its latent and rotary key, any other block
    K and V of every K/V head."""
    if b.latent is not None and not b.latent.runtime_expands:
        return b.latent.cached_width if b.num_heads is not None else None
    return _expanded_elements(b)


@dataclass(frozen=True)
class LayerBytes:
    """One attention layer in bytes (the calc side): weights and its KV cache."""

    dtype: str
    itemsize: float  # bytes per element: 0.5 for int4
    weight_bytes: int
    kv_heads: int
    kv_bytes_per_token: int
    context: int | None
    kv_bytes: int | None  # at ``context`` tokens, one sequence


def layer_bytes(params: int, kv_heads: int, d_k: int, d_v: int, dtype: str, context: int | None) -> LayerBytes:
    """Bytes of a layer with ``params`` parameters stored in ``dtype`` and its cache at ``context``.
    ValueError for a name that is not a plain number type."""
    name = check_kv_dtype(dtype)
    size = _itemsize(name) or Fraction(0)
    per_token = _bytes_of(kv_elements_per_token(kv_heads, d_k, d_v), size)
    weight = dtypes.nbytes(name, params) or 0
    return LayerBytes(name, float(size), weight, kv_heads, per_token, context,
                      None if context is None else per_token * context)


KV_FIELD = "kv_cache_bytes_per_token"  # the Evidence field that says where a block's cache figure came from


def _block_cache(b: AttentionBlock, d: BlockDecoding | None, kv_dtype: str | None
                 ) -> tuple[int | None, str | None, str | CacheFactors, CacheStatus]:
    """(bytes per token, dtype, why, status) for one block: with bytes, ``why`` is the figure's
    factors; without (it does not cache, or something is unknown), the reason."""
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
    per_token = kv_bytes_per_token(b, size)
    if per_token is None or size is None:  # cache_reason says which (--kv-dtype can size the second)
        return None, dtype, d.reason, status
    how = "--kv-dtype" if kv_dtype else d.dtype_source
    factors = _factors(b, size, dtype, how, d.reason, d.window, d.window_source)
    if d.indexer_width:  # the indexer's key, cached beside K/V in the same dtype
        factors = dataclasses.replace(factors, indexer_width=d.indexer_width, indexer_source=d.indexer_source)
        per_token += _bytes_of(d.indexer_width, size)
    return per_token, dtype, factors, status


def kv_bytes_per_token(b: AttentionBlock, itemsize: Fraction | None) -> int | None:
    """The bytes one caching block holds per token at ``itemsize`` bytes an element (None: its
    heads or head sizes, or the element size, are unknown)."""
    elements = _elements_per_token(b)
    return None if elements is None or itemsize is None else _bytes_of(elements, itemsize)


def cache_text(f: CacheFactors) -> str:
    """The evidence text of a block's bytes-per-token figure, made from its factors."""
    per = "per encoder token, cached once per input" if f.cross else "per token"
    heads = f"{f.kv_heads} kv heads × (d_k {f.d_k} + d_v {f.d_v})"
    bytes_each = f"× {f.itemsize:g} bytes ({f.dtype}, {f.dtype_source}) {per}"
    if f.latent is not None and f.latent.runtime_expands:
        detail = (f"{heads} {bytes_each}: the per-head K/V of a latent block (its latent would be "
                  f"{f.latent.cached_width} values); {f.reason}")
    elif f.latent is not None:
        lat = f.latent
        expanded = None if f.kv_heads is None or f.d_k is None or f.d_v is None else \
            kv_elements_per_token(f.kv_heads, f.d_k, f.d_v)
        detail = (f"latent attention: K/V latent {lat.kv_rank} + rotary key {lat.rope_dim} = {lat.cached_width} values "
                  f"{bytes_each}, what an MLA runtime caches (the per-head K/V it expands to: {f.kv_heads} heads × "
                  f"(d_k {f.d_k} + d_v {f.d_v}) = {expanded} values); {f.reason}")
    else:
        detail = f"{heads} {bytes_each}; {f.reason}"
    if f.indexer_width:
        detail += (f"; plus the sparse-attention indexer's key: {f.indexer_width} values × {f.itemsize} bytes per token "
                   f"({f.indexer_source})")
    if f.window is not None and not f.cross:
        detail += f"; sliding window {f.window} ({f.window_source}): keeps at most {f.window - 1} past tokens"
    return detail


def _factors(b: AttentionBlock, itemsize: Fraction, dtype: str | None, how: str, why: str, window: int | None = None,
             window_source: str = "") -> CacheFactors:
    """The factors of ``b``'s figure in ``dtype`` (``itemsize`` bytes an element), ``how``: where the dtype came from."""
    return CacheFactors(b.num_kv_heads, b.d_k, b.d_v, float(itemsize), dtype, how, b.kind == BlockKind.CROSS, why, window,
                        window_source, b.latent)


def _held_tokens(context: int, window: int | None) -> int:
    return context if window is None else min(context, max(window - 1, 0))


def self_cache_bytes(blocks: Sequence[AttentionBlock], context: int, batch: int = 1) -> int:
    """Bytes the self-attention caches of ``blocks`` hold after ``context`` tokens for ``batch``
    sequences: each caching block's bytes per token, times its applications (a shared layer keeps
    one cache per application), times the tokens it holds (a sliding layer at most window - 1).
    The one rule for KVCache.total_bytes and for every figure drawn from it."""
    return batch * sum((b.kv_cache_bytes_per_token or 0) * b.applications * _held_tokens(context, b.sliding_window)
                       for b in blocks if b.kind != BlockKind.CROSS and b.kv_cache_bytes_per_token is not None)


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


def _counted(n: int, noun: str) -> str:
    """'1 block', '3 blocks'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def sized_mixers(mixers: Sequence[MixerLayers]) -> tuple[Mixer, ...]:
    """The non-attention mixers with their fixed state per layer in bytes (elements × the state's itemsize)."""
    if not mixers:
        return ()
    from mhainspect.results.optional import Mixer  # imported when taken: a hybrid stack's mixers only

    out = []
    for m in mixers:
        size = _itemsize(m.dtype)
        recurrent = _itemsize(m.recurrent_dtype) if m.recurrent_dtype else Fraction(4) if m.recurrent_float32 else size
        if m.conv_elements is None or m.recurrent_elements is None:
            out.append(Mixer(m.kind, m.layers, m.source, reason=m.reason))
            continue
        if size is None or recurrent is None:
            out.append(Mixer(m.kind, m.layers, m.source, reason=f"the state's dtype ({m.dtype or 'unknown'}) has no size"))
            continue
        per_layer = _bytes_of(m.conv_elements, size) + _bytes_of(m.recurrent_elements, recurrent)
        parts = []
        if m.conv_elements:
            parts.append(f"convolution {group(m.conv_elements)} × {size} bytes ({m.dtype}, {m.dtype_source})")
        if m.recurrent_elements:
            parts.append(f"recurrent {group(m.recurrent_elements)} × {recurrent} bytes ("
                         + (m.recurrent_dtype or ("float32, as transformers keeps it" if m.recurrent_float32
                                                  else f"{m.dtype}")) + ")")
        own = m.recurrent_dtype or ("float32" if m.recurrent_float32 else m.dtype)
        dtype = m.dtype if not m.recurrent_elements or own == m.dtype else own if not m.conv_elements else "mixed"
        out.append(Mixer(m.kind, m.layers, m.source, per_layer, dtype, f"{m.state_source}: {' + '.join(parts)}"))
    return tuple(out)


def _layers_text(layers: Sequence[int]) -> str:
    shown = ", ".join(str(i) for i in layers[:8])
    return f"layer {shown}" if len(layers) == 1 else f"layers {shown}" + (" ..." if len(layers) > 8 else "")


def _with_mixers(kv: KVCache, mixers: Sequence[Mixer]) -> KVCache:
    """The cache with the mixers' fixed state beside it, and a lower bound when some layers are of a
    kind not known here (what they cache is not in the figure, and the figure says so)."""
    if not mixers:
        return kv
    stateful = [m for m in mixers if m.kind is not MixerKind.UNKNOWN]
    unknown = [m for m in mixers if m.kind is MixerKind.UNKNOWN]
    state: int | None = None
    state_reason = None
    if stateful:
        missing = [m for m in stateful if m.state_bytes_per_layer is None]
        if missing:
            state_reason = (f"the state of {_counted(sum(m.count for m in missing), 'layer')} of {missing[0].kind} "
                            f"({_layers_text(missing[0].layers)}) cannot be sized: {missing[0].reason}")
        else:
            state = sum(m.state_bytes_per_sequence or 0 for m in stateful)
    if not unknown:
        return dataclasses.replace(kv, state_bytes_per_sequence=state, state_reason=state_reason)
    layers = sorted(i for m in unknown for i in m.layers)
    not_counted = (f"{_counted(len(layers), 'layer')} of a type not known here ({_layers_text(layers)}; "
                   f"{unknown[0].source}) not counted")
    if kv.not_counted:
        not_counted = f"{kv.not_counted}; {not_counted}"
    if kv.bytes_per_token is None:  # nothing sized: unknown, never "none"
        reason = kv.reason if kv.status is CacheStatus.UNKNOWN else not_counted
        return dataclasses.replace(kv, status=CacheStatus.UNKNOWN, reason=reason, state_bytes_per_sequence=state,
                                   state_reason=state_reason, not_counted=not_counted)
    return dataclasses.replace(kv, state_bytes_per_sequence=state, state_reason=state_reason, lower_bound=True,
                               not_counted=not_counted)


def _model_cache(blocks: Sequence[AttentionBlock], options: SizeOptions, misses: Sequence[Miss] = (),
                 mixers: Sequence[Mixer] = ()) -> KVCache:
    """The model's KV cache (``_known_cache``) with the non-attention mixers' state beside it."""
    return _with_mixers(_known_cache(blocks, options, misses), mixers)


def _known_cache(blocks: Sequence[AttentionBlock], options: SizeOptions, misses: Sequence[Miss] = ()) -> KVCache:
    """The model's KV cache: what the caching self-attention blocks hold (cross-attention per encoder
    token beside it). Where a near miss or a block caches without a size, the figure of the blocks
    that are sized is a stated lower bound (``not_counted`` names the rest); unknown when none is."""
    missed = _missed_caches(misses, options)
    dtype = _cache_dtype(blocks)
    cross = [b for b in blocks if b.kind == BlockKind.CROSS and b.kv_cache_bytes_per_token is not None]
    # A module applied N times (shared layers) caches once per application.
    per_encoder = sum((b.kv_cache_bytes_per_token or 0) * b.applications for b in cross) if cross else None
    # Blocks whose cache cannot be told, or caches without a size.
    unknown = [b for b in blocks if b.kv_cache_status is CacheStatus.UNKNOWN
               or (b.kv_cache_status is not None and b.kv_cache_status.caches and b.kv_cache_bytes_per_token is None)]
    caching = [b for b in blocks if b.kind != BlockKind.CROSS and b.kv_cache_bytes_per_token is not None]
    left_out = [x for x in (missed.reason if missed is not None else None,
                            f"unknown for {_counted(len(unknown), 'block')} ({_first_names([b.name for b in unknown])}): "
                            f"{cache_reason(unknown[0])}" if unknown else None) if x]
    if left_out and not caching:
        if missed is not None:
            return missed
        return KVCache(None, dtype, options.context, options.batch, None, None, reason=left_out[0],
                       status=CacheStatus.UNKNOWN)
    if not caching:
        why = next((r for b in blocks if (r := cache_reason(b))), None) or (
            "only cross-attention caches (bytes_per_encoder_token per encoder token); no self-attention block "
            "caches per token" if cross else "the model has no attention blocks")
        return KVCache(None, None, options.context, options.batch, None, per_encoder, reason=why,
                       status=CacheStatus.NONE)
    kv = _self_cache(caching, dtype, per_encoder, options)
    if left_out:  # what the sized blocks hold is the least the model caches
        return dataclasses.replace(kv, lower_bound=True, not_counted="; ".join(left_out))
    return kv


def _first_names(names: Sequence[str]) -> str:
    """'a, b, c' or 'a, b, c and 4 more'."""
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _missed_caches(misses: Sequence[Miss], options: SizeOptions) -> KVCache | None:
    """An unknown cache when attention modules that cache are near misses (no block sizes them)."""
    unsized = [m for m in misses if m.caches]
    if not unsized:
        return None
    what = ("1 attention module that caches K/V during decoding is not a block" if len(unsized) == 1 else
            f"{len(unsized)} attention modules that cache K/V during decoding are not blocks")
    return KVCache(None, None, options.context, options.batch, None, None,
                   reason=f"{what} ({_first_names([m.anchor for m in unsized])}): {unsized[0].reason}",
                   status=CacheStatus.UNKNOWN)


def _cache_dtype(blocks: Sequence[AttentionBlock]) -> str | None:
    """The one dtype the sized caches use, "mixed" for several, None for none."""
    dtypes = {b.kv_cache_dtype for b in blocks if b.kv_cache_bytes_per_token is not None and b.kv_cache_dtype}
    return dtypes.pop() if len(dtypes) == 1 else ("mixed" if dtypes else None)


def _self_cache(caching: Sequence[AttentionBlock], dtype: str | None, per_encoder: int | None,
                options: SizeOptions) -> KVCache:
    """What the caching self-attention blocks hold per token and at the context; "if decoded"
    when only causal masks say they cache."""
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
    expanded, expanded_total = _expanded_cache(caching, options)
    indexer = sum(b.kv_cache_indexer_bytes_per_token * b.applications for b in caching)
    return KVCache(per_token, dtype, options.context, options.batch, total, per_encoder, reason=reason, status=status,
                   expanded_bytes_per_token=expanded, expanded_total_bytes=expanded_total,
                   indexer_bytes_per_token=indexer or None)


def _expanded_cache(caching: Sequence[AttentionBlock], options: SizeOptions) -> tuple[int | None, int | None]:
    """(per token, at the context) of the cache with every latent block holding its per-head K/V
    instead; (None, None) when no caching block is latent."""
    if not any(b.kv_cache_expanded_bytes_per_token is not None for b in caching):
        return None, None
    as_expanded = [dataclasses.replace(b, kv_cache_bytes_per_token=b.kv_cache_expanded_bytes_per_token)
                   if b.kv_cache_expanded_bytes_per_token is not None else b for b in caching]
    per_token = sum((b.kv_cache_bytes_per_token or 0) * b.applications for b in as_expanded)
    total = self_cache_bytes(as_expanded, options.context, options.batch) if options.context is not None else None
    return per_token, total


def _figure_fields(b: AttentionBlock, per_token: int, dtype: str | None, factors: CacheFactors, source: str
                   ) -> dict[str, Any]:
    """The fields of ``b`` caching ``per_token`` bytes: the figure, its dtype, its evidence
    (replacing an older one) and, for a latent block, the per-head equivalent."""
    figure = Evidence(KV_FIELD, per_token, source, cache_text(factors), factors)  # the text made from the values
    evidence = tuple(e for e in b.evidence if e.field != KV_FIELD) + (figure,)
    expanded = None
    if b.latent is not None and (n := _expanded_elements(b)) is not None and (size := _itemsize(dtype)) is not None:
        expanded = _bytes_of(n, size)
    indexer = _bytes_of(factors.indexer_width, Fraction(factors.itemsize))
    if expanded is not None:
        expanded += indexer
    return {"kv_cache_bytes_per_token": per_token, "kv_cache_reason": None, "kv_cache_dtype": dtype,
            "evidence": evidence, "kv_cache_expanded_bytes_per_token": expanded,
            "kv_cache_indexer_bytes_per_token": indexer}


def _with_figure(b: AttentionBlock, per_token: int, dtype: str | None, factors: CacheFactors, source: str,
                 status: CacheStatus) -> AttentionBlock:
    """``b`` caching ``per_token`` bytes (``_figure_fields``)."""
    return dataclasses.replace(b, kv_cache_status=status, **_figure_fields(b, per_token, dtype, factors, source))


def _with_cache(blocks: Sequence[AttentionBlock], decoding: Mapping[str, BlockDecoding], options: SizeOptions,
                weight_bytes: Mapping[str, int], also: Sequence[Mapping[str, Any]] = ()) -> tuple[AttentionBlock, ...]:
    """``blocks`` with their weight bytes and KV-cache fields (and ``also``: more fields per block,
    set in the same copy), one copy per block."""
    out = []
    for i, b in enumerate(blocks):
        more = also[i] if also else {}
        d = decoding.get(b.name)
        per_token, dtype, why, status = _block_cache(b, d, options.kv_dtype)
        window = d.window if d is not None and d.caches and b.kind != BlockKind.CROSS else None
        if isinstance(why, CacheFactors) and per_token is not None and d is not None:
            out.append(dataclasses.replace(b, weight_bytes=weight_bytes.get(b.name), sliding_window=window,
                                           kv_cache_status=status,
                                           **_figure_fields(b, per_token, dtype, why, d.source), **more))
        else:
            out.append(dataclasses.replace(b, weight_bytes=weight_bytes.get(b.name), sliding_window=window,
                                           kv_cache_bytes_per_token=None, kv_cache_reason=str(why),
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
    mixers = sized_mixers(inputs.mixers)
    summary: dict[str, Any] = {
        "weight_bytes": weights.total if inputs.tensors else None,
        "weight_bytes_by_dtype": weights.by_dtype,
        "weight_bytes_overhead": weights.overhead if inputs.tensors else None,
        "kv_cache": _model_cache(sized, options, misses, mixers),
        "mixers": mixers,
    }
    return sized, summary, tuple(warnings)


def check_kv_dtype(name: str) -> str:
    """The canonical name of a --kv-dtype value (the spellings --weight-dtype takes: fp16, fp8, int4,
    bf16, float8_e4m3fn, ...); ValueError for a name that is not a plain number type (a GGML block
    type packs weights, not a cache)."""
    if _itemsize(name.strip()) is None:
        raise ValueError(f"'{name}' is not a KV cache element type (float32, float16/fp16, bfloat16/bf16, "
                         "float8e4m3fn/fp8, int8, int4, ...)")
    return dtypes.canonical(name.strip())


def context_warning(model: ModelFacts, options: SizeOptions) -> ReportWarning | None:
    """A warning when --context asks for more tokens than the model was built for (its config's
    max_position_embeddings, GGUF context_length): the cache figure is still given at --context."""
    if options.context is None or model.max_positions is None or options.context <= model.max_positions:
        return None
    return ReportWarning(f"--context {options.context:,} is beyond the model's maximum positions "
                         f"({model.max_positions_source}): the KV cache is sized at {options.context:,} tokens all the "
                         "same, but the model was not built for them", WarningCode.CONTEXT_BEYOND_POSITIONS)


def with_options(report: Report, options: SizeOptions) -> Report:
    """``report`` with the KV cache at ``--context``/``--batch`` and, with ``--kv-dtype``, in that
    dtype; the per-block figures are recomputed from the block's own fields."""
    if options.context is None and options.batch == 1 and options.kv_dtype is None:
        return report
    blocks = report.blocks
    if options.kv_dtype is not None:
        name = check_kv_dtype(options.kv_dtype)
        new_size = _itemsize(name) or Fraction(0)
        changed = []
        for b in blocks:
            elements = _elements_per_token(b)
            status = b.kv_cache_status
            if elements is None or status is None or not status.caches:
                changed.append(b)
                continue
            before = next((e for e in b.evidence if e.field == KV_FIELD), None)
            if b.kv_cache_bytes_per_token is None or before is None or before.factors is None:
                # caches, in a dtype the source did not size
                factors = _factors(b, new_size, name, "--kv-dtype", b.kv_cache_reason or "")
                source = "option"
            else:  # the same figure in another dtype: its factors with the new element size
                factors = dataclasses.replace(before.factors, itemsize=float(new_size), dtype=name, dtype_source="--kv-dtype")
                source = before.source
            per_token = kv_bytes_per_token(b, new_size)
            assert per_token is not None  # its elements are known (checked above)
            per_token += _bytes_of(factors.indexer_width, new_size)
            changed.append(_with_figure(b, per_token, name, factors, source, status))
        blocks = tuple(changed)
    model = dataclasses.replace(report.model, kv_cache=_model_cache(blocks, options, report.misses,
                                                                    report.model.mixers))
    return dataclasses.replace(report, blocks=blocks, model=model)


# ----------------------------------------------------------------------------- memory at a context, weight dtype


def memory_at_context(report: Report, options: SizeOptions, model: ModelFacts) -> MemoryAtContext | None:
    """Weights + KV cache at --context (else at the model's maximum positions; None when neither is
    known): the total is None, with the reason, when either part is unknown."""
    kv = report.model.kv_cache
    if options.context is not None:
        context, source = options.context, "--context"
        cache = cache_bytes_at_context(kv)
    elif model.max_positions is not None:
        context, source = model.max_positions, f"the model's maximum ({model.max_positions_source})"
        cache = None
        if kv is not None and kv.status is CacheStatus.NONE:
            cache = 0
        elif kv is not None and kv.bytes_per_token is not None and kv.status is not CacheStatus.UNKNOWN:
            cache = self_cache_bytes(report.blocks, context, options.batch)
    else:
        return None
    weights = report.model.weight_bytes
    reason = None
    if weights is None:
        reason = "the weights' bytes are unknown"
    elif cache is None:
        reason = f"the KV cache is unknown: {kv.reason}" if kv is not None and kv.reason else "the KV cache is unknown"
    elif kv is not None and kv.bytes_per_encoder_token:
        reason = "cross-attention adds bytes_per_encoder_token per encoder token per sequence"
    state = None
    if kv is not None and kv.state_bytes_per_sequence is not None:
        state = kv.state_bytes_per_sequence * options.batch
    elif kv is not None and kv.state_reason is not None and reason is None:
        reason = f"the non-attention layers' state is unknown: {kv.state_reason}"
    if kv is not None and kv.lower_bound and reason is None:
        reason = f"a lower bound: {kv.not_counted}"
    total = None if weights is None or cache is None or (kv is not None and kv.state_reason is not None) \
        else weights + cache + (state or 0)
    return MemoryAtContext(context, source, options.batch, weights, cache, total, reason, state)


_LLAMA_CPP_MIX = re.compile(r"^(?P<base>q\d_k)_(?:s|m|l)$")  # llama.cpp file types: mostly base, some tensors wider


def check_weight_dtype(name: str) -> tuple[str, str]:
    """(canonical dtype, note) for --weight-dtype; llama.cpp's mixes (q4_k_m, q5_k_s, ...) by the
    type most of their tensors take. ValueError for a name that is no sized type."""
    asked = name.strip().lower()
    note = ""
    mix = _LLAMA_CPP_MIX.match(asked)
    if mix is not None and dtypes.lookup(asked) is None:
        asked = mix.group("base")
        note = (f"llama.cpp's {name.upper()} keeps some tensors (attn_v, ffn_down of some layers, output) in a wider "
                f"type: {asked} for every parameter is its floor")
    found = dtypes.lookup(asked)
    if found is None or found.block_bytes == 0 or found.family is dtypes.Family.OTHER:
        raise ValueError(f"'{name}' is not a weight type with a size (bfloat16, float16, fp8, int8, int4, q8_0, "
                         "q4_k, q4_k_m, mxfp4, ...)")
    return found.name, note


def weight_dtype_what_if(report: Report, name: str) -> WeightDtypeWhatIf:
    """Every parameter stored in ``name``: total_params × its bits per element, rounded up once (GGML
    block types by whole blocks, their scales inside). Plain integer and float8 types carry no scales
    here (a quantizer adds its own, e.g. one 16-bit scale per 128 values: +0.125 bit per parameter),
    and the stored overhead of the current format is not carried over."""
    from mhainspect.results.optional import WeightDtypeWhatIf  # imported when taken: --weight-dtype only

    dtype, mix = check_weight_dtype(name)
    found = dtypes.lookup(dtype)
    assert found is not None  # checked above
    total = report.model.total_params
    size = found.nbytes(total)
    scales = ("GGML blocks hold their scales" if found.family is dtypes.Family.QUANTIZED_BLOCK else
              "no quantization scales counted (a quantizer adds its own, e.g. +0.125 bit per parameter for a "
              "16-bit scale per 128 values)" if found.family is dtypes.Family.INTEGER or found.bits_per_element < 16
              else "")
    note = "; ".join(x for x in (f"every parameter ({total:,}) at {float(found.bits_per_element):g} bits", scales,
                                 "the stored overhead (scales of the current format, constant tables) not carried "
                                 "over", mix) if x)
    memory = report.model.memory
    kv = memory.kv_cache_bytes if memory is not None else None
    state = (memory.state_bytes or 0) if memory is not None else 0
    return WeightDtypeWhatIf(name, dtype, float(found.bits_per_element), size,
                             None if kv is None else size + kv + state, note)
