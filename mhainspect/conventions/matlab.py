"""MATLAB ``selfAttentionLayer``: its arguments, its count, and how it reads a comparison."""

from __future__ import annotations

from collections.abc import Mapping

from mhainspect.conventions.common import (
    ArgValue,
    Calculation,
    Convention,
    Param,
    Spec,
    build,
    optional_positive,
    positive,
    term,
)
from mhainspect.conventions.roles import Built, per_head, role_int

SPEC = Spec(
    params=(
        Param("NumHeads", "int", required=True),
        Param("NumKeyChannels", "int", required=True),
        Param("InputSize", "int", required=True),
        Param("NumValueChannels", "opt_int"),
        Param("OutputSize", "opt_int"),
    ),
    heads="NumHeads",
    aliases={"NumQueryChannels": "NumKeyChannels"},
    ignored=(
        "Name",
        "DropoutProbability",
        "AttentionMask",
        "HasPaddingMaskInput",
        "HasScoresOutput",
    ),
)


def matlab(
    NumHeads: int,
    NumKeyChannels: int,
    InputSize: int,
    NumValueChannels: int | None = None,
    OutputSize: int | None = None,
) -> Calculation:
    """MATLAB ``selfAttentionLayer(NumHeads, NumKeyChannels)`` on InputSize channels.

    NumKeyChannels and NumValueChannels are totals across the heads; learnables are
    QueryWeights/KeyWeights [Kc, C], ValueWeights [Vc, C], OutputWeights [O, Vc] and one bias
    vector per projection. The head count does not enter the count.
    """
    h = positive("NumHeads", NumHeads)
    Kc = positive("NumKeyChannels", NumKeyChannels)
    C = positive("InputSize", InputSize)
    Vc = optional_positive("NumValueChannels", NumValueChannels) or Kc
    O = optional_positive("OutputSize", OutputSize) or C
    if Kc % h:
        raise ValueError(f"NumKeyChannels must be divisible by NumHeads (NumKeyChannels={Kc}, NumHeads={h})")
    if Vc % h:
        raise ValueError(f"NumValueChannels must be divisible by NumHeads (NumValueChannels={Vc}, NumHeads={h})")
    terms = [
        term("W_Q", "NumKeyChannels × InputSize", (Kc, C), is_bias=False, tensor="QueryWeights"),
        term("W_K", "NumKeyChannels × InputSize", (Kc, C), is_bias=False, tensor="KeyWeights"),
        term("W_V", "NumValueChannels × InputSize", (Vc, C), is_bias=False, tensor="ValueWeights"),
        term("W_O", "OutputSize × NumValueChannels", (O, Vc), is_bias=False, tensor="OutputWeights"),
        term("b_Q", "NumKeyChannels", (Kc,), is_bias=True, tensor="QueryBias"),
        term("b_K", "NumKeyChannels", (Kc,), is_bias=True, tensor="KeyBias"),
        term("b_V", "NumValueChannels", (Vc,), is_bias=True, tensor="ValueBias"),
        term("b_O", "OutputSize", (O,), is_bias=True, tensor="OutputBias"),
    ]
    explanation = (
        f"MATLAB's NumKeyChannels ({Kc}) and NumValueChannels ({Vc}) are totals across all "
        f"heads, not per head: the heads split them, d_k = {Kc} / {h} = {Kc // h} and d_v = "
        f"{Vc} / {h} = {Vc // h}. The count follows NumKeyChannels, NumValueChannels, InputSize "
        "and OutputSize; NumHeads does not enter it. Changing the heads at the same "
        "NumKeyChannels gives the same count; lowering NumKeyChannels to keep "
        "NumHeads × NumKeyChannels fixed shrinks every projection."
    )
    notes = [
        ("selfAttentionLayer always learns the four bias vectors (QueryBias, KeyBias, ValueBias, OutputBias)."),
        "InputSize is the number of input channels; MATLAB infers it from the layer input.",
        (
            "Releases from R2026a call the second argument numQueryChannels (property "
            "NumQueryChannels); it is accepted as NumKeyChannels here."
        ),
    ]
    if Kc != C:
        notes.append(f"NumKeyChannels = {Kc} ≠ InputSize = {C}: the query/key projection is not as wide as the input.")
    args: tuple[tuple[str, ArgValue], ...] = (
        ("NumHeads", h),
        ("NumKeyChannels", Kc),
        ("InputSize", C),
        ("NumValueChannels", Vc),
        ("OutputSize", O),
    )
    return build(
        convention="matlab",
        arguments=args,
        terms=terms,
        num_heads=h,
        d_k=Kc // h,
        d_v=Vc // h,
        q_width=Kc,
        v_width=Vc,
        d_model=C,
        output_dim=O,
        scales_with_heads=False,
        explanation=explanation,
        notes=notes,
    )


def for_compare(v: Mapping[str, ArgValue], E: int, h: int) -> Built:
    """The arguments of ``compare`` (by role, roles.ROLES) as this layer's own, with what it assumed;
    or why the layer cannot take them."""
    if v.get("bias") is False:
        return "selfAttentionLayer always has biases"
    if v.get("add_bias_kv"):
        return "selfAttentionLayer has no add_bias_kv"
    g = role_int(v, "kv_heads")
    if g is not None and g != h:
        return "selfAttentionLayer has no grouped K/V heads in this convention"
    for role in ("key_input", "value_input"):
        width = role_int(v, role)
        if width is not None and width != E:
            return (
                f"selfAttentionLayer is self-attention: keys and values come from the same "
                f"{E}-channel input, not {width}"
            )
    notes: list[str] = []
    d = per_head(v, "head_dim", "qk_total", h)
    if isinstance(d, str):
        return d
    if d is None:
        Kc = E
        notes.append(f"Compare assumed NumKeyChannels = InputSize = {E} (standard layout).")
    else:
        Kc = d * h
    dv = per_head(v, "v_head_dim", "v_total", h)
    if isinstance(dv, str):
        return dv
    args: dict[str, ArgValue] = {
        "NumHeads": h,
        "NumKeyChannels": Kc,
        "InputSize": E,
        "NumValueChannels": None if dv is None else dv * h,
        "OutputSize": role_int(v, "output"),
    }
    return args, notes


CONVENTION = Convention("matlab", "MATLAB selfAttentionLayer", matlab, SPEC, for_compare)
