"""Property-based fuzzing of every format the tool reads: mutated inputs never crash it.

ONNX sample models (tests/fuzz_mutations.py), and GGUF, safetensors, Hugging Face folders,
torch.save zips, torch.export programs and TorchScript archives (tests/fuzz_formats.py).

Contract: ``mhainspect.pipeline.stages.audit`` returns a Report (which every renderer renders) or
raises ``InputError``; the CLI exits 0 or 2, with one ``mhainspect: error:`` line on exit 2, and
never prints a traceback or an "internal error".

Two hypothesis profiles: ``ci`` (default, bounded so this file runs well under a minute) and
``long`` (5000 examples per property, or ``FUZZ_MAX_EXAMPLES``); pick one with
``HYPOTHESIS_PROFILE=long``. scripts/fuzz_long.py runs a time-boxed campaign (atheris when
installed) with the same mutations.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuzz_formats import FORMATS, JSON_KINDS, MEMBER_KINDS, TORCH_FORMATS, write_case
from fuzz_mutations import (
    BYTE_KINDS,
    FIELD_KINDS,
    SAMPLES,
    check_contract,
    mutate_bytes,
    mutate_model,
    sample_bytes,
    sample_model,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mhainspect.cli.app import app

settings.register_profile("ci", max_examples=150, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("long", max_examples=int(os.environ.get("FUZZ_MAX_EXAMPLES", "5000")), deadline=None,
                          print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_index = st.integers(min_value=0, max_value=10**6)
samples = st.integers(min_value=0, max_value=len(SAMPLES) - 1)
byte_mutations = st.lists(st.tuples(st.sampled_from(BYTE_KINDS), _index, _index), min_size=1, max_size=8)
field_mutations = st.lists(st.tuples(st.sampled_from(FIELD_KINDS), _index, _index, _index), min_size=1, max_size=6)

ERROR_PREFIX = "mhainspect: error:"


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="mhainspect-fuzz-") as d:
        yield Path(d)


def _write(folder: Path, data: bytes) -> Path:
    path = folder / "mutated.onnx"
    path.write_bytes(data)
    return path


def _check(folder: Path, data: bytes) -> None:
    check_contract(_write(folder, data))


def _mutated_fields(sample: int, mutations: list[tuple[object, ...]]) -> bytes:
    data: bytes = mutate_model(sample_model(sample), mutations).SerializeToString()
    return data


def test_samples_are_there() -> None:
    assert len(SAMPLES) >= 5


@given(sample=samples, mutations=byte_mutations)
def test_byte_mutations_keep_the_contract(workdir: Path, sample: int, mutations: list[tuple[object, ...]]) -> None:
    _check(workdir, mutate_bytes(sample_bytes(sample), mutations))


@settings(max_examples=settings().max_examples * 2)
@given(sample=samples, mutations=field_mutations)
@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_field_mutations_keep_the_contract(workdir: Path, sample: int, mutations: list[tuple[object, ...]]) -> None:
    _check(workdir, _mutated_fields(sample, mutations))


def _assert_cli_contract(exit_code: int, stdout: str, stderr: str) -> None:
    assert exit_code in (0, 2), (exit_code, stderr[-2000:])
    assert "Traceback" not in stdout + stderr
    assert "internal error" not in stderr, stderr
    if exit_code == 2:
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith(ERROR_PREFIX), stderr


@settings(max_examples=max(5, settings().max_examples // 3))
@given(sample=samples, fields=field_mutations, raw=byte_mutations, use_bytes=st.booleans(),
       fmt=st.sampled_from(["table", "json", "markdown", "sarif", "github", "html"]))
def test_cli_on_mutated_models(workdir: Path, sample: int, fields: list[tuple[object, ...]],
                               raw: list[tuple[object, ...]], use_bytes: bool, fmt: str) -> None:
    data = mutate_bytes(sample_bytes(sample), raw) if use_bytes else _mutated_fields(sample, fields)
    path = _write(workdir, data)
    result = CliRunner().invoke(app, ["inspect", str(path), "-f", fmt, "-v"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    _assert_cli_contract(result.exit_code, result.stdout, result.stderr)


@pytest.mark.parametrize("seed", range(3))
def test_cli_subprocess_on_mutated_models(workdir: Path, seed: int) -> None:
    """The real entry point, a few fixed mutations: exit 0 or 2, one line, no traceback."""
    data = (mutate_bytes(sample_bytes(seed), [("flip", 1000 + 77 * seed, seed), ("truncate", 5000 * (seed + 3), 0)])
            if seed % 2 else _mutated_fields(seed, [("rename_output", 3, 1, 5), ("set_attr", 7, seed, 11),
                                                    ("init_dims", seed, 1, 12)]))
    path = _write(workdir, data)
    proc = subprocess.run([sys.executable, "-m", "mhainspect", str(path)], capture_output=True, text=True,
                          timeout=120)
    _assert_cli_contract(proc.returncode, proc.stdout, proc.stderr)


# ------------------------------------------------------------------------------ every other format

json_mutations = st.lists(st.tuples(st.sampled_from(JSON_KINDS), _index, _index), min_size=1, max_size=4)
member_mutations = st.lists(st.tuples(st.sampled_from(MEMBER_KINDS), _index, _index, _index), min_size=1, max_size=4)


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _format_param(fmt: str) -> object:
    marks = [pytest.mark.skipif(not _has_torch(), reason="building this seed needs torch")] \
        if fmt in TORCH_FORMATS else []
    return pytest.param(fmt, id=fmt, marks=marks)


@pytest.mark.parametrize("fmt", [_format_param(f) for f in FORMATS])
@settings(max_examples=max(20, settings().max_examples // 3))
@given(raw=byte_mutations, structure=json_mutations, members=member_mutations, use=st.integers(0, 3))
def test_format_mutations_keep_the_contract(workdir: Path, fmt: str, raw: list[tuple[object, ...]],
                                            structure: list[tuple[object, ...]], members: list[tuple[object, ...]],
                                            use: int) -> None:
    check_contract(write_case(workdir, fmt, raw, structure, members, use))


@pytest.mark.parametrize("fmt", [_format_param(f) for f in ("safetensors", "pt2", "torchscript_trace")])
def test_cli_on_mutated_formats(workdir: Path, fmt: str) -> None:
    """The real entry point on a few fixed mutations of each archive: exit 0 or 2, one line."""
    for use, recipe in enumerate([[("replace", 3, 0)], [("replace", 11, 20)], [("drop", 5, 0)]]):
        path = write_case(workdir, fmt, [("flip", 77 * use, use)], recipe, [("json", use, 3 * use + 1, 5),
                                                                           ("bytes", use + 2, 99, 5)], 1)
        proc = subprocess.run([sys.executable, "-m", "mhainspect", str(path)], capture_output=True, text=True,
                              timeout=120)
        _assert_cli_contract(proc.returncode, proc.stdout, proc.stderr)
