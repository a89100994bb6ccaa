"""Graph evidence of decoding: past/present cache tensors, causal and sliding-window masks reaching
a block's scores, and the dtype K and V are computed in."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mhainspect.ir import dtypes
from mhainspect.ir.dataflow import SHAPE_INPUTS
from mhainspect.ir.graph import TensorKind
from mhainspect.results import AttentionBlock, projection_tensor_names

if TYPE_CHECKING:
    from mhainspect.ir.dataflow import GraphIndex
    from mhainspect.ir.graph import ModelGraph, Node

# ----------------------------------------------------------------------------- graph evidence

_CACHE_NAME = re.compile(r"past|present|cache|key_values", re.IGNORECASE)
_COMPARE_OPS = {"Less", "LessOrEqual", "Greater", "GreaterOrEqual"}
# Ops a stored weight passes through on its way to a projection (dequantization, layout, casts).
_WEIGHT_PATH = {"DequantizeLinear", "Cast", "Transpose", "Reshape", "Identity", "Unsqueeze", "Squeeze",
                "Mul", "Sub", "Add", "Concat", "Split", "Slice", "Gather", "Expand", "MatMulNBits",
                "GatherBlockQuantized"}
# Input positions of an op that are indices or shape arguments, not values reaching the scores.
_NOT_MASK_INPUTS: dict[str, frozenset[int]] = {
    **SHAPE_INPUTS, "Gather": frozenset({1}), "GatherElements": frozenset({1}), "GatherND": frozenset({1})}
_MASK_WALK_LIMIT = 400  # nodes visited walking back from a block's scores looking for a causal mask
_IO_WALK_LIMIT = 600  # nodes visited from a past/present tensor to the nearest block


def _block_nodes(blocks: Sequence[AttentionBlock]) -> dict[str, str]:
    """Node name -> block name, for the anchors and the projection nodes."""
    out: dict[str, str] = {}
    for b in blocks:
        if b.anchor:
            out.setdefault(b.anchor, b.name)
        for p in b.projections:
            if p.node:
                out.setdefault(p.node, b.name)
    return out


def _stored_sources(index: GraphIndex, name: str, memo: dict[str, tuple[str, ...] | None],
                    depth: int = 0) -> tuple[str, ...] | None:
    """The stored tensors ``name`` is computed from when it is computed from stored tensors alone
    (through dequantization, casts, layout ops), else None (an activation)."""
    weights = index.graph.weights
    if name in weights:
        t = weights[name]
        return (name,) if not t.is_constant_node or t.numel > 1 else ()
    if name in memo:
        return memo[name]
    memo[name] = None  # a cycle or a deep chain is an activation
    producer = index.producer.get(name)
    if producer is None or producer.op not in _WEIGHT_PATH or depth >= 6:
        return None
    found: list[str] = []
    for x in producer.inputs:
        if not x:
            continue
        sub = _stored_sources(index, x, memo, depth + 1)
        if sub is None:
            return None
        found.extend(sub)
    memo[name] = tuple(found)
    return memo[name]


def graph_block_tensors(index: GraphIndex, blocks: Sequence[AttentionBlock]) -> dict[str, tuple[str, ...]]:
    """Per block, the stored tensors its projection nodes read, directly or through dequantization,
    casts and layout ops (scales and zero points included)."""
    weights = index.graph.weights
    memo: dict[str, tuple[str, ...] | None] = {}
    out: dict[str, tuple[str, ...]] = {}
    for b in blocks:
        names: list[str] = [x for x in projection_tensor_names(b) if x in weights]
        for p in b.projections:
            node = index.by_name.get(p.node)
            if node is None:
                continue
            for x in node.inputs:
                if x:
                    found = memo[x] if x in memo else _stored_sources(index, x, memo)
                    if found:
                        names.extend(found)
        out[b.name] = tuple(dict.fromkeys(names))
    return out


def _nearest_block(index: GraphIndex, start: str, nodes: Mapping[str, str], forward: bool) -> str | None:
    """The block whose anchor or projection node is nearest to tensor ``start`` (breadth first)."""
    frontier = [start]
    seen = {start}
    visited = 0
    while frontier and visited < _IO_WALK_LIMIT:
        nxt: list[str] = []
        for tensor in frontier:
            if forward:
                steps: list[Node] = [u for u, _ in index.users(tensor)]
            else:
                p = index.producer.get(tensor)
                steps = [p] if p is not None else []
            for node in steps:
                visited += 1
                hit = nodes.get(node.name)
                if hit is not None:
                    return hit
                for x in (node.outputs if forward else node.inputs):
                    if x and x not in seen and x not in index.graph.weights:
                        seen.add(x)
                        nxt.append(x)
        frontier = nxt
    return None


# Words of a graph input or output that carries a recurrent or convolution mixer's state between
# decoding steps (onnx-community's past_conv.N / past_ssm.N / past_recurrent.N and their present_*,
# a cache's conv_states / ssm_states, RWKV's wkv and token-shift states); "state" alone only beside
# a cache word (an encoder's "hidden_states" is no state). A word of K or V makes it a K/V cache.
_STATE_WORDS = frozenset(("conv", "conv1d", "ssm", "recurrent", "wkv", "shift", "rnn"))
_WEAK_STATE_WORDS = frozenset(("state", "states"))
_CACHE_WORDS = frozenset(("past", "present", "cache", "cached", "prev", "previous", "next", "new"))
_KV_WORDS = frozenset(("key", "keys", "value", "values", "k", "v", "kv"))


@dataclass(frozen=True)
class StateTensor:
    """A graph input (or output) that carries one layer's fixed state per sequence: every axis but
    the first (the batch) a fixed number, so its size does not grow with the tokens."""

    name: str
    layer: int | None  # the layer number its name carries
    shape: tuple[int | str | None, ...]
    dtype: str
    conv: bool  # a convolution's last inputs (else a recurrent state)

    @property
    def elements(self) -> int:
        """Elements one sequence holds (every axis after the batch)."""
        out = 1
        for d in self.shape[1:]:
            out *= d if isinstance(d, int) else 0
        return out


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+|_", name.lower()) if w]


def state_tensor(name: str, shape: Sequence[int | str | None] | None, dtype: str) -> StateTensor | None:
    """The fixed-state tensor a graph input or output of this name, shape and dtype is, or None: a
    float tensor named as a mixer's state (not K or V), of rank 2 or more, every axis after the
    batch fixed (a K/V cache grows along a sequence axis)."""
    words = _words(name)
    if not words or _KV_WORDS.intersection(words) or not dtypes.is_float(dtype) or shape is None or len(shape) < 2:
        return None
    # A state word alone is an op's name (dynamo calls an output conv1d_3 after its Conv): a state
    # is also named as carried (past_conv.0, present_ssm.0, conv_states, ssm_state).
    cached, stated = bool(_CACHE_WORDS.intersection(words)), bool(_WEAK_STATE_WORDS.intersection(words))
    if not ((_STATE_WORDS.intersection(words) and (cached or stated)) or (cached and stated)):
        return None
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape[1:]):
        return None
    layer = next((int(w) for w in words if w.isdigit()), None)
    return StateTensor(name, layer, tuple(shape), dtypes.canonical(dtype),
                       conv=bool({"conv", "conv1d", "shift"}.intersection(words)))


def state_tensors(graph: ModelGraph) -> tuple[StateTensor, ...]:
    """The graph's fixed-state inputs (a decoder fed its mixers' state each step), else its
    fixed-state outputs (a graph that only hands the state on)."""
    for infos in (graph.inputs, graph.outputs):
        found = tuple(t for v in infos if (t := state_tensor(v.name, v.shape, v.dtype)) is not None)
        if found:
            return found
    return ()


def cache_io(index: GraphIndex, blocks: Sequence[AttentionBlock]) -> dict[str, list[tuple[str, str]]]:
    """Block -> [(past/present tensor, dtype)] for the graph's cache inputs and outputs (a mixer's
    fixed state, ``state_tensor``, is none: it is no block's K/V)."""
    nodes = _block_nodes(blocks)
    out: dict[str, list[tuple[str, str]]] = {}
    g = index.graph
    for forward, infos in ((True, g.inputs), (False, g.outputs)):
        for v in infos:
            if not _CACHE_NAME.search(v.name) or not dtypes.is_float(v.dtype) \
                    or state_tensor(v.name, v.shape, v.dtype) is not None:
                continue
            block = _nearest_block(index, v.name, nodes, forward)
            if block is not None:
                out.setdefault(block, []).append((v.name, dtypes.canonical(v.dtype)))
    return out


