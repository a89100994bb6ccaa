"""Report -> JSON-ready dict and JSON text.

The key names and their order are a contract (docs/report.schema.json; dashboards depend on
it): new keys may be added, existing ones are never renamed or removed. Every count is a
plain ``int``; floats that are not finite become ``null`` so the output is always valid JSON.
"""

from __future__ import annotations

import json
import math
import numbers
import operator
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, SupportsIndex

from mhainspect import __version__
from mhainspect.analysis.size import cache_reason
from mhainspect.results import (
    SCHEMA_VERSION,
    AttentionBlock,
    Evidence,
    FailedInput,
    Flag,
    KVCache,
    MemoryAtContext,
    Miss,
    ModelSummary,
    ParamBreakdown,
    Projection,
    Report,
    Severity,
    WhatIf,
)

if TYPE_CHECKING:
    from mhainspect.analysis.gates import GateResult
    from mhainspect.results.optional import BlockVerification, GpuFit, Mixer, MixtureOfExperts, WeightDtypeWhatIf

JSONDict = dict[str, Any]

__all__ = [
    "JSONDict",
    "error_record",
    "input_record",
    "report_to_dict",
    "report_to_json",
    "reports_to_dict",
    "reports_to_json",
    "reports_to_jsonl",
    "to_json",
    "to_jsonl",
]


def _int(value: SupportsIndex) -> int:
    """A plain int (numpy integers and bools normalised); floats are rejected, not truncated."""
    return operator.index(value)


def _opt_int(value: SupportsIndex | None) -> int | None:
    if type(value) is int:  # the common case first: ~15k calls for a 70B report
        return value
    return None if value is None else _int(value)


def _number(value: object) -> int | float | None:
    """int stays int, real becomes float; None, NaN and infinities become None."""
    if type(value) is int:  # plain int and float first: the ABC checks below cost ~3 us a value
        return value
    if type(value) is float:
        return value if math.isfinite(value) else None
    if value is None:
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        as_float = float(value)
        return as_float if math.isfinite(as_float) else None
    raise TypeError(f"expected a number, got {type(value).__name__}: {value!r}")


def _scalar(value: object) -> int | float | str | None:
    if isinstance(value, str):
        return value
    return _number(value)


def _severity(value: Severity | str) -> str:
    return value.value if isinstance(value, Severity) else str(value)


def _model(model: ModelSummary) -> JSONDict:
    total = _int(model.total_params)
    attention = _int(model.attention_params)
    return {
        "path": model.path,
        "format": model.format,
        "total_params": total,
        "attention_params": attention,
        "num_nodes": _int(model.num_nodes),
        "opset": _opt_int(model.opset),
        "producer": model.producer,
        # extension
        "attention_share": _share(attention, total),
        **({} if model.trainable_params is None else {"trainable_params": _int(model.trainable_params)}),
        # size in bytes (mhainspect.analysis.size)
        "weight_bytes": _opt_int(model.weight_bytes),
        "weight_bytes_by_dtype": {str(name): _int(n) for name, n in model.weight_bytes_by_dtype},
        "weight_bytes_overhead": _opt_int(model.weight_bytes_overhead),
        "kv_cache": None if model.kv_cache is None else _kv_cache(model.kv_cache),
        # only when there is one: a mixture of experts, a context to size memory at, --weight-dtype
        **({} if model.experts is None else {"experts": _experts(model.experts)}),
        **({} if model.memory is None else {"memory": _memory(model.memory)}),
        **({} if model.weight_dtype is None else {"weight_dtype": _weight_dtype(model.weight_dtype)}),
        **({} if model.fit is None else {"fit": _fit(model.fit)}),
        # only for a model with layers that are no softmax attention (linear attention, SSM, convolution)
        **({"mixers": [_mixer(m) for m in model.mixers]} if model.mixers else {}),
    }


def _fit(fit: GpuFit) -> JSONDict:
    return {
        "gpu_memory_bytes": _int(fit.gpu_memory_bytes),
        "gpus": _int(fit.gpus),
        "status": str(fit.status),
        "weight_dtype": fit.weight_dtype,
        "weight_bytes_per_gpu": _opt_int(fit.weight_bytes_per_gpu),
        "free_bytes_per_gpu": _opt_int(fit.free_bytes_per_gpu),
        "kv_dtype": fit.kv_dtype,
        "kv_bytes_per_token_per_gpu": _opt_int(fit.kv_bytes_per_token_per_gpu),
        "state_bytes_per_sequence_per_gpu": _int(fit.state_bytes_per_sequence_per_gpu),
        "batch": _int(fit.batch),
        "max_context": _opt_int(fit.max_context),
        "context": _opt_int(fit.context),
        "context_source": fit.context_source,
        "max_batch": _opt_int(fit.max_batch),
        "notes": list(fit.notes),
        "reason": fit.reason,
    }


