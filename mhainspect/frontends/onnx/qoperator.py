"""QOperator graphs in QDQ form: each QLinear op as DequantizeLinear -> float op -> QuantizeLinear.

onnxruntime's static quantizer in QOperator format (and tf2onnx, TFLite converters) writes one
integer op per float op, its scales and zero points as extra inputs: QLinearMatMul, QLinearConv,
QGemm, QLinearAdd, QLinearMul, QLinearSoftmax, QLinearConcat, ... The same model in QDQ format
is the float graph with DequantizeLinear before and QuantizeLinear after each op, which every walk
already looks through (dataflow.VALUE_PRESERVING_OPS) and the accounting already reads (a
DequantizeLinear's input 0 is a weight, its scale and zero point are not). So instead of teaching
each matcher every QLinear op's input layout, a graph that has them is rewritten into that form
once, from this one table; the float node keeps the QLinear node's name (evidence names the node
of the file), the original output names stay the op's quantized outputs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from operator import attrgetter

from mhainspect.ir.graph import Attrs, ModelGraph, Node

# (value, scale, zero point) input positions of one quantized operand; scale/zero point may be absent
# (QLinearConv's int32 bias: its scale is the product of two others, stated nowhere).
Operand = tuple[int, int | None, int | None]


@dataclass(frozen=True)
class QLinearOp:
    """A quantized op as its float op: its quantized operands in the float op's input order, and
    the (scale, zero point) of its output (None: the op's output is float already)."""

    float_op: str
    operands: tuple[Operand, ...]
    output: tuple[int, int | None] | None


_UNARY = ((0, 1, 2),)
_BINARY = ((0, 1, 2), (3, 4, 5))
QLINEAR_OPS: dict[str, QLinearOp] = {
    "QLinearMatMul": QLinearOp("MatMul", _BINARY, (6, 7)),
    "QLinearConv": QLinearOp("Conv", _BINARY + ((8, None, None),), (6, 7)),
    "QGemm": QLinearOp("Gemm", _BINARY + ((6, None, None),), (7, 8)),
    "QLinearAdd": QLinearOp("Add", _BINARY, (6, 7)),
    "QLinearMul": QLinearOp("Mul", _BINARY, (6, 7)),
    "QLinearSoftmax": QLinearOp("Softmax", _UNARY, (3, 4)),
    "QLinearSigmoid": QLinearOp("Sigmoid", _UNARY, (3, 4)),
    "QLinearLeakyRelu": QLinearOp("LeakyRelu", _UNARY, (3, 4)),
    "QLinearAveragePool": QLinearOp("AveragePool", _UNARY, (3, 4)),
    "QLinearGlobalAveragePool": QLinearOp("GlobalAveragePool", _UNARY, (3, 4)),
    "QLinearReduceMean": QLinearOp("ReduceMean", _UNARY, (3, 4)),
    "QLinearWhere": QLinearOp("Where", ((0, None, None), (1, 2, 3), (4, 5, 6)), (7, 8)),
}
_ATTRS_OF_THE_INTEGER_OP = frozenset({"opset", "channels_last"})  # QLinearSoftmax's opset, layout hints
_QLINEAR_NAMES = frozenset(QLINEAR_OPS) | {"QLinearConcat"}  # every op _spec lowers


def _concat(node: Node) -> QLinearOp:
    """QLinearConcat: Y scale and zero point first, then one (X, scale, zero point) per input."""
    n = (len(node.inputs) - 2) // 3
    return QLinearOp("Concat", tuple((2 + 3 * i, 3 + 3 * i, 4 + 3 * i) for i in range(n)), (0, 1))


def _spec(node: Node) -> QLinearOp | None:
    if node.op == "QLinearConcat":
        return _concat(node)
    return QLINEAR_OPS.get(node.op)


def _at(node: Node, pos: int | None) -> str:
    return node.inputs[pos] if pos is not None and pos < len(node.inputs) else ""


def _lower(node: Node, spec: QLinearOp) -> list[Node]:
    out: list[Node] = []
    float_inputs: list[str] = []
    for i, (value, scale, zero) in enumerate(spec.operands):
        x = _at(node, value)
        if not x:
            float_inputs.append("")
            continue
        if scale is None and zero is None and spec.float_op == "Where" and i == 0:
            float_inputs.append(x)  # the condition is not quantized
            continue
        dq = f"{x}::dq:{node.name}:{i}"
        out.append(Node(f"{node.name}/DequantizeLinear_{i}", "DequantizeLinear",
                        tuple(t for t in (x, _at(node, scale), _at(node, zero)) if t) if scale is not None else (x,),
                        (dq,), scope=node.scope))
        float_inputs.append(dq)
    while float_inputs and not float_inputs[-1]:
        float_inputs.pop()
    attrs = Attrs({k: v for k, v in node.attrs.items() if k not in _ATTRS_OF_THE_INTEGER_OP})
    y = node.outputs[0] if node.outputs else ""
    if spec.output is None or not _at(node, spec.output[0]) or not y:
        out.append(Node(node.name, spec.float_op, tuple(float_inputs), node.outputs, attrs, node.scope))
        return out
    fy = f"{y}::float"
    out.append(Node(node.name, spec.float_op, tuple(float_inputs), (fy,) + node.outputs[1:], attrs, node.scope))
    scale, zero = spec.output
    out.append(Node(f"{node.name}/QuantizeLinear", "QuantizeLinear",
                    tuple(t for t in (fy, _at(node, scale), _at(node, zero)) if t), (y,), scope=node.scope))
    return out


def as_qdq(graph: ModelGraph) -> ModelGraph:
    """``graph`` with every QLinear op in QDQ form (the same graph when it has none)."""
    if _QLINEAR_NAMES.isdisjoint(map(attrgetter("op"), graph.nodes)):  # the usual case: one pass in C
        return graph
    specs = [_spec(n) for n in graph.nodes]
    nodes: list[Node] = []
    for node, spec in zip(graph.nodes, specs):
        if spec is None or len(node.inputs) <= max(v for v, _, _ in spec.operands[:1]):
            nodes.append(node)
        else:
            nodes.extend(_lower(node, spec))
    return dataclasses.replace(graph, nodes=tuple(nodes))
