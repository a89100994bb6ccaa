#!/usr/bin/env python3
"""Write docs/robustness.md: every hostile-input class and what the CLI actually does with it.

    python scripts/hostile_table.py [--output docs/robustness.md] [--only ID ...]

Each class of tests/hostile_cases.py is generated in a fresh temporary folder and audited with
``python -m mhainspect INPUT --format json`` (a subprocess with a timeout and RLIMIT_AS = 4 GiB);
the table records the exit code, the first line of stderr (or, on exit 0, the first warning of
the report) and the wall time. tests/test_hostile_inputs.py asserts the same expectations, and that
each row's exit code and observed line are what the run gives now: a change of behaviour fails there
until this script is run again.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests"))

import hostile_cases as hc  # noqa: E402

_EXPECTED = {"error": "exit 2, one line", "report": "exit 0, report", "warning": "exit 0, report + warning"}


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def observe(case: hc.Case, has_torch: bool, unprivileged_ok: bool) -> tuple[str, str, str, str]:
    """(exit, time, message, verdict) for one case."""
    if case.torch and not has_torch:
        return "—", "—", "skipped: torch not installed", "skipped"
    if case.unprivileged and not unprivileged_ok:
        return "—", "—", "skipped: cannot drop the privilege to read a mode-000 file", "skipped"
    with tempfile.TemporaryDirectory(prefix="mhainspect-hostile-") as d:
        folder = Path(d)
        args = case.build(folder)
        before = hc.snapshot(folder)
        run = hc.run_cli([*args, "--format", "json"], folder, timeout=case.timeout, unprivileged=case.unprivileged)
        unchanged = hc.snapshot(folder) == before
        payload = (folder / hc.PAYLOAD_MARKER).exists()
        if case.unprivileged:
            for p in folder.iterdir():
                p.chmod(0o644)  # let the temporary folder be removed
    if run.code is None:
        return "timeout", f"{run.seconds:.1f}", f"no answer within {case.timeout:.0f} s", "FAIL (hang)"
    message, warnings = run.observed()
    ok = ("Traceback" not in run.stderr and "internal error" not in run.stderr and unchanged and not payload
          and (case.budget is None or run.seconds <= case.budget))
    if case.expect == "error":
        ok = ok and run.code == 2 and len([ln for ln in run.stderr.splitlines() if ln.strip()]) == 1 \
            and case.match in run.stderr
    else:
        ok = ok and run.code == 0 and (case.expect != "warning" or any(case.match in w for w in warnings))
    verdict = "ok" if ok else ("known gap" if case.known_gap else "FAIL")
    if payload:
        verdict += " (payload ran!)"
    if not unchanged:
        verdict += " (files written!)"
    return str(run.code), f"{run.seconds:.1f}", message, verdict


# Remote models: what a hostile server can do and what the tool does (the tests named in it check
# each line; the table is written here so that a regenerated file keeps it).
HOSTILE_SERVERS = """## Hostile servers

A model read where it lives (`hf://`, a URL, an object store) meets servers, proxies and CDNs that
may misbehave, by accident or on purpose. What each can do, and what the tool does
(`tests/test_remote_hostile.py`, a loopback server per behaviour; `tests/test_remote_fuzz.py`, a
seeded fuzz pass over statuses, headers, bodies, framing and pace, 48 cases, each ending within its
deadline in a report or one line, having received at most 2x the legitimate bytes + 1 MiB):

