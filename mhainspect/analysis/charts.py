"""The numbers the HTML report draws, computed here and stored in the Report: the renderers read
them and compute none.

- per block, ``AttentionBlock.what_if_curve``: the projection parameters at the head counts its
  chart draws (1, the powers of two up to twice the heads or the largest --heads, the block's own
  count and its what-if rows), by ``whatif.what_if``;
- for the model, ``KVCache.by_context``: the bytes the KV cache holds at the context lengths its
  chart draws (16 even steps up to 32k tokens, or to twice the --context, every sliding window
  below that, and the context itself), by ``size.self_cache_bytes``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

from mhainspect.analysis.size import self_cache_bytes
from mhainspect.analysis.whatif import what_if
from mhainspect.results import AttentionBlock, BlockKind, KVCache, Report, WhatIf

__all__ = ["curve_heads", "kv_bytes_at", "kv_contexts", "state_bytes_at", "what_if_curve", "with_charts"]

KV_CHART_TOKENS = 32768  # the KV chart's x axis reaches this, doubled until it holds twice the context
KV_CHART_STEPS = 16


def curve_heads(b: AttentionBlock) -> list[int]:
    """The head counts a block's what-if chart draws."""
    h = b.num_heads or 1
    top = max([2 * h, *(w.num_heads for w in b.what_if)])
    values = {1, h, 2 * h, *(w.num_heads for w in b.what_if)}
    p = 2
    while p <= top:
        values.add(p)
        p *= 2
    return sorted(v for v in values if 1 <= v <= top)


def what_if_curve(b: AttentionBlock) -> tuple[WhatIf, ...]:
    """The block's counts at ``curve_heads`` (a count that has none is left out); empty for a block
    whose heads are unknown."""
    if b.num_heads is None:
        return ()
    return tuple(w for x in curve_heads(b) if (w := what_if(b, x)) is not None)


def _layout(b: AttentionBlock) -> Hashable:
    """Everything what_if reads of a block: blocks alike in it have the same curve (a model's
    layers mostly are), so it is computed once for them."""
    return (b.num_heads, b.num_kv_heads, b.d_k, b.d_v, b.d_model, b.latent, b.params,
            tuple((p.role, p.in_features, p.out_features, bool(p.bias_params)) for p in b.projections),
            tuple(w.num_heads for w in b.what_if))


def kv_bytes_at(report: Report, context: int) -> int | None:
    """KV cache bytes at ``context`` tokens, by the size module's rule (sliding windows capped,
    shared layers once per application) when the blocks carry per-block figures, else the model's
    bytes per token; times the cache's batch. None when the cache has no size per token."""
    kv = report.model.kv_cache
    if kv is None or kv.bytes_per_token is None:
        return None
    if any(b.kv_cache_bytes_per_token is not None and b.kind != BlockKind.CROSS for b in report.blocks):
        return self_cache_bytes(report.blocks, context, kv.batch)
    return kv.bytes_per_token * context * kv.batch


def state_bytes_at(kv: KVCache) -> int | None:
    """What the non-attention mixers (linear attention, state-space, convolution layers) hold for the
    cache's batch at any context: their fixed state per sequence times the batch, as the memory
    figure counts it; None when no layer keeps such a state or it cannot be sized."""
    if kv.state_bytes_per_sequence is None:
        return None
    return kv.state_bytes_per_sequence * kv.batch


def kv_contexts(report: Report) -> list[int]:
    """The context lengths the KV chart draws: even steps (the cache grows linearly), plus the
    model's own context and every window, where the line bends."""
    kv = report.model.kv_cache
    top = KV_CHART_TOKENS
    while top < 2 * (kv.context or 0 if kv is not None else 0):
        top *= 2
    windows = {b.sliding_window for b in report.blocks if b.sliding_window is not None and b.sliding_window < top}
    own = {kv.context} if kv is not None and kv.context else set()
    return sorted({top * i // KV_CHART_STEPS for i in range(KV_CHART_STEPS + 1)} | windows | own)


def with_charts(report: Report) -> Report:
    """``report`` with every block's what-if curve, the KV cache's bytes by context and the mixers'
    fixed state at the same contexts (one new Report: the points read only fields the curves leave
    as they are)."""
    curves: dict[Hashable, tuple[WhatIf, ...]] = {}
    blocks = []
    for b in report.blocks:
        key = _layout(b)
        curve = curves.get(key)
        if curve is None:
            curve = curves[key] = what_if_curve(b)
        blocks.append(dataclasses.replace(b, what_if_curve=curve) if curve else b)
    model = report.model
    kv: KVCache | None = model.kv_cache
    if kv is not None and (kv.bytes_per_token is not None or kv.state_bytes_per_sequence is not None):
        contexts = kv_contexts(report)
        points = tuple((c, v) for c in contexts if (v := kv_bytes_at(report, c)) is not None)
        state = state_bytes_at(kv)
        model = dataclasses.replace(model, kv_cache=dataclasses.replace(
            kv, by_context=points, state_by_context=tuple((c, state) for c in contexts) if state is not None else ()))
    return dataclasses.replace(report, blocks=tuple(blocks), model=model)
