"""A pytest plugin that writes the JSON of every Report the test suite builds, one file per report,
so that a refactoring can be shown to change no output on any fixture:

    SNAP_DIR=/tmp/before PYTHONPATH=scripts python -m pytest -q -p report_snapshots   # on the old commit
    SNAP_DIR=/tmp/after  PYTHONPATH=scripts python -m pytest -q -p report_snapshots   # on the new one
    diff -r /tmp/before /tmp/after   # or, numbering aside: python scripts/report_snapshots.py /tmp/before /tmp/after
    python scripts/report_snapshots.py --explain /tmp/before /tmp/after   # which JSON paths differ, in how many tests

Temporary paths are normalised; tests that build random inputs (fuzzing) name theirs differently
on every run, so compare those after replacing the /tmp/mhainspect-fuzz-* prefix."""
from __future__ import annotations

import collections
import importlib
import json
import os
import re

import pytest

OUT = os.environ.get("SNAP_DIR")
_current = ["none"]
_count = collections.Counter()
_TMP = re.compile(r"/tmp/pytest-of-[^/]+/pytest-\d+/|/tmp/tmp[\w]+/|/tmp/[\w.-]*?\d{3,}[\w.-]*")
# Parts of a document that differ between runs of the same code: the conformance zoo's folder (a
# per-user cache keyed by a hash of its sources, or a temporary one) and a test server's port.
_VOLATILE = re.compile(r"/[^\s\"]*?/mhainspect-tests/zoo-[0-9a-f]+/|TMP/zoo\d*/|(?<=127\.0\.0\.1:)\d+")

def _report_cls():
    for name in ("mhainspect.results.report", "mhainspect.results", "mhainspect.findings"):
        try:
            m = importlib.import_module(name)
            if hasattr(m, "Report"):
                return m.Report
        except ImportError:
            pass

def pytest_configure(config):
    if not OUT:
        return
    os.makedirs(OUT, exist_ok=True)
    cls = _report_cls()
    from mhainspect.render.json_render import report_to_dict
    orig = cls.__init__
    def init(self, *a, **k):
        orig(self, *a, **k)
        try:
            text = json.dumps(report_to_dict(self), indent=1, sort_keys=True, default=str)
        except Exception as e:
            text = f"ERROR {type(e).__name__}"
        text = _TMP.sub("TMP/", text)
        key = _current[0]
        _count[key] += 1
        fn = re.sub(r"[^\w.-]+", "_", key)[:180] + f"__{_count[key]}.json"
        with open(os.path.join(OUT, fn), "w") as f:
            f.write(text)
    cls.__init__ = init

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _current[0] = item.nodeid


def compare(before: str, after: str, roots: tuple[str, str] = ("", "")) -> list[str]:
    """The tests whose distinct documents differ between two snapshot folders. Each Report built is
    one file, numbered in the order a test built them; a change that builds one more intermediate
    Report (the same document again) shifts the numbers, so a test's documents compare as a set.
    ``roots``: the two checkouts' paths, replaced by ROOT before comparing."""
    a, b = _load(before, roots[0]), _load(after, roots[1])
    return [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _load(folder: str, root: str) -> dict[str, set[str]]:
    """A snapshot folder as test -> its distinct documents, the checkout's path and the volatile
    parts (``_VOLATILE``) replaced."""
    out: dict[str, set[str]] = collections.defaultdict(set)
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as f:
            text = f.read()
        text = _VOLATILE.sub("ZOO/", text.replace(root, "ROOT") if root else text)
        out[re.sub(r"__\d+\.json$", "", name)].add(text)
    return out


def _paths(a: object, b: object, at: str = "") -> set[str]:
    """The JSON paths (list indices written []) where two documents differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: set[str] = set()
        for k in set(a) | set(b):
            if k not in a or k not in b:
                out.add(f"{at}.{k}" + (" (added)" if k not in a else " (removed)"))
            else:
                out |= _paths(a[k], b[k], f"{at}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return {f"{at} (length {len(a)} -> {len(b)})"}
        return set().union(*(_paths(x, y, f"{at}[]") for x, y in zip(a, b))) if a else set()
    return set() if a == b else {at or "."}


def explain(before: str, after: str, roots: tuple[str, str] = ("", "")) -> str:
    """What ``compare`` found, by kind: tests only before (renamed or removed), only after (new),
    and for tests in both, the JSON paths where their documents differ, with how many tests each
    (a test's documents paired in sorted order; unequal counts said as such)."""
    a = {k: sorted(v) for k, v in _load(before, roots[0]).items()}
    b = {k: sorted(v) for k, v in _load(after, roots[1]).items()}
    only_a = sorted(set(a) - set(b))
    only_b = sorted(set(b) - set(a))
    paths: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    differing = 0
    for k in sorted(set(a) & set(b)):
        if a[k] == b[k]:
            continue
        differing += 1
        found: set[str] = set()
        if len(a[k]) != len(b[k]):
            found.add(f"(documents {len(a[k])} -> {len(b[k])})")
        for x, y in zip(a[k], b[k]):
            try:
                found |= _paths(json.loads(x), json.loads(y))
            except json.JSONDecodeError:
                found.add("(not JSON)")
        for path in found:
            paths[path] += 1
            examples.setdefault(path, k)
    lines = [f"tests in both: {len(set(a) & set(b))}, with differing documents: {differing}",
             f"tests only before: {len(only_a)}", f"tests only after: {len(only_b)}", "",
             "differing JSON paths (tests, first example):"]
    lines += [f"  {n:6d}  {path}   e.g. {examples[path]}" for path, n in paths.most_common()]
    return "\n".join(lines)


if __name__ == "__main__":  # python scripts/report_snapshots.py [--explain] BEFORE AFTER [ROOT_BEFORE ROOT_AFTER]
    import sys

    args = sys.argv[1:]
    explaining = "--explain" in args
    args = [x for x in args if x != "--explain"]
    roots = (args[2], args[3]) if len(args) == 4 else ("", "")
    if explaining:
        print(explain(args[0], args[1], roots))
        sys.exit(0)
    differing = compare(args[0], args[1], roots)
    print("\n".join(differing) or "no test's documents differ")
    sys.exit(1 if differing else 0)
