"""Will it fit: the longest context and the largest batch whose weights, KV cache and fixed
per-sequence state fit in the memory of each GPU (--gpu-memory, --gpus).

Tensor parallelism over N GPUs, as vLLM and TensorRT-LLM lay a model out:

- the weights are split evenly: each GPU holds ceil(weight_bytes / N) (the few tensors an engine
  replicates, norms and biases, are not counted twice);
- a caching layer's K/V heads are split: each GPU holds ceil(g / N) of its g heads, and at least
  one (a layer with fewer K/V heads than GPUs replicates them, one head per GPU);
- a latent (MLA) cache is one vector per token, not per head: every GPU keeps all of it;
- a sliding-window layer holds at most window - 1 tokens (``size.self_cache_bytes``, the one rule
  for every cache figure).

Nothing else is counted: activations, the runtime's own buffers and its allocator's reserve
(vLLM keeps 10% of a GPU back by default) come on top. Pure: the Report in, a GpuFit out.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from mhainspect.analysis.size import self_cache_bytes
from mhainspect.ir.units import format_bytes, group
from mhainspect.results import AttentionBlock, BlockKind, CacheStatus, FitStatus, GpuFit, ModelFacts, Report

NOT_COUNTED = "activations and the runtime's buffers not counted (an engine also keeps some memory back)"


@dataclass(frozen=True)
class FitOptions:
    """--gpu-memory (bytes per GPU) and --gpus (tensor-parallel degree)."""

    gpu_memory: int
    gpus: int = 1


def kv_heads_per_gpu(kv_heads: int, gpus: int) -> int:
    """The K/V heads of one layer that one GPU holds: an even split (the most loaded GPU when they do
    not divide), at least one (fewer heads than GPUs: each head replicated)."""
    return max(1, -(-kv_heads // gpus))


def _per_gpu(b: AttentionBlock, gpus: int) -> AttentionBlock:
    """``b`` with its cache per token as one GPU holds it."""
    per_token = b.kv_cache_bytes_per_token
    if per_token is None or gpus == 1 or not b.num_kv_heads:
        return b
    if b.latent is not None and not b.latent.runtime_expands:
        return b  # one latent per token, whatever the heads: every GPU keeps it whole
    share = per_token // b.num_kv_heads * kv_heads_per_gpu(b.num_kv_heads, gpus)
    return dataclasses.replace(b, kv_cache_bytes_per_token=share)


def _split_notes(blocks: Sequence[AttentionBlock], gpus: int) -> list[str]:
    """How the caching blocks' K/V heads split over the GPUs, one phrase per kind of split."""
    if gpus == 1:
        return []
    latent = sum(1 for b in blocks if b.latent is not None and not b.latent.runtime_expands)
    heads = Counter(b.num_kv_heads for b in blocks if b.num_kv_heads
                    and not (b.latent is not None and not b.latent.runtime_expands))
    notes = []
    for g, n in sorted(heads.items()):
        layers = f"{n} layer{'s' if n != 1 else ''}"
        each = kv_heads_per_gpu(g, gpus)
        if g < gpus:
            notes.append(f"{g} K/V head{'s' if g != 1 else ''} per layer ({layers}), fewer than {gpus} GPUs: "
                         f"replicated, {each} per GPU")
        elif g % gpus:
            notes.append(f"{g} K/V heads per layer ({layers}) do not split evenly over {gpus} GPUs: {each} per GPU "
                         "counted (the most loaded; vLLM refuses such a split)")
        else:
            notes.append(f"{g} K/V heads per layer ({layers}) split over {gpus} GPUs: {each} per GPU")
    if latent:
        notes.append(f"latent cache ({latent} block{'s' if latent != 1 else ''}) kept whole on every GPU")
    return notes


def _longest(cache: Sequence[AttentionBlock], batch: int, state: int, free: int) -> int | None:
    """The most tokens ``batch`` sequences can each hold in ``free`` bytes; None: no limit (every
    caching layer is a sliding window and the full windows fit)."""
    def used(tokens: int) -> int:
        return batch * state + self_cache_bytes(cache, tokens, batch)

    if used(0) > free:
        return 0
    growing = [b for b in cache if b.sliding_window is None]
    if growing:  # the cache grows at least this fast: an upper bound for the search
        rate = batch * sum((b.kv_cache_bytes_per_token or 0) * b.applications for b in growing)
        high = free // rate + 1 if rate else None
    else:
        high = max(b.sliding_window or 0 for b in cache) if cache else 0
    if high is None or used(high) <= free:
        return None
    low = 0  # used(low) <= free < used(high)
    while high - low > 1:
        mid = (low + high) // 2
        if used(mid) <= free:
            low = mid
        else:
            high = mid
    return low


