"""The Size section shared by the text renderers (terminal table, markdown): plain lines, no markup."""

from __future__ import annotations

from mhainspect.analysis.size import KV_FIELD, cache_reason
from mhainspect.ir.units import format_bytes, group
from mhainspect.results import AttentionBlock, BlockKind, CacheStatus, FitStatus, KVCache, Report
from mhainspect.results.stages import IF_DECODED

__all__ = ["IF_DECODED_LABEL", "OVERHEAD_LABEL", "block_cache_text", "block_size_line", "experts_line",
           "fit_lines", "latent_cache_text", "memory_line", "mixer_lines", "size_lines", "weight_dtype_line"]

# What weight_bytes_overhead is called in every format (table, markdown, html).
OVERHEAD_LABEL = "overhead (not parameters: scales, zero points, constant tables)"
# A cache figure of status if_decoded, in every format: only a causal mask says the model decodes.
IF_DECODED_LABEL = f"from a causal mask only: {IF_DECODED}"


def _bytes(n: int) -> str:
    return f"{group(n)} bytes ({format_bytes(n)})" if n >= 1024 else f"{group(n)} bytes"


def size_lines(report: Report) -> list[str]:
    """Weights by dtype and overhead (and --weight-dtype's what-if); the KV cache per token and at
    the context (or why none); the memory at the context."""
    lines = _weight_lines(report)
    if report.model.kv_cache is not None:
        lines += _cache_lines(report, report.model.kv_cache)
    return lines + [x for x in (memory_line(report),) if x] + fit_lines(report)


def _weight_lines(report: Report) -> list[str]:
    m = report.model
    lines: list[str] = []
    if m.weight_bytes is not None:
        by_dtype = ", ".join(f"{name} {group(n)}" for name, n in m.weight_bytes_by_dtype)
        lines.append(f"Weights: {_bytes(m.weight_bytes)}" + (f"; by dtype: {by_dtype}" if by_dtype else ""))
        if m.weight_bytes_overhead:
            lines.append(f"  {OVERHEAD_LABEL}: {_bytes(m.weight_bytes_overhead)}")
    if (what_if := weight_dtype_line(report)) is not None:
        lines.append(f"  {what_if}")
    return lines


def _cache_lines(report: Report, kv: KVCache) -> list[str]:
    lines: list[str] = []
    if kv.bytes_per_token is None:
        lines.append(f"KV cache: {'none' if kv.status is CacheStatus.NONE else 'unknown'} ({kv.reason or ''})")
    else:
        floor = "at least " if kv.lower_bound else ""
        line = f"KV cache: {floor}{_bytes(kv.bytes_per_token)} per token ({kv.dtype})"
        if kv.total_bytes is not None and kv.context is not None:
            line += f"; {_bytes(kv.total_bytes)} at context {group(kv.context)}"
            line += f" × batch {group(kv.batch)}" if kv.batch != 1 else ""
        elif kv.context is None:
            line += "; give --context N for the total"
        lines.append(line)
        if kv.status is CacheStatus.IF_DECODED:
            lines.append(f"  {IF_DECODED_LABEL}")
    if kv.not_counted is not None:
        lines.append(f"  a lower bound: {kv.not_counted}")
    if kv.indexer_bytes_per_token:
        lines.append(f"  of which sparse-attention indexer keys: {_bytes(kv.indexer_bytes_per_token)} per token")
    lines += mixer_lines(report)
    latent = latent_cache_text(report)
    if latent is not None:
        lines.append(f"  {latent}")
    if kv.bytes_per_encoder_token:
        lines.append(f"  cross-attention: {_bytes(kv.bytes_per_encoder_token)} per encoder token, cached once per input")
    windows = sorted({b.sliding_window for b in report.blocks if b.sliding_window})
    if windows:
        n = sum(1 for b in report.blocks if b.sliding_window)
        lines.append(f"  {n} sliding-window block{'s' if n != 1 else ''} (window "
                     f"{', '.join(group(w) for w in windows)}) hold{'s' if n == 1 else ''} at most "
                     f"{', '.join(group(max(w - 1, 0)) for w in windows)} past tokens")
    readers = [b for b in report.blocks if b.kv_cache_shared_from is not None]
    if readers:  # KV-sharing layers: their cache is their source's, counted there once
        pairs = ", ".join(f"{b.name} reads {b.kv_cache_shared_from}" for b in readers[:3])
        more = f" and {len(readers) - 3} more" if len(readers) > 3 else ""
        lines.append(f"  {len(readers)} block{'s' if len(readers) != 1 else ''} read another block's K/V cache and "
                     f"cache nothing of their own: {pairs}{more}")
    return lines


