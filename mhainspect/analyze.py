"""The analysis service: ModelGraph -> Report. Pure: no printing, no exit codes."""

from __future__ import annotations

import dataclasses
import errno
import gc
import math
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from itertools import chain
from operator import attrgetter
from typing import Any

from mhainspect.dataflow import SHAPE_INPUTS, GraphIndex
from mhainspect.dtypes import is_float
from mhainspect.errors import InputError
from mhainspect.findings import AttentionBlock, Miss, Report
from mhainspect.graph import ModelGraph, Node, Tensor
from mhainspect.matchers import decomposed, fused
from mhainspect.matchers.block import BlockBuilder
from mhainspect.report import build_report
from mhainspect.size import graph_size_inputs

_QUANTIZED_WEIGHT_OPS = {"MatMulNBits", "DequantizeLinear", "MatMulInteger", "QLinearMatMul", "GatherBlockQuantized"}
# Inputs of quantized ops that carry scales and zero points (not parameters: size overhead).
_QUANT_SIDE_INPUTS: dict[str, frozenset[int]] = {
    "DequantizeLinear": frozenset({1, 2}), "QuantizeLinear": frozenset({1, 2}), "MatMulNBits": frozenset({2, 3, 4}),
    "MatMulInteger": frozenset({2, 3}), "ConvInteger": frozenset({2, 3}), "GatherBlockQuantized": frozenset({2, 3}),
    "QLinearMatMul": frozenset({1, 2, 4, 5, 6, 7}), "QLinearConv": frozenset({1, 2, 4, 5, 6, 7}),
    "DynamicQuantizeLSTM": frozenset({8, 9, 10, 11}),
}
_DECODED_VIA = {"Gather", "Reshape", "Transpose", "Unsqueeze", "Squeeze", "Flatten"}  # int weight -> dequantized
_MAX_NUMEL = 2**63 - 1  # more elements than an int64 index reaches: the declared shape is corrupt
_MAX_LISTED = 5  # warnings of one kind listed by name; the rest are counted
_SUBGRAPH_PREFIX = re.compile(r"^(.*/body\d+/)")  # the loader names subgraph nodes "{parent}/body{i}/{name}"
EXTERNAL_DATA_WARNING = "external data location"  # prefix of the warning for locations outside the model folder


def find_blocks(index: GraphIndex) -> tuple[list[BlockBuilder], list[Miss]]:
    builders: list[BlockBuilder] = []
    misses: list[Miss] = []
    # Anchors are rare (one Softmax or fused op per block): test the op name before the domain.
    anchor_ops = fused.FUSED_OP_NAMES | {"Softmax"}
    for node in [n for n in index.order if n.op in anchor_ops]:
        if node.op != "Softmax" and not fused.is_fused(node):
            continue
        if not node.inputs or not node.inputs[0] or not node.outputs or not node.outputs[0]:
            matcher = decomposed.NAME if node.op == "Softmax" else fused.NAME
            misses.append(Miss(matcher, node.name, f"{node.op} without a first input or output"))
            continue
        if node.op == "Softmax":
            result = decomposed.match(index, node)
        else:
            result = fused.match(index, node)
        if isinstance(result, Miss):
            misses.append(result)
        else:
            builders.append(result)
    return builders, misses


def parameter_tensors(index: GraphIndex) -> dict[str, Tensor]:
    """The one notion of "is a parameter" for a graph: storage key -> tensor, for unique weights
    (by storage) that some op reads as data, not only for its shape. count_parameters sums them;
    mhainspect.size calls every other stored tensor overhead."""
    seen: dict[str, Tensor] = {}
    trig_sources = _trig_sources(index)
    not_shape_only: frozenset[int] = frozenset()
    for name, t in index.graph.weights.items():
        if t.is_constant_node or not t.shape or t.storage_key in seen:
            continue
        if t.kind is not None and t.kind != "parameter":
            continue  # the exporter says: a buffer, a constant, or folded from non-parameters
        numel = t.numel
        if numel == 1 and "." not in t.name:
            continue  # exporter scalars (scale, eps) shaped [1]; real parameters carry a module path
        users = index.users(name)
        if not is_float(t.dtype) and not any(u.op in _QUANTIZED_WEIGHT_OPS for u, _ in users) \
                and not _dequantized_later(index, users):
            continue
        if not any(pos not in SHAPE_INPUTS.get(u.op, not_shape_only) for u, pos in users):
            continue
        if users and all(pos in _QUANT_SIDE_INPUTS.get(u.op, not_shape_only) for u, pos in users):
            continue  # a quantization scale or zero point
        if (trig_sources is None or name in trig_sources) and _only_feeds_trig(index, name):
            continue  # rotary inv_freq: a buffer that only builds cos/sin tables, not a parameter
        seen[t.storage_key] = t
    return seen


