"""The zoo's exports, once per session, shared by the conformance and consistency suites.

Where the exports live:

- ``MHAINSPECT_ZOO_DIR`` when set (that folder, reused across runs as it is);
- else a cache outside the repository, ``$XDG_CACHE_HOME/mhainspect-tests/zoo-<key>`` (default
  ``~/.cache/mhainspect-tests``), where the key hashes what the exports depend on: the generator's
  code (zoo.py, extended.py), the versions of torch, transformers, onnx, onnxscript and
  onnxruntime, and the Python version. Unchanged inputs reuse the exports of an earlier run (a
  run cut short keeps the models it finished); any change gives a new key and a fresh export;
- under ``CI=true`` (or ``MHAINSPECT_ZOO_CACHE=0``), a session temp folder: a clean machine
  builds the zoo fresh.

The export says how far it is, on the terminal, while it runs (it is most of the suite's time).
"""

from __future__ import annotations

import os
import time
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
    from tests.conformance.zoo_cache import Progress, zoo_dir

@pytest.fixture(scope="session")
def manifest(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
             ) -> dict[tuple[str, str], dict[str, Any]]:
    outdir, how = zoo_dir(tmp_path_factory, EXTENDED_VARIANTS)
    jobs = int(os.environ.get("MHAINSPECT_ZOO_JOBS", "2"))
    total = len(zoo.CASES) * len(zoo.VARIANTS) + len(EXTENDED_CASES) * len(EXTENDED_VARIANTS)
    progress = Progress(pytestconfig, total, outdir, how)
    zoo.export_all(outdir, jobs=jobs, progress=progress)
    result = zoo.export_all(outdir, cases=EXTENDED_CASES, variants=EXTENDED_VARIANTS, jobs=jobs, progress=progress)
    progress.say(f"conformance zoo: ready ({progress.done} exported now, {total - progress.done} reused) in "
                 f"{time.monotonic() - progress.start:.0f} s")
    entries = {
        (e["case"], e["variant"]): dict(e, path=str(outdir / e["file"]) if e.get("file") else None)
        for e in result["entries"]
    }
    return entries