def _from_range(index: GraphIndex, name: str, depth: int = 8) -> bool:
    """True when ``name`` is computed from a Range (position indices) within a few ops, or is one
    an exporter folded (``_stored_positions``)."""
    stack = [(name, 0)]
    seen: set[str] = set()
    while stack:
        cur, d = stack.pop()
        if _stored_positions(index, cur):
            return True
        p = index.producer.get(cur)
        if p is None or cur in seen or d > depth:
            continue
        seen.add(cur)
        if p.op in ("Range", "CumSum"):
            return True
        stack.extend((x, d + 1) for x in p.inputs if x)
    return False


def _position_axis(shape: Sequence[int]) -> bool:
    """One axis of two or more positions, every other axis 1 ([1, 1, 1, keys], [1, 1, queries, 1])."""
    return sum(1 for d in shape if d != 1) == 1 and max(shape, default=0) >= 2


def _stored_positions(index: GraphIndex, name: str) -> bool:
    """A stored integer tensor 0, 1, ..., n - 1 along one axis: position indices (an arange) that a
    static-shape export folded to a constant (TorchScript's causal mask compares two of them)."""
    t = index.graph.weights.get(name)
    if t is None or t.int_value is None or not _position_axis(t.shape):
        return False
    return t.int_value == tuple(range(len(t.int_value)))


