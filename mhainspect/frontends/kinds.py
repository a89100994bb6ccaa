"""What a model file or folder is by its name and listing: the suffixes each reader takes, what
makes a folder one Hugging Face model, and which files of a listing are models (a split GGUF model
once). The one rule for local and remote folders alike; reads listings only, never a model."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from mhainspect.errors import ErrorKind, InputError
from mhainspect.frontends.formats import Kind, identify_folder
from mhainspect.frontends.gguf.split import GGUF_SUFFIX, split_name  # the loader's own rule for a split model's parts

if TYPE_CHECKING:
    from mhainspect.sources.tree import Tree  # a listing's type only: a local file is classified without one

# Every model file suffix and the kind of source it is: a folder scan picks up these files, and
# dispatch.content_kind falls back on them. A new format adds its suffix here (and its reader in dispatch.tree_result).
MODEL_FILE_KINDS: dict[str, Kind] = {
    ".onnx": Kind.ONNX,
    ".safetensors": Kind.CHECKPOINT,
    ".pt": Kind.CHECKPOINT,
    ".pth": Kind.CHECKPOINT,
    ".bin": Kind.CHECKPOINT,
    ".ckpt": Kind.CHECKPOINT,
    ".gguf": Kind.GGUF,
    ".pt2": Kind.TORCH_EXPORT,
    ".jit": Kind.TORCHSCRIPT,
    ".keras": Kind.KERAS,  # a legacy .h5 is read when named, not picked up in a folder (tf_model.h5 holds weights only)
}
CHECKPOINT_SUFFIXES = tuple(s for s, kind in MODEL_FILE_KINDS.items() if kind is Kind.CHECKPOINT)
def is_checkpoint_folder(path: Path) -> bool:
    """A Hugging Face model folder: config.json next to safetensors or PyTorch weights (listing only)."""
    if not (path / "config.json").is_file():
        return False
    try:
        names = [p.name for p in path.iterdir()]
    except OSError:
        return False
    return checkpoint_names(names)


def checkpoint_names(names: Iterable[str]) -> bool:
    """Whether a folder holding config.json and ``names`` is a Hugging Face model folder (the rule
    for local and remote folders alike)."""
    return any(n.endswith(".safetensors") or (n.startswith("pytorch_model") and n.endswith((".bin", ".json")))
               or n == "model.safetensors.index.json" for n in names)


def model_folder_names(files: Collection[str]) -> bool:
    """is_model_folder for a folder whose files are ``files`` (names, no subfolders)."""
    return "config.json" in files and (checkpoint_names(files) or not any(file_kind(n) is not None for n in files))


def file_kind(name: str | os.PathLike[str]) -> Kind | None:
    """The kind of source a model file is by its suffix (MODEL_FILE_KINDS); None: not a model file."""
    return MODEL_FILE_KINDS.get(os.path.splitext(name)[1].lower())


KERAS_WEIGHTS = "model.weights.h5"  # a Keras archive's weights file (with its config.json: an extracted archive)


def is_keras_folder(path: Path) -> bool:
    """An extracted Keras archive: config.json beside model.weights.h5 (listing only)."""
    return (path / "config.json").is_file() and (path / KERAS_WEIGHTS).is_file()


def folder_kind(tree: Tree, path: str, display: str) -> Kind | None:
    """What the folder ``path`` of a tree is, by its listing, for a local folder and a remote one
    alike: KERAS_FOLDER (an extracted Keras archive: config.json beside model.weights.h5),
    FOLDER (one Hugging Face model: ``model_folder_names``), or None (a folder of models). A model
    of a format this tool does not read (a SavedModel, a Core ML package) raises InputError naming it
    (``display``: the folder as the argument names it)."""
    foreign = identify_folder(tree, path)
    if foreign is not None:
        raise InputError(foreign.message(display), ErrorKind.UNSUPPORTED)
    files = tree.listdir(path).files
    if "config.json" in files and KERAS_WEIGHTS in files:
        return Kind.KERAS_FOLDER
    return Kind.FOLDER if model_folder_names(files) else None


def is_model_folder(path: Path) -> bool:
    """A folder that is one model: a Hugging Face folder (config.json with weights), or a
    config.json with no model file beside it (the architecture alone, nothing to scan), or a model of
    a format this tool names but does not read (a SavedModel, a Core ML package). Any other folder
    is a folder of models (see folders.py)."""
    if not path.is_dir():
        return False
    if is_checkpoint_folder(path):
        return True
    if not (path / "config.json").is_file():
        from mhainspect.sources.transports.local import LocalTree

        return identify_folder(LocalTree(path), "") is not None  # a SavedModel, a Core ML package: named, not scanned
    try:
        return not any(file_kind(p.name) is not None for p in path.iterdir())
    except OSError:
        return False


def models_in(files: Iterable[str]) -> list[str]:
    """The model files among ``files``, a split GGUF model once (by its lowest-numbered part
    present: the loader reads every part, and says which one is missing)."""
    out: list[str] = []
    first_part: dict[tuple[str, str], str] = {}
    for name in files:
        split = split_name(name) if name.lower().endswith(GGUF_SUFFIX) else None
        if split is not None:
            key = (split.group("stem"), split.group("count"))
            if key not in first_part or name < first_part[key]:
                first_part[key] = name
        elif file_kind(name) is not None:
            out.append(name)
    return out + list(first_part.values())


def models_below(tree: Tree, folder: str) -> list[str]:
    """Every model under ``folder`` of a tree, local or remote: model files, and Hugging Face
    folders as one model each (not looked into); folders reached through a link are looked at,
    never walked (a link may loop); sorted as paths sort."""
    found: list[str] = []
    pending = [folder]
    while pending:
        here = pending.pop()
        entries = tree.listdir(here)
        for d in entries.folders:
            sub = f"{here}/{d}" if here else d
            names = tree.listdir(sub).files
            if "config.json" in names and checkpoint_names(names):
                found.append(sub)
            elif d not in entries.linked:
                pending.append(sub)
        found.extend(f"{here}/{n}" if here else n for n in models_in(entries.files))
    return sorted(found, key=lambda p: tuple(p.split("/")))
