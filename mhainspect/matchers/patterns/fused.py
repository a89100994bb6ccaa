"""Fused attention ops: ONNX Attention (opset 23+) and onnxruntime's com.microsoft contrib ops.

Heads come from the op's attributes (or 4-D input shapes); the projections are traced back from
the op's Q/K/V inputs exactly as for decomposed attention, or read from the packed weight the
op itself holds (com.microsoft Attention).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from mhainspect.ir.dataflow import GraphIndex
from mhainspect.ir.graph import Node
from mhainspect.matchers.assembly import split_packed
from mhainspect.matchers.block import BlockBuilder, RoleInput
from mhainspect.matchers.patterns import Pattern
from mhainspect.matchers.projection import TracedProjection, trace_back_to_projection, trace_forward_to_projection
from mhainspect.results import Evidence, Matcher, Miss

NAME = Matcher.FUSED
_MS_PACKED = {"Attention", "PackedAttention", "QAttention"}  # input, packed [D, Wq+Wk+Wv] weight, bias
_MS_SEPARATE = {"MultiHeadAttention", "DecoderMaskedMultiHeadAttention", "PackedMultiHeadAttention"}
_MS_GROUPED = {"GroupQueryAttention", "SparseAttention", "PagedAttention"}
# Input position of the packed Q|K|V bias the op adds to its (projected) Q, K and V itself.
_MS_BIAS_INPUT = {"MultiHeadAttention": 3, "PackedMultiHeadAttention": 3, "DecoderMaskedMultiHeadAttention": 10}
FUSED_OPS = {("", "Attention")} | {("com.microsoft", op) for op in _MS_PACKED | _MS_SEPARATE | _MS_GROUPED}
FUSED_OP_NAMES = frozenset(op for _, op in FUSED_OPS)  # a cheap first test before the domain


def is_fused(node: Node) -> bool:
    return (node.op_domain, node.op) in FUSED_OPS


def match(index: GraphIndex, node: Node) -> BlockBuilder | Miss:
    domain = node.op_domain
    b = BlockBuilder(index, node, f"fused:{node.op}" if domain == "" else f"fused:{domain}.{node.op}")
    if domain == "":
        _onnx_attention(index, node, b)
    elif node.op in _MS_PACKED:
        miss = _ms_attention(index, node, b)
        if miss is not None:
            return miss
    else:
        _ms_separate(index, node, b)
    out = trace_forward_to_projection(index, node.outputs[0])
    if out is not None:
        b.output = out[0]
    else:
        b.evidence.append(Evidence("o", None, "missing", f"no output projection after {node.name}"))
    scale = node.attrs.float("scale")
    if scale is not None and scale != 0.0:
        b.scale, b.scale_known = scale, True
        b.evidence.append(Evidence("scale", scale, "attribute", f"{node.name}.scale"))
    else:
        # Fused ops default to 1/sqrt(head_size): the standard scale by definition.
        b.scale, b.scale_known = None, False
    return b


def _trace_roles(index: GraphIndex, node: Node, b: BlockBuilder, positions: tuple[int, int, int]) -> None:
    for role, pos in zip(("q", "k", "v"), positions):
        if pos < len(node.inputs) and node.inputs[pos]:
            b.roles[role] = RoleInput(role, trace_back_to_projection(index, node.inputs[pos], {node.name}),
                                      tensor=node.inputs[pos])


def _int_attr(node: Node, name: str) -> int | None:
    v = node.attrs.int(name, 0)
    return v if v > 0 else None


def _kv_repeated(b: BlockBuilder) -> bool:
    """K reaches the op after a grouped-query head repeat (Expand/Tile): its head count is Q's,
    not the number of K/V heads (the projection widths say that)."""
    k_role = b.roles.get("k")
    return k_role is not None and k_role.traced is not None and any(
        n.op in ("Expand", "Tile") for n in k_role.traced.path)


def _onnx_attention(index: GraphIndex, node: Node, b: BlockBuilder) -> None:
    _trace_roles(index, node, b, (0, 1, 2))
    q, k, v = (index.shapes.shape(node.inputs[i]) if i < len(node.inputs) else None for i in range(3))
    hq, hkv = _int_attr(node, "q_num_heads"), _int_attr(node, "kv_num_heads")
    if q is not None and len(q) == 4:
        if q[1].is_int:
            b.offer("num_heads", q[1].coef, "shape", f"head axis of Q input of {node.name}")
        if q[3].is_int:
            b.offer("d_k", q[3].coef, "shape", f"last axis of Q input of {node.name}")
    if k is not None and len(k) == 4 and k[1].is_int and not _kv_repeated(b):
        # After a repeat_kv (Expand/Tile) the K input has as many heads as Q: not the K/V head count.
        b.offer("num_kv_heads", k[1].coef, "shape", f"head axis of K input of {node.name}")
    if v is not None and len(v) == 4 and v[3].is_int:
        b.offer("d_v", v[3].coef, "shape", f"last axis of V input of {node.name}")
    b.offer("num_heads", hq, "attribute", f"{node.name}.q_num_heads")
    b.offer("num_kv_heads", hkv, "attribute", f"{node.name}.kv_num_heads")
    if q is not None and len(q) == 3 and hq and q[2].is_int and q[2].coef % hq == 0:
        b.offer("d_k", q[2].coef // hq, "shape", f"Q width {q[2].coef} / q_num_heads {hq} at {node.name}")
    if v is not None and len(v) == 3 and hkv and v[2].is_int and v[2].coef % hkv == 0:
        b.offer("d_v", v[2].coef // hkv, "shape", f"V width {v[2].coef} / kv_num_heads {hkv} at {node.name}")


def _ms_attention(index: GraphIndex, node: Node, b: BlockBuilder) -> Miss | None:
    """com.microsoft Attention: input [B,S,D] · weights [D, Wq+Wk+Wv] inside the op."""
    if len(node.inputs) < 2:
        return Miss(NAME, node.name, "com.microsoft Attention without a weights input")
    w = index.weight(node.inputs[1])
    h = _int_attr(node, "num_heads")
    if w is None or len(w.tensor.shape) != 2:
        return Miss(NAME, node.name, "com.microsoft Attention whose weights are not a 2-D initializer")
    d_in, total = w.tensor.shape
    sizes = node.attrs.ints("qkv_hidden_sizes")
    if sizes is not None and len(sizes) == 3 and sum(sizes) == total:
        wq, wk, wv = sizes
    elif total % 3 == 0:
        wq = wk = wv = total // 3  # the op's definition: without qkv_hidden_sizes the three widths are equal
    else:
        return Miss(NAME, node.name, f"packed weight width {total} is not three equal parts and "
                                     "qkv_hidden_sizes is missing")
    bias = index.weight(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if bias is None and len(node.inputs) > 2 and node.inputs[2]:
        t = index.graph.weights.get(node.inputs[2])
        bias_t = t
    else:
        bias_t = bias.tensor if bias else None
    for role, width in (("q", wq), ("k", wk), ("v", wv)):
        b.roles[role] = RoleInput(role, None, fused_weight=w.tensor.name, fused_in=d_in, fused_width=width,
                                  fused_weight_params=d_in * width,
                                  fused_bias=bias_t.name if bias_t is not None else None,
                                  fused_bias_params=width if bias_t is not None else 0, fused_node=node.name)
    b.offer("num_heads", h, "attribute", f"{node.name}.num_heads")
    if h and wq % h == 0:
        b.offer("d_k", wq // h, "attribute", f"Q width {wq} / num_heads {h}")
        b.offer("num_kv_heads", h, "attribute", f"{node.name}.num_heads (K/V not grouped)")
    if h and wv % h == 0:
        b.offer("d_v", wv // h, "attribute", f"V width {wv} / num_heads {h}")
    b.evidence.append(Evidence("packed_weight", w.tensor.numel, "weight_shape",
                               f"{w.tensor.name} {list(w.tensor.shape)} holds Q/K/V widths {wq}/{wk}/{wv}"))
    return None


def _ms_separate(index: GraphIndex, node: Node, b: BlockBuilder) -> None:
    """MultiHeadAttention / GroupQueryAttention: projections happen before the op."""
    h = _int_attr(node, "num_heads")
    g = _int_attr(node, "kv_num_heads") if node.op in _MS_GROUPED else h
    has_key = len(node.inputs) > 1 and bool(node.inputs[1])
    has_value = len(node.inputs) > 2 and bool(node.inputs[2])
    if has_key:
        kv_traced = _ms_key_value_roles(index, node, b, has_value)
    else:
        kv_traced = None
        _ms_packed_roles(index, node, b, h, g)
    _op_bias(index, node, b)
    b.offer("num_heads", h, "attribute", f"{node.name}.num_heads")
    if node.op in _MS_GROUPED or not _kv_repeated(b):
        b.offer("num_kv_heads", g, "attribute",
                f"{node.name}.kv_num_heads" if node.op in _MS_GROUPED else f"{node.name}.num_heads (not grouped)")
    q = index.shapes.shape(node.inputs[0])
    if q is not None and len(q) == 3 and h and q[2].is_int:
        width = q[2].coef
        parts = h + 2 * (g or h) if not has_key else h
        if width % parts == 0:
            b.offer("d_k", width // parts, "attribute", f"Q width {width} / {parts} heads at {node.name}")
    if has_key and not has_value:
        _ms_packed_kv_value_size(index, node, b, g, kv_traced)
    elif has_key:
        _ms_value_size(index, node, b, g)


def _ms_key_value_roles(index: GraphIndex, node: Node, b: BlockBuilder, has_value: bool) -> TracedProjection | None:
    """Q, K and V traced from the op's own inputs; with no value input, K and V packed in the key
    input ([B, L, N, 2, H] by the op's definition: K and V have the same heads and head size), one
    projection serving K and V, half each (returned)."""
    _trace_roles(index, node, b, (0, 1, 2))
    if has_value:
        return None
    traced = b.roles["k"].traced if "k" in b.roles else None
    b.roles["v"] = RoleInput("v", None)
    if traced is not None:
        for role in ("k", "v"):
            b.roles[role] = RoleInput(role, _share(traced, Fraction(1, 2)), tensor=node.inputs[1])
    return traced


def _ms_packed_roles(index: GraphIndex, node: Node, b: BlockBuilder, h: int | None, g: int | None) -> None:
    """Packed QKV in the query input: one projection serves all three roles, split as the op packs
    it (h + 2g heads of one size: ``assembly.split_packed``)."""
    traced = trace_back_to_projection(index, node.inputs[0], {node.name})
    for role in ("q", "k", "v"):
        b.roles[role] = RoleInput(role, traced)
    width = traced.hit.out_features if traced is not None else None
    split = split_packed(width, h, g, None, None) if h and g else None
    if traced is not None and width and split is not None:
        for role, part in zip(("q", "k", "v"), split.parts):
            b.roles[role] = RoleInput(role, _share(traced, Fraction(part, width)))


def _ms_packed_kv_value_size(index: GraphIndex, node: Node, b: BlockBuilder, g: int | None,
                             traced: TracedProjection | None) -> None:
    kv = index.shapes.shape(node.inputs[1])
    if kv is not None and len(kv) == 5 and kv[3].is_int and kv[3].coef == 2 and kv[4].is_int:
        b.offer("d_v", kv[4].coef, "shape", f"head size of the packed K/V input of {node.name}")
    elif traced is not None and g and traced.hit.out_features % (2 * g) == 0:
        b.offer("d_v", traced.hit.out_features // (2 * g), "attribute",
                f"packed K/V width {traced.hit.out_features} / (2 × {g} heads) at {node.name}")


def _ms_value_size(index: GraphIndex, node: Node, b: BlockBuilder, g: int | None) -> None:
    v = index.shapes.shape(node.inputs[2])
    if v is not None and len(v) == 3 and g and v[2].is_int and v[2].coef % g == 0:
        b.offer("d_v", v[2].coef // g, "attribute", f"V width {v[2].coef} / {g} kv heads at {node.name}")
    elif v is not None and len(v) == 4 and v[3].is_int:  # [B, heads, S, head size]: a cache read as it is
        b.offer("d_v", v[3].coef, "shape", f"last axis of V input of {node.name}")


def _share(traced: TracedProjection, share: Fraction) -> TracedProjection:
    """The part ``share`` of what ``traced`` carries (a packed projection read by several roles)."""
    whole = traced.split_fraction if traced.split_fraction is not None else Fraction(1)
    return dataclasses.replace(traced, split_fraction=whole * share)


def _op_bias(index: GraphIndex, node: Node, b: BlockBuilder) -> None:
    """Give each projected role its part of the op's packed Q|K|V bias, when the bias is exactly as
    wide as the projections that reach the op and none of them has a bias of its own."""
    pos = _MS_BIAS_INPUT.get(node.op)
    if pos is None or pos >= len(node.inputs) or not node.inputs[pos]:
        return
    ref = index.weight(node.inputs[pos])
    t = ref.tensor if ref is not None else index.graph.weights.get(node.inputs[pos])
    if t is None or len(t.shape) != 1:
        return
    widths: list[int] = []
    projected: list[tuple[RoleInput, int]] = []
    for i, role in enumerate(("q", "k", "v")):
        r = b.roles.get(role)
        if r is not None and r.traced is not None:
            if r.traced.hit.bias is not None:
                return  # the projection adds its own bias: the op's input is something else
            share = r.traced.split_fraction if r.traced.split_fraction is not None else 1
            part = r.traced.hit.out_features * share
            if part != int(part):
                return
            projected.append((r, int(part)))
            widths.append(int(part))
        else:  # no projection in this file (K/V of a cache): the op input's width
            width = _input_width(index, node, i)
            if width is None:
                return
            widths.append(width)
    if sum(widths) != t.numel:
        return
    for r, width in projected:
        r.op_bias, r.op_bias_params = t.display_name, width
    b.evidence.append(Evidence("bias", t.numel, "weight_shape",
                               f"{t.display_name} [{t.numel}]: the Q/K/V biases {node.name} adds ({'/'.join(map(str, widths))})"))


def _input_width(index: GraphIndex, node: Node, pos: int) -> int | None:
    """The feature width of a fused op's Q/K/V input: [B, S, width] or [B, heads, S, head size]."""
    shape = index.shapes.shape(node.inputs[pos]) if pos < len(node.inputs) and node.inputs[pos] else None
    if shape is not None and len(shape) == 3 and shape[2].is_int:
        return shape[2].coef
    if shape is not None and len(shape) == 4 and shape[1].is_int and shape[3].is_int:
        return shape[1].coef * shape[3].coef
    return None


PATTERN = Pattern(NAME, FUSED_OP_NAMES, match, accepts=is_fused)
