"""Which layers of a GGUF model slide, and over how many tokens, as llama.cpp's loader decides.

convert_hf_to_gguf.py writes ``{arch}.attention.sliding_window`` for most models with a window but
rarely ``sliding_window_pattern``: which layers slide is set in code, per architecture, by
``llama_model::load_hparams`` (src/llama-model.cpp; ``set_swa_pattern(n)`` makes the last layer of
every n dense, ``set_swa_pattern(n, true)`` the first). ``LLAMA_CPP_SWA`` follows that function
for every architecture it gives a sliding window (read at ggml-org/llama.cpp 00342301), each entry
with the condition llama.cpp tests; a pattern key in the file wins over the table, as a file's
key wins in llama.cpp's newer loaders.

Pure: metadata in, ``SwaLayout`` out. ``mhainspect.frontends.gguf.reader`` reads the keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

LLAMA_CPP_COMMIT = "00342301d01add50835550e8a916f12097d94517"  # the load_hparams the table follows


class SwaWhen(str, Enum):
    """When an architecture's layers slide in load_hparams."""

    ALWAYS = "always"  # the pattern is set unconditionally
    WINDOW_KEY = "window_key"  # only when the file has sliding_window > 0 (OLMo 2, SmallThinker)
    UNLESS_ZERO = "unless_zero"  # unless the file says sliding_window = 0 (Llama 4's chunked attention)
    BLOCK_COUNT = "block_count"  # only at one block_count (EXAONE 4: the 64-layer 32B)
    NEVER = "never"  # llama.cpp turns the file's window off (Phi-3)


@dataclass(frozen=True)
class SwaRule:
    """What load_hparams sets for one architecture's sliding-window layers."""

    period: int  # set_swa_pattern(period)
    when: SwaWhen = SwaWhen.ALWAYS
    dense_first: bool = False  # set_swa_pattern(period, true): the first layer of each period is dense
    default_window: int | None = None  # n_swa set before the file's key is read (None: the key is required)
    fixed_window: int | None = None  # n_swa set whatever the file says (Llama 4's chunk, SmallThinker)
    block_count: int | None = None  # SwaWhen.BLOCK_COUNT: the layer count that slides
    chunked: bool = False  # LLAMA_SWA_TYPE_CHUNKED: attention within fixed chunks of the window's size
    note: str = ""


LLAMA_CPP_SWA: Mapping[str, SwaRule] = {
    "gemma2": SwaRule(2, default_window=4096, note="every other layer slides; window 4096 unless the file says"),
    "gemma3": SwaRule(6, note="five sliding layers, then one global"),
    "gemma3n": SwaRule(5, note="four sliding layers, then one global"),
    "gemma-embedding": SwaRule(6, note="symmetric window: five sliding layers, then one global (an encoder)"),
    "cohere2": SwaRule(4, note="three sliding layers, then one global"),
    "olmo2": SwaRule(4, SwaWhen.WINDOW_KEY, note="with a sliding_window: three sliding layers, then one global"),
    "exaone4": SwaRule(4, SwaWhen.BLOCK_COUNT, default_window=4096, block_count=64,
                       note="the 64-layer model only: three sliding layers, then one global; window 4096 unless "
                            "the file says"),
    "gpt-oss": SwaRule(2, note="every other layer slides (even layers), the odd ones are global"),
    "smallthinker": SwaRule(4, SwaWhen.WINDOW_KEY, dense_first=True, fixed_window=4096,
                            note="with a sliding_window: one global layer, then three sliding; window 4096"),
    "llama4": SwaRule(4, SwaWhen.UNLESS_ZERO, fixed_window=8192, chunked=True,
                      note="chunked attention in chunks of 8192: three chunked layers, then one global"),
    "phi3": SwaRule(1, SwaWhen.NEVER, note="llama.cpp disables Phi-3's sliding window: every layer keeps the "
                                          "whole context"),
}


@dataclass(frozen=True)
class SwaLayout:
    """Which layers slide (``slides``), the window, and what says so."""

    window: int
    window_source: str  # "GGUF gemma3.attention.sliding_window = 512", "llama.cpp's gemma2 default window 4096 ..."
    slides: tuple[bool, ...]
    pattern: Callable[[int], str]  # what says layer N slides
    chunked: bool = False


