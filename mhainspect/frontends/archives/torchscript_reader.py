"""A TorchScript archive (``torch.jit.save`` of a traced or scripted module) -> ArchiveProgram,
without loading it.

The archive holds the module tree (``data.pkl``: each module's class and attributes, its tensors
as references into ``data/``), the code of every class (``code/__torch__/...py``: TorchScript,
which is Python syntax), tensor constants the code names (``constants.pkl``) and, for a traced
module, the example inputs it was traced with (``traced_inputs.pkl``). This reader

- reads the pickles as data (mhainspect.frontends.pickles: no class is imported, nothing
  is called), so the module hierarchy, every parameter's name, shape, dtype and storage, and the
  attributes a scripted module keeps (num_heads, head_dim, ...) come out as records;
- parses the code with ``ast`` (never compiled or run) and walks each forward
  (mhainspect.frontends.archives.torchscript_code) into the aten converter a traced module's graph
  goes through, inlining submodule calls;
- reads tensor data only for constants of at most 64 bytes (a score scale, a head count), which
  the code uses as numbers.

Refused with one line: a code file that imports a Python module or holds statements TorchScript
does not write, a pickle with opcodes no archive writes, a tensor whose shape needs more bytes than
its storage holds, anything past mhainspect.ir.limits.
"""

from __future__ import annotations

import ast
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mhainspect.errors import InputError
from mhainspect.frontends.archives.program import ArchiveWeight
from mhainspect.frontends.formats import archive_members
from mhainspect.frontends.pickles import Call, Global, TensorRecord, read_pickle
from mhainspect.frontends.torch.known import class_name
from mhainspect.frontends.zips import ZipArchive
from mhainspect.ir.dtypes import STRUCT_CODES, lookup
from mhainspect.ir.limits import MAX_ARCHIVE_TEXT_BYTES

if TYPE_CHECKING:
    from mhainspect.sources.blob import Blob

_MAX_CODE_FILES = 100_000
_MAX_DEPTH = 256  # module nesting
_SMALL_CONSTANT_BYTES = 64


@dataclass
class ScriptModule:
    """One module of the tree: its path, class (qualified, as the code names it), attributes
    (submodules, tensors, numbers) and which of its tensors are parameters."""

    path: str
    qualified: str
    attrs: dict[str, Any] = field(default_factory=dict)
    parameters: tuple[str, ...] = ()
    buffers: tuple[str, ...] = ()

    @property
    def class_name(self) -> str:
        return class_name(self.qualified)


@dataclass
class ScriptArchive:
    """What the reader found: the module tree, the classes' code, constants and traced inputs."""

    path: str
    root: ScriptModule
    modules: dict[str, ScriptModule]
    classes: dict[str, ast.ClassDef]  # qualified class name -> its definition
    functions: dict[str, ast.FunctionDef]  # qualified free function -> its definition
    constants: tuple[Any, ...]  # CONSTANTS.cN: a number (small tensors), else a TensorRecord
    traced_inputs: tuple[TensorRecord, ...]
    weights: dict[str, ArchiveWeight]


def read_archive(path: str, blob: Blob) -> ScriptArchive:
    """The TorchScript archive ``blob``, named ``path``."""
    return _read(path, blob)


