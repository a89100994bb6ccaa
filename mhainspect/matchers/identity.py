"""Blocks are identified by the weights they use: the anchors that reach one attention module (the
two branches of an If, the applications of a shared layer) are grouped by the weights they resolve
and merged into one builder, with how many times one run applies it."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from mhainspect.ir.dataflow import GraphIndex
from mhainspect.matchers.block import BlockBuilder, RoleInput
from mhainspect.results import Evidence

_BODY = r"/body(\d+)/"  # the loader names subgraph nodes "{parent}/body{i}/{name}"


@dataclasses.dataclass(frozen=True)
class ModuleIdentity:
    """What identifies the attention module a matcher reached: the weights its block uses.

    ``key``: the role and storage of its Q weight (else its O weight), which every application of
    the module reads; ``weights``: (role, storage) of each Q/K/V/O weight the anchor resolved. Two
    anchors are one module (reached from two branches of an If, or applied several times: ALBERT)
    when they have the same key and agree on every weight both resolved (an If's with-past branch
    reads the cross-attention K/V from the cache: no weight to compare). Modules that share only
    some weights (one Linear as two layers' Q, cross-layer K/V) are distinct modules, whose shared
    weights count_shared_once counts in the first."""

    key: tuple[str, str]
    weights: tuple[tuple[str, str], ...]

    def agrees(self, used: Mapping[str, str]) -> bool:
        """Whether every weight both resolved is the same storage."""
        return all(used.get(role, storage) == storage for role, storage in self.weights)


def _role_identity(index: GraphIndex, r: RoleInput) -> str | None:
    """The storage a Q/K/V role reads (the part of it, for a part of a packed weight; the float
    weight a quantized copy was made from, GraphIndex.weight_identity); None when unresolved."""
    if r.traced is not None:
        return index.weight_identity(r.traced.hit.weight)
    if r.fused_weight is not None:
        t = index.graph.weights.get(r.fused_weight)
        return t.storage_key if t is not None else f"name:{r.fused_weight}"
    return None


def module_identity(index: GraphIndex, b: BlockBuilder) -> ModuleIdentity | None:
    """The module identity of a builder (ModuleIdentity). None when neither Q nor O resolved to a
    weight: such a block stands alone (K/V alone do not identify a module: layers may share a K/V
    projection and stay distinct modules)."""
    weights = [(role, key) for role in ("q", "k", "v") if (r := b.roles.get(role)) is not None
               and (key := _role_identity(index, r)) is not None]
    if b.output is not None:
        weights.append(("o", index.weight_identity(b.output.weight)))
    used = dict(weights)
    role = "q" if "q" in used else "o" if "o" in used else None
    return None if role is None else ModuleIdentity((role, used[role]), tuple(weights))


def _identity_node(b: BlockBuilder) -> str:
    """The node that applies the weight module_identity names (its Q projection, else O)."""
    q = b.roles.get("q")
    if q is not None and q.traced is not None:
        return q.traced.hit.node.name
    if q is not None and q.fused_weight is not None:
        return q.fused_node or b.anchor.name
    return b.output.node.name if b.output is not None else b.anchor.name


def modules(index: GraphIndex, builders: list[BlockBuilder]) -> list[list[BlockBuilder]]:
    """The builders grouped by module identity (ModuleIdentity), groups in order of their first anchor.

    A builder joins the first group of its key whose weights agree with its own (the weights of all
    the group's anchors); one that agrees with none starts a group: two modules sharing their Q
    are two blocks. Anchors that reach the weight through the same node are not one module applied
    twice but two attention maps over one projection (two Softmaxes over slices of one Q, as
    differential attention has): they stay separate blocks, as before."""
    groups: list[list[BlockBuilder]] = []
    used: list[dict[str, str]] = []  # per group: role -> storage of each weight its anchors resolved
    nodes: list[set[str]] = []  # per group: the nodes that apply its key weight
    by_key: dict[tuple[str, str], list[int]] = {}
    for b in builders:
        identity = module_identity(index, b)
        node = _identity_node(b)
        mine = by_key.setdefault(identity.key, []) if identity is not None else []
        at = next((i for i in mine if identity is not None and identity.agrees(used[i])), None)
        if at is None or node in nodes[at]:
            if at is None:
                mine.append(len(groups))  # a module of its own, which later applications may join
            at = len(groups)
            groups.append([])
            used.append({})
            nodes.append(set())
        groups[at].append(b)
        nodes[at].add(node)
        for role, storage in identity.weights if identity is not None else ():
            used[at].setdefault(role, storage)
    return groups


def _branch_choices(index: GraphIndex, node_name: str) -> dict[str, int]:
    """{If node: branch} of every If branch that holds the node (the loader names subgraph nodes
    "{parent}/body{i}/{name}"; body0 of an If is then_branch, body1 else_branch)."""
    choices: dict[str, int] = {}
    for m in re.finditer(_BODY, node_name):
        parent = index.by_name.get(node_name[:m.start()])
        if parent is not None and parent.op == "If":
            choices[parent.name] = int(m.group(1))
    return choices


def _compatible(a: dict[str, int], b: dict[str, int]) -> bool:
    """Whether one run can execute both: they agree on every If that holds both."""
    return all(b.get(k, v) == v for k, v in a.items())


def merge_module(index: GraphIndex, group: list[BlockBuilder]) -> tuple[BlockBuilder, int]:
    """One builder for a module reached from several anchors, and how many times one run applies it.

    The anchor that resolved the most projections leads; a Q/K/V role or an output projection it
    lacks is taken from another anchor (an If's no-past branch has the cross-attention K/V that
    the with-past branch reads from the cache). Anchors in different branches of one If are
    alternatives; the others are applications of the same weights.
    """
    if len(group) == 1:
        return group[0], 1
    choices = [_branch_choices(index, b.anchor.name) for b in group]
    applications = max(sum(1 for c in choices if _compatible(mine, c)) for mine in choices)

    def resolved(b: BlockBuilder) -> int:
        found = [r for r in b.roles.values() if r.traced is not None or r.fused_weight is not None]
        return len(found) + (b.output is not None)

    lead = max(group, key=resolved)  # max keeps the first of equals: the first anchor in graph order
    for other in group:
        if other is lead:
            continue
        for role, r in other.roles.items():
            mine = lead.roles.get(role)
            if (r.traced is not None or r.fused_weight is not None) and (
                    mine is None or (mine.traced is None and mine.fused_weight is None)):
                lead.roles[role] = r
                lead.evidence.append(Evidence(role, None, "same_weights",
                                              f"{role.upper()} projection found from {other.anchor.name}"))
        if lead.output is None and other.output is not None:
            lead.output = other.output
            lead.evidence.append(Evidence("o", None, "same_weights", f"O projection found from {other.anchor.name}"))
        for name, numel in other.extras.items():
            lead.extras.setdefault(name, numel)
        lead.constants |= other.constants
        for name, numel in other.kv_rows.items():
            lead.kv_rows.setdefault(name, numel)
    others = ", ".join(b.anchor.name for b in group if b is not lead)
    what = (f"applied {applications} times" if applications > 1 else "one module in alternative If branches")
    lead.evidence.append(Evidence("applications", applications, "same_weights",
                                  f"{what}: the weights of {lead.anchor.name} are also read at {others}"))
    return lead, applications
