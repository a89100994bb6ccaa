"""Model arguments -> model files: a directory stands for every *.onnx and *.gguf file below it
(a split GGUF model once, by its first file).

Reads directory listings only (never a model); no printing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from mhainspect.errors import InputError
from mhainspect.sources import is_checkpoint_folder

__all__ = ["MODEL_SUFFIX", "expand_models"]

MODEL_SUFFIX = ".onnx"
GGUF_SUFFIX = ".gguf"
_SPLIT_PART = re.compile(r"^(?P<model>.+)-(?P<no>\d{5})-(?P<count>of-\d{5}\.gguf)$", re.IGNORECASE)


def _models_in(files: Iterable[str]) -> list[str]:
    """The model files among ``files``: *.onnx and *.gguf, a split GGUF model once (by its
    lowest-numbered part present: the loader reads every part, and says which one is missing)."""
    out: list[str] = []
    first_part: dict[tuple[str, str], str] = {}
    for name in files:
        low = name.lower()
        split = _SPLIT_PART.match(name) if low.endswith(GGUF_SUFFIX) else None
        if split is not None:
            key = (split.group("model"), split.group("count").lower())
            if key not in first_part or name < first_part[key]:
                first_part[key] = name
        elif low.endswith((MODEL_SUFFIX, GGUF_SUFFIX)):
            out.append(name)
    return out + list(first_part.values())


def _onnx_below(directory: Path) -> list[Path]:
    """Every model file (see ``_models_in``) under ``directory``, recursively, sorted; symlinked
    folders not followed."""
    found: list[Path] = []
    for root, _dirs, files in os.walk(directory):
        found.extend(Path(root) / name for name in _models_in(files))
    return sorted(p for p in found if p.is_file())


def expand_models(arguments: Iterable[Path]) -> tuple[Path, ...]:
    """Files as given (existence is checked later, by the loader); directories expanded in place.

    A directory without any *.onnx file raises InputError. A file reached twice is kept once,
    at its first position.
    """
    out: list[Path] = []
    seen: set[Path] = set()
    for arg in arguments:
        if arg.is_dir() and not is_checkpoint_folder(arg):
            models = _onnx_below(arg)
            if not models:
                raise InputError(f"{arg}: no *{MODEL_SUFFIX} or *{GGUF_SUFFIX} files in this directory")
        else:
            models = [arg]
        for model in models:
            key = Path(os.path.normpath(model))
            if key not in seen:
                seen.add(key)
                out.append(model)
    return tuple(out)
