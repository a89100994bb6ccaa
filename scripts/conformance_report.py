#!/usr/bin/env python3
"""Compare mhainspect with the two ONNX attention fusers on the conformance zoo; write a Markdown report.

For every case x exporter variant of ``tests/conformance/zoo.py`` (same files, same ground truth):

* mhainspect: blocks found vs expected, blocks whose heads / kv heads / d_k / d_v / d_model /
  parameter counts all equal the truth, MHA004 ("heads unknown") flags;
* onnxruntime's transformers optimizer (``optimize_model`` with ``num_heads=0, hidden_size=0`` so it
  has to detect them, default ``opt_level``): fused attention nodes and how many carry the true
  head count, plus ``get_fused_operator_statistics()``;
* the same optimizer told the true ``num_heads`` and ``hidden_size`` (a control: it separates "heads
  not detected" from "pattern not recognised");
* onnxscript's ``optimize_for_ort``: fused attention nodes and how many carry the true
  ``num_heads`` / ``kv_num_heads``.

The two fusers run in subprocesses (this script with ``--worker``) under a timeout; a crash, hang or
exception is recorded as one line.

Usage::

    python scripts/conformance_report.py [--zoo DIR] [--out docs/conformance.md] [--timeout S] [-j N]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ZOO = os.environ.get("MHAINSPECT_ZOO_DIR", "/tmp/mha_zoo")
RESULT_MARK = "@@conformance-result@@ "
TOOLS = ("ort", "ort-told", "onnxscript")
TOOL_LABELS = {"ort": "ORT", "ort-told": "ORT told heads", "onnxscript": "onnxscript"}

# onnxruntime.transformers model_type per zoo case prefix, and why when it is not the obvious one.
ORT_MODEL_TYPES: dict[str, str] = {"bert": "bert", "gpt2": "gpt2", "t5": "t5", "vit": "vit", "llama": "qwen3"}
ORT_FALLBACK_TYPE = "bert"  # torch modules: the generic encoder fusion, the one that auto-detects heads
_PARAM_FIELDS = ("q", "k", "v", "o", "bias", "total")
_SHAPE_FIELDS = ("num_heads", "num_kv_heads", "d_k", "d_v", "d_model")


def ort_model_type(case: str) -> str:
    return ORT_MODEL_TYPES.get(case.split("-", 1)[0], ORT_FALLBACK_TYPE)


def one_line(text: str, limit: int = 240) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# --------------------------------------------------------------------------------------
# Worker side (subprocess): run one fuser on one file, print one JSON result line.
# --------------------------------------------------------------------------------------


def _attention_nodes(model: Any) -> list[dict[str, Any]]:
    """Every node of an onnx.ModelProto (subgraphs included) whose op type ends in "Attention"."""
    from onnx import AttributeProto, helper

    out: list[dict[str, Any]] = []

    def walk(graph: Any) -> None:
        for node in graph.node:
            attrs = {a.name: a for a in node.attribute}
            if node.op_type.endswith("Attention"):
                heads = attrs.get("num_heads") or attrs.get("q_num_heads")
                kv = attrs.get("kv_num_heads")
                out.append({
                    "domain": node.domain or "ai.onnx",
                    "op": node.op_type,
                    "name": node.name,
                    "num_heads": helper.get_attribute_value(heads) if heads is not None else None,
                    "kv_num_heads": helper.get_attribute_value(kv) if kv is not None else None,
                })
            for a in node.attribute:
                if a.type == AttributeProto.GRAPH:
                    walk(a.g)
                elif a.type == AttributeProto.GRAPHS:
                    for g in a.graphs:
                        walk(g)

    walk(model.graph)
    return out


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = one_line(record.getMessage(), 160)
        if msg not in self.messages:
            self.messages.append(msg)


def _run_ort(path: str, model_type: str, num_heads: int, hidden_size: int) -> dict[str, Any]:
    from onnxruntime.transformers.optimizer import optimize_model

    # What the optimizer's own CLI does by default: opt_level None (1 for bert/gpt2/vit, 2 for t5,
    # 0 for qwen3), CPU, Python fusions on; num_heads = hidden_size = 0 leaves them for it to detect.
    m = optimize_model(path, model_type=model_type, num_heads=num_heads, hidden_size=hidden_size, opt_level=None)
    stats_fn = getattr(m, "get_fused_operator_statistics", None)
    stats = {k: int(v) for k, v in stats_fn().items()} if callable(stats_fn) else None
    return {"nodes": _attention_nodes(m.model), "stats": stats}


def _run_onnxscript(path: str) -> dict[str, Any]:
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model = ir.load(path)
    model, counts = optimize_for_ort(model)
    proto = ir.serde.serialize_model(model)
    return {"nodes": _attention_nodes(proto), "stats": {k: int(v) for k, v in counts.items()}}


def worker(tool: str, path: str, model_type: str, num_heads: int, hidden_size: int) -> int:
    import onnx

    handler = _Warnings()
    logging.getLogger().addHandler(handler)
    t0 = time.perf_counter()
    try:
        before = {n["name"] for n in _attention_nodes(onnx.load(path, load_external_data=False))}
        if tool == "onnxscript":
            result = _run_onnxscript(path)
        else:
            result = _run_ort(path, model_type, num_heads, hidden_size)
        # Attention nodes already in the input (the opset-23 ONNX Attention op) are not fusions.
        result["preexisting"] = sum(n["name"] in before for n in result["nodes"])
        result["nodes"] = [n for n in result["nodes"] if n["name"] not in before]
    except BaseException as exc:  # one line, whatever went wrong
        result = {"error": one_line(f"{type(exc).__name__}: {exc}")}
    result["warnings"] = handler.messages
    result["seconds"] = round(time.perf_counter() - t0, 2)
    sys.stdout.flush()
    print(RESULT_MARK + json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------------------
# Driver side
# --------------------------------------------------------------------------------------


def run_tool(tool: str, path: Path, model_type: str, timeout: float, num_heads: int = 0,
             hidden_size: int = 0) -> dict[str, Any]:
    """Run one fuser in a subprocess; its result dict, or {"error": one line}."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", tool, str(path), model_type,
           str(num_heads), str(hidden_size)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TF_CPP_MIN_LOG_LEVEL": "3"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker's own process group, nothing else
        proc.communicate()
        return {"error": f"timeout after {timeout:g}s", "seconds": round(time.perf_counter() - t0, 2)}
    for line in reversed(out.splitlines()):
        if line.startswith(RESULT_MARK):
            result: dict[str, Any] = json.loads(line[len(RESULT_MARK):])
            return result
    tail = [ln for ln in (err or out).splitlines() if ln.strip()]
    why = f"exit code {proc.returncode}" + (f": {tail[-1]}" if tail else "")
    return {"error": one_line(f"crashed ({why})"), "seconds": round(time.perf_counter() - t0, 2)}


