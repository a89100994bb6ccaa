"""Parameter-count conventions of attention layers (the ``calc`` side).

Pure library: no printing, no I/O, no exit. Every function takes the framework's own argument
names so a user can paste what they wrote, and returns a :class:`Calculation` that says term by
term where the parameters are, what d_k / d_v the arguments imply, and whether the head count
changes the count when the other arguments stay as given.

Formulas were checked against the real layers (tests/test_conventions.py): torch
``nn.MultiheadAttention``, Keras 3 ``MultiHeadAttention``, transformers ``LlamaAttention`` and
``T5Attention``; MATLAB ``selfAttentionLayer`` from its documented learnable shapes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

ArgValue = int | bool | None
"""A resolved argument value."""

UserValue = str | int | bool | None
"""An argument value as a user may give it (strings are parsed)."""


@dataclass(frozen=True)
class Term:
    """One parameter tensor (or one role's share of a packed tensor).

    ``formula`` is symbolic in the framework's argument names, ``expanded`` the same product
    with numbers, ``tensor`` the framework's own parameter name. ``extra`` terms (T5's relative
    position bias table) are not projections and are not counted in ``Calculation.total``.
    """

    name: str
    formula: str
    value: int
    is_bias: bool
    expanded: str = ""
    tensor: str = ""
    extra: bool = False


@dataclass(frozen=True)
class Calculation:
    """The parameter count of one attention layer under one convention."""

    convention: str
    arguments: tuple[tuple[str, ArgValue], ...]
    terms: tuple[Term, ...]
    total: int  # projections (weights + biases); excludes ``extra``
    weights: int
    biases: int
    num_heads: int
    d_k: int
    d_v: int
    q_width: int  # total query/key projection width (all heads)
    v_width: int  # total value projection width (all heads)
    d_model: int  # width of the (query) input
    output_dim: int
    scales_with_heads: bool  # does the total change with the head count at the other args fixed?
    explanation: str
    notes: tuple[str, ...]
    extra: int = 0  # non-projection parameters (T5 relative attention bias), not in ``total``
    # Set by ``compare`` (and also in ``notes``): what it assumed for this convention, and the
    # notes that hold for the whole comparison (the same in every row).
    assumed: tuple[str, ...] = ()
    comparison_notes: tuple[str, ...] = ()


LAYER_NAMES: Mapping[str, str] = MappingProxyType(
    {
        "pytorch": "torch.nn.MultiheadAttention",
        "keras": "keras.layers.MultiHeadAttention",
        "matlab": "MATLAB selfAttentionLayer",
        "hf": "transformers LlamaAttention",
        "t5": "transformers T5Attention",
    }
)
"""Human-readable layer name per convention."""


# --------------------------------------------------------------------------- helpers


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _optional_positive(name: str, value: object) -> int | None:
    return None if value is None else _positive(name, value)


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")  # noqa: TRY004
    return value


def _n(value: int) -> str:
    return f"{value:,}"


def _term(
    name: str,
    formula: str,
    factors: Sequence[int],
    *,
    is_bias: bool,
    tensor: str,
    extra: bool = False,
) -> Term:
    value = 1
    for factor in factors:
        value *= factor
    return Term(
        name=name,
        formula=formula,
        value=value,
        is_bias=is_bias,
        expanded=" × ".join(str(f) for f in factors),
        tensor=tensor,
        extra=extra,
    )


def _build(
    *,
    convention: str,
    arguments: tuple[tuple[str, ArgValue], ...],
    terms: Sequence[Term],
    num_heads: int,
    d_k: int,
    d_v: int,
    q_width: int,
    v_width: int,
    d_model: int,
    output_dim: int,
    scales_with_heads: bool,
    explanation: str,
    notes: Sequence[str],
) -> Calculation:
    weights = sum(t.value for t in terms if not t.is_bias and not t.extra)
    biases = sum(t.value for t in terms if t.is_bias and not t.extra)
    extra = sum(t.value for t in terms if t.extra)
    return Calculation(
        convention=convention,
        arguments=arguments,
        terms=tuple(terms),
        total=weights + biases,
        weights=weights,
        biases=biases,
        num_heads=num_heads,
        d_k=d_k,
        d_v=d_v,
        q_width=q_width,
        v_width=v_width,
        d_model=d_model,
        output_dim=output_dim,
        scales_with_heads=scales_with_heads,
        explanation=explanation,
        notes=tuple(notes),
        extra=extra,
    )


# --------------------------------------------------------------------------- conventions


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
    E = _positive("embed_dim", embed_dim)
    h = _positive("num_heads", num_heads)
    if E % h:
        raise ValueError(f"embed_dim must be divisible by num_heads (embed_dim={E}, num_heads={h})")
    kd = _optional_positive("kdim", kdim) or E
    vd = _optional_positive("vdim", vdim) or E
    b = _flag("bias", bias)
    bkv = _flag("add_bias_kv", add_bias_kv)
    head_dim = E // h
    packed = kd == E and vd == E

    def w(role: str) -> str:
        return f"in_proj_weight[{role}]" if packed else f"{role.lower()}_proj_weight"

    terms = [
        _term("W_Q", "embed_dim × embed_dim", (E, E), is_bias=False, tensor=w("Q")),
        _term("W_K", "embed_dim × kdim", (E, kd), is_bias=False, tensor=w("K")),
        _term("W_V", "embed_dim × vdim", (E, vd), is_bias=False, tensor=w("V")),
        _term("W_O", "embed_dim × embed_dim", (E, E), is_bias=False, tensor="out_proj.weight"),
    ]
    if b:
        terms += [
            _term("b_Q", "embed_dim", (E,), is_bias=True, tensor="in_proj_bias[Q]"),
            _term("b_K", "embed_dim", (E,), is_bias=True, tensor="in_proj_bias[K]"),
            _term("b_V", "embed_dim", (E,), is_bias=True, tensor="in_proj_bias[V]"),
            _term("b_O", "embed_dim", (E,), is_bias=True, tensor="out_proj.bias"),
        ]
    if bkv:
        terms += [
            _term("bias_k", "embed_dim", (E,), is_bias=True, tensor="bias_k"),
            _term("bias_v", "embed_dim", (E,), is_bias=True, tensor="bias_v"),
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
    return _build(
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
    h = _positive("num_heads", num_heads)
    k = _positive("key_dim", key_dim)
    v = _optional_positive("value_dim", value_dim) or k
    Dq = _positive("query_dim", query_dim)
    Dv = _optional_positive("value_input_dim", value_input_dim) or Dq
    Dk = _optional_positive("key_input_dim", key_input_dim) or Dv
    O = _optional_positive("output_shape", output_shape) or Dq
    b = _flag("use_bias", use_bias)
    terms = [
        _term("W_Q", "query_dim × num_heads × key_dim", (Dq, h, k), is_bias=False, tensor="query/kernel"),
        _term("W_K", "key_input_dim × num_heads × key_dim", (Dk, h, k), is_bias=False, tensor="key/kernel"),
        _term("W_V", "value_input_dim × num_heads × value_dim", (Dv, h, v), is_bias=False, tensor="value/kernel"),
        _term(
            "W_O", "num_heads × value_dim × output_shape", (h, v, O), is_bias=False, tensor="attention_output/kernel"
        ),
    ]
    if b:
        terms += [
            _term("b_Q", "num_heads × key_dim", (h, k), is_bias=True, tensor="query/bias"),
            _term("b_K", "num_heads × key_dim", (h, k), is_bias=True, tensor="key/bias"),
            _term("b_V", "num_heads × value_dim", (h, v), is_bias=True, tensor="value/bias"),
            _term("b_O", "output_shape", (O,), is_bias=True, tensor="attention_output/bias"),
        ]
    per_head = k * (Dq + Dk) + v * (Dv + O) + (2 * k + v if b else 0)
    explanation = (
        f"Keras key_dim ({k}) and value_dim ({v}) are per head: the query and key projections "
        f"are num_heads × key_dim = {h * k} wide and the value projection num_heads × value_dim "
        f"= {h * v} wide. Each extra head adds its own Q, K and V slices and its share of the "
        f"output projection, {_n(per_head)} parameters per head, so the count grows linearly "
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
    return _build(
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
    h = _positive("NumHeads", NumHeads)
    Kc = _positive("NumKeyChannels", NumKeyChannels)
    C = _positive("InputSize", InputSize)
    Vc = _optional_positive("NumValueChannels", NumValueChannels) or Kc
    O = _optional_positive("OutputSize", OutputSize) or C
    if Kc % h:
        raise ValueError(f"NumKeyChannels must be divisible by NumHeads (NumKeyChannels={Kc}, NumHeads={h})")
    if Vc % h:
        raise ValueError(f"NumValueChannels must be divisible by NumHeads (NumValueChannels={Vc}, NumHeads={h})")
    terms = [
        _term("W_Q", "NumKeyChannels × InputSize", (Kc, C), is_bias=False, tensor="QueryWeights"),
        _term("W_K", "NumKeyChannels × InputSize", (Kc, C), is_bias=False, tensor="KeyWeights"),
        _term("W_V", "NumValueChannels × InputSize", (Vc, C), is_bias=False, tensor="ValueWeights"),
        _term("W_O", "OutputSize × NumValueChannels", (O, Vc), is_bias=False, tensor="OutputWeights"),
        _term("b_Q", "NumKeyChannels", (Kc,), is_bias=True, tensor="QueryBias"),
        _term("b_K", "NumKeyChannels", (Kc,), is_bias=True, tensor="KeyBias"),
        _term("b_V", "NumValueChannels", (Vc,), is_bias=True, tensor="ValueBias"),
        _term("b_O", "OutputSize", (O,), is_bias=True, tensor="OutputBias"),
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
    return _build(
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
    H = _positive("hidden_size", hidden_size)
    h = _positive("num_attention_heads", num_attention_heads)
    g = _optional_positive("num_key_value_heads", num_key_value_heads) or h
    given_d = _optional_positive("head_dim", head_dim)
    b = _flag("attention_bias", attention_bias)
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
        _term("W_Q", "hidden_size × num_attention_heads × head_dim", (H, h, d), is_bias=False, tensor="q_proj.weight"),
        _term("W_K", "hidden_size × num_key_value_heads × head_dim", (H, g, d), is_bias=False, tensor="k_proj.weight"),
        _term("W_V", "hidden_size × num_key_value_heads × head_dim", (H, g, d), is_bias=False, tensor="v_proj.weight"),
        _term("W_O", "num_attention_heads × head_dim × hidden_size", (h, d, H), is_bias=False, tensor="o_proj.weight"),
    ]
    if b:
        terms += [
            _term("b_Q", "num_attention_heads × head_dim", (h, d), is_bias=True, tensor="q_proj.bias"),
            _term("b_K", "num_key_value_heads × head_dim", (g, d), is_bias=True, tensor="k_proj.bias"),
            _term("b_V", "num_key_value_heads × head_dim", (g, d), is_bias=True, tensor="v_proj.bias"),
            _term("b_O", "hidden_size", (H,), is_bias=True, tensor="o_proj.bias"),
        ]
    kv_given = num_key_value_heads is not None
    if given_d is not None:
        scales = True
        q_head = 2 * H * d + (d if b else 0)
        if kv_given:
            explanation = (
                f"head_dim ({d}) is fixed, so the query and output projections are "
                f"num_attention_heads × head_dim = {h * d} wide: each extra query head adds "
                f"{_n(q_head)} parameters (its q_proj and o_proj slices). K and V are "
                f"num_key_value_heads × head_dim = {g * d} wide and follow num_key_value_heads "
                f"({g}), not the query head count."
            )
        else:
            explanation = (
                f"head_dim ({d}) is fixed and num_key_value_heads follows num_attention_heads, "
                f"so all four projections are num_attention_heads × head_dim = {h * d} wide: "
                f"each extra head adds {_n(2 * q_head + 2 * H * d + (2 * d if b else 0))} "
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
    return _build(
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
    D = _positive("d_model", d_model)
    h = _positive("num_heads", num_heads)
    d = _positive("d_kv", d_kv)
    rel = _flag("has_relative_attention_bias", has_relative_attention_bias)
    buckets = _positive("relative_attention_num_buckets", relative_attention_num_buckets)
    inner = h * d
    terms = [
        _term("W_Q", "d_model × num_heads × d_kv", (D, h, d), is_bias=False, tensor="q.weight"),
        _term("W_K", "d_model × num_heads × d_kv", (D, h, d), is_bias=False, tensor="k.weight"),
        _term("W_V", "d_model × num_heads × d_kv", (D, h, d), is_bias=False, tensor="v.weight"),
        _term("W_O", "num_heads × d_kv × d_model", (h, d, D), is_bias=False, tensor="o.weight"),
    ]
    if rel:
        terms.append(
            _term(
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
        f"{_n(4 * D * d)} parameters. The count grows linearly with num_heads at fixed d_kv; "
        "keeping num_heads × d_kv fixed keeps it constant."
    )
    notes = [
        "T5 projections have no biases and the scores are not scaled by 1/√d_kv.",
    ]
    if inner != D:
        notes.append(f"num_heads × d_kv = {inner} ≠ d_model = {D} (as in T5-11B or flan-t5-small).")
    if rel:
        notes.append(
            f"relative_attention_bias ({_n(buckets * h)} = relative_attention_num_buckets × "
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
    return _build(
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


CONVENTIONS: Mapping[str, Callable[..., Calculation]] = MappingProxyType(
    {"pytorch": pytorch, "keras": keras, "matlab": matlab, "hf": hf, "t5": t5}
)
"""Convention name -> calculation function."""


# --------------------------------------------------------------------------- argument parsing

_Kind = Literal["int", "opt_int", "bool"]


@dataclass(frozen=True)
class _Param:
    name: str
    kind: _Kind
    required: bool = False
    default: ArgValue = None


@dataclass(frozen=True)
class _Spec:
    params: tuple[_Param, ...]
    heads: str
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    ignored: tuple[str, ...] = ()  # accepted, no effect on the parameter count


_SPECS: Mapping[str, _Spec] = MappingProxyType(
    {
        "pytorch": _Spec(
            params=(
                _Param("embed_dim", "int", required=True),
                _Param("num_heads", "int", required=True),
                _Param("kdim", "opt_int"),
                _Param("vdim", "opt_int"),
                _Param("bias", "bool", default=True),
                _Param("add_bias_kv", "bool", default=False),
            ),
            heads="num_heads",
            ignored=("dropout", "add_zero_attn", "batch_first", "device", "dtype"),
        ),
        "keras": _Spec(
            params=(
                _Param("num_heads", "int", required=True),
                _Param("key_dim", "int", required=True),
                _Param("value_dim", "opt_int"),
                _Param("query_dim", "int", required=True),
                _Param("key_input_dim", "opt_int"),
                _Param("value_input_dim", "opt_int"),
                _Param("output_shape", "opt_int"),
                _Param("use_bias", "bool", default=True),
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
        ),
        "matlab": _Spec(
            params=(
                _Param("NumHeads", "int", required=True),
                _Param("NumKeyChannels", "int", required=True),
                _Param("InputSize", "int", required=True),
                _Param("NumValueChannels", "opt_int"),
                _Param("OutputSize", "opt_int"),
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
        ),
        "hf": _Spec(
            params=(
                _Param("hidden_size", "int", required=True),
                _Param("num_attention_heads", "int", required=True),
                _Param("num_key_value_heads", "opt_int"),
                _Param("head_dim", "opt_int"),
                _Param("attention_bias", "bool", default=False),
            ),
            heads="num_attention_heads",
            ignored=("attention_dropout",),
        ),
        "t5": _Spec(
            params=(
                _Param("d_model", "int", required=True),
                _Param("num_heads", "int", required=True),
                _Param("d_kv", "int", required=True),
                _Param("has_relative_attention_bias", "bool", default=False),
                _Param("relative_attention_num_buckets", "int", default=32),
            ),
            heads="num_heads",
            ignored=("dropout_rate", "relative_attention_max_distance", "is_decoder"),
        ),
    }
)

_TRUE = frozenset({"true", "yes", "1", "on"})
_FALSE = frozenset({"false", "no", "0", "off"})
_NONE = frozenset({"none", "null", "auto", ""})


def _key(name: str) -> str:
    """Spelling-insensitive key: MATLAB users write numHeads, CLI users key-dim."""
    return name.replace("_", "").replace("-", "").lower()


def spelling_key(name: str) -> str:
    """The key under which calculate() matches an argument name (two names with one key are one argument)."""
    return _key(name)


def _valid_list(spec: _Spec) -> str:
    parts = []
    for p in spec.params:
        if p.required:
            parts.append(p.name)
        elif p.kind == "bool":
            parts.append(f"{p.name}={str(p.default).lower()}")
        elif p.default is None:
            parts.append(f"{p.name}=None")
        else:
            parts.append(f"{p.name}={p.default}")
    return ", ".join(parts)


def _parse_value(name: str, kind: _Kind, raw: UserValue) -> ArgValue:
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, int) and raw in (0, 1):
            return bool(raw)
        if isinstance(raw, str):
            text = raw.strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
        raise ValueError(f"{name} must be true/false/yes/no/1/0, got {raw!r}")
    if raw is None:
        if kind == "opt_int":
            return None
        raise ValueError(f"{name} must be a positive integer, got None")
    if isinstance(raw, bool):
        raise ValueError(f"{name} must be a positive integer, got {raw!r}")  # noqa: TRY004
    if isinstance(raw, int):
        value = raw
    else:
        text = raw.strip()
        if kind == "opt_int" and text.lower() in _NONE:
            return None
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{name} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return value


def _spec(convention: str) -> _Spec:
    spec = _SPECS.get(convention)
    if spec is None:
        raise ValueError(f"unknown convention {convention!r}; choose one of: {', '.join(CONVENTIONS)}")
    return spec


def _parse(convention: str, args: Mapping[str, UserValue]) -> tuple[dict[str, ArgValue], list[str]]:
    spec = _spec(convention)
    by_key: dict[str, str] = {_key(p.name): p.name for p in spec.params}
    for alias, target in spec.aliases.items():
        by_key[_key(alias)] = target
    ignored_keys = {_key(n): n for n in spec.ignored}
    kinds = {p.name: p.kind for p in spec.params}
    parsed: dict[str, ArgValue] = {}
    ignored: list[str] = []
    for given, raw in args.items():
        key = _key(given)
        name = by_key.get(key)
        if name is None:
            if key in ignored_keys:
                ignored.append(f"{given}={raw}")
                continue
            raise ValueError(f"unknown argument {given!r} for {convention}; valid: {_valid_list(spec)}")
        if name in parsed:
            raise ValueError(f"argument {name!r} given twice for {convention}")
        parsed[name] = _parse_value(name, kinds[name], raw)
    missing = [p.name for p in spec.params if p.required and p.name not in parsed]
    if missing:
        raise ValueError(
            f"missing required argument{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)} for {convention}; valid: {_valid_list(spec)}"
        )
    notes = []
    if ignored:
        notes.append("Ignored (no effect on the parameter count): " + ", ".join(ignored) + ".")
    return parsed, notes


def _with_notes(calc: Calculation, notes: Sequence[str]) -> Calculation:
    if not notes:
        return calc
    return dataclasses.replace(calc, notes=calc.notes + tuple(notes))


def calculate(convention: str, args: Mapping[str, UserValue]) -> Calculation:
    """Parse user-given arguments (strings as typed, or already-typed values) and calculate.

    Argument names are matched ignoring case, ``_`` and ``-``. Integers are decimal; booleans
    true/false/yes/no/1/0; optional integers also None/auto. Raises ValueError with a one-line
    message (naming the valid arguments for unknown or missing ones).
    """
    parsed, notes = _parse(convention, args)
    return _with_notes(CONVENTIONS[convention](**parsed), notes)


def heads_argument(convention: str) -> str:
    """The name of the head-count argument of a convention (num_heads, NumHeads, ...)."""
    return _spec(convention).heads


def what_if(
    calc_fn_name: str, args: Mapping[str, UserValue], heads: Sequence[int]
) -> tuple[tuple[int, Calculation | str], ...]:
    """The same layer at other head counts, every other argument kept as the user gave it.

    Arguments left out keep their defaults, which may themselves follow the heads (e.g. hf's
    num_key_value_heads). A head count the layer rejects gives the reason instead of a count.
    """
    spec = _spec(calc_fn_name)
    head_key = _key(spec.heads)
    base = {k: v for k, v in args.items() if _key(k) != head_key}
    rows: list[tuple[int, Calculation | str]] = []
    for h in heads:
        try:
            rows.append((h, calculate(calc_fn_name, {**base, spec.heads: h})))
        except ValueError as exc:
            rows.append((h, str(exc)))
    return tuple(rows)


# --------------------------------------------------------------------------- compare

# role -> argument names (across conventions) that carry it
_ROLES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "width": ("embed_dim", "hidden_size", "d_model", "query_dim", "InputSize"),
        "heads": ("num_heads", "NumHeads", "num_attention_heads"),
        "head_dim": ("key_dim", "d_kv", "head_dim"),
        "qk_total": ("NumKeyChannels", "NumQueryChannels"),
        "v_head_dim": ("value_dim",),
        "v_total": ("NumValueChannels",),
        "kv_heads": ("num_key_value_heads",),
        "key_input": ("kdim", "key_input_dim"),
        "value_input": ("vdim", "value_input_dim"),
        "output": ("OutputSize", "output_shape"),
        "bias": ("bias", "use_bias", "attention_bias"),
        "add_bias_kv": ("add_bias_kv",),
        "relative_bias": ("has_relative_attention_bias",),
        "buckets": ("relative_attention_num_buckets",),
    }
)
_ROLE_WORDS: Mapping[str, str] = MappingProxyType(
    {
        "width": "the model width",
        "heads": "the head count",
        "head_dim": "the per-head query/key width",
        "qk_total": "the total query/key width",
        "v_head_dim": "the per-head value width",
        "v_total": "the total value width",
        "kv_heads": "the key/value head count",
        "key_input": "the key input width",
        "value_input": "the value input width",
        "output": "the output width",
        "bias": "the bias switch",
        "add_bias_kv": "add_bias_kv",
        "relative_bias": "has_relative_attention_bias",
        "buckets": "relative_attention_num_buckets",
    }
)
_BOOL_ROLES = frozenset({"bias", "add_bias_kv", "relative_bias"})


def _compare_roles(args: Mapping[str, UserValue]) -> tuple[dict[str, ArgValue], list[str]]:
    lookup: dict[str, tuple[str, str]] = {}
    for role, names in _ROLES.items():
        for name in names:
            lookup[_key(name)] = (role, name)
    ignorable = {_key(n) for spec in _SPECS.values() for n in spec.ignored}
    values: dict[str, ArgValue] = {}
    given_as: dict[str, str] = {}
    ignored: list[str] = []
    for given, raw in args.items():
        hit = lookup.get(_key(given))
        if hit is None:
            if _key(given) in ignorable:
                ignored.append(f"{given}={raw}")
                continue
            valid = ", ".join(n for names in _ROLES.values() for n in names)
            raise ValueError(f"unknown argument {given!r} for compare; valid: {valid}")
        role, name = hit
        kind: _Kind = "bool" if role in _BOOL_ROLES else "opt_int"
        value = _parse_value(name, kind, raw)
        if role in values and values[role] != value:
            raise ValueError(
                f"conflicting values for {_ROLE_WORDS[role]}: {given_as[role]}={values[role]} and {given}={value}"
            )
        values[role] = value
        given_as[role] = given
    for role in ("width", "heads"):
        if values.get(role) is None:
            raise ValueError(
                f"compare needs {_ROLE_WORDS[role]} ({'/'.join(_ROLES[role])}); got {', '.join(args) or 'nothing'}"
            )
    notes = []
    if "bias" not in values:
        notes.append(
            "No bias switch given: each layer keeps its own default (biases on in PyTorch, "
            "Keras and MATLAB; off in Llama-style and T5)."
        )
    if ignored:
        notes.append("Ignored (no effect on the parameter count): " + ", ".join(ignored) + ".")
    return values, notes


def _int(values: Mapping[str, ArgValue], role: str) -> int | None:
    value = values.get(role)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _per_head(values: Mapping[str, ArgValue], per_role: str, total_role: str, h: int) -> int | None | str:
    """Per-head width from a per-head or a total argument; a string if it cannot divide."""
    per = _int(values, per_role)
    total = _int(values, total_role)
    if per is not None and total is not None and per * h != total:
        return f"{_ROLE_WORDS[per_role]} {per} × {h} heads ≠ {_ROLE_WORDS[total_role]} {total}"
    if per is not None:
        return per
    if total is not None:
        if total % h:
            return f"{_ROLE_WORDS[total_role]} {total} is not divisible by {h} heads"
        return total // h
    return None


_Built = tuple[dict[str, ArgValue], list[str]] | str


def _for_pytorch(v: Mapping[str, ArgValue], E: int, h: int) -> _Built:
    if E % h:
        return f"embed_dim must be divisible by num_heads (embed_dim={E}, num_heads={h})"
    d = _per_head(v, "head_dim", "qk_total", h)
    dv = _per_head(v, "v_head_dim", "v_total", h)
    for width, what in ((d, "d_k"), (dv, "d_v")):
        if isinstance(width, str):
            return width
        if width is not None and width != E // h:
            return (
                f"nn.MultiheadAttention fixes {what} = embed_dim / num_heads = {E // h}; "
                f"cannot take a per-head width of {width}"
            )
    g = _int(v, "kv_heads")
    if g is not None and g != h:
        return "nn.MultiheadAttention has no grouped-query attention (K/V heads = num_heads)"
    O = _int(v, "output")
    if O is not None and O != E:
        return f"nn.MultiheadAttention always outputs embed_dim ({E}); cannot output {O}"
    args: dict[str, ArgValue] = {"embed_dim": E, "num_heads": h}
    args["kdim"] = _int(v, "key_input")
    args["vdim"] = _int(v, "value_input")
    if "bias" in v:
        args["bias"] = v["bias"]
    if "add_bias_kv" in v:
        args["add_bias_kv"] = v["add_bias_kv"]
    return args, []


def _for_keras(v: Mapping[str, ArgValue], E: int, h: int) -> _Built:
    if v.get("add_bias_kv"):
        return "Keras MultiHeadAttention has no add_bias_kv"
    g = _int(v, "kv_heads")
    if g is not None and g != h:
        return "Keras MultiHeadAttention has no grouped K/V heads (keras.layers.GroupQueryAttention does)"
    notes: list[str] = []
    d = _per_head(v, "head_dim", "qk_total", h)
    if isinstance(d, str):
        return d
    if d is None:
        if E % h:
            return f"no key_dim given and query_dim {E} is not divisible by {h} heads"
        d = E // h
        notes.append(f"Compare assumed the standard layout key_dim = query_dim / num_heads = {d}.")
    dv = _per_head(v, "v_head_dim", "v_total", h)
    if isinstance(dv, str):
        return dv
    args: dict[str, ArgValue] = {"num_heads": h, "key_dim": d, "value_dim": dv, "query_dim": E}
    args["key_input_dim"] = _int(v, "key_input")
    args["value_input_dim"] = _int(v, "value_input")
    args["output_shape"] = _int(v, "output")
    if "bias" in v:
        args["use_bias"] = v["bias"]
    return args, notes


def _for_matlab(v: Mapping[str, ArgValue], E: int, h: int) -> _Built:
    if v.get("bias") is False:
        return "selfAttentionLayer always has biases"
    if v.get("add_bias_kv"):
        return "selfAttentionLayer has no add_bias_kv"
    g = _int(v, "kv_heads")
    if g is not None and g != h:
        return "selfAttentionLayer has no grouped K/V heads in this convention"
    for role in ("key_input", "value_input"):
        width = _int(v, role)
        if width is not None and width != E:
            return (
                f"selfAttentionLayer is self-attention: keys and values come from the same "
                f"{E}-channel input, not {width}"
            )
    notes: list[str] = []
    d = _per_head(v, "head_dim", "qk_total", h)
    if isinstance(d, str):
        return d
    if d is None:
        Kc = E
        notes.append(f"Compare assumed NumKeyChannels = InputSize = {E} (standard layout).")
    else:
        Kc = d * h
    dv = _per_head(v, "v_head_dim", "v_total", h)
    if isinstance(dv, str):
        return dv
    args: dict[str, ArgValue] = {
        "NumHeads": h,
        "NumKeyChannels": Kc,
        "InputSize": E,
        "NumValueChannels": None if dv is None else dv * h,
        "OutputSize": _int(v, "output"),
    }
    return args, notes


def _self_only(v: Mapping[str, ArgValue], E: int, layer: str) -> str | None:
    for role in ("key_input", "value_input"):
        width = _int(v, role)
        if width is not None and width != E:
            return f"{layer} reads keys and values at the model width {E}, not {width}"
    O = _int(v, "output")
    if O is not None and O != E:
        return f"{layer} always outputs the model width {E}; cannot output {O}"
    if v.get("add_bias_kv"):
        return f"{layer} has no add_bias_kv"
    return None


def _for_hf(v: Mapping[str, ArgValue], E: int, h: int) -> _Built:
    reason = _self_only(v, E, "Llama-style attention")
    if reason:
        return reason
    d = _per_head(v, "head_dim", "qk_total", h)
    dv = _per_head(v, "v_head_dim", "v_total", h)
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
        "num_key_value_heads": _int(v, "kv_heads"),
        "head_dim": d,
    }
    if "bias" in v:
        args["attention_bias"] = v["bias"]
    return args, []


def _for_t5(v: Mapping[str, ArgValue], E: int, h: int) -> _Built:
    reason = _self_only(v, E, "T5 attention")
    if reason:
        return reason
    if v.get("bias"):
        return "T5 projections have no biases"
    g = _int(v, "kv_heads")
    if g is not None and g != h:
        return "T5 attention has no grouped K/V heads"
    notes: list[str] = []
    d = _per_head(v, "head_dim", "qk_total", h)
    dv = _per_head(v, "v_head_dim", "v_total", h)
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


_COMPARE_BUILDERS: Mapping[str, Callable[[Mapping[str, ArgValue], int, int], _Built]] = MappingProxyType(
    {
        "pytorch": _for_pytorch,
        "keras": _for_keras,
        "matlab": _for_matlab,
        "hf": _for_hf,
        "t5": _for_t5,
    }
)


def compare(args: Mapping[str, UserValue]) -> tuple[tuple[str, Calculation | str], ...]:
    """Read the same numbers under every convention, side by side.

    Argument names from any convention are mapped by meaning: embed_dim / hidden_size / d_model /
    query_dim / InputSize are the model width; num_heads / NumHeads / num_attention_heads the head
    count; key_dim / d_kv / head_dim per-head widths; NumKeyChannels a total width. Arguments a
    convention does not have keep its own default (bias differs: on in PyTorch, Keras and MATLAB,
    off in Llama and T5). Where a convention cannot take the arguments, its entry is the reason.
    Raises ValueError for unknown, conflicting or missing (width, heads) arguments.
    """
    values, common_notes = _compare_roles(args)
    E = _int(values, "width")
    h = _int(values, "heads")
    assert E is not None and h is not None  # checked in _compare_roles
    rows: list[tuple[str, Calculation | str]] = []
    for convention, builder in _COMPARE_BUILDERS.items():
        built = builder(values, E, h)
        if isinstance(built, str):
            rows.append((convention, built))
            continue
        conv_args, notes = built
        try:
            calc = CONVENTIONS[convention](**conv_args)
        except ValueError as exc:
            rows.append((convention, str(exc)))
            continue
        rows.append((convention, dataclasses.replace(_with_notes(calc, [*notes, *common_notes]), assumed=tuple(notes),
                                                     comparison_notes=tuple(common_notes))))
    return tuple(rows)


# --------------------------------------------------------------------------- vs


@dataclass(frozen=True)
class VsChange:
    """One argument that differs between the two sets, and what changing it alone does.

    ``alone``: "moves" (the count changes with this argument alone), "same" (it does not), or
    "invalid" (the layer cannot take it alone; ``reason`` says why)."""

    argument: str
    before: ArgValue
    after: ArgValue
    alone: Literal["moves", "same", "invalid"]
    alone_total: int | None
    reason: str = ""


@dataclass(frozen=True)
class VsResult:
    """Two argument sets of one layer side by side (``calc ... --vs ...``)."""

    base: Calculation
    other: Calculation
    changes: tuple[VsChange, ...]
    sentence: str  # which argument moved the count, in one sentence


def _same_keys(args: Mapping[str, UserValue], changes: Mapping[str, UserValue]) -> dict[str, UserValue]:
    """``args`` with ``changes`` applied, names matched as calculate() matches them."""
    out = {k: v for k, v in args.items() if _key(k) not in {_key(c) for c in changes}}
    out.update(changes)
    return out


def vs(convention: str, args: Mapping[str, UserValue], changes: Mapping[str, UserValue]) -> VsResult:
    """The layer with ``args`` (A) and with ``changes`` applied to them (B), and for each changed
    argument whether changing it alone moves the count. Raises ValueError when A or B is invalid."""
    base = calculate(convention, args)
    other = calculate(convention, _same_keys(args, changes))
    before = {_key(k): (k, v) for k, v in base.arguments}
    after = {_key(k): v for k, v in other.arguments}
    moved: list[VsChange] = []
    for given, raw in changes.items():  # only what the user changed, not defaults that follow it
        name, old = before.get(_key(given), (given, None))
        value = after.get(_key(given))
        if old == value:
            continue
        try:
            alone = calculate(convention, _same_keys(args, {given: raw}))
        except ValueError as exc:
            moved.append(VsChange(name, old, value, "invalid", None, str(exc)))
            continue
        moved.append(VsChange(name, old, value, "moves" if alone.total != base.total else "same", alone.total))
    return VsResult(base, other, tuple(moved), _vs_sentence(base, other, moved))


def _vs_sentence(base: Calculation, other: Calculation, changes: Sequence[VsChange]) -> str:
    def arrow(c: VsChange) -> str:
        return f"{c.argument} ({c.before} → {c.after})"

    diff = other.total - base.total
    movers = [c for c in changes if c.alone == "moves"]
    still = [c for c in changes if c.alone == "same"]
    invalid = [c for c in changes if c.alone == "invalid"]
    if not changes:
        return f"Both sets are the same layer: {_n(base.total)} parameters."
    if diff == 0:
        head = f"The count is the same ({_n(base.total)}): "
    else:
        head = f"The count goes from {_n(base.total)} to {_n(other.total)} ({diff:+,}): "
    parts = []
    if movers:
        parts.append(", ".join(arrow(c) for c in movers) + (" moves" if len(movers) == 1 else " move") + " it")
    if still:
        parts.append(", ".join(arrow(c) for c in still) + " alone " + ("does" if len(still) == 1 else "do")
                     + " not change it")
    if invalid:
        parts.append(", ".join(arrow(c) for c in invalid) + " cannot change alone ("
                     + "; ".join(c.reason for c in invalid) + ")")
    if diff != 0 and not movers:
        parts.append("only the changes together move it")
    return head + "; ".join(parts) + "."


def kv_heads_of(calc: Calculation) -> int:
    """K/V heads of a calculated layer: the value projection is kv_heads × d_v wide."""
    return calc.v_width // calc.d_v if calc.d_v else calc.num_heads


def kv_what_if(convention: str, args: Mapping[str, UserValue], kv_heads: Sequence[int]
               ) -> tuple[tuple[int, Calculation | str], ...]:
    """The same layer with other K/V head counts (MHA: as many as query heads; GQA: fewer; MQA: one),
    every other argument as given. A convention without a K/V head argument gives the reason."""
    spec = _spec(convention)
    kv_names = {_key(n) for n in _ROLES["kv_heads"]}
    param = next((p.name for p in spec.params if _key(p.name) in kv_names), None)
    rows: list[tuple[int, Calculation | str]] = []
    for g in kv_heads:
        if param is None:
            rows.append((g, f"{LAYER_NAMES.get(convention, convention)} has no separate K/V head count: K and V "
                            "have as many heads as Q"))
            continue
        base = {k: v for k, v in args.items() if _key(k) != _key(param)}
        try:
            rows.append((g, calculate(convention, {**base, param: g})))
        except ValueError as exc:
            rows.append((g, str(exc)))
    return tuple(rows)
