"""Benchmark: mhainspect against the bare ONNX parse and the two fusion passes, as whole processes.

    python benchmarks/run.py [--repeat 3] [--timeout 600] [--models-dir DIR] [--output FILE]

Every measurement is a fresh child process (interpreter start and imports included): wall time is
the best of --repeat runs (runs of the tools interleaved, so load on the machine hits all alike),
and beside it the median of the per-round ratios against the parse run of the same round,
peak RSS is the child's own ru_maxrss (os.wait4), max over the runs. Tools:

  parse       python -c "import onnx; onnx.load(path, load_external_data=False)"   (the floor)
  mhainspect  mhainspect PATH --format json -o OUT                                  (end to end)
  ort         onnxruntime.transformers.optimizer.optimize_model(model_type="gpt2", num_heads=0,
              hidden_size=0, opt_level=0): the Python fusion pass ORT's own Llama export script
              runs (models/llama/convert_to_onnx.py uses model_type "gpt2", opt_level 0)
  onnxscript  onnxscript.rewriter.ort_fusions.optimize_for_ort(onnx_ir.load(path))

Then: scaling over 2/8/32/80 layers at 70B width (linear fit), and the proofs that no tensor data
is read (sparse data file still without blocks after the run; the run succeeds, with the same
report, when the data file is absent; no torch/onnx/numpy import). Models come from
benchmarks/make_models.py (generated on first use, outside the repository).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_models  # noqa: E402

PY = sys.executable
_BIN = Path(PY).parent / "mhainspect"
MHAINSPECT = [str(_BIN)] if _BIN.exists() else [PY, "-m", "mhainspect"]

PARSE = "import sys, onnx; onnx.load(sys.argv[1], load_external_data=False)"
ORT = """
import json, sys
from onnxruntime.transformers.optimizer import optimize_model
path, form = sys.argv[1], sys.argv[2]
if form == "proto":  # the path form would load every external tensor (onnx.load default)
    import onnx
    src = onnx.load(path, load_external_data=False)
else:
    src = path
m = optimize_model(src, model_type="gpt2", num_heads=0, hidden_size=0, opt_level=0)
stats = m.get_fused_operator_statistics()
print(json.dumps({k: v for k, v in stats.items() if v}))
"""
ONNXSCRIPT = """
import json, sys
import onnx_ir as ir
from onnxscript.rewriter.ort_fusions import optimize_for_ort
model, counts = optimize_for_ort(ir.load(sys.argv[1]))
print(json.dumps({k: v for k, v in counts.items() if v}))
"""
# mhainspect in-process, to list the heavy modules an ONNX-only run imported.
IMPORTS = """
import json, sys
from mhainspect.cli.app import main
try:
    main([sys.argv[1], "--format", "json", "-o", sys.argv[2]])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in ("torch", "onnx", "numpy", "onnxruntime") if m in sys.modules)))
