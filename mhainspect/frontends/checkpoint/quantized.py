"""Quantized Linear layers in checkpoints: the logical weight a packed tensor encodes, and which
tensors beside it are quantization data.

One table (``LAYOUTS``) of how the toolchains store a quantized Linear, each row keyed by the
evidence in the file (the weight's leaf name and dtype, the siblings that mark the layout, the
shapes) and by the config's ``quantization_config.quant_method``:

- GPTQ (AutoGPTQ, GPTQModel, optimum): ``qweight`` int32 [in·bits/32, out], values of consecutive
  in-features packed in one word; ``qzeros``, ``scales`` [groups, out], ``g_idx`` [in];
- AWQ GEMM (AutoAWQ): ``qweight`` int32 [in, out·bits/32], packed along out-features; ``qzeros``,
  ``scales`` [groups, out];
- compressed-tensors ``pack-quantized``: ``weight_packed`` [out, in·bits/word] with
  ``weight_shape`` (the logical [out, in], stored as a tensor), ``weight_scale``, ``weight_zero_point``;
- bitsandbytes 4-bit: ``weight`` [out·in/2, 1] flattened, the logical shape in the JSON quant
  state ``weight.quant_state.bitsandbytes__nf4`` (stored as uint8 bytes), ``weight.absmax``, ...;
- one stored value per weight with scales beside it: bitsandbytes LLM.int8 (int8 + ``SCB``),
  compressed-tensors int8 / fp8 (``weight_scale``), block fp8 (``weight_scale_inv``);
- MLX (mlx-lm): ``weight`` uint32 [out, in·bits/32], ``scales`` / ``biases`` [out, in/group_size],
  bits and group size in the config's ``quantization`` (per-module entries override them);
- AWQ GEMV (AutoAWQ ``version: gemv``): ``qweight`` int32 [out, in·bits/32], packed along
  in-features, ``scales`` / ``qzeros`` one row per output;
- EXL2 (ExLlamaV2): ``q_weight`` int32 [in·bits/32, out] with bits mixed per group of rows,
  ``q_invperm`` / ``q_perm`` [in], ``q_scale``, ``q_scale_max``, ``q_groups``.

A packed weight's logical shape comes from its stored shape and the bits, the bits from the
shapes where they tell (``g_idx`` gives GPTQ's in-features, ``q_invperm`` EXL2's, ``scales`` AWQ's
out-features and, times the group size, MLX's in-features, ``qzeros`` both, ``weight_shape`` and
the quant state the whole shape), else from the config.
Where the config and the shapes disagree (the quant method, the bits), the shapes win and the
disagreement is recorded on the weight (``Quantized.conflict``). Pure: metadata and a few small
integer tensors' values in (``VALUE_LEAVES``), WeightMetas out.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Any

from mhainspect.frontends.checkpoint.hf_config import positive_int
from mhainspect.ir.dtypes import lookup
from mhainspect.ir.weights import Quantized, QuantRole, WeightMeta


class Pack(str, Enum):
    """How the stored tensor holds a Linear's [out, in] values."""

    NONE = "none"  # one stored element per value, [out, in]
    IN_ROWS = "in_rows"  # [in·bits/word, out]: consecutive in-features in one word (GPTQ)
    OUT_COLS = "out_cols"  # [in, out·bits/word]: consecutive out-features in one word (AWQ GEMM)
    IN_COLS = "in_cols"  # [out, in·bits/word]: rows of the Linear, packed along in (compressed-tensors)
    FLAT = "flat"  # [out·in·bits/word, 1]: the whole matrix flattened (bitsandbytes 4-bit)


@dataclass(frozen=True)
class Layout:
    """One way a toolchain stores a quantized Linear."""

    method: str  # the name reports use
    quant_methods: frozenset[str]  # config quant_method values that write it
    leaf: str  # the weight tensor's leaf under the module
    dtypes: frozenset[str] | None  # stored dtypes it uses (None: any; bitsandbytes' quant_storage)
    marks: tuple[str, ...]  # siblings (leaves under the module) of which one must be there
    pack: Pack
    aux: tuple[str, ...]  # siblings that are quantization data (a trailing "." : every leaf under it)
    what: str  # how the values sit, for the provenance text
    in_features: tuple[str, ...] = ()  # 1-D siblings as long as the in-features (GPTQ g_idx, EXL2 q_invperm)
    group_scales: str = ""  # sibling [out, in/group_size]: its columns times the group size are the in-features
    mixed_bits: bool = False  # the bits vary by group of rows (EXL2): an average, not one width


