"""The one way through the tool, for the CLI, the Python API and the batch runner.

- ``stages``: ``audit(source, options) -> Report``, one model through the front ends and the analysis;
  the kinds of model a run takes from memory (``ModuleSource``, ``GraphSource``);
- ``config``: the settings of ``[tool.mhainspect]`` and how they merge under the caller's;
- ``inputs``: MODEL arguments before a run: the models they name, --arg, --timeout (the faces ask
  here, never a front end);
- ``verify``: the --verify stage (the pipeline reads the file, the analysis runs and judges it);
- ``runner``: ``run(AuditRequest) -> outcomes``, every model of a request: expand, audit, verify,
  --ignore, gates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mhainspect.pipeline.config import ConfigFinder, Settings
from mhainspect.pipeline.inputs import Expansion, ModelRef, expand, factory_args, model_argument, parse_timeout
from mhainspect.pipeline.runner import Audited, AuditRequest, Outcome, report_of, run, run_unordered
from mhainspect.pipeline.stages import (
    AuditOptions,
    GraphSource,
    InMemory,
    ModuleSource,
    Source,
    analyse,
    audit,
    audit_graph,
    audit_module,
    collector_paused,
    reporting_progress,
    with_memory,
)

__all__ = ["AuditOptions", "AuditRequest", "Audited", "ConfigFinder", "Expansion", "GraphSource", "InMemory",
           "ModelRef", "ModuleSource", "Outcome", "Settings", "Source", "VerifyRequest", "analyse", "audit", "audit_graph", "audit_module", "collector_paused", "expand",
           "factory_args", "model_argument", "parse_timeout", "report_of", "reporting_progress", "run", "run_unordered",
           "with_memory"]

if TYPE_CHECKING:
    from mhainspect.pipeline.verify import VerifyRequest


def __getattr__(name: str) -> Any:
    # The --verify stage is imported when a run verifies (or when its request type is asked for):
    # a run without --verify never needs it.
    if name == "VerifyRequest":
        from mhainspect.pipeline.verify import VerifyRequest

        return VerifyRequest
    raise AttributeError(f"module 'mhainspect.pipeline' has no attribute {name!r}")
