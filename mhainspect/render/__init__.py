"""Rendering layer: pure functions from Report(s) to text or JSON-ready data (no I/O).

``render(report, fmt)`` is the one entry point a caller needs: it imports only the chosen format's
renderer (the table's rich is a run's slowest import). Report's own ``to_json()``, ``to_text()``,
``to_markdown()``, ``to_dict()`` and its Jupyter view, and a calculation's ``print`` and Jupyter
view, call it when they are called (results/ sits below this layer, so they look it up then:
nothing is attached to Report at import).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mhainspect.conventions import Calculation, Comparison
    from mhainspect.results import Report

__all__ = ["FORMATS", "calc_to_dict", "render", "render_calc", "to_dict"]

# What render() draws: text (the terminal report, no colour), markdown, html (the notebook view:
# the HTML report's body), json.
FORMATS = ("text", "markdown", "html", "json")


def render(reports: Report | Sequence[Report], fmt: str, *, width: int | None = None) -> str:
    """``reports`` (one, or several: one row per model first) as ``fmt`` (one of FORMATS);
    ``width``: the text's columns (default 100). ValueError for another format."""
    if fmt == "json":
        from mhainspect.render.json_render import report_to_json, reports_to_dict, to_json

        return to_json(reports_to_dict(reports)) if isinstance(reports, Sequence) else report_to_json(reports)
    if fmt == "text":
        from mhainspect.render.table import render_text

        return render_text(reports, width=width or 100)
    if fmt == "markdown":
        from mhainspect.render.markdown import render_markdown

        return render_markdown(reports)
    if fmt == "html":
        from mhainspect.render.html import repr_html

        return repr_html(reports)
    raise ValueError(f"unknown format '{fmt}'; choose one of: {', '.join(FORMATS)}")


def to_dict(report: Report | Sequence[Report]) -> dict[str, Any]:
    """The JSON document of ``--format json`` as plain Python data: one report's
    (docs/report.schema.json), or several reports' (docs/multi-report.schema.json)."""
    from mhainspect.render.json_render import report_to_dict, reports_to_dict

    return reports_to_dict(report) if isinstance(report, Sequence) else report_to_dict(report)


def calc_to_dict(calculation: Calculation | Comparison) -> Any:
    """``calc -f json``'s data: one calculation's document, or ``--compare``'s list of rows."""
    from mhainspect.conventions import Calculation
    from mhainspect.render import calc_render

    if isinstance(calculation, Calculation):
        return calc_render.calc_document(calculation)
    return calc_render.compare_json(calculation)


def render_calc(calculation: Calculation | Comparison, fmt: str) -> str:
    """A ``calc`` result (one calculation, or ``compare()``'s rows) as ``text`` or ``html``, as
    ``mhainspect calc`` prints and shows it."""
    from mhainspect.conventions import Calculation

    if fmt == "text":
        from mhainspect.render import calc_render

        return (calc_render.calc_text(calculation, 100) if isinstance(calculation, Calculation)
                else calc_render.compare_text(calculation, 100))
    if fmt == "html":
        from mhainspect.render import calc_html

        return (calc_html.repr_calc_html(calculation) if isinstance(calculation, Calculation)
                else calc_html.repr_compare_html(calculation))
    raise ValueError(f"unknown format '{fmt}' for a calculation; choose text or html")
