"""A pickle read as data, never run: what PyTorch files pickle (state dicts, module trees, tensors)
as plain records. The one pickle reader of the project: torch.save zips read without torch
(checkpoint/torchzip.py) and TorchScript archives (archives/torchscript_reader.py) both use it.

``pickle.loads`` imports and calls whatever a pickle names (``os.system`` included). This reader
walks the opcodes (``pickletools.genops``: decoding only) on a small stack machine that builds no
object of any class the pickle names: a GLOBAL is a ``Global(module, name)`` record, calling it
(REDUCE, NEWOBJ) a ``Call`` record, BUILD sets a record's ``state``; a persistent id is a
``Persistent`` record. Dicts, lists, tuples, strings and numbers are themselves. Tensors, as
``torch._utils._rebuild_tensor_v2`` / ``_v3`` rebuild them (as a parameter or a tensor subclass
too), become ``TensorRecord``s (storage, shape, strides, offset, dtype), checked against
mhainspect.ir.limits. A caller may pass an allow-list: the first GLOBAL it does not name ends the
read (``RefusedGlobal``), as torch's weights-only loader refuses a file. Opcodes that only a hostile pickle
needs (EXT*, INST/OBJ with a callable from the stack, frames past the input) end the read with
an InputError, as do more than ``MAX_OPS`` opcodes or a stack deeper than ``MAX_DEPTH``.
"""

from __future__ import annotations

import pickletools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mhainspect.errors import InputError
from mhainspect.ir.dtypes import TORCH_STORAGE_TYPES
from mhainspect.ir.limits import as_int, shape_problem

MAX_OPS = 5_000_000
MAX_DEPTH = 10_000
MAX_MEMO = 1_000_000

# (storage, offset, size, stride, ...) first, each of them.
_REBUILD_TENSOR = frozenset({"torch._utils._rebuild_tensor", "torch._utils._rebuild_tensor_v2",
                             "torch._utils._rebuild_tensor_v3", "torch._utils._rebuild_qtensor"})
_REBUILD_PARAMETER = frozenset({"torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state"})


class RefusedGlobal(Exception):
    """A GLOBAL the caller's allow-list does not name (``qualified``: module.name)."""

    def __init__(self, qualified: str) -> None:
        super().__init__(qualified)
        self.qualified = qualified


@dataclass(frozen=True)
class Global:
    module: str
    name: str

    @property
    def qualified(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(eq=False)
class Call:
    """``func(*args)`` as the pickle says it, never made; ``state``: what BUILD set on it."""

    func: Any
    args: tuple[Any, ...]
    state: Any = None
    items: list[Any] = field(default_factory=list)  # APPEND(S)/SETITEM(S) on a non-container


@dataclass(frozen=True)
class Persistent:
    pid: Any


@dataclass(frozen=True)
class TensorRecord:
    """A tensor as torch's rebuild functions describe it: which storage, where in it, what shape."""

    storage: str  # the storage's key in the archive (data/<key>)
    dtype: str
    storage_numel: int
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    requires_grad: bool


class _Mark:
    pass


_MARK = _Mark()


def read_pickle(data: bytes, what: str, allowed: Callable[[Global], bool] | None = None) -> Any:
    """The value ``data`` pickles, as records (see the module docstring). InputError (naming
    ``what``) when the pickle is malformed or beyond the limits; RefusedGlobal at the first GLOBAL
    that ``allowed`` (when given) says no to."""
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    try:
        for count, (op, arg, _pos) in enumerate(pickletools.genops(data)):
            if count > MAX_OPS or len(stack) > MAX_DEPTH or len(memo) > MAX_MEMO:
                raise InputError(f"{what}: refused: the pickle is larger than any archive writes")
            if op.name == "STOP":
                return _resolve(stack.pop())
            _step(op.name, arg, stack, memo, what, allowed)
    except (InputError, RefusedGlobal):
        raise
    except (ValueError, IndexError, KeyError, TypeError, AttributeError, RecursionError, OverflowError) as exc:
        raise InputError(f"{what}: malformed pickle ({type(exc).__name__}: {str(exc)[:120]})") from None
    raise InputError(f"{what}: truncated pickle (no STOP)")


def _pop_mark(stack: list[Any]) -> list[Any]:
    i = len(stack) - 1
    while i >= 0 and stack[i] is not _MARK:
        i -= 1
    if i < 0:
        raise ValueError("no MARK on the stack")
    items = stack[i + 1:]
    del stack[i:]
    return items


_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False, "EMPTY_DICT": None, "EMPTY_LIST": None,
              "EMPTY_TUPLE": None, "EMPTY_SET": None}


