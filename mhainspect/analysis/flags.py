"""Flag rules: stable codes over the found blocks. Messages are plain sentences with numbers;
the numbers are also in ``Flag.data`` so renderers and dashboards never parse text."""

from __future__ import annotations

import math
from collections import Counter

from mhainspect.analysis.whatif import standard_layout_count, what_if
from mhainspect.results import AttentionBlock, BlockKind, EvidenceSource, Flag, Severity

FLAG_CODES: dict[str, tuple[Severity, str]] = {
    "MHA001": (Severity.WARNING, "h·d_k ≠ d_model: projection width is per head, so parameters scale with the "
                                 "head count"),
    "MHA002": (Severity.INFO, "d_k ≠ d_v"),
    "MHA003": (Severity.INFO, "scores are not scaled by 1/√d_k"),
    "MHA004": (Severity.WARNING, "head count not identifiable from the graph"),
    "MHA005": (Severity.INFO, "grouped/multi-query attention: K/V width = kv_heads·d_k"),
    "MHA006": (Severity.INFO, "head layout differs between attention blocks of the model"),
    "MHA007": (Severity.WARNING, "sources disagree about the block (metadata or config against weight shapes)"),
    "MHA008": (Severity.WARNING, "no output projection found: the block's parameters leave O out"),
}


def _flag(code: str, block: str | None, message: str, **data: int | float | str | None) -> Flag:
    return Flag(code, FLAG_CODES[code][0], block, message, tuple(sorted(data.items())))


def block_flags(b: AttentionBlock) -> list[Flag]:
    """The block's flags, in code order: a conflict (MHA007), no output projection (MHA008), unknown
    heads (MHA004, then nothing else), h·d_k ≠ d_model (MHA001), d_k ≠ d_v (MHA002), an unusual scale
    (MHA003), GQA/MQA (MHA005)."""
    out: list[Flag] = []
    if b.conflicts:
        more = f" (+{len(b.conflicts) - 1} more)" if len(b.conflicts) > 1 else ""
        out.append(_flag("MHA007", b.name, f"{b.conflicts[0]}{more}.", conflicts=len(b.conflicts)))
    missing_o = _missing_output(b)
    if missing_o is not None:
        out.append(missing_o)
    if b.num_heads is None:
        out.append(_flag("MHA004", b.name, f"heads unknown: {b.unknown_reason or 'no evidence'}",
                         reason=b.unknown_reason))
        return out
    for check in (_width_flag, _value_width_flag, _scale_flag, _grouped_flag):
        flag = check(b, b.num_heads)
        if flag is not None:
            out.append(flag)
    return out


def _missing_output(b: AttentionBlock) -> Flag | None:
    """MHA008: the matcher looked for the output projection and found none (the evidence says where
    it stopped): O counts 0 in the block, a gap to see, never a silent zero."""
    if any(p.role == "o" for p in b.projections):
        return None
    why = next((e.detail for e in b.evidence if e.field == "o" and e.source == EvidenceSource.MISSING), None)
    if why is None:
        return None
    return _flag("MHA008", b.name, f"{why}: the block's {b.params.total:,} parameters leave O out (an output "
                 "projection the walk from the attention's result did not reach, or none in the model)", reason=why)


def _width_flag(b: AttentionBlock, h: int) -> Flag | None:
    """MHA001: projections h·d_k wide where d_model is not, so the parameters follow the head count."""
    d_k, d_model = b.d_k, b.d_model
    # Additive attention has one head by construction: its width is no per-head choice.
    if d_k is None or d_model is None or h * d_k == d_model or b.kind == BlockKind.ADDITIVE:
        return None
    std = standard_layout_count(b)
    half, double = what_if(b, max(1, h // 2)), what_if(b, h * 2)
    parts = [f"{h} heads × d_k {d_k} = {h * d_k} ≠ d_model {d_model}: Q/K/V/O widths follow the head "
             f"count, so this block's {b.params.total:,} parameters scale with it"]
    if half is not None and double is not None and h > 1:
        parts.append(f"{half.head_dim_fixed:,} at {half.num_heads} heads, {double.head_dim_fixed:,} at "
                     f"{double.num_heads}")
    if std is not None:
        parts.append(f"the standard layout (d_k = {d_model // h}) would hold {std:,}")
    return _flag("MHA001", b.name, "; ".join(parts) + ".", heads=h, d_k=d_k, d_model=d_model,
                 projection_width=h * d_k, params=b.params.total, standard_layout_params=std,
                 params_at_half_heads=half.head_dim_fixed if half else None,
                 params_at_double_heads=double.head_dim_fixed if double else None)


def _value_width_flag(b: AttentionBlock, h: int) -> Flag | None:
    """MHA002: value heads wider or narrower than query/key heads."""
    d_k, d_v = b.d_k, b.d_v
    if d_k is None or d_v is None or d_k == d_v or b.kind == BlockKind.ADDITIVE:
        return None
    return _flag("MHA002", b.name, f"d_k {d_k} ≠ d_v {d_v}: value heads are {'wider' if d_v > d_k else 'narrower'} "
                 "than query/key heads.", d_k=d_k, d_v=d_v)


def _scale_flag(b: AttentionBlock, h: int) -> Flag | None:
    """MHA003: a known score scale other than 1/√d_k (none at all included)."""
    if not (b.scale_known and b.scale is not None and b.d_k):
        return None
    expected = 1.0 / math.sqrt(b.d_k)
    if math.isclose(b.scale, expected, rel_tol=1e-3):
        return None
    what = ("the graph applies no scale to the scores (no factor on Q, K or Q·Kᵀ before the Softmax)"
            if b.scale == 1.0 else f"scores are scaled by {b.scale:.6g}")
    return _flag("MHA003", b.name, f"{what}; 1/√d_k would be {expected:.6g}.", scale=b.scale, expected=expected)


def _grouped_flag(b: AttentionBlock, h: int) -> Flag | None:
    """MHA005: fewer K/V heads than query heads (grouped- or multi-query attention)."""
    g, d_k = b.num_kv_heads, b.d_k
    if g is None or g >= h:
        return None
    kind = "multi-query" if g == 1 else "grouped-query"
    width = f"K/V width = {g}·{d_k} = {g * d_k}" if d_k else f"{g} K/V heads"
    return _flag("MHA005", b.name, f"{kind} attention: {h} query heads share {g} K/V head"
                 f"{'s' if g > 1 else ''}; {width}.", heads=h, kv_heads=g, d_k=d_k)


def _layout(b: AttentionBlock) -> str:
    kv = f"/{b.num_kv_heads}kv" if b.num_kv_heads not in (None, b.num_heads) else ""
    return f"{b.num_heads}{kv} heads × d_k {b.d_k}, d_v {b.d_v}"


def model_flags(blocks: tuple[AttentionBlock, ...]) -> list[Flag]:
    known = [b for b in blocks if b.num_heads is not None]
    layouts = Counter(_layout(b) for b in known)
    if len(layouts) <= 1:
        return []
    desc = ", ".join(f"{n} block{'s' if n > 1 else ''} with {lay}" for lay, n in layouts.items())
    return [_flag("MHA006", None, f"{len(layouts)} different head layouts: {desc}.", layouts=len(layouts))]


def evaluate(blocks: tuple[AttentionBlock, ...]) -> tuple[Flag, ...]:
    flags: list[Flag] = []
    for b in blocks:
        flags.extend(block_flags(b))
    flags.extend(model_flags(blocks))
    return tuple(flags)
