"""mhainspect: audit the multi-head-attention blocks of a model without running it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["__version__", "inspect"]

if TYPE_CHECKING:
    from mhainspect.api import inspect


def __getattr__(name: str) -> Any:
    # Lazy: importing mhainspect must not import torch (or the analysis) until asked.
    if name == "inspect":
        from mhainspect.api import inspect

        return inspect
    raise AttributeError(f"module 'mhainspect' has no attribute {name!r}")
