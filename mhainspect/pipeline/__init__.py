"""The one way through the tool, for the CLI, the Python API and the batch runner.

- ``stages``: ``audit(source, options) -> Report``, one model through the front ends and the analysis;
- ``memory``: the kinds of model a run takes from memory (``ModuleSource``, ``GraphSource``), the
  Python API's;
- ``config``: the settings of ``[tool.mhainspect]`` and how they merge under the caller's;
- ``inputs``: MODEL arguments before a run: the models they name, --arg, --timeout (the faces ask
  here, never a front end);
- ``verify``: the --verify stage (the pipeline reads the file, the analysis runs and judges it);
- ``runner``: ``run(AuditRequest) -> outcomes``, every model of a request: expand, audit, verify,
  --ignore, gates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhainspect.lazy import lazy_exports
from mhainspect.pipeline.config import ConfigFinder, Settings
from mhainspect.pipeline.runner import Audited, AuditRequest, Outcome, report_of, run, run_unordered
from mhainspect.pipeline.stages import (
    AuditOptions,
    InMemory,
    Source,
    analyse,
    audit,
    collector_paused,
    reporting_progress,
    with_memory,
)

__all__ = ["AuditOptions", "AuditRequest", "Audited", "ConfigFinder", "Expansion", "GraphSource", "InMemory",
           "ModelRef", "ModuleSource", "Outcome", "Settings", "Source", "VerifyRequest", "analyse", "audit",
           "audit_graph", "audit_module", "collector_paused", "expand", "factory_args", "model_argument",
           "parse_timeout", "report_of", "reporting_progress", "run", "run_unordered", "with_memory"]

if TYPE_CHECKING:
    from mhainspect.pipeline.inputs import Expansion, ModelRef, expand, factory_args, model_argument, parse_timeout
    from mhainspect.pipeline.memory import GraphSource, ModuleSource, audit_graph, audit_module
    from mhainspect.pipeline.verify import VerifyRequest

# Imported when asked for: a command-line run verifies rarely and never holds a model in memory
# (the Python API's sources), so neither module is on its path; MODEL arguments are expanded once
# the options are read (--version and --help never need it).
_LAZY = {"VerifyRequest": "mhainspect.pipeline.verify", "GraphSource": "mhainspect.pipeline.memory",
         "ModuleSource": "mhainspect.pipeline.memory", "audit_graph": "mhainspect.pipeline.memory",
         "audit_module": "mhainspect.pipeline.memory",
         **dict.fromkeys(("Expansion", "ModelRef", "expand", "factory_args", "model_argument", "parse_timeout"),
                         "mhainspect.pipeline.inputs")}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
