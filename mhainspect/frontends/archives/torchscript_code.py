"""A TorchScript archive's code, walked (never run) into the aten converter.

TorchScript serializes each module's ``forward`` as Python-syntax code over ``torch.<op>`` calls
(``torch.linear(x, weight, bias)``, ``torch.view(q, [_0, -1, 8, 8])``), attribute reads
(``self.weight``, ``getattr(layers, "0")``), submodule calls (``(self_attn).forward(x, )``),
``ops.prim.NumToTensor``/``int`` on sizes, and, for scripted modules, lists, ``if`` and ``for``.
This module evaluates that code symbolically over the parsed tree: every ``torch.<op>`` call becomes
an AtenNode (its output shape inferred by mhainspect.frontends.archives.shapes) handed to
mhainspect.frontends.torch.aten, submodule calls are inlined under their module path (the scope a
traced module's nodes get), numbers and attributes fold to constants, and an ``if`` is followed
only when its condition folds. Code this cannot follow (a branch on a runtime value, an unknown
construct) leaves that submodule's call one opaque node, with a note; the rest of the graph is
still converted. Nothing is compiled, imported or executed: only ``ast`` nodes are inspected.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mhainspect.frontends.archives.shapes import infer, meta, new_symbol
from mhainspect.frontends.archives.torchscript_reader import ScriptArchive, ScriptModule
from mhainspect.frontends.pickles import TensorRecord
from mhainspect.frontends.torch.aten import AtenConverter, AtenNode, TensorMeta
from mhainspect.ir.graph import ModelGraph

_MAX_CALL_DEPTH = 64
_MAX_STEPS = 2_000_000  # statements and expressions evaluated, over the whole archive
_MAX_UNROLL = 1024
_IDENTITY_CALLS = frozenset({"int", "float", "bool", "annotate", "unchecked_cast", "NumToTensor", "Int", "Float",
                             "ScalarImplicit", "_unwrap_optional", "str"})
_FOLD: dict[str, Callable[..., Any]] = {
    "add": lambda a, b, *r: a + b, "sub": lambda a, b, *r: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b, **k: (int(a / b) if k.get("rounding_mode") == "trunc" else a / b),
    "floordiv": lambda a, b: a // b, "floor_divide": lambda a, b: a // b, "neg": lambda a: -a,
    "sqrt": math.sqrt, "pow": lambda a, b: a ** b, "remainder": lambda a, b: a % b, "abs": abs,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b, "gt": lambda a, b: a > b,
    "le": lambda a, b: a <= b, "ge": lambda a, b: a >= b, "__not__": lambda a: not a, "__and__": lambda a, b: a and b,
    "__or__": lambda a, b: a or b, "min": min, "max": max, "floor": math.floor, "ceil": math.ceil,
}


class Unsupported(Exception):
    """Code this walker does not follow (the reason says what)."""


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


@dataclass(frozen=True)
class FunctionRef:
    """A free function of the archive's code, named before it is called (``_0 = __torch__.f``)."""

    qualified: str


@dataclass(frozen=True)
class Opaque:
    """A value the walker knows nothing about (a dtype, a device, a string it need not read)."""

    what: str


def convert(archive: ScriptArchive) -> tuple[ModelGraph, list[str]]:
    """The archive's forward as a graph in the neutral IR, and notes on what it could not follow."""
    walker = _Walker(archive)
    walker.run()
    return walker.conv.graph(), walker.notes


