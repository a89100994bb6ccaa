"""What an archive reader hands the archive front end: a graph in the neutral IR and the stored
tensors it reads, by module path (no tensor data)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mhainspect.ir.graph import ModelGraph


@dataclass(frozen=True)
class ArchiveWeight:
    """A parameter, buffer or constant of an archive's model, by its module path; ``storage_key``
    is equal for tensors that share storage (tied weights)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    storage_key: str
    is_parameter: bool
    trainable: bool


@dataclass(frozen=True)
class ArchiveProgram:
    """A model read from an archive: its graph (empty when the archive has none the reader can
    convert), its stored tensors, the class of its root module, and notes for the report."""

    graph: ModelGraph
    weights: tuple[ArchiveWeight, ...]
    root_class: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    # module path -> qualified class name (TorchScript's mangling dropped), where the archive says
    module_classes: Mapping[str, str] = field(default_factory=dict)
