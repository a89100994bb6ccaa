#!/usr/bin/env python3
"""A time-boxed fuzzing campaign against the audit (``audit`` and every renderer).

    python scripts/fuzz_long.py --seconds 600 [--crashes fuzz-crashes] [--engine auto|atheris|hypothesis]

Engines:
- ``atheris`` (default when ``pip install atheris`` worked): coverage-guided libFuzzer over
  mhainspect, seeded with sample_models/*.onnx. An input is either a raw model file (libFuzzer's
  own byte mutations) or a recipe of protobuf-field / byte mutations of a sample model, decoded
  from the fuzzer's bytes (tests/fuzz_mutations.py, the same mutations as tests/test_fuzz.py).
- ``hypothesis`` (fallback, or ``--engine hypothesis``): tests/test_fuzz.py's properties with the
  ``long`` profile, in rounds of ``--examples-per-round`` with fresh seeds until the time budget
  is spent: the ONNX mutations, and every other format the tool reads (GGUF, safetensors, Hugging
  Face folders, torch.save zips, torch.export programs, TorchScript archives: tests/fuzz_formats.py;
  ``--formats-only`` runs just those). A failing round's output (with hypothesis' shrunk example
  and reproduce blob) is saved to the crashes folder. The atheris engine fuzzes ONNX only.

The contract (see tests/fuzz_mutations.check_contract): a Report or InputError, nothing else,
within ``--per-input-timeout`` seconds. Every other outcome is a failure: the input is saved to
the crashes folder (one file per distinct failure: exception type and innermost mhainspect
frame) with its traceback next to it. Inputs that hit the known loader defect on non-UTF-8
string fields (pinned by a strict xfail in tests/test_hostile_inputs.py) are counted apart.
Prints how many inputs ran and every failure; exits 1 when something failed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests"))


class _Hang(Exception):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Hang()


class Campaign:
    """Runs inputs against the contract, keeps counts and saves each distinct failure once."""

    def __init__(self, crashes: Path, per_input_timeout: int) -> None:
        from fuzz_mutations import check_contract, non_utf8_model

        self.check_contract, self.non_utf8_model = check_contract, non_utf8_model
        self.crashes = crashes
        self.timeout = per_input_timeout
        self.work = Path(tempfile.mkdtemp(prefix="mhainspect-fuzz-long-"))
        self.ran = self.reports = self.input_errors = self.known = 0
        self.failures: dict[str, str] = {}  # signature -> saved file
        signal.signal(signal.SIGALRM, _on_alarm)

    def run(self, model: bytes) -> None:
        self.ran += 1
        path = self.work / "input.onnx"
        path.write_bytes(model)
        signal.alarm(self.timeout)
        try:
            report = self.check_contract(path)
        except _Hang:
            self._fail(model, "Hang", f"no answer within {self.timeout} s")
        except Exception as exc:  # any exception is a contract violation
            if self.non_utf8_model(model):
                self.known += 1
            else:
                self._fail(model, _signature(exc), traceback.format_exc())
        else:
            if report is None:
                self.input_errors += 1
            else:
                self.reports += 1
        finally:
            signal.alarm(0)

    def _fail(self, model: bytes, signature: str, details: str) -> None:
        if signature in self.failures:
            return
        self.crashes.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha1(signature.encode()).hexdigest()[:12]
        (self.crashes / f"{name}.onnx").write_bytes(model)
        (self.crashes / f"{name}.txt").write_text(f"{signature}\n\n{details}", encoding="utf-8")
        self.failures[signature] = str(self.crashes / f"{name}.onnx")
        print(f"FAILURE {signature} -> {self.failures[signature]}", flush=True)

    def summary(self, engine: str, seconds: float) -> int:
        print(f"engine {engine}: {self.ran} inputs in {seconds:.0f} s ({self.reports} reports, "
              f"{self.input_errors} input errors, {self.known} hit the known non-UTF-8 loader defect)")
        if not self.failures:
            print("failures: none")
            return 0
        print(f"failures: {len(self.failures)} distinct")
        for signature, saved in self.failures.items():
            print(f"  {signature}: {saved}")
        return 1


def _signature(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "mhainspect" in f.filename]
    where = f"{Path(frames[-1].filename).name}:{frames[-1].name}:{frames[-1].lineno}" if frames else "?"
    return f"{type(exc).__name__} at {where}"


# ------------------------------------------------------------------------------ atheris


def run_atheris(args: argparse.Namespace) -> int:
    import atheris

    with atheris.instrument_imports(include=["mhainspect"]):
        from fuzz_mutations import BYTE_KINDS, FIELD_KINDS, SAMPLES, mutate_bytes, mutate_model, sample_model

        import mhainspect.frontends.onnx.frontend  # noqa: F401  (instrumented for coverage feedback)
    campaign = Campaign(args.crashes, args.per_input_timeout)
    start = time.monotonic()
    deadline = start + args.seconds
    samples = [p.read_bytes() for p in SAMPLES]

    def decode(data: bytes) -> bytes:
        """Mode byte 0: raw file; 1: byte-mutation recipe; 2: protobuf-field recipe."""
        if not data:
            return b""
        mode, rest = data[0] % 3, data[1:]
        if mode == 0:
            return rest
        fdp = atheris.FuzzedDataProvider(rest)
        sample = fdp.ConsumeIntInRange(0, len(samples) - 1)
        count = fdp.ConsumeIntInRange(1, 8)
        if mode == 1:
            byte_recipe = [(BYTE_KINDS[fdp.ConsumeIntInRange(0, len(BYTE_KINDS) - 1)], fdp.ConsumeIntInRange(0, 10**6),
                       fdp.ConsumeIntInRange(0, 10**6)) for _ in range(count)]
            return mutate_bytes(samples[sample], byte_recipe)
        recipe = [(FIELD_KINDS[fdp.ConsumeIntInRange(0, len(FIELD_KINDS) - 1)], fdp.ConsumeIntInRange(0, 10**6),
                   fdp.ConsumeIntInRange(0, 10**6), fdp.ConsumeIntInRange(0, 10**6)) for _ in range(count)]
        data_out: bytes = mutate_model(sample_model(sample), recipe).SerializeToString()
        return data_out

    def one_input(data: bytes) -> None:
        if time.monotonic() > deadline:
            code = campaign.summary("atheris", time.monotonic() - start)
            sys.stdout.flush()
            os._exit(code)
        try:
            model = decode(data)
        except Exception:  # a recipe the mutator cannot apply: not an input
            return
        campaign.run(model)

    corpus = Path(tempfile.mkdtemp(prefix="mhainspect-fuzz-corpus-"))
    for i, data in enumerate(samples):
        (corpus / f"raw{i}").write_bytes(b"\x00" + data)
        (corpus / f"bytes{i}").write_bytes(b"\x01" + bytes([i]) * 16)
        (corpus / f"fields{i}").write_bytes(b"\x02" + bytes([i]) * 32)
    argv = [sys.argv[0], str(corpus), f"-rss_limit_mb={args.rss_limit_mb}", "-timeout=600",
            f"-max_len={max(len(s) for s in samples) + 4096}", f"-max_total_time={args.seconds + 60}"]
    atheris.Setup(argv, one_input)
    atheris.Fuzz()
    return campaign.summary("atheris", time.monotonic() - start)


# ------------------------------------------------------------------------------ hypothesis


def run_hypothesis(args: argparse.Namespace) -> int:
    """tests/test_fuzz.py's properties under the long profile, fresh seeds until the budget is spent."""
    start = time.monotonic()
    rounds = failures = examples = 0
    env = {**os.environ, "HYPOTHESIS_PROFILE": "long", "FUZZ_MAX_EXAMPLES": str(args.examples_per_round)}
    while time.monotonic() - start < args.seconds:
        remaining = args.seconds - (time.monotonic() - start)
        seed = int.from_bytes(os.urandom(4), "little")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REPO_ROOT / "tests/test_fuzz.py"),
               "-k", "format_mutations_keep" if args.formats_only else "mutations_keep", f"--hypothesis-seed={seed}",
               "--hypothesis-show-statistics"]
        try:
            proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=remaining + 30)
        except subprocess.TimeoutExpired:
            break
        rounds += 1
        passing = sum(int(words[1]) for words in (line.split() for line in proc.stdout.splitlines())
                      if len(words) > 2 and words[0] == "-" and words[2].startswith("passing") and words[1].isdigit())
        examples += passing
        print(f"round {rounds} (seed {seed}): exit {proc.returncode}, {passing} passing examples", flush=True)
        if proc.returncode != 0:
            failures += 1
            args.crashes.mkdir(parents=True, exist_ok=True)
            (args.crashes / f"hypothesis-seed-{seed}.txt").write_text(proc.stdout[-20000:], encoding="utf-8")
            print(f"FAILURE: see {args.crashes / f'hypothesis-seed-{seed}.txt'}", flush=True)
    print(f"engine hypothesis: {rounds} rounds, {examples} passing inputs in {time.monotonic() - start:.0f} s, "
          f"{failures} failing rounds")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=600, help="time budget (default 600)")
    parser.add_argument("--crashes", type=Path, default=Path("fuzz-crashes"), help="folder for failing inputs")
    parser.add_argument("--engine", choices=("auto", "atheris", "hypothesis"), default="auto")
    parser.add_argument("--per-input-timeout", type=int, default=20, help="seconds before an input counts as a hang")
    parser.add_argument("--rss-limit-mb", type=int, default=4096, help="libFuzzer's memory limit")
    parser.add_argument("--examples-per-round", type=int, default=300,
                        help="hypothesis engine: examples per property and round (default 300)")
    parser.add_argument("--formats-only", action="store_true",
                        help="hypothesis engine: only the formats beside ONNX (tests/fuzz_formats.py)")
    args = parser.parse_args()
    engine = args.engine
    if engine == "auto":
        try:
            import atheris  # noqa: F401

            engine = "atheris"
        except ImportError:
            engine = "hypothesis"
    return run_atheris(args) if engine == "atheris" else run_hypothesis(args)


if __name__ == "__main__":
    sys.exit(main())
