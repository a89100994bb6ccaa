"""Keras 3 ``MultiHeadAttention``: its arguments, its count, and how it reads a comparison."""

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
from mhainspect.conventions.roles import Built, per_head, role_int

SPEC = Spec(
    params=(
        Param("num_heads", "int", required=True),
        Param("key_dim", "int", required=True),
        Param("value_dim", "opt_int"),
        Param("query_dim", "int", required=True),
        Param("key_input_dim", "opt_int"),
        Param("value_input_dim", "opt_int"),
        Param("output_shape", "opt_int"),
        Param("use_bias", "bool", default=True),
    ),
    heads="num_heads",
    ignored=(
        "dropout",
        "attention_axes",
        "flash_attention",
        "seed",
        "name",
        "dtype",
        "kernel_initializer",
        "bias_initializer",
        "kernel_regularizer",
        "bias_regularizer",
        "activity_regularizer",
        "kernel_constraint",
        "bias_constraint",
    ),
)


def keras(
    num_heads: int,
    key_dim: int,
    value_dim: int | None = None,
    *,
    query_dim: int,
    key_input_dim: int | None = None,
    value_input_dim: int | None = None,
    output_shape: int | None = None,
    use_bias: bool = True,
) -> Calculation:
    """Keras 3 ``MultiHeadAttention``: h[k(Dq+Dk) + v(Dv+O)] + b[h(2k+v) + O].

    key_dim and value_dim are per head, so the count grows linearly with num_heads. query_dim,
    key_input_dim and value_input_dim are the last dimensions of the inputs (Keras infers them at
    build time). As in Keras' ``call(query, value, key=None)``, the value input defaults to the
    query (self-attention) and the key input defaults to the value input.
    """
    h = positive("num_heads", num_heads)
    k = positive("key_dim", key_dim)
    v = optional_positive("value_dim", value_dim) or k
    Dq = positive("query_dim", query_dim)
    Dv = optional_positive("value_input_dim", value_input_dim) or Dq
    Dk = optional_positive("key_input_dim", key_input_dim) or Dv
    O = optional_positive("output_shape", output_shape) or Dq
    b = flag("use_bias", use_bias)
    terms = [
        term("W_Q", "query_dim × num_heads × key_dim", (Dq, h, k), is_bias=False, tensor="query/kernel"),
        term("W_K", "key_input_dim × num_heads × key_dim", (Dk, h, k), is_bias=False, tensor="key/kernel"),
        term("W_V", "value_input_dim × num_heads × value_dim", (Dv, h, v), is_bias=False, tensor="value/kernel"),
        term(
            "W_O", "num_heads × value_dim × output_shape", (h, v, O), is_bias=False, tensor="attention_output/kernel"
        ),
    ]
    if b:
        terms += [
            term("b_Q", "num_heads × key_dim", (h, k), is_bias=True, tensor="query/bias"),
            term("b_K", "num_heads × key_dim", (h, k), is_bias=True, tensor="key/bias"),
            term("b_V", "num_heads × value_dim", (h, v), is_bias=True, tensor="value/bias"),
            term("b_O", "output_shape", (O,), is_bias=True, tensor="attention_output/bias"),
        ]
    per_head = k * (Dq + Dk) + v * (Dv + O) + (2 * k + v if b else 0)
    explanation = (
        f"Keras key_dim ({k}) and value_dim ({v}) are per head: the query and key projections "
        f"are num_heads × key_dim = {h * k} wide and the value projection num_heads × value_dim "
        f"= {h * v} wide. Each extra head adds its own Q, K and V slices and its share of the "
        f"output projection, {thousands(per_head)} parameters per head, so the count grows linearly "
        f"with num_heads. To keep it fixed when adding heads, shrink key_dim: key_dim = "
        f"query_dim / num_heads reproduces the standard layout."
    )
    notes = [
        (
            "query_dim, key_input_dim and value_input_dim are not constructor arguments: Keras reads "
            "them from the input shapes when the layer is built (value defaults to the query input, "
            "key to the value input)."
        ),
    ]
    if h * k != Dq:
        notes.append(
            f"num_heads × key_dim = {h * k} ≠ query_dim = {Dq}: the projection width is set "
            "per head, not by the model width."
        )
    if v != k:
        notes.append(f"value_dim ({v}) differs from key_dim ({k}).")
    if output_shape is not None:
        notes.append("output_shape is taken as a single integer (the last output dimension).")
    args: tuple[tuple[str, ArgValue], ...] = (
        ("num_heads", h),
        ("key_dim", k),
        ("value_dim", v),
        ("query_dim", Dq),
        ("key_input_dim", Dk),
        ("value_input_dim", Dv),
        ("output_shape", O),
        ("use_bias", b),
    )
    return build(
        convention="keras",
        arguments=args,
        terms=terms,
        num_heads=h,
        d_k=k,
        d_v=v,
        q_width=h * k,
        v_width=h * v,
        d_model=Dq,
        output_dim=O,
        scales_with_heads=True,
        explanation=explanation,
        notes=notes,
    )


def for_compare(v: Mapping[str, ArgValue], E: int, h: int) -> Built:
    """The arguments of ``compare`` (by role, roles.ROLES) as this layer's own, with what it assumed;
    or why the layer cannot take them."""
    if v.get("add_bias_kv"):
        return "Keras MultiHeadAttention has no add_bias_kv"
    g = role_int(v, "kv_heads")
    if g is not None and g != h:
        return "Keras MultiHeadAttention has no grouped K/V heads (keras.layers.GroupQueryAttention does)"
    notes: list[str] = []
    d = per_head(v, "head_dim", "qk_total", h)
    if isinstance(d, str):
        return d
    if d is None:
        if E % h:
            return f"no key_dim given and query_dim {E} is not divisible by {h} heads"
        d = E // h
        notes.append(f"Compare assumed the standard layout key_dim = query_dim / num_heads = {d}.")
    dv = per_head(v, "v_head_dim", "v_total", h)
    if isinstance(dv, str):
        return dv
    args: dict[str, ArgValue] = {"num_heads": h, "key_dim": d, "value_dim": dv, "query_dim": E}
    args["key_input_dim"] = role_int(v, "key_input")
    args["value_input_dim"] = role_int(v, "value_input")
    args["output_shape"] = role_int(v, "output")
    if "bias" in v:
        args["use_bias"] = v["bias"]
    return args, notes


CONVENTION = Convention("keras", "keras.layers.MultiHeadAttention", keras, SPEC, for_compare)
