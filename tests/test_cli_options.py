"""Issue 29: options a new user types: token counts with suffixes (8k, 128k, 1M) on the command line
and in the config file, absurd values refused in one line, a context beyond the model's maximum
positions warned about, format names in any case, -o picking the format from the file's suffix and
confirming what it wrote, a failed gate printed once on a terminal.

Runs main() in process (as tests/test_cli_ux.py does); inputs are the bundled samples or built here.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_run import in_process

from mhainspect.ir.units import MAX_TOKENS, parse_tokens

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_models"
GQA = SAMPLES / "gqa_llama.onnx"
STANDARD = SAMPLES / "standard_mha.onnx"


@pytest.fixture()
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    return in_process(capsys, monkeypatch)


def llama_folder(folder: Path, *, max_positions: int | None = 2048, config: bool = True, layers: int = 2) -> Path:
    """A tiny Llama checkpoint folder: GQA (8 query heads, 2 K/V heads, head_dim 8), float16
    weights with random values, and a config.json naming ``max_position_embeddings``."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    d_model, heads, kv_heads, head_dim = 64, 8, 2, 8
    rng = np.random.default_rng(29)
    tensors = {}
    for i in range(layers):
        p = f"model.layers.{i}.self_attn."
        tensors[p + "q_proj.weight"] = rng.standard_normal((heads * head_dim, d_model)).astype(np.float16)
        tensors[p + "k_proj.weight"] = rng.standard_normal((kv_heads * head_dim, d_model)).astype(np.float16)
        tensors[p + "v_proj.weight"] = rng.standard_normal((kv_heads * head_dim, d_model)).astype(np.float16)
        tensors[p + "o_proj.weight"] = rng.standard_normal((d_model, heads * head_dim)).astype(np.float16)
    save_file(tensors, str(folder / "model.safetensors"))
    if config:
        cfg: dict[str, Any] = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d_model,
                               "num_attention_heads": heads, "num_key_value_heads": kv_heads,
                               "torch_dtype": "float16"}
        if max_positions is not None:
            cfg["max_position_embeddings"] = max_positions
        (folder / "config.json").write_text(json.dumps(cfg))
    return folder


# ----------------------------------------------------------------------------- token counts


@pytest.mark.parametrize(("text", "n"), [
    ("8192", 8192), ("8_192", 8192), ("8,192", 8192), ("8k", 8000), ("8K", 8000), ("128k", 128_000),
    ("8Ki", 8192), ("8ki", 8192), ("128Ki", 131_072), ("1Mi", 1_048_576), ("1M", 1_000_000), ("1m", 1_000_000),
    ("1.5k", 1500), ("1.5Ki", 1536), (" 32k ", 32_000), (4096, 4096), ("4e3", 4000), ("1B", 10**9), ("2G", 2 * 10**9),
])
def test_token_counts_take_si_and_binary_suffixes(text: str | int, n: int) -> None:
    """k is 1,000 as in every option; only an "i" makes a unit binary (8Ki = 8,192)."""
    assert parse_tokens(text) == n


@pytest.mark.parametrize("text", ["0", "-1", "1T", "1.0001k", "1.0001Ki", "", "k", "eight", "8 kB", "8KiB", True, 0,
                                  "99999999999999999999999", MAX_TOKENS + 1])
def test_token_counts_refuse_the_rest(text: str | int) -> None:
    with pytest.raises(ValueError):
        parse_tokens(text)


def test_context_suffix_on_the_command_line(cli: Any, tmp_path: Path) -> None:
    folder = llama_folder(tmp_path / "llama", max_positions=None)
    run = cli(folder, "--context", "8k", "--batch", "2", "-f", "json")
    kv = json.loads(run.out)["model"]["kv_cache"]
    assert (kv["context"], kv["batch"]) == (8000, 2)
    # 2 layers × 2 kv heads × (8 + 8) × 2 bytes = 128 bytes per token
    assert kv["bytes_per_token"] == 128 and kv["total_bytes"] == 128 * 8000 * 2
    # stderr says what the suffix came to; a plain number (--batch 2) needs no note, nor does -q
    assert run.err.splitlines() == ["mhainspect: note: --context 8k = 8,000 tokens"]
    binary = cli(folder, "--context", "8Ki", "-f", "json")
    assert json.loads(binary.out)["model"]["kv_cache"]["context"] == 8192
    assert binary.err.splitlines() == ["mhainspect: note: --context 8Ki = 8,192 tokens"]
    assert cli(folder, "--context", "8k", "-q").err == ""


