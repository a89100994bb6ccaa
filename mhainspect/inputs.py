"""Model arguments -> models: a folder stands for every model below it.

Every supported model file counts (sources.MODEL_FILE_KINDS: .onnx, .gguf, .safetensors,
.pt/.pth/.bin/.ckpt, and what other front ends register there); a split GGUF model
(``*-00001-of-00003.gguf``) counts once, by its first part; a Hugging Face model folder
(config.json with its weights) is one model, not a folder of files. Reads directory listings
only (never a model); no printing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from mhainspect.errors import InputError
from mhainspect.sources import GGUF_SUFFIX, MODEL_FILE_KINDS, is_checkpoint_folder

__all__ = ["expand_models", "is_model_folder", "models_below"]

_SPLIT_PART = re.compile(r"^(?P<model>.+)-(?P<no>\d{5})-(?P<count>of-\d{5}\.gguf)$", re.IGNORECASE)


def _is_model_file(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in MODEL_FILE_KINDS


def _models_in(files: Iterable[str]) -> list[str]:
    """The model files among ``files``, a split GGUF model once (by its lowest-numbered part
    present: the loader reads every part, and says which one is missing)."""
    out: list[str] = []
    first_part: dict[tuple[str, str], str] = {}
    for name in files:
        split = _SPLIT_PART.match(name) if name.lower().endswith(GGUF_SUFFIX) else None
        if split is not None:
            key = (split.group("model"), split.group("count").lower())
            if key not in first_part or name < first_part[key]:
                first_part[key] = name
        elif _is_model_file(name):
            out.append(name)
    return out + list(first_part.values())


def is_model_folder(path: Path) -> bool:
    """A folder that is one model: a Hugging Face folder (config.json with weights), or a
    config.json with no model file beside it (the architecture alone, nothing to scan)."""
    if not path.is_dir():
        return False
    if is_checkpoint_folder(path):
        return True
    if not (path / "config.json").is_file():
        return False
    try:
        return not any(_is_model_file(p.name) for p in path.iterdir())
    except OSError:
        return False


def models_below(directory: Path) -> list[Path]:
    """Every model under ``directory``, recursively, sorted: model files, and Hugging Face folders
    as one model each (not looked into); symlinked folders are not followed."""
    found: list[Path] = []
    for root, dirs, files in os.walk(directory):
        here = Path(root)
        kept = []
        for d in sorted(dirs):
            if is_checkpoint_folder(here / d):
                found.append(here / d)
            else:
                kept.append(d)
        dirs[:] = kept
        found.extend(here / name for name in _models_in(files) if (here / name).is_file())
    return sorted(found)


def expand_models(arguments: Iterable[Path]) -> tuple[Path, ...]:
    """Files as given (existence is checked later, by the loader); folders expanded in place.

    A folder without any model raises InputError. A model reached twice is kept once, at its
    first position.
    """
    out: list[Path] = []
    seen: set[Path] = set()
    for arg in arguments:
        if arg.is_dir() and not is_model_folder(arg):
            models = models_below(arg)
            if not models:
                kinds = ", ".join(f"*{s}" for s in MODEL_FILE_KINDS)
                raise InputError(f"{arg}: no models in this folder (looked for {kinds} and Hugging Face "
                                 "folders with config.json)")
        else:
            models = [arg]
        for model in models:
            key = Path(os.path.normpath(model))
            if key not in seen:
                seen.add(key)
                out.append(model)
    return tuple(out)
