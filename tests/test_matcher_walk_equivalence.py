"""The shortcuts in the matchers' walks give exactly what the plain code gives.

trace_back_to_projection reads its queue with a list iterator and looks back through casts only
behind a cast/Q-DQ producer; BlockBuilder._kind answers "self" without walking origins when Q and
K start from the same tensor. The plain versions below are the code before those shortcuts; both
run from every activation (trace_back) and every matched block (kind) of the sample models, the
deployment-graph variants (QDQ, MatMulNBits, dynamic int8, fp16 casts, packed splits) and, with
MHAINSPECT_DEPLOY_CORPUS, the deployment corpus.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest

from mhainspect.frontends.onnx.frontend import find_blocks, sanitize_graph
from mhainspect.frontends.onnx.loader import load_onnx
from mhainspect.ir.dataflow import VALUE_PRESERVING_OPS, GraphIndex, passes_value
from mhainspect.ir.graph import Node
from mhainspect.matchers.block import BlockBuilder, _origins
from mhainspect.matchers.projection import (
    _BACKWARD_THROUGH,
    _MAX_BACKWARD_NODES,
    _PROJECTION_OPS,
    TracedProjection,
    _traced,
    recognise_projection,
    trace_back_to_projection,
)
from tests import deploy_graphs

_ROOT = Path(__file__).resolve().parents[1]
_CORPUS = os.environ.get("MHAINSPECT_DEPLOY_CORPUS")
MODELS = sorted((_ROOT / "sample_models").glob("*.onnx"))
if _CORPUS and Path(_CORPUS).is_dir():
    MODELS += sorted(p for p in Path(_CORPUS).rglob("*.onnx") if p.stat().st_size < 64 << 20)[:60]


def _plain_trace_back(index: GraphIndex, tensor: str, stop: set[str] | None = None) -> TracedProjection | None:
    stop = stop or set()
    producer, activations = index.producer, index.activations
    queue: list[str] = [tensor]
    paths: list[tuple[Node, ...]] = [()]
    seen = {tensor}
    visited = 0
    i = 0
    while i < len(queue) and visited < _MAX_BACKWARD_NODES:
        cur, path = queue[i], paths[i]
        i += 1
        node = producer.get(cur)
        if node is None or node.name in stop:
            continue
        visited += node.op not in VALUE_PRESERVING_OPS
        op = node.op
        inputs = node.inputs
        if op in VALUE_PRESERVING_OPS and not passes_value(node, cur):
            continue
        if op == "Add" and len(inputs) == 2:
            for pos in (0, 1):
                inner = producer.get(index.value_source(inputs[pos]))
                if inner is not None and inner.op in _PROJECTION_OPS and inputs[1 - pos] not in activations:
                    hit = recognise_projection(index, inner)
                    if hit is not None and hit.output == cur:
                        return _traced(index, hit, path)
        elif op in _PROJECTION_OPS:
            hit = recognise_projection(index, node)
            if hit is not None:
                return _traced(index, hit, path)
            continue
        through = _BACKWARD_THROUGH.get(op, ())
        if through == ():
            continue
        path = (node,) + path
        for p in range(len(inputs)) if through is None else through:
            if p < len(inputs):
                nxt = inputs[p]
                if nxt and nxt not in seen and nxt in activations:
                    seen.add(nxt)
                    queue.append(nxt)
                    paths.append(path)
    return None


def _plain_kind(b: BlockBuilder) -> str:
    if b.kind is not None:
        return b.kind
    q, k = b.roles.get("q"), b.roles.get("k")
    if q is None or k is None:
        return "self"

    def sources(r: object) -> set[str]:
        start = r.traced.hit.activation if r.traced is not None else r.tensor  # type: ignore[attr-defined]
        return _origins(b.index, start) if start else set()

    a, c = sources(q), sources(k)
    if not a or not c or a & c:
        return "self"
    resolved = all(r.traced is not None or r.fused_weight is not None for r in (q, k))  # type: ignore[attr-defined]
    if resolved or all(x not in b.index.producer for x in a | c):
        return "cross"
    return "unknown"  # a projection not resolved, and the tensors behind it computed by ops not seen through


def _compare(index: GraphIndex) -> int:
    compared = 0
    for name in sorted(index.activations):
        assert trace_back_to_projection(index, name) == _plain_trace_back(index, name), name
        compared += 1
    builders, _ = find_blocks(index)
    for b in builders:
        stop = {b.anchor.name}
        for role in b.roles.values():
            if role.tensor:
                assert trace_back_to_projection(index, role.tensor, stop) == \
                    _plain_trace_back(index, role.tensor, stop)
        assert b._kind() == _plain_kind(b)
    return compared


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_models_walk_as_plain_code(path: Path) -> None:
    index = GraphIndex(sanitize_graph(load_onnx(path)))
    _compare(index)


@pytest.mark.parametrize("proj", sorted(deploy_graphs.PROJECTIONS))
@pytest.mark.parametrize("packed", [None, "split", "heads"])
def test_deployment_graphs_walk_as_plain_code(tmp_path: Path, proj: str, packed: str | None) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(deploy_graphs.attention_model(deploy_graphs.PROJECTIONS[proj], packed=packed), path)
    index = GraphIndex(sanitize_graph(load_onnx(path)))
    assert _compare(index) > 10  # the walk really started from many tensors
    assert find_blocks(index)[0]  # and the block was matched
