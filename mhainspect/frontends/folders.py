"""Model arguments -> models: a folder stands for every model below it.

Every supported model file counts (kinds.MODEL_FILE_KINDS: .onnx, .gguf, .safetensors,
.pt/.pth/.bin/.ckpt, and what other front ends register there); a split GGUF model
(``*-00001-of-00003.gguf``) counts once, by its first part; a Hugging Face model folder
(config.json with its weights) is one model, not a folder of files. Reads directory listings
only (never a model); no printing. What counts as a model file or a one-model folder is
kinds.py's to decide (file_kind, is_model_folder), the same rule dispatch.classify() uses.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from mhainspect.errors import ErrorKind, InputError
from mhainspect.frontends.kinds import MODEL_FILE_KINDS, is_model_folder, models_in
from mhainspect.frontends.kinds import models_below as kinds_models_below
from mhainspect.sources import is_remote

__all__ = ["ModelRef", "expand_models", "model_argument", "model_label", "models_below", "models_in"]


def models_below(directory: Path) -> list[Path]:
    """Every model under ``directory``, recursively, sorted: model files, and Hugging Face folders
    as one model each (not looked into); symlinked folders are not followed. The rule of every
    tree (``kinds.models_below``), over the local one."""
    from mhainspect.sources.transports.local import LocalTree

    return [directory / p for p in kinds_models_below(LocalTree(directory), "")]


ModelRef = Path | str
"""A model argument: a local path, or a remote reference (``hf://``, a URL, ``s3://``...) as text:
a Path would fold its ``//``."""


# A remote scheme spelled with too few slashes (hf:/org/x, hf:org/x, s3:/bucket): not a path.
_NEAR_SCHEME = re.compile(r"^(?P<scheme>hf|s3|gs|gcs|az|abfs|https?):/?(?!/)(?P<rest>.+)$", re.IGNORECASE)


def model_argument(text: str | os.PathLike[str]) -> ModelRef:
    """A command-line or API argument as a ModelRef: remote references stay text. An argument that
    is no existing path but a remote scheme with too few slashes is an InputError saying the
    spelling meant (``hf:/org/x`` -> ``hf://org/x``)."""
    if isinstance(text, str) and is_remote(text):
        return text
    path = Path(os.fspath(text))
    if isinstance(text, str) and (near := _NEAR_SCHEME.match(text)) is not None and not path.exists():
        meant = f"{near['scheme'].lower()}://{near['rest'].lstrip('/')}"
        raise InputError(f"{text}: no such file; did you mean {meant}? (a remote address takes two slashes)",
                         ErrorKind.NOT_FOUND)
    return path


def model_label(model: ModelRef) -> str:
    """A model's own name (progress lines): the file or folder name, or the last part of a reference."""
    if isinstance(model, Path):
        return model.name
    return model.rstrip("/").rsplit("/", 1)[-1] or model


def expand_models(arguments: Iterable[ModelRef]) -> tuple[ModelRef, ...]:
    """Files as given (existence is checked later, by the loader); folders expanded in place; a
    remote folder (a Hub repo, a folder of an object store) expanded from its listing, as a local one.

    A folder without any model raises InputError. A model reached twice is kept once, at its
    first position.
    """
    out: list[ModelRef] = []
    seen: set[ModelRef] = set()
    for arg in arguments:
        if isinstance(arg, str):
            from mhainspect.frontends.dispatch import remote_models

            for spec in remote_models(arg):
                if spec not in seen:
                    seen.add(spec)
                    out.append(spec)
            continue
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
