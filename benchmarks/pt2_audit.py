"""Benchmark: auditing a torch.export program (.pt2) that holds ~1 GB of weights.

    python benchmarks/pt2_audit.py [--repeat 5] [--keep DIR] [--layers 16]

Builds (once, into --keep or a temporary folder) a Llama-style decoder with random weights
(hidden 1024, 16 layers by default, vocabulary 32000, float32: 1.0 GB), exports it with dynamic batch and
sequence (torch.export.export) and saves it with torch.export.save. Then audits it as a fresh child
process per run (`mhainspect PATH --format json -o OUT`: interpreter start and imports included),
printing the best wall time and the peak RSS (the child's ru_maxrss via os.wait4, max over runs),
beside the archive's size and the size of its JSON graph. The claim it checks: under 2 s and under
300 MB, i.e. about the cost of the graph, not of the weights (which are never read).

Also proves the weights are never read (Linux): the archive is evicted from the page cache, audited
once more, and the pages inside its weight members that are cached afterwards are counted (zero:
only the zip directory and the JSON members were read). Needs torch and transformers to build the
model (the audit itself needs neither).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

PY = sys.executable
_BIN = Path(PY).parent / "mhainspect"
MHAINSPECT = [str(_BIN)] if _BIN.exists() else [PY, "-m", "mhainspect"]
TIME_BUDGET_S = 2.0
RSS_BUDGET_MB = 300


def build(path: Path, layers: int) -> None:
    import torch
    import transformers
    from torch.export import Dim

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                                   num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=4,
                                   max_position_embeddings=2048, attn_implementation="eager", use_cache=False)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.zeros(2, 16, dtype=torch.long)
    program = torch.export.export(model, (ids,), dynamic_shapes=({0: Dim.AUTO, 1: Dim.AUTO},), strict=False)
    torch.export.save(program, str(path))


def run_once(path: Path, out: Path) -> tuple[float, int, int, str, float]:
    """(wall seconds, peak RSS in KiB, exit code, stderr, CPU seconds) of one audit in a fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen([*MHAINSPECT, str(path), "--format", "json", "-o", str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr is not None else ""
    return seconds, usage.ru_maxrss, os.waitstatus_to_exitcode(status), err, usage.ru_utime + usage.ru_stime


def json_size(path: Path) -> int:
    with zipfile.ZipFile(path) as z:
        return sum(i.file_size for i in z.infolist() if i.filename.endswith(".json"))


def weight_pages_read(path: Path, out: Path) -> tuple[int, int]:
    """(pages inside weight members cached after an audit of the evicted archive, pages they span)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from page_cache import page_residency

    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    run_once(path, out)
    resident = page_residency(path)
    page = os.sysconf("SC_PAGE_SIZE")
    touched = spanned = 0
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if "/data/weights/weight_" not in info.filename or info.file_size < 4 * page:
                continue
            start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
            first, last = -(-start // page) + 1, (start + info.file_size) // page - 1  # interior pages only
            spanned += max(0, last - first)
            touched += sum(1 for i in range(first, last) if resident[i] & 1)
    return touched, spanned


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--keep", type=Path, default=None, help="folder for the built archive (reused when there)")
    parser.add_argument("--build", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build is not None:
        build(args.build, args.layers)
        return 0
    folder = args.keep or Path(tempfile.mkdtemp(prefix="mhainspect-pt2-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"llama_{args.layers}l.pt2"
    if not path.exists():
        print(f"building {path} ...", flush=True)
        # In a child: a child forked from this process would start with the model's memory as its
        # peak RSS (ru_maxrss survives exec).
        subprocess.run([PY, __file__, "--build", str(path), "--layers", str(args.layers)], check=True)
    size = path.stat().st_size
    print(f"archive: {size / 1e9:.2f} GB ({size:,} bytes), JSON members {json_size(path) / 1e6:.1f} MB")
    out = folder / "report.json"
    runs = [run_once(path, out) for _ in range(args.repeat)]
    failed = [r for r in runs if r[2] != 0]
    if failed:
        print(f"audit failed (exit {failed[0][2]}): {failed[0][3].strip()}")
        return 1
    best = min(r[0] for r in runs)
    cpu = min(r[4] for r in runs)
    peak_mb = max(r[1] for r in runs) / 1024
    report = json.loads(out.read_text())
    print(f"audit: best {best:.2f} s wall ({cpu:.2f} s CPU) of {args.repeat}, peak RSS {peak_mb:.0f} MB; "
          f"{len(report['blocks'])} blocks, {report['model']['total_params']:,} parameters; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    touched, spanned = weight_pages_read(path, folder / "evicted.json")
    print(f"weights never read: {touched:,} of the {spanned:,} pages inside weight members were read")
    same = touched == 0
    ok = best < TIME_BUDGET_S and peak_mb < RSS_BUDGET_MB and same
    print(f"{'PASS' if ok else 'FAIL'}: under {TIME_BUDGET_S} s and {RSS_BUDGET_MB} MB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