def _mixer(m: Mixer) -> JSONDict:
    return {
        "kind": m.kind.value,
        "count": _int(m.count),
        "layers": [_int(i) for i in m.layers],
        "source": m.source,
        "state_bytes_per_layer": _opt_int(m.state_bytes_per_layer),
        "state_bytes_per_sequence": _opt_int(m.state_bytes_per_sequence),
        "dtype": m.dtype,
        "state_source": m.state_source,
        "reason": m.reason,
    }


def _experts(moe: MixtureOfExperts) -> JSONDict:
    return {
        "moe_layers": _int(moe.moe_layers),
        "num_experts": _opt_int(moe.num_experts),
        "experts_per_token": _opt_int(moe.experts_per_token),
        "num_shared_experts": _opt_int(moe.num_shared_experts),
        "expert_params": _int(moe.expert_params),
        "params_per_expert": _opt_int(moe.params_per_expert),
        "shared_expert_params": _int(moe.shared_expert_params),
        "active_params": _opt_int(moe.active_params),
        "reason": moe.reason,
        "evidence": [_evidence(e) for e in moe.evidence],
    }


def _memory(memory: MemoryAtContext) -> JSONDict:
    return {
        "context": _int(memory.context),
        "context_source": memory.context_source,
        "batch": _int(memory.batch),
        "weight_bytes": _opt_int(memory.weight_bytes),
        "kv_cache_bytes": _opt_int(memory.kv_cache_bytes),
        "total_bytes": _opt_int(memory.total_bytes),
        "reason": memory.reason,
        **({} if memory.state_bytes is None else {"state_bytes": _int(memory.state_bytes)}),
    }


def _weight_dtype(what_if: WeightDtypeWhatIf) -> JSONDict:
    return {
        "asked": what_if.asked,
        "dtype": what_if.dtype,
        "bits_per_element": _number(what_if.bits_per_element),
        "bytes": _int(what_if.bytes),
        "memory_bytes": _opt_int(what_if.memory_bytes),
        "note": what_if.note,
    }


def _kv_cache(kv: KVCache) -> JSONDict:
    data: JSONDict = {
        "bytes_per_token": _opt_int(kv.bytes_per_token),
        "dtype": kv.dtype,
        "context": _opt_int(kv.context),
        "batch": _int(kv.batch),
        "total_bytes": _opt_int(kv.total_bytes),
        "bytes_per_encoder_token": _opt_int(kv.bytes_per_encoder_token),
        "reason": kv.reason,
        "status": kv.status.value,
    }
    if kv.expanded_bytes_per_token is not None:  # only when some caching block is latent attention
        data["expanded_bytes_per_token"] = _int(kv.expanded_bytes_per_token)
        data["expanded_total_bytes"] = _opt_int(kv.expanded_total_bytes)
    if kv.indexer_bytes_per_token is not None:  # only with a sparse-attention indexer
        data["indexer_bytes_per_token"] = _int(kv.indexer_bytes_per_token)
    if kv.state_bytes_per_sequence is not None or kv.state_reason is not None:  # only beside state-keeping mixers
        data["state_bytes_per_sequence"] = _opt_int(kv.state_bytes_per_sequence)
        data["state_reason"] = kv.state_reason
    if kv.not_counted is not None:  # only when layers of a kind not known here are left out
        data["lower_bound"] = bool(kv.lower_bound)
        data["not_counted"] = kv.not_counted
    return data


def _params(params: ParamBreakdown) -> JSONDict:
    return {
        "q": _int(params.q),
        "k": _int(params.k),
        "v": _int(params.v),
        "o": _int(params.o),
        "total": _int(params.total),
        "bias": _int(params.bias),
        "extra": _int(params.extra),
        # Present only where they apply (a latent block; learned K/V rows), so other blocks' keys stay as they were.
        **({"latent": _int(params.latent)} if params.latent else {}),
        **({"kv_rows": _int(params.kv_rows)} if params.kv_rows else {}),
        **({"indexer": _int(params.indexer)} if params.indexer else {}),
        **({"gate": _int(params.gate)} if params.gate else {}),
    }