def _read(path: str, blob: Blob) -> ScriptArchive:
    zipped = ZipArchive(path, blob)
    prefix, rel = archive_members(zipped.names())
    if len(rel) > _MAX_CODE_FILES:
        raise InputError(f"{path}: refused: {len(rel):,} archive members")
    classes, functions = _code(zipped, prefix, [n for n in rel if n.startswith("code/") and n.endswith(".py")])
    data = read_pickle(zipped.read(prefix + "data.pkl", MAX_ARCHIVE_TEXT_BYTES, "the module tree (data.pkl)"),
                       f"{path}: data.pkl")
    constants: tuple[Any, ...] = ()
    if prefix + "constants.pkl" in zipped.members:
        raw = read_pickle(zipped.read(prefix + "constants.pkl", MAX_ARCHIVE_TEXT_BYTES, "constants.pkl"),
                          f"{path}: constants.pkl")
        constants = tuple(_constant(zipped, prefix, c) for c in (raw if isinstance(raw, tuple) else ()))
    traced: tuple[TensorRecord, ...] = ()
    if prefix + "traced_inputs.pkl" in zipped.members:
        inputs = read_pickle(zipped.read(prefix + "traced_inputs.pkl", MAX_ARCHIVE_TEXT_BYTES, "traced_inputs.pkl"),
                             f"{path}: traced_inputs.pkl")
        traced = _traced_inputs(inputs)
    tree = _Tree(path, zipped, prefix, classes)
    root = tree.module(data, "", 0)
    return ScriptArchive(path, root, tree.modules, classes, functions, constants, traced, tree.weights)


# -- code ------------------------------------------------------------------------------------------

_ALLOWED_TOP = (ast.ClassDef, ast.FunctionDef, ast.Assign, ast.AnnAssign, ast.Expr)


def _code(zipped: ZipArchive, prefix: str, files: list[str]) -> tuple[dict[str, ast.ClassDef], dict[str, ast.FunctionDef]]:
    """Every class and free function of the archive's code, by qualified name (parsed, not run)."""
    classes: dict[str, ast.ClassDef] = {}
    functions: dict[str, ast.FunctionDef] = {}
    for name in files:
        module = name[len("code/"):-len(".py")].replace("/", ".")
        text = zipped.read(prefix + name, MAX_ARCHIVE_TEXT_BYTES, f"code file {name}")
        try:
            tree = ast.parse(text.decode("utf-8"), filename=name)
        except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError, MemoryError) as exc:
            raise InputError(f"{zipped.path}: refused: code file {name} is not TorchScript code "
                             f"({type(exc).__name__}: {str(exc)[:100]})") from None
        for stmt in tree.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                names = ", ".join(a.name for a in stmt.names) if isinstance(stmt, ast.Import) else stmt.module or ""
                if not all(n.split(".")[0] in ("__torch__", "torch") for n in names.split(", ") if n):
                    raise InputError(f"{zipped.path}: refused: code file {name} imports {names[:80]} (TorchScript "
                                     "code imports no Python module); nothing from the file was run")
                continue
            if not isinstance(stmt, _ALLOWED_TOP) or (isinstance(stmt, ast.Expr)
                                                      and not isinstance(stmt.value, ast.Constant)):
                raise InputError(f"{zipped.path}: refused: code file {name} holds a {type(stmt).__name__} statement "
                                 "at top level (TorchScript code holds classes and functions); nothing was run")
            if isinstance(stmt, ast.ClassDef):
                classes[f"{module}.{stmt.name}"] = stmt
            elif isinstance(stmt, ast.FunctionDef):
                functions[f"{module}.{stmt.name}"] = stmt
    return classes, functions


