"""The step every graph front end shares: ModelGraph -> SourceResult (blocks, near misses, model facts).

ONNX files (local or remote), traced PyTorch modules, torch.export and TorchScript archives and a
graph given to the Python API all end here: the graph checked (``sanitize_graph``), the matchers'
driver, the parameter scan, the size inputs and the layers of a recurrent or convolution mixer. What
only one format needs (ONNX's QOperator ops and tensor sequences, the copies of parameters its values
show) it passes as parameters (``onnx.frontend.onnx_graph_result``). Pure: no reading, no printing, no exit codes.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from operator import attrgetter
from typing import Any

from mhainspect.frontends.checkpoint.size_inputs import graph_size_inputs
from mhainspect.ir.dataflow import GraphIndex
from mhainspect.ir.graph import FoldedCopy, ModelGraph, Node, Tensor
from mhainspect.ir.limits import MAX_NUMEL
from mhainspect.ir.mixer_names import MAX_CONV_KERNEL, MIXER_ENDINGS
from mhainspect.ir.parameters import scan_stored
from mhainspect.matchers.cache import state_tensors
from mhainspect.matchers.graph import graph_blocks
from mhainspect.results import ModelFacts, ReportWarning, WarningCode, coded
from mhainspect.results.stages import MixerLayers, SourceResult

MAX_LISTED = 5  # warnings of one kind listed by name; the rest are counted
# The loader names subgraph nodes "{parent}/body{i}/{name}". Pattern strings, compiled by re on
# first use: only graphs with subgraphs (If, Loop) reach them.
_SUBGRAPH_PREFIX = r"^(.*/body\d+/)"


def _listed(what: str, names: list[str], consequence: str) -> str:
    shown = ", ".join(names[:MAX_LISTED]) + (f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")
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


def _module_of(n: Node) -> str:
    """The module a node belongs to: its scope, else its name's path (/m/layers.0/mamba/Conv -> m.layers.0.mamba)."""
    return n.scope or ".".join(part for part in n.name.strip("/").split("/")[:-1])


def _causal_convs(graph: ModelGraph) -> list[tuple[Node, str, str]]:
    """The graph's short causal depthwise convolutions as (node, the key a checkpoint names its weight
    by, the mixer's module): a Conv node whose weight [C, 1, k] (1 < k <= MAX_CONV_KERNEL) runs per
    channel (group = C) with k - 1 inputs of padding before the first. That is a recurrent or
    convolution mixer's (Mamba, Gated DeltaNet, LFM2: it keeps its last inputs per sequence), whatever
    the exporter left of its parameters' names; a convolution padded on both sides by half its
    kernel (ConvBERT, a Conformer) is not causal. A named weight is its own key
    (``model.layers.0.mamba.conv1d.weight``); an anonymous one's is made from the node's module."""
    out = []
    for n in graph.nodes:
        if n.op != "Conv" or len(n.inputs) < 2 or (w := graph.weights.get(n.inputs[1])) is None:
            continue
        shape = w.shape
        pads = n.attrs.ints("pads")
        if len(shape) != 3 or shape[1] != 1 or not 1 < shape[2] <= MAX_CONV_KERNEL or n.attrs.int("group") != shape[0] \
                or not pads or pads[0] != shape[2] - 1:
            continue
        if w.name.endswith(MIXER_ENDINGS):  # a named one is read by its name
            out.append((n, w.name, w.name.rpartition(".")[0].rpartition(".")[0]))
            continue
        module = _module_of(n)
        if module:  # the convolution's module (node /m/layers.0/mamba/conv1d/Conv), else one in the mixer's
            last = module.rpartition(".")[2]
            named = last in ("conv", "conv1d", "conv_1d") or last.endswith(("_conv", "_conv1d"))
            out.append((n, f"{module}.weight" if named else f"{module}.conv1d.weight",
                        module.rpartition(".")[0] if named else module))
    return out