def _unread_positions(index: GraphIndex, name: str) -> bool:
    """A stored integer tensor shaped like position indices whose values the loader did not read
    (more than it reads): a comparison of it may be a causal mask, which cannot be told."""
    t = index.graph.weights.get(name)
    return t is not None and t.int_value is None and dtypes.is_integer(t.dtype) and _position_axis(t.shape)


_CAUSAL_ATTRS = (("is_causal", "ONNX Attention is_causal = 1"), ("unidirectional", "Attention unidirectional = 1"))


_PRODUCTS = {"MatMul", "Gemm", "Einsum", "MatMulNBits", "MatMulInteger", "QLinearMatMul", "FusedMatMul"}


def _scalar_int(index: GraphIndex, name: str) -> int | None:
    t = index.graph.weights.get(name)
    if t is None or t.int_value is None or len(t.int_value) != 1:
        return None
    return t.int_value[0]


def _minus_constant(index: GraphIndex, name: str) -> int | None:
    """c when ``name`` is (position indices) - c, from Sub(x, c) or Add(x, -c); else None."""
    node = index.producer.get(name)
    if node is None or len(node.inputs) != 2 or not _from_range(index, node.inputs[0]):
        return None
    c = _scalar_int(index, node.inputs[1])
    if c is None:
        return None
    return c if node.op == "Sub" else -c if node.op == "Add" else None


def _difference_of_positions(index: GraphIndex, name: str) -> bool:
    node = index.producer.get(name)
    return (node is not None and node.op == "Sub" and len(node.inputs) == 2
            and all(_from_range(index, x) for x in node.inputs))


# (op, which side holds "q - c") -> tokens attended beyond c: kv > q - c keeps c tokens, kv >= q - c keeps c + 1.
_WINDOW_FORMS = {("Greater", 1): 0, ("GreaterOrEqual", 1): 1, ("Less", 0): 0, ("LessOrEqual", 0): 1}
# (op, which side holds the constant) for q - kv compared with c: q - kv < c keeps c tokens.
_WINDOW_DIFF_FORMS = {("Less", 1): 0, ("LessOrEqual", 1): 1, ("Greater", 0): 0, ("GreaterOrEqual", 0): 1}


def _window_in_mask(index: GraphIndex, node: Node) -> int | None:
    """The sliding window a position comparison encodes: kv > q - W (transformers' sliding
    overlay) or q - kv < W, in any of their spellings; None for a plain causal comparison."""
    for side in (0, 1):
        c = _minus_constant(index, node.inputs[side])
        extra = _WINDOW_FORMS.get((node.op, side))
        if c is not None and extra is not None and c + extra > 0:
            return c + extra
        c = _scalar_int(index, node.inputs[side])
        extra = _WINDOW_DIFF_FORMS.get((node.op, side))
        if c is not None and extra is not None and _difference_of_positions(index, node.inputs[1 - side]) \
                and c + extra > 0:
            return c + extra
    return None