def _step(name: str, arg: Any, stack: list[Any], memo: dict[int, Any], what: str,
          allowed: Callable[[Global], bool] | None) -> None:
    if name in ("PROTO", "FRAME"):
        return
    if name in ("NONE", "NEWTRUE", "NEWFALSE"):
        stack.append(_CONSTANTS[name])
    elif name == "EMPTY_DICT":
        stack.append({})
    elif name == "EMPTY_LIST":
        stack.append([])
    elif name == "EMPTY_TUPLE":
        stack.append(())
    elif name in ("EMPTY_SET", "FROZENSET"):
        stack.append([] if name == "EMPTY_SET" else list(_pop_mark(stack)))
    elif name in ("BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "INT", "BINFLOAT", "FLOAT",
                  "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING",
                  "SHORT_BINSTRING", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8"):
        stack.append(arg)
    elif name == "MARK":
        stack.append(_MARK)
    elif name == "POP":
        stack.pop()
    elif name == "POP_MARK":
        _pop_mark(stack)
    elif name == "DUP":
        stack.append(stack[-1])
    elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
        memo[int(arg)] = stack[-1]
    elif name == "MEMOIZE":
        memo[len(memo)] = stack[-1]
    elif name in ("GET", "BINGET", "LONG_BINGET"):
        stack.append(memo[int(arg)])
    elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
        n = int(name[-1])
        items = tuple(stack[-n:])
        del stack[-n:]
        stack.append(items)
    elif name == "TUPLE":
        stack.append(tuple(_pop_mark(stack)))
    elif name == "LIST":
        stack.append(list(_pop_mark(stack)))
    elif name == "DICT":
        pairs = _pop_mark(stack)
        stack.append(dict(zip(pairs[::2], pairs[1::2])))
    else:
        _step_objects(name, arg, stack, what, allowed)


def _step_objects(name: str, arg: Any, stack: list[Any], what: str,
                  allowed: Callable[[Global], bool] | None) -> None:
    if name in ("GLOBAL", "STACK_GLOBAL"):
        if name == "GLOBAL":
            module, _, attr = str(arg).partition(" ")
        else:
            attr, module = stack.pop(), stack.pop()
        named = Global(str(module), str(attr))
        if allowed is not None and not allowed(named):
            raise RefusedGlobal(named.qualified)
        stack.append(named)
    elif name in ("REDUCE", "NEWOBJ"):
        args = stack.pop()
        func = stack.pop()
        stack.append(_call(func, tuple(args) if isinstance(args, (tuple, list)) else (args,)))
    elif name == "NEWOBJ_EX":
        stack.pop()  # keyword arguments
        args = stack.pop()
        func = stack.pop()
        stack.append(_call(func, tuple(args) if isinstance(args, (tuple, list)) else (args,)))
    elif name == "BUILD":
        state = stack.pop()
        target = stack[-1]
        if isinstance(target, Call):
            target.state = state
    elif name in ("APPEND", "APPENDS"):
        items = [stack.pop()] if name == "APPEND" else _pop_mark(stack)
        target = stack[-1]
        if isinstance(target, list):
            target.extend(items)
        elif isinstance(target, Call):
            target.items.extend(items)
    elif name in ("SETITEM", "SETITEMS"):
        if name == "SETITEM":
            value, key = stack.pop(), stack.pop()
            items = [key, value]
        else:
            items = _pop_mark(stack)
        target = stack[-1]
        if isinstance(target, dict):
            for k, v in zip(items[::2], items[1::2]):
                target[k if isinstance(k, (str, int, float, bool, tuple)) or k is None else repr(k)] = v
        elif isinstance(target, Call):
            target.items.extend(items)
    elif name == "ADDITEMS":
        items = _pop_mark(stack)
        if isinstance(stack[-1], list):
            stack[-1].extend(items)
    elif name in ("PERSID", "BINPERSID"):
        stack.append(Persistent(arg if name == "PERSID" else stack.pop()))
    else:
        raise InputError(f"{what}: refused: pickle opcode {name} (no PyTorch archive writes it)")


def _call(func: Any, args: tuple[Any, ...]) -> Any:
    """What a REDUCE builds: an OrderedDict is a dict, a rebuilt tensor (or parameter, or tensor
    subclass) a TensorRecord, anything else a Call record."""
    if isinstance(func, Global):
        q = func.qualified
        if q == "collections.OrderedDict":
            return {}
        if q in _REBUILD_TENSOR:
            return _tensor(func, args)
        if q in _REBUILD_PARAMETER and args and isinstance(args[0], TensorRecord):
            t = args[0]
            grad = bool(args[1]) if len(args) > 1 and isinstance(args[1], bool) else True
            return TensorRecord(t.storage, t.dtype, t.storage_numel, t.offset, t.shape, t.strides, grad)
        if q == "torch._tensor._rebuild_from_type_v2" and len(args) >= 3 and isinstance(args[2], tuple):
            return _call(args[0], args[2])  # (func, subclass, func's args, state): the tensor func makes
    return Call(func, args)


def _tensor(func: Global, args: tuple[Any, ...]) -> Any:
    """torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks), and
    _v3(..., dtype) whose dtype says what an untyped storage holds."""
    if len(args) < 4 or not isinstance(args[0], Persistent):
        return Call(func, args)
    pid = args[0].pid
    if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
        raise ValueError("a tensor whose storage is no ('storage', type, key, location, numel) id")
    kind, key, numel = pid[1], pid[2], as_int(pid[4])
    offset = as_int(args[1])
    shape, strides = args[2], args[3]
    why = shape_problem(list(shape) if isinstance(shape, tuple) else shape)
    if why is not None:
        raise ValueError(f"a tensor shape: {why}")
    if (numel is None or numel < 0 or offset is None or offset < 0 or not isinstance(strides, tuple)
            or len(strides) != len(shape) or any(as_int(s) is None or s < 0 for s in strides)):
        raise ValueError("a tensor with a malformed storage size, offset or strides")
    dtype = TORCH_STORAGE_TYPES.get(kind.name, "unknown") if isinstance(kind, Global) else "unknown"
    if func.name == "_rebuild_tensor_v3" and len(args) > 6 and isinstance(args[6], Global):
        dtype = args[6].name  # torch's spelling (torch.<name>)
    grad = (args[5] if func.name == "_rebuild_qtensor" and len(args) > 5 else len(args) > 4 and args[4]) is True
    return TensorRecord(str(key)[:200], dtype, numel, offset, tuple(int(d) for d in shape),
                        tuple(int(s) for s in strides), grad)


def _resolve(value: Any) -> Any:
    return None if value is _MARK else value