def _stand_ins(index: GraphIndex, convs: Sequence[tuple[Node, str, str]]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Tensors of a recurrent or convolution mixer the exporter kept under names of its own, under the
    names a checkpoint gives them (module path + ``conv1d.weight`` / ``A_log``) -> (the file's name,
    shape), so the checkpoint's rules read them: the weights of the causal convolutions
    (``_causal_convs``), and, in the module of such a convolution, a stored tensor the graph
    exponentiates (through a cast or a negation): the state decay A of exp(Δ·A) (Mamba's
    ``-exp(A_log)``, folded to a constant)."""
    graph = index.graph
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for n, key, _ in convs:
        if key not in graph.weights:
            w = graph.weights[n.inputs[1]]
            out[key] = (w.name, w.shape)
    modules = {module for _, _, module in convs}
    if not modules:
        return out
    for n in graph.nodes:
        if n.op != "Exp" or not n.inputs or (module := _module_of(n)) not in modules \
                or f"{module}.A_log" in graph.weights:
            continue
        source = n.inputs[0]
        for _ in range(3):  # through a Cast or a Neg the exporter kept
            producer = index.producer.get(source) if source not in graph.weights else None
            if producer is None or producer.op not in ("Cast", "Neg") or not producer.inputs:
                break
            source = producer.inputs[0]
        decay = graph.weights.get(source)
        if decay is not None and not decay.name.endswith(MIXER_ENDINGS):
            out.setdefault(f"{module}.A_log", (decay.name, decay.shape))
    return out


def _mixers(index: GraphIndex, config: Mapping[str, Any] | None) -> tuple[MixerLayers, ...]:
    """Layers of a recurrent or convolution mixer (``checkpoint.mixers.graph_mixers``): looked for
    only where a weight's name, a causal convolution, a state tensor of the graph or the config can
    tell, so a plain graph imports nothing more. A scan's or delta rule's recurrent state the
    weights do not size is read from what the graph does with its convolution's output
    (``scan.scan_state``)."""
    graph = index.graph
    convs = _causal_convs(graph)
    stand_ins = _stand_ins(index, convs)
    states = state_tensors(graph)
    if config is None and not convs and not states and not any(n.endswith(MIXER_ENDINGS) for n in graph.weights):
        return ()
    from mhainspect.frontends.checkpoint.mixers import graph_mixers
    from mhainspect.frontends.graphs.scan import scan_state
    from mhainspect.ir.weights import WeightMeta

    weights = {n: WeightMeta(n, t.shape, t.dtype, t.storage_key) for n, t in graph.weights.items()}
    weights.update({key: WeightMeta(name, shape, "float32", name) for key, (name, shape) in stand_ins.items()
                    if key not in weights})
    recurrent: dict[str, tuple[int, str]] = {}
    for node, _, module in convs:
        decay = weights.get(f"{module}.A_log")
        heads = [d for d in decay.shape if d != 1] if decay is not None else []
        found = scan_state(index, node.outputs[0], heads[0] if len(heads) == 1 else None)
        if found is not None:
            recurrent[module] = found
    found_mixers = graph_mixers(config, weights, recurrent)
    if not states:
        return found_mixers
    from mhainspect.frontends.graphs.states import with_graph_states

    return with_graph_states(found_mixers, states)


def graph_result(graph: ModelGraph, *, path: str | None = None, fmt: str | None = None,
                 config: Mapping[str, Any] | None = None, config_label: str = "config.json",
                 note: Callable[[ModelGraph], ReportWarning | None] | None = None,
                 view: Callable[[ModelGraph], ModelGraph] | None = None,
                 copies_note: Callable[[ModelGraph, Mapping[str, FoldedCopy]], ReportWarning] | None = None,
                 ) -> SourceResult:
    """The graph front ends' shared step: blocks, near misses, model facts and size metadata of
    ``graph`` (``config``: a config.json beside the file, for what only a config says).

    What a graph's own format adds (the ONNX front end's
    ``mhainspect.frontends.onnx.frontend.onnx_graph_result``; a traced torch graph needs none):
    ``note``, a warning about the graph as read (None: nothing to say); ``view``, the graph the
    matchers read (the format's operators rewritten into those the patterns know); ``copies_note``,
    the warning naming the exporter-made copies of parameters the format found (``ModelGraph.folded``:
    only a format that finds them fills it, so without this step there are none to name).
    Parameters, not a class of steps: a dataclass made at import costs every run ~4M instructions."""
    graph = sanitize_graph(graph)
    said = note(graph) if note is not None else None
    if said is not None:
        graph = dataclasses.replace(graph, warnings=(*graph.warnings, said))
    index = GraphIndex(view(graph) if view is not None else graph)
    found = graph_blocks(index)  # the matchers' driver
    blocks = list(found.blocks)
    # The one notion of a parameter (size calls the rest overhead); what the blocks show a converter
    # computed (a folded score scale or mask) is none.
    stored = scan_stored(index, found.constants)
    if stored.copies and copies_note is not None:  # exporter-made copies of parameters, named with what they repeat
        graph = dataclasses.replace(graph, warnings=(
            *graph.warnings, copies_note(graph, {n: graph.folded[n] for n in stored.copies})))
    parameters = stored.parameters
    size = graph_size_inputs(index, blocks, stored, config, config_label)
    mixers = _mixers(index, config)
    if mixers:  # layers whose state is no K/V: listed, so no KV figure stands for the whole memory
        from mhainspect.frontends.checkpoint.mixers import with_mixers

        size = with_mixers(size, mixers, config, config_label)
    positions, positions_source = None, ""
    if config is not None:  # imported here: most graphs come without a config
        from mhainspect.frontends.checkpoint.hf_config import max_positions

        positions, positions_source = max_positions(config, config_label)
    facts = ModelFacts(path=path if path is not None else graph.source, format=fmt or graph.kind.value,
                       total_params=sum(parameters.values()), num_nodes=len(graph.nodes), opset=graph.opset,
                       producer=graph.producer, max_positions=positions, max_positions_source=positions_source)
    return SourceResult(tuple(blocks), found.misses, facts, coded(graph.warnings), size)
