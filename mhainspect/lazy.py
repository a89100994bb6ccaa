"""Names a package exports but imports only when first asked for (PEP 562): one helper for every
package that keeps a heavy or rarely used module off the import path of ``import mhainspect``
and of a command-line run (torch, the worker pool, the --verify stage, optional Report parts).

It imports nothing of the package, so the lowest layer may use it too."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, names: Mapping[str, str], namespace: dict[str, Any]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` for ``names`` (name -> the module
    that defines it). A name is imported when first asked for and then kept in ``namespace`` (the
    package's ``globals()``), so the next lookup is an ordinary one; ``dir()`` lists it before that
    too. Use: ``__getattr__, __dir__ = lazy_exports(__name__, {...}, globals())``, with the names
    also imported under ``TYPE_CHECKING`` for the type checker."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})

    return __getattr__, __dir__