"""


@dataclass
class Run:
    wall: float
    rss_kb: int
    rc: int
    out: str
    err: str
    timed_out: bool = False
    cpu: float | None = None  # user + system seconds of the child (GNU time), None without it


@dataclass
class Cell:
    runs: list[Run] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> list[Run]:
        return [r for r in self.runs if r.rc == 0 and not r.timed_out]

    @property
    def wall(self) -> float | None:
        return min((r.wall for r in self.ok), default=None)

    @property
    def cpu(self) -> float | None:
        """CPU seconds (user + system) of the run with the best wall time."""
        best = min(self.ok, key=lambda r: r.wall, default=None)
        return None if best is None else best.cpu

    @property
    def rss_mb(self) -> float | None:
        return max((r.rss_kb for r in self.ok), default=None) and max(r.rss_kb for r in self.ok) / 1024

    @property
    def status(self) -> str:
        if self.ok:
            return ""
        if any(r.timed_out for r in self.runs):
            return "timeout"
        if self.runs:
            last = self.runs[-1]
            lines = [ln for ln in (last.err or last.out).strip().splitlines() if ln.strip()]
            return f"failed (exit {last.rc}): " + (lines[-1][:160] if lines else "")
        return "not run"


_TIME = shutil.which("time", path="/usr/bin:/bin")


def measure(cmd: list[str], timeout: float, cwd: str | None = None, mem_limit: int | None = None) -> Run:
    """One fresh child: wall time, its own peak RSS, exit code, output.

    Peak RSS comes from GNU time (%M) when present: ru_maxrss of a child forked straight from this
    process would include this process's own RSS at fork time (Linux carries it across exec).
    """

    def limit() -> None:
        if mem_limit:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        full = [_TIME, "-f", "%M %U %S", "-o", rss.name, *cmd] if _TIME else cmd
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, stdout=out, stderr=err, cwd=cwd, preexec_fn=limit if mem_limit else None,
                                env={**os.environ, "PYTHONWARNINGS": "ignore"}, start_new_session=True)
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            try:
                os.killpg(proc.pid, 9)  # the tool and, under GNU time, its parent
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        rss_kb = usage.ru_maxrss
        cpu = None
        if _TIME:
            # GNU time's last line is "%M %U %S"; earlier lines may be its "Command exited..." notes.
            fields = (rss.read().strip().splitlines() or [""])[-1].split()
            if len(fields) == 3 and fields[0].isdigit():
                rss_kb, cpu = int(fields[0]), float(fields[1]) + float(fields[2])
            else:
                rss_kb = 0
        out.seek(0)
        err.seek(0)
        return Run(wall, rss_kb, proc.returncode, out.read().decode(errors="replace"),
                   err.read().decode(errors="replace"), timed_out.is_set(), cpu)


def warm(path: Path) -> None:
    """Read the file once so every tool starts from the page cache."""
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def commands(tool: str, path: Path, out_json: Path, external: bool) -> list[str]:
    if tool == "parse":
        return [PY, "-c", PARSE, str(path)]
    if tool == "mhainspect":
        return [*MHAINSPECT, str(path), "--format", "json", "-o", str(out_json)]
    if tool == "ort":
        return [PY, "-c", ORT, str(path), "proto" if external else "path"]
    if tool == "onnxscript":
        return [PY, "-c", ONNXSCRIPT, str(path)]
    raise ValueError(tool)


TOOLS = ("parse", "mhainspect", "ort", "onnxscript")
TOOL_LABEL = {
    "parse": "onnx.load(load_external_data=False)",
    "mhainspect": "mhainspect --format json",
    "ort": "onnxruntime.transformers optimize_model",
    "onnxscript": "onnxscript optimize_for_ort",
}


def bench_model(path: Path, tools: tuple[str, ...], repeat: int, timeout: float, workdir: Path,
                external: bool, max_repeat_seconds: float = 60.0, log: bool = True) -> dict[str, Cell]:
    warm(path)
    cells = {t: Cell() for t in tools}
    for i in range(repeat):
        for tool in tools:
            cell = cells[tool]
            if cell.runs and not cell.ok:  # failed or timed out once: do not repeat
                continue
            if cell.runs and min(r.wall for r in cell.runs) > max_repeat_seconds:
                continue  # minutes-long runs: one is enough (noise is small next to them)
            # Fusion passes run in an empty folder: nothing relative to the cwd can be read.
            cwd = str(workdir / "cwd")
            run = measure(commands(tool, path, workdir / "report.json", external), timeout, cwd=cwd)
            cell.runs.append(run)
            if tool == "mhainspect" and run.rc == 0:
                cell.note = _summarise_report(workdir / "report.json", make_models.expected_params(path.parent.name))
            elif tool in ("ort", "onnxscript") and run.rc == 0 and run.out.strip():
                cell.note = _summarise_fusions(run.out)
            if log:
                state = "timeout" if run.timed_out else f"exit {run.rc}"
                print(f"    {path.parent.name:14} {tool:10} run {i + 1}: {run.wall:7.2f} s "
                      f"{run.rss_kb / 1024:8.0f} MB  {state}", file=sys.stderr, flush=True)
    return cells


def _summarise_report(report: Path, expected: tuple[int, int] | None = None) -> str:
    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError):
        return ""
    if "models" in data and data["models"]:
        data = data["models"][0]
    model = data.get("model", {})
    blocks = data.get("blocks", [])
    heads = sorted({(b.get("num_heads"), b.get("num_kv_heads")) for b in blocks}, key=str)
    head_text = ", ".join(f"{h}/{kv}" if kv and kv != h else str(h) for h, kv in heads)
    total = model.get("total_params", 0)
    check = ""
    if expected is not None:
        check = " (= construction)" if (total, model.get("attention_params")) == expected else f" (expected {expected})"
    return f"{len(blocks)} blocks, heads {head_text}, {total:,} params{check}"


def _summarise_fusions(out: str) -> str:
    try:
        counts = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return ""
    keys = [k for k in counts if any(s in k.lower() for s in ("attention", "rotary", "norm", "gqa", "sdpa"))]
    return "fused: " + (", ".join(f"{k} {counts[k]}" for k in keys) if keys else "no attention fused")


def fmt_time(cell: Cell, base: Cell | None) -> tuple[str, str]:
    if cell.wall is None:
        return cell.status, ""
    ratio = f"{cell.wall / base.wall:.2f}x" if base is not None and base.wall else ""
    return f"{cell.wall:.2f}", ratio


def fmt_rss(cell: Cell, base: Cell | None) -> tuple[str, str]:
    if cell.rss_mb is None:
        return "", ""
    ratio = f"{cell.rss_mb / base.rss_mb:.2f}x" if base is not None and base.rss_mb else ""
    return f"{cell.rss_mb:,.0f}", ratio


def paired_median(cell: Cell, base: Cell | None) -> str:
    """Median over the runs of (this run's wall / the parse run's wall in the same round), runs
    paired round by round: a best-of-N ratio compares two lucky runs that may come from different phases of a
    machine whose speed drifts, and the parse process, which starts threads, varies much more."""
    if base is None or len(cell.runs) != len(base.runs) or not cell.ok or len(cell.ok) != len(cell.runs):
        return ""
    ratios = [r.wall / b.wall for r, b in zip(cell.runs, base.runs) if b.rc == 0 and b.wall > 0]
    return f"{statistics.median(ratios):.2f}x" if ratios else ""


def main_table(results: dict[str, dict[str, Cell]], sizes: dict[str, str]) -> str:
    lines = ["| model | file | tool | wall s | x parse | x parse, median pair | CPU s | peak RSS MB | x parse | result |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for model, cells in results.items():
        base = cells.get("parse")
        for tool, cell in cells.items():
            t, tr = fmt_time(cell, base)
            m, mr = fmt_rss(cell, base)
            paired = paired_median(cell, base)
            if tool == "parse":
                tr, mr, paired = "1.00x", "1.00x" if cell.rss_mb else "", "1.00x"
            cpu = f"{cell.cpu:.2f}" if cell.cpu is not None else ""
            lines.append(f"| {model} | {sizes.get(model, '')} | {TOOL_LABEL[tool]} | {t} | {tr} | {paired} | {cpu} | {m} "
                         f"| {mr} | {cell.note or ('' if cell.ok else cell.status)} |")
    return "\n".join(lines)


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a + b x; returns (a, b, max relative deviation of a point from the line)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    a = my - b * mx
    dev = max(abs(y - (a + b * x)) / y for x, y in zip(xs, ys) if y)
    return a, b, dev


def scaling_table(rows: dict[int, dict[str, Cell]], nodes: dict[int, int]) -> str:
    tools = [t for t in TOOLS if any(t in r for r in rows.values())]
    head = "| layers | nodes | " + " | ".join(f"{t} s | {t} MB" for t in tools) + " |"
    lines = [head, "| ---: | ---: | " + " | ".join("---: | ---:" for _ in tools) + " |"]
    for layers, cells in sorted(rows.items()):
        parts = []
        for t in tools:
            c = cells.get(t)
            if c is None:
                parts += ["", ""]
            else:
                parts += [f"{c.wall:.2f}" if c.wall is not None else c.status.split(":")[0],
                          f"{c.rss_mb:,.0f}" if c.rss_mb is not None else ""]
        lines.append(f"| {layers} | {nodes.get(layers, 0):,} | " + " | ".join(parts) + " |")
    fits = []
    for t in tools:
        pts = [(layers, c[t]) for layers, c in sorted(rows.items()) if t in c and c[t].wall is not None]
        if len(pts) >= 3:
            a, b, dev = _fit([p[0] for p in pts], [p[1].wall or 0.0 for p in pts])
            am, bm, devm = _fit([p[0] for p in pts], [p[1].rss_mb or 0.0 for p in pts])
            fits.append(f"- {t}: time = {a:.2f} s + {b * 1000:.1f} ms/layer (max deviation from the line "
                        f"{dev:.0%}); RSS = {am:,.0f} MB + {bm:.2f} MB/layer (max deviation {devm:.0%})")
    return "\n".join(lines) + ("\n\nLinear fit over the points:\n" + "\n".join(fits) if fits else "")


def count_nodes(path: Path) -> int:
    """Nodes of the neutral graph (Constant nodes become weights), counted in a child process."""
    code = "import sys; from mhainspect.frontends.onnx.loader import load_onnx; print(len(load_onnx(sys.argv[1]).nodes))"
    out = subprocess.run([PY, "-c", code, str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def fixed_costs(repeat: int, timeout: float, workdir: Path) -> str:
    """What every run pays before touching a model: interpreter, imports, CLI parsing."""
    tiny = Path(__file__).resolve().parents[1] / "sample_models" / "no_attention.onnx"
    rows = [
        ("python -c pass", [PY, "-c", "pass"]),
        ("python -c 'import onnx'", [PY, "-c", "import onnx"]),
        ("python -c 'import google.protobuf.message'", [PY, "-c", "import google.protobuf.message"]),
        ("mhainspect --version", [*MHAINSPECT, "--version"]),
        (f"mhainspect {tiny.name} (6 nodes) --format json",
         [*MHAINSPECT, str(tiny), "--format", "json", "-o", str(workdir / "tiny.json")]),
    ]
    cells = {label: Cell() for label, _ in rows}
    for _ in range(repeat):
        for label, cmd in rows:
            cells[label].runs.append(measure(cmd, timeout))
    lines = ["| fixed cost | wall s | peak RSS MB |", "| --- | ---: | ---: |"]
    for label, _ in rows:
        c = cells[label]
        lines.append(f"| {label} | {fmt_time(c, None)[0]} | {fmt_rss(c, None)[0]} |")
    return "\n".join(lines)


def proofs(models: dict[str, Path], workdir: Path, timeout: float) -> list[str]:
    out: list[str] = []
    path = models["llama70b"]
    data = path.with_name(path.name + ".data")
    size = data.stat().st_size
    before = data.stat().st_blocks
    first = measure(commands("mhainspect", path, workdir / "with.json", True), timeout)
    after = data.stat().st_blocks
    out.append(f"- Sparse data file `{data.name}`: {size / 1e9:,.1f} GB apparent, {before * 512:,} bytes allocated "
               f"before and {after * 512:,} after the mhainspect run (st_blocks {before} -> {after}); "
               f"exit {first.rc}.")
    hidden = data.with_name(data.name + ".hidden")
    os.replace(data, hidden)
    try:
        absent = measure(commands("mhainspect", path, workdir / "without.json", True), timeout)
    finally:
        os.replace(hidden, data)
    same = ((workdir / "with.json").exists() and (workdir / "without.json").exists()
            and (workdir / "with.json").read_text() == (workdir / "without.json").read_text())
    out.append(f"- Same run with the data file absent: exit {absent.rc}, "
               f"report {'identical' if same else 'DIFFERENT'} to the run with it.")
    inline = models.get("inline_1p8gb")
    if inline is not None:
        run = measure(commands("mhainspect", inline, workdir / "inline.json", False), timeout)
        out.append(f"- Inline-weights file ({inline.stat().st_size / 1e9:.2f} GB of raw_data): mhainspect peak RSS "
                   f"{run.rss_kb / 1024:,.0f} MB, so the payloads were never materialised.")
    for name in ("llama70b", "dynamo_L32"):
        if name in models:
            run = measure([PY, "-c", IMPORTS, str(models[name]), str(workdir / "imports.json")], timeout)
            mods = run.out.strip().splitlines()[-1] if run.out.strip() else "?"
            out.append(f"- Heavy modules imported by an ONNX-only run on {name}: {mods} (exit {run.rc}).")
    return out


def safetensors_rows(folder: Path, repeat: int, timeout: float, workdir: Path) -> str:
    floor = ("import json, struct, sys, pathlib\n"
             "for p in sorted(pathlib.Path(sys.argv[1]).glob('*.safetensors')):\n"
             "    with open(p, 'rb') as f:\n"
             "        n = struct.unpack('<Q', f.read(8))[0]; json.loads(f.read(n))\n")
    cells = {"headers": Cell(), "mhainspect": Cell()}
    for _ in range(repeat):
        cells["headers"].runs.append(measure([PY, "-c", floor, str(folder)], timeout))
        if not cells["mhainspect"].runs or cells["mhainspect"].ok:
            cells["mhainspect"].runs.append(
                measure([*MHAINSPECT, str(folder), "--format", "json", "-o", str(workdir / "st.json")], timeout))
    h, m = cells["headers"], cells["mhainspect"]
    if m.ok:
        m.note = _summarise_report(workdir / "st.json")
    shards = len(list(folder.glob("*.safetensors")))
    total = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    return "\n".join([
        "| checkpoint | tool | wall s | peak RSS MB | result |", "| --- | --- | ---: | ---: | --- |",
        f"| {shards} shards, {total / 1e9:,.0f} GB (sparse) | python: read the {shards} JSON headers | "
        f"{fmt_time(h, None)[0]} | {fmt_rss(h, None)[0]} | |",
        f"| same | mhainspect {folder.name}/ | {fmt_time(m, None)[0]} | {fmt_rss(m, None)[0]} | "
        f"{m.note or m.status} |",
    ])


GGUF_READER = "import sys, gguf; r = gguf.GGUFReader(sys.argv[1]); print(len(r.tensors))"


def _resident_pages(path: Path, start: int) -> tuple[int, int]:
    """(pages from byte ``start`` on that are in the page cache, all such pages)."""
    import mmap

    from page_cache import page_residency

    pages = page_residency(path)[-(-start // mmap.PAGESIZE):]
    return sum(b & 1 for b in pages), len(pages)


def gguf_rows(path: Path, repeat: int, timeout: float, workdir: Path) -> str:
    """mhainspect on the 70B-shaped GGUF against gguf-py's own reader; then the page-cache proof."""
    from mhainspect.frontends.gguf.reader import read_header

    cells = {"reader": Cell(), "mhainspect": Cell()}
    for _ in range(repeat):
        for tool, cmd in (("mhainspect", [*MHAINSPECT, str(path), "--format", "json", "-o", str(workdir / "g.json")]),
                          ("reader", [PY, "-c", GGUF_READER, str(path)])):
            cell = cells[tool]
            if cell.runs and (not cell.ok or min(r.wall for r in cell.runs) > 30):
                continue
            cell.runs.append(measure(cmd, timeout))
    m, r = cells["mhainspect"], cells["reader"]
    if m.ok:
        m.note = _summarise_report(workdir / "g.json", make_models.expected_params("gguf70b"))
    data_start = read_header(path).data_offset
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    run = measure([*MHAINSPECT, str(path), "--format", "json", "-o", str(workdir / "g2.json")], timeout)
    resident, pages = _resident_pages(path, data_start)
    return "\n".join([
        "| GGUF | tool | wall s | peak RSS MB | result |", "| --- | --- | ---: | ---: | --- |",
        f"| {path.name}, {path.stat().st_size / 1e9:,.1f} GB (sparse), header {data_start / 1e6:.1f} MB | "
        f"mhainspect | {fmt_time(m, None)[0]} | {fmt_rss(m, None)[0]} | {m.note or m.status} |",
        f"| same | gguf-py GGUFReader(path) | {fmt_time(r, None)[0]} | {fmt_rss(r, None)[0]} | "
        f"{'' if r.ok else r.status} |",
        "",
        f"- Page cache after a cold mhainspect run (exit {run.rc}): {resident:,} of the {pages:,} pages past the "
        "header resident, so no tensor data was read.",
    ])


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "absent"