_FP8 = frozenset({"float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz"})
_CT_AUX = ("weight_scale", "weight_zero_point", "weight_shape", "weight_g_idx", "weight_global_scale",
           "input_global_scale", "input_scale", "input_zero_point", "output_scale")
_BNB4_AUX = ("weight.absmax", "weight.quant_map", "weight.nested_absmax", "weight.nested_quant_map",
             "weight.quant_state.")

LAYOUTS: tuple[Layout, ...] = (
    Layout("gptq", frozenset({"gptq"}), "qweight", frozenset({"int32"}), ("g_idx", "scales", "qzeros"),
           Pack.IN_ROWS, ("qzeros", "scales", "g_idx"), "packed along in-features", in_features=("g_idx",)),
    Layout("awq", frozenset({"awq"}), "qweight", frozenset({"int32"}), ("scales", "qzeros"),
           Pack.OUT_COLS, ("qzeros", "scales"), "packed along out-features"),
    Layout("awq-gemv", frozenset({"awq"}), "qweight", frozenset({"int32"}), ("scales", "qzeros"),
           Pack.IN_COLS, ("qzeros", "scales"), "packed along in-features, rows of the Linear"),
    Layout("exl2", frozenset({"exl2"}), "q_weight", frozenset({"int32"}), ("q_invperm", "q_perm", "q_scale"),
           Pack.IN_ROWS, ("q_invperm", "q_perm", "q_scale", "q_scale_max", "q_groups", "q_group_map"),
           "packed along in-features, bits mixed per group", in_features=("q_invperm", "q_perm"), mixed_bits=True),
    Layout("mlx", frozenset({"mlx"}), "weight", frozenset({"uint32"}), ("scales",), Pack.IN_COLS,
           ("scales", "biases"), "packed along in-features, rows of the Linear", group_scales="scales"),
    Layout("compressed-tensors", frozenset({"compressed-tensors"}), "weight_packed", frozenset({"int32", "uint8"}),
           ("weight_shape", "weight_scale"), Pack.IN_COLS, _CT_AUX, "packed along in-features, rows of the Linear"),
    Layout("bitsandbytes-4bit", frozenset({"bitsandbytes"}), "weight", None,
           ("weight.quant_state.bitsandbytes__nf4", "weight.quant_state.bitsandbytes__fp4", "weight.quant_map"),
           Pack.FLAT, _BNB4_AUX, "flattened, 2 values per byte"),
    Layout("bitsandbytes-8bit", frozenset({"bitsandbytes"}), "weight", frozenset({"int8"}), ("SCB",),
           Pack.NONE, ("SCB", "weight_format"), "one int8 per value"),
    Layout("fp8-block", frozenset({"fp8", "compressed-tensors"}), "weight", _FP8 | {"int8"}, ("weight_scale_inv",),
           Pack.NONE, ("weight_scale_inv", "input_scale"), "one value per element, block scales"),
    Layout("scaled", frozenset({"compressed-tensors", "fp8", "fbgemm_fp8", "quark", "modelopt"}), "weight",
           _FP8 | {"int8", "uint8"}, ("weight_scale",), Pack.NONE, _CT_AUX, "one value per element, with scales"),
)
# Small integer tensors whose values say a logical shape: the loader reads these (bounded).
VALUE_LEAVES = ("weight_shape", "weight.quant_state.bitsandbytes__nf4", "weight.quant_state.bitsandbytes__fp4")
MAX_VALUE_BYTES = 64 * 1024


def wants_values(name: str) -> bool:
    """Whether the loader should read this tensor's values (a stored logical shape or quant state)."""
    return name.endswith(VALUE_LEAVES)