def test_context_suffix_in_the_config_file(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = llama_folder(tmp_path / "llama", max_positions=None)
    (tmp_path / "pyproject.toml").write_text('[tool.mhainspect]\ncontext = "128k"\nbatch = "1"\nformat = "JSON"\n')
    monkeypatch.chdir(tmp_path)  # the run's format comes from the working directory's config
    doc = json.loads(cli(folder).out)  # format "JSON": any case, as -f
    assert doc["model"]["kv_cache"]["context"] == 128_000


def test_calc_arguments_take_the_one_rule(cli: Any) -> None:
    """calc's own arguments (and --vs) are numbers like every option's: 4Ki is 4,096, 4k is 4,000."""
    binary = json.loads(cli("calc", "hf", "hidden_size=4Ki", "num_attention_heads=32", "-f", "json").out)
    plain = json.loads(cli("calc", "hf", "hidden_size=4096", "num_attention_heads=32", "-f", "json").out)
    assert binary["params"] == plain["params"] and binary["arguments"]["hidden_size"] == 4096
    si = json.loads(cli("calc", "hf", "hidden_size=4k", "num_attention_heads=32", "-f", "json").out)
    assert si["arguments"]["hidden_size"] == 4000
    bad = cli("calc", "hf", "hidden_size=4.5", "num_attention_heads=32")
    assert bad.code == 2 and bad.err == "mhainspect: error: hidden_size must be a positive integer, got '4.5'\n"


def test_calc_context_takes_suffixes(cli: Any) -> None:
    run = cli("calc", "hf", "hidden_size=64", "num_attention_heads=8", "--context", "1k", "-f", "json")
    assert json.loads(run.out)["size"]["context"] == 1000 and "--context 1k = 1,000 tokens" in run.err
    doc = json.loads(cli("calc", "hf", "hidden_size=64", "num_attention_heads=8", "--context", "1Ki", "-f", "json").out)
    assert doc["size"]["context"] == 1024


@pytest.mark.parametrize(("args", "message"), [
    (("--context", "99999999999999999999999"), "--context: 99999999999999999999999 tokens is more than"),
    (("--context", "0"), "--context: 0 is not a positive number of tokens"),
    (("--context", "8B"), "--context: 8B tokens is more than any cache is sized at"),
    (("--context", "8kB"), "--context: not a whole number of tokens: '8kB'"),
    (("--context", "4Mi", "--batch", "1Mi"), "--context 4,194,304 × --batch 1,048,576 is more tokens than any cache"),
    (("--batch", "-3"), "--batch: not a whole number of sequences"),
])
def test_absurd_sizes_are_one_line_and_exit_2(cli: Any, args: tuple[str, ...], message: str) -> None:
    result = cli(GQA, *args)
    assert result.code == 2 and result.out == ""
    assert result.err.count("\n") == 1 and result.err.startswith(f"mhainspect: error: {message}"), result.err


def test_absurd_context_in_the_config_file(cli: Any, tmp_path: Path) -> None:
    folder = llama_folder(tmp_path / "llama")
    (tmp_path / "pyproject.toml").write_text("[tool.mhainspect]\ncontext = 99999999999999999999\n")
    result = cli(folder)
    assert result.code == 2 and result.err.count("\n") == 1
    assert "[tool.mhainspect] context:" in result.err and "more than any cache is sized at" in result.err


# ----------------------------------------------------------------------------- maximum positions


def test_context_beyond_the_configs_maximum_positions_is_a_warning(cli: Any, tmp_path: Path) -> None:
    folder = llama_folder(tmp_path / "llama", max_positions=2048)
    result = cli(folder, "--context", "128k", "-f", "json")
    assert result.code == 0
    doc = json.loads(result.out)
    assert doc["model"]["kv_cache"]["total_bytes"] == 128 * 128_000  # still sized at the context asked for
    (warning,) = [w for w in doc["warnings"] if "maximum positions" in w]
    assert "--context 128,000" in warning and "config.json max_position_embeddings = 2,048" in warning
    # At or below the maximum: no warning.
    within = json.loads(cli(folder, "--context", "2k", "-f", "json").out)
    assert not any("maximum positions" in w for w in within["warnings"])


def test_context_beyond_a_gguf_context_length_is_a_warning(cli: Any, tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    from gguf_files import Decoder

    (path,) = Decoder().write(tmp_path / "tiny.gguf")  # {arch}.context_length 4096
    doc = json.loads(cli(path, "--context", "8k", "-f", "json").out)
    assert any("GGUF llama.context_length = 4,096" in w for w in doc["warnings"]), doc["warnings"]
    assert not any("maximum positions" in w for w in json.loads(cli(path, "--context", "4k", "-f", "json").out)["warnings"])


# ----------------------------------------------------------------------------- formats and -o


def test_format_names_in_any_case(cli: Any) -> None:
    assert json.loads(cli(STANDARD, "-f", "JSON").out)["schema_version"]
    assert cli(STANDARD, "--format", "Markdown").out.startswith("## ")
    assert json.loads(cli("calc", "pytorch", "embed_dim=8", "num_heads=2", "-f", "Json").out)["convention"] == "pytorch"


@pytest.mark.parametrize(("name", "check"), [
    ("report.html", lambda text: text.startswith("<!DOCTYPE html>")),
    ("report.json", lambda text: json.loads(text)["schema_version"] is not None),
    ("report.jsonl", lambda text: json.loads(text.splitlines()[0])["schema_version"] is not None),
    ("report.md", lambda text: text.startswith("## ")),
    ("report.sarif", lambda text: json.loads(text)["version"] == "2.1.0"),
])
def test_output_suffix_picks_the_format_and_says_so(cli: Any, tmp_path: Path, name: str, check: Any) -> None:
    out = tmp_path / name
    result = cli(STANDARD, "-o", out)
    assert result.code == 0 and result.out == ""
    assert check(out.read_text())
    fmt = {"md": "markdown"}.get(out.suffix[1:], out.suffix[1:])
    size = out.stat().st_size
    assert result.err.splitlines() == [f"mhainspect: wrote {out} ({fmt} from the suffix {out.suffix}, "
                                       f"{size / 1024:.1f} KiB)".replace(".0 KiB", " KiB")
                                       if size >= 1024 else f"mhainspect: wrote {out} ({fmt} from the suffix "
                                       f"{out.suffix}, {size:,} B)"]


def test_format_option_outranks_the_suffix_and_the_suffix_the_config(cli: Any, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "report.html"
    result = cli(STANDARD, "-f", "json", "-o", out)
    assert json.loads(out.read_text()) and result.err.startswith(f"mhainspect: wrote {out} (json, ")
    (tmp_path / "pyproject.toml").write_text('[tool.mhainspect]\nformat = "sarif"\n')
    monkeypatch.chdir(tmp_path)
    cli(STANDARD, "-o", "r.md")
    assert (tmp_path / "r.md").read_text().startswith("## ")
    cli(STANDARD, "-o", "r.txt")  # no format in the suffix: the config's
    assert json.loads((tmp_path / "r.txt").read_text())["version"] == "2.1.0"


def test_output_without_a_known_suffix_is_the_table_and_quiet_confirms_nothing(cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    result = cli(STANDARD, "-o", out)
    assert out.read_text().startswith("Model: ") and result.err.startswith(f"mhainspect: wrote {out} (table, ")
    quiet = cli(STANDARD, "-o", tmp_path / "q.json", "-q")
    assert quiet.code == 0 and quiet.err == "" and (tmp_path / "q.json").is_file()


def test_failed_gate_with_output_file_confirms_and_fails_once(cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = cli(STANDARD, "-o", out, "--max-params", "1k")
    lines = result.err.splitlines()
    assert result.code == 1 and len(lines) == 2
    assert lines[0].startswith(f"mhainspect: wrote {out} (json from the suffix .json")
    assert lines[1].startswith("mhainspect: gate failed: ")


def _on_a_terminal(*args: str) -> str:
    """What a person sees running the console script on a terminal (stdout and stderr on one pty)."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "MHAINSPECT_NO_PROGRESS": "1", "COLUMNS": "160"}
    proc = subprocess.Popen([sys.executable, "-m", "mhainspect", *args], stdin=subprocess.DEVNULL, stdout=terminal,
                            stderr=terminal, env=env, cwd=REPO_ROOT)
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=120)
    os.close(controller)
    return b"".join(chunks).decode("utf-8", "replace")


def test_failed_gate_is_printed_once_on_a_terminal() -> None:
    seen = _on_a_terminal(str(STANDARD), "--max-params", "1k", "--no-color")
    assert seen.count("16,768 parameters > --max-params 1k") == 1, seen
    # Piped (not a terminal): the table for the log, and the stderr line for whoever reads stderr.
    piped = subprocess.run([sys.executable, "-m", "mhainspect", str(STANDARD), "--max-params", "1k"],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                           timeout=120)
    assert piped.returncode == 1
    assert "1k" in piped.stdout and piped.stderr.count("gate failed") == 1


# ----------------------------------------------------------------------------- what-if heads


def test_what_if_says_the_kv_heads_it_assumes_for_a_grouped_block(cli: Any) -> None:
    table = cli(GQA, "--heads", "16", "--heads", "3", "--heads", "16").out
    assert "What if (--heads 3, 16)" in table  # sorted, each once
    (note,) = [ln for ln in table.splitlines() if ln.startswith("K/V heads assumed")]
    assert "ratio of query to K/V heads" in note and "halves to even" in note
    assert "8/2 kv at 16 heads: 4 kv (2·16/8 = 4)" in note and "8/2 kv at 3 heads: 1 kv (2·3/8 = 0.75)" in note
    # The count it stands for: d_k fixed at 3 heads, 1 kv head: q 3·8·64 + k, v 1·8·64 each + o 3·8·64
    row3 = next(ln for ln in table.splitlines() if ln.split()[-3:] == ["3", "?", f"{3 * 8 * 64 * 2 + 2 * 8 * 64:,}"])
    assert row3.startswith("model.layers.0.self_attn")
    markdown = cli(GQA, "--heads", "3", "-f", "markdown").out
    assert "8/2 kv at 3 heads: 1 kv (2·3/8 = 0.75)" in markdown.replace("\\", "")  # as GitHub shows it


def test_what_if_on_multi_head_attention_assumes_nothing_about_kv_heads(cli: Any) -> None:
    assert "K/V heads assumed" not in cli(STANDARD, "--heads", "3").out


def test_config_heads_are_sorted(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.mhainspect]\nheads = [32, 4, 32]\n")
    monkeypatch.chdir(tmp_path)
    assert "What if (--heads 4, 32)" in cli(STANDARD).out


def test_head_counts_take_the_one_rule(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--heads, --num-heads, calc --heads and --kv-heads and the config's heads read numbers as every
    option does (1_6 and 0.032k are 16 and 32); a fraction or a word is one usage line, exit 2."""
    assert "What if (--heads 16, 32)" in cli(STANDARD, "--heads", "1_6", "--heads", "0.032k").out
    for bad, message in (("x", "not a count: 'x'"), ("1.5", "not a whole count: '1.5'")):
        run = cli(STANDARD, "--heads", bad)
        assert run.code == 2 and run.err == f"mhainspect: error: Invalid value for '--heads': {message}" + (
            " (expected e.g. 1000, 1_000, 120k, 1.5M, 7B, 8Ki)\n" if bad == "x" else " = 1.5\n"), run.err
    calc = json.loads(cli("calc", "hf", "hidden_size=4Ki", "num_attention_heads=32", "--heads", "0.064k",
                          "--kv-heads", "0.008k", "--dtype", "bf16", "-f", "json").out)
    assert [w["num_heads"] for w in calc["what_if"]] == [32, 64] and calc["kv_heads_what_if"][0]["kv_heads"] == 8
    (tmp_path / "pyproject.toml").write_text('[tool.mhainspect]\nheads = ["32", 4]\n')
    monkeypatch.chdir(tmp_path)
    assert "What if (--heads 4, 32)" in cli(STANDARD).out
    (tmp_path / "pyproject.toml").write_text('[tool.mhainspect]\nheads = ["four"]\n')
    assert cli(STANDARD).code == 2
