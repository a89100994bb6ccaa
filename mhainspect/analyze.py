"""The analysis service: ModelGraph -> Report. Pure: no printing, no exit codes."""

from __future__ import annotations

import dataclasses
import os

from mhainspect.dataflow import SHAPE_INPUTS, GraphIndex
from mhainspect.errors import InputError
from mhainspect.findings import SCHEMA_VERSION, AttentionBlock, Miss, ModelSummary, Report
from mhainspect.flags import evaluate
from mhainspect.graph import ModelGraph
from mhainspect.matchers import decomposed, fused
from mhainspect.matchers.block import BlockBuilder
from mhainspect.whatif import default_what_ifs

_FLOAT_DTYPES = {"float32", "float16", "float64", "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2",
                 "float8e5m2fnuz", "float4e2m1"}
_QUANTIZED_WEIGHT_OPS = {"MatMulNBits", "DequantizeLinear", "MatMulInteger", "QLinearMatMul", "GatherBlockQuantized"}


def find_blocks(index: GraphIndex) -> tuple[list[BlockBuilder], list[Miss]]:
    builders: list[BlockBuilder] = []
    misses: list[Miss] = []
    for node in index.order:
        if node.op == "Softmax":
            result = decomposed.match(index, node)
        elif fused.is_fused(node):
            result = fused.match(index, node)
        else:
            continue
        if isinstance(result, Miss):
            misses.append(result)
        else:
            builders.append(result)
    return builders, misses


def count_parameters(index: GraphIndex) -> int:
    """Unique weights (by storage) that some op reads as data, not only for its shape."""
    seen: set[str] = set()
    total = 0
    for name, t in index.graph.weights.items():
        if t.is_constant_node or not t.shape or t.storage_key in seen:
            continue
        if t.numel == 1 and "." not in t.name:
            continue  # exporter scalars (scale, eps) shaped [1]; real parameters carry a module path
        quantized = any(u.op in _QUANTIZED_WEIGHT_OPS for u, _ in index.users(name))
        if t.dtype not in _FLOAT_DTYPES and not quantized:
            continue
        users = index.users(name)
        if not any(pos not in SHAPE_INPUTS.get(u.op, frozenset()) for u, pos in users):
            continue
        seen.add(t.storage_key)
        total += t.numel
    return total


def analyze_graph(graph: ModelGraph, *, path: str | None = None, fmt: str | None = None,
                  what_if_heads: tuple[int, ...] = ()) -> Report:
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
        block = b.build(taken)
        blocks.append(dataclasses.replace(block, what_if=default_what_ifs(block, what_if_heads)))
    total = count_parameters(index)
    blocks_t = tuple(blocks)
    summary = ModelSummary(
        path=path if path is not None else graph.source,
        format=fmt or graph.kind,
        total_params=total,
        num_nodes=len(graph.nodes),
        opset=graph.opset,
        producer=graph.producer,
        attention_params=_attention_params(blocks_t),
    )
    return Report(SCHEMA_VERSION, summary, blocks_t, evaluate(blocks_t), tuple(misses), warnings=graph.warnings)


def _attention_params(blocks: tuple[AttentionBlock, ...]) -> int:
    """Sum over blocks, counting a weight shared by several blocks once."""
    seen: set[tuple[str, str]] = set()
    total = 0
    for b in blocks:
        for p in b.projections:
            key = (p.role, p.weight or f"{b.name}:{p.role}")
            if p.weight is not None and (p.weight, p.role) in seen:
                continue
            seen.add((p.weight or "", p.role) if p.weight else key)
            total += p.weight_params + p.bias_params
    return total


def analyze_path(path: str | os.PathLike[str], *, what_if_heads: tuple[int, ...] = ()) -> Report:
    from mhainspect.loaders.onnx_loader import load_onnx

    try:
        graph = load_onnx(path)
        return analyze_graph(graph, path=str(path), fmt="onnx", what_if_heads=what_if_heads)
    except InputError as exc:
        message = str(exc)
        if not message.startswith(str(path)):
            raise InputError(f"{path}: {message}") from None
        raise
