"""Benchmark: processes or threads for --jobs, on local files (CPU-bound) and remote ones (waiting).

    python benchmarks/batch_jobs.py [--models 16] [--layers 48] [--latency 0.05] [--jobs 2,8]

Writes ``--models`` Hugging Face folders shaped like a 48-layer Llama (config.json and one
header-only, sparse safetensors file: the audit reads the header and the config, as it does for a
real checkpoint), then audits all of them with mhainspect.batch.run_many (the engine behind
--jobs and audit_many) in three spreads of the same number of concurrent audits:

- ``threads``: one worker process, all audits as threads in it;
- ``processes``: one worker process per audit;
- ``default``: what --jobs does (processes up to the CPU count, threads beyond).

once from the local folders and once over HTTP from a range server on 127.0.0.1 that waits
``--latency`` seconds before each answer (the tests' FileServer), each spread after a one-process
baseline (jobs 1, in the calling process). Per run: the wall time, worker start-up included. Folders
go to $MHAINSPECT_BENCH_DIR or /tmp/mhainspect-bench/batch.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from remote_models import llama_config, llama_tensors, write_hf_folder  # noqa: E402
from remote_servers import FileServer  # noqa: E402

from mhainspect.batch import AuditFailure, Workers, run_many, workers_for  # noqa: E402
from mhainspect.pipeline import AuditRequest, run  # noqa: E402


def _folders(where: Path, n: int, layers: int) -> list[Path]:
    out = []
    for i in range(n):
        folder = where / f"m{i:03d}"
        if not (folder / "config.json").exists():
            d, heads, kv = 4096, 32, 8
            write_hf_folder(folder, llama_config(d, heads, kv, layers, vocab=32000 + i, ffn=14336),
                            llama_tensors(d, heads, kv, layers, vocab=32000 + i, ffn=14336))
        out.append(folder)
    return out


def _audited(text: str) -> int:
    """Audit one input (a failure stops the benchmark); its model count."""
    results = list(run(AuditRequest((text,))))
    for r in results:
        if isinstance(r, AuditFailure):
            raise SystemExit(f"benchmark: {r.message}")
    return len(results)


def _time(inputs: list[str], jobs: int, workers: Workers | None) -> float:
    """Wall seconds of the run (worker start-up included)."""
    start = time.perf_counter()
    results = list(run_many(_audited, inputs, jobs, workers=workers))
    elapsed = time.perf_counter() - start
    failed = [r for _, r in results if isinstance(r, AuditFailure)]
    if failed:
        raise SystemExit(f"benchmark: {failed[0].message}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=16)
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--jobs", default="2,8")
    args = parser.parse_args()
    where = Path(os.environ.get("MHAINSPECT_BENCH_DIR", "/tmp/mhainspect-bench")) / "batch"
    where.mkdir(parents=True, exist_ok=True)
    folders = _folders(where, args.models, args.layers)
    print(f"{args.models} folders, {args.layers} layers each; CPUs available: {workers_for(10**6).processes}; "
          f"remote latency {args.latency * 1000:g} ms per request")
    with FileServer(where, latency=args.latency) as server:
        sources = {"local": [str(f) for f in folders],
                   "remote": [server.url(f"{f.name}/model.safetensors") for f in folders]}
        for name, inputs in sources.items():
            _time(inputs[:1], 1, None)  # warm: imports, page cache
            base = _time(inputs, 1, None)
            print(f"{name:6}  jobs 1  {'in process':24} {base:6.2f} s")
            for jobs in (int(j) for j in args.jobs.split(",")):
                default = workers_for(jobs)
                spreads = {"threads": Workers(1, jobs), "processes": Workers(jobs, 1),
                           f"default ({default.processes}x{default.threads})": default}
                for label, shape in spreads.items():
                    t = _time(inputs, jobs, shape)
                    print(f"{name:6}  jobs {jobs:<2} {label:24} {t:6.2f} s ({base / t:4.2f}x)")


if __name__ == "__main__":
    main()
