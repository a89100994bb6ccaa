"""Mutations of the sample models for fuzzing, shared by tests/test_fuzz.py and scripts/fuzz_long.py.

A mutation is a plain tuple (kind, ints...) so hypothesis can shrink it and a failure prints as a
recipe; positions and indices are taken modulo the size of whatever they index.

The contract every mutated input must honour (``check_contract``): ``audit`` returns a
Report, which every renderer can render, or raises ``InputError``; anything else is a bug.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import onnx
from onnx import helper

from mhainspect.errors import InputError
from mhainspect.pipeline import audit
from mhainspect.render.github import render_github
from mhainspect.render.html import render_html
from mhainspect.render.json_render import report_to_json
from mhainspect.render.markdown import render_markdown
from mhainspect.render.sarif import render_sarif
from mhainspect.render.table import render_table
from mhainspect.results import Report

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = tuple(sorted((REPO_ROOT / "sample_models").glob("*.onnx")))

# Values that break arithmetic: signs, zero, one, int32/int64 edges.
ABSURD_INTS = (0, 1, -1, -2, 2, 3, 7, 64, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, -(2**62), -(2**63))
OPS = ("Reshape", "Transpose", "Split", "Slice", "Gather", "Concat", "Softmax", "MatMul", "Gemm", "Einsum", "Mul",
       "Div", "Add", "Shape", "Expand", "Tile", "Unsqueeze", "Squeeze", "Attention", "MultiHeadAttention",
       "GroupQueryAttention", "Range", "ConstantOfShape", "Flatten", "Size", "ReduceMean", "FusedMatMul", "Identity",
       "Cast", "Sqrt", "Reciprocal", "MatMulNBits", "If", "Loop", "Constant", "Where", "Tanh", "DequantizeLinear")
DOMAINS = ("", "com.microsoft", "ai.onnx", "custom")
ATTRS = ("perm", "axis", "axes", "split", "num_outputs", "to", "equation", "transA", "transB", "num_heads",
         "kv_num_heads", "q_num_heads", "keepdims", "start", "end", "allowzero", "starts", "ends", "scale",
         "qkv_hidden_sizes", "value", "value_int", "value_ints", "value_float")
EQUATIONS = ("bhqd,bhkd->bhqk", "bhqk,bhkd->bhqd", "abc,cd->abd", "...,x->...", "->", "a,b", "aa->a", "")
NAMES = ("", "x", "y", "zz", "mask")

Mutation = tuple[Any, ...]
BYTE_KINDS = ("flip", "set", "insert", "delete", "truncate", "varint", "duplicate")
FIELD_KINDS = ("init_dims", "init_dtype", "init_data", "vi_dim", "drop_input", "blank_input", "rename_output",
               "drop_output", "rewire", "add_input", "op_type", "set_attr", "del_attr", "shuffle", "dup_node",
               "del_node")


@cache
def sample_bytes(index: int) -> bytes:
    return SAMPLES[index % len(SAMPLES)].read_bytes()


def sample_model(index: int) -> onnx.ModelProto:
    return onnx.load_from_string(sample_bytes(index))


# ------------------------------------------------------------------------------ byte level


def mutate_bytes(data: bytes, mutations: Sequence[Mutation]) -> bytes:
    buf = bytearray(data)
    for kind, pos, arg in mutations:
        if not buf:
            break
        i = pos % len(buf)
        if kind == "flip":
            buf[i] ^= 1 << (arg % 8)
        elif kind == "set":
            buf[i] = arg % 256
        elif kind == "insert":
            buf[i:i] = bytes([arg % 256]) * (1 + arg % 4)
        elif kind == "delete":
            del buf[i:i + 1 + arg % 64]
        elif kind == "truncate":
            del buf[i:]
        elif kind == "varint":  # a 10-byte varint: lengths and dims near 2**64
            buf[i:i] = b"\xff" * 9 + bytes([arg % 2])
        elif kind == "duplicate":  # repeat a chunk: repeated fields, nodes, initializers
            buf[i:i] = buf[i:i + 1 + arg % 512]
    return bytes(buf)


# ------------------------------------------------------------------------------ protobuf fields


def _pick(seq: Sequence[Any], i: int) -> Any:
    return seq[i % len(seq)] if len(seq) else None


def _attribute(name: str, kind: int, n: int) -> onnx.AttributeProto:
    value: Any
    if kind == 0:
        value = _pick(ABSURD_INTS, n)
    elif kind == 1:
        value = [_pick(ABSURD_INTS, n + k) for k in range(n % 7)]
    elif kind == 2:
        value = _pick(EQUATIONS, n)
    elif kind == 3:
        value = float(_pick(ABSURD_INTS, n)) / 3.0
    else:
        value = [float(x) for x in ABSURD_INTS[: n % 5]]
    if isinstance(value, list):  # an empty list has no type to infer
        kind_of_list = onnx.AttributeProto.FLOATS if kind == 4 else onnx.AttributeProto.INTS
        return helper.make_attribute(name, value, attr_type=kind_of_list)
    return helper.make_attribute(name, value)


def mutate_model(model: onnx.ModelProto, mutations: Sequence[Mutation]) -> onnx.ModelProto:
    """``model`` changed in place by each mutation; returns it."""
    g = model.graph
    for kind, a, b, c in mutations:
        node = _pick(g.node, a)
        if kind == "init_dims" and len(g.initializer):
            t = _pick(g.initializer, a)
            dims = list(t.dims)
            if dims and b % 3:
                dims[b % len(dims)] = _pick(ABSURD_INTS, c)
            else:
                dims.append(_pick(ABSURD_INTS, c))
            del t.dims[:]
            t.dims.extend(dims)
        elif kind == "init_dtype" and len(g.initializer):
            _pick(g.initializer, a).data_type = b % 32
        elif kind == "init_data" and len(g.initializer):
            t = _pick(g.initializer, a)
            if t.raw_data:
                t.raw_data = t.raw_data[: b % (len(t.raw_data) + 1)]
            else:
                t.int64_data.extend(_pick(ABSURD_INTS, c) for _ in range(b % 3))
        elif kind == "vi_dim":
            infos = list(g.input) + list(g.output) + list(g.value_info)
            vi = _pick(infos, a)
            if vi is not None and vi.type.HasField("tensor_type"):
                dims = vi.type.tensor_type.shape.dim
                d = dims[b % len(dims)] if len(dims) and b % 4 else dims.add()
                if c % 3:
                    d.dim_value = _pick(ABSURD_INTS, c)
                else:
                    d.dim_param = _pick(("batch", "seq", "", "x" * 300), c)
        elif node is None:
            continue
        elif kind == "drop_input" and len(node.input):
            del node.input[b % len(node.input)]
        elif kind == "blank_input" and len(node.input):
            node.input[b % len(node.input)] = ""
        elif kind == "rename_output" and len(node.output):
            other = _pick(g.node, c)
            names = list(other.output) + list(other.input) + list(NAMES) + [i.name for i in g.initializer[:3]]
            node.output[b % len(node.output)] = _pick(names, c)
        elif kind == "drop_output" and len(node.output):
            del node.output[b % len(node.output)]
        elif kind == "rewire" and len(node.input):
            other = _pick(g.node, c)
            if len(other.output):
                node.input[b % len(node.input)] = _pick(other.output, b)
        elif kind == "add_input":
            names = [i.name for i in g.initializer] + [o for n in g.node for o in n.output][:50] + list(NAMES)
            node.input.append(_pick(names, b + c))
        elif kind == "op_type":
            node.op_type = _pick(OPS, b)
            node.domain = _pick(DOMAINS, c)
        elif kind == "set_attr":
            name = _pick(ATTRS, b)
            kept = [x for x in node.attribute if x.name != name]
            del node.attribute[:]
            node.attribute.extend(kept)
            node.attribute.append(_attribute(name, c % 5, c // 5))
        elif kind == "del_attr" and len(node.attribute):
            del node.attribute[b % len(node.attribute)]
        elif kind == "shuffle":
            nodes = list(g.node)
            random.Random(b).shuffle(nodes)
            del g.node[:]
            g.node.extend(nodes)
        elif kind == "dup_node":
            g.node.append(node)
        elif kind == "del_node":
            del g.node[a % len(g.node)]
    return model


# ------------------------------------------------------------------------------ the contract

_TYPE_STRING = 9  # FieldDescriptor.TYPE_STRING


def has_non_utf8_string(message: Any, depth: int = 0) -> bool:
    """Whether a string field anywhere in ``message`` holds bytes that are not UTF-8.

    onnx.proto is proto2: protobuf parses such a field without complaint and hands it out as
    ``bytes`` instead of ``str`` (mhainspect.frontends.onnx.loader then fails with a TypeError; see
    test_hostile_inputs.py::test_non_utf8_string_field_is_an_input_error).
    """
    if depth > 200:
        return False
    for field, value in message.ListFields():
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        values = value if repeated else [value]
        if field.type == _TYPE_STRING:
            if any(isinstance(v, bytes) for v in values):
                return True
        elif field.message_type is not None and any(has_non_utf8_string(v, depth + 1) for v in values):
            return True  # onnx.proto has no map fields: every message value is a message
    return False


def non_utf8_model(data: bytes) -> bool:
    try:
        return has_non_utf8_string(onnx.load_from_string(data))
    except Exception:  # does not parse at all: not this case
        return False



def render_all(report: Report) -> None:
    report_to_json(report)
    render_table(report, width=100, color=False, verbose=True)
    render_markdown([report])
    render_sarif([report])
    render_github([report])
    render_html([report])


def check_contract(path: Path) -> Report | None:
    """The Report for ``path`` (rendered every way), or None when it raised InputError."""
    try:
        report = audit(path)
    except InputError as exc:
        assert str(exc).strip(), "InputError without a message"  # the CLI prints it on one line (cli.one_line)
        return None
    render_all(report)
    return report