def _dequantized_later(index: GraphIndex, users: list[tuple[Node, int]]) -> bool:
    """An integer table read by a Gather (or a layout op) whose result a DequantizeLinear decodes:
    a quantized embedding."""
    return any(u.op in _DECODED_VIA and pos == 0 and u.outputs and
               any(v.op == "DequantizeLinear" and vpos == 0 for v, vpos in index.users(u.outputs[0]))
               for u, pos in users)


def count_parameters(index: GraphIndex) -> int:
    """Unique weights (by storage) that some op reads as data, not only for its shape."""
    return sum(t.numel for t in parameter_tensors(index).values())


def _listed(what: str, names: list[str], consequence: str) -> str:
    shown = ", ".join(names[:_MAX_LISTED]) + (f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else "")
    return f"{what} ({len(names)}): {shown}; {consequence}"


def _impossible_shape(t: Tensor) -> str | None:
    shape = t.shape
    if not shape:
        return None
    if min(shape) < 0:
        return "negative dim"
    if t.numel > _MAX_NUMEL:
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
    # Checked once per distinct shape (thousands of weights share a handful of shapes).
    odd_shapes = {s for s in set(map(attrgetter("shape"), graph.weights.values()))
                  if s and (min(s) < 0 or math.prod(s) > _MAX_NUMEL)}
    bad = {name: why for name, t in graph.weights.items()
           if t.shape in odd_shapes and (why := _impossible_shape(t)) is not None} if odd_shapes else {}
    weights = graph.weights
    if bad:
        weights = {name: t for name, t in graph.weights.items() if name not in bad}
        warnings.append(_listed("weights with an impossible shape",
                                [f"'{n}' {list(graph.weights[n].shape)} ({why})" for n, why in bad.items()],
                                "the file is corrupt; these are not counted"))
    seen: set[str] = set()
    repeated: set[str] = set()
    outputs = list(map(attrgetter("outputs"), graph.nodes))
    all_outputs = list(chain.from_iterable(outputs))
    if len(set(all_outputs)) != len(all_outputs):  # some name repeats: find which (usually none)
        for o in all_outputs:
            if o in seen:
                repeated.add(o)
            seen.add(o)
    repeated.discard("")
    producers: dict[tuple[str, str], int] = {}
    for n in graph.nodes if repeated else ():
        if not repeated.intersection(n.outputs):
            continue
        # Sibling subgraphs (If's then/else branches) may reuse names: count within one scope only.
        m = _SUBGRAPH_PREFIX.match(n.name)
        scope = m.group(1) if m else ""
        for o in n.outputs:
            if o in repeated:
                producers[scope, o] = producers.get((scope, o), 0) + 1
    dup = [f"'{name}' ({count} nodes)" for (_, name), count in producers.items() if count > 1]
    if dup:
        warnings.append(_listed("tensors produced by more than one node", dup,
                                "not valid ONNX; the analysis follows one producer of each"))
    nodes = graph.nodes
    dead = [n.name for n in nodes if not n.outputs] if not all(outputs) else []
    if dead:
        nodes = tuple(n for n in nodes if n.outputs)
        warnings.append(_listed("nodes without outputs", [f"'{n}'" for n in dead], "not valid ONNX; ignored"))
    if not bad and not dup and not dead:
        return graph
    return dataclasses.replace(graph, nodes=nodes, weights=weights, warnings=tuple(warnings))


_TRIG_PATH = {"Mul", "MatMul", "Unsqueeze", "Reshape", "Expand", "Cast", "Transpose", "Concat", "Div", "Identity",
              "Slice", "Gather", "Squeeze", "Einsum"}


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
    order = index.order
    outputs = list(chain.from_iterable(map(attrgetter("outputs"), order)))
    if len(outputs) - outputs.count("") != len(index.producer):
        return None
    found: set[str] = set()
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