def class_lists(cls: ast.ClassDef | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(__parameters__, __buffers__) of a class definition."""
    found: dict[str, tuple[str, ...]] = {}
    for stmt in cls.body if cls is not None else ():
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id in ("__parameters__", "__buffers__") and isinstance(stmt.value, ast.List)):
            found[stmt.targets[0].id] = tuple(e.value for e in stmt.value.elts
                                              if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return found.get("__parameters__", ()), found.get("__buffers__", ())


# -- the module tree -------------------------------------------------------------------------------


class _Tree:
    def __init__(self, path: str, zipped: ZipArchive, prefix: str, classes: dict[str, ast.ClassDef]) -> None:
        self.path = path
        self.zipped = zipped
        self.prefix = prefix
        self.classes = classes
        self.modules: dict[str, ScriptModule] = {}
        self.weights: dict[str, ArchiveWeight] = {}

    def module(self, obj: Any, path: str, depth: int) -> ScriptModule:
        if depth > _MAX_DEPTH:
            raise InputError(f"{self.path}: refused: modules nested deeper than {_MAX_DEPTH}")
        if not isinstance(obj, Call) or not isinstance(obj.func, Global) or not obj.func.module.startswith("__torch__"):
            what = f"a call of {obj.func.qualified[:80]}" if isinstance(obj, Call) and isinstance(obj.func, Global) \
                else type(obj).__name__
            raise InputError(f"{self.path}: not a TorchScript archive (data.pkl holds {what} where a module of the "
                             f"archive's code belongs, at '{path}'); nothing from the file was run")
        qualified = obj.func.qualified
        params, buffers = class_lists(self.classes.get(qualified))
        module = ScriptModule(path, qualified, {}, params, buffers)
        self.modules[path] = module
        state = obj.state if isinstance(obj.state, dict) else {}
        for name, value in state.items():
            if not isinstance(name, str):
                continue
            child = f"{path}.{name}" if path else name
            if isinstance(value, Call) and isinstance(value.func, Global) and value.func.module.startswith("__torch__"):
                module.attrs[name] = self.module(value, child, depth + 1)
            elif isinstance(value, TensorRecord):
                module.attrs[name] = value
                self.weight(child, value, name in params)
            else:
                module.attrs[name] = value
        return module

    def weight(self, name: str, t: TensorRecord, is_parameter: bool) -> None:
        """A tensor of the tree, checked against the bytes its storage holds."""
        member = self.zipped.get(f"{self.prefix}data/{t.storage}")
        info = lookup(t.dtype)
        if member is not None and info is not None:
            have = member.size
            if info.nbytes(t.storage_numel) > have:
                raise InputError(f"{self.path}: refused: storage '{t.storage}' of '{name[:80]}' declares "
                                 f"{t.storage_numel:,} {t.dtype} elements, the archive holds {have:,} bytes")
            if 0 not in t.shape:
                last = t.offset + sum((d - 1) * s for d, s in zip(t.shape, t.strides))
                if last >= t.storage_numel:
                    raise InputError(f"{self.path}: refused: tensor '{name[:80]}' {list(t.shape)} reaches element "
                                     f"{last:,} of a {t.storage_numel:,}-element storage (the archive lies about it)")
        key = f"ts:{t.storage}:{t.offset}:{t.shape}:{t.strides}"
        self.weights[name] = ArchiveWeight(name, t.shape, t.dtype, key, is_parameter, is_parameter and t.requires_grad)


def _constant(zipped: ZipArchive, prefix: str, value: Any) -> Any:
    """A constant the code names: a small tensor's one value as a number, else the record."""
    if not isinstance(value, TensorRecord):
        return value
    code = STRUCT_CODES.get(value.dtype)
    numel = 1
    for d in value.shape:
        numel *= d
    if code is None or numel != 1 or value.storage_numel * struct.calcsize(code) > _SMALL_CONSTANT_BYTES:
        return value
    name = f"{prefix}constants/{value.storage}"
    if name not in zipped.members:
        return value
    raw = zipped.read(name, _SMALL_CONSTANT_BYTES, f"constant {value.storage}")
    width = struct.calcsize(code)
    at = value.offset * width
    if at + width > len(raw):
        return value
    (number,) = struct.unpack(f"<{code}", raw[at:at + width])
    return float(number) if code in "fde" else (bool(number) if code == "?" else int(number))


def _traced_inputs(value: Any) -> tuple[TensorRecord, ...]:
    """The example tensors forward was traced with (traced_inputs.pkl: {"forward": [tensors]})."""
    found = value
    while isinstance(found, Call) and found.args:  # restore_type_tag(dict, type name)
        found = found.args[0]
    if isinstance(found, dict):
        found = found.get("forward")
    while isinstance(found, Call) and found.args:
        found = found.args[0]
    if isinstance(found, (list, tuple)):
        return tuple(t for t in found if isinstance(t, TensorRecord))
    return ()