@dataclass(frozen=True)
class _ConfigFacts:
    """What the config states about the quantization: the method, the bits and group size, and
    per-module entries that override them (MLX's ``quantization["model.layers.0.mlp.down_proj"]``)."""

    method: str = ""
    bits: int | None = None
    group_size: int | None = None
    per_module: Mapping[str, Mapping[str, Any]] | None = None

    def _entry(self, module: str) -> Mapping[str, Any] | None:
        return self.per_module.get(module) if self.per_module is not None else None

    def bits_for(self, module: str) -> int | None:
        entry = self._entry(module)
        return positive_int(entry.get("bits")) if entry is not None else self.bits

    def group_for(self, module: str) -> int | None:
        entry = self._entry(module)
        return positive_int(entry.get("group_size")) if entry is not None else self.group_size


def _config_facts(config: Mapping[str, Any] | None) -> _ConfigFacts:
    """What the config's ``quantization_config`` (else MLX's ``quantization``) states; empty when nothing."""
    qc = config.get("quantization_config") if config is not None else None
    if not isinstance(qc, Mapping) and config is not None:
        qc = config.get("quantization")
    if not isinstance(qc, Mapping):
        return _ConfigFacts()
    method = str(qc.get("quant_method", "")).lower()
    bits = qc.get("bits", qc.get("w_bit"))
    if bits is None and isinstance(groups := qc.get("config_groups"), Mapping):
        found = {g.get("weights", {}).get("num_bits") for g in groups.values()
                 if isinstance(g, Mapping) and isinstance(g.get("weights"), Mapping)}
        bits = found.pop() if len(found) == 1 else None
    if bits is None and method == "bitsandbytes":
        bits = 4 if qc.get("load_in_4bit") else 8 if qc.get("load_in_8bit") else None
    group = qc.get("group_size", qc.get("q_group_size"))
    per_module = {k: v for k, v in qc.items() if isinstance(v, Mapping) and "." in k and "bits" in v}
    return _ConfigFacts(method, positive_int(bits), positive_int(group), per_module or None)


@cache
def _word_bits(dtype: str) -> int | None:
    found = lookup(dtype)
    if found is None or found.block_size != 1 or found.block_bytes.denominator != 1:
        return None
    return int(found.block_bytes) * 8


@dataclass(frozen=True)
class _Decoded:
    out_in: tuple[int, int] | tuple[int]  # logical [out, in] (bitsandbytes without its state: [n])
    bits: int | None  # None: mixed per group (EXL2)
    said: str  # what gave the bits / shape


def _shape_of(values: Mapping[str, tuple[int, ...]], name: str) -> tuple[int, int] | None:
    v = values.get(name)
    return (v[0], v[1]) if v is not None and len(v) == 2 and all(x > 0 for x in v) else None