@dataclass
class Row:
    case: str
    variant: str
    family: str
    expected: int
    has_attention: bool
    export_error: str | None = None
    smoke: str | None = None  # the zoo's onnxruntime smoke test, when it failed
    found: int = 0
    heads_ok: int = 0  # blocks whose num_heads and num_kv_heads match
    exact: int = 0  # blocks whose every shape field and parameter count match
    mha004: int = 0
    inspect_error: str | None = None
    ort_type: str = ""
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)

    def fused(self, tool: str) -> int:
        return len(self.tools.get(tool, {}).get("nodes", []))


def _match(blocks: Sequence[Any], truth: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], Any | None]]:
    """Pair each true block with a found one: by module name when the found name contains it, else by position."""
    used: set[int] = set()
    pairs: list[tuple[dict[str, Any], Any | None]] = []
    for i, t in enumerate(truth):
        hint = t.get("name_hint") or ""
        pick = next((j for j, b in enumerate(blocks) if j not in used and hint and hint in b.name), None)
        if pick is None and i < len(blocks) and i not in used:
            pick = i
        if pick is not None:
            used.add(pick)
        pairs.append((t, blocks[pick] if pick is not None else None))
    return pairs


def inspect(row: Row, path: Path, truth: Sequence[dict[str, Any]]) -> None:
    from mhainspect.pipeline import audit

    try:
        report = audit(path)
    except Exception as exc:
        row.inspect_error = one_line(f"{type(exc).__name__}: {exc}")
        return
    row.found = len(report.blocks)
    row.mha004 = sum(f.code == "MHA004" for f in report.flags)
    for t, b in _match(report.blocks, truth):
        if b is None:
            continue
        heads = b.num_heads == t["num_heads"] and b.num_kv_heads == t["num_kv_heads"]
        row.heads_ok += heads
        row.exact += (all(getattr(b, f) == t[f] for f in _SHAPE_FIELDS)
                      and all(getattr(b.params, f) == t[f] for f in _PARAM_FIELDS))


