"""Whole-model parameter accounting: which stored tensors are parameters, and how many elements each holds.

A parameter is a stored tensor (an initializer or a Constant node's value) that the model reads
as a weight, counted once per storage as its logical element count, whatever op reads it:

- float tensors read as data (not only for their shape) by any op;
- integer weights at the weight inputs of quantized ops (MatMulInteger, ConvInteger, QLinearConv,
  QLinearMatMul, QGemm, DynamicQuantizeMatMul, MatMulIntegerToFloat, DynamicQuantizeLSTM,
  QAttention, MatMulNBits, GatherBlockQuantized) and the quantized values of DequantizeLinear
  (int32 biases of static quantization included);
- 8-bit-or-narrower integer tensors decoded by a Cast to a float type (through layout ops and
  Gather: a quantized embedding table, and through integer casts and the affine arithmetic of a
  weight-only dequantization: Cast(int32) -> Sub(zero point) -> Cast(float) -> Mul(scale)).

MatMulNBits' packed blob counts as N·K (its attributes), GatherBlockQuantized's uint8 blob as
8/bits elements per byte. Not parameters: quantization scales and zero points (and g_idx; the
smaller operand of a Mul/Div/Sub/Add that dequantizes a stored integer weight by plain arithmetic), shape
constants and index tables (int32/int64 read as shapes or indices), one-element constants of the
arithmetic (eps, exponents, a score scale: a one-element initializer counts only when its name
carries a module path or the exporter calls it a parameter; a one-element Constant only when its
name is a module path, "attn.temperature", and arithmetic reads it with the activations: a learned
scale or bias), bool masks and float tensors read only by comparisons (a causal mask buffer
compared with 0: no gradient reaches a comparison's input), tensors the exporter marks as buffers or
constants (but a constant that is the weight operand of a product with the activations: a
classifier matrix a model keeps as a plain tensor attribute, which TorchScript writes as a Constant
node and the dynamo exporter as a lifted constant, is a weight whatever its storage), rotary
frequency buffers that only build cos/sin tables, the cos/sin caches a fused op reads (TABLE_INPUTS:
GroupQueryAttention's do_rotary inputs, RotaryEmbedding's), rotary cos/sin tables a converter stored,
told by their use (x·C + rotate_half(x)·S), an all-zero tensor only products read (a converter's
zeros_like), a small tensor holding no finite value (a NaN fill of a select), and a quantized copy of a float weight the file
also keeps (a quantizer that rewrote only some uses of a shared weight): that weight counts once.
"""

from __future__ import annotations

from itertools import chain
from math import isfinite, prod
from operator import attrgetter
from typing import NamedTuple

from mhainspect.ir.copies import module_path
from mhainspect.ir.dataflow import AFFINE_OPS, SHAPE_INPUTS, GraphIndex
from mhainspect.ir.dtypes import Family, is_float, lookup
from mhainspect.ir.graph import Node, Tensor, TensorKind

