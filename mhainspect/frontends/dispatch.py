"""What kind of input a MODEL argument is, and the service that audits each kind.

A file's content decides first (mhainspect.frontends.formats: its first bytes, a zip archive's
member list), its suffix only where the content names no format (ONNX has no signature):

- a torch.export program (``torch.export.save``, ``*.pt2``): its serialized graph.
- a TorchScript archive (``torch.jit.save``, ``*.pt``/``*.jit``/...): its code and pickled attributes.
- a torch.save zip or legacy pickle, a safetensors file, a folder with config.json: the checkpoint loader.
- a GGUF file (split files ``*-00001-of-00003.gguf`` as one model), also without a suffix (an Ollama blob).
- a Keras archive (``*.keras``) or a legacy Keras HDF5 model (``*.h5``): the Keras reader.
- formats this tool does not read (TFLite, ExecuTorch, Core ML, SavedModel, OpenVINO, TensorRT,
  CTranslate2, Git LFS pointers): one line naming the format and the converter to use (InputError).
- ``*.onnx`` (and anything unrecognised): the ONNX loader.
- ``pkg.module:callable`` or ``path/to/file.py:callable``: a factory in the user's own code, called
  with ``--arg key=value`` keyword arguments; it returns a module or ``(module, example_inputs)``.
- ``hf://org/name[@revision][/path]``, a Hub web URL, an ``http(s)://`` URL, ``s3://``, ``gs://``,
  ``az://``: a model where it lives (``remote_result``): its tree (``mhainspect.sources``) handed to
  the same readers as a local file or folder, which ask only for the bytes each format's header
  needs; a remote report equals the local report of the same files but for the path.

One decision and one door for a local argument and a remote one alike: a file's kind is
``content_kind`` (its name and its blob's first bytes, held by ``HeadCached`` and read again by the
reader from memory; a zip archive's member list), a folder's ``kinds.folder_kind`` (its listing);
``tree_result`` leads to the reader (a local argument: the folder that holds it as a local Tree,
the file as its Blob). Only what exists on disk alone (a factory spec: the user's code, no file;
a path that does not exist, by its suffix) is decided by ``classify`` of its own.

Returns a SourceResult (mhainspect.pipeline makes the Report), raises InputError; prints nothing.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mhainspect.errors import ErrorKind, InputError, missing_torch
from mhainspect.frontends.formats import (
    HEAD_BYTES,
    Foreign,
    Kind,
    check_symlink_loop,
    describe_head,
    identify,
    is_safetensors,
    looks_like_onnx,
)
from mhainspect.frontends.kinds import file_kind, folder_kind
from mhainspect.results.stages import SourceResult
from mhainspect.sources import is_remote

if TYPE_CHECKING:
    from mhainspect.ir.weights import HeadOffers
    from mhainspect.sources.blob import Blob
    from mhainspect.sources.tree import Tree


# Patterns as text, compiled by re on first use: only a spec that is no file reaches them, and
# compiling both at import cost every run ~1.5M instructions.
_FACTORY = r"^(?P<target>.+):(?P<attr>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)$"
_DOTTED = r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$"


@dataclass(frozen=True)
class Source:
    """What a command-line argument names: an ONNX file, a checkpoint, or a factory spec."""

    kind: Kind  # a file's reader or a factory (a local folder: the reader of the model it is)
    target: str  # a path, or the module / file part of a factory spec
    attr: str = ""  # the callable of a factory spec
    # A local file's blob, its first bytes held from the decision: its reader reads through it.
    blob: Blob | None = field(default=None, compare=False, repr=False)


# A folder's kind (kinds.folder_kind) as a Source names it: a Hugging Face folder is a checkpoint.
_FOLDER_SOURCE = {Kind.KERAS_FOLDER: Kind.KERAS, Kind.FOLDER: Kind.CHECKPOINT}


def classify(spec: str) -> Source:
    """Decide what ``spec`` names: a folder by its listing and a file by its content, as a remote one
    is (``kinds.folder_kind``, ``content_kind``); what does not exist by its suffix, else a factory."""
    from mhainspect.sources.blob import HeadCached
    from mhainspect.sources.transports.local import LocalTree

    p = Path(spec)
    if p.is_dir():
        folder = folder_kind(LocalTree(p), "", spec)
        return Source(_FOLDER_SOURCE[folder] if folder is not None else Kind.ONNX, spec)
    if p.is_file() and p.suffix.lower() != ".py":
        tree = LocalTree(p.parent)
        blob = HeadCached(tree.blob(p.name), HEAD_BYTES)
        return Source(content_kind(tree, p.name, blob, spec), spec, blob=blob)
    kind = file_kind(p)
    if kind is not None and kind is not Kind.ONNX:
        return Source(kind, spec)
    if not p.exists():
        m = re.match(_FACTORY, spec)
        if m is not None:
            target = m.group("target")
            if target.endswith(".py") or re.match(_DOTTED, target):
                return Source(Kind.FACTORY, target, m.group("attr"))
    if p.suffix.lower() == ".py":
        raise InputError(f"{spec}: a Python file is a factory spec only with the function to call: "
                         f"{spec}:FUNCTION (e.g. {spec}:make_model)")
    return Source(Kind.ONNX, spec)


def content_kind(tree: Tree, path: str, blob: Blob, display: str) -> Kind:
    """The reader the file ``path`` of ``tree`` goes to, for a local file and a remote one alike: its
    content (``formats.identify`` through ``blob``: its first bytes, a zip archive's member list),
    else its suffix (``kinds.file_kind``), else the ONNX reader, which takes no file whose first bytes
    cannot start an ONNX protobuf. A config.json alone, a format this tool does not read and a file
    that is no model raise InputError (``display``: the argument as given)."""
    name = path.rsplit("/", 1)[-1]
    if name == "config.json":
        raise InputError(f"{display}: a config.json alone is not a model: pass the folder that holds it with its weights")
    found = None if name.lower().endswith((".py", ".json")) else identify(tree, path, blob)
    if isinstance(found, Foreign):
        raise InputError(found.message(blob.name), ErrorKind.UNSUPPORTED)
    kind = found or file_kind(name) or Kind.ONNX
    if kind is Kind.ONNX:
        _check_onnx_content(name, blob, display)
    return kind


# Suffixes the ONNX reader takes whatever their content says (its text forms included).
_ONNX_SUFFIXES = frozenset({".onnx", ".json", ".txtpb", ".textproto", ".onnxtxt", ".pb"})


def _check_onnx_content(name: str, blob: Blob, display: str) -> None:
    """A file no other reader claimed, that is no .onnx file and whose first bytes cannot start an
    ONNX protobuf (a README, an image): refused from those bytes, before the ONNX reader is imported."""
    if os.path.splitext(name)[1].lower() in _ONNX_SUFFIXES:
        return
    head = blob.read(0, HEAD_BYTES)
    if head and not looks_like_onnx(head, blob.size()):
        raise InputError(f"{display}: not a model file: its content is none of the formats mhainspect reads (ONNX, "
                         f"GGUF, safetensors, PyTorch, Keras; {describe_head(head)})", ErrorKind.INVALID)


def parse_factory_args(pairs: Sequence[str]) -> dict[str, Any]:
    """``key=value`` pairs; values are Python literals where they parse, else strings.
    A key given twice is refused (the second would silently win)."""
    out: dict[str, Any] = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise InputError(f"--arg expects key=value with a Python identifier as key, got '{item}'")
        if key in out:
            raise InputError(f"--arg {key} given twice ({key}={out[key]!r} and {item.strip()}); give each key once")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            out[key] = value
    return out


def file_result(path: str, stated: HeadOffers | None = None) -> SourceResult:
    """A local model argument (an ONNX, GGUF, Keras or TorchScript file, a checkpoint file or a
    Hugging Face folder), by its kind (``classify``); ``stated``: head counts the caller gives."""
    return _local_result(classify(path), path, stated)


def _local_result(src: Source, path: str, stated: HeadOffers | None) -> SourceResult:
    """A local argument through the door a remote one takes (``tree_result``): the folder that holds
    it as a local Tree, the file as its Blob (a Hugging Face or extracted Keras folder: itself)."""
    # The readers are imported when their kind of source is met.
    if src.kind is Kind.FACTORY:
        raise InputError(f"{path}: no such file", ErrorKind.NOT_FOUND)
    from mhainspect.sources.transports.local import LocalTree

    check_symlink_loop(path)
    p = Path(path)
    if src.kind in (Kind.CHECKPOINT, Kind.KERAS) and p.is_dir():  # a Hugging Face folder, an extracted Keras archive
        kind = Kind.FOLDER if src.kind is Kind.CHECKPOINT else Kind.KERAS_FOLDER
        return tree_result(LocalTree(p), "", path, None, kind, stated, remote=False)
    if not p.exists():
        raise InputError(f"{path}: no such file", ErrorKind.NOT_FOUND)
    tree = LocalTree(p.parent)
    blob = src.blob if src.blob is not None else tree.blob(p.name)
    return tree_result(tree, p.name, path, blob, src.kind, stated, remote=False)


def tree_result(tree: Tree, path: str, display: str, blob: Blob | None, kind: Kind, stated: HeadOffers | None, *,
                remote: bool) -> SourceResult:
    """The one door to the readers, for a local argument and a remote one alike: ``kind`` (a folder's
    by its listing; a file's by what the content says, else the suffix) picks the reader, which reads ``path`` of ``tree`` (through ``blob``, the
    file's, for a file) and names it ``display``; ``remote``: reads are round trips (in parallel)."""
    if kind is Kind.FOLDER:
        from mhainspect.frontends.checkpoint.frontend import checkpoint_folder_result

        return checkpoint_folder_result(tree, path, display, stated, remote=remote)
    if kind is Kind.KERAS_FOLDER:
        from mhainspect.frontends.keras.frontend import keras_folder_result

        return keras_folder_result(tree, path, display, stated)
    from mhainspect.sources import beside

    assert blob is not None  # a file's reader reads its blob
    if kind is Kind.KERAS:
        from mhainspect.frontends.keras.frontend import keras_file_result

        return keras_file_result(tree, path, display, blob, stated)
    if kind is Kind.CHECKPOINT:
        from mhainspect.frontends.checkpoint.frontend import checkpoint_file_result

        safetensors = path.lower().endswith(".safetensors") or _safetensors_content(blob)
        return checkpoint_file_result(tree, path, display, blob, safetensors, stated, remote=remote,
                                      config_name=beside(display, "config.json"))
    if kind in (Kind.TORCH_EXPORT, Kind.TORCHSCRIPT):
        from mhainspect.frontends.archives.frontend import export_result, torchscript_result

        reader = export_result if kind is Kind.TORCH_EXPORT else torchscript_result
        return reader(tree, path, display, blob)
    if kind is Kind.GGUF:
        from mhainspect.frontends.gguf.frontend import gguf_tree_result

        return gguf_tree_result(tree, path, display, blob, remote=remote)
    from mhainspect.frontends.onnx.frontend import onnx_result

    return onnx_result(tree, path, display, blob, remote=remote)


def _safetensors_content(blob: Blob) -> bool:
    """A safetensors file by its content (under another suffix: a .bin)."""
    return is_safetensors(blob.read(0, 10), blob.size)


_MAX_LISTED_MODELS = 8


def _names_file(name: str) -> bool:
    """Whether the last part of an object-store address names a file (a model file or a JSON file)."""
    return file_kind(name) is not None or name.endswith(".json")


def remote_models(spec: str) -> list[str]:
    """The models a remote ``spec`` names (see ``_remote_models``), within the model's deadline."""
    from mhainspect.sources.deadline import model_deadline

    with model_deadline():
        return _remote_models(spec)


def _remote_models(spec: str) -> list[str]:
    """The models a remote ``spec`` names: itself when it is one model, else every model below the
    folder (as ``hf://...`` / URL arguments of their own), sorted as a local folder's are."""
    from mhainspect.frontends.kinds import model_folder_names, models_below
    from mhainspect.sources.trees import locate

    tree, path, what = locate(spec, _names_file)
    if what == "file" or model_folder_names(tree.listdir(path).files):
        return [spec]
    found = models_below(tree, path)
    if not found:
        raise InputError(f"{spec}: no models in this folder (looked for *.onnx, *.gguf, *.safetensors, "
                         "*.pt/.pth/.bin/.ckpt and Hugging Face folders with config.json)")
    base = spec.rstrip("/")
    start = len(path) + 1 if path else 0
    return [f"{base}/{p[start:]}" for p in found]


def remote_result(spec: str, stated: HeadOffers | None = None) -> SourceResult:
    """The front-end stage of a remote argument (see ``_remote_result``), within the model's deadline
    (the caller's, else the default)."""
    from mhainspect.sources.deadline import model_deadline

    with model_deadline():
        return _remote_result(spec, stated)


def _remote_result(spec: str, stated: HeadOffers | None = None) -> SourceResult:
    """A remote argument: a Hugging Face folder, a checkpoint, GGUF or ONNX file, read through its
    format's reader over the remote tree; a folder of several models is refused with the list (the
    command line audits each: ``remote_models``)."""
    from mhainspect.sources.blob import HeadCached
    from mhainspect.sources.trees import locate

    tree, path, what = locate(spec, _names_file)
    display = spec.rstrip("/") if not spec.endswith("://") else spec  # as a local folder's path: no final slash
    if what == "folder":
        kind = folder_kind(tree, path, spec)
        if kind is None:
            models = _remote_models(spec)
            if len(models) != 1:
                shown = ", ".join(models[:_MAX_LISTED_MODELS]) + (", ..." if len(models) > _MAX_LISTED_MODELS else "")
                raise InputError(f"{spec}: holds {len(models)} models ({shown}); name one, or give the folder to the "
                                 "command line, which audits each")
            return _remote_result(models[0], stated)
        return tree_result(tree, path, display, None, kind, stated, remote=True)
    blob = HeadCached(tree.blob(path))
    return tree_result(tree, path, display, blob, content_kind(tree, path, blob, spec), stated, remote=True)


def source_result(spec: str, *, factory_args: Mapping[str, Any] | None = None,
                  stated: HeadOffers | None = None) -> SourceResult:
    """Read whatever ``spec`` names (see the module docstring)."""
    if is_remote(spec):
        return remote_result(spec, stated)
    src = classify(spec)
    if src.kind is not Kind.FACTORY:
        return _local_result(src, spec, stated)
    try:
        import torch  # noqa: F401
    except ImportError:
        raise missing_torch(f"{spec}: auditing a PyTorch factory") from None
    factory = load_factory(src)
    try:
        result = factory(**dict(factory_args or {}))
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"{spec}: the factory raised {type(exc).__name__}: {_first_line(exc)}") from None
    module, inputs = _unpack_factory_result(spec, result)
    from mhainspect.frontends.torch.frontend import module_result

    return module_result(module, inputs, name=factory_label(spec, factory_args))


def factory_label(spec: str, factory_args: Mapping[str, Any] | None) -> str:
    """How a factory run is named in reports: the spec and the arguments it was called with,
    'roberta.py:make(num_heads=4)', so two runs of one factory are told apart."""
    if not factory_args:
        return spec
    return f"{spec}({', '.join(f'{k}={v!r}' for k, v in factory_args.items())})"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else repr(exc)


def _unpack_factory_result(spec: str, result: Any) -> tuple[Any, Any]:
    from torch import nn

    if isinstance(result, nn.Module):
        return result, None
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], nn.Module):
        return result[0], result[1]
    raise InputError(f"{spec}: the factory returned {type(result).__name__}; expected an nn.Module or "
                     "(module, example_inputs)")