def gpu_fit(report: Report, options: FitOptions, model: ModelFacts, context: int | None, batch: int = 1) -> GpuFit:
    """What fits on ``options.gpus`` GPUs of ``options.gpu_memory`` bytes: the longest context at
    ``batch`` sequences and the largest batch at ``context`` tokens (--context, else the model's
    maximum positions), from the report's weight bytes (or --weight-dtype's) and KV cache."""
    gpus = options.gpus
    summary = report.model
    weights: int | None = summary.weight_bytes
    weight_dtype = "as stored"
    if summary.weight_dtype is not None:
        weights, weight_dtype = summary.weight_dtype.bytes, summary.weight_dtype.dtype
    context_source = ""
    if context is not None:
        context_source = "--context"
    elif model.max_positions is not None:
        context, context_source = model.max_positions, f"the model's maximum ({model.max_positions_source})"
    kv = summary.kv_cache
    caching = [b for b in report.blocks if b.kind != BlockKind.CROSS and b.kv_cache_bytes_per_token is not None]
    cache = [_per_gpu(b, gpus) for b in caching]
    notes = [*_split_notes(caching, gpus)]
    if gpus > 1:
        notes.append(f"weights split evenly over {gpus} GPUs")
    if kv is not None and kv.bytes_per_encoder_token:
        notes.append("cross-attention's cache (per encoder token) not counted")
    notes.append(NOT_COUNTED)
    # The non-attention mixers' fixed state per sequence (linear attention, SSM, convolution), split
    # over the GPUs with their layers; attention blocks' caches grow with the context instead.
    state = -(-kv.state_bytes_per_sequence // gpus) if kv is not None and kv.state_bytes_per_sequence else 0
    if kv is not None and kv.state_reason:
        notes.append(f"the mixers' state not counted: {kv.state_reason}")
    if kv is not None and kv.not_counted:
        notes.append(f"a lower bound: {kv.not_counted}")
    per_token = sum((b.kv_cache_bytes_per_token or 0) * b.applications for b in cache) if cache else 0
    fit = GpuFit(options.gpu_memory, gpus, FitStatus.UNKNOWN, weight_dtype, None, kv.dtype if kv else None,
                 None, state, batch, None, context, context_source, None, None, tuple(notes))
    if weights is None:
        return dataclasses.replace(fit, reason="the weights' bytes are unknown")
    weight_share = -(-weights // gpus)
    free = options.gpu_memory - weight_share
    fit = dataclasses.replace(fit, weight_bytes_per_gpu=weight_share, free_bytes_per_gpu=free)
    if kv is None or kv.status is CacheStatus.UNKNOWN:
        why = kv.reason if kv is not None and kv.reason else "no attention block sizes it"
        return dataclasses.replace(fit, reason=f"the KV cache is unknown: {why}")
    fit = dataclasses.replace(fit, kv_bytes_per_token_per_gpu=per_token)
    if free < 0:
        return dataclasses.replace(fit, status=FitStatus.WEIGHTS_DO_NOT_FIT, reason=(
            f"the weights alone take {format_bytes(weight_share)} of each GPU's {format_bytes(options.gpu_memory)}"))
    longest = _longest(cache, batch, state, free)
    per_sequence = None if context is None else state + self_cache_bytes(cache, context, 1)
    largest = None if per_sequence is None or per_sequence == 0 else free // per_sequence
    reason = None
    if longest is None:
        reason = ("nothing is cached: the context does not grow the memory" if not cache else
                  f"every caching layer is a sliding window: the cache stops growing, and {group(batch)} full "
                  "windows fit")
    if context is None:
        reason = "; ".join(x for x in (reason, "no context known for the largest batch (give --context)") if x)
    return dataclasses.replace(fit, status=FitStatus.FITS, max_context=longest, max_batch=largest, reason=reason)