def _stored_mask(t: Any) -> bool:
    """A stored tensor that may be a folded causal or sliding mask (a static-shape export writes
    one as a constant): [batch, 1, ..., q, k], the same for every head (a position bias has a
    head axis; the batch may be folded in), and not a learned parameter. Its values are data the
    audit does not read."""
    shape = t.shape
    if len(shape) < 3 or shape[-2] == 1 or shape[-1] == 1 or any(d != 1 for d in shape[1:-2]):
        return False
    return t.kind is not TensorKind.PARAMETER and (t.dtype == "bool" or dtypes.is_float(t.dtype))


@dataclass(frozen=True)
class _MaskEvidence:
    causal: bool | None
    reason: str
    window: int | None = None
    window_source: str = ""


_MASKED_BELOW = -1e4  # an additive mask entry at or below this hides the key (0 / -inf, 0 / finfo.min)

def _constant_mask(values: Sequence[float], shape: Sequence[int]) -> tuple[str, int | None]:
    """What a small constant mask [..., queries, keys] does: ("causal", None), ("window", W),
    ("none", None) when some query sees a later key or nothing is hidden (not causal), ("other",
    None) when it cannot be told.

    Which entries hide a key: those at or below -1e4 when there are any (an additive mask); else,
    with two values, those unlike the diagonal entry (a boolean or 1/0 mask, either polarity; a
    query always sees itself); else none (a bias). With keys = queries + past, query q's own key
    is q + past."""
    queries, keys = shape[-2], shape[-1]
    past = keys - queries
    if past < 0 or not values or len(values) % (queries * keys):
        return "other", None
    additive = any(v <= _MASKED_BELOW for v in values)
    if not additive and len(set(values)) > 2:
        return "none", None  # a bias: it shifts scores, it hides no key
    pattern = _seen_keys(values, queries, keys, additive)
    if pattern is None:
        return "other", None
    return _mask_kind(pattern, past)


def _seen_keys(values: Sequence[float], queries: int, keys: int, additive: bool
               ) -> tuple[tuple[int, ...], ...] | None:
    """Per query, the keys it sees: the same in every [queries, keys] plane, else None."""
    size = queries * keys
    past = keys - queries
    pattern: tuple[tuple[int, ...], ...] | None = None
    for start in range(0, len(values), size):
        plane = values[start:start + size]
        keep = plane[past]  # query 0 sees its own key
        rows = tuple(tuple(k for k in range(keys) if (plane[q * keys + k] > _MASKED_BELOW if additive
                                                      else plane[q * keys + k] == keep))
                     for q in range(queries))
        if pattern is not None and rows != pattern:
            return None
        pattern = rows
    return pattern


def _mask_kind(pattern: tuple[tuple[int, ...], ...], past: int) -> tuple[str, int | None]:
    """``_constant_mask``'s answer from the keys each query sees (query q's own key is q + past)."""
    if any(row and row[-1] > q + past for q, row in enumerate(pattern)):
        return _window_bound(pattern, past)  # a query sees a later key: not causal (alone)
    if any(not row or row[-1] != q + past or row != tuple(range(row[0], row[-1] + 1))
           for q, row in enumerate(pattern)):
        return "other", None
    widths = {len(row) for row in pattern if row[0] > 0}
    if not widths:
        return "causal", None
    width = widths.pop()
    if not widths and all(len(row) == min(width, q + past + 1) for q, row in enumerate(pattern)):
        return "window", width
    return "other", None


def _window_bound(pattern: tuple[tuple[int, ...], ...], past: int) -> tuple[str, int | None]:
    """("bound", W) when each query sees every key from W - 1 before its own onwards (a sliding
    window's lower bound, which a causal mask beside it, And-ed, makes a causal window: transformers'
    sliding overlay folded to a constant apart from its causal part); else ("none", None)."""
    keys = max((row[-1] for row in pattern if row), default=-1) + 1
    starts = {q + past - row[0] + 1 for q, row in enumerate(pattern) if row and row[0] > 0}
    if len(starts) != 1:
        return "none", None
    width = starts.pop()
    if width > 1 and all(row == tuple(range(max(0, q + past - width + 1), keys)) for q, row in enumerate(pattern)):
        return "bound", width
    return "none", None


