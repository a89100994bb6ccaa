"""Parameter counts of a found block under other head counts.

Two readings of "change the number of heads": keep the total projection width (the standard
PyTorch/MATLAB layout, d_k shrinks) or keep the per-head width d_k (Keras key_dim, T5 d_kv,
Llama head_dim), where every projection grows with the head count.
"""

from __future__ import annotations

from collections.abc import Iterable

from mhainspect.results import AttentionBlock, Projection, WhatIf

MAX_HEADS = 65_536  # a what-if head count above this is a typo, not a layer


def check_head_counts(heads: Iterable[int], option: str = "--heads") -> None:
    """The one check of user-given what-if head counts, for ``inspect`` and ``calc`` alike:
    raises ValueError (one line) for 0, negatives and absurdly large numbers."""
    for h in heads:
        if h < 1:
            raise ValueError(f"{option} {h}: a layer has at least 1 head")
        if h > MAX_HEADS:
            raise ValueError(f"{option} {h}: not a head count a layer can have (at most {MAX_HEADS:,})")


def total_width_reason(block: AttentionBlock, heads: int) -> str | None:
    """Why ``heads`` cannot split this block's projection width (None when it can)."""
    h, d_k, d_v = block.num_heads, block.d_k, block.d_v
    if h is None or d_k is None or d_v is None:
        return "the block's head layout is unknown"
    for what, width in (("query/key", h * d_k), ("value", h * d_v)):
        if width % heads:
            return f"the {what} width {width} is not divisible by {heads} heads"
    return None


_Roles = tuple[Projection | None, Projection | None, Projection | None, Projection | None]  # Q, K, V, O


def _roles(block: AttentionBlock) -> _Roles:
    """The first projection of each role (looked up once per block, not once per count)."""
    found: dict[str, Projection] = {}
    for p in block.projections:
        found.setdefault(p.role, p)
    return found.get("q"), found.get("k"), found.get("v"), found.get("o")


def _linear(p: Projection | None, in_f: int | None, out_f: int | None) -> int:
    if p is None or in_f is None or out_f is None:
        return 0
    return in_f * out_f + (out_f if p.bias_params else 0)


def count_with_widths(block: AttentionBlock, wq: int, wk: int, wv: int, o_in: int) -> int | None:
    """Projection params of this block with the given Q/K/V widths and O input width."""
    return _count(_roles(block), wq, wk, wv, o_in)


def _count(roles: _Roles, wq: int, wk: int, wv: int, o_in: int) -> int | None:
    q, k, v, o = roles
    if q is None or q.in_features is None:
        return None
    total = _linear(q, q.in_features, wq)
    total += _linear(k, k.in_features if k else None, wk)
    total += _linear(v, v.in_features if v else None, wv)
    total += _linear(o, o_in, o.out_features if o else None)
    return total


def _beside(block: AttentionBlock, roles: _Roles, wq: int, wk: int, wv: int, d_k: int) -> int:
    """What the block's total holds beside its projections' weights and biases at Q/K/V widths
    ``wq``/``wk``/``wv`` and head size ``d_k``: a latent block's down-projections and norms (as
    wide as the latents, whatever the heads), a sparse-attention indexer (its own heads), learned K/V rows, which are as wide as K and V (so
    they follow the widths), and Q/K norms: one vector for every head follows d_k, a norm over the
    whole width (or one vector per head) follows the width. ``roles``: the block's ``_roles``."""
    p = block.params
    norms = 0
    for proj, width in zip(roles[:2], (wq, wk)):
        if proj is None or not proj.norm_params:
            continue
        was = block.d_k if proj.norm_shared else proj.out_features
        now = d_k if proj.norm_shared else width
        norms += proj.norm_params * now // was if was else proj.norm_params
    for proj, width in zip(roles[:3], (wq, wk, wv)):  # a conv over a role follows its width
        if proj is not None and proj.conv_params:
            norms += proj.conv_params * width // proj.out_features if proj.out_features else proj.conv_params
    rows = 0
    if p.kv_rows:
        k0, v0 = roles[1], roles[2]
        was = (k0.out_features or 0 if k0 else 0) + (v0.out_features or 0 if v0 else 0)
        rows = p.kv_rows * (wk + wv) // was if was else p.kv_rows
    return p.latent + p.indexer + rows + norms  # an indexer has heads of its own: not the block's


