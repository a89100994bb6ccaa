"""Neutral graph IR shared by every loader and matcher.

Loaders normalise their source (ONNX protobuf, torch.fx graph, checkpoint) into these types.
Weights are metadata only: shape, dtype and a storage key, never tensor data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

AttrValue = int | float | str | bytes | tuple[int, ...] | tuple[float, ...] | tuple[str, ...] | None


@dataclass(frozen=True, slots=True)  # one per node, weight and declared value: no __dict__ each
class Tensor:
    """A weight or constant: shape and identity, never its data.

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
    # What the exporter says this tensor is: "parameter", "buffer", "constant", "derived"
    # (folded from other tensors), or None when the file does not say (TorchScript, tf2onnx).
    kind: str | None = None
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
        return self.kind is None or self.kind == "parameter"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


# The attributes of a node that has none: one shared, read-only mapping (most nodes of an export).
NO_ATTRS: Mapping[str, AttrValue] = MappingProxyType({})


@dataclass(frozen=True, slots=True)  # one per node, weight and declared value: no __dict__ each
class Node:
    """One operator: ONNX op names, also for graphs lowered from torch."""

    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, AttrValue] = field(default_factory=lambda: NO_ATTRS)
    scope: str = ""
    domain: str = ""

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
    kind: str  # "onnx", "torch", "checkpoint"
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