def causal_mask(index: GraphIndex, block: AttentionBlock) -> _MaskEvidence:
    """Whether the graph makes this block causal: True for a causal attribute, a
    GroupQueryAttention, a mask from Trilu or from comparing position indices (Range), or a small
    constant mask whose values are causal, with the sliding window when the comparison or the
    constant has one; None when a mask the tool cannot read reaches the scores (a graph input with
    a query axis, a larger constant, a constant of another pattern); False only when nothing that
    reaches the scores has a query axis or the constant mask lets every query see every key.

    The walk goes back from the scores (Softmax or fused op) and stops at products, so it sees
    what is added to the scores, not the activations Q and K come from; it follows values only,
    not indices, shapes or bounds (a relative-position bucket selects a bias, it hides no key)."""
    anchor = index.by_name.get(block.anchor)
    if anchor is None:
        return _MaskEvidence(None, "the block's anchor node is not in the graph")
    for attr, text in _CAUSAL_ATTRS:
        if anchor.attrs.int(attr) == 1:
            return _MaskEvidence(True, text)
    if anchor.op in ("GroupQueryAttention", "PagedAttention", "SparseAttention"):
        return _MaskEvidence(True, f"{anchor.op} (always causal)")
    # A Softmax (or the Exp of one written out) reads the scores; a fused op reads Q, K, V (or the
    # input, packed weights, bias) first, the mask after.
    walk = _MaskWalk(index, [x for x in (anchor.inputs if anchor.op in ("Softmax", "Exp") else anchor.inputs[3:]) if x])
    walk.run()
    return walk.verdict()


