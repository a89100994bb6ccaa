"""Imports only point down between the stage folders: results <- ir <- matchers <- sources <-
frontends <- analysis <- pipeline <- render <- cli/api (docs/architecture.md). Checked on every
``import`` in the package, function-level ones too."""

from __future__ import annotations

import ast
from pathlib import Path

import mhainspect

ROOT = Path(mhainspect.__file__).parent

# Lower number = lower layer. A module may import its own layer and any lower one.
LAYERS: dict[str, int] = {
    "errors": 0, "results": 0,
    "ir": 1,
    "matchers": 2,
    "sources": 3,
    "frontends": 4,
    "analysis": 5, "conventions": 5,
    "pipeline": 6, "batch": 6,
    "render": 7,
    "api": 8, "cli": 8, "__main__": 8, "__init__": 8,
}
# No exceptions: the old compat shims are gone, and Report's Jupyter hook is attached from the
# package's __init__ (top layer), not from findings.


def _layer(dotted: str) -> tuple[str, int] | None:
    parts = dotted.split(".")
    if parts[0] != "mhainspect":
        return None
    head = parts[1] if len(parts) > 1 else "__init__"
    return head, LAYERS[head]


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:`` (annotations only: no import at run time)."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module != "mhainspect":
                out.add(node.module)
            out.update(f"mhainspect.{a.name}" for a in node.names if node.module == "mhainspect"
                       and ((ROOT / f"{a.name}.py").is_file() or (ROOT / a.name).is_dir()))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_every_module_has_a_layer() -> None:
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        assert _layer("mhainspect." + ".".join(rel.parts)) is not None


def test_imports_point_down() -> None:
    wrong: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        mine = _layer("mhainspect." + rel)
        assert mine is not None
        for target in _imports(path):
            theirs = _layer(target)
            if theirs is None or theirs[1] <= mine[1]:
                continue
            wrong.append(f"{rel} (layer {mine[1]}) imports {target} (layer {theirs[1]})")
    assert not wrong, "\n".join(wrong)