def slides_by_period(period: int, n_layer: int, dense_first: bool = False) -> tuple[bool, ...]:
    """llama_hparams::set_swa_pattern: with period 0 every layer slides; else the last layer of each
    period is dense (``dense_first``: the first)."""
    if dense_first:
        return tuple(period == 0 or il % period != 0 for il in range(n_layer))
    return tuple(period == 0 or il % period < period - 1 for il in range(n_layer))


def _uint(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _applies(rule: SwaRule, window_key: object, n_layer: int | None) -> bool:
    if rule.when is SwaWhen.NEVER:
        return False
    if rule.when is SwaWhen.WINDOW_KEY:
        return bool(_uint(window_key))
    if rule.when is SwaWhen.UNLESS_ZERO:
        return _uint(window_key) != 0
    if rule.when is SwaWhen.BLOCK_COUNT:
        return n_layer == rule.block_count
    return True


def disabled_note(arch: str, metadata: Mapping[str, object], prefix: str) -> str | None:
    """Why a window the file declares is not used (llama.cpp turns it off), or None."""
    rule = LLAMA_CPP_SWA.get(arch)
    window = _uint(metadata.get(f"{prefix}attention.sliding_window"))
    if rule is None or rule.when is not SwaWhen.NEVER or not window:
        return None
    return f"{prefix}attention.sliding_window = {window} in the file, but {rule.note}"


def swa_layout(arch: str, prefix: str, metadata: Mapping[str, object]) -> SwaLayout | None:
    """The sliding-window layers of the stack whose keys start with ``prefix`` (``gemma3.``), or None
    when no layer slides or nothing says which."""
    window_name, pattern_name = f"{prefix}attention.sliding_window", f"{prefix}attention.sliding_window_pattern"
    window_key, pattern_key = metadata.get(window_name), metadata.get(pattern_name)
    n_layer = _uint(metadata.get(f"{prefix}block_count"))
    rule = LLAMA_CPP_SWA.get(arch) if prefix == f"{arch}." else None
    if rule is not None and not _applies(rule, window_key, n_layer):
        return None
    window, window_source = _uint(window_key), f"GGUF {window_name} = {window_key}"
    if rule is not None and rule.fixed_window is not None:
        window, window_source = rule.fixed_window, f"llama.cpp's {arch} window {rule.fixed_window} (set in code" + (
            f"; the file's {window_name} = {window_key} is not used)" if window_key is not None else ")")
    elif not window and rule is not None and rule.default_window is not None and window_key is None:
        window = rule.default_window
        window_source = f"llama.cpp's {arch} default window {window} (no {window_name} in the file)"
    if not window:
        return None
    if isinstance(pattern_key, tuple):  # a per-layer array: true = sliding
        flags = pattern_key
        return SwaLayout(window, window_source, tuple(bool(x) for x in flags),
                         lambda il: f"{pattern_name}[{il}] = {flags[il] if il < len(flags) else None}",
                         rule.chunked if rule is not None else False)
    period, dense_first = _uint(pattern_key), False
    said = f"{pattern_name} = {pattern_key}"
    if period is None and rule is not None and pattern_key is None:
        period, dense_first = rule.period, rule.dense_first
        said = f"llama.cpp's {arch} default period {period}" + (", dense first" if dense_first else "") + \
            f" (no {pattern_name} in the file)"
    if period is None or n_layer is None:
        return None
    return SwaLayout(window, window_source, slides_by_period(period, n_layer, dense_first),
                     lambda il: f"{said} (llama.cpp: layer {il} slides)", rule.chunked if rule is not None else False)


def unknown_pattern_warning(arch: str, metadata: Mapping[str, object]) -> str | None:
    """A window the file declares without saying which layers slide, for an architecture the table
    does not know: the figure counts every layer at full context."""
    window = _uint(metadata.get(f"{arch}.attention.sliding_window"))
    if window and f"{arch}.attention.sliding_window_pattern" not in metadata and arch not in LLAMA_CPP_SWA:
        return (f"{arch}.attention.sliding_window = {window} without {arch}.attention.sliding_window_pattern: "
                "which layers slide is llama.cpp's per-architecture choice, not in the file; no block is marked "
                "sliding (a KV cache figure counts every layer at full context)")
    return None