| A server that | mhainspect |
| --- | --- |
| redirects elsewhere with a token set (`HF_TOKEN`) | the token goes only to the endpoint's origin (scheme, host, port as urllib3, which connects, reads them); after a redirect elsewhere it is never sent again, even back at the endpoint; it is never printed |
| redirects with a confusing Location (a backslash, `user@host`, a space or control character, a non-HTTP scheme) | refused, not followed (`redirected to an address with ...; not followed`) |
| trickles its headers or body a byte at a time | the request ends within 4x `MHAINSPECT_REMOTE_TIMEOUT` (connection, head and body together; a watchdog shuts the socket) |
| stalls | `stalled (no data for N s)` after `MHAINSPECT_REMOTE_TIMEOUT` |
| keeps a model busy across many requests | the model ends at `--timeout` (default 300 s); the next model of a batch is audited |
| answers 429/503 with `Retry-After: 100000`, `nan` or `inf` | fails at once: `rate limited (HTTP 429), retry after 100,000 s` / `... is not a time`; honoured up to 30 s, 60 s of waits per request |
| names 4,096 split GGUF parts in a URL, or stalls the parts | at most 256 guessed parts; the first failing part cancels the reads not started |
| lists 100,000 files, an endless listing, names like `/etc/x.gguf`, `../x`, `a//b` | more than 10,000 files or 2 MiB refused; names that would leave the repo are never used as paths; folders indexed once (no quadratic walk) |
| sends a malformed listing (`"siblings": 5`, 200k nested `[`, a `sha` that is no commit id) | one line: `the Hub's answer about the repo is not what its API returns` / `no commit id` |
| states a 500 MB config.json (listing or Content-Range) | refused before fetching (listing) or after a first range of at most 1 MiB |
| has an index naming 100,000 shards | more than 4,096 refused before any shard is read |
| ignores Range, lies about lengths, closes early, sends gzip | the bytes asked for only; a length that disagrees is an error naming it |
"""


def render(rows: list[tuple[hc.Case, tuple[str, str, str, str]]]) -> str:
    versions = [f"Python {platform.python_version()}"]
    for name in ("onnx", "torch"):
        try:
            versions.append(f"{name} {__import__(name).__version__}")
        except ImportError:
            pass
    lines = [
        "# Robustness: hostile and broken inputs",
        "",
        "Generated by `python scripts/hostile_table.py` (do not edit by hand). Each input is built in a fresh",
        "temporary folder and audited with `python -m mhainspect INPUT --format json` in a subprocess with a",
        f"timeout and an address-space limit of {hc.MEMORY_LIMIT >> 30} GiB (RLIMIT_AS). *Observed* is the first",
        "line of stderr, or on exit 0 the first warning of the report. Every run is also checked for no",
        "traceback, no \"internal error\", no file written or changed in the folder, and no pickle payload run.",
        "`tests/test_hostile_inputs.py` asserts the same expectations (known gaps are strict xfails there),",
        "and fails when a row's exit code or observed line is no longer what the run gives.",
        "Times are wall-clock on the machine that generated the file and include interpreter start-up",
        f"(~1 s; ~5 s more when torch is imported). Environment: {', '.join(versions)}.",
        "",
        "| Class | Expected | Exit | Time (s) | Observed | Verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for case, (code, seconds, message, verdict) in rows:
        expected = _EXPECTED[case.expect] + (f" (≤ {case.budget:.0f} s)" if case.budget else "")
        lines.append(f"| {hc.table_cell(case.klass, 120)} | {expected} | {code} | {seconds} | `{hc.table_cell(message)}` "
                     f"| {verdict} |")
    gaps = [(case, verdict) for case, (_, _, _, verdict) in rows if case.known_gap]
    if gaps:
        lines += ["", "## Known gaps", "",
                  "In files this work could not change; each is pinned by a strict xfail in",
                  "`tests/test_hostile_inputs.py` that names the fix.", ""]
        lines += [f"- **{case.klass}** ({verdict}): {case.known_gap}" for case, verdict in gaps]
    lines += ["", *HOSTILE_SERVERS.rstrip("\n").split("\n")]
    lines += ["", "## External data", "",
              "The static audit reads no external data: `location` entries are never opened, and one that leaves",
              "the model's folder (`..`, an absolute path, a symlink resolving outside) is reported as a warning.",
              "`--verify`, the only option that loads weights, refuses such a model (every block stays unchecked",
              "with the reason).", "",
              "## Formats, limits and what runs", "",
              "Which formats are read, how each is told apart by its content, the one line a format that is not",
              "read gets, the numeric limits every reader applies where a header is decoded, and what the",
              "TorchScript and torch.export readers execute (nothing): [formats.md](formats.md). Fuzzing covers",
              "every format read (`tests/test_fuzz.py`, `scripts/fuzz_long.py`).", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=hc.ROBUSTNESS_DOC)
    parser.add_argument("--only", nargs="*", default=None, help="case ids to run (default: all)")
    args = parser.parse_args()
    has_torch = _has_torch()
    unprivileged_ok = hc.can_run_unprivileged()
    rows = []
    for case in hc.CASES:
        if args.only and case.id not in args.only:
            continue
        observed = observe(case, has_torch, unprivileged_ok)
        print(f"{case.id:26} exit {observed[0]:>7}  {observed[1]:>6} s  {observed[3]}", flush=True)
        rows.append((case, observed))
    text = render(rows)
    tmp = args.output.with_name(f".{args.output.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.output)
    print(f"wrote {args.output}")
    failed = [c.id for c, (_, _, _, verdict) in rows if verdict.startswith("FAIL")]
    if failed:
        print(f"unexpected behaviour: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
