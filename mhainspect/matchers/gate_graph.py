"""An output gate in a graph (gated attention exported: the attention's result times
Sigmoid(x W) before O, AFMoE's or HunYuan-V4's ``gate_proj`` traced): what ``matchers.gate`` finds
by name in a checkpoint, found here by the dataflow. Walking back from O's input to the product
with V, a ``Mul`` whose other operand is a ``Sigmoid`` of a product of the block's input with a stored
matrix (none of the block's own) gates the result; that matrix and its bias are the block's
``params.gate`` when its width is O's input width (one gate per value) or the heads (one per head)."""

from __future__ import annotations

import dataclasses

from mhainspect.ir.dataflow import GraphIndex
from mhainspect.ir.graph import Node
from mhainspect.results import AttentionBlock, Evidence, EvidenceSource, projection_tensor_names

_VIEWS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Cast", "Identity", "Flatten", "Expand"})
_MAX_HOPS = 16


def graph_gate(index: GraphIndex, block: AttentionBlock) -> AttentionBlock:
    """The block with its output gate counted (``params.gate``), or as it is without one."""
    if block.params.gate or not index.has_op("Sigmoid"):
        return block
    o = next((p for p in block.projections if p.role == "o" and p.in_features), None)
    if o is None:
        return block
    by_name = index.by_name  # built once with the index, not per block
    node = by_name.get(o.node)
    if node is None:
        return block
    own = set(projection_tensor_names(block))
    current = next((i for i in node.inputs if i and index.is_activation(i)), None)
    for _ in range(_MAX_HOPS):
        producer = index.producer.get(current) if current else None
        if producer is None:
            return block
        if producer.op == "Mul":
            found = _gated(index, producer, own, o.in_features, block.num_heads)
            if found is not None:
                params, detail = found
                return dataclasses.replace(
                    block, params=dataclasses.replace(block.params, gate=params, total=block.params.total + params),
                    evidence=block.evidence + (Evidence("gate", params, EvidenceSource.WEIGHT_SHAPE, detail),))
            current = next((i for i in producer.inputs if i and index.is_activation(i)), None)
        elif producer.op in _VIEWS:
            current = producer.inputs[0]
        else:
            return block
    return block


def _gated(index: GraphIndex, mul: Node, own: set[str], o_in: int | None, heads: int | None
           ) -> tuple[int, str] | None:
    """(parameters, what says so) when one operand of ``mul`` is Sigmoid(x W [+ b]) with a stored W of
    the gate's widths that is none of the block's own weights."""
    for operand in mul.inputs:
        cur, hops = operand, 0
        node = index.producer.get(cur)
        while node is not None and node.op in _VIEWS and hops < 4:
            cur, hops = node.inputs[0], hops + 1
            node = index.producer.get(cur)
        if node is None or node.op != "Sigmoid":
            continue
        product = index.producer.get(node.inputs[0])
        bias = 0
        if product is not None and product.op == "Add":
            stored = [i for i in product.inputs if i and not index.is_activation(i)]
            ref = index.weight(stored[0]) if stored else None
            bias = ref.tensor.numel if ref is not None and len(ref.shape) == 1 else 0
            product = next((index.producer.get(i) for i in product.inputs if i and index.is_activation(i)), None)
        if product is None or product.op != "MatMul":
            continue
        weight = next((r for i in product.inputs if i and not index.is_activation(i)
                       and (r := index.weight(i)) is not None and len(r.shape) == 2), None)
        if weight is None or weight.tensor.name in own:
            continue
        width = weight.shape[0] if weight.transposed else weight.shape[1]
        if width not in (o_in, heads):
            continue
        return weight.tensor.numel + bias, (f"{mul.name}: the attention's result times Sigmoid of "
                                            f"{weight.tensor.name} {list(weight.shape)} ({width} wide): an output gate, "
                                            "in the total")
    return None
