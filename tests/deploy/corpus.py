"""Compare mhainspect's blocks with the truth of the deployment corpus (scripts/make_deploy_corpus.py).

Shared by tests/deploy/test_deploy_corpus.py and scripts/deploy_report.py, so the test and the
table in docs/conformance.md count the same way.

Matching: blocks that report the same (role, weight tensor) projection as an earlier block are
duplicates. The others are paired with the truth first where every field is equal (exact), then in
file order (wrong: the fields that differ are listed); truth left over is missing; found blocks left
over are extra (false positives).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mhainspect.pipeline import audit
from mhainspect.results import AttentionBlock, Report

ENV_VAR = "MHAINSPECT_DEPLOY_CORPUS"
BLOCK_FIELDS = ("kind", "num_heads", "num_kv_heads", "d_model", "d_k", "d_v")
PARAM_FIELDS = ("q", "k", "v", "o", "bias", "total")


@dataclass(frozen=True)
class Outcome:
    """How the blocks found in one file compare with its truth."""

    expected: int
    found: int
    exact: int
    wrong: tuple[tuple[str, str], ...]  # (block name, "field got != want, ...") per wrong block
    missing: int
    duplicated: tuple[str, ...]  # names of blocks that repeat an earlier block's projections
    extra: tuple[str, ...]  # names of found blocks with no truth block left (false positives)
    mha004: int = 0
    error: str | None = None  # analysis raised
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return (self.error is None and self.exact == self.expected and not self.wrong and not self.missing
                and not self.duplicated and not self.extra)

    def problems(self) -> list[str]:
        out: list[str] = []
        if self.error:
            out.append(f"analysis failed: {self.error}")
        by_difference: dict[str, list[str]] = {}
        for name, difference in self.wrong:  # one line per kind of error, naming the blocks it hits
            by_difference.setdefault(difference, []).append(name)
        out += [f"{', '.join(names)}: {difference}" for difference, names in by_difference.items()]
        if self.missing:
            out.append(f"{self.missing} of {self.expected} blocks missing")
        if self.duplicated:
            out.append(f"{len(self.duplicated)} duplicated: {', '.join(self.duplicated)}")
        if self.extra:
            out.append(f"{len(self.extra)} extra (no such attention module): {', '.join(self.extra)}")
        return out


def load_manifest(root: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads((root / "truth.json").read_text(encoding="utf-8"))
    return manifest


def corpus_root() -> Path | None:
    value = os.environ.get(ENV_VAR)
    return Path(value) if value else None


def _values(block: AttentionBlock) -> dict[str, Any]:
    got: dict[str, Any] = {f: getattr(block, f) for f in BLOCK_FIELDS}
    got.update({f: getattr(block.params, f) for f in PARAM_FIELDS})
    return got


def _differences(got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    return [f"{f} {got[f]} != {want[f]}" for f in BLOCK_FIELDS + PARAM_FIELDS if got[f] != want[f]]


def compare(report: Report, truth: list[dict[str, Any]]) -> Outcome:
    seen: set[tuple[str, str]] = set()
    distinct: list[AttentionBlock] = []
    duplicated: list[str] = []
    for block in report.blocks:
        keys = {(p.role, p.weight) for p in block.projections if p.weight}
        if keys & seen:
            duplicated.append(block.name)
        else:
            distinct.append(block)
        seen |= keys
    left = list(range(len(truth)))
    unmatched: list[AttentionBlock] = []
    exact = 0
    for block in distinct:
        got = _values(block)
        hit = next((i for i in left if not _differences(got, truth[i])), None)
        if hit is None:
            unmatched.append(block)
        else:
            left.remove(hit)
            exact += 1
    wrong: list[tuple[str, str]] = []
    extra: list[str] = []
    for block in unmatched:
        if not left:
            extra.append(block.name)
            continue
        want = truth[left.pop(0)]
        wrong.append((block.name, ", ".join(_differences(_values(block), want))))
    return Outcome(expected=len(truth), found=len(report.blocks), exact=exact, wrong=tuple(wrong), missing=len(left),
                   duplicated=tuple(duplicated), extra=tuple(extra),
                   mha004=sum(1 for f in report.flags if f.code == "MHA004"))


def evaluate(root: Path, entry: dict[str, Any]) -> Outcome:
    try:
        report = audit(root / entry["file"])
    except Exception as exc:  # noqa: BLE001 - recorded as the outcome, the table goes on
        return Outcome(expected=len(entry["blocks"]), found=0, exact=0, wrong=(), missing=len(entry["blocks"]),
                       duplicated=(), extra=(), error=f"{type(exc).__name__}: {exc}")
    return compare(report, entry["blocks"])


def file_entries(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in manifest["entries"] if e["status"] == "ok"]


def skipped_steps(manifest: dict[str, Any]) -> dict[str, str]:
    return {e["step"]: e["reason"] for e in manifest["entries"] if e["status"] != "ok"}


def summary_line(outcome: Outcome) -> str:
    """One line for the known-gaps table: what is wrong, with the observed values."""
    return "; ".join(outcome.problems())