# Per op: input positions holding quantization parameters (scales, zero points, group indices).
QUANT_PARAM_INPUTS: dict[str, frozenset[int]] = {
    "DequantizeLinear": frozenset({1, 2}), "QuantizeLinear": frozenset({1, 2}),
    "MatMulInteger": frozenset({2, 3}), "ConvInteger": frozenset({2, 3}),
    "QLinearConv": frozenset({1, 2, 4, 5, 6, 7}), "QLinearMatMul": frozenset({1, 2, 4, 5, 6, 7}),
    "QGemm": frozenset({1, 2, 4, 5, 7, 8}), "DynamicQuantizeMatMul": frozenset({2, 3}),
    "MatMulIntegerToFloat": frozenset({2, 3, 4, 5}), "DynamicQuantizeLSTM": frozenset({8, 9, 10, 11}),
    "QAttention": frozenset({3, 4, 6, 7}), "MatMulNBits": frozenset({2, 3, 4}),
    "GatherBlockQuantized": frozenset({2, 3}), "QLinearAdd": frozenset({1, 2, 4, 5, 6, 7}),
    "QLinearMul": frozenset({1, 2, 4, 5, 6, 7}),
}
# Per op: input positions holding stored weights, whatever their element type.
QUANT_WEIGHT_INPUTS: dict[str, frozenset[int]] = {
    "DequantizeLinear": frozenset({0}), "MatMulInteger": frozenset({0, 1}), "ConvInteger": frozenset({0, 1}),
    "QLinearConv": frozenset({0, 3, 8}), "QLinearMatMul": frozenset({0, 3}), "QGemm": frozenset({0, 3, 6}),
    "DynamicQuantizeMatMul": frozenset({1, 4}), "MatMulIntegerToFloat": frozenset({0, 1, 6}),
    "DynamicQuantizeLSTM": frozenset({1, 2, 3, 7}), "QAttention": frozenset({1, 2}),
    "MatMulNBits": frozenset({1, 5}), "GatherBlockQuantized": frozenset({0}),
}
# Per (domain, op): input positions holding constant tables the op looks up (rotary cos/sin caches),
# which are overhead like a torch export's folded tables, not parameters. Keyed by domain too: the
# ONNX and com.microsoft RotaryEmbedding take their caches at different positions.
TABLE_INPUTS: dict[tuple[str, str], frozenset[int]] = {
    ("", "RotaryEmbedding"): frozenset({1, 2}),
    ("com.microsoft", "RotaryEmbedding"): frozenset({2, 3}),
    ("com.microsoft", "GroupQueryAttention"): frozenset({7, 8}),
    ("com.microsoft", "SparseAttention"): frozenset({9, 10}),
    ("com.microsoft", "PagedAttention"): frozenset({8, 9}),
}
# Recurrent ops: sequence lengths and initial states are inputs of the run, not weights.
_STATE_INPUTS = {op: frozenset({4, 5, 6}) for op in ("LSTM", "GRU", "RNN", "DynamicQuantizeLSTM")}
# Ops an integer weight passes through on its way to a decoding Cast (layout, selection).
_INT_VIEW_OPS = {"Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Slice", "Gather",
                 "Split", "Concat"}
_FLOAT_CODES = frozenset({1, 10, 11, 16, 17, 18, 19, 20, 23, 24})  # ONNX float element types (Cast 'to')
_DECODE_HOPS = 4
# Layout ops whose output is the same values: an input is read as data only if their output is
# (zeros expanded into an LSTM's initial state are not a weight).
# Slice too: a part of a weight (nn.MultiheadAttention's in_proj rows) is read as its user reads it.
_LAYOUT_OPS = {"Expand", "Tile", "Reshape", "Unsqueeze", "Squeeze", "Identity", "Flatten", "Slice"}
# Ops whose result is a bool: a float tensor read only by them is a mask, not a weight.
_COMPARISONS = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
_BOOL_CODE = 9  # ONNX TensorProto.BOOL (Cast 'to')
_LAYOUT_HOPS = 4
_NOT_SHAPE_ONLY: frozenset[int] = frozenset()

# Per op: input positions never read as a weight's data (quantization parameters, recurrent
# states, shape arguments), one table for _logical_count.
_NOT_DATA_INPUTS: dict[str, frozenset[int]] = {
    op: QUANT_PARAM_INPUTS.get(op, _NOT_SHAPE_ONLY) | _STATE_INPUTS.get(op, _NOT_SHAPE_ONLY)
    | SHAPE_INPUTS.get(op, _NOT_SHAPE_ONLY) for op in {*QUANT_PARAM_INPUTS, *_STATE_INPUTS, *SHAPE_INPUTS}}

_TRIG_PATH = {"Mul", "MatMul", "Unsqueeze", "Reshape", "Expand", "Cast", "Transpose", "Concat", "Div", "Identity",
              "Slice", "Gather", "Squeeze", "Einsum"}


class StoredScan(NamedTuple):
    """The stored tensors, walked once for accounting and size alike (a 70B export has ~5,700, nearly
    all one-element Constant values of the shape arithmetic): the parameters, and the rest as size
    needs them."""

    parameters: dict[str, int]  # storage key -> logical element count, for every parameter
    scalar_constants: list[Tensor]  # one-element Constant values, in file order: never parameters
    others: list[tuple[str, Tensor]]  # every other stored tensor (name, tensor), in file order
    copies: tuple[str, ...] = ()  # exporter-made copies of parameters (graph.folded) read as parameters


def parameter_counts(index: GraphIndex) -> dict[str, int]:
    """Storage key -> logical element count, for every stored tensor that is a parameter (module doc)."""
    return scan_stored(index).parameters


