"""Python API: ``mhainspect.inspect(obj, example_inputs=None, **kwargs) -> Report``.

``obj`` is an ``nn.Module`` or a path (``.onnx``, ``.safetensors``, ``.pt/.pth/.bin``, a Hugging
Face folder with config.json). Pure service: returns a Report, raises InputError; never prints.
"""

from __future__ import annotations

import os
from typing import Any

from mhainspect.errors import InputError, MissingDependencyError
from mhainspect.findings import Report
from mhainspect.sources import TORCH_HINT


def inspect(obj: Any, example_inputs: Any = None, *, what_if_heads: tuple[int, ...] = (),
            trace: bool | None = None, name: str | None = None, context: int | None = None, batch: int = 1,
            kv_dtype: str | None = None) -> Report:
    """Audit the attention blocks of a module or a model file.

    For a module, known attention modules (nn.MultiheadAttention, Hugging Face attention) are read
    from their attributes; the model is traced (torch.export on fake tensors) when
    ``example_inputs`` are given, when an attention-like module is not recognised, or when
    ``trace=True``. Traced blocks whose weights belong to a recognised module are dropped, so
    nothing counts twice. ``trace=False`` never traces. ``context``, ``batch`` and ``kv_dtype``
    size the KV cache (``report.model.kv_cache.total_bytes``) as --context, --batch and --kv-dtype do.
    """
    from mhainspect.size import SizeOptions, with_options

    options = SizeOptions(context, batch, kv_dtype)
    heads = tuple(int(h) for h in what_if_heads)
    if isinstance(obj, (str, os.PathLike)):
        from mhainspect.sources import analyze_file

        return with_options(analyze_file(os.fspath(obj), what_if_heads=heads), options)
    try:
        from torch import nn
    except ImportError:
        raise MissingDependencyError(f"auditing a {type(obj).__name__} needs PyTorch: {TORCH_HINT}") from None
    if not isinstance(obj, nn.Module):
        raise InputError(f"expected an nn.Module or a model path, got {type(obj).__name__}")
    from mhainspect.torch_inspect import inspect_module

    return with_options(inspect_module(obj, example_inputs, what_if_heads=heads, trace=trace, name=name), options)
