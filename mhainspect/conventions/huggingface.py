"""Hugging Face Llama-style attention (``hf``): its arguments, its count, and how it reads a comparison."""

from __future__ import annotations

from collections.abc import Mapping

from mhainspect.conventions.common import (
    ArgValue,
    Calculation,
    Convention,
    Param,
    Spec,
    build,
    flag,
    optional_positive,
    positive,
    term,
    thousands,
)
from mhainspect.conventions.roles import Built, per_head, role_int, self_only

SPEC = Spec(
    params=(
        Param("hidden_size", "int", required=True),
        Param("num_attention_heads", "int", required=True),
        Param("num_key_value_heads", "opt_int"),
        Param("head_dim", "opt_int"),
        Param("attention_bias", "bool", default=False),
    ),
    heads="num_attention_heads",
    ignored=("attention_dropout",),
)


def hf(
    hidden_size: int,
    num_attention_heads: int,
    num_key_value_heads: int | None = None,
    head_dim: int | None = None,
    attention_bias: bool = False,
) -> Calculation:
    """Hugging Face Llama-style attention: H·d(h+2g) + h·d·H (+ h·d + 2·g·d + H with bias).

    As transformers' ``LlamaAttention``: head_dim defaults to hidden_size // num_attention_heads,
    num_key_value_heads to num_attention_heads, and attention_bias puts a bias on all four
    projections (o_proj included).
    """
    H = positive("hidden_size", hidden_size)
    h = positive("num_attention_heads", num_attention_heads)
    g = optional_positive("num_key_value_heads", num_key_value_heads) or h
    given_d = optional_positive("head_dim", head_dim)
    b = flag("attention_bias", attention_bias)
    if h % g:
        raise ValueError(
            "num_attention_heads must be divisible by num_key_value_heads "
            f"(num_attention_heads={h}, num_key_value_heads={g})"
        )
    if given_d is None and H % h:
        raise ValueError(
            "hidden_size must be divisible by num_attention_heads when head_dim is not given "
            f"(hidden_size={H}, num_attention_heads={h})"
        )
    d = given_d if given_d is not None else H // h
    terms = [
        term("W_Q", "hidden_size × num_attention_heads × head_dim", (H, h, d), is_bias=False, tensor="q_proj.weight"),
        term("W_K", "hidden_size × num_key_value_heads × head_dim", (H, g, d), is_bias=False, tensor="k_proj.weight"),
        term("W_V", "hidden_size × num_key_value_heads × head_dim", (H, g, d), is_bias=False, tensor="v_proj.weight"),
        term("W_O", "num_attention_heads × head_dim × hidden_size", (h, d, H), is_bias=False, tensor="o_proj.weight"),
    ]
    if b:
        terms += [
            term("b_Q", "num_attention_heads × head_dim", (h, d), is_bias=True, tensor="q_proj.bias"),
            term("b_K", "num_key_value_heads × head_dim", (g, d), is_bias=True, tensor="k_proj.bias"),
            term("b_V", "num_key_value_heads × head_dim", (g, d), is_bias=True, tensor="v_proj.bias"),
            term("b_O", "hidden_size", (H,), is_bias=True, tensor="o_proj.bias"),
        ]
    kv_given = num_key_value_heads is not None
    if given_d is not None:
        scales = True
        q_head = 2 * H * d + (d if b else 0)
        if kv_given:
            explanation = (
                f"head_dim ({d}) is fixed, so the query and output projections are "
                f"num_attention_heads × head_dim = {h * d} wide: each extra query head adds "
                f"{thousands(q_head)} parameters (its q_proj and o_proj slices). K and V are "
                f"num_key_value_heads × head_dim = {g * d} wide and follow num_key_value_heads "
                f"({g}), not the query head count."
            )
        else:
            explanation = (
                f"head_dim ({d}) is fixed and num_key_value_heads follows num_attention_heads, "
                f"so all four projections are num_attention_heads × head_dim = {h * d} wide: "
                f"each extra head adds {thousands(2 * q_head + 2 * H * d + (2 * d if b else 0))} "
                "parameters (its q, k, v and o slices)."
            )
    elif kv_given and g != h:
        scales = True
        explanation = (
            f"head_dim is derived, hidden_size / num_attention_heads = {H} / {h} = {d}, so the "
            f"query and output projections stay hidden_size ({H}) wide whatever the head count. "
            f"But K and V are num_key_value_heads × head_dim = {g} × {d} = {g * d} wide: with "
            f"num_key_value_heads fixed at {g}, more query heads mean a smaller head_dim and "
            "narrower (cheaper) K/V projections, fewer heads wider ones."
        )
    else:
        scales = False
        explanation = (
            f"head_dim is derived, hidden_size / num_attention_heads = {H} / {h} = {d}, and "
            "num_key_value_heads follows num_attention_heads, so every projection stays "
            f"hidden_size ({H}) wide: the head count only changes how the width is sliced, not "
            "the parameter count. It would scale with the heads if head_dim were fixed."
        )
    notes = []
    if h * d != H:
        notes.append(
            f"num_attention_heads × head_dim = {h * d} ≠ hidden_size = {H}: the attention "
            "width is set per head (as in Gemma-7B or Qwen3-4B), not by the model width."
        )
    if g != h:
        notes.append(
            f"Grouped-query attention: {g} key/value heads shared by {h} query heads; K/V "
            f"width = num_key_value_heads × head_dim = {g * d}."
        )
    notes.append(
        "Llama's attention_bias biases q_proj, k_proj, v_proj and o_proj; Qwen2-style models bias "
        "q/k/v only (subtract hidden_size from the biases there)."
    )
    args: tuple[tuple[str, ArgValue], ...] = (
        ("hidden_size", H),
        ("num_attention_heads", h),
        ("num_key_value_heads", g),
        ("head_dim", d),
        ("attention_bias", b),
    )
    return build(
        convention="hf",
        arguments=args,
        terms=terms,
        num_heads=h,
        d_k=d,
        d_v=d,
        q_width=h * d,
        v_width=g * d,
        d_model=H,
        output_dim=H,
        scales_with_heads=scales,
        explanation=explanation,
        notes=notes,
    )


def for_compare(v: Mapping[str, ArgValue], E: int, h: int) -> Built:
    """The arguments of ``compare`` (by role, roles.ROLES) as this layer's own, with what it assumed;
    or why the layer cannot take them."""
    reason = self_only(v, E, "Llama-style attention")
    if reason:
        return reason
    d = per_head(v, "head_dim", "qk_total", h)
    dv = per_head(v, "v_head_dim", "v_total", h)
    if isinstance(d, str):
        return d
    if isinstance(dv, str):
        return dv
    effective_d = d if d is not None else E // h
    if dv is not None and dv != effective_d:
        return "Llama-style attention uses one head_dim for keys and values"
    args: dict[str, ArgValue] = {
        "hidden_size": E,
        "num_attention_heads": h,
        "num_key_value_heads": role_int(v, "kv_heads"),
        "head_dim": d,
    }
    if "bias" in v:
        args["attention_bias"] = v["bias"]
    return args, []


CONVENTION = Convention("hf", "transformers LlamaAttention", hf, SPEC, for_compare)
