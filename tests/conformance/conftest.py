"""The zoo's exports, once per session, shared by the conformance and consistency suites.

Exports are cached in MHAINSPECT_ZOO_DIR when set (reuse across runs), else in a session temp dir.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

# Architectures beyond the list: one exporter by default, every exporter on request.
try:
    from tests.conformance import zoo
    from tests.conformance.extended import DEFAULT_VARIANTS, EXTENDED_CASES
except ImportError:  # no torch / transformers: the suites skip themselves
    EXTENDED_VARIANTS: tuple[Any, ...] = ()
else:
    EXTENDED_VARIANTS = tuple(v for v in zoo.VARIANTS if os.environ.get("MHAINSPECT_CONFORMANCE_FULL")
                              or v.name in DEFAULT_VARIANTS)


@pytest.fixture(scope="session")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Any]]:
    outdir = Path(os.environ.get("MHAINSPECT_ZOO_DIR") or tmp_path_factory.mktemp("zoo"))
    jobs = int(os.environ.get("MHAINSPECT_ZOO_JOBS", "2"))
    zoo.export_all(outdir, jobs=jobs)
    result = zoo.export_all(outdir, cases=EXTENDED_CASES, variants=EXTENDED_VARIANTS, jobs=jobs)
    entries = {
        (e["case"], e["variant"]): dict(e, path=str(outdir / e["file"]) if e.get("file") else None)
        for e in result["entries"]
    }
    return entries
