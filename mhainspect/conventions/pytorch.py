"""PyTorch ``nn.MultiheadAttention``: its arguments, its count, and how it reads a comparison."""

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
)
from mhainspect.conventions.roles import Built, per_head, role_int

SPEC = Spec(
    params=(
        Param("embed_dim", "int", required=True),
        Param("num_heads", "int", required=True),
        Param("kdim", "opt_int"),
        Param("vdim", "opt_int"),
        Param("bias", "bool", default=True),
        Param("add_bias_kv", "bool", default=False),
    ),
    heads="num_heads",
    ignored=("dropout", "add_zero_attn", "batch_first", "device", "dtype"),
)


def pytorch(
    embed_dim: int,
    num_heads: int,
    kdim: int | None = None,
    vdim: int | None = None,
    bias: bool = True,
    add_bias_kv: bool = False,
) -> Calculation:
    """torch ``nn.MultiheadAttention``: E(E+kdim+vdim) + E² + 4E·bias (+2E add_bias_kv).

    Every projection is embed_dim wide; the heads only slice it (head_dim = embed_dim/num_heads),
    so the count is the same for every valid head count.
    """
    E = positive("embed_dim", embed_dim)
    h = positive("num_heads", num_heads)
    if E % h:
        raise ValueError(f"embed_dim must be divisible by num_heads (embed_dim={E}, num_heads={h})")
    kd = optional_positive("kdim", kdim) or E
    vd = optional_positive("vdim", vdim) or E
    b = flag("bias", bias)
    bkv = flag("add_bias_kv", add_bias_kv)
    head_dim = E // h
    packed = kd == E and vd == E

    def w(role: str) -> str:
        return f"in_proj_weight[{role}]" if packed else f"{role.lower()}_proj_weight"

    terms = [
        term("W_Q", "embed_dim × embed_dim", (E, E), is_bias=False, tensor=w("Q")),
        term("W_K", "embed_dim × kdim", (E, kd), is_bias=False, tensor=w("K")),
        term("W_V", "embed_dim × vdim", (E, vd), is_bias=False, tensor=w("V")),
        term("W_O", "embed_dim × embed_dim", (E, E), is_bias=False, tensor="out_proj.weight"),
    ]
    if b:
        terms += [
            term("b_Q", "embed_dim", (E,), is_bias=True, tensor="in_proj_bias[Q]"),
            term("b_K", "embed_dim", (E,), is_bias=True, tensor="in_proj_bias[K]"),
            term("b_V", "embed_dim", (E,), is_bias=True, tensor="in_proj_bias[V]"),
            term("b_O", "embed_dim", (E,), is_bias=True, tensor="out_proj.bias"),
        ]
    if bkv:
        terms += [
            term("bias_k", "embed_dim", (E,), is_bias=True, tensor="bias_k"),
            term("bias_v", "embed_dim", (E,), is_bias=True, tensor="bias_v"),
        ]
    explanation = (
        f"nn.MultiheadAttention splits embed_dim across the heads: head_dim = embed_dim / "
        f"num_heads = {E} / {h} = {head_dim}. Every projection stays embed_dim ({E}) wide, so the "
        "head count only changes how those widths are sliced into d_k and d_v, never the "
        "parameter count: any num_heads that divides embed_dim gives the same total. Only "
        "embed_dim, kdim, vdim, bias and add_bias_kv change it."
    )
    notes = [
        (
            "Q/K/V weights are packed in in_proj_weight [3·embed_dim, embed_dim]."
            if packed
            else "kdim/vdim differ from embed_dim: Q/K/V weights are q_proj_weight, k_proj_weight and v_proj_weight."
        ),
        (
            "kdim and vdim are the feature sizes of the key and value inputs, not per-head widths; "
            "d_k = d_v = embed_dim / num_heads always."
        ),
    ]
    if b:
        notes.append("Biases: in_proj_bias [3·embed_dim] and out_proj.bias [embed_dim].")
    if bkv:
        notes.append("add_bias_kv adds bias_k and bias_v, each [1, 1, embed_dim].")
    args: tuple[tuple[str, ArgValue], ...] = (
        ("embed_dim", E),
        ("num_heads", h),
        ("kdim", kd),
        ("vdim", vd),
        ("bias", b),
        ("add_bias_kv", bkv),
    )
    return build(
        convention="pytorch",
        arguments=args,
        terms=terms,
        num_heads=h,
        d_k=head_dim,
        d_v=head_dim,
        q_width=E,
        v_width=E,
        d_model=E,
        output_dim=E,
        scales_with_heads=False,
        explanation=explanation,
        notes=notes,
    )


def for_compare(v: Mapping[str, ArgValue], E: int, h: int) -> Built:
    """The arguments of ``compare`` (by role, roles.ROLES) as this layer's own, with what it assumed;
    or why the layer cannot take them."""
    if E % h:
        return f"embed_dim must be divisible by num_heads (embed_dim={E}, num_heads={h})"
    d = per_head(v, "head_dim", "qk_total", h)
    dv = per_head(v, "v_head_dim", "v_total", h)
    for width, what in ((d, "d_k"), (dv, "d_v")):
        if isinstance(width, str):
            return width
        if width is not None and width != E // h:
            return (
                f"nn.MultiheadAttention fixes {what} = embed_dim / num_heads = {E // h}; "
                f"cannot take a per-head width of {width}"
            )
    g = role_int(v, "kv_heads")
    if g is not None and g != h:
        return "nn.MultiheadAttention has no grouped-query attention (K/V heads = num_heads)"
    O = role_int(v, "output")
    if O is not None and O != E:
        return f"nn.MultiheadAttention always outputs embed_dim ({E}); cannot output {O}"
    args: dict[str, ArgValue] = {"embed_dim": E, "num_heads": h}
    args["kdim"] = role_int(v, "key_input")
    args["vdim"] = role_int(v, "value_input")
    if "bias" in v:
        args["bias"] = v["bias"]
    if "add_bias_kv" in v:
        args["add_bias_kv"] = v["add_bias_kv"]
    return args, []


CONVENTION = Convention("pytorch", "torch.nn.MultiheadAttention", pytorch, SPEC, for_compare)
