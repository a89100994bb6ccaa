"""Human names for blocks: the common module scope of their projections."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from mhainspect.results import Projection

if TYPE_CHECKING:  # annotations only: the weight-name grouping imports this module without any graph
    from mhainspect.ir.dataflow import GraphIndex
    from mhainspect.ir.graph import Node

# Exporter-generated tensor names carry no module path.
_GENERATED = re.compile(r"^(onnx::|val_|_val_|initializer|const|/)|^[A-Za-z]+_\d+$")


def common_prefix(paths: list[list[str]]) -> list[str]:
    """Longest shared leading run of dotted-path components."""
    if not paths:
        return []
    # The lexicographically smallest and largest paths share exactly the prefix that all share.
    return list(os.path.commonprefix(paths))


def _weight_scope(name: str | None) -> list[str] | None:
    if not name or _GENERATED.search(name) or "." not in name:
        return None
    parts = name.split(".")
    if parts[-1] in ("weight", "bias", "kernel", "W", "b"):
        parts = parts[:-1]
    return parts


def block_name(index: GraphIndex, anchor: Node, projections: tuple[Projection, ...], taken: set[str]) -> str:
    by_name = index.by_name
    scopes = [by_name[p.node].scope.split(".") for p in projections if p.node in by_name and by_name[p.node].scope]
    if anchor.scope:
        scopes.append(anchor.scope.split("."))
    name = ".".join(common_prefix(scopes)) if scopes else ""
    if not name:
        ws = [s for s in (_weight_scope(p.weight) or _weight_scope(p.bias) for p in projections) if s]
        name = ".".join(common_prefix(ws))
    if not name:
        name = anchor.name
    base, n = name, 2
    while name in taken:
        name = f"{base}#{n}"
        n += 1
    taken.add(name)
    return name
