"""The committed toolchain fixtures (tests/data/toolchains/TOOLCHAIN/NAME[.int8].onnx, NAME.json)
and how an audit of one compares with its truth: shared by tests/test_toolchains.py and
scripts/toolchain_report.py (docs/conformance.md's toolchain table).

The truth JSON is written by scripts/toolchains/make_*.py from the framework's own layer objects.
A block matches a truth layer when heads, K/V heads, d_k, d_v, d_model, parameters and kind are all
equal; a file is exact when every layer is matched by one block, no block is left over, and the
model's total equals the framework's count.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mhainspect.results import Report

DATA = Path(__file__).parent / "data" / "toolchains"

# What each not-yet-exact fixture lacks, by fixture id (toolchain/file) or by model (toolchain/NAME*,
# the export and its int8 copy). Remove an entry when its gap is closed: strict xfail fails then.
GAPS: dict[str, str] = {}

FIELDS = ("kind", "heads", "kv_heads", "d_k", "d_v", "d_model", "params")


@dataclass(frozen=True)
class Fixture:
    toolchain: str
    path: Path  # an ONNX file or a .keras archive
    truth_path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def model(self) -> str:
        """The model's name: the export and its int8 copy share it (NAME.onnx, NAME.int8.onnx)."""
        return self.path.name.split(".", 1)[0]

    @property
    def id(self) -> str:
        return f"{self.toolchain}/{self.path.name}"

    def truth(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.truth_path.read_text())
        return data


def fixtures(data: Path = DATA) -> list[Fixture]:
    """Every committed model file with the truth beside it (NAME.int8.onnx shares NAME.json)."""
    out: list[Fixture] = []
    for path in sorted(data.glob("*/*")):
        if path.suffix not in (".onnx", ".keras", ".h5"):
            continue
        stem = path.name.split(".", 1)[0]
        truth = path.with_name(stem + ".json")
        if truth.is_file():
            out.append(Fixture(path.parent.name, path, truth))
    return out


def block_key(values: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(values.get(f) for f in FIELDS)


def report_keys(report: Report) -> list[tuple[Any, ...]]:
    return [block_key({"kind": str(b.kind), "heads": b.num_heads, "kv_heads": b.num_kv_heads, "d_k": b.d_k,
                       "d_v": b.d_v, "d_model": b.d_model, "params": b.params.total}) for b in report.blocks]


@dataclass(frozen=True)
class Outcome:
    expected: int  # attention layers in the truth
    found: int  # blocks in the report
    matched: int  # truth layers matched by a block with every field equal
    total: int  # the report's model total
    true_total: int
    differences: tuple[str, ...]

    @property
    def exact(self) -> bool:
        return not self.differences

    def why(self) -> str:
        return "; ".join(self.differences)


def compare(report: Report, truth: dict[str, Any]) -> Outcome:
    want = Counter(block_key(b) for b in truth["blocks"])
    got = Counter(report_keys(report))
    matched = sum((want & got).values())
    diffs: list[str] = []
    missing, extra = want - got, got - want
    if missing or extra:
        fields = ",".join(FIELDS)
        diffs.append(f"blocks ({fields}): expected {sorted(missing.elements(), key=str)} "
                     f"got {sorted(extra.elements(), key=str)}")
    total = report.model.total_params
    if total != truth["total_params"]:
        diffs.append(f"total {total:,} != {truth['total_params']:,}")
    return Outcome(sum(want.values()), sum(got.values()), matched, total, truth["total_params"], tuple(diffs))


def gap(fixture: Fixture) -> str | None:
    """The known matcher gap of a fixture (GAPS), by its id or its model's."""
    return GAPS.get(fixture.id) or GAPS.get(f"{fixture.toolchain}/{fixture.model}*")
