"""[tool.mhainspect] in pyproject.toml: found from each model's folder upward (as ruff does), read,
validated, and overridden by the command line; --config FILE and --isolated."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mhainspect.analysis.gates import Limit
from mhainspect.cli.app import app
from mhainspect.pipeline.config import ConfigError, Settings, find_config, load_settings, merge, settings_from_table
from mhainspect.cli.output import OutputFormat

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_models"
STANDARD = SAMPLES / "standard_mha.onnx"  # 16,768 params, no flags
KERAS = SAMPLES / "keras_per_head.onnx"  # MHA001
FORMATS = [f.value for f in OutputFormat]


def run(*args: str | os.PathLike[str]) -> Any:
    result = CliRunner().invoke(app, ["inspect", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def write_config(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pyproject.toml"
    path.write_text(f"[project]\nname = \"demo\"\n\n[tool.mhainspect]\n{body}\n", encoding="utf-8")
    return path


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder holding copies of the two sample models, as the working directory (its own
    pyproject.toml is written per test)."""
    import shutil

    folder = tmp_path / "project"
    folder.mkdir()
    for model in (STANDARD, KERAS):
        shutil.copy(model, folder / model.name)
    monkeypatch.chdir(folder)
    return folder


# ----------------------------------------------------------------------------- reading


def test_settings_from_table_all_keys() -> None:
    settings = settings_from_table({
        "max-params": "7B", "max-attention-params": 120_000, "fail-on": ["MHA001", "mha004"],
        "ignore": "MHA003,MHA005", "exit-zero": True, "format": "sarif", "heads": [2, 16],
    }, "pyproject.toml", FORMATS)
    assert settings == Settings(
        max_params=Limit(7_000_000_000, "7B", "pyproject.toml"),
        max_attention_params=Limit(120_000, "120,000", "pyproject.toml"),
        fail_on=frozenset({"MHA001", "MHA004"}), ignore=frozenset({"MHA003", "MHA005"}), exit_zero=True,
        format="sarif", heads=(2, 16))
    assert settings_from_table({"heads": 8}, "p", FORMATS).heads == (8,)
    assert settings_from_table({}, "p", FORMATS) == Settings()


def test_merge_first_wins_where_set() -> None:
    cli = Settings(max_params=Limit(10, "10"), exit_zero=False, fail_on=frozenset())
    file = Settings(max_params=Limit(20, "20"), exit_zero=True, fail_on=frozenset({"MHA001"}), format="json")
    assert merge(cli, file) == Settings(max_params=Limit(10, "10"), exit_zero=False, fail_on=frozenset(),
                                        format="json")


def test_no_config(project: Path) -> None:
    # tmp folders have no pyproject.toml above them; a stray one there would only add keys
    settings, path = load_settings(project, FORMATS)
    if path is None:
        assert settings == Settings()


def test_nearest_config_with_table_wins(tmp_path: Path) -> None:
    outer = write_config(tmp_path / "repo", 'max-params = "1M"')
    inner = tmp_path / "repo" / "pkg"
    inner.mkdir()
    (inner / "pyproject.toml").write_text("[project]\nname = \"pkg\"\n", encoding="utf-8")  # no table: skipped
    deep = inner / "models" / "v1"
    deep.mkdir(parents=True)
    found = find_config(deep)
    assert found is not None and found[0] == outer
    nearer = write_config(tmp_path / "repo" / "pkg" / "models", 'max-params = "2M"')
    settings, path = load_settings(deep, FORMATS)
    assert path == nearer and settings.max_params.value == 2_000_000


# ----------------------------------------------------------------------------- CLI: read and overridden


def test_config_gate_applies(project: Path) -> None:
    write_config(project, 'max-params = "16k"')
    result = run(project / STANDARD.name)
    assert result.exit_code == 1
    model = project / STANDARD.name
    assert result.stderr.strip() == (f"mhainspect: gate failed: {model} has 16,768 parameters > "
                                     "max-params 16k (16,000) from pyproject.toml")


