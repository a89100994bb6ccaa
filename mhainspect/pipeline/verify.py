"""The --verify stage: the pipeline reads the ONNX file (the front end's reader) and hands the
analysis (``mhainspect.analysis.verify``) the parsed model, its graph and its folder; the analysis
runs it once in onnxruntime and judges every block. A failure of the run never costs the static
report: every block is then "unchecked" with the reason."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mhainspect.errors import InputError
from mhainspect.pipeline.stages import InMemory
from mhainspect.results import BlockVerification, Report, VerifyStatus, WarningCode, warning_code

if TYPE_CHECKING:
    import onnx

    from mhainspect.frontends.folders import ModelRef

__all__ = ["VerifyPlan", "VerifyRequest", "check_budget", "prepare", "verify_file", "verify_model"]


@dataclass(frozen=True)
class VerifyRequest:
    """--verify's options: symbolic input dims by name (--dim) and the weight budget in bytes
    (--max-verify-bytes; None: no budget)."""

    dims: Mapping[str, int] = field(default_factory=dict)
    max_bytes: int | None = None


@dataclass(frozen=True)
class VerifyPlan:
    """A run's --verify request, checked once for every model before any is audited."""

    request: VerifyRequest
    # The parsed file of a one-model run, kept for the run itself (the run adds outputs to it): one
    # parse serves the budget, --dim and the run. A many-model run keeps none, which would hold every
    # model's inline weights at once.
    models: dict[Path, onnx.ModelProto] = field(default_factory=dict)
    # Models listed only as they are audited (a --from-file run): each is checked against the budget
    # then, and one over it is left unchecked (the others still run).
    prechecked: bool = True


def _read(path: str | os.PathLike[str]) -> onnx.ModelProto:
    from mhainspect.frontends.onnx.loader import read_model_proto  # --verify only

    model: onnx.ModelProto = read_model_proto(path)
    return model


def check_budget(path: str | os.PathLike[str], max_bytes: int | None, model: onnx.ModelProto | None = None) -> int:
    """The weight bytes of the ONNX file ``path`` (``model``: already read); VerifyBudgetError when
    they exceed ``max_bytes``."""
    from mhainspect.analysis.verify import check_budget as within

    return within(str(path), max_bytes, model if model is not None else _read(path))


def prepare(request: VerifyRequest, paths: Sequence[ModelRef] | None) -> VerifyPlan:
    """Check the request against the models before any is audited: onnxruntime is there, no model's
    weights exceed the budget (VerifyBudgetError), every --dim names an input dimension of some
    model (InputError). ``paths`` None: the models are not known yet (each is checked as it is audited)."""
    from mhainspect.analysis import verify as verify_mod  # --verify only: the onnxruntime path

    verify_mod.require_runtime()
    if paths is None:
        return VerifyPlan(request, prechecked=False)
    models: dict[Path, onnx.ModelProto] = {}
    symbols: set[str] = set()
    for path in paths:
        if not isinstance(path, Path):
            continue  # a remote model: audited from its header, never run (see verify_model)
        if path.suffix.lower() == ".gguf":
            continue  # not run (see verify_model); parsing it as ONNX would read the whole file
        try:
            model = _read(path)
        except InputError:
            continue  # an unreadable model is reported by the analysis
        verify_mod.check_budget(str(path), request.max_bytes, model)
        symbols |= verify_mod.graph_input_symbols(model)
        if len(paths) == 1:
            models[path] = model
    unknown = sorted(set(request.dims) - symbols)
    if unknown:
        known = ", ".join(sorted(symbols)) or "none"
        raise InputError(f"--dim {', '.join(unknown)}: no input of the model{'s' if len(paths) > 1 else ''} has a "
                         f"dimension of that name (symbolic input dims: {known})")
    return VerifyPlan(request, models)


def verify_file(path: str | os.PathLike[str], report: Report, *, dims: Mapping[str, int] | None = None,
                inputs: Mapping[str, Any] | None = None,
                model: onnx.ModelProto | None = None) -> tuple[BlockVerification, ...]:
    """One verdict per block of ``report`` from one onnxruntime run of the ONNX file ``path``
    (``model``: already read; the run adds outputs to it)."""
    from mhainspect.analysis.verify import require_runtime, verify_report
    from mhainspect.frontends.onnx.loader import model_to_graph

    if not report.blocks:
        return ()
    require_runtime()
    if model is None:
        model = _read(path)
    graph = model_to_graph(model, source=str(path))
    return verify_report(model, graph, Path(path).parent, report, dims=dims, inputs=inputs)


def _unchecked(report: Report, reason: str) -> Report:
    from mhainspect.analysis.verify import attach

    return attach(report, tuple(BlockVerification(b.name, VerifyStatus.UNCHECKED, reason=reason) for b in report.blocks))


def verify_model(path: ModelRef | InMemory, report: Report, plan: VerifyPlan) -> Report:
    """``report`` with the run's verdict per block; a failure leaves every block unchecked with the reason."""
    from mhainspect.analysis.verify import VerifyBudgetError, attach

    if isinstance(path, InMemory):
        return _unchecked(report, "--verify runs local ONNX files only; a model in memory has no file to run")
    if not isinstance(path, Path):
        return _unchecked(report, "--verify runs local ONNX files only; a remote model is audited from its header")
    if report.model.format == "gguf":
        return _unchecked(report, "--verify runs ONNX models only; a GGUF file is audited from its header")
    if any(warning_code(w) is WarningCode.EXTERNAL_DATA_OUTSIDE for w in report.warnings):
        # Running would read weights from outside the model's folder: refused, nothing is opened.
        return _unchecked(report, "--verify refused: external data location outside the model folder (see warnings)")
    try:
        model = plan.models.pop(path, None)
        if not plan.prechecked:
            try:
                model = _read(path)
                check_budget(path, plan.request.max_bytes, model)
            except VerifyBudgetError as exc:
                return _unchecked(report, f"--verify refused: {exc}")
        return attach(report, verify_file(path, report, dims=plan.request.dims, model=model))
    except Exception as exc:  # the static report must survive any failure of the run
        if os.environ.get("MHAINSPECT_DEBUG"):
            raise
        return _unchecked(report, f"--verify failed ({type(exc).__name__}: {exc})")
