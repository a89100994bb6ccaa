"""Compare every block of the deployment fixtures with the truth: python -m tests.deploy_measure DIR."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

from mhainspect.pipeline import audit
from mhainspect.results import AttentionBlock
from tests.deployment_models import BASES, KINDS, Truth, variant


def mismatch(block: AttentionBlock, t: Truth) -> list[str]:
    got = {"heads": block.num_heads, "kv_heads": block.num_kv_heads, "d_k": block.d_k, "d_v": block.d_v,
           "d_model": block.d_model, "q": block.params.q, "k": block.params.k, "v": block.params.v,
           "o": block.params.o, "bias": block.params.bias}
    return [f"{k}={got[k]} want {getattr(t, k)}" for k in got if got[k] != getattr(t, k)]


def measure(path: Path, truth: tuple[Truth, ...]) -> tuple[int, int, int, int, list[str]]:
    """(exact, wrong, missing, duplicated, details)."""
    report = audit(path)
    blocks = list(report.blocks)
    details = []
    exact = wrong = 0
    for i, b in enumerate(blocks[:len(truth)]):
        m = mismatch(b, truth[i])
        if m:
            wrong += 1
            details.append(f"  block {b.name}: " + ", ".join(m) + (f" [{b.unknown_reason}]" if b.unknown_reason else ""))
        else:
            exact += 1
    missing = max(0, len(truth) - len(blocks))
    dup = max(0, len(blocks) - len(truth))
    for miss in report.misses:
        details.append(f"  miss {miss.anchor}: {miss.reason}")
    return exact, wrong, missing, dup, details


def main(out: Path, kinds: tuple[str, ...] = KINDS, names: tuple[str, ...] = tuple(BASES)) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tot = [0, 0, 0, 0]
    for name in names:
        base = BASES[name](out)
        for kind in kinds:
            try:
                p = variant(base, kind)
            except Exception as exc:  # noqa: BLE001
                print(f"{name}.{kind}: cannot build: {exc!r}")
                continue
            try:
                e, w, m, d, det = measure(p, base.truth)
            except Exception:  # noqa: BLE001
                print(f"{name}.{kind}: CRASH")
                traceback.print_exc()
                continue
            for i, x in enumerate((e, w, m, d)):
                tot[i] += x
            print(f"{name}.{kind}: exact {e} wrong {w} missing {m} dup {d}")
            for line in det:
                print(line)
    print(f"TOTAL exact {tot[0]} wrong {tot[1]} missing {tot[2]} duplicated {tot[3]}")


if __name__ == "__main__":
    kinds = tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else KINDS
    names = tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else tuple(BASES)
    main(Path(sys.argv[1]), kinds, names)
