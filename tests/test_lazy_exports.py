"""The packages that export names imported only when first asked for (``mhainspect.lazy``): each
name is reachable, listed by ``dir()`` before and after it is imported, imported from the module its
package names, and a name no package exports is an AttributeError, as for any module."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from mhainspect.lazy import lazy_exports

# package -> (a lazy name, the module it comes from)
LAZY = {"mhainspect": ("calc", "mhainspect.api"),
        "mhainspect.batch": ("workers_for", "mhainspect.batch.pool"),
        "mhainspect.pipeline": ("VerifyRequest", "mhainspect.pipeline.verify"),
        "mhainspect.results": ("GpuFit", "mhainspect.results.optional")}


@pytest.mark.parametrize("package", sorted(LAZY))
def test_lazy_name_reachable_and_listed(package: str) -> None:
    name, source = LAZY[package]
    module = importlib.import_module(package)
    assert name in dir(module)
    assert name in module.__all__
    assert getattr(module, name) is getattr(importlib.import_module(source), name)
    assert name in dir(module) and dir(module) == sorted(dir(module))
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018 -- the lookup is the test


@pytest.mark.parametrize("package", sorted(LAZY))
def test_import_leaves_lazy_module_unloaded(package: str) -> None:
    """Importing the package (in a fresh interpreter) does not import what it exports lazily."""
    name, source = LAZY[package]
    code = (f"import sys, {package} as p; assert {source!r} not in sys.modules; assert {name!r} in dir(p); "
            f"p.{name}; assert {source!r} in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_helper_imports_once_then_keeps_the_name() -> None:
    namespace: dict[str, object] = {"here": 1}
    getattr_, dir_ = lazy_exports("pkg", {"dedent": "textwrap"}, namespace)
    assert dir_() == ["dedent", "here"]
    import textwrap

    assert getattr_("dedent") is textwrap.dedent
    assert namespace["dedent"] is textwrap.dedent  # later lookups are ordinary ones
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'here_not'"):
        getattr_("here_not")