def scan_stored(index: GraphIndex, constants: frozenset[str] = frozenset()) -> StoredScan:
    """The parameters (module doc) and the other stored tensors, in one walk. ``constants``: stored
    tensors the matchers found to be a converter's values (a folded score scale or mask), none."""
    counts: dict[str, int] = {}
    quantized: list[tuple[Tensor, int]] = []
    scalars: list[Tensor] = []
    others: list[tuple[str, Tensor]] = []
    trig_sources = _trig_sources(index)
    rotary = _rotary_products(index)
    family_of: dict[str, Family | None] = {}  # dtype spelling -> family, looked up once per spelling
    folded = index.graph.folded
    copies: list[str] = []
    for item in index.graph.weights.items():
        t = item[1]
        shape = t.shape
        name = item[0]
        if t.is_constant_node and (not shape or prod(shape) == 1) and not _learned_scalar(index, name, t):
            scalars.append(t)  # exporter scalars (scale, eps, shape arithmetic): never parameters
            continue
        others.append(item)
        if not shape or t.storage_key in counts or name in constants:
            continue
        copy = folded.get(name) if folded else None  # an exporter-made copy of a parameter (ir.copies)
        if not t.may_be_parameter and copy is None and not (t.kind is TensorKind.CONSTANT and (
                _product_weight(index, name) or _held_variable(index, name, t))):
            continue  # the exporter says: a buffer, a constant, or folded from non-parameters
        if "." not in t.name and prod(shape) == 1 and t.kind is not TensorKind.PARAMETER:
            continue  # an initializer scalar shaped [1]; real parameters carry a module path
        dtype = t.dtype
        if dtype in family_of:
            family = family_of[dtype]
        else:
            found = lookup(dtype)
            family = family_of[dtype] = found.family if found is not None else None
        logical = _logical_count(index, name, t, family)
        if logical is None:
            continue
        if family is Family.FLOAT and (trig_sources is None or name in trig_sources) and _only_feeds_trig(index, name):
            continue  # rotary inv_freq: a buffer that only builds cos/sin tables, not a parameter
        if family is Family.FLOAT and _computed_value(index, name, t, rotary):
            continue  # a value a converter computed and stored (rotary cos/sin table, zeros_like)
        if copy is not None:  # read as a parameter: the part of it that is no other's
            copies.append(name)
            logical = copy.params
            if not logical:
                continue
        counts[t.storage_key] = logical
        if family is not Family.FLOAT:
            quantized.append((t, logical))
    for t, logical in quantized:
        base = index.quantized_from(t, logical)
        if base is not None and base.storage_key in counts:
            del counts[t.storage_key]  # a quantized copy of a float weight the file also keeps: one parameter
    return StoredScan(counts, scalars, others, tuple(copies))


def count_parameters(index: GraphIndex) -> int:
    """The model's parameters: the sum of parameter_counts."""
    return sum(parameter_counts(index).values())


def _logical_count(index: GraphIndex, name: str, t: Tensor, family: Family | None) -> int | None:
    """The elements ``t`` holds as a parameter, or None when no use reads it as one."""
    data_use = False
    frontier = [name]
    for _ in range(_LAYOUT_HOPS):
        layout: list[str] = []
        for cur in frontier:
            for user, pos in index.users(cur):
                op = user.op
                weights = QUANT_WEIGHT_INPUTS.get(op)
                if weights is not None and pos in weights and cur == name:
                    return _quantized_count(user, pos, t)
                if _not_weight_data(index, user, pos):
                    continue
                if op in _LAYOUT_OPS and pos == 0:
                    layout.extend(o for o in user.outputs if o)  # read as data only if what it makes is
                else:
                    data_use = True
        if data_use or not layout:
            break
        frontier = layout
    if not data_use:
        return None
    if family is Family.FLOAT:
        return t.numel
    found = lookup(t.dtype)
    if family is Family.INTEGER and found is not None and found.bits_per_element <= 8 and _decoded(index, name):
        return t.numel
    return None


_ARITHMETIC = frozenset({"Mul", "Add", "Sub", "Div"})
_PRODUCTS = frozenset({"MatMul", "Gemm", "FusedMatMul", "Einsum", "Conv"})
_WEIGHT_LAYOUT = frozenset({"Transpose", "Reshape", "Cast", "Identity", "Unsqueeze", "Squeeze", "Flatten"})


def _learned_scalar(index: GraphIndex, name: str, t: Tensor) -> bool:
    """A one-element Constant that is a learned scale or bias: named by a module path, a float, and
    read by arithmetic together with a value of the run (not by shape arithmetic)."""
    if not t.shape or not module_path(name) or lookup(t.dtype) is None or not is_float(t.dtype):
        return False
    for user, pos in index.users(name):
        if user.op in _ARITHMETIC and len(user.inputs) == 2 and index.is_activation(user.inputs[1 - pos]):
            return True
    return False