class _Walker:
    def __init__(self, archive: ScriptArchive) -> None:
        self.archive = archive
        self.conv = AtenConverter(Path(archive.path).name, "torch.jit")
        self.notes: list[str] = []
        self.steps = 0
        self.counts: dict[str, int] = {}
        self.weights: dict[str, AtenNode] = {}  # module path of a tensor -> its placeholder
        self.scalars: dict[AtenNode, int | str] = {}  # size nodes -> the dim they read

    # -- entry -----------------------------------------------------------------------------------

    def run(self) -> None:
        root = self.archive.root
        forward = self.method(root, "forward")
        if forward is None:
            self.notes.append(f"{root.class_name} has no forward in the archive's code: no graph")
            return
        params = [a.arg for a in forward.args.args[1:]]
        inputs: list[Any] = []
        traced = self.archive.traced_inputs
        for i, name in enumerate(params):
            record = traced[i] if i < len(traced) and len(traced) == len(params) else None
            inputs.append(self.graph_input(name, record))
        try:
            self.call_function(forward, root, inputs, {}, root.path, 0)
        except Unsupported as exc:
            self.notes.append(f"not converted: {root.class_name}.forward: {exc}")

    def graph_input(self, name: str, record: TensorRecord | None) -> AtenNode:
        """A forward argument: its traced example's shape, batch and sequence as symbols (the
        last dim of a float input, its feature width, stays a number), or unknown."""
        val: TensorMeta | None = None
        if record is not None:
            keep_last = record.dtype.startswith(("float", "bfloat"))
            shape = tuple(d if keep_last and i == len(record.shape) - 1 else f"{name}_{i}"
                          for i, d in enumerate(record.shape))
            val = TensorMeta(shape, record.dtype)
        node = AtenNode(name, "placeholder", val=val)
        self.conv.add_input(node, val)
        return node

    # -- classes and calls -------------------------------------------------------------------------

    def method(self, module: ScriptModule, name: str) -> ast.FunctionDef | None:
        cls = self.archive.classes.get(module.qualified)
        for stmt in cls.body if cls is not None else ():
            if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
                return stmt
        return None

    def call_module(self, module: ScriptModule, method: str, args: list[Any], kwargs: dict[str, Any],
                    depth: int) -> Any:
        fn = self.method(module, method)
        if fn is None:
            return self.opaque_call(module, args, f"{module.class_name}.{method} is not in the archive's code")
        try:
            return self.call_function(fn, module, args, kwargs, module.path, depth + 1)
        except Unsupported as exc:
            return self.opaque_call(module, args, str(exc))

    def opaque_call(self, module: ScriptModule, args: Sequence[Any], why: str) -> AtenNode:
        """A submodule whose code is not followed: one node its tensors flow through (as a traced
        graph keeps an op it does not know)."""
        note = f"not converted: {module.class_name} at '{module.path}': {why}"
        if note not in self.notes and len(self.notes) < 50:
            self.notes.append(note)
        name = self.fresh(f"module_{module.class_name.rsplit('.', 1)[-1]}")
        node = AtenNode(name, f"module.{module.class_name.rsplit('.', 1)[-1]}",
                        tuple(a for a in args if isinstance(a, AtenNode)), {}, None, module.path)
        self.conv.convert_call(node)
        return node

    def call_function(self, fn: ast.FunctionDef, module: ScriptModule | None, args: list[Any], kwargs: dict[str, Any],
                      scope: str, depth: int) -> Any:
        if depth > _MAX_CALL_DEPTH:
            raise Unsupported(f"calls nested deeper than {_MAX_CALL_DEPTH}")
        names = [a.arg for a in fn.args.args]
        env: dict[str, Any] = {}
        if module is not None and names:
            env[names[0]] = module
            names = names[1:]
        defaults = fn.args.defaults
        first_default = len(names) - len(defaults)
        for i, name in enumerate(names):
            if i < len(args):
                env[name] = args[i]
            elif name in kwargs:
                env[name] = kwargs[name]
            elif i >= first_default:
                env[name] = self.constant(defaults[i - first_default])
            else:
                raise Unsupported(f"{fn.name} called without its argument '{name}'")
        frame = _Frame(self, env, scope, depth)
        try:
            frame.block(fn.body)
        except _Return as ret:
            return ret.value
        return None

    def class_constant(self, module: ScriptModule, attr: str) -> Any:
        """A constant of the module's class (``eps : Final[float] = 1e-05``), else opaque."""
        cls = self.archive.classes.get(module.qualified)
        for stmt in cls.body if cls is not None else ():
            target = stmt.target if isinstance(stmt, ast.AnnAssign) else (
                stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None)
            value = stmt.value if isinstance(stmt, (ast.AnnAssign, ast.Assign)) else None
            if isinstance(target, ast.Name) and target.id == attr and value is not None:
                try:
                    return ast.literal_eval(value)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    return Opaque(attr)
        return Opaque(f"{module.path}.{attr}")

    def constant(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        raise Unsupported("a default argument that is not a constant")

    def fresh(self, base: str) -> str:
        n = self.counts.get(base, 0)
        self.counts[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def step(self) -> None:
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise Unsupported("more code than any model's forward")

    # -- values ------------------------------------------------------------------------------------

    def tensor(self, owner: ScriptModule, attr: str, record: TensorRecord) -> AtenNode:
        path = f"{owner.path}.{attr}" if owner.path else attr
        node = self.weights.get(path)
        if node is None:
            w = self.archive.weights.get(path)
            val = TensorMeta(record.shape, record.dtype)
            node = AtenNode(path, "placeholder", val=val)
            if w is not None:
                self.conv.add_weight(path, w.shape, w.dtype, w.storage_key, constant=not w.is_parameter)
            self.conv.bind(node, path)
            self.weights[path] = node
        return node

    def constant_tensor(self, index: int) -> Any:
        values = self.archive.constants
        if not 0 <= index < len(values):
            raise Unsupported(f"CONSTANTS.c{index} is not in constants.pkl")
        value = values[index]
        if not isinstance(value, TensorRecord):
            return value
        path = f"CONSTANTS.c{index}"
        node = self.weights.get(path)
        if node is None:
            node = AtenNode(path, "placeholder", val=TensorMeta(value.shape, value.dtype))
            self.conv.add_weight(path, value.shape, value.dtype, f"ts-constant:{value.storage}:{value.offset}",
                                 constant=True)
            self.conv.bind(node, path)
            self.weights[path] = node
        return node

    def scalar_value(self, x: Any) -> int | str | None:
        """An int argument's value: a constant, or the dim a size node reads."""
        if isinstance(x, bool):
            return int(x)
        if isinstance(x, int):
            return x
        if isinstance(x, AtenNode):
            return self.scalars.get(x)
        return None

    def op(self, target: str, args: tuple[Any, ...], kwargs: dict[str, Any], scope: str) -> Any:
        """``torch.<target>(*args, **kwargs)``: folded when every argument is a number, else a node."""
        if all(isinstance(a, (int, float)) for a in args) and target in _FOLD and args:
            try:
                return _FOLD[target](*args, **{k: v for k, v in kwargs.items() if k == "rounding_mode"})
            except (ArithmeticError, ValueError, TypeError):
                pass
        if target == "size" and len(args) == 1:
            m = meta(args[0])
            if m is not None:  # the whole shape, as a list of size nodes
                return [self.op("size", (args[0], i), {}, scope) for i in range(len(m.shape))]
        if target == "dim" and args:
            m = meta(args[0])
            if m is not None:
                return len(m.shape)
        val = infer(target, args, kwargs, self.scalar_value)
        node = AtenNode(self.fresh(target), target, args, kwargs, val, scope)
        self.conv.convert_call(node)
        if target in ("size", "sym_size") and len(args) > 1:
            m = meta(args[0])
            i = args[1]
            if m is not None and isinstance(i, int) and -len(m.shape) <= i < len(m.shape):
                self.scalars[node] = m.shape[i]
        if target in ("mul", "add", "floordiv", "div") and len(args) == 2:
            self.fold_scalar(node, target, args)
        if isinstance(val, tuple):
            return [self.item(node, i) for i in range(len(val))]
        return node

    def fold_scalar(self, node: AtenNode, target: str, args: tuple[Any, ...]) -> None:
        a, b = self.scalar_value(args[0]), self.scalar_value(args[1])
        if isinstance(a, int) and isinstance(b, int) and b != 0:
            self.scalars[node] = {"mul": a * b, "add": a + b, "floordiv": a // b, "div": a // b}[target]
        elif a is not None and b is not None and target == "mul":
            self.scalars[node] = new_symbol()

    def item(self, node: AtenNode, i: int) -> AtenNode:
        """Output ``i`` of a multi-output node (a getitem the converter maps to that output)."""
        val = node.val[i] if isinstance(node.val, tuple) and i < len(node.val) else None
        item = AtenNode(self.fresh("getitem"), "getitem", (node, i), {}, val, node.scope)
        self.conv.convert_call(item)
        return item


class _Frame:
    """One function's local variables while its body is walked."""

    def __init__(self, walker: _Walker, env: dict[str, Any], scope: str, depth: int) -> None:
        self.w = walker
        self.env = env
        self.scope = scope
        self.depth = depth

    # -- statements ----------------------------------------------------------------------------------

    def block(self, body: Sequence[ast.stmt]) -> None:
        for stmt in body:
            self.w.step()
            self.stmt(stmt)

    def stmt(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign):
            value = self.expr(stmt.value)
            for target in stmt.targets:
                self.assign(target, value)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self.assign(stmt.target, self.expr(stmt.value))
        elif isinstance(stmt, ast.Expr):
            self.expr(stmt.value)
        elif isinstance(stmt, ast.Return):
            raise _Return(self.expr(stmt.value) if stmt.value is not None else None)
        elif isinstance(stmt, ast.If):
            cond = self.expr(stmt.test)
            if not isinstance(cond, (bool, int)) or isinstance(cond, AtenNode):
                raise Unsupported("a branch on a value known only at run time")
            self.block(stmt.body if cond else stmt.orelse)
        elif isinstance(stmt, ast.For):
            self.loop(stmt)
        elif isinstance(stmt, (ast.Pass, ast.Assert)):
            return
        elif isinstance(stmt, ast.Raise):
            raise Unsupported("a branch that raises")
        else:
            raise Unsupported(f"a {type(stmt).__name__} statement")

    def loop(self, stmt: ast.For) -> None:
        items = self.expr(stmt.iter)
        if isinstance(items, range):
            items = list(items)
        if not isinstance(items, (list, tuple)) or len(items) > _MAX_UNROLL or stmt.orelse:
            raise Unsupported("a loop over a value known only at run time")
        for item in list(items):
            self.assign(stmt.target, item)
            self.block(stmt.body)

    def assign(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            items = self.unpack(value, len(target.elts))
            for t, v in zip(target.elts, items):
                self.assign(t, v)
            return
        raise Unsupported(f"assignment to a {type(target).__name__}")

    def unpack(self, value: Any, n: int) -> list[Any]:
        if isinstance(value, (list, tuple)):
            if len(value) != n:
                raise Unsupported(f"unpacking {len(value)} values into {n}")
            return list(value)
        if isinstance(value, AtenNode):
            return [self.w.item(value, i) for i in range(n)]
        raise Unsupported("unpacking a value that is no tuple")

    # -- expressions ---------------------------------------------------------------------------------

    def expr(self, node: ast.expr) -> Any:
        self.w.step()
        handler = _EXPRESSIONS.get(type(node))
        if handler is None:
            raise Unsupported(f"a {type(node).__name__} expression")
        return handler(self, node)

    def name(self, node: ast.Name) -> Any:
        if node.id in self.env:
            return self.env[node.id]
        if node.id in ("None", "True", "False"):
            return {"None": None, "True": True, "False": False}[node.id]
        return Opaque(node.id)

    def sequence(self, node: ast.List | ast.Tuple) -> Any:
        items = [self.expr(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)

    def mapping(self, node: ast.Dict) -> Any:
        keys = [self.expr(k) if k is not None else None for k in node.keys]
        return {k if isinstance(k, (str, int)) else repr(k): self.expr(v) for k, v in zip(keys, node.values)}

    def unary(self, node: ast.UnaryOp) -> Any:
        v = self.expr(node.operand)
        if isinstance(node.op, (ast.Not, ast.USub)) and isinstance(v, (bool, int, float)):
            return (not v) if isinstance(node.op, ast.Not) else -v
        raise Unsupported("an operator on a value known only at run time")

    def boolean(self, node: ast.BoolOp) -> Any:
        values = [self.expr(v) for v in node.values]
        if all(isinstance(v, (bool, int)) for v in values):
            return all(values) if isinstance(node.op, ast.And) else any(values)
        raise Unsupported("a condition known only at run time")

    def choice(self, node: ast.IfExp) -> Any:
        cond = self.expr(node.test)
        if isinstance(cond, (bool, int)):
            return self.expr(node.body if cond else node.orelse)
        raise Unsupported("a conditional expression known only at run time")

    def compare(self, node: ast.Compare) -> Any:
        if len(node.ops) != 1:
            raise Unsupported("a chained comparison")
        left, right = self.expr(node.left), self.expr(node.comparators[0])
        op = node.ops[0]
        if isinstance(op, (ast.Is, ast.IsNot)):
            if left is None or right is None:
                same = left is right
                return same if isinstance(op, ast.Is) else not same
            if isinstance(left, AtenNode) or isinstance(right, AtenNode):
                return not isinstance(op, ast.Is)  # a tensor is not None
        if all(isinstance(v, (int, float, str, bool)) and not isinstance(v, AtenNode) for v in (left, right)):
            ops: dict[type, Callable[[Any, Any], bool]] = {
                ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
                ast.Gt: lambda a, b: a > b, ast.LtE: lambda a, b: a <= b, ast.GtE: lambda a, b: a >= b}
            fn = ops.get(type(op))
            if fn is not None:
                return fn(left, right)
        raise Unsupported("a comparison known only at run time")

    def attribute(self, node: ast.Attribute) -> Any:
        if isinstance(node.value, ast.Name) and node.value.id == "CONSTANTS" and node.value.id not in self.env:
            if node.attr.startswith("c") and node.attr[1:].isdigit():
                return self.w.constant_tensor(int(node.attr[1:]))
            raise Unsupported(f"CONSTANTS.{node.attr[:40]}")
        path = _dotted(node)
        if path is not None and path[0] == "__torch__" and path[0] not in self.env:
            qualified = ".".join(path)
            if qualified in self.w.archive.functions:
                return FunctionRef(qualified)
            return Opaque(qualified)
        base = self.expr(node.value)
        return self.member(base, node.attr)

    def member(self, base: Any, attr: str) -> Any:
        if isinstance(base, ScriptModule):
            if attr in base.attrs:
                value = base.attrs[attr]
                if isinstance(value, TensorRecord):
                    return self.w.tensor(base, attr, value)
                return value
            return self.w.class_constant(base, attr)
        if isinstance(base, Opaque):
            return Opaque(f"{base.what}.{attr}")
        raise Unsupported(f"attribute '{attr[:40]}' of a {type(base).__name__}")

    def subscript(self, node: ast.Subscript) -> Any:
        base = self.expr(node.value)
        if isinstance(base, Opaque):  # a type annotation (List[int], Optional[Tensor])
            return Opaque(f"{base.what}[]")
        index = self.expr(node.slice)
        return self.index(base, index)

    def index(self, base: Any, index: Any) -> Any:
        if isinstance(base, (list, tuple)) and isinstance(index, int) and not isinstance(index, bool):
            if -len(base) <= index < len(base):
                return base[index]
            raise Unsupported("an index past the end of a list")
        if isinstance(base, AtenNode) and isinstance(index, int):
            if isinstance(base.val, tuple):
                return self.w.item(base, index)
            return self.w.op("select", (base, 0, index), {}, self.scope)
        if isinstance(base, dict) and isinstance(index, (str, int)):
            if index in base:
                return base[index]
        raise Unsupported("an index known only at run time")

    def call(self, node: ast.Call) -> Any:
        func = node.func
        args = [self.expr(a) for a in node.args if not isinstance(a, ast.Starred)]
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise Unsupported("a call with *args")
        kwargs = {k.arg: self.expr(k.value) for k in node.keywords if k.arg is not None}
        if isinstance(func, ast.Name):
            ref = self.env.get(func.id)
            if isinstance(ref, FunctionRef):
                return self.w.call_function(self.w.archive.functions[ref.qualified], None, args, kwargs, self.scope,
                                            self.depth + 1)
            return self.builtin(func.id, args, kwargs)
        if not isinstance(func, ast.Attribute):
            raise Unsupported("a call of a computed function")
        path = _dotted(func)
        if path is not None and path[0] in ("torch", "ops"):
            return self.torch_call(path, args, kwargs)
        if path is not None and path[0] == "__torch__":
            fn = self.w.archive.functions.get(".".join(path))
            if fn is None:
                raise Unsupported(f"{'.'.join(path)[:80]} is not in the archive's code")
            return self.w.call_function(fn, None, args, kwargs, self.scope, self.depth + 1)
        owner = self.expr(func.value)
        if isinstance(owner, ScriptModule):
            return self.w.call_module(owner, func.attr, args, kwargs, self.depth)
        if isinstance(owner, list) and func.attr == "append" and args:
            owner.append(args[0])
            return None
        raise Unsupported(f"a call of .{func.attr[:40]}")

    def builtin(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if name in _IDENTITY_CALLS:
            value = args[-1] if args else None
            if name in ("int", "float", "bool") and isinstance(value, (int, float, bool)) and not isinstance(value, AtenNode):
                return {"int": int, "float": float, "bool": bool}[name](value)
            return value
        if name == "getattr" and len(args) >= 2 and isinstance(args[1], str):
            return self.member(args[0], args[1])
        if name == "uninitialized":
            return None
        if name == "len" and args and isinstance(args[0], (list, tuple)):
            return len(args[0])
        if name == "range" and all(isinstance(a, int) for a in args) and 1 <= len(args) <= 3:
            r = range(*args)
            if len(r) > _MAX_UNROLL:
                raise Unsupported("a loop of more iterations than any model's forward unrolls")
            return r
        raise Unsupported(f"a call of {name[:40]}")

    def torch_call(self, path: tuple[str, ...], args: list[Any], kwargs: dict[str, Any]) -> Any:
        """torch.<op>(...), ops.aten.<op>(...), ops.prim.<op>(...): TorchScript's list and identity
        built-ins act on the walker's values, the rest are aten ops."""
        name = path[-1]
        if name in _IDENTITY_CALLS:
            return args[0] if args else None
        if name in ("device", "dtype", "layout", "memory_format", "warn"):
            return Opaque(name) if name != "warn" else None
        special = _BUILTINS.get(name)
        if special is not None:
            return special(self, args)
        return self.w.op(name, tuple(args), kwargs, self.scope)


def _identity_test(frame: _Frame, args: list[Any], negate: bool) -> bool:
    if len(args) != 2 or (args[0] is not None and args[1] is not None):
        raise Unsupported("an identity test known only at run time")
    same = (args[0] is None) == (args[1] is None)
    return not same if negate else same


def _append(frame: _Frame, args: list[Any]) -> Any:
    if not args or not isinstance(args[0], list):
        raise Unsupported("an append to a value that is no list")
    args[0].append(args[1] if len(args) > 1 else None)
    return args[0]


def _length(frame: _Frame, args: list[Any]) -> int:
    if not args or not isinstance(args[0], (list, tuple)):
        raise Unsupported("the length of a value known only at run time")
    return len(args[0])


def _raises(frame: _Frame, args: list[Any]) -> Any:
    raise Unsupported("a branch that raises")


_BUILTINS: dict[str, Callable[[_Frame, list[Any]], Any]] = {
    "__isnot__": lambda f, a: _identity_test(f, a, True), "__is__": lambda f, a: _identity_test(f, a, False),
    "append": _append, "len": _length, "RaiseException": _raises,
    "__getitem__": lambda f, a: f.index(a[0], a[1]) if len(a) == 2 else _raises(f, a),
    "list": lambda f, a: list(a[0]) if a and isinstance(a[0], (list, tuple)) else _raises(f, a),
    "TupleConstruct": lambda f, a: tuple(a), "ListConstruct": lambda f, a: list(a),
    "TupleUnpack": lambda f, a: a[0] if a else None,
}
_EXPRESSIONS: dict[type, Callable[[_Frame, Any], Any]] = {
    ast.Constant: lambda f, n: n.value, ast.Name: _Frame.name, ast.List: _Frame.sequence, ast.Tuple: _Frame.sequence,
    ast.Dict: _Frame.mapping, ast.Attribute: _Frame.attribute, ast.Call: _Frame.call, ast.Subscript: _Frame.subscript,
    ast.UnaryOp: _Frame.unary, ast.Compare: _Frame.compare, ast.BoolOp: _Frame.boolean, ast.IfExp: _Frame.choice,
}


def _dotted(node: ast.expr) -> tuple[str, ...] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return tuple(reversed(parts))
    return None
