"""Where an ONNX initializer came from, as the torch dynamo exporter records it.

torch.onnx (dynamo) writes, in value_info metadata, the torch.export input kind of each
initializer (PARAMETER, BUFFER, CONSTANT_TENSOR) and, for constants its optimizer folded,
the names they were folded from. A transposed Linear weight folded into ``val_30`` is still the
parameter ``layer.0.q.weight``; a causal mask folded from ``arange``/``expand`` is no parameter.
TorchScript exports carry none of this: their tensors keep ``kind=None`` and the counting
heuristics apply, but for one thing both torch exporters share: every parameter and buffer is an
initializer, so a Constant node in a file torch wrote holds a value the trace computed (a
sinusoidal position table, a rotary sin/cos cache, ALiBi slopes, the ones and zeros a LayerNorm
without weight or bias is given): ``kind=TensorKind.CONSTANT``, never a parameter.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping

from mhainspect.ir.graph import Tensor, TensorKind

_KIND_KEY = "pkg.torch.export.graph_signature.InputSpec.kind"
_FOLDED_KEY = "pkg.onnxscript.optimizer.folded_from"
_KINDS = {"PARAMETER": TensorKind.PARAMETER, "BUFFER": TensorKind.BUFFER, "CONSTANT_TENSOR": TensorKind.CONSTANT}
_TORCH_PRODUCER = "pytorch"  # ModelProto.producer_name of torch.onnx.export (TorchScript and dynamo)


def _folded_from(value: str) -> tuple[str, ...]:
    return tuple(string_list(value) or ())


def string_list(value: str) -> list[str] | None:
    """A list (or tuple) literal from exporter metadata, entries as str; None when it is not one.

    ``ast.literal_eval``'s answer, without compiling the plain "['a.b', 'c']" form the exporter writes.
    """
    names: object = _plain_string_list(value)
    if names is None:
        try:
            names = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
    if isinstance(names, (list, tuple)):
        return [str(n) for n in names]
    return None


def _plain_string_list(value: str) -> list[str] | None:
    """ast.literal_eval(value) for "['a.b', 'c']" (the exporter's form) without compiling it; None
    for anything else: other spacing, escapes, quotes or line breaks in an entry, ..."""
    if len(value) < 2 or value[0] != "[" or value[-1] != "]":
        return None
    inner = value[1:-1]
    if not inner:
        return []
    if len(inner) < 2 or inner[0] != "'" or inner[-1] != "'" or any(c in inner for c in _SPECIAL):
        return None
    inner = inner[1:-1]
    parts = inner.split("', '")
    if inner.count("'") != 2 * (len(parts) - 1):  # a quote inside an entry (each separator has two)
        return None
    return parts


# Characters a plain one-line '...' literal cannot hold as they are (literal_eval also refuses NUL).
_SPECIAL = ("\\", '"', "\n", "\r", "\x00")


# A pattern string, compiled by re on first use: only torch.export files carry a signature.
_SIGNATURE_LINE = r"^\s*\w+:\s*(PARAMETER|BUFFER|CONSTANT_TENSOR)\s+target='([^']+)'"


def signature_kinds(signature: str) -> dict[str, TensorKind]:
    """Kinds by target name from the ExportedProgram graph signature the exporter stores as text."""
    return {target: _KINDS[kind] for kind, target in re.findall(_SIGNATURE_LINE, signature, re.MULTILINE)}


def constant_node_kind(producer_name: str) -> TensorKind | None:
    """The kind of a Constant-node tensor in a file ``producer_name`` wrote: CONSTANT for torch
    (module doc), else None (unknown)."""
    return TensorKind.CONSTANT if producer_name == _TORCH_PRODUCER else None


def _folded_params(sources: tuple[str, ...], kinds: Mapping[str, TensorKind | None]) -> list[str]:
    return sorted(s for s in sources if kinds.get(s) is TensorKind.PARAMETER)


def _folded_kind(sources: tuple[str, ...], kinds: Mapping[str, TensorKind | None]
                 ) -> tuple[TensorKind, str | None, str]:
    """(kind, origin, storage) of a tensor the exporter's optimizer folded from ``sources``."""
    params = _folded_params(sources, kinds)
    other_tensors = [s for s in sources if kinds.get(s) in (TensorKind.BUFFER, TensorKind.CONSTANT)]
    # Parameters reshaped, transposed or concatenated (with index/shape helpers only) are still
    # those parameters; anything folded from buffers (masks, rotary tables) is not.
    if params and not other_tensors:
        return TensorKind.PARAMETER, params[0] if len(params) == 1 else None, "+".join(params)
    if not params and len(other_tensors) == 1 and kinds.get(other_tensors[0]) is TensorKind.CONSTANT:
        # A plain tensor attribute transposed or reshaped: still that constant.
        return TensorKind.CONSTANT, other_tensors[0], ""
    if not params and other_tensors and all(kinds.get(s) is TensorKind.CONSTANT for s in other_tensors):
        # Computed from several constants (a rotary cos/sin table from its frequencies): a value the
        # exporter computed, no tensor the model holds.
        return TensorKind.DERIVED, None, ""
    # One parameter looked up by buffers (a position table gathered by its position_ids, a Swin
    # bias table by its relative-position index): derived, with that parameter as its origin. How
    # many of the parameter's elements it holds only its values tell (mhainspect.ir.copies).
    one = params[0] if len(params) == 1 and all(kinds.get(s) is TensorKind.BUFFER for s in other_tensors) else None
    return TensorKind.DERIVED, one, ""


def apply_provenance(weights: Mapping[str, Tensor], metadata: Iterable[tuple[str, Mapping[str, str]]],
                     signature: str = "", producer_name: str = "") -> dict[str, Tensor]:
    """Weights with ``kind`` and ``origin`` filled from exporter metadata (name -> props), and
    Constant-node tensors of a torch export marked as constants (module doc)."""
    constant_kind = constant_node_kind(producer_name)
    if constant_kind is not None:  # the ONNX loader gives them this kind as it builds them: none is left
        weights = {name: t._replace(kind=constant_kind) if t.is_constant_node and t.kind is None else t
                   for name, t in weights.items()}
    props = {name: p for name, p in metadata if _KIND_KEY in p or _FOLDED_KEY in p}
    if not props:
        return dict(weights)
    # Parameters folded away (transposed into val_N) appear only in the signature.
    kinds: dict[str, TensorKind | None] = dict(signature_kinds(signature))
    kinds.update({name: _KINDS.get(p.get(_KIND_KEY, ""), None) for name, p in props.items() if _KIND_KEY in p})
    return {name: t if (p := props.get(name)) is None else _with_provenance(t, kinds.get(name), p, kinds)
            for name, t in weights.items()}


def _with_provenance(t: Tensor, kind: TensorKind | None, props: Mapping[str, str],
                     kinds: Mapping[str, TensorKind | None]) -> Tensor:
    """``t`` with the kind its metadata (or the signature) gives; a tensor folded from others takes
    their kind, and a parameter's storage when it is one parameter transposed or reshaped."""
    origin = None
    storage_from = ""
    params: list[str] = []
    if kind is None and _FOLDED_KEY in props:
        sources = _folded_from(props[_FOLDED_KEY])
        kind, origin, storage_from = _folded_kind(sources, kinds)
        params = _folded_params(sources, kinds)
    storage = f"param:{storage_from}" if storage_from else t.storage_key
    return t._replace(kind=kind, origin=origin, storage_key=storage,
                      folded_params=tuple(params) if len(params) > 1 else ())


def folded_away_note(weights: Mapping[str, Tensor]) -> str | None:
    """A warning naming the parameters a file holds only inside values the exporter computed from
    several parameters, none of them on its own (a Q projection's weight, folded with learned tokens
    and a norm's weight into the stored Q): their sizes are not in the file, so the total leaves them
    out and counts the computed values' elements instead. A value folded from several parameters may
    also be them side by side (an LSTM's two biases concatenated); it is a computation only when it
    has no room for the others: no more elements than one of its sources the file holds elsewhere.
    None when there are none."""
    combined = [t for t in weights.values() if t.folded_params]
    if not combined:
        return None
    held: dict[str, int] = {}  # parameter -> the most elements a stored tensor holds of it
    for t in weights.values():
        for name in (t.name, t.origin, t.storage_key.removeprefix("param:") if "+" not in t.storage_key else None):
            if name:
                held[name] = max(held.get(name, 0), t.numel)
    away: dict[str, list[str]] = {}
    for t in combined:
        if not any(held.get(name, 0) >= t.numel for name in t.folded_params):
            continue  # room for every source: maybe them side by side
        for name in t.folded_params:
            if name not in held:
                away.setdefault(name, []).append(t.name)
    if not away:
        return None
    shown = "; ".join(f"{name} (in {', '.join(sorted(into))})" for name, into in sorted(away.items()))
    return (f"parameters the exporter folded into values computed from several parameters, held nowhere on "
            f"their own ({len(away)}): {shown}; their sizes are not in the file: the total leaves them out and "
            "counts the computed values' elements")