def _product_weight(index: GraphIndex, name: str) -> bool:
    """Whether a stored tensor is the constant operand of a product with a value of the run (through
    transposes, reshapes and casts): a weight however the exporter stored it (a classifier matrix a
    model keeps as a plain tensor attribute, which the TorchScript exporter writes as a Constant)."""
    frontier = [name]
    for _ in range(_LAYOUT_HOPS):
        nxt: list[str] = []
        for cur in frontier:
            for user, pos in index.users(cur):
                if user.op in _PRODUCTS and pos < 2 and len(user.inputs) >= 2 \
                        and index.is_activation(user.inputs[1 - pos]):
                    return True
                if user.op in _WEIGHT_LAYOUT and pos == 0:
                    nxt.extend(o for o in user.outputs if o)
        frontier = nxt
    return False


_NORM_WEIGHTS = {"LayerNormalization": frozenset({1, 2}), "SimplifiedLayerNormalization": frozenset({1}),
                 "RMSNormalization": frozenset({1}), "SkipLayerNormalization": frozenset({2, 3, 4}),
                 "SkipSimplifiedLayerNormalization": frozenset({2})}
_MASKED_BELOW = -1e4


def _held_variable(index: GraphIndex, name: str, t: Tensor) -> bool:
    """Whether a stored constant the exporter lifted from the model (a tensor the model holds that is
    no torch parameter: a Keras variable on torch, ``lifted_tensor_N``) is read as a parameter: a
    float tensor of several elements, no mask, that the arithmetic reads with a value of the run (a
    bias added, a norm's scale multiplied), that a lookup reads as its table (an embedding), or that a
    norm reads as its scale or bias. A Constant node of a torch export (a traced value) is none."""
    if t.is_constant_node or t.numel < 2 or not is_float(t.dtype) or _mask_valued(t):
        return False
    frontier = [name]
    for _ in range(_LAYOUT_HOPS):
        nxt: list[str] = []
        for cur in frontier:
            for user, pos in index.users(cur):
                op = user.op
                if op in _ARITHMETIC and len(user.inputs) == 2 and index.is_activation(user.inputs[1 - pos]):
                    return True
                if (op == "Gather" and pos == 0) or pos in _NORM_WEIGHTS.get(op, _NOT_SHAPE_ONLY):
                    return True
                if op in _WEIGHT_LAYOUT and pos == 0:
                    nxt.extend(o for o in user.outputs if o)
        frontier = nxt
    return False


def _mask_valued(t: Tensor) -> bool:
    """A stored mask: values 0 and 1 only, or 0 and large negative numbers (when its values were read)."""
    values = t.mask_values
    if not values:
        return False
    distinct = set(values)
    return distinct <= {0.0, 1.0} or (len(distinct) == 2 and 0.0 in distinct and min(distinct) <= _MASKED_BELOW)


def _not_weight_data(index: GraphIndex, user: Node, pos: int) -> bool:
    """Whether ``user`` reads its input ``pos`` as something other than a weight's values."""
    op = user.op
    if pos in _NOT_DATA_INPUTS.get(op, _NOT_SHAPE_ONLY) or (op == "Mul" and _rescales(index, user, pos)):
        return True
    if op in AFFINE_OPS and _dequantizes(index, user, pos):
        return True  # the scale or zero point of an integer weight dequantized by arithmetic
    if pos in TABLE_INPUTS.get((user.op_domain, op), _NOT_SHAPE_ONLY):
        return True  # a lookup table of the op (rotary cos/sin cache): overhead
    # Made a bool: a mask (GPT-2's tril buffer compared with 0), no gradient reaches it.
    return op in _COMPARISONS or (op == "Cast" and user.attrs.int("to") == _BOOL_CODE)