def _quant_state_shape(values: Mapping[str, tuple[int, ...]], module: str) -> tuple[int, int] | None:
    for kind in ("nf4", "fp4"):
        raw = values.get(f"{module}.weight.quant_state.bitsandbytes__{kind}")
        if raw is None:
            continue
        try:
            state = json.loads(bytes(raw).decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
        shape = state.get("shape") if isinstance(state, dict) else None
        if isinstance(shape, list) and len(shape) == 2 and all(isinstance(d, int) and d > 0 for d in shape):
            return shape[0], shape[1]
    return None


@cache
def _plain(dtype: str, out: int, inp: int, word: int) -> _Decoded:
    """One stored value per element (fp8, int8): shared by every weight of that dtype and shape."""
    return _Decoded((out, inp), word, f"{dtype} {[out, inp]}")


@dataclass(frozen=True)
class _Stored:
    """A stored quantized weight being decoded: its shape, the bits of its storage words, the stored
    values of small tensors, what the config states, and the tensors beside it under its module."""

    layout: Layout
    meta: WeightMeta
    module: str
    word: int  # bits of one stored element
    weights: Mapping[str, WeightMeta]
    values: Mapping[str, tuple[int, ...]]
    facts: _ConfigFacts

    @property
    def shape(self) -> tuple[int, ...]:
        return self.meta.shape

    @property
    def config_bits(self) -> int | None:
        return self.facts.bits_for(self.module)

    def sibling(self, leaf: str) -> tuple[int, ...] | None:
        """The shape of the tensor ``leaf`` under the same module, if stored."""
        m = self.weights.get(f"{self.module}.{leaf}")
        return m.shape if m is not None else None

    def per_word(self, stored: int, logical: int) -> int | None:
        """Bits per value when ``stored`` words hold ``logical`` values (a packed word holds several)."""
        bits = stored * self.word // logical if logical else 0
        return bits if 0 < bits < self.word and stored * self.word == logical * bits else None

    def by_config(self, packed: int) -> int | None:
        """Values in ``packed`` words at the config's bits; None when the config says no bits or they do not fit."""
        bits = self.config_bits
        return packed * self.word // bits if bits is not None and packed * self.word % bits == 0 else None


def _decode(layout: Layout, meta: WeightMeta, module: str, weights: Mapping[str, WeightMeta],
            values: Mapping[str, tuple[int, ...]], facts: _ConfigFacts) -> _Decoded | None:
    """The logical shape and bits of ``meta`` stored as ``layout``; None when the shapes do not fit it."""
    s = meta.shape
    word = _word_bits(meta.dtype)
    if word is None:
        return None
    if layout.pack is Pack.NONE:  # first: tens of thousands of fp8 / int8 weights take this branch
        return _plain(meta.dtype, s[0], s[1], word) if len(s) == 2 else None
    stored = _Stored(layout, meta, module, word, weights, values, facts)
    if layout.pack is Pack.FLAT:
        return _decode_flat(stored)
    if len(s) != 2:
        return None
    return _DECODERS[layout.pack](stored)


def _decode_flat(w: _Stored) -> _Decoded | None:
    """bitsandbytes 4-bit: the matrix flattened to [n, 1]; its quant state gives the logical shape."""
    s = w.shape
    if len(s) != 2 or s[1] != 1:
        return None
    shape = _quant_state_shape(w.values, w.module)
    if shape is not None and (bits := w.per_word(w.meta.stored_numel, shape[0] * shape[1])) is not None:
        return _Decoded(shape, bits, f"shape {list(shape)} in the quant state")
    return _Decoded((s[0] * w.word // 4,), 4, "4 bits per value (no readable quant state)")


def _decode_in_rows(w: _Stored) -> _Decoded | None:
    """GPTQ/EXL2 [in·bits/word, out]: the in-features from a 1-D sibling as long as them, else the
    bits from qzeros, else the config's bits."""
    s = w.shape
    out = s[1]
    scales = w.sibling("scales")
    if scales is not None and scales[-1] != out:
        return None  # GPTQ's scales are as wide as its qweight
    for leaf in w.layout.in_features:
        n = w.sibling(leaf)
        if n is None or len(n) != 1 or n[0] <= 0:
            continue
        said = f"in-features from {leaf} {list(n)}"
        if (bits := w.per_word(s[0], n[0])) is not None:
            return _Decoded((out, n[0]), bits, said)
        if w.layout.mixed_bits and 0 < s[0] * w.word < n[0] * w.word:
            return _Decoded((out, n[0]), None, f"{said}, {s[0] * w.word / n[0]:.3g} bits per value on average")
        return None
    qzeros = w.sibling("qzeros")
    if qzeros is not None and len(qzeros) == 2 and (bits := w.per_word(qzeros[1], out)) is not None:
        return _Decoded((out, s[0] * w.word // bits), bits, f"bits from qzeros {list(qzeros)}")
    if (n_in := w.by_config(s[0])) is not None:
        return _Decoded((out, n_in), w.config_bits, "bits from the config")
    return None


def _decode_out_cols(w: _Stored) -> _Decoded | None:
    """AWQ GEMM [in, out·bits/word]: the out-features from the scales, else the config's bits."""
    s = w.shape
    scales = w.sibling("scales")
    if scales is not None and len(scales) == 2 and (bits := w.per_word(s[1], scales[1])) is not None:
        return _Decoded((scales[1], s[0]), bits, f"out-features from scales {list(scales)}")
    if scales is None and (n_out := w.by_config(s[1])) is not None:
        return _Decoded((n_out, s[0]), w.config_bits, "bits from the config")
    return None


def _decode_in_cols(w: _Stored) -> _Decoded | None:
    """Rows of the Linear packed along in [out, in·bits/word]: the stored logical shape wins; else
    the group scales; else the config's bits."""
    s = w.shape
    scales = w.sibling("scales")
    if scales is not None and scales[0] != s[0]:
        return None  # scales beside rows of the Linear have one row per output
    shape = _shape_of(w.values, f"{w.module}.weight_shape")
    if shape is not None and shape[0] == s[0]:
        if (bits := w.per_word(s[1], shape[1])) is not None:
            return _Decoded(shape, bits, f"weight_shape {list(shape)}")
        config_bits = w.config_bits
        if config_bits and s[1] * w.word >= shape[1] * config_bits:
            return _Decoded(shape, config_bits, f"weight_shape {list(shape)} (rows padded to whole words)")
    found = _in_features_from_groups(w)
    if found is not None:
        return found
    if (n_in := w.by_config(s[1])) is not None:
        return _Decoded((s[0], n_in), w.config_bits, "bits from the config")
    return None


def _in_features_from_groups(w: _Stored) -> _Decoded | None:
    """MLX: the group scales [out, in/group_size] times the config's group size are the in-features."""
    group = w.facts.group_for(w.module)
    groups = w.sibling(w.layout.group_scales) if w.layout.group_scales else None
    if group is None or groups is None or len(groups) != 2:
        return None
    s = w.shape
    bits = w.per_word(s[1], groups[1] * group)
    if bits is None:
        return None
    return _Decoded((s[0], groups[1] * group), bits,
                    f"in-features from {w.layout.group_scales} {list(groups)} x group_size {group}")


# The packed layouts with a matrix's two dims stored (FLAT and NONE are decoded before these).
_DECODERS: dict[Pack, Callable[[_Stored], _Decoded | None]] = {
    Pack.IN_ROWS: _decode_in_rows, Pack.OUT_COLS: _decode_out_cols, Pack.IN_COLS: _decode_in_cols,
}


# Every weight leaf is one name component: a name's candidate layouts are one lookup by its last.
assert all("." not in layout.leaf for layout in LAYOUTS)


def _layouts_by_leaf(leaves: frozenset[str]) -> dict[str, tuple[Layout, ...]]:
    """The layouts a weight list can hold, by their weight's leaf: those with a mark among
    ``leaves`` (the last components of its names). A name's candidates are then one lookup, and a
    checkpoint with no quantization data (or one layout's, as fp8 block scales) tests no other
    layout's marks per weight."""
    out: dict[str, tuple[Layout, ...]] = {}
    for layout in LAYOUTS:
        if any(mark.rpartition(".")[2] in leaves for mark in layout.marks):
            out[layout.leaf] = (*out.get(layout.leaf, ()), layout)
    return out


def _leaves(weights: Mapping[str, WeightMeta]) -> frozenset[str]:
    return frozenset(name.rpartition(".")[2] for name in weights)


# Per layout (by method): its aux leaves named exactly, and those that are prefixes (a trailing ".").
_AUX_KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    layout.method: (tuple(a for a in layout.aux if not a.endswith(".")), tuple(a for a in layout.aux if a.endswith(".")))
    for layout in LAYOUTS}


def _candidates(name: str, meta: WeightMeta, weights: Mapping[str, WeightMeta],
                by_leaf: Mapping[str, tuple[Layout, ...]]) -> list[tuple[Layout, str]]:
    """(layout, module path) pairs whose naming and dtype evidence fit ``meta`` (``by_leaf``:
    ``_layouts_by_leaf`` of the weights' leaves)."""
    module, dot, leaf = name.rpartition(".")
    layouts = by_leaf.get(leaf) if dot else None
    if layouts is None:
        return []
    out: list[tuple[Layout, str]] = []
    dtype = meta.dtype
    for layout in layouts:
        if layout.dtypes is not None and dtype not in layout.dtypes:
            continue
        for mark in layout.marks:
            if f"{module}.{mark}" in weights:
                out.append((layout, module))
                break
    return out


def _aux_names(layout: Layout, module: str, weights: Mapping[str, WeightMeta], sorted_names: Callable[[], Sequence[str]]
               ) -> list[str]:
    """The quantization data beside a weight: its exact siblings by lookup, and the leaves under an
    aux prefix (bitsandbytes' ``weight.quant_state.``) from the sorted names, walked by index from
    the prefix (``sorted_names``: sorted on first use; a slice would copy the rest of the list per
    weight, quadratic in the tensor count)."""
    exact, prefixes = _AUX_KINDS[layout.method]
    found: list[str] = []
    for a in exact:  # a loop, not a comprehension: no frame of its own per weight
        name = f"{module}.{a}"
        if name in weights:
            found.append(name)
    for a in prefixes:
        prefix = f"{module}.{a}"
        names = sorted_names()
        i, end = bisect.bisect_left(names, prefix), len(names)
        while i < end and names[i].startswith(prefix):
            found.append(names[i])
            i += 1
    return found


def apply_quantization(weights: Mapping[str, WeightMeta], config: Mapping[str, Any] | None,
                       values: Mapping[str, tuple[int, ...]]) -> dict[str, WeightMeta]:
    """``weights`` with every quantized Linear's weight at its logical shape (``quant`` set:
    stored shape, bits, provenance, a config conflict) and its quantization data marked AUX."""
    out = dict(weights)
    leaves = _leaves(weights)
    by_leaf = _layouts_by_leaf(leaves)
    found = [(name, meta, cands) for name, meta in weights.items()
             if (cands := _candidates(name, meta, weights, by_leaf))] if by_leaf else []
    if not found:
        return out
    facts = _config_facts(config)
    marks = _Marks(facts.method)
    order: list[Sequence[str]] = []

    def sorted_names() -> Sequence[str]:
        if not order:
            order.append(sorted(weights))
        return order[0]

    for name, meta, cands in found:
        chosen = _chosen(cands, meta, weights, values, facts)
        if chosen is None:
            continue
        layout, module, d = chosen
        mark = marks.weight(layout, meta, d, _config_conflicts(name, meta, layout, module, d, facts))
        out[name] = WeightMeta(meta.name, tuple(d.out_in), meta.dtype, meta.storage_key,
                               "out_in" if len(d.out_in) == 2 else "", mark, meta.tied_to)
        for aux in _aux_names(layout, module, weights, sorted_names):
            a = weights[aux]
            out[aux] = WeightMeta(a.name, a.shape, a.dtype, a.storage_key, a.layout, marks.aux(a, layout), a.tied_to)
    if not leaves.isdisjoint(_KV_SCALE_LEAVES):
        _mark_kv_scales(weights, out)
    return out


def _chosen(cands: list[tuple[Layout, str]], meta: WeightMeta, weights: Mapping[str, WeightMeta],
            values: Mapping[str, tuple[int, ...]], facts: _ConfigFacts) -> tuple[Layout, str, _Decoded] | None:
    """(layout, module, decoded) of the candidate layout ``meta`` is stored in: the shapes decide;
    among the layouts they allow, the config's quant_method. None when no layout fits the shapes."""
    decoded: list[tuple[Layout, str, _Decoded]] = []
    for layout, module in cands:  # a loop, not a comprehension: no frame of its own per weight
        d = _decode(layout, meta, module, weights, values, facts)
        if d is not None:
            decoded.append((layout, module, d))
    if len(decoded) > 1:
        decoded.sort(key=lambda x: facts.method not in x[0].quant_methods)
    return decoded[0] if decoded else None


def _mark_kv_scales(weights: Mapping[str, WeightMeta], out: dict[str, WeightMeta]) -> None:
    """The KV-cache scales (one value each) beside quantized weights, marked AUX in ``out``."""
    for name, meta in weights.items():
        if name.rpartition(".")[2] in _KV_SCALE_LEAVES and meta.numel <= 1 and out[name].quant is None:
            out[name] = meta._replace(quant=Quantized(QuantRole.AUX, meta.shape, "kv-cache"))


def _config_conflicts(name: str, meta: WeightMeta, layout: Layout, module: str, d: _Decoded,
                      facts: _ConfigFacts) -> list[str]:
    """Where the config's quant_method or bits disagree with what the shapes decoded (the shapes win)."""
    conflicts = []
    method = facts.method
    if method and method not in layout.quant_methods:
        conflicts.append(f"quantization_config quant_method={method}, but the shapes of {name} fit "
                         f"{layout.method} ({layout.what}): the shapes are used")
    config_bits = facts.bits_for(module) if layout.pack is not Pack.NONE else None
    if config_bits is not None and d.bits is not None and d.bits != config_bits:
        conflicts.append(f"quantization_config bits={config_bits}, but {name} {meta.dtype} {list(meta.shape)} "
                         f"holds {d.bits}-bit values ({d.said}): the shapes are used")
    return conflicts


class _Marks:
    """The Quantized marks of one checkpoint: the same for every weight of one shape and layout
    (tens of thousands of experts share a handful of frozen marks), one AUX mark per shape and method."""

    def __init__(self, method: str) -> None:
        self.method = method
        self._weights: dict[tuple[Any, ...], Quantized] = {}
        self._aux: dict[tuple[tuple[int, ...], str], Quantized] = {}

    def weight(self, layout: Layout, meta: WeightMeta, d: _Decoded, conflicts: list[str]) -> Quantized:
        """The mark of a weight: its stored shape, bits and the provenance after its name."""
        key = (layout.method, meta.dtype, meta.shape, d.out_in, d.bits, d.said)
        mark = self._weights.get(key) if not conflicts else None
        if mark is None:
            width = f"{d.bits}-bit" if d.bits is not None else "mixed bits"
            tail = (f"{meta.dtype} {list(meta.shape)} {layout.what}, {width} -> {list(d.out_in)} ({d.said}"
                    + (f"; quantization_config quant_method={self.method}" if self.method else "") + ")")
            mark = Quantized(QuantRole.WEIGHT, meta.shape, layout.method, d.bits, tail, "; ".join(conflicts))
            if not conflicts:
                self._weights[key] = mark
        return mark

    def aux(self, a: WeightMeta, layout: Layout) -> Quantized:
        mark = self._aux.get((a.shape, layout.method))
        if mark is None:
            mark = self._aux[a.shape, layout.method] = Quantized(QuantRole.AUX, a.shape, layout.method)
        return mark


# Scalars the quantizer stores on an attention module for its KV cache (compressed-tensors
# kv_cache_scheme, vLLM fp8 checkpoints): quantization data, beside quantized weights.
_KV_SCALE_LEAVES = frozenset({"k_scale", "v_scale", "q_scale", "prob_scale"})
_KV_DTYPES = {("float", 8): "float8e4m3fn", ("int", 8): "int8"}


def kv_cache_dtype(config: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(dtype, where it was read) of a KV cache the config quantizes (compressed-tensors
    ``kv_cache_scheme``); None when it does not."""
    qc = config.get("quantization_config") if config is not None else None
    scheme = qc.get("kv_cache_scheme") if isinstance(qc, Mapping) else None
    if not isinstance(scheme, Mapping):
        return None
    kind, bits = str(scheme.get("type", "")), scheme.get("num_bits")
    dtype = _KV_DTYPES.get((kind, bits if isinstance(bits, int) else 0))
    if dtype is None:
        return None
    return dtype, f"quantization_config.kv_cache_scheme: {bits}-bit {kind}"


# Leaves only packed weights use (``weight`` also names every float weight: a packed one is told by
# its dtype and siblings, ``_candidates``).
_PACKED_LEAVES = frozenset(layout.leaf for layout in LAYOUTS
                           if layout.pack not in (Pack.NONE, Pack.FLAT) and layout.leaf != "weight")


def quantization_notes(weights: Mapping[str, WeightMeta]) -> tuple[str, ...]:
    """Warnings about the quantized weights of a checkpoint: config/shape conflicts (the shapes
    were used) and packed weights in a layout the table does not know (not decoded)."""
    notes: list[str] = []
    conflicts = list(dict.fromkeys(m.quant.conflict for m in weights.values() if m.quant is not None and m.quant.conflict))
    if conflicts:
        notes.append(f"quantization_config disagrees with the weight shapes ({len(conflicts)} weights; the shapes are "
                     f"used): {conflicts[0]}")
    leaves = _leaves(weights)
    by_leaf = _layouts_by_leaf(leaves)
    unread: list[WeightMeta] = []
    if by_leaf or not leaves.isdisjoint(_PACKED_LEAVES):  # else no name can be a packed weight
        unread = [m for n, m in weights.items() if m.quant is None and (n.rpartition(".")[2] in _PACKED_LEAVES or any(
            lay.pack is not Pack.NONE for lay, _ in _candidates(n, m, weights, by_leaf)))]
    if unread:
        first = unread[0]
        notes.append(f"{len(unread)} packed quantized weights in a layout not known to mhainspect (first: {first.name} "
                     f"{first.dtype} {list(first.shape)}): counted as stored bytes, not as the parameters they encode")
    return tuple(notes)
