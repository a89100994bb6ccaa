"""Element types: one canonical name per type, its size in bits, and the names each file format uses.

Every loader maps its own codes here (ONNX TensorProto.DataType numbers, safetensors header
strings, torch dtype names, ScalarType numbers and storage classes, GGML type ids), so the rest of
the tool compares one vocabulary.
Sizes are bits per logical element; a block-quantized type (GGML Q4_K, ...) stores a block of
``block_size`` elements in ``block_bytes`` bytes, so its bits per element is a fraction.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from functools import lru_cache


class Family(str, Enum):
    """What kind of numbers a type holds: decides whether a tensor can be a parameter."""

    FLOAT = "float"
    INTEGER = "integer"  # signed or unsigned integers (quantized weights, indices, shapes)
    QUANTIZED_BLOCK = "quantized_block"  # GGML block types: scales and values in one blob
    OTHER = "other"  # bool, string, complex


@dataclass(frozen=True)
class DType:
    """One element type. ``name`` is the canonical spelling used in reports and JSON."""

    name: str
    family: Family
    block_size: int = 1  # elements per stored block
    block_bytes: Fraction = Fraction(0)  # bytes per stored block

    @property
    def bits_per_element(self) -> Fraction:
        return self.block_bytes * 8 / self.block_size

    @property
    def is_float(self) -> bool:
        return self.family is Family.FLOAT

    def nbytes(self, numel: int) -> int:
        """Bytes that ``numel`` elements occupy as stored (packed sub-byte types rounded up)."""
        blocks = -(-numel // self.block_size)
        whole = blocks * self.block_bytes
        return int(-(-whole.numerator // whole.denominator))


def _plain(name: str, family: Family, bits: int) -> DType:
    return DType(name, family, 1, Fraction(bits, 8))


_PLAIN = [
    _plain("float64", Family.FLOAT, 64), _plain("float32", Family.FLOAT, 32), _plain("float16", Family.FLOAT, 16),
    _plain("bfloat16", Family.FLOAT, 16), _plain("float8e4m3fn", Family.FLOAT, 8),
    _plain("float8e4m3fnuz", Family.FLOAT, 8), _plain("float8e5m2", Family.FLOAT, 8),
    _plain("float8e5m2fnuz", Family.FLOAT, 8), _plain("float8e8m0", Family.FLOAT, 8),
    _plain("float4e2m1", Family.FLOAT, 4),
    _plain("int64", Family.INTEGER, 64), _plain("uint64", Family.INTEGER, 64), _plain("int32", Family.INTEGER, 32),
    _plain("uint32", Family.INTEGER, 32), _plain("int16", Family.INTEGER, 16), _plain("uint16", Family.INTEGER, 16),
    _plain("int8", Family.INTEGER, 8), _plain("uint8", Family.INTEGER, 8), _plain("int4", Family.INTEGER, 4),
    _plain("uint4", Family.INTEGER, 4), _plain("int2", Family.INTEGER, 2), _plain("uint2", Family.INTEGER, 2),
    _plain("bool", Family.OTHER, 8), _plain("complex64", Family.OTHER, 64), _plain("complex128", Family.OTHER, 128),
    DType("string", Family.OTHER, 1, Fraction(0)),
]

# GGML block types: (elements per block, bytes per block), as ggml.h / gguf-py define them.
_GGML_BLOCKS = {
    "q4_0": (32, 18), "q4_1": (32, 20), "q5_0": (32, 22), "q5_1": (32, 24), "q8_0": (32, 34), "q8_1": (32, 36),
    "q2_k": (256, 84), "q3_k": (256, 110), "q4_k": (256, 144), "q5_k": (256, 176), "q6_k": (256, 210),
    "q8_k": (256, 292), "iq2_xxs": (256, 66), "iq2_xs": (256, 74), "iq3_xxs": (256, 98), "iq1_s": (256, 50),
    "iq4_nl": (32, 18), "iq3_s": (256, 110), "iq2_s": (256, 82), "iq4_xs": (256, 136), "iq1_m": (256, 56),
    "tq1_0": (256, 54), "tq2_0": (256, 66), "mxfp4": (32, 17), "nvfp4": (64, 36), "q1_0": (128, 18),
}

_BY_NAME: dict[str, DType] = {d.name: d for d in _PLAIN}
_BY_NAME.update({name: DType(name, Family.QUANTIZED_BLOCK, size, Fraction(nbytes))
                 for name, (size, nbytes) in _GGML_BLOCKS.items()})

# ONNX TensorProto.DataType numbers.
ONNX_CODES: dict[int, str] = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string", 9: "bool",
    10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 14: "complex64", 15: "complex128", 16: "bfloat16",
    17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4",
    23: "float4e2m1", 24: "float8e8m0", 25: "uint2", 26: "int2",
}
ONNX_INTEGER_CODES = frozenset(code for code, name in ONNX_CODES.items() if _BY_NAME[name].family is Family.INTEGER
                               and _BY_NAME[name].block_bytes >= 1)
ONNX_FLOAT_CODES = frozenset(code for code in (1, 10, 11, 16))  # the types whose scalars are read as floats

# GGML type ids (ggml.h ``enum ggml_type``) as GGUF tensor infos store them; ids 4, 5 and 31-33 were
# removed or never written to files.
GGML_CODES: dict[int, str] = {
    0: "float32", 1: "float16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 9: "q8_1", 10: "q2_k",
    11: "q3_k", 12: "q4_k", 13: "q5_k", 14: "q6_k", 15: "q8_k", 16: "iq2_xxs", 17: "iq2_xs", 18: "iq3_xxs",
    19: "iq1_s", 20: "iq4_nl", 21: "iq3_s", 22: "iq2_s", 23: "iq4_xs", 24: "int8", 25: "int16", 26: "int32",
    27: "int64", 28: "float64", 29: "iq1_m", 30: "bfloat16", 34: "tq1_0", 35: "tq2_0", 39: "mxfp4", 40: "nvfp4",
    41: "q1_0",
}

# torch ScalarType numbers (torch/_export/serde/schema.py), as torch.export archives store a tensor's
# dtype -> torch dtype names (canonical() reads them).
TORCH_SCALAR_TYPES: dict[int, str] = {
    1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32", 8: "float64",
    9: "complex32", 10: "complex64", 11: "complex128", 12: "bool", 13: "bfloat16", 28: "uint16",
    29: "float8_e4m3fn", 30: "float8_e5m2", 31: "float8_e4m3fnuz", 32: "float8_e5m2fnuz", 33: "float8_e8m0fnu",
    34: "uint32", 35: "uint64",
}
# torch's storage classes (torch.storage._dtype_to_storage_type_map), as torch.save pickles name a
# tensor's storage -> dtype names. An untyped storage's dtype is the argument of _rebuild_tensor_v3.
TORCH_STORAGE_TYPES: dict[str, str] = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16", "LongStorage": "int64",
    "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
    "BoolStorage": "bool", "BFloat16Storage": "bfloat16", "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64", "QInt8Storage": "qint8", "QInt32Storage": "qint32",
    "QUInt8Storage": "quint8", "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4",
    "Float8_e4m3fnStorage": "float8_e4m3fn", "Float8_e5m2Storage": "float8_e5m2", "UntypedStorage": "uint8",
}

# Other spellings of the same types: safetensors header codes, torch dtype names, GGML scalar types.
_ALIASES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "F8_E4M3": "float8e4m3fn",
    "F8_E5M2": "float8e5m2", "F8_E8M0": "float8e8m0", "F4": "float4e2m1", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8", "BOOL": "bool",
    "float8_e4m3fn": "float8e4m3fn", "float8_e4m3fnuz": "float8e4m3fnuz", "float8_e5m2": "float8e5m2",
    "float8_e5m2fnuz": "float8e5m2fnuz", "float8_e8m0fnu": "float8e8m0", "float4_e2m1fn_x2": "float4e2m1",
    "half": "float16", "float": "float32", "double": "float64", "long": "int64", "int": "int32", "short": "int16",
    "f32": "float32", "f16": "float16", "f64": "float64", "bf16": "bfloat16", "i8": "int8", "i16": "int16",
    "i32": "int32", "i64": "int64",
    # what people type for an option (--weight-dtype, --kv-dtype, calc --dtype): fp8 is e4m3, as inference engines mean it
    "fp64": "float64", "fp32": "float32", "fp16": "float16", "fp8": "float8e4m3fn", "fp4": "float4e2m1",
}


def lookup(name: str) -> DType | None:
    """The DType for any known spelling (canonical, safetensors, torch, GGML); None when unknown."""
    found = _BY_NAME.get(name)  # the canonical spelling: what every caller after a loader passes
    if found is not None:
        return found
    key = name.removeprefix("torch.")
    found = _BY_NAME.get(key) or _BY_NAME.get(_ALIASES.get(key, ""))
    if found is None:
        lowered = key.lower()
        found = _BY_NAME.get(lowered) or _BY_NAME.get(_ALIASES.get(lowered, ""))
    return found


def canonical(name: str) -> str:
    """The canonical spelling of ``name`` (unknown names are returned lower-cased, as they are)."""
    found = lookup(name)
    return found.name if found is not None else name.lower()


def onnx_name(code: int) -> str:
    """The canonical name of an ONNX element type number ("type{N}" for numbers onnx does not define)."""
    return ONNX_CODES.get(code, f"type{code}")


def ggml_name(code: int) -> str | None:
    """The canonical name of a GGML type id; None for ids ggml does not define."""
    return GGML_CODES.get(code)


@lru_cache(maxsize=1024)  # asked once per stored tensor (hundreds of thousands), of a handful of names
def is_float(name: str) -> bool:
    found = lookup(name)
    return found is not None and found.family is Family.FLOAT


@lru_cache(maxsize=1024)
def is_block_quantized(name: str) -> bool:
    """A GGML block type (Q4_K, IQ2_XS, ...): scales and values in one blob, a quantized weight."""
    found = lookup(name)
    return found is not None and found.family is Family.QUANTIZED_BLOCK


def is_integer(name: str) -> bool:
    found = lookup(name)
    return found is not None and found.family is Family.INTEGER


# The struct code of each dtype whose elements Python's struct module unpacks (little-endian in every
# file format read here): the one table the readers of small stored values share.
STRUCT_CODES: dict[str, str] = {
    "float64": "d", "float32": "f", "float16": "e", "int64": "q", "int32": "i", "int16": "h", "int8": "b",
    "uint64": "Q", "uint32": "I", "uint16": "H", "uint8": "B", "bool": "?",
}
# The integer ones: what a stored shape or a quantization state is written in.
INTEGER_STRUCT_CODES: dict[str, str] = {k: v for k, v in STRUCT_CODES.items() if v in "bBhHiIqQ"}


def nbytes(name: str, numel: int) -> int | None:
    """Bytes ``numel`` elements of type ``name`` occupy as stored; None for an unknown or unsized type."""
    found = lookup(name)
    if found is None or found.block_bytes == 0:
        return None
    return found.nbytes(numel)


@lru_cache(maxsize=1024)
def byte_rate(name: str) -> tuple[int, int, int] | None:
    """(elements per block, bytes per block as numerator, denominator) of ``name``; None: no size."""
    found = lookup(name)
    if found is None or found.block_bytes == 0:
        return None
    return found.block_size, found.block_bytes.numerator, found.block_bytes.denominator
