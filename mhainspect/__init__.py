"""mhainspect: audit the multi-head-attention blocks of a model without running it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mhainspect.errors import ErrorKind, InputError
from mhainspect.results import REPORT_RENDERERS

__version__ = "0.1.0"
__all__ = ["AuditFailure", "ErrorKind", "InputError", "Report", "Reports", "__version__", "audit_many", "audit_records",
           "calc", "compare", "inspect", "inspect_all"]

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mhainspect.api import audit_many, audit_records, calc, compare, inspect, inspect_all
    from mhainspect.batch import AuditFailure
    from mhainspect.results import Report, Reports

_LAZY = {"inspect": "mhainspect.api", "inspect_all": "mhainspect.api", "calc": "mhainspect.api",
         "compare": "mhainspect.api", "audit_many": "mhainspect.api", "audit_records": "mhainspect.api",
         "AuditFailure": "mhainspect.batch", "Report": "mhainspect.results", "Reports": "mhainspect.results"}


# Report's methods that render (findings sits below the renderers); each imports its renderer
# only when called, so importing mhainspect stays cheap.
def _to_dict(report: Report) -> dict[str, Any]:
    from mhainspect.render.json_render import report_to_dict

    return report_to_dict(report)


def _to_json(report: Report) -> str:
    from mhainspect.render.json_render import report_to_json

    return report_to_json(report)


def _html(reports: Report | Sequence[Report]) -> str:
    from mhainspect.render.html import repr_html

    return repr_html(reports)


def _text(reports: Report | Sequence[Report], width: int | None) -> str:
    from mhainspect.render.table import render_text

    return render_text(reports, width=width or 100)


def _markdown(reports: Report | Sequence[Report]) -> str:
    from mhainspect.render.markdown import render_markdown

    return render_markdown(reports)


REPORT_RENDERERS.to_dict = _to_dict
REPORT_RENDERERS.to_json = _to_json
REPORT_RENDERERS.html = _html
REPORT_RENDERERS.text = _text
REPORT_RENDERERS.markdown = _markdown
REPORT_RENDERERS.html_many = _html
REPORT_RENDERERS.text_many = _text
REPORT_RENDERERS.markdown_many = _markdown


def __getattr__(name: str) -> Any:
    # Lazy: importing mhainspect must not import torch (or the analysis) until asked.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mhainspect' has no attribute {name!r}")
