"""Graph patterns, one module per family. What a pattern is lives here; the order in which the
driver tries them, in ``mhainspect.matchers.graph`` (its registry).

A ``Pattern`` names the ops it anchors on and a match function that returns a ``BlockBuilder`` or
a ``Miss`` (the reason and the node where the match failed). A miss with ``claimed=False`` says the
anchor is not this pattern's at all, so the next pattern in the order tries it. An ``AnchorView``
reads an anchor written another way as the node the patterns match (a softmax written out with
Exp and ReduceSum as the Softmax it computes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mhainspect.ir.dataflow import GraphIndex
from mhainspect.ir.graph import Node
from mhainspect.matchers.block import BlockBuilder
from mhainspect.results import Miss

MatchFn = Callable[[GraphIndex, Node], "BlockBuilder | Miss"]


def _any_node(node: Node) -> bool:
    return True


@dataclass(frozen=True)
class Pattern:
    """One way attention is written in a graph.

    ``name``: the matcher it reports (a ``Matcher`` value); ``anchors``: the ops a node must have for
    ``match`` to be tried on it; ``accepts``: a further cheap test of the anchor (its domain)."""

    name: str
    anchors: frozenset[str]
    match: MatchFn
    accepts: Callable[[Node], bool] = _any_node


@dataclass(frozen=True)
class AnchorView:
    """An anchor spelled with other ops: ``read`` gives the node the patterns match in its place
    (named as the anchor), or None when the node is not one."""

    name: str
    ops: frozenset[str]
    read: Callable[[GraphIndex, Node], Node | None]
