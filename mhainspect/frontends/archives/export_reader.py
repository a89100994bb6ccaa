"""A torch.export program (``torch.export.save``, ``.pt2``) -> ModelGraph, reading only its JSON.

The archive holds the serialized graph (``models/<name>.json``: aten ops with the shape and dtype
of every value, symbolic dims, the graph signature naming every parameter and buffer by its module
path) and each weight's metadata (``data/weights/<name>_weights_config.json``: dtype, sizes,
strides, the member holding its bytes). Those JSON members are all that is read: the weights stay
on disk, so a multi-GB program costs about what its graph weighs. An older archive
(``serialized_exported_program.json``) names its weights' shapes in the graph alone.

The graph becomes AtenNodes and goes through mhainspect.frontends.torch.aten, the converter a
traced module's graph goes through: the same blocks come out. Nothing from the file is executed
(no pickle is loaded, no sympy expression evaluated) and every number is checked against
mhainspect.ir.limits where it is decoded; a graph whose weight shapes disagree with its own weight
metadata or with the bytes stored for them is refused.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mhainspect.errors import InputError
from mhainspect.frontends.archives.program import ArchiveProgram, ArchiveWeight
from mhainspect.frontends.archives.sym import dim_text
from mhainspect.frontends.formats import archive_members
from mhainspect.frontends.torch.aten import AtenConverter, AtenNode, TensorMeta, Value, module_path
from mhainspect.frontends.zips import ZipArchive
from mhainspect.ir.dtypes import TORCH_SCALAR_TYPES, canonical, lookup
from mhainspect.ir.limits import MAX_ARCHIVE_JSON_BYTES, as_int, shape_problem

if TYPE_CHECKING:
    from mhainspect.sources.blob import Blob

_POSITIONAL, _KEYWORD = 1, 2
# Keyword-only arguments of the ops the converter reads, for archives that do not say which
# arguments were passed by keyword.
_KEYWORD_ONLY = frozenset({"scale", "enable_gqa", "alpha", "memory_format", "dtype", "layout", "device",
                           "pin_memory", "rounding_mode", "non_blocking", "approximate"})
_FLOATS = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}
_INT64 = 2**63


@dataclass(frozen=True)
class Opaque:
    """An argument the converter has no use for (a dtype, a device, a subgraph), kept by kind."""

    kind: str
    value: str = ""


def read_export_program(path: str, blob: Blob) -> ArchiveProgram:
    """The program of the torch.export archive ``blob``, named ``path`` (the model named 'model',
    else the first)."""
    archive = ZipArchive(path, blob)
    prefix, rel = archive_members(archive.names())
    if "serialized_exported_program.json" in rel:
        doc = _json(archive, prefix + "serialized_exported_program.json", "the serialized program")
        return _Program(path, doc, {}, "", []).read()
    models = sorted(n[len("models/"):-len(".json")] for n in rel if n.startswith("models/") and n.endswith(".json")
                    and "/" not in n[len("models/"):])
    if not models:
        raise InputError(f"{path}: a torch.export archive without a program (no models/*.json)")
    name = "model" if "model" in models else models[0]
    notes = [f"the archive holds {len(models)} programs ({', '.join(models[:6])}); this report is of '{name}'"] \
        if len(models) > 1 else []
    doc = _json(archive, f"{prefix}models/{name}.json", "the serialized program")
    config_name = f"{prefix}data/weights/{name}_weights_config.json"
    config = _json(archive, config_name, "the weights' metadata") if archive.get(config_name) else {}
    sizes = {n[len(prefix) + len("data/weights/"):]: m.size for n, m in archive.members.items()
             if n.startswith(prefix + "data/weights/")}
    return _Program(path, doc, config, f"{prefix}data/weights/", notes, sizes).read()


def _json(archive: ZipArchive, member: str, what: str) -> Any:
    raw = archive.read(member, MAX_ARCHIVE_JSON_BYTES, what)
    try:
        return json.loads(raw)
    except RecursionError:
        raise InputError(f"{archive.path}: {what} ({member}) is nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{archive.path}: {what} ({member}) is not JSON: {exc}") from None


def _obj(value: Any, what: str, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"{path}: malformed torch.export program: {what} is not an object")
    return value


def _list(value: Any, what: str, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise InputError(f"{path}: malformed torch.export program: {what} is not a list")
    return value


def _union(value: Any, what: str, path: str) -> tuple[str, Any]:
    """The one (kind, payload) of a serialized union ({"as_tensor": {...}})."""
    obj = _obj(value, what, path)
    if len(obj) != 1:
        raise InputError(f"{path}: malformed torch.export program: {what} has {len(obj)} variants")
    (kind, payload), = obj.items()
    return str(kind), payload


class _Program:
    def __init__(self, path: str, doc: Any, weights_config: Any, weights_dir: str, notes: list[str],
                 member_sizes: Mapping[str, int] | None = None) -> None:
        self.path = path
        self.doc = _obj(doc, "the program", path)
        self.weights_config = _obj(_obj(weights_config, "the weights' metadata", path).get("config", {}),
                                   "the weights' metadata", path)
        self.weights_dir = weights_dir
        self.member_sizes = member_sizes or {}
        self.notes = notes
        self.values: dict[str, TensorMeta] = {}
        self.root_class = ""  # the class of the root module, from the first module stack
        self.classes: dict[str, str] = {}  # module path -> class, from the module stacks
        self.nodes: dict[str, AtenNode] = {}  # value name -> the node (or getitem node) producing it

    def fail(self, why: str) -> InputError:
        return InputError(f"{self.path}: malformed torch.export program: {why}")

    def read(self) -> ArchiveProgram:
        module = _obj(self.doc.get("graph_module"), "graph_module", self.path)
        graph = _obj(module.get("graph"), "graph_module.graph", self.path)
        version = self.doc.get("torch_version")
        torch_version = version if isinstance(version, str) and len(version) < 64 else ""
        conv = AtenConverter(Path(self.path).name, f"torch {torch_version}" if torch_version else "torch.export")
        conv.notes.extend(self.notes)
        for name, meta in _obj(graph.get("tensor_values", {}), "tensor_values", self.path).items():
            self.values[str(name)] = self.tensor_meta(meta, f"value '{name}'")
        weights = self.placeholders(conv, graph, _obj(module.get("signature"), "signature", self.path))
        for raw in _list(graph.get("nodes"), "graph.nodes", self.path):
            self.node(conv, _obj(raw, "a node", self.path))
        return ArchiveProgram(conv.graph(), tuple(weights), self.root_class, tuple(self.notes), self.classes)

    # -- values ------------------------------------------------------------------------------------

    def dim(self, value: Any, what: str) -> int | str:
        kind, payload = _union(value, what, self.path)
        if kind == "as_int":
            d = as_int(payload)
            if d is None or not 0 <= d < _INT64:
                raise self.fail(f"{what} has the dim {payload!r}")
            return d
        if kind == "as_expr" and isinstance(payload, dict) and isinstance(payload.get("expr_str"), str):
            return dim_text(payload["expr_str"])
        raise self.fail(f"{what} has a dim of kind {kind}")

    def tensor_meta(self, meta: Any, what: str) -> TensorMeta:
        meta = _obj(meta, what, self.path)
        sizes = _list(meta.get("sizes"), f"{what} sizes", self.path)
        shape = tuple(self.dim(d, what) for d in sizes)
        why = shape_problem([d for d in shape if isinstance(d, int)]) or (
            f"{len(shape)} dims" if shape_problem([1] * len(shape)) else None)
        if why is not None:
            raise self.fail(f"{what}: {why}")
        dtype = TORCH_SCALAR_TYPES.get(as_int(meta.get("dtype")) or 0)
        return TensorMeta(shape, canonical(dtype) if dtype is not None else "unknown")

    def arg(self, value: Any, what: str) -> Any:
        kind, payload = _union(value, what, self.path)
        if kind == "as_none":
            return None
        if kind in ("as_tensor", "as_optional_tensor"):
            return self.ref(payload, what)
        if kind in ("as_tensors", "as_optional_tensors"):
            return [self.ref(p, what) for p in _list(payload, what, self.path)]
        if kind in ("as_int", "as_bool"):
            return self.scalar(payload, what)
        if kind in ("as_ints", "as_bools"):
            return [self.scalar(p, what) for p in _list(payload, what, self.path)]
        if kind == "as_float":
            return self.real(payload, what)
        if kind == "as_floats":
            return [self.real(p, what) for p in _list(payload, what, self.path)]
        if kind in ("as_sym_int", "as_sym_bool", "as_sym_float"):
            return self.sym(payload, what)
        if kind in ("as_sym_ints", "as_sym_bools", "as_sym_floats"):
            return [self.sym(p, what) for p in _list(payload, what, self.path)]
        if kind == "as_string" and isinstance(payload, str):
            return payload
        if kind == "as_strings":
            return [p for p in _list(payload, what, self.path) if isinstance(p, str)]
        return Opaque(kind, str(payload)[:64] if isinstance(payload, (int, str)) else "")

    def ref(self, payload: Any, what: str) -> AtenNode | None:
        """The node producing a tensor argument ({"name": ...}, or an optional tensor's union)."""
        if isinstance(payload, dict) and "name" not in payload and len(payload) == 1:
            kind, inner = _union(payload, what, self.path)
            return None if kind == "as_none" else self.ref(inner, what)
        name = _obj(payload, what, self.path).get("name")
        node = self.nodes.get(name) if isinstance(name, str) else None
        if node is None:
            raise self.fail(f"{what} reads {str(name)[:80]!r}, which nothing produces")
        return node

    def sym(self, payload: Any, what: str) -> Any:
        kind, inner = _union(payload, what, self.path)
        if kind == "as_name":
            node = self.nodes.get(inner) if isinstance(inner, str) else None
            if node is None:
                raise self.fail(f"{what} reads {str(inner)[:80]!r}, which nothing produces")
            return node
        return self.real(inner, what) if kind == "as_float" else self.scalar(inner, what)

    def scalar(self, value: Any, what: str) -> int | bool:
        if isinstance(value, bool):
            return value
        v = as_int(value)
        if v is None or not -_INT64 <= v < _INT64:
            raise self.fail(f"{what} holds {str(value)[:40]!r}, not an int64")
        return v

    def real(self, value: Any, what: str) -> float:
        if isinstance(value, str) and value in _FLOATS:
            return _FLOATS[value]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(f"{what} holds {str(value)[:40]!r}, not a float")
        try:
            return float(value)
        except OverflowError:
            raise self.fail(f"{what} holds a float past the float range") from None

    # -- placeholders and weights --------------------------------------------------------------------

    def placeholders(self, conv: AtenConverter, graph: dict[str, Any], signature: dict[str, Any]) -> list[ArchiveWeight]:
        specs: dict[str, tuple[str, str, dict[str, Any]]] = {}
        for raw in _list(signature.get("input_specs"), "signature.input_specs", self.path):
            kind, spec = _union(raw, "an input spec", self.path)
            spec = _obj(spec, "an input spec", self.path)
            arg = spec.get("arg")
            name = arg.get("name") if isinstance(arg, dict) else None
            if isinstance(arg, dict) and name is None and len(arg) == 1:  # user inputs wrap their argument
                inner = next(iter(arg.values()))
                name = inner.get("name") if isinstance(inner, dict) else None
            target = spec.get("parameter_name") or spec.get("buffer_name") or spec.get("tensor_constant_name")
            if isinstance(name, str):
                specs[name] = (kind, target if isinstance(target, str) else "", spec)
        weights: list[ArchiveWeight] = []
        for raw in _list(graph.get("inputs"), "graph.inputs", self.path):
            kind, payload = _union(raw, "a graph input", self.path)
            name = payload.get("name") if isinstance(payload, dict) else None
            if kind == "as_sym_int" and isinstance(payload, dict):
                name = payload.get("as_name")
            if not isinstance(name, str):
                continue
            meta = self.values.get(name)
            node = AtenNode(name, "placeholder", val=meta)
            self.nodes[name] = node
            spec_kind, target, _ = specs.get(name, ("user_input", "", {}))
            if spec_kind in ("parameter", "buffer", "tensor_constant") and target:
                stored = self.stored(target, meta, spec_kind == "parameter")
                conv.add_weight(target, stored.shape, stored.dtype, stored.storage_key,
                                constant=spec_kind != "parameter")
                conv.bind(node, target)
                weights.append(stored)
            elif meta is not None and spec_kind == "user_input":
                conv.add_input(node, meta)
        return weights

    def stored(self, target: str, meta: TensorMeta | None, is_parameter: bool) -> ArchiveWeight:
        """A weight's metadata: the weights config's (checked against the graph's and against the
        bytes stored for it), else the graph's."""
        entry = self.weights_config.get(target)
        if entry is None:
            if meta is None or not all(isinstance(d, int) for d in meta.shape):
                raise self.fail(f"weight '{target[:80]}' has no concrete shape")
            return ArchiveWeight(target, tuple(int(d) for d in meta.shape), meta.dtype, f"pt2:{target}", is_parameter,
                                is_parameter)
        entry = _obj(entry, f"weight '{target}'", self.path)
        tensor = self.tensor_meta(entry.get("tensor_meta"), f"weight '{target}'")
        if not all(isinstance(d, int) for d in tensor.shape):
            raise self.fail(f"weight '{target[:80]}' has a symbolic shape")
        shape = tuple(int(d) for d in tensor.shape)
        if meta is not None and (meta.shape != tensor.shape or meta.dtype != tensor.dtype):
            raise InputError(f"{self.path}: refused: the graph says weight '{target[:80]}' is {list(meta.shape)} "
                             f"{meta.dtype}, its metadata says {list(shape)} {tensor.dtype}")
        raw_meta = _obj(entry.get("tensor_meta"), f"weight '{target}'", self.path)
        strides = tuple(self.dim(s, f"weight '{target}' strides") for s in
                        _list(raw_meta.get("strides", []), f"weight '{target}' strides", self.path))
        offset_raw = raw_meta.get("storage_offset", {"as_int": 0})
        offset = self.dim(offset_raw, f"weight '{target}' storage offset")
        member = entry.get("path_name")
        member = member if isinstance(member, str) else target
        if entry.get("use_pickle") is not True:
            self.check_bytes(target, member, shape, strides, offset, tensor.dtype)
        trainable = raw_meta.get("requires_grad") is True
        key = f"pt2:{member}:{offset}:{shape}:{strides}"
        return ArchiveWeight(target, shape, tensor.dtype, key, is_parameter, is_parameter and trainable)

    def check_bytes(self, target: str, member: str, shape: tuple[int, ...], strides: Sequence[int | str],
                    offset: int | str, dtype: str) -> None:
        """Refuse a weight whose shape needs more bytes than its member holds (a lying header)."""
        size = self.member_sizes.get(member)
        info = lookup(dtype)
        if size is None or info is None or not isinstance(offset, int) or any(not isinstance(s, int) for s in strides):
            return
        if len(strides) != len(shape):
            raise self.fail(f"weight '{target[:80]}' has {len(strides)} strides for {len(shape)} dims")
        if 0 in shape:
            return
        last = offset + sum((d - 1) * int(s) for d, s in zip(shape, strides))
        need = info.nbytes(last + 1)
        if need > size:
            raise InputError(f"{self.path}: refused: weight '{target[:80]}' {list(shape)} {dtype} needs {need:,} bytes, "
                             f"its member '{member[:80]}' holds {size:,} (the program's metadata lies about it)")

    # -- nodes -------------------------------------------------------------------------------------

    def node(self, conv: AtenConverter, raw: dict[str, Any]) -> None:
        name = raw.get("name")
        target = raw.get("target")
        if not isinstance(name, str) or not isinstance(target, str):
            raise self.fail("a node without a name or target")
        what = f"node '{name[:80]}'"
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        keywords = False
        for item in _list(raw.get("inputs", []), f"{what} inputs", self.path):
            item = _obj(item, f"{what} input", self.path)
            arg_name = item.get("name")
            value = self.arg(item.get("arg"), f"{what} input")
            kind = item.get("kind")
            keyword = kind == _KEYWORD or (kind is None and (keywords or arg_name in _KEYWORD_ONLY))
            if keyword and isinstance(arg_name, str) and arg_name:
                kwargs[arg_name] = value
                keywords = True
            else:
                args.append(value)
        outputs = _list(raw.get("outputs", []), f"{what} outputs", self.path)
        metadata = raw.get("metadata")
        stack = _module_stack(metadata.get("nn_module_stack")) if isinstance(metadata, dict) else ()
        scope = stack[-1][0] if stack else ""
        for path_text, cls in stack:
            self.classes.setdefault(path_text, cls)
        if stack and not self.root_class and not stack[0][0]:
            self.root_class = stack[0][1].rsplit(".", 1)[-1]
        names, val = self.outputs(outputs, what)
        node = AtenNode(name, op_name(target), tuple(args), kwargs, val, scope)
        conv.convert_call(node)
        if len(names) == 1 and not isinstance(val, tuple):
            self.nodes[names[0]] = node
            return
        for i, out in enumerate(names):
            if not out:
                continue
            meta = val[i] if isinstance(val, tuple) and i < len(val) else None
            item_node = AtenNode(out, "getitem", (node, i), {}, meta, scope)
            conv.convert_call(item_node)
            self.nodes[out] = item_node

    def outputs(self, outputs: list[Any], what: str) -> tuple[list[str], Value]:
        """The names of a node's outputs and what is known of them (one TensorMeta, or a tuple)."""
        names: list[str] = []
        metas: list[TensorMeta | None] = []
        for out in outputs:
            kind, payload = _union(out, f"{what} output", self.path)
            if kind in ("as_tensors", "as_optional_tensors"):
                for item in _list(payload, f"{what} output", self.path):
                    if isinstance(item, dict) and "as_tensor" in item:
                        item = item["as_tensor"]
                    n = item.get("name") if isinstance(item, dict) else None
                    names.append(n if isinstance(n, str) else "")
                    metas.append(self.values.get(n) if isinstance(n, str) else None)
                if len(outputs) == 1:
                    return names, tuple(metas)
                continue
            if kind in ("as_sym_int", "as_sym_bool", "as_sym_float") and isinstance(payload, dict):
                n = payload.get("as_name")
            else:
                n = payload.get("name") if isinstance(payload, dict) else None
            names.append(n if isinstance(n, str) else "")
            metas.append(self.values.get(n) if isinstance(n, str) and kind == "as_tensor" else None)
        if len(names) == 1:
            return names, metas[0]
        return names, tuple(metas)


def op_name(target: str) -> str:
    """'torch.ops.aten.linear.default' -> 'linear'; '_operator.mul' -> 'mul'."""
    parts = target.split(".")
    if len(parts) >= 4 and parts[0] == "torch" and parts[1] == "ops":
        return parts[3]
    return parts[-1]


def _module_stack(stack: Any) -> tuple[tuple[str, str], ...]:
    """(module path, class) of each entry of a serialized nn_module_stack ("key,path,type;...")."""
    if not isinstance(stack, str) or not stack:
        return ()
    return _parsed_stack(stack)


@functools.lru_cache(maxsize=4096)  # every node of a layer repeats its layer's stack
def _parsed_stack(stack: str) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for entry in stack.split(";"):
        parts = _split_top(entry) if "[" in entry or "(" in entry else entry.split(",")
        if len(parts) == 3:
            out.append((module_path(parts[1]), parts[2][:200]))
    return tuple(out)


def _split_top(text: str) -> list[str]:
    """``text`` split at commas outside brackets (a module path may hold "L['self'].layers[0]")."""
    out: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out