@contextmanager
def _on_sys_path(folder: str) -> Iterator[None]:
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)


def load_factory(src: Source) -> Any:
    """Import the user's module (this runs their code, which is what a factory spec asks for)."""
    try:
        if src.target.endswith(".py"):
            path = Path(src.target)
            if not path.is_file():
                raise InputError(f"{src.target}: no such file", ErrorKind.NOT_FOUND)
            mod_name = f"_mhainspect_factory_{abs(hash(str(path.resolve())))}"
            spec = importlib.util.spec_from_file_location(mod_name, path)
            if spec is None or spec.loader is None:
                raise InputError(f"{src.target}: cannot import")
            module = importlib.util.module_from_spec(spec)
            with _on_sys_path(str(path.resolve().parent)):
                sys.modules[mod_name] = module
                spec.loader.exec_module(module)
        else:
            with _on_sys_path(os.getcwd()):
                module = importlib.import_module(src.target)
    except InputError:
        raise
    except ModuleNotFoundError as exc:
        raise InputError(f"{src.target}:{src.attr}: cannot import {exc.name or src.target} "
                         "(not a file and not an importable module)") from None
    except Exception as exc:  # user code failing at import
        raise InputError(f"{src.target}: importing it raised {type(exc).__name__}: {_first_line(exc)}") from None
    obj: Any = module
    for part in src.attr.split("."):
        if not hasattr(obj, part):
            raise InputError(f"{src.target}: has no attribute '{src.attr}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise InputError(f"{src.target}:{src.attr} is not callable")
    return obj
