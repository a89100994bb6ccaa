"""Where the conformance zoo's exports live between runs, and the progress the export reports.

The exports depend on the generator's code (zoo.py, extended.py), on the exporting packages'
versions and on the Python version; ``zoo_key`` hashes those, and an unchanged key reuses the
exports of an earlier run from a cache outside the repository (see tests/conformance/conftest.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.conformance import zoo

_GENERATOR = (Path(__file__).parent / "zoo.py", Path(__file__).parent / "extended.py")


def zoo_key(extended_variants: Sequence[Any] = ()) -> str:
    """A hash of everything the exports depend on: the generator's code, the exporting packages'
    versions, the Python version and the extended variants asked for."""
    digest = hashlib.sha256()
    for path in _GENERATOR:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(json.dumps(zoo._versions(), sort_keys=True).encode())
    digest.update(sys.version.split()[0].encode())
    digest.update(",".join(v.name for v in extended_variants).encode())
    return digest.hexdigest()[:16]


def zoo_dir(tmp_path_factory: pytest.TempPathFactory, extended_variants: Sequence[Any] = ()) -> tuple[Path, str]:
    """Where this session's exports go, and why there (for the progress line)."""
    given = os.environ.get("MHAINSPECT_ZOO_DIR")
    if given:
        return Path(given), "MHAINSPECT_ZOO_DIR"
    if os.environ.get("CI", "").lower() == "true" or os.environ.get("MHAINSPECT_ZOO_CACHE") == "0":
        return tmp_path_factory.mktemp("zoo"), "fresh"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mhainspect-tests"
    return cache / f"zoo-{zoo_key(extended_variants)}", "cache"


class Progress:
    """One line per exported model on the terminal (pytest's capture does not hide it)."""

    def __init__(self, config: pytest.Config, total: int, outdir: Path, how: str) -> None:
        self.reporter = config.pluginmanager.get_plugin("terminalreporter")
        self.total, self.done, self.start = total, 0, time.monotonic()
        cached = sum(1 for _ in outdir.glob("*.onnx")) if outdir.is_dir() else 0
        self.say(f"conformance zoo: {total} exports in {outdir} ({how}; {cached} already there: reused, the rest "
                 "exported now; this takes minutes the first time)")

    def say(self, line: str) -> None:
        if self.reporter is not None:
            self.reporter.write_line(line)

    def __call__(self, entry: dict[str, Any]) -> None:
        self.done += 1
        outcome = "ok" if entry["error"] is None else "failed (recorded)"
        self.say(f"conformance zoo [{self.done} new, {time.monotonic() - self.start:.0f} s] "
                 f"{entry['case']} / {entry['variant']}: {outcome} in {entry['seconds']:.1f} s")