@dataclass
class _MaskWalk:
    """The walk back from the scores: what reaches them, read as masks."""

    index: GraphIndex
    frontier: list[str]
    open_masks: list[str] = field(default_factory=list)  # masks whose effect cannot be read
    full_constants: list[str] = field(default_factory=list)  # constant masks that hide nothing (or not causally)
    causal: str | None = None
    window: tuple[int, str] | None = None
    window_bound: tuple[int, str] | None = None  # a window's lower bound alone: a window if the mask is causal

    def run(self) -> None:
        seen = set(self.frontier)
        visited = 0
        inputs = {v.name: v for v in self.index.graph.inputs}
        while self.frontier and visited < _MASK_WALK_LIMIT:
            cur = self.frontier.pop(0)
            stored = self.index.graph.weights.get(cur)
            if stored is not None:
                self._stored(cur, stored)
                continue
            node = self.index.producer.get(cur)
            if node is None:
                self._graph_input(cur, inputs.get(cur))
                continue
            visited += 1
            self._node(node)
            if node.op in _PRODUCTS:
                continue  # Q·Kᵀ or a projection: the activations behind it are not the mask
            # A mask reaches the scores as a value: indices (a relative-position bucket, DeBERTa/T5
            # comparing q - kv with a bucket bound) and shape arguments select values, they mask none.
            skip = _NOT_MASK_INPUTS.get(node.op, ())
            for i, x in enumerate(node.inputs):
                if x and x not in seen and i not in skip:
                    seen.add(x)
                    self.frontier.append(x)

    def _stored(self, cur: str, stored: Any) -> None:
        shape = stored.shape
        if len(shape) < 2 or shape[-2] <= 1 or shape[-1] < shape[-2] or (len(shape) == 2 and shape[0] != shape[1]) \
                or stored.kind is TensorKind.PARAMETER:
            return  # no [queries, keys] plane (a bias per key or per head, a table, a scale), or learned
        label = f"constant '{cur}' {list(shape)}"
        if stored.mask_values is None:
            if _stored_mask(stored):  # with a head axis, a position bias: not a mask
                self.open_masks.append(f"a stored mask '{cur}' {list(shape)} ({stored.dtype}), whose values are not "
                                       "read (only small constants are): whether it is causal is not visible")
            return
        kind, w = _constant_mask(stored.mask_values, shape)
        if kind == "causal":
            self.causal = self.causal or f"causal mask ({label}: each query sees itself and earlier keys)"
        elif kind == "window":
            assert w is not None
            self.window = self.window or (w, f"the values of {label}")
        elif kind == "bound":
            assert w is not None
            self.window_bound = self.window_bound or (w, f"the values of {label}, with the causal mask")
            self.full_constants.append(label)  # alone, it lets queries see later keys
        elif kind == "none":
            self.full_constants.append(label)  # hides nothing, or lets queries see later keys
        else:
            self.open_masks.append(f"{label} of a pattern neither causal nor full: whether the block is causal is "
                                   "not visible")

    def _graph_input(self, cur: str, info: Any) -> None:
        # [batch, 1, 1, keys] pads keys; only a mask with a query axis can be causal.
        if info is not None and (info.shape is None or (len(info.shape) >= 3 and info.shape[-2] != 1)):
            shown = list(info.shape) if info.shape is not None else "(rank unknown)"
            self.open_masks.append(f"graph input '{cur}' {shown}: whether it is causal is up to the caller")

    def _node(self, node: Node) -> None:
        if node.op == "Trilu":
            self.causal = self.causal or f"causal mask (Trilu '{node.name}')"
            return
        if node.op not in _COMPARE_OPS or len(node.inputs) != 2:
            return
        w = _window_in_mask(self.index, node)  # kv > q - W, or q - kv < W
        if w is not None:
            self.window = self.window or (w, f"the mask's position comparison {node.op} '{node.name}'")
        elif all(_from_range(self.index, x) for x in node.inputs):
            self.causal = self.causal or f"causal mask (position comparison {node.op} '{node.name}')"
        elif any(_unread_positions(self.index, x) for x in node.inputs):
            self.open_masks.append(f"a comparison {node.op} '{node.name}' of stored position indices whose values are "
                                   "not read (only small constants are): whether it is causal is not visible")

    def verdict(self) -> _MaskEvidence:
        if self.causal is not None or self.window is not None:
            window = self.window or (self.window_bound if self.causal is not None else None)
            reason = self.causal or f"causal sliding-window mask ({window[1] if window else ''})"
            return _MaskEvidence(True, reason, window[0] if window else None, window[1] if window else "")
        if self.open_masks:
            return _MaskEvidence(None, f"the scores take a mask from {self.open_masks[0]}, and the graph has no "
                                       "past/present tensors")
        if self.frontier:
            return _MaskEvidence(None, f"the mask path to the scores is longer than {_MASK_WALK_LIMIT} nodes: "
                                       "whether it is causal was not followed to the end")
        if self.full_constants:
            return _MaskEvidence(False, f"no past/present inputs or outputs, and the {self.full_constants[0]} lets "
                                        "queries see later keys or hides none: the block attends both ways, run once "
                                        "over the input (an encoder)")
        # Nothing with a [queries, keys] plane reaches the scores: no mask of any kind could hide keys.
        return _MaskEvidence(False, "no past/present inputs or outputs, and no causal mask reaches the scores: the "
                                    "block attends both ways, run once over the input (an encoder)")


def compute_dtype(index: GraphIndex, block: AttentionBlock, fallback: str | None) -> tuple[str | None, str]:
    """The dtype K and V are computed in: a float stored tensor the K/V projection reads (a float
    weight, or the scales of a quantized one), else the model's prevailing float dtype."""
    weights = index.graph.weights
    for role in ("k", "v", "q"):
        for p in block.projections:
            if p.role != role:
                continue
            node = index.by_name.get(p.node)
            for name in (p.weight, *(node.inputs if node is not None else ())):
                if name and name in weights and dtypes.is_float(weights[name].dtype):
                    return dtypes.canonical(weights[name].dtype), f"{role} projection '{p.node}' computes in it"
            info = index.graph.value_info.get(node.outputs[0]) if node is not None and node.outputs else None
            if info is not None and dtypes.is_float(info.dtype):
                return dtypes.canonical(info.dtype), f"{role} projection output '{info.name}'"
    if fallback:
        return fallback, "the model's prevailing float dtype"
    return None, ""
