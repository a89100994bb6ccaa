"""The graph driver: every anchor of a graph tried against the patterns, in one explicit order.

``PATTERNS`` is the order (as a rewriter holds its rules in a rule set): for each anchor node, in
graph order, the patterns that anchor on its op are tried one after the other; the first that
returns a block wins, and a pattern that claims the anchor but fails ends the search with its
``Miss``. A pattern that does not recognise the anchor (an unclaimed miss: "no Q·Kᵀ before this
Softmax") hands it to the next; when none claims it, the first pattern's miss is reported.
``VIEWS`` read anchors spelled with other ops (a softmax written out) as the node the patterns match.

Adding a pattern: one module in ``matchers/patterns/`` exposing a ``Pattern``, one line here.
Front ends call ``graph_blocks`` (or ``find_blocks``), never a pattern module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from mhainspect.ir.dataflow import GraphIndex
from mhainspect.ir.graph import Node
from mhainspect.matchers.block import BlockBuilder
from mhainspect.matchers.gate_graph import graph_gate
from mhainspect.matchers.identity import merge_module, modules
from mhainspect.matchers.patterns import AnchorView, Pattern, additive, decomposed, fused, written_softmax
from mhainspect.matchers.sharing import count_shared_once
from mhainspect.results import AttentionBlock, Miss

# The order patterns are tried in on an anchor they share: Q·Kᵀ scores first, additive scores after.
PATTERNS: tuple[Pattern, ...] = (
    decomposed.PATTERN,  # softmax(Q·Kᵀ)·V written out: MatMul / Einsum / FusedMatMul around a Softmax
    additive.PATTERN,  # softmax(vᵀ·tanh(W·q + U·k))·V: a Softmax with no Q·Kᵀ behind it
    fused.PATTERN,  # one attention operator: ONNX Attention, com.microsoft (Group/MultiHead)Attention
)
VIEWS: tuple[AnchorView, ...] = (
    written_softmax.VIEW,  # Exp(x - ReduceLogSumExp(x)), Exp(x) / ReduceSum(Exp(x)): a Softmax
)


def _by_op(patterns: Iterable[Pattern]) -> dict[str, tuple[Pattern, ...]]:
    table: dict[str, list[Pattern]] = {}
    for p in patterns:
        for op in sorted(p.anchors):
            table.setdefault(op, []).append(p)
    return {op: tuple(ps) for op, ps in table.items()}


_PATTERNS_BY_OP = _by_op(PATTERNS)
_VIEWS_BY_OP = {op: v for v in VIEWS for op in v.ops}


def match_anchor(index: GraphIndex, node: Node, patterns: tuple[Pattern, ...]) -> BlockBuilder | Miss:
    """The first block ``patterns`` find at ``node``, in order; else the miss of the first pattern
    that claims the anchor, else the first pattern's miss."""
    if not node.inputs or not node.inputs[0] or not node.outputs or not node.outputs[0]:
        return Miss(patterns[0].name, node.name, f"{node.op} without a first input or output")
    first: Miss | None = None
    for p in patterns:
        result = p.match(index, node)
        if isinstance(result, BlockBuilder) or result.claimed:
            return result
        first = first or result
    assert first is not None  # patterns is never empty
    return first


def find_blocks(index: GraphIndex, patterns: tuple[Pattern, ...] = PATTERNS,
                views: tuple[AnchorView, ...] = VIEWS) -> tuple[list[BlockBuilder], list[Miss]]:
    """A builder or a miss for every anchor of the graph, in graph order (one per anchor)."""
    by_op = _PATTERNS_BY_OP if patterns is PATTERNS else _by_op(patterns)
    views_by_op = _VIEWS_BY_OP if views is VIEWS else {op: v for v in views for op in v.ops}
    anchor_ops = by_op.keys() | views_by_op.keys()
    builders: list[BlockBuilder] = []
    misses: list[Miss] = []
    # Anchors are rare (one Softmax or fused op per block): the op name is tested first.
    for node in [n for n in index.order if n.op in anchor_ops]:
        view = views_by_op.get(node.op)
        if view is not None:
            read = view.read(index, node)
            if read is None and node.op not in by_op:
                continue
            node = read or node
        mine = tuple(p for p in by_op.get(node.op, ()) if p.accepts(node))
        if not mine:
            continue
        result = match_anchor(index, node, mine)
        if isinstance(result, Miss):
            misses.append(result)
        else:
            builders.append(result)
    return builders, misses


@dataclasses.dataclass(frozen=True)
class GraphMatch:
    """What the patterns found in a graph: its blocks, its near misses, and the stored tensors the
    blocks read that a converter computed (a folded score scale or mask): no parameters."""

    blocks: tuple[AttentionBlock, ...]
    misses: tuple[Miss, ...]
    constants: frozenset[str]


def graph_blocks(index: GraphIndex) -> GraphMatch:
    """The attention blocks of a graph and its near misses: anchors matched, the anchors of one module
    (same weights) merged into one block, a weight several blocks use counted in the first."""
    builders, misses = find_blocks(index)
    taken: set[str] = set()
    blocks: list[AttentionBlock] = []
    extras_seen: set[str] = set()
    constants: set[str] = set()
    # A sparse-attention indexer chooses its keys with a TopK: a graph without one imports none of
    # the indexer's code (nor the name grouping it shares with weight-only sources).
    add_indexer: Callable[[GraphIndex, Node, AttentionBlock], AttentionBlock] | None = None
    if index.has_op("TopK"):
        from mhainspect.matchers.indexer import graph_indexer

        add_indexer = graph_indexer
    for group in modules(index, builders):
        b, applications = merge_module(index, group)
        constants |= b.constants
        # A shared table (T5 computes its position bias once and reuses it) counts in its first block.
        for name in list(b.extras):
            if name in extras_seen:
                del b.extras[name]
            extras_seen.add(name)
        block = b.build(taken)
        if add_indexer is not None:
            block = add_indexer(index, b.anchor, block)
        block = graph_gate(index, block)
        blocks.append(block if applications == 1 else dataclasses.replace(block, applications=applications))
    return GraphMatch(tuple(count_shared_once(blocks)), tuple(misses), frozenset(constants))
