"""The models a run takes from this process's memory (``InMemory`` sources beside MODEL arguments):
an nn.Module and a graph built in the neutral IR, and the stage over each without a run's gates.
The Python API's; a command-line run never imports them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mhainspect.pipeline.stages import AuditOptions, InMemory, analyse

if TYPE_CHECKING:
    from mhainspect.ir.graph import ModelGraph
    from mhainspect.results import Report
    from mhainspect.results.stages import SourceResult


@dataclass(frozen=True, eq=False)  # one source per object: a module is no value to compare or hash by content
class ModuleSource(InMemory):
    """An nn.Module (needs the torch extra): known attention modules read from their attributes,
    traced when ``example_inputs`` are given, when an attention-like module is not recognised, or
    when ``trace`` is True (False: never); ``name``: its label (default: its class name)."""

    module: Any
    example_inputs: Any = None
    trace: bool | None = None
    name: str | None = None

    def __str__(self) -> str:
        return self.name or type(self.module).__name__

    def result(self) -> SourceResult:
        from mhainspect.frontends.torch.frontend import module_result

        return module_result(self.module, self.example_inputs, trace=self.trace, name=self.name)


@dataclass(frozen=True, eq=False)
class GraphSource(InMemory):
    """A graph already in the neutral IR (tests and tools that build one in memory); ``path``,
    ``fmt``: what the report says it was read from; ``config``: a config.json's content beside it."""

    graph: ModelGraph
    path: str | None = None
    fmt: str | None = None
    config: Mapping[str, Any] | None = None
    config_label: str = "config.json"

    def __str__(self) -> str:
        return self.path or self.graph.source

    def result(self) -> SourceResult:
        from mhainspect.ir.graph import GraphKind

        if self.graph.kind is GraphKind.ONNX:  # ONNX's own operators (QOperator ops, tensor sequences), its notes
            from mhainspect.frontends.onnx.frontend import onnx_graph_result as graph_result
        else:
            from mhainspect.frontends.graphs.result import graph_result
        return graph_result(self.graph, path=self.path, fmt=self.fmt, config=self.config,
                            config_label=self.config_label)




def audit_module(module: Any, example_inputs: Any = None, *, trace: bool | None = None, name: str | None = None,
                 options: AuditOptions | None = None) -> Report:
    """Audit an nn.Module (needs the torch extra): one ModuleSource, without a run's gates."""
    return analyse(ModuleSource(module, example_inputs, trace, name).result(), options)


def audit_graph(graph: ModelGraph, *, path: str | None = None, fmt: str | None = None,
                config: Mapping[str, Any] | None = None, config_label: str = "config.json",
                options: AuditOptions | None = None) -> Report:
    """Audit a graph already in the neutral IR: one GraphSource, without a run's gates."""
    return analyse(GraphSource(graph, path, fmt, config, config_label).result(), options)