def heads_right(node: dict[str, Any], truth: Sequence[dict[str, Any]]) -> bool:
    """The fused node's head attributes equal those of some true block of the model."""
    return any(node["num_heads"] == t["num_heads"]
               and node["kv_num_heads"] in (None, t["num_kv_heads"]) for t in truth)


def tool_heads_ok(row: Row, tool: str, truth: Sequence[dict[str, Any]]) -> int:
    return sum(heads_right(n, truth) for n in row.tools.get(tool, {}).get("nodes", []))


def load_manifest(zoo_dir: Path, export: bool, jobs: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The zoo manifest and its entries for the cases x variants of tests/conformance/zoo.py, in zoo order.

    Other suites may share the cache directory (export_all keeps their manifest entries); those entries
    are left out so the report covers exactly the zoo.
    """
    sys.path.insert(0, str(ROOT))
    from tests.conformance import zoo

    if export:
        manifest = zoo.export_all(zoo_dir, jobs=jobs)
    else:
        manifest = json.loads((zoo_dir / "manifest.json").read_text())
    by_key = {(e["case"], e["variant"]): e for e in manifest["entries"]}
    wanted = [(c.name, v.name) for c in zoo.CASES for v in zoo.VARIANTS]
    missing = [f"{c}/{v}" for c, v in wanted if (c, v) not in by_key]
    if missing:
        raise SystemExit(f"{zoo_dir}/manifest.json lacks {', '.join(missing)}; run without --no-export")
    return manifest, [by_key[k] for k in wanted]


def measure(zoo_dir: Path, entries: Iterable[dict[str, Any]], timeout: float, jobs: int,
            progress: bool = True) -> tuple[list[Row], dict[tuple[str, str], list[dict[str, Any]]]]:
    rows: list[Row] = []
    truths: dict[tuple[str, str], list[dict[str, Any]]] = {}
    todo: list[tuple[Row, str, Path]] = []
    for e in entries:
        row = Row(e["case"], e["variant"], e.get("family", ""), len(e["blocks"]), bool(e["has_attention"]),
                  export_error=e["error"], ort_type=ort_model_type(e["case"]))
        ort = e.get("ort") or ""
        if ort and not ort.startswith("ok"):
            row.smoke = one_line(ort, 160)
        truths[(row.case, row.variant)] = e["blocks"]
        rows.append(row)
        if e["error"] or not e.get("file"):
            continue
        path = zoo_dir / e["file"]
        inspect(row, path, e["blocks"])
        todo.extend((row, tool, path) for tool in TOOLS if tool != "ort-told" or e["blocks"])

    def one(job: tuple[Row, str, Path]) -> tuple[Row, str, dict[str, Any]]:
        row, tool, path = job
        if tool != "ort-told":
            return row, tool, run_tool(tool, path, row.ort_type, timeout)
        first = truths[(row.case, row.variant)][0]  # the optimizer's hidden_size is the Q width, heads x d_k
        return row, tool, run_tool(tool, path, row.ort_type, timeout, first["num_heads"],
                                   first["num_heads"] * first["d_k"])

    with cf.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        for n, (row, tool, result) in enumerate(ex.map(one, todo), 1):
            row.tools[tool] = result
            if progress:
                status = result.get("error") or f"{len(result['nodes'])} fused"
                print(f"[{n}/{len(todo)}] {row.case} {row.variant} {tool}: {status} ({result.get('seconds', 0)}s)",
                      file=sys.stderr, flush=True)
    return rows, truths


# --------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------


def _md(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f}%)" if d else f"{n}/0"


def _cell(row: Row, tool: str, truth: Sequence[dict[str, Any]]) -> str:
    if row.export_error or tool not in row.tools:
        return "–"
    res = row.tools[tool]
    if "error" in res:
        return "error¹"
    return f"{row.fused(tool)} / {tool_heads_ok(row, tool, truth)}"


def _notes(row: Row) -> str:
    notes: list[str] = []
    if row.export_error:
        notes.append("export failed (see below)")
    if row.inspect_error:
        notes.append(f"mhainspect error: {row.inspect_error}")
    pre = max((res.get("preexisting", 0) for res in row.tools.values()), default=0)
    if pre:
        notes.append(f"{pre} ONNX `Attention` already in the file (passed through, not counted)")
    for tool, label in TOOL_LABELS.items():
        res = row.tools.get(tool, {})
        if "error" in res:
            notes.append(f"{label}: {res['error']}")
        nodes = res.get("nodes", [])
        if nodes:
            ops = "/".join(sorted({n["op"] for n in nodes}))
            heads = ",".join(sorted({str(n["num_heads"]) for n in nodes}))
            kvs = ",".join(sorted({str(n["kv_num_heads"]) for n in nodes if n["kv_num_heads"] is not None}))
            notes.append(f"{label}: {ops} num_heads={heads}" + (f" kv_num_heads={kvs}" if kvs else ""))
        if tool == "ort" and any("Failed to detect num_heads" in w for w in res.get("warnings", [])):
            notes.append("ORT: “Failed to detect num_heads and hidden_size”")
    if row.smoke:
        notes.append("onnxruntime cannot run the export (see below)")
    return "; ".join(notes)


def _nonzero(stats: dict[str, int] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in (stats or {}).items() if v) or "none"


def render(manifest: dict[str, Any], rows: list[Row], truths: dict[tuple[str, str], list[dict[str, Any]]],
           timeout: float, zoo_arg: str) -> str:
    versions = manifest.get("versions", {})
    attn = [r for r in rows if r.has_attention and not r.export_error]
    controls = [r for r in rows if not r.has_attention and not r.export_error]
    n_blocks = sum(r.expected for r in attn)

    def capped(f: Callable[[Row], int]) -> int:
        return sum(min(f(r), r.expected) for r in attn)

    def extra(f: Callable[[Row], int]) -> int:
        return sum(max(f(r) - r.expected, 0) for r in attn) + sum(f(r) for r in controls)

    def fused_of(tool: str) -> Callable[[Row], int]:
        return lambda r: r.fused(tool)

    def heads_of(tool: str) -> Callable[[Row], int]:
        return lambda r: tool_heads_ok(r, tool, truths[(r.case, r.variant)])

    ins = (capped(lambda r: r.found), sum(r.heads_ok for r in attn), sum(r.exact for r in attn))
    tot = {tool: (capped(fused_of(tool)), capped(heads_of(tool))) for tool in TOOLS}
    errors = {tool: sum("error" in r.tools.get(tool, {}) for r in rows) for tool in TOOLS}
    mha004 = sum(r.mha004 for r in rows)

    out: list[str] = []
    w = out.append
    w("# Conformance: mhainspect vs. ONNX attention fusers on real exports")
    w("")
    w("Generated by `scripts/conformance_report.py`; do not edit by hand. Regenerate with")
    w("")
    w("```sh")
    w(f"python scripts/conformance_report.py --zoo {zoo_arg} --out docs/conformance.md --timeout {timeout:g}")
    w("```")
    w("")
    w("(`--zoo` is the export cache of `tests/conformance/zoo.py`; missing exports are made first.)")
    w("")
    w("The models are the conformance zoo of `tests/conformance/zoo.py`: transformers BERT, GPT-2, LLaMA "
      "(grouped-query, 8 query / 2 KV heads), T5 and ViT, each with eager and SDPA attention; "
      "`torch.nn.MultiheadAttention` variants, a module calling `F.scaled_dot_product_attention`, the "
      "Annotated Transformer (h = 8 and h = 1); projections written as 1×1 convolutions (a VITS-style "
      "text encoder with Conv1d kernel 1 and relative-position tables, a VAE-style Conv2d 1×1 block); and controls without attention (MLP, LSTM, ResNet, "
      "an MLP ending in a softmax). Each is exported with TorchScript at opset 17 and with the dynamo "
      "exporter at opsets 18 and 23, all with small configs and random weights. The ground truth (heads, "
      "KV heads, d_k, d_v, d_model, Q/K/V/O parameter counts per block) is read from the torch modules.")
    w("")
    w("Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items())
      + f"; example batch {manifest.get('batch')}, sequence {manifest.get('seq')}.")
    w("")
    w("What is measured on the same files:")
    w("")
    w("* **mhainspect** (`audit`): blocks found; blocks whose heads *and* KV heads equal the "
      "truth; blocks whose heads, KV heads, d_k, d_v, d_model and every parameter count (q, k, v, o, "
      "bias, total) equal the truth; `MHA004` (\"heads unknown\") flags.")
    w("* **ORT**: `onnxruntime.transformers.optimizer.optimize_model(path, model_type=T, "
      "num_heads=0, hidden_size=0)`, so the heads are left for it to detect, with the default `opt_level` "
      "(what its CLI does: 1 for bert, gpt2 and vit, 2 for t5, 0 for qwen3), on CPU. `T` is the "
      "architecture's own type; LLaMA uses `qwen3`, the optimizer's decoder type for RoPE + GQA + "
      "RMSNorm; the torch modules use `bert`, its generic encoder attention fusion and the type "
      "documented to detect the heads from the graph.")
    w("* **ORT told heads** (control): the same call with the true `num_heads` and `hidden_size` "
      "(heads × d_k). It tells \"heads not detected\" apart from \"pattern not recognised\".")
    w("* **onnxscript**: `onnx_ir.load(path)`, then `onnxscript.rewriter.ort_fusions.optimize_for_ort`.")
    w("")
    w("For the fusers, *fused* counts the attention nodes in the result (any op type ending in "
      "`Attention`, in any domain: `Attention`, `MultiHeadAttention`, `GroupQueryAttention`, "
      "`PackedAttention`, …) that were not already in the input: the opset-23 dynamo exports of SDPA "
      "models already hold ONNX `Attention` nodes, which all fusers pass through and which are not "
      "counted. *Heads right* counts fused nodes whose `num_heads` (and `kv_num_heads`, when the op has "
      "one) equal the truth; a `MultiHeadAttention` over K/V heads already repeated for grouped-query "
      "attention counts on `num_heads` alone. Each fuser runs in its own subprocess with a "
      f"{timeout:g} s timeout. In the totals, per-model counts are capped at the number of true blocks, "
      "so extra nodes never make up for missed ones; extra nodes and nodes in the controls are counted "
      "separately.")
    w("")
    w("## Totals")
    w("")
    w(f"Over {n_blocks} attention blocks in {len(attn)} exported models with attention "
      f"({len(controls)} exported controls without attention):")
    w("")
    w("| tool | blocks detected | head counts recovered | all fields exact | extra / false positives |")
    w("|---|---|---|---|---|")
    w(f"| mhainspect | {pct(ins[0], n_blocks)} | {pct(ins[1], n_blocks)} | {pct(ins[2], n_blocks)} "
      f"| {extra(lambda r: r.found)} |")
    for tool, label in (("ort", "ORT optimizer, num_heads=0"), ("onnxscript", "onnxscript optimize_for_ort"),
                        ("ort-told", "ORT optimizer told the heads (control)")):
        w(f"| {label} | {pct(tot[tool][0], n_blocks)} | {pct(tot[tool][1], n_blocks)} | n/a "
          f"| {extra(fused_of(tool))} |")
    w("")
    w(f"`MHA004` flags raised by mhainspect: {mha004}. Fuser runs that failed (exception, crash or "
      "timeout): " + ", ".join(f"{TOOL_LABELS[t]} {errors[t]}" for t in TOOLS) + ".")
    w("")
    w("## Per case and exporter")
    w("")
    w("Columns: expected attention blocks; mhainspect found / heads right / all exact; `MHA004` flags; "
      "the ORT `model_type`; then fused / heads right for ORT (heads detected), ORT told the heads, and "
      "onnxscript. – : not exported (or no attention to tell heads of); error¹ : the tool failed, reason "
      "in the notes.")
    w("")
    w("| case | variant | expected | mhainspect | MHA004 | ORT type | ORT | ORT told heads | onnxscript | notes |")
    w("|---|---|---:|---|---:|---|---|---|---|---|")
    for r in rows:
        truth = truths[(r.case, r.variant)]
        mine = "–" if r.export_error else ("error¹" if r.inspect_error else f"{r.found} / {r.heads_ok} / {r.exact}")
        flags = "–" if r.export_error or r.inspect_error else str(r.mha004)
        cells = " | ".join(_cell(r, tool, truth) for tool in TOOLS)
        w(f"| {r.case} | {r.variant} | {r.expected} | {mine} | {flags} | {r.ort_type} | {cells} | {_md(_notes(r))} |")
    cells = " | ".join(f"{tot[t][0]} / {tot[t][1]}" for t in TOOLS)
    w(f"| **total** | | {n_blocks} | {ins[0]} / {ins[1]} / {ins[2]} | {mha004} | | {cells} "
      "| capped per model; see Totals |")
    w("")
    w("## Export failures")
    w("")
    failed = [r for r in rows if r.export_error]
    if not failed:
        w("None: every case exported with every variant.")
    for r in failed:
        first, dyn, _ = (r.export_error or "").partition(" (dynamic attempt:")
        w(f"* `{r.case}` / `{r.variant}`: {one_line(first, 400)}"
          + (" (the dynamic-shape attempt failed too)" if dyn else ""))
    w("")
    smoke = [r for r in rows if r.smoke and not r.export_error]
    if smoke:
        w("Exported, but the zoo's onnxruntime smoke test (a run on the example inputs, then on resized "
          "inputs) failed; the static comparisons above still use these files:")
        w("")
        for r in smoke:
            w(f"* `{r.case}` / `{r.variant}`: {r.smoke}")
        w("")
    w("## Fuser statistics")
    w("")
    w("Non-zero entries of ORT's `get_fused_operator_statistics()` (heads detected; it counts op types "
      "in any domain, so passed-through ONNX `Attention` nodes appear as `Attention`), the warnings the "
      "optimizer logged (deduplicated), and "
      "the fusion counts returned by `optimize_for_ort`.")
    w("")
    w("| case | variant | ORT statistics | ORT warnings | onnxscript fusion counts |")
    w("|---|---|---|---|---|")
    for r in rows:
        if r.export_error:
            continue
        o, s = r.tools.get("ort", {}), r.tools.get("onnxscript", {})
        warns = "; ".join(o.get("warnings", [])) or "none"
        w(f"| {r.case} | {r.variant} | {_nonzero(o.get('stats'))} | {_md(warns)} | {_nonzero(s.get('stats'))} |")
    w("")
    return "\n".join(out)


def _keep_deploy_section(out: Path, text: str) -> str:
    """The deployment, toolchain and architecture-probe sections (scripts/deploy_report.py,
    scripts/toolchain_report.py, scripts/probe_architectures.py) share the file: carry them over
    unchanged."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import deploy_report
    import probe_architectures
    import toolchain_report

    old = out.read_text(encoding="utf-8") if out.exists() else ""
    for report in (deploy_report, toolchain_report, probe_architectures):
        if report.BEGIN in old and report.END in old:
            kept = report.BEGIN + old.split(report.BEGIN, 1)[1].split(report.END, 1)[0] + report.END + "\n"
            text = report.splice(text, kept)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--zoo", default=DEFAULT_ZOO, help="zoo export directory (cached exports + manifest.json)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "conformance.md"), help="Markdown file to write")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per fuser run before it is killed")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="parallel exports and fuser subprocesses")
    ap.add_argument("--no-export", action="store_true",
                    help="read ZOO/manifest.json as is instead of calling zoo.export_all (which fills the cache)")
    ap.add_argument("--worker", nargs=5, metavar=("TOOL", "PATH", "MODEL_TYPE", "NUM_HEADS", "HIDDEN_SIZE"),
                    help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        tool, path, model_type, num_heads, hidden_size = a.worker
        if tool not in TOOLS:
            ap.error(f"unknown tool {tool!r}")
        return worker(tool, path, model_type, int(num_heads), int(hidden_size))

    zoo_dir = Path(a.zoo)
    t0 = time.perf_counter()
    manifest, entries = load_manifest(zoo_dir, not a.no_export, a.jobs)
    rows, truths = measure(zoo_dir, entries, a.timeout, a.jobs)
    text = render(manifest, rows, truths, a.timeout, a.zoo)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_keep_deploy_section(out, text))
    print(f"wrote {out} ({len(rows)} case x variant rows, {time.perf_counter() - t0:.0f}s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