def install_kind() -> str:
    """How this interpreter has mhainspect: the header says it, since an editable install adds its
    import finder to every process's start-up, which users' regular installs do not have."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        text = distribution("mhainspect").read_text("direct_url.json")
    except PackageNotFoundError:
        return "not installed"
    if text and json.loads(text).get("dir_info", {}).get("editable"):
        return "editable install"
    return "regular install"


def compile_package() -> str:
    """Write mhainspect's bytecode, as `pip install` does for a regular install.

    An editable install under PYTHONDONTWRITEBYTECODE=1 (set in some CI images) would otherwise
    compile every module from source in every measured run; onnx, the floor, is always
    pip-installed with its bytecode.
    """
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("mhainspect")
    if spec is None or not spec.submodule_search_locations:
        return "mhainspect not found"
    package = next(iter(spec.submodule_search_locations))
    ok = compileall.compile_dir(package, quiet=1, force=False)
    return f"{package} compiled" if ok else f"{package}: compileall reported errors"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best time counts")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run before it counts as 'timeout'")
    ap.add_argument("--max-repeat-seconds", type=float, default=60.0,
                    help="a run longer than this is not repeated")
    ap.add_argument("--models-dir", type=Path, default=make_models.DEFAULT_OUT)
    ap.add_argument("--models", default="llama70b,llama7b,dynamo_L32,inline_1p8gb",
                    help="models of the main table (comma-separated)")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--scaling-tools", default="parse,mhainspect,ort,onnxscript")
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--no-proofs", action="store_true")
    ap.add_argument("--no-safetensors", action="store_true")
    ap.add_argument("--no-gguf", action="store_true")
    ap.add_argument("--output", type=Path, help="also write the markdown to FILE")
    args = ap.parse_args(argv)

    tools = tuple(t for t in args.tools.split(",") if t)
    wanted = [m for m in args.models.split(",") if m]
    scaling = [] if args.no_scaling else ["llama70b_L2", "llama70b_L8", "llama70b_L32", "llama70b"]
    extra = ([] if args.no_safetensors else ["safetensors70b"]) + ([] if args.no_gguf else ["gguf70b"])
    bytecode = compile_package()
    print(f"bytecode: {bytecode}", file=sys.stderr)
    print("models:", file=sys.stderr)
    paths = make_models.generate(args.models_dir, set(wanted + scaling + extra) | {"llama70b"})
    work = Path(tempfile.mkdtemp(prefix="mhainspect-bench-run-"))
    (work / "cwd").mkdir()
    started = time.time()
    sections: list[str] = []
    try:
        results: dict[str, dict[str, Cell]] = {}
        sizes: dict[str, str] = {}
        for name in wanted:
            p = paths[name]
            entry = next(e for e in make_models.catalogue() if e.name == name)
            data = p.with_name(p.name + ".data")
            sizes[name] = (f"{p.stat().st_size / 1e6:,.1f} MB" +
                           (f" + {data.stat().st_size / 1e9:,.0f} GB sparse data" if entry.data else ""))
            print(f"  {name}: {entry.description}", file=sys.stderr)
            results[name] = bench_model(p, tools, args.repeat, args.timeout, work, external=entry.data is not None,
                                        max_repeat_seconds=args.max_repeat_seconds)
        sections.append(main_table(results, sizes))
        print("  fixed costs", file=sys.stderr)
        sections.append(fixed_costs(args.repeat, args.timeout, work))

        if "llama70b" in wanted and "ort" in tools:
            # What the documented call does on the 70B graph: optimize_model(path) loads the
            # external data (onnx.load's default). Capped at 8 GB of address space.
            print("  llama70b: ort optimize_model(path) form, capped at 8 GB", file=sys.stderr)
            run = measure(commands("ort", paths["llama70b"], work / "x.json", external=False), args.timeout,
                          cwd=str(work / "cwd"), mem_limit=8 << 30)
            err = [ln for ln in run.err.strip().splitlines() if ln.strip()]
            sections.append(f"optimize_model(path) on llama70b (the path form, which loads all external data): "
                            f"exit {run.rc} after {run.wall:.1f} s: `{err[-1][:200] if err else run.out[-200:]}`. "
                            "The ort row above therefore passes the ModelProto loaded with "
                            "load_external_data=False (run from an empty folder).")

        if scaling:
            rows: dict[int, dict[str, Cell]] = {}
            nodes: dict[int, int] = {}
            stools = tuple(t for t in args.scaling_tools.split(",") if t)
            for name in scaling:
                layers = 80 if name == "llama70b" else int(name.rsplit("L", 1)[1])
                if name in results:
                    rows[layers] = {t: results[name][t] for t in stools if t in results[name]}
                    missing = tuple(t for t in stools if t not in rows[layers])
                else:
                    rows[layers], missing = {}, stools
                if missing:
                    print(f"  {name} (scaling)", file=sys.stderr)
                    rows[layers].update(bench_model(paths[name], missing, args.repeat, args.timeout, work,
                                                    external=True, max_repeat_seconds=args.max_repeat_seconds))
                nodes[layers] = count_nodes(paths[name])
            sections.append(scaling_table(rows, nodes))

        if not args.no_safetensors:
            print("  safetensors70b", file=sys.stderr)
            sections.append(safetensors_rows(paths["safetensors70b"].parent, args.repeat, args.timeout, work))

        if not args.no_gguf:
            print("  gguf70b", file=sys.stderr)
            sections.append(gguf_rows(paths["gguf70b"], args.repeat, args.timeout, work))

        if not args.no_proofs:
            print("  proofs", file=sys.stderr)
            sections.append("\n".join(proofs(paths, work, args.timeout)))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    header = (f"Machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; best of {args.repeat} runs "
              f"(wall; runs over {args.max_repeat_seconds:.0f} s are not repeated), max peak RSS; timeout "
              f"{args.timeout:.0f} s per run; total {time.time() - started:.0f} s; "
              f"typer {_version('typer')}, protobuf {_version('protobuf')}, onnx {_version('onnx')}; "
              f"mhainspect: {install_kind()}; "
              + ("mhainspect bytecode compiled before the runs, as pip does on install."
                 if bytecode.endswith(" compiled") else f"bytecode not compiled ({bytecode})."))
    text = header + "\n\n" + "\n\n".join(sections) + "\n"
    print(text)
    if args.output:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