def _layers(layers: tuple[int, ...]) -> str:
    shown = ", ".join(str(i) for i in layers[:12])
    return ("layer " if len(layers) == 1 else "layers ") + shown + (", ..." if len(layers) > 12 else "")


def mixer_lines(report: Report) -> list[str]:
    """The layers that are no attention block, by kind, with the fixed state they keep per sequence."""
    lines = []
    for m in report.model.mixers:
        head = f"  {m.kind} mixer, {m.count} layer{'s' if m.count != 1 else ''} ({_layers(m.layers)}; {m.source})"
        if m.state_bytes_per_layer is not None and m.state_bytes_per_sequence is not None:
            lines.append(f"{head}: no K/V per token; a fixed state of {_bytes(m.state_bytes_per_layer)} per layer, "
                         f"{_bytes(m.state_bytes_per_sequence)} per sequence ({m.state_source})")
        else:
            lines.append(f"{head}: {m.reason or 'state unknown'}")
    return lines


def experts_line(report: Report) -> str | None:
    """A mixture of experts: the parameters one token uses beside the total (or why unknown)."""
    moe = report.model.experts
    if moe is None:
        return None
    experts = f"{moe.num_experts} routed experts" if moe.num_experts is not None else "routed experts"
    per = f", {moe.experts_per_token} per token" if moe.experts_per_token is not None else ""
    shared = ""
    if moe.shared_expert_params:
        count = f"{moe.num_shared_experts} " if moe.num_shared_experts else ""
        shared = f", {count}shared ({group(moe.shared_expert_params)} parameters, always active)"
    where = f"{experts} in {moe.moe_layers} layer{'s' if moe.moe_layers != 1 else ''}{per}{shared}"
    if moe.active_params is None:
        return f"Mixture of experts: {where}; active parameters per token unknown ({moe.reason or ''})"
    return (f"Mixture of experts: {where}; active per token {group(moe.active_params)} of "
            f"{group(report.model.total_params)} parameters")


def memory_line(report: Report) -> str | None:
    """Weights + KV cache at the context (--context, else the model's maximum positions)."""
    mem = report.model.memory
    if mem is None:
        return None
    at = f"context {group(mem.context)}" + (f" × batch {group(mem.batch)}" if mem.batch != 1 else "")
    at += "" if mem.context_source == "--context" else f", {mem.context_source}"
    if mem.total_bytes is None or mem.weight_bytes is None or mem.kv_cache_bytes is None:
        return f"Memory at {at}: unknown ({mem.reason or ''})"
    state = f" + mixer state {format_bytes(mem.state_bytes)}" if mem.state_bytes is not None else ""
    line = (f"Memory at {at}: weights {format_bytes(mem.weight_bytes)} + KV cache {format_bytes(mem.kv_cache_bytes)}"
            f"{state} = {_bytes(mem.total_bytes)}; activations and runtime buffers not counted")
    kv = report.model.kv_cache
    if kv is not None and kv.bytes_per_encoder_token:  # said in words, not by the JSON field's name
        return line + (f"; cross-attention adds {_bytes(kv.bytes_per_encoder_token)} per encoder token per "
                       "sequence, not in this total")
    return line + (f"; {mem.reason}" if mem.reason else "")


