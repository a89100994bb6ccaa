"""What the caller says about decoding, and the size options that changed nothing.

``--decoder`` says the model decodes token by token with a K/V cache the source does not show (a
graph exported without past/present tensors, a checkpoint without a config): the blocks whose
decoding the source leaves open, or shows only by a causal mask, cache. ``--no-decoder`` says it
runs once over its input: those blocks cache nothing. Where the source decides (cache tensors, a
config, GGUF metadata, no mask at all), the source wins, as shapes win over a config.

The options a report could not use (``--context`` on a model without a cache figure, ``--decoder``
where the source decides every block) become warnings of code OPTION_WITHOUT_EFFECT, which the
CLI also says on stderr: an option never vanishes silently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mhainspect.results import AttentionBlock, CacheStatus, Report, ReportWarning, WarningCode
from mhainspect.results.stages import IF_DECODED, BlockDecoding, SizeInputs

DECODER_SAYS = "--decoder: the caller says the model decodes token by token with a K/V cache the source does not show"
NO_DECODER_SAYS = "--no-decoder: the caller says the model runs once over its input, caching nothing"
DECODER_HINT = ("if the model decodes token by token with a cache the source does not show, give --decoder; if it "
                "runs once over its input, --no-decoder")


def _open(d: BlockDecoding | None) -> bool:
    """The source leaves this block's decoding to the caller: nothing says, or only a causal mask."""
    return d is None or d.caches is None or (d.caches is True and d.if_decoded)


def _told(block: AttentionBlock, d: BlockDecoding | None, decoder: bool) -> BlockDecoding:
    """``d`` as the caller's word makes it (``_open`` blocks only)."""
    if not decoder:
        seen = f"; the source left it open: {d.reason}" if d is not None and d.reason else ""
        return BlockDecoding(block.name, False, f"{NO_DECODER_SAYS}{seen}", source="option")
    if d is None:
        return BlockDecoding(block.name, True, DECODER_SAYS, source="option")
    if d.caches is True:  # a causal mask: now what it caches, not what it would cache if decoded
        reason = d.reason.replace(IF_DECODED, DECODER_SAYS) if IF_DECODED in d.reason else f"{d.reason}; {DECODER_SAYS}"
        return dataclasses.replace(d, reason=reason, if_decoded=False)
    return dataclasses.replace(d, caches=True, reason=f"{DECODER_SAYS}; the source left it open: {d.reason}",
                               source="option",
                               if_decoded=False)


def as_told(blocks: Sequence[AttentionBlock], inputs: SizeInputs | None, decoder: bool | None
            ) -> tuple[SizeInputs | None, tuple[str, ...]]:
    """``inputs`` with the caller's word on decoding applied to the blocks the source leaves open,
    and the names of the blocks it changed (none when ``decoder`` is None)."""
    if decoder is None:
        return inputs, ()
    known = {d.block: d for d in inputs.decoding} if inputs is not None else {}
    changed: list[str] = []
    decoding: list[BlockDecoding] = []
    for b in blocks:
        d = known.get(b.name)
        if _open(d):
            decoding.append(_told(b, d, decoder))
            changed.append(b.name)
        elif d is not None:
            decoding.append(d)
    base = inputs if inputs is not None else SizeInputs()
    return dataclasses.replace(base, decoding=tuple(decoding)), tuple(changed)


def decoder_warnings(report: Report, decoder: bool | None, changed: Sequence[str]) -> tuple[ReportWarning, ...]:
    """--decoder / --no-decoder that changed no block (the blocks it changed say so in their KV evidence)."""
    if decoder is None:
        return ()
    option = "--decoder" if decoder else "--no-decoder"
    if changed:  # each changed block's KV evidence says so
        return ()
    why = ("the model has no attention blocks" if not report.blocks else
           "the source decides every block (cache tensors, a config, GGUF metadata, or no causal mask)")
    return (ReportWarning(f"{option} has no effect: {why}", WarningCode.OPTION_WITHOUT_EFFECT),)


def size_option_warnings(report: Report, *, context: bool, batch: bool, kv_dtype: bool,
                         decoder: bool | None = None, sized_at: bool = False) -> tuple[ReportWarning, ...]:
    """--context, --batch and --kv-dtype on a model whose KV cache has no figure: what they could not
    size (not after --no-decoder, which asked for no cache). --batch with no context to size a
    total at (``sized_at``: the model's maximum positions, or --gpu-memory, give one)."""
    given = [o for o, on in (("--context", context), ("--batch", batch), ("--kv-dtype", kv_dtype)) if on]
    kv = report.model.kv_cache
    if batch and not context and not sized_at and kv is not None and kv.bytes_per_token is not None:
        return (ReportWarning("--batch has no effect without --context N: the cache is a total only at a context "
                              "(per token it is the same for any batch)", WarningCode.OPTION_WITHOUT_EFFECT),)
    if not given or kv is None or kv.bytes_per_token is not None or decoder is False:
        return ()
    options = ", ".join(given[:-1]) + f" and {given[-1]}" if len(given) > 1 else given[0]
    verb = "has" if len(given) == 1 else "have"
    # Short: the why in full is the report's KV cache line (kv_cache.reason); here what it is about.
    if kv.status is CacheStatus.NONE:
        return (ReportWarning(f"{options} {verb} no effect: nothing in the model caches K/V (the KV cache line "
                              "says why)", WarningCode.OPTION_WITHOUT_EFFECT),)
    # The caller can settle whether a block decodes, not heads the source does not give.
    hint = f"; {DECODER_HINT}" if any(b.kv_cache_status is CacheStatus.UNKNOWN for b in report.blocks) else ""
    which = (kv.reason or "").split(": ", 1)[0]  # 'unknown for 1 block (model.layers.0.self_attn)'
    return (ReportWarning(f"{options} {verb} no effect: the KV cache is {which or 'unknown'}{hint}",
                          WarningCode.OPTION_WITHOUT_EFFECT),)
