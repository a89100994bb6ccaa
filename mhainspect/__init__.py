"""mhainspect: audit the multi-head-attention blocks of a model without running it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhainspect.errors import ErrorKind, InputError
from mhainspect.lazy import lazy_exports

__version__ = "0.1.0"
__all__ = ["AuditFailure", "AuditRequest", "ErrorKind", "InputError", "Report", "Reports", "__version__", "audit_many",
           "audit_records", "calc", "compare", "diff", "inspect", "inspect_all", "run"]

if TYPE_CHECKING:
    from mhainspect.api import audit_many, audit_records, calc, compare, diff, inspect, inspect_all
    from mhainspect.batch import AuditFailure
    from mhainspect.pipeline import AuditRequest, run
    from mhainspect.results import Report, Reports

_LAZY = {"inspect": "mhainspect.api", "inspect_all": "mhainspect.api", "calc": "mhainspect.api",
         "compare": "mhainspect.api", "diff": "mhainspect.api", "audit_many": "mhainspect.api", "audit_records": "mhainspect.api",
         "AuditFailure": "mhainspect.batch", "Report": "mhainspect.results", "Reports": "mhainspect.results",
         "run": "mhainspect.pipeline", "AuditRequest": "mhainspect.pipeline"}


# Lazy: importing mhainspect must not import torch (or the analysis) until asked; dir(mhainspect)
# and completion list these names too.
__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