def fit_lines(report: Report) -> list[str]:
    """--gpu-memory: the longest context and the largest batch that fit, then how the model splits
    over the GPUs and what is not counted (an indented line)."""
    fit = report.model.fit
    if fit is None:
        return []
    where = (f"{fit.gpus} GPUs of {format_bytes(fit.gpu_memory_bytes)} each (tensor parallel)" if fit.gpus > 1
             else f"1 GPU of {format_bytes(fit.gpu_memory_bytes)}")
    detail = f"  {'; '.join(fit.notes)}"
    if fit.status is FitStatus.UNKNOWN or fit.weight_bytes_per_gpu is None or fit.free_bytes_per_gpu is None:
        return [f"Fit on {where}: unknown ({fit.reason or ''})", detail]
    weights = f"weights ({fit.weight_dtype}) {format_bytes(fit.weight_bytes_per_gpu)} per GPU"
    if fit.status is FitStatus.WEIGHTS_DO_NOT_FIT:
        return [f"Does not fit on {where}: {weights}, more than the GPU holds", detail]
    per_token = ("" if not fit.kv_bytes_per_token_per_gpu else
                 f", KV cache {_bytes(fit.kv_bytes_per_token_per_gpu)} per token per GPU ({fit.kv_dtype})")
    batch = f"{group(fit.batch)} sequence{'s' if fit.batch != 1 else ''}"
    longest = ("no limit" if fit.max_context is None else f"{group(fit.max_context)} tokens")
    line = (f"Fit on {where}: {weights}, {format_bytes(fit.free_bytes_per_gpu)} left; longest context {longest} "
            f"for {batch}{per_token}")
    if fit.context is not None:
        source = "" if fit.context_source == "--context" else f", {fit.context_source}"
        largest = "no limit" if fit.max_batch is None else group(fit.max_batch)
        line += f"; largest batch {largest} at context {group(fit.context)}{source}"
    if fit.reason:
        line += f" ({fit.reason})"
    return [line, detail]


def weight_dtype_line(report: Report) -> str | None:
    """--weight-dtype: the weights in that type (and with the KV cache at the memory context)."""
    w = report.model.weight_dtype
    if w is None:
        return None
    asked = f" (--weight-dtype {w.asked})" if w.asked.lower() != w.dtype else ""
    memory = report.model.memory
    with_kv = (f"; with the KV cache at context {group(memory.context)}: {format_bytes(w.memory_bytes)}"
               if w.memory_bytes is not None and memory is not None else "")
    return f"as {w.dtype}{asked}: {_bytes(w.bytes)}{with_kv} ({w.note})"


def latent_cache_text(report: Report) -> str | None:
    """What latent attention saves: the cache if its blocks kept per-head K/V instead of their
    latent, per token and at the context (None: no latent block caches)."""
    kv = report.model.kv_cache
    if kv is None or kv.expanded_bytes_per_token is None or not kv.bytes_per_token:
        return None
    n = sum(1 for b in report.blocks if b.latent is not None and b.kv_cache_bytes_per_token is not None)
    text = (f"latent attention ({n} block{'s' if n != 1 else ''}) caches its compressed K/V; per-head K/V would take "
            f"{_bytes(kv.expanded_bytes_per_token)} per token")
    if kv.expanded_total_bytes is not None and kv.context is not None:
        text += f", {_bytes(kv.expanded_total_bytes)} at context {group(kv.context)}"
    ratio = kv.expanded_bytes_per_token / kv.bytes_per_token
    return text + (f" ({ratio:.1f}× the latent cache)" if ratio > 1 else "")


def block_size_line(b: AttentionBlock) -> str:
    """One block's bytes, for --explain."""
    weights = "weights ?" if b.weight_bytes is None else f"weights {_bytes(b.weight_bytes)}"
    if b.kv_cache_bytes_per_token is not None:
        per = "per encoder token" if b.kind == BlockKind.CROSS else "per token"
        detail = next((e.detail for e in b.evidence if e.field == KV_FIELD), "")
        kv = f"KV cache {_bytes(b.kv_cache_bytes_per_token)} {per}"
        if b.kv_cache_expanded_bytes_per_token is not None and b.latent is not None and not b.latent.runtime_expands:
            kv += f" (latent; per-head K/V {_bytes(b.kv_cache_expanded_bytes_per_token)})"
        kv += f" [{detail}]"
    else:
        kv = f"KV cache: {block_cache_text(b) or 'unknown'}"
    return f"{weights}; {kv}"


def block_cache_text(b: AttentionBlock) -> str | None:
    """Why a block has no KV-cache figure, led by what its status says ("no cache: ...",
    "unknown: ..."); None when it has a figure or no size pass ran."""
    why = cache_reason(b)
    if why is None or b.kv_cache_status is None:
        return None
    return f"{'no cache' if b.kv_cache_status is CacheStatus.NONE else 'unknown'}: {why}"