def _gate(block: AttentionBlock, heads: int, o_in: int) -> int:
    """An output gate's own projection (``params.gate``) at ``heads`` heads and O's input ``o_in``:
    one gate per head follows the heads, one per value O's input width (``matchers.gate``)."""
    p, h, d_model = block.params.gate, block.num_heads, block.d_model
    if not p or not h:
        return p
    if d_model and p % h == 0 and p // h in (d_model, d_model + 1):  # [h, d_model] (+ a bias per head)
        return p // h * heads
    was = h * (block.d_v or 0)
    return p * o_in // was if was else p


def _k_width(block: AttentionBlock, kv_heads: int, d_k: int) -> int:
    """K's projection width at ``kv_heads``: a latent block's K up-projection makes only the
    non-rotary part of each head's key (the rotary part is one for all heads, from the
    down-projection: part of the block's ``params.latent``, whatever the head count)."""
    rope = block.latent.rope_dim if block.latent is not None else 0
    return kv_heads * (d_k - rope)


def kv_heads_for(block: AttentionBlock, heads: int) -> int:
    """The K/V heads a what-if at ``heads`` query heads assumes: as many (multi-head attention), or
    for grouped/multi-query attention the block's ratio kept, g·heads/h rounded to the nearest
    whole head (halves to even, Python's round) and at least 1. ``kv_heads_note`` says it in words."""
    h, g = block.num_heads or 1, block.num_kv_heads or block.num_heads or 1
    if g == h:
        return heads
    return max(1, round(g * heads / h))


KV_RULE = ("grouped-query blocks keep their ratio of query to K/V heads: g·N/h rounded to the nearest whole head "
           "(halves to even), at least 1")


def kv_heads_note(block: AttentionBlock, heads: int) -> str | None:
    """'8/2 kv at 3 heads: 1 kv (2·3/8 = 0.75)': what the what-if assumes for a grouped-query
    block's K/V heads (None for multi-head attention, or when the layout is unknown)."""
    h, g = block.num_heads, block.num_kv_heads
    if h is None or g is None or g == h or heads == h:
        return None
    exact = g * heads / h
    shown = f"{exact:g}" if exact == int(exact) else f"{exact:.2f}".rstrip("0")
    return f"{h}/{g} kv at {heads} heads: {kv_heads_for(block, heads)} kv ({g}·{heads}/{h} = {shown})"


def what_if(block: AttentionBlock, heads: int) -> WhatIf | None:
    return _what_if(block, _roles(block), heads)


def _what_if(block: AttentionBlock, roles: _Roles, heads: int) -> WhatIf | None:
    h, g, d_k, d_v = block.num_heads, block.num_kv_heads, block.d_k, block.d_v
    if h is None or g is None or d_k is None or d_v is None:
        return None
    g2 = kv_heads_for(block, heads)
    wk, wk2 = _k_width(block, g, d_k), _k_width(block, g2, d_k)
    same_width = _count(roles, h * d_k, wk, g * d_v, h * d_v)
    per_head = _count(roles, heads * d_k, wk2, g2 * d_v, heads * d_v)
    if same_width is None or per_head is None:
        return None
    same_width += _beside(block, roles, h * d_k, wk, g * d_v, h * d_k // heads) + _gate(block, heads, h * d_v)
    per_head += _beside(block, roles, heads * d_k, wk2, g2 * d_v, d_k) + _gate(block, heads, heads * d_v)
    if total_width_reason(block, heads) is not None:
        same_width = None  # h·d_k cannot be split into that many equal heads
    return WhatIf(num_heads=heads, total_width_fixed=same_width, head_dim_fixed=per_head)


def standard_layout_count(block: AttentionBlock) -> int | None:
    """Count if d_k were d_model / h (the layout PyTorch and most papers assume)."""
    h, g, d_model = block.num_heads, block.num_kv_heads, block.d_model
    if h is None or g is None or d_model is None or d_model % h or block.latent is not None:
        return None  # a latent block has no "standard" layout: its key is non-rotary + rotary parts
    d = d_model // h
    roles = _roles(block)
    count = _count(roles, h * d, g * d, g * d, h * d)
    return None if count is None else count + _beside(block, roles, h * d, g * d, g * d, d) + _gate(block, h, h * d)


def default_what_ifs(block: AttentionBlock, extra: tuple[int, ...] = ()) -> tuple[WhatIf, ...]:
    h = block.num_heads
    if h is None:
        return ()
    candidates = sorted({x for x in (h // 2, h * 2, *extra) if x >= 1 and x != h})
    roles = _roles(block)
    out = [w for w in (_what_if(block, roles, x) for x in candidates) if w is not None]
    return tuple(out)
