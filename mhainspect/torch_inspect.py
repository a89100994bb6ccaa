"""nn.Module -> Report: known modules first, tracing for the rest, nothing counted twice.

Imports torch; only loaded when a module (or a factory spec) is audited.
"""

from __future__ import annotations

import dataclasses
import inspect as pyinspect
from typing import Any

import torch
from torch import nn

from mhainspect.analyze import analyze_graph
from mhainspect.errors import InputError
from mhainspect.findings import AttentionBlock, Miss, Report
from mhainspect.loaders.torch_fx import trace_module
from mhainspect.loaders.torch_modules import count_parameters, module_size_inputs, recognise
from mhainspect.report import build_report
from mhainspect.size import BlockDecoding, causal_in_graph

EXAMPLE_BATCH, EXAMPLE_SEQ = 2, 8


def inspect_module(model: nn.Module, example_inputs: Any = None, *, what_if_heads: tuple[int, ...] = (),
                   trace: bool | None = None, name: str | None = None) -> Report:
    label = name or type(model).__name__
    known = recognise(model)
    warnings: list[str] = []
    misses: list[Miss] = []
    traced: list[AttentionBlock] = []
    num_nodes = 0
    want = trace if trace is not None else (example_inputs is not None or bool(known.pending) or not known.blocks)
    used_keys: set[str] = set()
    graph_causal: dict[str, BlockDecoding] = {}
    if want:
        inputs = example_inputs
        if inputs is None:
            inputs, how = make_example_inputs(model)
            if inputs is not None:
                warnings.append(f"traced on made-up inputs: {how}")
        if inputs is None:
            if known.pending:
                warnings.append("not traced (pass example_inputs to find custom attention): "
                                + ", ".join(p or label for p in known.pending))
        else:
            try:
                graph = trace_module(model, inputs, source=label)
            except InputError as exc:
                warnings.append(f"not traced: {exc}")
            else:
                num_nodes = len(graph.nodes)
                warnings.extend(graph.warnings)
                report = analyze_graph(graph, path=label, fmt="torch")
                scopes = {n.name: n.scope for n in graph.nodes}
                for b in report.blocks:
                    keys = {graph.weights[p.weight].storage_key for p in b.projections
                            if p.weight is not None and p.weight in graph.weights}
                    if keys & known.storage_keys:
                        continue  # a recognised module: its block is already there
                    used_keys |= keys
                    if not scopes.get(b.anchor, "x"):
                        # The attention core is the root module's own code: name the block after it.
                        b = dataclasses.replace(b, name=type(model).__name__)
                    traced.append(b)
                misses.extend(report.misses)
                graph_causal = causal_in_graph(graph, traced)
    headless = [b for b in known.headless if not _uses(b, model, used_keys)]
    blocks = list(known.blocks) + traced + headless
    report = build_report(blocks, path=label, fmt="torch", total_params=count_parameters(model),
                          num_nodes=num_nodes, producer=f"torch {torch.__version__}", misses=misses,
                          warnings=warnings, what_if_heads=what_if_heads,
                          size=module_size_inputs(model, blocks, graph_causal))
    # torchinfo's split: a live module knows which parameters train (a file does not).
    summary = dataclasses.replace(report.model, trainable_params=count_parameters(model, trainable_only=True))
    return dataclasses.replace(report, model=summary)


def _uses(block: AttentionBlock, model: nn.Module, keys: set[str]) -> bool:
    from mhainspect.loaders.torch_fx import storage_key

    params = dict(model.named_parameters(remove_duplicate=False))
    for p in block.projections:
        t = params.get(p.weight or "")
        if t is not None and storage_key(t) in keys:
            return True
    return False


def make_example_inputs(model: nn.Module) -> tuple[Any, str]:
    """Inputs for tracing when the caller gave none: token ids for transformers models, else one
    [2, 8, d] tensor per required forward argument (d: the first Linear's in_features)."""
    first = next(iter(model.parameters()), None)
    device = first.device if first is not None else torch.device("cpu")
    dtype = first.dtype if first is not None and first.is_floating_point() else torch.float32
    config = getattr(model, "config", None)
    main = getattr(model, "main_input_name", None)
    if config is not None and main == "input_ids":
        ids = torch.zeros(EXAMPLE_BATCH, EXAMPLE_SEQ, dtype=torch.long, device=device)
        return {"input_ids": ids}, f"input_ids of shape [{EXAMPLE_BATCH}, {EXAMPLE_SEQ}]"
    if config is not None and main == "pixel_values":
        size = getattr(config, "image_size", None)
        channels = getattr(config, "num_channels", 3)
        if isinstance(size, int) and isinstance(channels, int):
            px = torch.zeros(EXAMPLE_BATCH, channels, size, size, dtype=dtype, device=device)
            return {"pixel_values": px}, f"pixel_values of shape [{EXAMPLE_BATCH}, {channels}, {size}, {size}]"
    try:
        sig = pyinspect.signature(model.forward)
    except (TypeError, ValueError):
        return None, ""
    required = [p for p in sig.parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not required:
        return None, ""
    leaf = next((m for m in model.modules() if isinstance(m, (nn.Linear, nn.Embedding, nn.MultiheadAttention))),
                None)
    if isinstance(leaf, nn.Embedding):
        ids = torch.zeros(EXAMPLE_BATCH, EXAMPLE_SEQ, dtype=torch.long, device=device)
        return (ids,) * len(required), f"{len(required)} token-id tensor(s) of shape [{EXAMPLE_BATCH}, {EXAMPLE_SEQ}]"
    width = leaf.in_features if isinstance(leaf, nn.Linear) else getattr(leaf, "embed_dim", None)
    if not isinstance(width, int):
        return None, ""
    x = torch.zeros(EXAMPLE_BATCH, EXAMPLE_SEQ, width, dtype=dtype, device=device)
    return (x,) * len(required), (f"the same [{EXAMPLE_BATCH}, {EXAMPLE_SEQ}, {width}] tensor for "
                                  + ", ".join(p.name for p in required))
