"""Tensor sequences read back one element at a time, as the Slices they are.

The torch dynamo exporter without its optimizer (``optimize=False``) writes ``torch.split`` and
``chunk`` as ``SplitToSequence`` followed by one ``SequenceAt`` per part: GPT-2's ``c_attn``
split into Q, K and V, nn.MultiheadAttention's packed bias cut in three. ``SequenceAt(
SplitToSequence(x, split, axis), i)`` is ``Slice(x, start_i, start_i + size_i, axis)``, with the
part sizes the graph states (a chunk size, or a list of sizes), so the matchers meet the Slice
they know. Nothing is divided evenly: a split without stated sizes (one part per element, or no
``split`` input) and an index the constants do not give are left as they are.
"""

from __future__ import annotations

import dataclasses

from mhainspect.ir.graph import ModelGraph, Node, Tensor, TensorKind


def _ints(graph: ModelGraph, name: str) -> tuple[int, ...] | None:
    t = graph.weights.get(name)
    return t.int_value if t is not None else None


def _bounds(graph: ModelGraph, split: Node, at: Node) -> tuple[int, int] | None:
    """[start, end) of part ``at`` reads along the split axis, or None when the graph does not say."""
    if len(split.inputs) < 2 or not split.inputs[1] or len(at.inputs) < 2:
        return None
    sizes, index = _ints(graph, split.inputs[1]), _ints(graph, at.inputs[1])
    if sizes is None or index is None or len(index) != 1 or not sizes or any(s <= 0 for s in sizes):
        return None
    i = index[0]
    t = graph.weights.get(split.inputs[1])
    if t is not None and not t.shape:  # a scalar: parts of this size (the last may be shorter)
        return (i * sizes[0], (i + 1) * sizes[0]) if i >= 0 else None
    if i < 0:
        i += len(sizes)
    if not 0 <= i < len(sizes):
        return None
    start = sum(sizes[:i])
    return start, start + sizes[i]


def _const(name: str, value: int) -> Tensor:
    return Tensor(name, (1,), "int64", f"const:{name}", int_value=(value,), is_constant_node=True, kind=TensorKind.CONSTANT)


def as_slices(graph: ModelGraph) -> ModelGraph:
    """``graph`` with every SequenceAt of a SplitToSequence whose part the constants give as a Slice
    (the same graph when there is none)."""
    splits = {n.outputs[0]: n for n in graph.nodes if n.op == "SplitToSequence" and n.outputs and n.outputs[0]}
    if not splits:
        return graph
    nodes: list[Node] = []
    weights = dict(graph.weights)
    for node in graph.nodes:
        split = splits.get(node.inputs[0]) if node.op == "SequenceAt" and node.inputs else None
        bounds = _bounds(graph, split, node) if split is not None and node.outputs else None
        if split is None or bounds is None:
            nodes.append(node)
            continue
        names = [f"{node.name}/{part}" for part in ("starts", "ends", "axes")]
        for name, value in zip(names, (*bounds, split.attrs.int("axis", 0))):
            weights[name] = _const(name, value)
        nodes.append(Node(node.name, "Slice", (split.inputs[0], *names), node.outputs[:1]))
    return dataclasses.replace(graph, nodes=tuple(nodes), weights=weights)