def _projection(proj: Projection) -> JSONDict:
    return {
        "role": proj.role,
        "weight": proj.weight,
        "in_features": _opt_int(proj.in_features),
        "out_features": _opt_int(proj.out_features),
        "weight_params": _int(proj.weight_params),
        "bias": proj.bias,
        "bias_params": _int(proj.bias_params),
        "node": proj.node,
        # Present only on a role with a Q/K norm, so other projections' keys stay as they were.
        **({"norm": proj.norm, "norm_params": _int(proj.norm_params), "norm_shared": proj.norm_shared}
           if proj.norm is not None else {}),
        **({"conv": proj.conv, "conv_params": _int(proj.conv_params)} if proj.conv is not None else {}),
    }


def _evidence(ev: Evidence) -> JSONDict:
    return {"field": ev.field, "value": _number(ev.value), "source": ev.source, "detail": ev.detail}


def _what_if(w: WhatIf) -> JSONDict:
    return {
        "num_heads": _int(w.num_heads),
        "total_width_fixed": _opt_int(w.total_width_fixed),
        "head_dim_fixed": _int(w.head_dim_fixed),
    }


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 6) if whole else None


def _verification(v: BlockVerification) -> JSONDict:
    return {
        "status": v.status,
        "observed_heads": _opt_int(v.observed_heads),
        "observed_kv_heads": _opt_int(v.observed_kv_heads),
        "reason": v.reason,
    }


def _block(block: AttentionBlock, model_total: int) -> JSONDict:
    params = _params(block.params)
    data: JSONDict = {
        "name": block.name,
        "matcher": block.matcher,
        "kind": block.kind,
        "num_heads": _opt_int(block.num_heads),
        "num_kv_heads": _opt_int(block.num_kv_heads),
        "d_model": _opt_int(block.d_model),
        "d_k": _opt_int(block.d_k),
        "d_v": _opt_int(block.d_v),
        "scale": _number(block.scale),
        "params": params,
        "projections": [_projection(p) for p in block.projections],
        "evidence": [_evidence(e) for e in block.evidence],
        "what_if": [_what_if(w) for w in block.what_if],
        "unknown_reason": block.unknown_reason,
        "conflicts": list(block.conflicts),
        "share": _share(params["total"], model_total),
        # extensions
        "scale_known": bool(block.scale_known),
        "anchor": block.anchor,
        # size in bytes (mhainspect.analysis.size)
        "weight_bytes": _opt_int(block.weight_bytes),
        "kv_cache_bytes_per_token": _opt_int(block.kv_cache_bytes_per_token),
        "kv_cache_dtype": block.kv_cache_dtype,
        "kv_cache_reason": cache_reason(block),
        "kv_cache_status": None if block.kv_cache_status is None else block.kv_cache_status.value,
        "sliding_window": _opt_int(block.sliding_window),
    }
    if block.latent is not None:  # only for latent attention (DeepSeek's MLA)
        data["latent"] = {"kv_rank": _int(block.latent.kv_rank), "rope_dim": _int(block.latent.rope_dim),
                          "q_rank": _opt_int(block.latent.q_rank), "cached_width": _int(block.latent.cached_width),
                          "tensors": list(block.latent.tensors), "runtime_expands": bool(block.latent.runtime_expands)}
        data["kv_cache_expanded_bytes_per_token"] = _opt_int(block.kv_cache_expanded_bytes_per_token)
    if block.indexer is not None:  # only for sparse attention with an indexer's weights (DeepSeek-V3.2)
        data["indexer"] = {"module": block.indexer.module, "d_k": _int(block.indexer.d_k),
                           "num_heads": _opt_int(block.indexer.num_heads), "tensors": list(block.indexer.tensors)}
    if block.kv_cache_indexer_bytes_per_token:  # only for sparse attention with an indexer (DeepSeek-V3.2)
        data["kv_cache_indexer_bytes_per_token"] = _int(block.kv_cache_indexer_bytes_per_token)
    if block.applications != 1:  # only for a module whose weights one run applies several times
        data["applications"] = _int(block.applications)
    if block.kv_cache_shared_from is not None:  # only for a layer that reads another layer's K/V cache
        data["kv_cache_shared_from"] = block.kv_cache_shared_from
    if block.verification is not None:  # only when --verify ran
        data["verify"] = _verification(block.verification)
    return data