def analyze_graph(graph: ModelGraph, *, path: str | None = None, fmt: str | None = None,
                  what_if_heads: tuple[int, ...] = (), config: Mapping[str, Any] | None = None,
                  config_label: str = "config.json") -> Report:
    graph = sanitize_graph(graph)
    index = GraphIndex(graph)
    builders, misses = find_blocks(index)
    taken: set[str] = set()
    blocks: list[AttentionBlock] = []
    extras_seen: set[str] = set()
    for b in builders:
        # A shared table (T5 computes its position bias once and reuses it) counts in its first block.
        for name in list(b.extras):
            if name in extras_seen:
                del b.extras[name]
            extras_seen.add(name)
        blocks.append(b.build(taken))
    parameters = parameter_tensors(index)
    size = graph_size_inputs(index, blocks, frozenset(parameters), config, config_label)
    return build_report(blocks, path=path if path is not None else graph.source, fmt=fmt or graph.kind,
                        total_params=sum(t.numel for t in parameters.values()), num_nodes=len(graph.nodes),
                        opset=graph.opset, producer=graph.producer, misses=misses, warnings=graph.warnings,
                        what_if_heads=what_if_heads, size=size)


def check_symlink_loop(path: str | os.PathLike[str]) -> None:
    """InputError when ``path`` is a symlink loop (a -> b -> a), which would otherwise read as missing."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(f"{os.fspath(path)}: symlink loop (too many levels of symbolic links)") from None
    except ValueError:  # an embedded NUL: the loader reports it
        pass


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector off while a graph is loaded and analysed, then as it was.

    The graph is a tree of new objects that all live until the report is built, so each
    collection only re-walks them (gen 2 passes over the whole graph): ~10% of a 70B run.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def analyze_path(path: str | os.PathLike[str], *, what_if_heads: tuple[int, ...] = ()) -> Report:
    from mhainspect.loaders.onnx_loader import load_onnx

    check_symlink_loop(path)
    try:
        with collector_paused():
            graph = load_onnx(path)
            escaping = external_data_warnings(path, graph)
            if escaping:
                graph = dataclasses.replace(graph, warnings=graph.warnings + tuple(escaping))
            config, label = config_beside(path)
            return analyze_graph(graph, path=str(path), fmt="onnx", what_if_heads=what_if_heads, config=config,
                                 config_label=label)
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
    from pathlib import Path

    from mhainspect.loaders.checkpoint import read_config

    try:
        return read_config(Path(candidate)), "config.json beside the model"
    except InputError:
        return None, ""


_DRIVE = re.compile(r"^[A-Za-z]:")


def external_location_escapes(model_dir: str, location: str) -> str | None:
    """Why an external-data ``location`` leaves the model's folder, or None when it stays inside.

    Decided from the text alone, except a symlink inside the folder, which is resolved with
    lstat/readlink (``os.path.realpath``): the location itself is never opened.
    """
    if "\x00" in location:
        return "contains a NUL byte"
    if os.path.isabs(location) or location.startswith(("/", "\\")) or _DRIVE.match(location):
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


def external_data_warnings(path: str | os.PathLike[str], graph: ModelGraph) -> list[str]:
    """One warning per external-data location outside the model's folder (never opened, never read)."""
    model_dir = os.path.dirname(os.path.abspath(os.fspath(path)))
    users: dict[str, list[str]] = {}
    for name, t in graph.weights.items():
        if t.storage_key.startswith("external:"):
            # The loader's key for external data is "external:{location}:{offset}:{length}".
            location = t.storage_key[len("external:"):].rsplit(":", 2)[0]
            users.setdefault(location, []).append(name)
    out: list[str] = []
    for location, names in users.items():
        if len(out) >= _MAX_LISTED:
            out.append(f"{EXTERNAL_DATA_WARNING}s: more locations outside the model folder not listed")
            break
        why = external_location_escapes(model_dir, location)
        if why is not None:
            out.append(f"{EXTERNAL_DATA_WARNING} {location!r} ({why}) of {len(names)} weight(s), first "
                       f"'{names[0]}': refused, never opened (the audit reads no external data)")
    return out
