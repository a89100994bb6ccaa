"""Stored tensors that are exporter-made copies of a parameter, recognised by their values.

An exporter's constant folding can store a parameter a second time, under a view of it: the
TorchScript exporter keeps a tied embedding as ``embed_tokens.weight`` [V, d] for the lookup and
as a transposed ``onnx::MatMul_N`` [d, V] for the output projection; a relative-position bias
table [(2W-1)², h] gathered by a constant index becomes [1, h, W², W²]; a relative-position
embedding padded to the sequence becomes a larger table with zero borders. Each is one parameter.

The graph says nothing of this (the copy's producer is gone), so it is decided by values, cheaply:

- candidates come from metadata alone: a copy is a stored float tensor of rank >= 2 whose name an
  exporter made up (``onnx::MatMul_12``, ``val_7``; not a module path) or that the exporter says was
  folded from a parameter; a source is a stored float parameter named by its module path.
  No candidate, nothing read;
- a permuted view (transpose, permute, reshape/unsqueeze keeping the order): same dtype, same
  element count, the same dims up to order (ones dropped). The first and last elements stay in
  place under any permutation of axes: they are read first (two elements per tensor), then a
  sample of ``SAMPLE`` positions through each permutation the dims allow, then the whole tensor
  when it is small;
- a small table (at most ``SMALL`` elements) read whole: zero borders along an axis (a pad with
  constant zeros) keep the inner part; a [.., N, N] tensor whose every [N, N] slice repeats its
  values in the same pattern (a gather with one constant index for every head) keeps its distinct
  values; slices repeated along an axis (an expand) keep the distinct ones. When a stored
  parameter holds exactly those values, the table is a copy of it (counted there); else the table
  holds them as its own parameters;
- a small tensor the graph adds to attention scores (``added_to_scores``: moved by view ops to an
  Add before a Softmax) is read whole as a table, whatever its shape or first elements: a gathered
  relative-position table in any layout ([N·N, h] from TorchScript's fold of
  ``table[index.view(-1)]``, [N, N, h]) holds its repeated slices once, else its distinct rows
  along the axis that keeps the fewest (three values at least, finite: masks stay masks);
- a lookup (the dynamo exporter says it folded the tensor from one parameter and index buffers: a
  position table gathered by its position_ids) holds what its values show: a gathered pattern's
  distinct values, its distinct slices, else each element once; up to ``SMALL`` elements read
  whole, up to ``MAX_SAMPLED`` slice by slice (``_SLICE_SAMPLE`` positions a slice). Unreadable, it
  stays uncounted, with the loader's warning.

- a quantized view (``quantized_copies``): an 8-bit weight whose values, dequantized as the graph
  dequantizes them, are within half a step of a permuted view of a stored parameter, float or
  quantized itself (an int8 copy of a tied model: the transposed embedding and the table both
  quantized, each with its own scale).

A sample must show at least two different values: tensors of zeros (sparse benchmark files, a
missing data file) prove nothing.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator, Mapping, Sequence
from itertools import permutations
from typing import NamedTuple, Protocol

from mhainspect.ir.dataflow import VALUE_PRESERVING_OPS
from mhainspect.ir.dtypes import STRUCT_CODES, is_float
from mhainspect.ir.graph import FoldedCopy, ModelGraph, Node, Tensor, TensorKind

SAMPLE = 32  # positions compared before a copy is believed
SMALL = 1 << 16  # elements: a tensor read whole (tables, tiny weights; never a large model's weights)
# Elements up to which a tensor the exporter folded from a parameter is sampled for a broadcast axis
# (a position table gathered with repeated indices: BERT's token types at static shapes).
MAX_SAMPLED = 1 << 24
_SLICE_SAMPLE = 4  # positions compared in each slice along an axis
_MAX_PAIRS = 4096  # candidate (copy, source) pairs looked at by their first and last elements
_MAX_PERMUTATIONS = 24
# Float element types whose infinities tell a mask (0 / -inf) from a table: struct formats.
_FLOAT_FORMATS = {name: "<" + STRUCT_CODES[name] for name in ("float32", "float16", "float64")}
_MIN_TABLE_VALUES = 3  # distinct values per head of a gathered table: a mask has two
_WHAT = {"padded": "its inner part", "gathered": "its distinct values", "repeated": "its distinct slices",
         "gathered rows": "its distinct rows", "looked up": "each element once"}
# Ops that move a stored table's values without computing with them, on its way to the scores (a
# gathered relative-position table reshaped, permuted, broadcast over the batch, sliced).
_LAYOUT_OPS = VALUE_PRESERVING_OPS | {"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Flatten", "Expand", "Tile",
                                      "Slice"}
# Ops between a sum of scores and a bias and the Softmax over the scores: more terms added (a mask),
# a scale, views of the scores (Swin's 5-D view that adds the shifted windows' mask).
_SCORE_OPS = _LAYOUT_OPS | {"Add", "Sub", "Mul", "Div", "Where"}
_SOFTMAX_OPS = {"Softmax", "LogSoftmax"}
_MAX_SCORE_HOPS = 12  # ops from a stored table to the Softmax it is added before


class ValueReader(Protocol):
    """Element bytes of stored tensors (``mhainspect.frontends.onnx.values.StoredValues``)."""

    def elements(self, name: str, positions: Sequence[int]) -> list[bytes] | None: ...

    def whole(self, name: str) -> list[bytes] | None: ...


def module_path(name: str) -> bool:
    """A name a model gives its parameter ("attn.temperature"), not one an exporter makes up for a value
    ("/attn/Constant_output_0", "onnx::Mul_12", "model/dense/Const:0", "val_7")."""
    return "." in name and "/" not in name and ":" not in name and not name.startswith(".")


def is_lookup(t: Tensor) -> bool:
    """Whether the exporter says it folded ``t`` from one parameter and index buffers (a position
    table gathered by its position_ids: ``origin`` names the parameter, ``kind`` is DERIVED)."""
    return t.kind is TensorKind.DERIVED and t.origin is not None


def _stored_float(t: Tensor) -> bool:
    return (not t.is_constant_node and t.numel > 1 and is_float(t.dtype)
            and (t.may_be_parameter or is_lookup(t)))


def copy_candidates(weights: Mapping[str, Tensor]) -> tuple[list[str], list[str]]:
    """(possible copies, possible sources) by metadata alone (module doc)."""
    copies: list[str] = []
    sources: list[str] = []
    for name, t in weights.items():
        # Constant-node values (thousands of one-element shape constants in a large export) first,
        # without the call.
        if t.is_constant_node or not _stored_float(t):
            continue
        if module_path(name) and t.origin is None:
            sources.append(name)
        elif len(t.shape) >= 2 or is_lookup(t):
            copies.append(name)
    return copies, sources


def find_copies(weights: Mapping[str, Tensor], reader: ValueReader,
                nodes: Sequence[Node] = ()) -> dict[str, FoldedCopy]:
    """Copy name -> FoldedCopy for every stored tensor its values show to be a view of a parameter
    (``nodes``: the graph's, to tell which small tensors it adds to attention scores)."""
    copies, sources = copy_candidates(weights)
    if not copies:
        return quantized_copies(weights, reader, nodes, {}) if nodes and quantized_candidates(weights) else {}
    found = _permuted_copies(weights, copies, sources, reader)
    small = [c for c in copies if c not in found and weights[c].numel <= SMALL]
    biases = added_to_scores(nodes, [c for c in small if not is_lookup(weights[c])]) if small else frozenset()
    tables = [c for c in small if is_lookup(weights[c]) or c in biases or _may_be_table(weights[c], reader)]
    small_sources = [s for s in sources if weights[s].numel <= SMALL]
    for c in tables:
        hit = _table_copy(weights, c, small_sources, reader, c in biases)
        if hit is not None:
            found[c] = hit
    for c in copies:  # larger lookups: their repeated slices by sample
        t = weights[c]
        if c not in found and is_lookup(t) and SMALL < t.numel <= MAX_SAMPLED:
            hit = _sampled_lookup(t, reader)
            if hit is not None:
                found[c] = hit
    if nodes and quantized_candidates(weights):
        found.update(quantized_copies(weights, reader, nodes, found))
    return found


def _may_be_table(t: Tensor, reader: ValueReader) -> bool:
    """Whether a small tensor can be a padded, gathered or broadcast table, from its shape and a few
    elements (a weight of distinct values is never read whole): a zero at its first or last element
    (a border), [.., N, N] slices (a gather), or its first two slices along an axis agreeing at
    _SLICE_SAMPLE positions (a repeat)."""
    shape = t.shape
    if len(shape) >= 3 and shape[-1] == shape[-2] >= 2 and t.numel // (shape[-1] * shape[-1]) >= 2:
        return True
    corners = reader.elements(t.name, [0, t.numel - 1])
    if corners is None:
        return False
    if bytes(len(corners[0])) in corners:
        return True
    for dim, stride in zip(shape, _strides(shape)):
        if dim < 2:
            continue
        bases = [(p // stride) * stride * dim + p % stride for p in _sample_positions(t.numel // dim)[:_SLICE_SAMPLE]]
        first = reader.elements(t.name, bases)
        if first is not None and first == reader.elements(t.name, [b + stride for b in bases]):
            return True
    return False


def added_to_scores(nodes: Sequence[Node], names: Sequence[str]) -> frozenset[str]:
    """The tensors among ``names`` that the graph adds to attention scores: through ops that only move
    their values (_LAYOUT_OPS) to an Add whose sum reaches a Softmax through more terms, scales and
    views of the scores (_SCORE_OPS). Such a tensor is a score bias, a table a small one may be read
    whole as (its values decide how many of its elements are parameters). One pass over ``nodes``
    to index their consumers, and only when ``names`` is not empty."""
    if not names or not nodes:
        return frozenset()
    consumers: dict[str, list[Node]] = {}
    for n in nodes:
        for x in n.inputs:
            if x:
                consumers.setdefault(x, []).append(n)
    return frozenset(name for name in names if _reaches_scores(name, consumers))


def _reaches_scores(name: str, consumers: Mapping[str, list[Node]]) -> bool:
    """Whether ``name`` reaches a Softmax, moved by _LAYOUT_OPS (as the data input) to an Add, then
    through _SCORE_OPS (module doc of ``added_to_scores``)."""
    level: list[tuple[str, bool]] = [(name, False)]  # (value, already added into a sum)
    seen = set(level)
    for _ in range(_MAX_SCORE_HOPS):
        nxt: list[tuple[str, bool]] = []
        for value, summed in level:
            for n in consumers.get(value, ()):
                if summed and n.op in _SOFTMAX_OPS:
                    return True
                if summed:  # the scores in any operand (a scale's Mul, a mask's Where)
                    passes = n.op in _SCORE_OPS
                else:  # the table as the data a view moves, or as one term of a sum
                    passes = n.op == "Add" or (n.op in _LAYOUT_OPS and n.inputs[0] == value)
                out = (n.outputs[0], summed or n.op == "Add") if passes and n.outputs else None
                if out is not None and out[0] and out not in seen:
                    seen.add(out)
                    nxt.append(out)
        if not nxt:
            return False
        level = nxt
    return False


def held_params(graph: ModelGraph, t: Tensor) -> int:
    """The parameters a stored tensor stands for where a block counts it (a table in its extras):
    its elements, or for an exporter-made copy its source's (the copy's own when the file keeps
    no source)."""
    c = graph.folded.get(t.name) if graph.folded else None
    if c is None:
        return t.numel
    source = graph.weights.get(c.source) if c.source else None
    return source.numel if source is not None else c.params


# -- permuted views ------------------------------------------------------------------------------

def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def _permuted_copies(weights: Mapping[str, Tensor], copies: list[str], sources: list[str],
                     reader: ValueReader) -> dict[str, FoldedCopy]:
    by_dims: dict[tuple[str, tuple[int, ...]], list[str]] = {}
    for s in sources:
        t = weights[s]
        if len(_squeezed(t.shape)) >= 2:
            by_dims.setdefault((t.dtype, tuple(sorted(_squeezed(t.shape)))), []).append(s)
    pairs: list[tuple[str, str]] = []
    for c in copies:
        t = weights[c]
        for s in by_dims.get((t.dtype, tuple(sorted(_squeezed(t.shape)))), ()):
            if weights[s].storage_key != t.storage_key:
                pairs.append((c, s))
    if not pairs or len(pairs) > _MAX_PAIRS:
        return {}
    corners: dict[str, list[bytes] | None] = {}

    def corner(name: str) -> list[bytes] | None:
        if name not in corners:
            corners[name] = reader.elements(name, [0, weights[name].numel - 1])
        return corners[name]

    out: dict[str, FoldedCopy] = {}
    for c, s in pairs:
        if c in out:
            continue
        first = corner(c)
        if first is None or first != corner(s):
            continue
        view = _permuted_view(weights[c], weights[s], reader)
        if view is not None:
            out[c] = FoldedCopy(c, s, view, 0, f"{_shown(weights[c])} = {s} {list(weights[s].shape)} {view}")
    return out


def _axis_maps(copy: tuple[int, ...], source: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Each p with copy == source.transpose(p) (dims without ones), at most _MAX_PERMUTATIONS."""
    seen = 0
    for p in permutations(range(len(source))):
        if all(source[p[i]] == copy[i] for i in range(len(copy))):
            yield p
            seen += 1
            if seen >= _MAX_PERMUTATIONS:
                return


def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        out[i] = out[i + 1] * shape[i + 1]
    return tuple(out)


def _sample_positions(numel: int) -> list[int]:
    """SAMPLE positions spread over [0, numel), the same for every run (no randomness in a report)."""
    if numel <= SAMPLE:
        return list(range(numel))
    step = numel / SAMPLE
    return sorted({min(numel - 1, int(k * step) + (k * 2654435761) % max(1, int(step))) for k in range(SAMPLE)})


def _source_positions(positions: Sequence[int], copy: tuple[int, ...], source: tuple[int, ...],
                      p: tuple[int, ...]) -> list[int]:
    """Flat positions in ``source`` of the copy's flat ``positions``, copy == source.transpose(p)."""
    cs, ss = _strides(copy), _strides(source)
    out: list[int] = []
    for pos in positions:
        flat = 0
        for axis, stride in enumerate(cs):
            i, pos = divmod(pos, stride)
            flat += i * ss[p[axis]]
        out.append(flat)
    return out


def _permuted_view(copy: Tensor, source: Tensor, reader: ValueReader) -> str | None:
    """How ``copy`` is a permuted view of ``source`` (by sampled values, then whole when small)."""
    cs, ss = _squeezed(copy.shape), _squeezed(source.shape)
    numel = copy.numel
    for p in _axis_maps(cs, ss):
        positions = _sample_positions(numel)
        got = reader.elements(copy.name, positions)
        want = reader.elements(source.name, _source_positions(positions, cs, ss, p))
        if got is None or got != want or len(set(got)) < 2:
            continue
        if numel <= SMALL:
            every = list(range(numel))
            whole_copy, whole_source = reader.whole(copy.name), reader.whole(source.name)
            if whole_copy is None or whole_source is None:
                continue
            mapped = _source_positions(every, cs, ss, p)
            if any(whole_copy[i] != whole_source[j] for i, j in zip(every, mapped)):
                continue
        return _view_name(p, copy.shape, source.shape)
    return None


def _view_name(p: tuple[int, ...], copy: tuple[int, ...], source: tuple[int, ...]) -> str:
    if p == tuple(range(len(p))):
        return "reshaped" if copy != source else "duplicated"
    if p == (1, 0):
        return "transposed"
    return f"permuted {p}"


def _shown(t: Tensor) -> str:
    how = "looked up in" if is_lookup(t) else "folded from"
    origin = f" ({how} {t.origin})" if t.origin and t.origin != t.name else ""
    return f"{t.name}{origin} {list(t.shape)}"


# -- small tables: padded, gathered ---------------------------------------------------------------

def _table_copy(weights: Mapping[str, Tensor], name: str, sources: list[str],
                reader: ValueReader, score_bias: bool = False) -> FoldedCopy | None:
    t = weights[name]
    shape = t.shape
    vals = reader.whole(name)
    if vals is None or len(vals) != t.numel or len(set(vals)) < 2:
        return None
    own = _padded_inner(t.dtype, shape, vals)
    view = "padded"
    if own is None:
        own = _gathered_values(t.dtype, shape, vals)
        view = "gathered"
    if own is None:
        own = _repeated_slices(t.dtype, shape, vals, is_lookup(t))
        view = "repeated"
    if own is None and score_bias:  # added to the scores: a table gathered into any layout
        own = _distinct_rows(t.dtype, shape, vals)
        view = "gathered rows"
    if own is None and is_lookup(t):
        own, view = vals, "looked up"  # every element once: the lookup kept each entry once
    if own is None or (len(own) >= t.numel and not is_lookup(t)):
        return None
    wanted = set(own)
    for s in sources:
        src = weights[s]
        if src.dtype != t.dtype or src.numel != len(own) or src.storage_key == t.storage_key:
            continue
        svals = reader.whole(s)
        if svals is not None and set(svals) == wanted:
            return FoldedCopy(name, s, view, 0, f"{_shown(t)} = {s} {list(src.shape)} {view}")
    what = _WHAT[view]
    return FoldedCopy(name, "", view, len(own), f"{_shown(t)} {view}: {len(own):,} parameters ({what})")


def _padded_inner(dtype: str, shape: tuple[int, ...], vals: list[bytes]) -> list[bytes] | None:
    """The elements inside the zero borders of a tensor padded with constant zeros; None when no
    axis has borders of slices that are all zeros (bit for bit) on both sides, or inside are fewer
    than two values other than zero, or an infinity."""
    zero = bytes(len(vals[0]))
    strides = _strides(shape)
    nonzero = [[False] * d for d in shape]  # per axis, per slice: holds a non-zero element
    for pos, v in enumerate(vals):
        if v == zero:
            continue
        rest = pos
        for axis, stride in enumerate(strides):
            i, rest = divmod(rest, stride)
            nonzero[axis][i] = True
    bounds: list[tuple[int, int]] = []
    for axis_flags, dim in zip(nonzero, shape):
        used = [i for i, f in enumerate(axis_flags) if f]
        if not used:
            return None
        lo, hi = used[0], used[-1] + 1
        # A pad puts zeros on both sides of an axis (VITS pads a table to the sequence both ways); a
        # zero first or last slice alone is a table's own (sin(0) of a rotary cache, a padding row).
        bounds.append((lo, hi) if lo > 0 and hi < dim else (0, dim))
    if all(lo == 0 and hi == d for (lo, hi), d in zip(bounds, shape)):
        return None
    inner: list[bytes] = []
    for pos, v in enumerate(vals):
        rest = pos
        inside = True
        for axis, stride in enumerate(strides):
            i, rest = divmod(rest, stride)
            lo, hi = bounds[axis]
            if not lo <= i < hi:
                inside = False
                break
        if inside:
            inner.append(v)
    held = [v for v in set(inner) if v != zero]
    return inner if len(held) >= 2 and _finite(dtype, held) else None


def _gathered_values(dtype: str, shape: tuple[int, ...], vals: list[bytes]) -> list[bytes] | None:
    """The distinct values of a [.., N, N] tensor whose [N, N] slices (two or more) repeat their values
    in one same pattern (a table gathered by one constant index per head), slice by slice; None when
    it is no such tensor (every value distinct, patterns that differ, infinities of a mask)."""
    if len(shape) < 2 or shape[-1] != shape[-2] or shape[-1] < 2:
        return None
    square = shape[-1] * shape[-1]
    slices = len(vals) // square
    if slices < 2:
        return None
    pattern: list[int] | None = None
    distinct: list[bytes] = []
    for k in range(slices):
        part = vals[k * square:(k + 1) * square]
        classes: dict[bytes, int] = {}
        mine = [classes.setdefault(v, len(classes)) for v in part]
        if len(classes) >= square:
            return None
        if pattern is None:
            pattern = mine
        elif mine != pattern:
            return None
        distinct.extend(classes)
    # Each head its own values (a mask broadcast over the heads repeats one slice), more than a
    # mask's two, all finite.
    if len(set(distinct)) != len(distinct) or len(distinct) < _MIN_TABLE_VALUES * slices or not _finite(dtype, distinct):
        return None
    return distinct


def _finite(dtype: str, values: list[bytes]) -> bool:
    """No infinity or NaN among ``values`` (a mask's -inf); True for a dtype not decoded here (fp8)."""
    if dtype == "bfloat16":  # the upper half of a float32
        return all(math.isfinite(struct.unpack("<f", b"\0\0" + v)[0]) for v in values)
    fmt = _FLOAT_FORMATS.get(dtype)
    return fmt is None or all(math.isfinite(struct.unpack(fmt, v)[0]) for v in values)


def _slice_keys(shape: tuple[int, ...], axis: int, vals: list[bytes]) -> list[tuple[bytes, ...]]:
    """The values of each slice along ``axis``, in slice order."""
    strides = _strides(shape)
    stride, dim = strides[axis], shape[axis]
    slices: list[list[bytes]] = [[] for _ in range(dim)]
    for pos, v in enumerate(vals):
        slices[(pos // stride) % dim].append(v)
    return [tuple(x) for x in slices]


def _repeated_slices(dtype: str, shape: tuple[int, ...], vals: list[bytes], lookup: bool) -> list[bytes] | None:
    """The values of the distinct slices along every axis whose slices repeat (an expand over an
    axis, a gather whose index repeats entries: BERT's token types looked up by zeros); None when no
    slice repeats, or, but for a lookup, what is kept looks like a mask (fewer than three values,
    an infinity)."""
    strides = _strides(shape)
    keep: dict[int, set[int]] = {}  # axis -> indices of the first slice of each distinct value
    for axis, dim in enumerate(shape):
        if dim < 2:
            continue
        first: dict[tuple[bytes, ...], int] = {}
        for i, key in enumerate(_slice_keys(shape, axis, vals)):
            first.setdefault(key, i)
        if len(first) < dim:
            keep[axis] = set(first.values())
    if not keep:
        return None
    kept = [v for pos, v in enumerate(vals)
            if all((pos // strides[a]) % shape[a] in idx for a, idx in keep.items())]
    distinct = list(set(kept))
    if not lookup and (len(distinct) < _MIN_TABLE_VALUES or not _finite(dtype, distinct)):
        return None
    return kept


def _distinct_rows(dtype: str, shape: tuple[int, ...], vals: list[bytes]) -> list[bytes] | None:
    """The elements of the distinct rows along the axis that keeps the fewest, a row being the vector
    of elements along that axis at one position of the others: a table's rows gathered by a constant
    index, in any layout ([N·N, h], [N, N, h], [h, N, N]: its rows run along the heads' axis); None
    when no axis has a repeated row, or what is kept looks like a mask (fewer than three values, an
    infinity)."""
    strides = _strides(shape)
    best: list[bytes] | None = None
    for dim, stride in zip(shape, strides):
        if dim < 2:
            continue
        rows: dict[tuple[bytes, ...], None] = {}
        for p in range(len(vals) // dim):
            base = (p // stride) * stride * dim + p % stride
            rows.setdefault(tuple(vals[base:base + stride * dim:stride]), None)
        if len(rows) * dim < (len(best) if best is not None else len(vals)):
            best = [v for row in rows for v in row]
    if best is None:
        return None
    distinct = list(set(best))
    if len(distinct) < _MIN_TABLE_VALUES or not _finite(dtype, distinct):
        return None
    return best


def _sampled_lookup(t: Tensor, reader: ValueReader) -> FoldedCopy | None:
    """A large lookup's parameters: along each axis, its slices told apart by _SLICE_SAMPLE
    positions each, the repeated ones counted once. None when unreadable (it then stays uncounted,
    with the loader's warning)."""
    shape, strides = t.shape, _strides(t.shape)
    own = t.numel
    for dim, stride in zip(shape, strides):
        if dim < 2:
            continue
        rest = t.numel // dim
        # Positions with index 0 on this axis, spread over the others.
        bases = [(p // stride) * stride * dim + p % stride for p in _sample_positions(rest)[:_SLICE_SAMPLE]]
        keys: set[tuple[bytes, ...]] = set()
        for k in range(dim):
            got = reader.elements(t.name, [b + k * stride for b in bases])
            if got is None:
                return None
            keys.add(tuple(got))
        if len(set(next(iter(keys)))) < 2 and len(keys) == 1:
            continue  # nothing to tell slices apart by (one value along the other axes)
        own = own // dim * len(keys)
    view = "repeated" if own < t.numel else "looked up"
    return FoldedCopy(t.name, "", view, own, f"{_shown(t)} {view}: {own:,} parameters ({_WHAT[view]}, by sample)")


# -- quantized copies ----------------------------------------------------------------------------
# A quantizer can store a weight a second time as well: onnxruntime's quantize_dynamic quantizes the
# transposed tied embedding an exporter made for the output projection (MatMulInteger) and, on its
# own, the embedding table the Gather reads (DequantizeLinear). Neither is byte-equal to the other,
# nor to a float source: each dequantizes, within half of its own step, to the same values.

_INT_FORMATS = {name: STRUCT_CODES[name] for name in ("int8", "uint8")}  # 8-bit quantized weights
_QUANT_SAMPLE = 256  # positions compared: a tolerance of half a step is weaker than equality
_MIN_LEVELS = 3  # distinct quantized values among them: a constant or two-level tensor proves nothing


class Quantization(NamedTuple):
    """How a stored integer weight dequantizes: (q - zero_point) · scale, per tensor (``axis`` None)
    or per slice along ``axis``."""

    scale: str
    zero_point: str | None
    axis: int | None


def quantizations(nodes: Sequence[Node], weights: Mapping[str, Tensor]) -> dict[str, Quantization]:
    """Stored 8-bit weights by name, with their scale and zero point as the graph applies them: the
    inputs of a DequantizeLinear, of a DynamicQuantizeMatMul / MatMulIntegerToFloat (B's), or for a
    MatMulInteger's B, its zero point and the stored factor of the scale product the integer result
    is multiplied by (onnxruntime's dynamic quantization: Mul(Cast(MatMulInteger), a_scale · b_scale))."""
    def stored(name: str) -> bool:
        return name in weights

    producer = {o: n for n in nodes for o in n.outputs if o}
    consumers: dict[str, list[Node]] = {}
    for n in nodes:
        for x in n.inputs:
            if x:
                consumers.setdefault(x, []).append(n)
    out: dict[str, Quantization] = {}
    for n in nodes:
        ins = n.inputs
        if n.op == "DequantizeLinear" and len(ins) >= 2 and ins[0] and stored(ins[1]):
            zp = ins[2] if len(ins) > 2 and ins[2] else None
            per_tensor = weights[ins[1]].numel == 1
            if stored(ins[0]):
                out.setdefault(ins[0], Quantization(ins[1], zp, None if per_tensor else n.attrs.int("axis", 1)))
            elif per_tensor:  # a stored table whose rows are selected first (a quantized Gather), then dequantized
                table = _viewed_from(ins[0], producer, weights)
                if table is not None:
                    out.setdefault(table, Quantization(ins[1], zp, None))
        elif n.op in ("DynamicQuantizeMatMul", "MatMulIntegerToFloat") and len(ins) > 3:
            w, s, zp = (ins[1], ins[2], ins[3]) if n.op == "DynamicQuantizeMatMul" else (ins[1], ins[3], ins[5] if len(ins) > 5 else "")
            if stored(w) and s and stored(s):
                out.setdefault(w, Quantization(s, zp or None, None if weights[s].numel == 1 else 1))
        elif n.op == "MatMulInteger" and len(ins) >= 2 and stored(ins[1]) and n.outputs:
            scale = _product_scale(n.outputs[0], producer, consumers, weights)
            if scale is not None:
                zp = ins[3] if len(ins) > 3 and ins[3] and stored(ins[3]) else None
                out.setdefault(ins[1], Quantization(scale, zp, None if weights[scale].numel == 1 else 1))
    return out


_ROW_VIEWS = frozenset({"Gather", "Reshape", "Transpose", "Unsqueeze", "Squeeze", "Flatten", "Slice"})


def _viewed_from(value: str, producer: Mapping[str, Node], weights: Mapping[str, Tensor]) -> str | None:
    """The stored tensor ``value`` selects or moves elements of (its data input, through view ops)."""
    for _ in range(4):
        node = producer.get(value)
        if node is None or node.op not in _ROW_VIEWS or not node.inputs or not node.inputs[0]:
            return None
        value = node.inputs[0]
        if value in weights:
            return value
    return None


def _product_scale(result: str, producer: Mapping[str, Node], consumers: Mapping[str, list[Node]],
                   weights: Mapping[str, Tensor]) -> str | None:
    """The stored scale of a MatMulInteger's B: its result, cast to float, is multiplied by a scale
    that is (a Mul of) stored factors and the activation's scale; the one stored float factor."""
    for cast in consumers.get(result, ()):
        if cast.op != "Cast" or not cast.outputs:
            continue
        for mul in consumers.get(cast.outputs[0], ()):
            if mul.op != "Mul":
                continue
            for other in mul.inputs:
                if other == cast.outputs[0]:
                    continue
                if other in weights:
                    return other
                made = producer.get(other)
                if made is not None and made.op == "Mul":
                    found = [x for x in made.inputs if x in weights and is_float(weights[x].dtype)]
                    if len(found) == 1:
                        return found[0]
    return None


def quantized_candidates(weights: Mapping[str, Tensor]) -> bool:
    """Whether ``weights`` holds any stored 8-bit integer matrix (metadata alone: nothing is read
    for a file without one)."""
    return any(t.dtype in _INT_FORMATS and len(_squeezed(t.shape)) >= 2 and not t.is_constant_node
               for t in weights.values())


def quantized_copies(weights: Mapping[str, Tensor], reader: ValueReader, nodes: Sequence[Node],
                     found: Mapping[str, FoldedCopy]) -> dict[str, FoldedCopy]:
    """Copy name -> FoldedCopy for every stored quantized weight, named as exporters and quantizers
    name values, whose dequantized values are a permuted view of a stored parameter (float, or
    quantized itself), each within half of its step: one parameter, counted at the source."""
    quant = quantizations(nodes, weights)
    if not quant:
        return {}
    copies = [c for c in quant if not module_path(c) and c not in found and len(_squeezed(weights[c].shape)) >= 2]
    sources = [s for s, t in weights.items() if module_path(s) and (s in quant or _stored_float(t))
               and len(_squeezed(t.shape)) >= 2 and (t.dtype in _FLOAT_FORMATS or s in quant)]
    by_dims: dict[tuple[int, ...], list[str]] = {}
    for s in sources:
        by_dims.setdefault(tuple(sorted(_squeezed(weights[s].shape))), []).append(s)
    pairs = [(c, s) for c in copies for s in by_dims.get(tuple(sorted(_squeezed(weights[c].shape))), ())
             if weights[s].storage_key != weights[c].storage_key]
    if not pairs or len(pairs) > _MAX_PAIRS:
        return {}
    decoded: dict[str, _Decoder | None] = {}

    def decoder(name: str) -> _Decoder | None:
        if name not in decoded:
            decoded[name] = _Decoder.of(weights[name], quant.get(name), reader, weights)
        return decoded[name]

    out: dict[str, FoldedCopy] = {}
    for c, s in pairs:
        if c in out or (dc := decoder(c)) is None or (ds := decoder(s)) is None:
            continue
        view = _dequantized_view(weights[c], weights[s], dc, ds)
        if view is not None:
            out[c] = FoldedCopy(c, s, view, 0, f"{_shown(weights[c])} quantized = {s} {list(weights[s].shape)} "
                                               f"{view} (dequantized, within half a step)")
    return out


class _Decoder(NamedTuple):
    """Reads a stored weight's values as floats: a float tensor as stored, a quantized one dequantized."""

    tensor: Tensor
    reader: ValueReader
    fmt: str
    scales: tuple[float, ...] = ()  # one per tensor, or one per slice along ``axis``
    zero_points: tuple[float, ...] = ()
    axis: int | None = None
    cache: dict[tuple[int, ...], tuple[list[float], list[float], int] | None] | None = None

    @classmethod
    def of(cls, t: Tensor, q: Quantization | None, reader: ValueReader,
           weights: Mapping[str, Tensor]) -> _Decoder | None:
        if q is None:
            fmt = _FLOAT_FORMATS.get(t.dtype)
            return cls(t, reader, fmt, cache={}) if fmt is not None else None
        fmt = _INT_FORMATS.get(t.dtype)
        scales = _floats(weights.get(q.scale), reader)
        if fmt is None or not scales:
            return None
        zps: tuple[float, ...] = (0.0,) * len(scales)
        if q.zero_point is not None:
            got = _ints(weights.get(q.zero_point), reader)
            if got is None or len(got) != len(scales):
                return None
            zps = got
        axis = q.axis if len(scales) > 1 else None
        if axis is not None and (not -len(t.shape) <= axis < len(t.shape) or t.shape[axis] != len(scales)):
            return None
        if not all(s > 0 and math.isfinite(s) for s in scales):
            return None
        return cls(t, reader, fmt, scales, zps, axis, {})

    def values(self, positions: Sequence[int]) -> tuple[list[float], list[float], int] | None:
        """(values, half a step at each, distinct stored levels) at flat ``positions`` (read once)."""
        key = tuple(positions)
        if self.cache is not None and key in self.cache:
            return self.cache[key]
        got = self._values(positions)
        if self.cache is not None:
            self.cache[key] = got
        return got

    def _values(self, positions: Sequence[int]) -> tuple[list[float], list[float], int] | None:
        raw = self.reader.elements(self.tensor.name, positions)
        if raw is None:
            return None
        if not self.scales:
            vals = [float(struct.unpack("<" + self.fmt[-1], b)[0]) for b in raw]
            return vals, [0.0] * len(vals), len(set(raw))
        ints = [struct.unpack("<" + self.fmt, b)[0] for b in raw]
        if self.axis is None:
            idx = [0] * len(ints)
        else:
            shape = self.tensor.shape
            stride = _strides(shape)[self.axis]
            idx = [(p // stride) % shape[self.axis] for p in positions]
        return ([(q - self.zero_points[i]) * self.scales[i] for q, i in zip(ints, idx)],
                [self.scales[i] / 2 for i in idx], len(set(ints)))


def _floats(t: Tensor | None, reader: ValueReader) -> tuple[float, ...] | None:
    """A scale's values: kept by the loader when a scalar, else read."""
    if t is None:
        return None
    if t.float_value is not None:
        return (t.float_value,)
    fmt = _FLOAT_FORMATS.get(t.dtype)
    raw = reader.whole(t.name) if fmt is not None else None
    return None if raw is None or fmt is None else tuple(struct.unpack(fmt, b)[0] for b in raw)


def _ints(t: Tensor | None, reader: ValueReader) -> tuple[float, ...] | None:
    """A zero point's values: kept by the loader when small (ONNX stores 8-bit ones as int32_data), else read."""
    if t is None:
        return None
    if t.int_value is not None:
        return tuple(float(v) for v in t.int_value)
    fmt = _INT_FORMATS.get(t.dtype)
    raw = reader.whole(t.name) if fmt is not None else None
    return None if raw is None or fmt is None else tuple(float(struct.unpack("<" + fmt, b)[0]) for b in raw)


def _dequantized_view(copy: Tensor, source: Tensor, dc: _Decoder, ds: _Decoder) -> str | None:
    """How ``copy`` dequantizes to a permuted view of ``source`` (each within half its step)."""
    cs, ss = _squeezed(copy.shape), _squeezed(source.shape)
    for count in (2, _QUANT_SAMPLE):  # the corners first: most pairs part there
        positions = [0, copy.numel - 1] if count == 2 else _spread(copy.numel, count)
        got = dc.values(positions)
        if got is None or (count > 2 and got[2] < _MIN_LEVELS):
            return None
        maps = [p for p in _axis_maps(cs, ss) if _within(got, ds.values(_source_positions(positions, cs, ss, p)))]
        if not maps:
            return None
        if count > 2:
            return _view_name(maps[0], copy.shape, source.shape)
    return None


def _within(got: tuple[list[float], list[float], int], want: tuple[list[float], list[float], int] | None) -> bool:
    """Whether every value of ``got`` is within half a step (each side's) of ``want``'s."""
    return want is not None and all(abs(a - b) <= ha + hb + 1e-6 * max(abs(a), abs(b))
                                    for a, b, ha, hb in zip(got[0], want[0], got[1], want[1]))


def _spread(numel: int, count: int) -> list[int]:
    """``count`` positions spread over [0, numel), the same for every run."""
    if numel <= count:
        return list(range(numel))
    step = numel / count
    return sorted({min(numel - 1, int(k * step) + (k * 2654435761) % max(1, int(step))) for k in range(count)})