def _quantized_count(user: Node, pos: int, t: Tensor) -> int:
    if user.op == "MatMulNBits" and pos == 1:
        k, n = user.attrs.int("K", 0), user.attrs.int("N", 0)
        if k > 0 and n > 0:
            return k * n  # the packed blob holds N·K weights (plus padding to whole blocks)
    if user.op == "GatherBlockQuantized" and pos == 0 and t.dtype == "uint8":
        bits = user.attrs.int("bits", 4)
        if 0 < bits < 8 and 8 % bits == 0:
            return t.numel * (8 // bits)
    return t.numel


_RESCALE_SOURCES = {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "QuantizeLinear"}


def _rescales(index: GraphIndex, mul: Node, pos: int) -> bool:
    """Whether Mul ``mul`` multiplies its input ``pos`` with a quantization scale, an integer
    product or an integer weight decoded by a Cast: then that input is a scale (dynamic
    quantization: MatMulInteger -> Cast -> Mul(a_scale · w_scale); Cast(int8 weight) · scale),
    not a weight."""
    if len(mul.inputs) != 2:
        return False
    cur = mul.inputs[1 - pos]
    for _ in range(3):
        node = index.producer.get(cur)
        if node is None:
            return False
        if node.op in _RESCALE_SOURCES:
            return node.op != "DynamicQuantizeLinear" or cur != node.outputs[0]
        if node.op not in ("Cast", "Mul", "Reshape", "Identity", "Transpose"):
            return False
        if node.op == "Cast" and node.inputs:
            source = index.graph.weights.get(node.inputs[0])
            if source is not None:
                found = lookup(source.dtype)
                return found is not None and found.family is Family.INTEGER and source.numel > 1
        cur = node.inputs[0]
    return False


def _dequantizes(index: GraphIndex, node: Node, pos: int) -> bool:
    """Whether input ``pos`` of an affine op is the scale or zero point applied to a stored integer
    weight (the op's other input), not the weight."""
    weight_pos = index.affine_operand(node) if index.has_op("Cast") else None
    return weight_pos is not None and weight_pos != pos


def _decoded(index: GraphIndex, name: str) -> bool:
    """Whether an integer tensor reaches a Cast to a float type through layout/selection ops (and the
    integer casts and affine steps of a dequantization by arithmetic)."""
    frontier = [name]
    for _ in range(_DECODE_HOPS):
        nxt: list[str] = []
        for cur in frontier:
            for user, pos in index.users(cur):
                if user.op == "Cast" and user.attrs.int("to") in _FLOAT_CODES:
                    return True
                if user.op in ("CastLike", "DequantizeLinear") and pos == 0:
                    return True
                if user.op in QUANT_WEIGHT_INPUTS and pos not in QUANT_PARAM_INPUTS.get(user.op, _NOT_SHAPE_ONLY):
                    return True  # an integer op computes with it (a quantized embedding into ConvInteger)
                if (user.op in _INT_VIEW_OPS or user.op == "Cast") and pos == 0:
                    nxt.extend(o for o in user.outputs if o)
                elif user.op in AFFINE_OPS and index.affine_operand(user) == pos:
                    nxt.extend(o for o in user.outputs if o)
        frontier = nxt
    return False


def _only_feeds_trig(index: GraphIndex, name: str, limit: int = 64) -> bool:
    """True when every path from ``name`` ends in Cos/Sin after a few elementwise/layout ops."""
    frontier = [name]
    seen = {name}
    reached_trig = False
    while frontier and len(seen) < limit:
        cur = frontier.pop()
        for user, _pos in index.users(cur):
            if user.op in ("Cos", "Sin"):
                reached_trig = True
                continue
            if user.op not in _TRIG_PATH:
                return False
            for o in user.outputs:
                if o and o not in seen:
                    seen.add(o)
                    frontier.append(o)
    return reached_trig and not frontier


def _trig_sources(index: GraphIndex) -> set[str] | None:
    """Every tensor from which a path through _TRIG_PATH ops reaches a Cos/Sin input.

    _only_feeds_trig can only be True for these, so it walks from them alone. Found walking back
    from the Cos/Sin nodes, which needs one producer per tensor: None when some tensor has several
    (not valid ONNX), and then every weight is walked.
    """
    found: set[str] = set()
    if not (index.has_op("Cos") or index.has_op("Sin")):
        return found  # no walk ends in Cos/Sin: _only_feeds_trig is False for every weight
    order = index.order
    # As many named outputs as producers: no name has two. Counting every output first: equal to
    # the producers only when no output is empty either (the usual case), else count the empty ones.
    every = sum(map(len, map(attrgetter("outputs"), order)))
    if every != len(index.producer):
        outputs = list(chain.from_iterable(map(attrgetter("outputs"), order)))
        if every - outputs.count("") != len(index.producer):
            return None
    stack = [x for n in order if n.op in ("Cos", "Sin") for x in n.inputs if x]
    while stack:
        cur = stack.pop()
        if cur in found:
            continue
        found.add(cur)
        node = index.producer.get(cur)
        if node is not None and node.op in _TRIG_PATH:
            stack.extend(x for x in node.inputs if x)
    return found


# Ops that rearrange a value without computing from it: a table is sliced/looked up/broadcast through
# them on its way to its product, and rotate-half is spelled with them (and a Neg).
_TABLE_VIEWS = frozenset({"Slice", "Gather", "Unsqueeze", "Squeeze", "Reshape", "Expand", "Cast", "Identity",
                          "Transpose", "Flatten"})
_ROTATE_VIEWS = _TABLE_VIEWS | {"Neg", "Concat", "Split"}
_ROTATE_NODES = 24  # nodes walked back from rotate_half(x) to x: a Split, two Negs/Unsqueezes, a Concat, a Reshape


def _rotary_products(index: GraphIndex) -> frozenset[int]:
    """The Mul nodes (by id) that apply a stored rotary table: ``x·C + rotate_half(x)·S``, an Add of two
    products of a stored tensor with activations, where one activation is the other's halves swapped
    and one negated (Split/Slice, Neg, Concat and reshapes only). C and S are cos/sin of position times
    inverse frequency that a converter computed and stored (tf2onnx keeps them as plain initializers):
    recognised by how they are used, not by their values."""
    if not index.has_op("Neg"):
        return frozenset()  # no rotate-half without a negation
    found: set[int] = set()
    for add in index.order:
        if add.op != "Add" or len(add.inputs) != 2:
            continue
        left, right = (_table_product(index, x) for x in add.inputs)
        if left is None or right is None:
            continue
        if _rotates(index, left[1], right[1]) or _rotates(index, right[1], left[1]):
            found.update((id(left[0]), id(right[0])))
    return frozenset(found)


def _table_product(index: GraphIndex, name: str) -> tuple[Node, str] | None:
    """(the Mul, its activation operand) when ``name`` is a Mul of an activation with a stored tensor
    (through views of it)."""
    mul = index.producer.get(name)
    if mul is None or mul.op != "Mul" or len(mul.inputs) != 2:
        return None
    for pos in (0, 1):
        act, other = mul.inputs[1 - pos], mul.inputs[pos]
        if index.is_activation(act) and index.stored_through(other, _TABLE_VIEWS) is not None:
            return mul, act
    return None


def _rotates(index: GraphIndex, rotated: str, source: str) -> bool:
    """Whether ``rotated`` is computed from ``source`` alone by views, splits, concats and a Neg
    (rotate-half): every activation the walk back reaches is ``source`` or made by those ops."""
    stack, seen, negated, reached = [rotated], {rotated}, False, False
    while stack:
        node = index.producer.get(stack.pop())
        if node is None or node.op not in _ROTATE_VIEWS or len(seen) > _ROTATE_NODES:
            return False  # another value of the run joins in: not a rearrangement of ``source``
        negated = negated or node.op == "Neg"
        for x in node.inputs if node.op == "Concat" else node.inputs[:1]:
            if x == source:
                reached = True
            elif x and x not in seen and index.is_activation(x):
                seen.add(x)
                stack.append(x)
    return reached and negated


def _computed_value(index: GraphIndex, name: str, t: Tensor, rotary: frozenset[int]) -> bool:
    """Whether a stored float tensor holds a value a converter computed: a rotary cos/sin table (every
    use, through views, is a product ``_rotary_products`` found), an all-zero tensor that only products
    read (a ``zeros_like`` of a select lowered to arithmetic: the product is zero whatever is stored),
    or a tensor holding no finite value (a NaN fill). Values are known for small tensors only
    (Tensor.mask_values): the use decides first, the values only confirm."""
    values = t.mask_values
    if values is not None and not any(map(isfinite, values)):
        return True  # a fill of NaN or infinities (jax2onnx's where(..., nan)): no trained value is one
    zeros = values is not None and not any(values)
    if not rotary and not zeros:
        return False
    frontier, used = [name], False
    for _ in range(_LAYOUT_HOPS):
        nxt: list[str] = []
        for cur in frontier:
            for user, pos in index.users(cur):
                if id(user) in rotary or (zeros and user.op == "Mul"):
                    used = True
                elif user.op in _TABLE_VIEWS and pos == 0:
                    nxt.extend(o for o in user.outputs if o)
                else:
                    return False
        if not nxt:
            return used
        frontier = nxt
    return False

