"""What every toolchain fixture script shares: the truth JSON written beside each ONNX file, and
the onnxruntime ``quantize_dynamic`` int8 copy of each export.

A fixture is ``NAME.onnx`` (and ``NAME.int8.onnx``, its dynamic int8 copy) with ``NAME.json``: the
truth read from the framework's own layer objects (heads, K/V heads, d_k, d_v, d_model, each
attention layer's parameters, the model's total), never from the exported graph. The scripts run in
the toolchain's own environment (tensorflow, jax, paddle are not installed next to the project);
this module imports only the standard library, onnx and onnxruntime.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "toolchains"
NOISE = 0.02  # added to every parameter: no zero bias or unit norm left for an exporter to fold away


def block(*, heads: int, kv_heads: int, d_k: int, d_v: int, d_model: int, params: int, kind: str = "self",
          layer: str = "") -> dict[str, Any]:
    """One attention layer as the framework's layer object says it (``layer``: its name there)."""
    return {"layer": layer, "kind": kind, "heads": heads, "kv_heads": kv_heads, "d_k": d_k, "d_v": d_v,
            "d_model": d_model, "params": params}


def write(toolchain: str, name: str, onnx_path: Path, *, source: str, blocks: Sequence[Mapping[str, Any]],
          total: int, versions: Mapping[str, str], quantize: bool = True, notes: str = "") -> None:
    """The truth JSON beside ``onnx_path`` (and the int8 copy, which shares it)."""
    truth = {"toolchain": toolchain, "model": name, "source": source, "versions": dict(versions),
             "blocks": [dict(b) for b in blocks], "total_params": total}
    if notes:
        truth["notes"] = notes
    onnx_path.with_suffix(".json").write_text(json.dumps(truth, indent=1) + "\n")
    if quantize:
        quantize_copy(onnx_path)
    size = sum(p.stat().st_size for p in onnx_path.parent.glob(f"{name}*"))
    print(f"{toolchain}/{name}: {len(blocks)} attention layers, {total:,} params, {size:,} bytes", file=sys.stderr)


def quantize_copy(onnx_path: Path) -> Path:
    """onnxruntime's dynamic int8 quantization of ``onnx_path`` as NAME.int8.onnx (weights int8,
    activations quantized at run time): what a user deploying on CPU does to an export."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = onnx_path.with_name(onnx_path.stem + ".int8.onnx")
    quantize_dynamic(str(onnx_path), str(out), weight_type=QuantType.QInt8)
    return out


def record_failure(toolchain: str, name: str, exc: BaseException) -> None:
    """A model the toolchain could not export: its first error line, in TOOLCHAIN/failures.json
    (the toolchain table in docs/conformance.md lists it)."""
    path = out_dir(toolchain) / "failures.json"
    failures = json.loads(path.read_text()) if path.is_file() else {}
    root = exc
    while (root.__cause__ or root.__context__) is not None:  # the error that started it
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    lines = [ln for ln in str(root).strip().splitlines() if ln.strip()]
    failures[name] = f"{type(root).__name__}: {lines[0][:300] if lines else ''}"
    path.write_text(json.dumps(dict(sorted(failures.items())), indent=1) + "\n")
    print(f"{toolchain}/{name}: export failed: {failures[name]}", file=sys.stderr)


def clear_failure(toolchain: str, name: str) -> None:
    path = out_dir(toolchain) / "failures.json"
    if path.is_file():
        failures = json.loads(path.read_text())
        if failures.pop(name, None) is not None:
            path.write_text(json.dumps(failures, indent=1) + "\n")


def out_dir(toolchain: str) -> Path:
    path = DATA / toolchain
    path.mkdir(parents=True, exist_ok=True)
    return path


def versions(*modules: str) -> dict[str, str]:
    """The installed version of each named distribution (what made the files)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for m in modules:
        try:
            out[m] = version(m)
        except PackageNotFoundError:
            out[m] = "?"
    return out


def only(argv: Sequence[str]) -> set[str]:
    """Fixture names given on the command line (none: all)."""
    return set(argv[1:])


os.environ.setdefault("PYTHONHASHSEED", "0")