def _flag(flag: Flag) -> JSONDict:
    return {
        "code": flag.code,
        "severity": _severity(flag.severity),
        "block": flag.block,
        "message": flag.message,
        "data": {str(key): _scalar(value) for key, value in flag.data},
    }


def _miss(miss: Miss) -> JSONDict:
    # ``node``: where the match failed; a miss that names no node of its own failed at its anchor.
    return {"matcher": miss.matcher, "anchor": miss.anchor, "reason": miss.reason, "node": miss.node or miss.anchor}


def _gate(result: GateResult) -> JSONDict:
    return {
        "gate": result.gate,
        "passed": bool(result.passed),
        "actual": _int(result.actual),
        "limit": _opt_int(result.limit),
        "code": result.code,
        "source": result.source,
        "message": result.message,
    }


def report_to_dict(report: Report, *, gates: Sequence[GateResult] = (),
                   ignored: Sequence[tuple[str, int]] = ()) -> JSONDict:
    """The single-model JSON document (docs/report.schema.json), in declared order.

    ``gates`` (the run's gate results, passed and failed) and ``ignored`` ((code, count) of the
    flags --ignore dropped) add the keys ``gates`` and ``ignored_flags`` when given."""
    model = _model(report.model)
    data: JSONDict = {
        "schema_version": report.schema_version,
        "tool_version": __version__,
        "model": model,
        "blocks": [_block(b, model["total_params"]) for b in report.blocks],
        "flags": [_flag(f) for f in report.flags],
        "misses": [_miss(m) for m in report.misses],
        "warnings": list(report.warnings),
    }
    if gates:
        data["gates"] = [_gate(g) for g in gates]
    if ignored:
        data["ignored_flags"] = {code: _int(n) for code, n in ignored}
    return data


def reports_to_dict(reports: Iterable[Report], *, docs: Sequence[JSONDict] | None = None,
                    failed: Sequence[FailedInput] = ()) -> JSONDict:
    """The multi-model JSON document (docs/multi-report.schema.json); ``docs`` are the models'
    documents when already built (with their gates); ``failed``: the inputs that could not be
    audited, an ``errors`` entry each (the key only when there is one)."""
    models = list(docs) if docs is not None else [report_to_dict(r) for r in reports]
    data: JSONDict = {"schema_version": SCHEMA_VERSION, "tool_version": __version__, "models": models}
    if failed:
        data["errors"] = [{"input": f.input, "kind": f.kind, "message": f.message} for f in failed]
    return data


def input_record(input: str, doc: JSONDict) -> JSONDict:
    """A line of a --from-file run for an audited model: its input line first, then the report."""
    return {"input": input, **doc}


def error_record(input: str, kind: str, message: str) -> JSONDict:
    """A line of a --from-file run for an input (or one model of it) that could not be audited
    (docs/batch-record.schema.json): ``kind`` from the stable vocabulary of ErrorKind."""
    return {"input": input, "schema_version": SCHEMA_VERSION, "tool_version": __version__,
            "error": {"kind": kind, "message": message}}


def to_json(data: JSONDict) -> str:
    """A document as pretty JSON (indent=2, keys in declared order) with a trailing newline."""
    return _dumps_pretty(data)


def to_jsonl(docs: Iterable[JSONDict]) -> str:
    """One compact document per line (JSON Lines); empty string for none."""
    return "".join(json.dumps(d, separators=(",", ":"), allow_nan=False) + "\n" for d in docs)


def _dumps_pretty(data: JSONDict) -> str:
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


def report_to_json(report: Report) -> str:
    """Pretty JSON (indent=2, keys in declared order) with a trailing newline."""
    return _dumps_pretty(report_to_dict(report))


def reports_to_json(reports: Iterable[Report]) -> str:
    """``{"schema_version": ..., "models": [<report>, ...]}`` as pretty JSON."""
    return _dumps_pretty(reports_to_dict(reports))


def reports_to_jsonl(reports: Iterable[Report]) -> str:
    """One compact report document per line (JSON Lines); empty string for no reports."""
    return to_jsonl(report_to_dict(r) for r in reports)
