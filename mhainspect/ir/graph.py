"""Neutral graph IR shared by every loader and matcher.

Loaders normalise their source (ONNX protobuf, torch.fx graph, checkpoint) into these types.
Weights are metadata only: shape, dtype and a storage key, never tensor data.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, NoReturn, overload

from mhainspect.results.vocabulary import Vocabulary

AttrValue = int | float | str | bytes | tuple[int, ...] | tuple[float, ...] | tuple[str, ...] | None


class TensorKind(Vocabulary):
    """What an exporter says a stored tensor is (``Tensor.kind``)."""

    PARAMETER = "parameter"
    BUFFER = "buffer"
    CONSTANT = "constant"
    DERIVED = "derived"  # folded from other tensors: a value the exporter computed


class GraphKind(Vocabulary):
    """Which front end built a ``ModelGraph`` (the report's format when the caller names none)."""

    ONNX = "onnx"
    TORCH = "torch"


class Tensor(NamedTuple):
    """A weight or constant: shape and identity, never its data. A NamedTuple, as ``Node`` (one per
    stored tensor: thousands in a large export); a changed copy is ``t._replace(...)``.

    ``storage_key`` is equal for tensors that share storage (tied weights), so they count once.
    ``int_value`` carries the value of small integer constants (shape arithmetic) only.
    ``float_value`` carries the value of float scalars (attention scale), only when tiny.
    ``mask_values`` carries the flat values (bool as 0/1) of bool/float tensors of rank >= 2 with
    at most 1024 elements: an attention mask an exporter folded to a constant, read to tell causal
    from bidirectional.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    storage_key: str
    int_value: tuple[int, ...] | None = None
    float_value: float | None = None
    is_constant_node: bool = False
    # What the exporter says this tensor is, or None when the file does not say (TorchScript, tf2onnx).
    kind: TensorKind | None = None
    origin: str | None = None  # the parameter this tensor was folded from (e.g. transposed)
    location: str | None = None  # the external-data file holding its bytes (None: inside the model file)
    external_length: int | None = None  # bytes the external data file gives it (its 'length' entry), when stated
    mask_values: tuple[float, ...] | None = None
    # The parameters the exporter folded this tensor from, when there are several (a Q projection
    # computed at export: the learned tokens, a norm's weight, the projection's weight); () otherwise.
    folded_params: tuple[str, ...] = ()

    @property
    def display_name(self) -> str:
        return self.origin or self.name

    @property
    def may_be_parameter(self) -> bool:
        """False when the exporter says this tensor is no parameter (a buffer, a constant, a value
        folded from non-parameters); True when it says parameter or says nothing."""
        return self.kind is None or self.kind is TensorKind.PARAMETER

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


class Attrs(dict[str, AttrValue]):
    """A node's attributes by name, read-only, with typed getters: ``attrs.int("axis", 0)``.

    A getter gives the attribute when it has the asked type, else the default (None where none is
    given): an attribute of another type, as a hostile or broken file may write, is as if absent.
    ``tensor`` is the value of a one-element tensor attribute (ConstantOfShape's fill value: the only
    tensor attribute the IR keeps, never a weight)."""

    __slots__ = ()

    def _read_only(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("node attributes are read-only")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _read_only

    def __reduce__(self) -> tuple[type[Attrs], tuple[dict[str, AttrValue]]]:
        return Attrs, (dict(self),)  # pickled by value (a dict subclass would be refilled item by item)

    @overload
    def int(self, name: builtins.str) -> builtins.int | None: ...
    @overload
    def int(self, name: builtins.str, default: builtins.int) -> builtins.int: ...

    def int(self, name: builtins.str, default: builtins.int | None = None) -> builtins.int | None:
        v = self.get(name)
        return builtins.int(v) if isinstance(v, builtins.int) else default

    @overload
    def float(self, name: builtins.str) -> builtins.float | None: ...
    @overload
    def float(self, name: builtins.str, default: builtins.float) -> builtins.float: ...

    def float(self, name: builtins.str, default: builtins.float | None = None) -> builtins.float | None:
        """A float attribute (an int one read as a float: converters write alpha=1 as either)."""
        v = self.get(name)
        return builtins.float(v) if isinstance(v, (builtins.int, builtins.float)) else default

    def str(self, name: builtins.str, default: builtins.str = "") -> builtins.str:
        v = self.get(name)
        return v if isinstance(v, builtins.str) else default

    def ints(self, name: builtins.str) -> tuple[builtins.int, ...] | None:
        v = self.get(name)
        if isinstance(v, tuple) and all(type(x) is builtins.int for x in v):
            return v  # type: ignore[return-value]  # checked element by element just above
        return None

    def floats(self, name: builtins.str) -> tuple[builtins.float, ...] | None:
        v = self.get(name)
        if isinstance(v, tuple) and all(isinstance(x, (builtins.int, builtins.float)) for x in v):
            return tuple(builtins.float(x) for x in v)
        return None

    def tensor(self, name: builtins.str) -> builtins.int | builtins.float | None:
        v = self.get(name)
        return v if isinstance(v, (builtins.int, builtins.float)) else None


# The attributes of a node that has none: one shared, read-only value (most nodes of an export).
NO_ATTRS = Attrs()


class _NodeFields(NamedTuple):
    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Attrs = NO_ATTRS
    scope: str = ""
    domain: str = ""


class Node(_NodeFields):
    """One operator: ONNX op names, also for graphs lowered from torch.

    A NamedTuple, not a frozen dataclass: a large export has tens of thousands of nodes, and a frozen
    dataclass's ``__init__`` (one ``object.__setattr__`` per field) costs about 3.5x a tuple's
    (about 12,000 against 3,400 instructions): 2.5% of a whole 70B-graph run. A changed copy is
    ``node._replace(...)``."""

    __slots__ = ()

    def __new__(cls, name: str, op: str, inputs: tuple[str, ...], outputs: tuple[str, ...],
                attrs: Attrs = NO_ATTRS, scope: str = "", domain: str = "") -> Node:
        if type(attrs) is not Attrs:  # a plain mapping (a front end, a test): read-only and typed
            attrs = Attrs(attrs)
        return tuple.__new__(cls, (name, op, inputs, outputs, attrs, scope, domain))

    @property
    def op_domain(self) -> str:
        """The operator set the op belongs to: "" for the ONNX standard (also spelled "ai.onnx")."""
        return "" if self.domain in ("", "ai.onnx") else self.domain


@dataclass(frozen=True, slots=True)  # one per node, weight and declared value: no __dict__ each
class ValueInfo:
    """Declared type of a graph input/output or intermediate (dims are int or symbol names)."""

    name: str
    shape: tuple[int | str | None, ...] | None
    dtype: str


@dataclass(frozen=True, slots=True)
class FoldedCopy:
    """A stored tensor whose values an exporter's constant folding made from a parameter (a
    transposed copy of a tied embedding, a relative-position table gathered by a constant index
    or padded with zeros), found by its values (``mhainspect.ir.copies``).

    ``source``: the stored parameter it repeats ("" when the file keeps only the copy); ``params``:
    the parameters the copy holds of its own: 0 when its source is stored (counted there), else the
    source's elements it carries (a gathered table's distinct values, a padded table's inner part).
    """

    copy: str
    source: str
    view: str  # how the exporter made it: "transposed", "permuted (2, 0, 1)", "gathered", "padded", ...
    params: int
    detail: str = ""


@dataclass(frozen=True)
class ModelGraph:
    """A model as the matchers see it: nodes in file order, weights by name, declared types."""

    source: str
    kind: GraphKind
    nodes: tuple[Node, ...]
    weights: Mapping[str, Tensor]
    inputs: tuple[ValueInfo, ...] = ()
    outputs: tuple[ValueInfo, ...] = ()
    value_info: Mapping[str, ValueInfo] = field(default_factory=dict)
    opset: int | None = None
    producer: str = ""
    warnings: tuple[str, ...] = ()
    # Stored tensors that are exporter-made copies of a parameter, by name (FoldedCopy): found from
    # their values by the ONNX door, empty for every other source.
    folded: Mapping[str, FoldedCopy] = field(default_factory=dict)
