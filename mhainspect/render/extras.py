"""What a run adds to each report beyond the analysis: gate results and the flags --ignore dropped.

The CLI (or an API caller) builds one ModelExtras per report; renderers show it where the
format has room. Pure data."""

from __future__ import annotations

from dataclasses import dataclass

from mhainspect.analysis.gates import GateResult

__all__ = ["NO_EXTRAS", "ModelExtras"]


@dataclass(frozen=True)
class ModelExtras:
    """Gate results (passed and failed) and (code, count) of the flags --ignore dropped."""

    gates: tuple[GateResult, ...] = ()
    ignored: tuple[tuple[str, int], ...] = ()


NO_EXTRAS = ModelExtras()
