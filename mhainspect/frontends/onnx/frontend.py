"""The graph front end: ModelGraph -> SourceResult (blocks, near misses, model facts).

``graph_result`` is pure. ``onnx_file_result`` is the ONNX door: it loads the
file, checks external-data locations against the model's
folder (lstat/readlink only) and hands the graph on. No printing, no exit codes.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping, Sequence
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import Any

from mhainspect.errors import InputError
from mhainspect.frontends.formats import check_symlink_loop
from mhainspect.frontends.onnx.loader import load_onnx
from mhainspect.frontends.onnx.qoperator import as_qdq
from mhainspect.frontends.onnx.sequences import as_slices
from mhainspect.frontends.onnx.values import folded_note, undecided_lookups_note, with_folded_copies
from mhainspect.frontends.size_inputs import graph_size_inputs
from mhainspect.ir.dataflow import GraphIndex
from mhainspect.ir.graph import ModelGraph, Node, Tensor
from mhainspect.ir.limits import MAX_NUMEL
from mhainspect.ir.parameters import scan_stored
from mhainspect.matchers import additive, decomposed, fused
from mhainspect.matchers.block import BlockBuilder, RoleInput
from mhainspect.matchers.sharing import count_shared_once
from mhainspect.results import AttentionBlock, Evidence, Miss, ModelFacts, ReportWarning, WarningCode, coded
from mhainspect.results.stages import SourceResult

_MAX_LISTED = 5  # warnings of one kind listed by name; the rest are counted
# The loader names subgraph nodes "{parent}/body{i}/{name}". Pattern strings, compiled by re on
# first use: only graphs with subgraphs (If, Loop) reach them.
_SUBGRAPH_PREFIX = r"^(.*/body\d+/)"
_BODY = r"/body(\d+)/"
EXTERNAL_DATA_WARNING = "external data location"  # how the warning for locations outside the model folder begins


def find_blocks(index: GraphIndex) -> tuple[list[BlockBuilder], list[Miss]]:
    builders: list[BlockBuilder] = []
    misses: list[Miss] = []
    # Anchors are rare (one Softmax or fused op per block): test the op name before the domain.
    # An Exp anchors a softmax written out (decomposed.written_softmax), matched as that Softmax.
    anchor_ops = fused.FUSED_OP_NAMES | {"Softmax", "Exp"}
    for node in [n for n in index.order if n.op in anchor_ops]:
        if node.op == "Exp":
            written = decomposed.written_softmax(index, node)
            if written is None:
                continue
            node = written
        elif node.op != "Softmax" and not fused.is_fused(node):
            continue
        if not node.inputs or not node.inputs[0] or not node.outputs or not node.outputs[0]:
            matcher = decomposed.NAME if node.op == "Softmax" else fused.NAME
            misses.append(Miss(matcher, node.name, f"{node.op} without a first input or output"))
            continue
        if node.op == "Softmax":
            result = decomposed.match(index, node)
            if isinstance(result, Miss) and result.code == decomposed.NO_SCORE_PRODUCT_CODE:
                result = additive.match(index, node) or result  # scores without Q·Kᵀ: additive ones?
        else:
            result = fused.match(index, node)
        if isinstance(result, Miss):
            misses.append(result)
        else:
            builders.append(result)
    return builders, misses


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
    others = ", ".join(b.anchor.name for b in group if b is not lead)
    what = (f"applied {applications} times" if applications > 1 else "one module in alternative If branches")
    lead.evidence.append(Evidence("applications", applications, "same_weights",
                                  f"{what}: the weights of {lead.anchor.name} are also read at {others}"))
    return lead, applications


def _listed(what: str, names: list[str], consequence: str) -> str:
    shown = ", ".join(names[:_MAX_LISTED]) + (f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else "")
    return f"{what} ({len(names)}): {shown}; {consequence}"


def _impossible_shape(t: Tensor) -> str | None:
    shape = t.shape
    if not shape:
        return None
    if min(shape) < 0:
        return "negative dim"
    if t.numel > MAX_NUMEL:
        return "more elements than int64 counts"
    return None


def sanitize_graph(graph: ModelGraph) -> ModelGraph:
    """``graph`` without what would make its numbers wrong, each removal or oddity named in a warning.

    Weights whose declared shape is impossible (a negative dim, more than 2**63-1 elements) are
    dropped, so they count nowhere; a tensor produced by several nodes (not valid ONNX) is kept,
    with a warning, and the analysis follows one of its producers (the last in topological order);
    nodes without any output (not valid ONNX, and dead) are dropped.
    """
    warnings = list(graph.warnings)
    bad = _impossible_weights(graph.weights)
    weights = graph.weights
    if bad:
        weights = {name: t for name, t in graph.weights.items() if name not in bad}
        warnings.append(ReportWarning(_listed(
            "weights with an impossible shape", [f"'{n}' {list(graph.weights[n].shape)} ({why})" for n, why in bad.items()],
            "the file is corrupt; these are not counted"), WarningCode.IMPOSSIBLE_SHAPE))
    dup = _duplicate_producers(graph.nodes)
    if dup:
        warnings.append(ReportWarning(_listed("tensors produced by more than one node", dup,
                                              "not valid ONNX; the analysis follows one producer of each"),
                                      WarningCode.DUPLICATE_PRODUCER))
    nodes = graph.nodes
    dead = [n.name for n in nodes if not n.outputs] if not all(map(attrgetter("outputs"), nodes)) else []
    if dead:
        nodes = tuple(n for n in nodes if n.outputs)
        warnings.append(ReportWarning(_listed("nodes without outputs", [f"'{n}'" for n in dead],
                                              "not valid ONNX; ignored"), WarningCode.NODE_WITHOUT_OUTPUTS))
    if not bad and not dup and not dead:
        return graph
    return dataclasses.replace(graph, nodes=nodes, weights=weights, warnings=tuple(warnings))


def _impossible_weights(weights: Mapping[str, Tensor]) -> dict[str, str]:
    """Weight name -> why its declared shape is impossible (a negative dim, too many elements)."""
    # Checked once per distinct shape (thousands of weights share a handful of shapes).
    odd_shapes = {s for s in set(map(attrgetter("shape"), weights.values()))
                  if s and (min(s) < 0 or math.prod(s) > MAX_NUMEL)}
    if not odd_shapes:
        return {}
    return {name: why for name, t in weights.items() if t.shape in odd_shapes and (why := _impossible_shape(t)) is not None}


def _duplicate_producers(nodes: Sequence[Node]) -> list[str]:
    """"'name' (N nodes)" for each tensor several nodes of one scope write (sibling subgraphs, an
    If's then/else branches, may reuse names)."""
    all_outputs = list(chain.from_iterable(map(attrgetter("outputs"), nodes)))
    if len(set(all_outputs)) == len(all_outputs):  # the usual case: no name repeats
        return []
    seen: set[str] = set()
    repeated: set[str] = set()
    for o in all_outputs:
        if o in seen:
            repeated.add(o)
        seen.add(o)
    repeated.discard("")
    producers: dict[tuple[str, str], int] = {}
    for n in nodes:
        if not repeated.intersection(n.outputs):
            continue
        m = re.match(_SUBGRAPH_PREFIX, n.name)
        scope = m.group(1) if m else ""
        for o in n.outputs:
            if o in repeated:
                producers[scope, o] = producers.get((scope, o), 0) + 1
    return [f"'{name}' ({count} nodes)" for (_, name), count in producers.items() if count > 1]


def graph_result(graph: ModelGraph, *, path: str | None = None, fmt: str | None = None,
                 config: Mapping[str, Any] | None = None, config_label: str = "config.json") -> SourceResult:
    """The ONNX / traced-graph front end: blocks, near misses, model facts and size metadata of
    ``graph`` (``config``: a config.json beside the file, for what only a config says)."""
    graph = sanitize_graph(graph)
    undecided = undecided_lookups_note(graph)  # lookups no values decided: not counted, and why
    if undecided is not None:
        graph = dataclasses.replace(graph, warnings=(*graph.warnings, undecided))
    # QLinear ops as DequantizeLinear -> float op -> QuantizeLinear; parts of a tensor sequence as Slices.
    index = GraphIndex(as_slices(as_qdq(graph)))
    builders, misses = find_blocks(index)
    taken: set[str] = set()
    blocks: list[AttentionBlock] = []
    extras_seen: set[str] = set()
    for group in modules(index, builders):
        b, applications = merge_module(index, group)
        # A shared table (T5 computes its position bias once and reuses it) counts in its first block.
        for name in list(b.extras):
            if name in extras_seen:
                del b.extras[name]
            extras_seen.add(name)
        block = b.build(taken)
        blocks.append(block if applications == 1 else dataclasses.replace(block, applications=applications))
    blocks = count_shared_once(blocks)
    stored = scan_stored(index)  # the one notion of a parameter; size calls the rest overhead
    if stored.copies:  # exporter-made copies of parameters, named with what they repeat
        graph = dataclasses.replace(graph, warnings=(
            *graph.warnings, folded_note(graph, {n: graph.folded[n] for n in stored.copies})))
    parameters = stored.parameters
    size = graph_size_inputs(index, blocks, stored, config, config_label)
    positions, positions_source = None, ""
    if config is not None:  # imported here: most graphs come without a config
        from mhainspect.frontends.checkpoint.hf_config import max_positions

        positions, positions_source = max_positions(config, config_label)
    facts = ModelFacts(path=path if path is not None else graph.source, format=fmt or graph.kind,
                       total_params=sum(parameters.values()), num_nodes=len(graph.nodes), opset=graph.opset,
                       producer=graph.producer, max_positions=positions, max_positions_source=positions_source)
    return SourceResult(tuple(blocks), tuple(misses), facts, coded(graph.warnings), size)


def onnx_file_result(path: str | os.PathLike[str]) -> SourceResult:
    """The ONNX door: load the file, check external-data locations,
    read a config.json beside it, and analyse the graph."""
    check_symlink_loop(path)
    try:
        graph = load_onnx(path)
        escaping = external_data_warnings(path, graph)
        if escaping:
            graph = dataclasses.replace(graph, warnings=graph.warnings + tuple(escaping))
        graph = with_folded_copies(path, graph)  # reads values only where a candidate pair exists
        config, label = config_beside(path)
        return graph_result(graph, path=str(path), fmt="onnx", config=config, config_label=label)
    except InputError as exc:
        message = str(exc)
        if not message.startswith(str(path)):
            raise InputError(f"{path}: {message}") from None
        raise


def config_beside(path: str | os.PathLike[str]) -> tuple[dict[str, Any] | None, str]:
    """The Hugging Face config.json next to an ONNX file (optimum exports ship one), for what only a
    config says (sliding windows, whether the model decodes); None when absent or unreadable."""
    candidate = os.path.join(os.path.dirname(os.path.abspath(os.fspath(path))), "config.json")
    if not os.path.isfile(candidate):
        return None, ""
    from mhainspect.frontends.checkpoint.reader import read_config  # reading configs: only where one is

    try:
        return read_config(Path(candidate)), "config.json beside the model"
    except InputError:
        return None, ""


_DRIVE = r"^[A-Za-z]:"  # compiled by re when an external location is first checked


def external_location_escapes(model_dir: str, location: str) -> str | None:
    """Why an external-data ``location`` leaves the model's folder, or None when it stays inside.

    Decided from the text alone, except a symlink inside the folder, which is resolved with
    lstat/readlink (``os.path.realpath``): the location itself is never opened.
    """
    if "\x00" in location:
        return "contains a NUL byte"
    if os.path.isabs(location) or location.startswith(("/", "\\")) or re.match(_DRIVE, location):
        return "absolute path"
    if ".." in re.split(r"[\\/]", location):
        return "'..' leaves the model folder"
    folder = os.path.realpath(model_dir)
    try:
        target = os.path.realpath(os.path.join(folder, location))
        inside = os.path.commonpath([folder, target]) == folder
    except (OSError, ValueError):
        return "cannot be resolved"
    return None if inside else "a symlink resolving outside the model folder"


def external_data_warnings(path: str | os.PathLike[str], graph: ModelGraph) -> list[ReportWarning]:
    """One warning per external-data location outside the model's folder (never opened, never read)."""
    model_dir = os.path.dirname(os.path.abspath(os.fspath(path)))
    users: dict[str, list[str]] = {}
    for name, t in graph.weights.items():
        if t.location is not None:
            users.setdefault(t.location, []).append(name)
    out: list[ReportWarning] = []
    code = WarningCode.EXTERNAL_DATA_OUTSIDE
    for location, names in users.items():
        if len(out) >= _MAX_LISTED:
            out.append(ReportWarning(f"{EXTERNAL_DATA_WARNING}s: more locations outside the model folder not listed",
                                     code))
            break
        why = external_location_escapes(model_dir, location)
        if why is not None:
            out.append(ReportWarning(f"{EXTERNAL_DATA_WARNING} {location!r} ({why}) of {len(names)} weight(s), first "
                                     f"'{names[0]}': refused, never opened (the audit reads no external data)", code))
    return out