def test_config_found_from_a_subfolder(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(project, "max-attention-params = 1000")
    sub = project / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    result = run(project / STANDARD.name)
    assert result.exit_code == 1
    assert result.stderr.strip().endswith("has 16,640 attention parameters > max-attention-params 1,000 from "
                                          f"{project / 'pyproject.toml'}")


def test_cli_overrides_config_budget(project: Path) -> None:
    write_config(project, 'max-params = "16k"')
    assert run(project / STANDARD.name, "--max-params", "20k").exit_code == 0
    assert run(project / STANDARD.name, "--max-params", "1k").stderr.strip().endswith("--max-params 1k (1,000)")


def test_config_exit_zero_and_cli_override(project: Path) -> None:
    write_config(project, 'max-params = "1k"\nexit-zero = true')
    relaxed = run(project / STANDARD.name)
    assert relaxed.exit_code == 0 and "gate failed" in relaxed.stderr
    assert run(project / STANDARD.name, "--no-exit-zero").exit_code == 1


def test_config_fail_on_and_ignore(project: Path) -> None:
    write_config(project, 'fail-on = ["MHA001"]')
    assert run(project / KERAS.name).exit_code == 1
    assert run(project / KERAS.name, "--fail-on", "MHA004").exit_code == 0  # the CLI list replaces the file's
    assert run(project / KERAS.name, "--ignore", "MHA001").exit_code == 0
    write_config(project, 'fail-on = "MHA001"\nignore = "MHA001"')
    result = run(project / KERAS.name, "--format", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)["flags"] == []
    kept = run(project / KERAS.name, "--format", "json", "--ignore", "MHA002")  # CLI --ignore replaces the file's
    assert kept.exit_code == 1 and [f["code"] for f in json.loads(kept.stdout)["flags"]] == ["MHA001"]


def test_config_format_and_cli_override(project: Path) -> None:
    write_config(project, 'format = "jsonl"')
    lines = run(project / STANDARD.name, KERAS).stdout.splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["model"]["path"] == str(KERAS)
    assert "models" in json.loads(run(project / STANDARD.name, KERAS, "--format", "json").stdout)


def test_config_heads_and_cli_override(project: Path) -> None:
    write_config(project, "heads = [12]")  # defaults for 8 heads: 4 and 16

    def heads_of(*args: str) -> set[int]:
        doc = json.loads(run(project / STANDARD.name, "--format", "json", *args).stdout)
        return {w["num_heads"] for w in doc["blocks"][0]["what_if"]}

    assert heads_of() == {4, 12, 16}
    assert heads_of("--heads", "32") == {4, 16, 32}


# ----------------------------------------------------------------------------- bad config


@pytest.mark.parametrize(("body", "key"), [
    ('max-params = "lots"', "max-params"),
    ("max-params = -1", "max-params"),
    ("max-params = true", "max-params"),
    ("max-attention-params = 1.5", "max-attention-params"),
    ('fail-on = ["MHA999"]', "fail-on"),
    ("fail-on = 1", "fail-on"),
    ('ignore = ["MHA001", 2]', "ignore"),
    ('exit-zero = "yes"', "exit-zero"),
    ('format = "xml"', "format"),
    ("heads = 0", "heads"),
    ('heads = [2, "x"]', "heads"),
    ("max_params = 10", "max_params"),
])
def test_bad_config_value_exit_2_naming_the_key(project: Path, body: str, key: str) -> None:
    path = write_config(project, body)
    result = run(project / STANDARD.name)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"mhainspect: error: {path} [tool.mhainspect] {key}: "), lines[0]
    with pytest.raises(ConfigError, match=key):
        load_settings(project, FORMATS)


def test_invalid_toml_exit_2_naming_the_file(project: Path) -> None:
    (project / "pyproject.toml").write_text("[tool.mhainspect\nmax-params = 1\n", encoding="utf-8")
    result = run(project / STANDARD.name)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mhainspect: error: {project / 'pyproject.toml'}: invalid TOML")


def test_table_not_a_table(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool]\nmhainspect = "strict"\n', encoding="utf-8")
    result = run(project / STANDARD.name)
    assert result.exit_code == 2 and "[tool.mhainspect] must be a table" in result.stderr


def test_cli_bad_value_reported_before_config(project: Path) -> None:
    write_config(project, 'format = "xml"')
    result = run(project / STANDARD.name, "--max-params", "nope")
    assert result.exit_code == 2 and "--max-params" in result.stderr


# ----------------------------------------------------------------------------- per model, --config, --isolated


def test_config_found_from_each_models_folder_whatever_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    strict, loose = tmp_path / "strict", tmp_path / "loose"
    write_config(strict, 'max-params = "1k"')
    write_config(loose, 'max-params = "1M"')
    for folder in (strict, loose):
        shutil.copy(STANDARD, folder / STANDARD.name)
    for cwd in (tmp_path, strict, loose):  # the same files gate the same way from anywhere
        monkeypatch.chdir(cwd)
        result = run(strict / STANDARD.name, loose / STANDARD.name, "--format", "json")
        assert result.exit_code == 1
        gates = [m["gates"] for m in json.loads(result.stdout)["models"]]
        assert [g[0]["passed"] for g in gates] == [False, True]
        assert gates[0][0]["source"].endswith("pyproject.toml") and gates[0][0]["limit"] == 1000
        assert result.stderr.count("gate failed") == 1


def test_config_file_option_and_isolated(project: Path, tmp_path: Path) -> None:
    write_config(project, 'max-params = "1k"')
    model = project / STANDARD.name
    assert run(model).exit_code == 1
    assert run(model, "--isolated").exit_code == 0
    other = tmp_path / "ci.toml"
    other.write_text('max-params = "1M"\nfail-on = "warning"\n', encoding="utf-8")
    assert run(model, "--config", other).exit_code == 0
    keras = run(project / KERAS.name, "--config", other)
    assert keras.exit_code == 1 and f"(fail-on warning from {other})" in keras.stderr
    missing = run(model, "--config", tmp_path / "nope.toml")
    assert missing.exit_code == 2 and "nope.toml: no such file" in missing.stderr
    assert run(model, "--config", other, "--isolated").exit_code == 2
    bare = tmp_path / "bare" / "pyproject.toml"
    bare.parent.mkdir()
    bare.write_text("[project]\nname = 'x'\n", encoding="utf-8")
    assert "has no [tool.mhainspect] table" in run(model, "--config", bare).stderr
