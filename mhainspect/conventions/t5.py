"""T5 attention (transformers ``T5Attention``): its arguments, its count, and how it reads a comparison."""

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
    positive,
    term,
    thousands,
)
from mhainspect.conventions.roles import Built, per_head, role_int, self_only

SPEC = Spec(
    params=(
        Param("d_model", "int", required=True),
        Param("num_heads", "int", required=True),
        Param("d_kv", "int", required=True),
        Param("has_relative_attention_bias", "bool", default=False),
        Param("relative_attention_num_buckets", "int", default=32),
    ),
    heads="num_heads",
    ignored=("dropout_rate", "relative_attention_max_distance", "is_decoder"),
)


def t5(
    d_model: int,
    num_heads: int,
    d_kv: int,
    has_relative_attention_bias: bool = False,
    relative_attention_num_buckets: int = 32,
) -> Calculation:
    """T5 attention (transformers ``T5Attention``): 4·d_model·num_heads·d_kv, no biases.

    The relative position bias table (relative_attention_num_buckets × num_heads, first layer of
    each stack only) is reported as an ``extra`` term, outside ``total``.
    """
    D = positive("d_model", d_model)
    h = positive("num_heads", num_heads)
    d = positive("d_kv", d_kv)
    rel = flag("has_relative_attention_bias", has_relative_attention_bias)
    buckets = positive("relative_attention_num_buckets", relative_attention_num_buckets)
    inner = h * d
    terms = [
        term("W_Q", "d_model × num_heads × d_kv", (D, h, d), is_bias=False, tensor="q.weight"),
        term("W_K", "d_model × num_heads × d_kv", (D, h, d), is_bias=False, tensor="k.weight"),
        term("W_V", "d_model × num_heads × d_kv", (D, h, d), is_bias=False, tensor="v.weight"),
        term("W_O", "num_heads × d_kv × d_model", (h, d, D), is_bias=False, tensor="o.weight"),
    ]
    if rel:
        terms.append(
            term(
                "relative_attention_bias",
                "relative_attention_num_buckets × num_heads",
                (buckets, h),
                is_bias=False,
                tensor="relative_attention_bias.weight",
                extra=True,
            )
        )
    explanation = (
        f"T5's d_kv ({d}) is per head and independent of d_model: every projection is "
        f"num_heads × d_kv = {inner} wide, so each extra head adds 4 × d_model × d_kv = "
        f"{thousands(4 * D * d)} parameters. The count grows linearly with num_heads at fixed d_kv; "
        "keeping num_heads × d_kv fixed keeps it constant."
    )
    notes = [
        "T5 projections have no biases and the scores are not scaled by 1/√d_kv.",
    ]
    if inner != D:
        notes.append(f"num_heads × d_kv = {inner} ≠ d_model = {D} (as in T5-11B or flan-t5-small).")
    if rel:
        notes.append(
            f"relative_attention_bias ({thousands(buckets * h)} = relative_attention_num_buckets × "
            "num_heads) exists only in the first layer of each stack; it is reported as extra, "
            "not in the projection total."
        )
    args: tuple[tuple[str, ArgValue], ...] = (
        ("d_model", D),
        ("num_heads", h),
        ("d_kv", d),
        ("has_relative_attention_bias", rel),
        ("relative_attention_num_buckets", buckets),
    )
    return build(
        convention="t5",
        arguments=args,
        terms=terms,
        num_heads=h,
        d_k=d,
        d_v=d,
        q_width=inner,
        v_width=inner,
        d_model=D,
        output_dim=D,
        scales_with_heads=True,
        explanation=explanation,
        notes=notes,
    )


def for_compare(v: Mapping[str, ArgValue], E: int, h: int) -> Built:
    """The arguments of ``compare`` (by role, roles.ROLES) as this layer's own, with what it assumed;
    or why the layer cannot take them."""
    reason = self_only(v, E, "T5 attention")
    if reason:
        return reason
    if v.get("bias"):
        return "T5 projections have no biases"
    g = role_int(v, "kv_heads")
    if g is not None and g != h:
        return "T5 attention has no grouped K/V heads"
    notes: list[str] = []
    d = per_head(v, "head_dim", "qk_total", h)
    dv = per_head(v, "v_head_dim", "v_total", h)
    if isinstance(d, str):
        return d
    if isinstance(dv, str):
        return dv
    if d is None:
        if E % h:
            return f"no d_kv given and d_model {E} is not divisible by {h} heads"
        d = E // h
        notes.append(f"Compare assumed the standard layout d_kv = d_model / num_heads = {d}.")
    if dv is not None and dv != d:
        return "T5 uses one d_kv for keys and values"
    args: dict[str, ArgValue] = {"d_model": E, "num_heads": h, "d_kv": d}
    if "relative_bias" in v:
        args["has_relative_attention_bias"] = v["relative_bias"]
    if v.get("buckets") is not None:
        args["relative_attention_num_buckets"] = v["buckets"]
    return args, notes


CONVENTION = Convention("t5", "transformers T5Attention", t5, SPEC, for_compare)
