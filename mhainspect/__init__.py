"""mhainspect: audit the multi-head-attention blocks of a model without running it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mhainspect.errors import InputError

__version__ = "0.1.0"
__all__ = ["InputError", "Report", "__version__", "calc", "compare", "inspect", "inspect_all"]

if TYPE_CHECKING:
    from mhainspect.api import calc, compare, inspect, inspect_all
    from mhainspect.findings import Report

_LAZY = {"inspect": "mhainspect.api", "inspect_all": "mhainspect.api", "calc": "mhainspect.api",
         "compare": "mhainspect.api", "Report": "mhainspect.findings"}


def __getattr__(name: str) -> Any:
    # Lazy: importing mhainspect must not import torch (or the analysis) until asked.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mhainspect' has no attribute {name!r}")
