"""Issue 19: the rough edges a new user hit in the CLI, calc and the Python API, one test each.

Runs main() in process (the entry point that also handles `mhainspect MODEL`, help and typos);
COLUMNS sets the width as a terminal would.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_run import Run, in_process

from mhainspect.render.grouping import group_flags, join_names, number_ranges
from mhainspect.render.markdown import render_markdown
from mhainspect.render.table import render_table
from mhainspect.results import AttentionBlock, Flag, ModelSummary, ParamBreakdown, Report, Severity

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_models"
BERT = SAMPLES / "bert_two_layers.onnx"  # 2 blocks of 16,640 (one 8-head, one 4-head), MHA006
KERAS = SAMPLES / "keras_per_head.onnx"  # 4 heads × d_k 16 on d_model 32: MHA001 (warning)
STANDARD = SAMPLES / "standard_mha.onnx"  # 8 heads, d_model 64, 16,768 params, no flags
GQA = SAMPLES / "gqa_llama.onnx"  # MHA005 (info)
ALL_SAMPLES = sorted(SAMPLES.glob("*.onnx"))


@pytest.fixture()
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    return in_process(capsys, monkeypatch)


def words(text: str) -> set[str]:
    return set(text.split())


def assert_words_whole(narrow: str, wide: str, width: int) -> None:
    """No line is wider than the terminal, and no word of the unwrapped output is split across two
    lines (the end of one line and the start of the next make a word that neither is alone)."""
    lines = narrow.splitlines()
    assert max(len(line) for line in lines) <= width, narrow
    vocabulary = words(wide)
    broken = []
    for line, following in zip(lines, lines[1:]):
        if not line.split() or not following.split():
            continue
        end, start = line.split()[-1], following.split()[0]
        if end + start in vocabulary and not (end in vocabulary and start in vocabulary):
            broken.append(f"{end}|{start}")
    assert not broken, f"words broken at {width} columns: {broken[:10]}"


# ----------------------------------------------------------------------------- the terminal


@pytest.mark.parametrize("width", [80, 120])
def test_no_word_broken_at_80_and_120_columns(cli: Any, width: int) -> None:
    """Reports of every sample, with -v evidence and a what-if section, wrap at word boundaries."""
    for model in ALL_SAMPLES:
        narrow = cli(model, "-v", "--heads", "3", "--no-color", columns=width)
        wide = cli(model, "-v", "--heads", "3", "--no-color", columns=5000)
        assert narrow.code == wide.code == 0, narrow.err
        assert_words_whole(narrow.out, wide.out, width)


def test_tmux_capture_at_80_columns_has_no_broken_word(tmp_path: Path) -> None:
    """The report in a real 80-column terminal (tmux), not only with COLUMNS set."""
    import os
    import subprocess
    import sys

    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    session = f"mhai{os.getpid()}"
    out = tmp_path / "pane.txt"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "MHAINSPECT_NO_PROGRESS": "1"}
    env.pop("COLUMNS", None)
    command = f"{sys.executable} -m mhainspect {KERAS} {BERT} -v --heads 3 --no-color; sleep 30"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "200", command], env=env,
                   check=True, timeout=30)
    try:
        for _ in range(100):
            subprocess.run(["tmux", "capture-pane", "-p", "-t", session, "-S", "-", "-J"], stdout=out.open("w"),
                           check=True, timeout=10)
            if "Audited 2 models" in out.read_text():
                break
            import time

            time.sleep(0.2)
        # Without -J: the pane as it looks, one screen row per line.
        rows = subprocess.run(["tmux", "capture-pane", "-p", "-t", session, "-S", "-"], capture_output=True,
                              text=True, check=True, timeout=10).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, timeout=10)
    wide = subprocess.run([sys.executable, "-m", "mhainspect", str(KERAS), str(BERT), "-v", "--heads", "3"],
                          capture_output=True, text=True, env={**env, "COLUMNS": "5000"}, timeout=120).stdout
    assert "Audited 2 models" in rows
    assert_words_whole(rows, wide, 80)


def test_help_is_legible_at_80_columns(cli: Any) -> None:
    result = cli("inspect", "--help", columns=80)
    assert result.code == 0
    assert max(len(line) for line in result.out.splitlines()) <= 80
    for option in ("--max-attention-params", "--fail-on-contradiction", "--max-verify-bytes", "--config",
                   "--isolated", "--no-group", "--heads"):
        assert re.search(rf"(^|\s){re.escape(option)}\b", result.out), option
    assert "table|json|jsonl|markdown|github|sarif" in result.out  # the format list is not split
    assert "…" not in result.out


def test_counts_are_exact_everywhere(cli: Any) -> None:
    for args in ((BERT,), (BERT, "-f", "markdown"), (BERT, "--no-color")):
        out = cli(*args, columns=160).out
        assert "16,640" in out and "16.64k" not in out
        assert not re.search(r"\d\.\d\d[kMB]\b", out)
    # too narrow for exact counts: abbreviated, and the table says so
    report = _report_with_blocks(["attn"], total=123_456_789)
    assert "123,456,789" in render_table(report, color=False, width=60)
    text = render_table(report, color=False, width=56)
    assert "Counts abbreviated to fit 56 columns" in text and "123.46M" in text


def test_what_if_section_in_table_and_markdown(cli: Any) -> None:
    table = cli(STANDARD, "--heads", "16", "--heads", "3", columns=120).out
    assert "What if (--heads 3, 16)" in table  # sorted, however given
    row16 = next(ln for ln in table.splitlines() if re.search(r"\s16\s+16,640\s+", ln))
    assert row16.split()[-1] == "33,216"  # d_k fixed: every projection doubles its width (+ biases)
    row3 = next(ln for ln in table.splitlines() if re.search(r"\s3\s+\?\s", ln))
    assert "?" in row3  # 64 is not divisible by 3 heads: no count with h·d_k fixed
    md = cli(STANDARD, "--heads", "16", "-f", "markdown").out
    assert "**What if (--heads 16)**" in md and "| 16 | 16,640 | 33,216 |" in md
    doc = json.loads(cli(STANDARD, "--heads", "3", "-f", "json").out)
    three = [w for w in doc["blocks"][0]["what_if"] if w["num_heads"] == 3]
    assert three == [{"num_heads": 3, "total_width_fixed": None, "head_dim_fixed": three[0]["head_dim_fixed"]}]


def test_markdown_verbose_shows_evidence(cli: Any) -> None:
    plain = cli(STANDARD, "-f", "markdown").out
    verbose = cli(STANDARD, "-f", "markdown", "-v").out
    assert "Evidence:" not in plain
    # inside an HTML block Markdown is not parsed: HTML escaping, no backslash escapes
    assert "<summary>Evidence: <code>encoder.layer.0.attention</code>" in verbose and "reshape" in verbose
    assert not any("\\" in line for line in verbose.splitlines() if "<summary>" in line)


def test_head_count_sentence_by_default(cli: Any) -> None:
    assert "The head count does not change the count of this block" in cli(STANDARD, columns=200).out
    keras = cli(KERAS, columns=200).out
    assert "The head count changes the count of model.multi_head_attention" in keras
    calc = cli("calc", "pytorch", "embed_dim=512", "num_heads=8").out
    assert "The head count does not change this count (other arguments fixed)." in calc
    keras_calc = cli("calc", "keras", "num_heads=8", "key_dim=64", "query_dim=256").out
    assert "The head count changes this count" in keras_calc


def _report_with_blocks(names: list[str], total: int = 16_640) -> Report:
    blocks = tuple(
        AttentionBlock(name=n, matcher="fused", kind="self", num_heads=8, num_kv_heads=2, d_model=64, d_k=8,
                       d_v=8, params=ParamBreakdown(q=total // 4, k=total // 4, v=total // 4, o=total // 4, bias=0,
                                                    total=total), projections=(), evidence=())
        for n in names)
    flags = tuple(Flag("MHA005", Severity.INFO, n, "grouped-query attention: 8 query heads share 2 K/V heads.")
                  for n in names)
    summary = ModelSummary(path="llama.onnx", format="onnx", total_params=total * len(names) + 10, num_nodes=5,
                           opset=17, producer="", attention_params=total * len(names))
    return Report("1.0", summary, blocks, flags, ())


def test_identical_flags_grouped_with_no_group_and_verbose_listing_each(cli: Any) -> None:
    report = _report_with_blocks([f"model.layers.{i}.self_attn" for i in range(16)])
    text = render_table(report, color=False, width=120)
    assert "MHA005  info  ×16 model.layers.{0–15}.self_attn: grouped-query attention" in text
    assert text.count("MHA005") == 1
    for listed in (render_table(report, color=False, group_repeats=False),
                   render_table(report, color=False, verbose=True)):
        assert listed.count("MHA005") == 16
    md = render_markdown(report)
    assert "- **MHA005** (info) ×16 `model.layers.{0–15}.self_attn`:" in md
    assert number_ranges([0, 1, 2, 5, 7, 8]) == "0–2, 5, 7–8"
    assert join_names(["a.1.x", "a.3.x"]) == "a.{1, 3}.x"
    assert join_names(["enc.q", "dec.q"]) == "enc.q, dec.q"
    assert len(group_flags(report.flags, group=False)) == 16


def test_end_of_run_summary_for_many_models(cli: Any) -> None:
    result = cli(BERT, KERAS, GQA, "--max-params", "20k", columns=120)
    assert result.code == 1
    tail = result.out.rstrip().splitlines()[-2:]
    assert tail[0] == "Audited 3 models: 4 blocks, 3 flags (2 info, 1 warning)."
    assert tail[1] == "Gates: 1 failure in 3 checks."
    assert "Audited" not in cli(BERT).out  # one model: no summary


def test_help_forms_and_default_command(cli: Any) -> None:
    for args in (("-h",), ("--help",), ("help",)):
        result = cli(*args)
        assert result.code == 0 and "mhainspect MODEL..." in result.out and "calc" in result.out
    assert "--vs" in cli("help", "calc").out and "--max-params" in cli("help", "inspect").out
    assert "--max-params" in cli("inspect", "-h").out


@pytest.mark.parametrize(("typo", "command"), [("inspekt", "inspect"), ("calk", "calc"), ("hlep", "help")])
def test_misspelled_subcommand_suggested_and_stops(cli: Any, typo: str, command: str) -> None:
    result = cli(typo, STANDARD)
    assert result.code == 2 and result.out == ""
    assert result.err.strip() == (f"mhainspect: error: unknown command '{typo}'; did you mean '{command}'? "
                                  "(a model path must exist)")


def test_dash_output_is_stdout_and_version_after_a_model(cli: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli(STANDARD, "-o", "-", "-f", "json")
    assert result.code == 0 and json.loads(result.out)["model"]["total_params"] == 16_768
    assert not (tmp_path / "-").exists()
    version = cli(STANDARD, "--version")
    assert version.code == 0 and version.out.startswith("mhainspect ")


def test_header_has_only_what_the_source_has(cli: Any) -> None:
    onnx_out = cli(STANDARD, columns=200).out
    assert "Format: ONNX  opset 17  producer" in onnx_out
    md = cli(STANDARD, "-f", "markdown").out
    assert "1 block\n" in md and "1 blocks" not in md


def test_gates_in_every_format(cli: Any) -> None:
    doc = json.loads(cli(STANDARD, "-f", "json", "--max-params", "1k").out)
    assert doc["gates"] == [{"gate": "max-params", "passed": False, "actual": 16_768, "limit": 1000, "code": None,
                             "source": "--max-params", "message": f"{STANDARD} has 16,768 parameters > "
                                                                  "--max-params 1k (1,000)"}]
    assert "gates" not in json.loads(cli(STANDARD, "-f", "json").out)  # no gate set: no key
    md = cli(STANDARD, "-f", "markdown", "--max-params", "1M").out
    assert "**Gates: all passed**" in md and "- ✅ passed" in md
    table = cli(STANDARD, "--max-params", "1k", columns=200).out
    assert "Gates (1 failed)" in table and "FAILED" in table
    page = cli(STANDARD, "-f", "html", "--max-params", "1k").out
    assert "<h3>Gates (1 failed)</h3>" in page and "16,768 parameters &gt; --max-params 1k" in page
    quiet = cli(KERAS, "-q", "-f", "github", "--fail-on", "MHA001")
    assert quiet.code == 1
    assert quiet.out.startswith("::error ") and "::warning" not in quiet.out  # only the failures
    assert cli(STANDARD, "-q", "-f", "github", "--fail-on", "MHA001").out == ""


def test_fail_on_severity(cli: Any) -> None:
    assert cli(KERAS, "--fail-on", "warning").code == 1  # MHA001 is a warning
    assert cli(GQA, "--fail-on", "warning").code == 0  # MHA005 is info
    info = cli(GQA, "--fail-on", "info")
    assert info.code == 1 and "1 flag of severity info or worse (--fail-on info)" in info.err
    assert cli(KERAS, "--fail-on", "error").code == 0
    assert cli(KERAS, "--fail-on", "severe").code == 2


# ----------------------------------------------------------------------------- inputs


def test_folder_scan_finds_every_format_and_hf_folder_is_one_model(tmp_path: Path) -> None:
    from mhainspect.frontends.folders import expand_models

    root = tmp_path / "models"
    (root / "hf").mkdir(parents=True)
    (root / "hf" / "config.json").write_text("{}")
    (root / "hf" / "model.safetensors").write_bytes(b"")
    (root / "sub").mkdir()
    for name in ("a.onnx", "sub/b.safetensors", "sub/c.pt", "sub/d.pth", "sub/e.bin", "notes.txt", "f.gguf",
                 "g-00002-of-00002.gguf", "g-00001-of-00002.gguf"):
        (root / name).write_bytes(b"")
    found = [p.relative_to(root).as_posix() for p in expand_models([root])]
    assert found == ["a.onnx", "f.gguf", "g-00001-of-00002.gguf", "hf", "sub/b.safetensors", "sub/c.pt",
                     "sub/d.pth", "sub/e.bin"]
    assert expand_models([root / "hf"]) == (root / "hf",)


def test_one_model_is_one_json_document_whatever_its_source(cli: Any, tmp_path: Path) -> None:
    folder = tmp_path / "one"
    folder.mkdir()
    shutil.copy(STANDARD, folder / "m.onnx")
    assert "models" in json.loads(cli(folder, "-f", "json").out)  # a folder of models: the multi document
    hf = _hf_folder(tmp_path / "hf")
    doc = json.loads(cli(hf, "-f", "json").out)
    assert "models" not in doc and doc["model"]["path"] == str(hf)


def _hf_folder(folder: Path) -> Path:
    """A tiny BERT checkpoint folder: config.json and model.safetensors (random attention weights)."""
    np = pytest.importorskip("numpy")
    save_file = pytest.importorskip("safetensors.numpy").save_file
    folder.mkdir(parents=True)
    config = {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 32, "num_attention_heads": 4,
              "num_hidden_layers": 1, "intermediate_size": 64}
    (folder / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(0)
    prefix = "encoder.layer.0.attention."
    tensors = {}
    for module in ("self.query", "self.key", "self.value", "output.dense"):
        tensors[f"{prefix}{module}.weight"] = rng.standard_normal((32, 32)).astype("float32")
        tensors[f"{prefix}{module}.bias"] = rng.standard_normal(32).astype("float32")
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def test_arguments_never_silently_ignored(cli: Any) -> None:
    arg = cli(STANDARD, "--arg", "h=8")
    assert arg.code == 2 and "--arg applies to factory specs" in arg.err
    twice = cli("pkg.mod:make", "--arg", "h=8", "--arg", "h=4")
    assert twice.code == 2 and "--arg h given twice" in twice.err
    calc = cli("calc", "pytorch", "embed_dim=512", "num_heads=8", "embed_dim=256")
    assert calc.code == 2 and "embed_dim given twice" in calc.err and calc.out == ""
    spelled = cli("calc", "matlab", "NumHeads=4", "num_heads=8", "NumKeyChannels=8")
    assert spelled.code == 2 and "given twice" in spelled.err
    dim = cli(STANDARD, "--verify", "--dim", "nosuch=3")
    assert dim.code == 2 and "--dim nosuch: no input of the model has a dimension of that name" in dim.err


@pytest.mark.parametrize("heads", ["0", "99999999999999999999", "70000"])
def test_what_if_heads_validated_the_same_way_in_inspect_and_calc(cli: Any, heads: str) -> None:
    inspect = cli(STANDARD, "--heads", heads)
    calc = cli("calc", "pytorch", "embed_dim=64", "num_heads=8", "--heads", heads)
    assert inspect.code == calc.code == 2 and inspect.out == calc.out == ""
    assert inspect.err == calc.err  # one check, one message


def test_python_file_without_function_and_factory_args_in_the_name(cli: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    result = cli(bad)
    assert result.code == 2 and f"{bad}:FUNCTION" in result.err and "ONNX" not in result.err
    from mhainspect.frontends.dispatch import factory_label

    assert factory_label("roberta.py:make", {"num_heads": 4}) == "roberta.py:make(num_heads=4)"
    assert factory_label("roberta.py:make", {}) == "roberta.py:make"


def test_factory_run_header_and_trainable_params(cli: Any, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    factory = tmp_path / "fac.py"
    factory.write_text(
        "import torch\n\n"
        "def make(num_heads=4):\n"
        "    m = torch.nn.Sequential(torch.nn.MultiheadAttention(32, num_heads), torch.nn.LayerNorm(32))\n"
        "    m[1].weight.requires_grad_(False)\n"
        "    return m\n")
    result = cli(f"{factory}:make", "--arg", "num_heads=8", columns=200)
    assert result.code == 0, result.err
    assert f"Model: {factory}:make(num_heads=8)" in result.out
    fmt_line = next(ln for ln in result.out.splitlines() if ln.startswith("Format:"))
    assert fmt_line.startswith("Format: PyTorch module") and "opset" not in fmt_line
    assert "trainable 4,256, non-trainable 32" in result.out
    doc = json.loads(cli(f"{factory}:make", "-f", "json").out)
    assert doc["model"]["trainable_params"] == doc["model"]["total_params"] - 32


def test_full_model_pickle_message_is_whole(cli: Any, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "full.pt"
    torch.save(torch.nn.Sequential(torch.nn.Linear(4, 4)), path)
    result = cli(path)
    assert result.code == 2
    assert "it pickles a torch.nn.modules.container.Sequential object" in result.err
    assert "save model.state_dict() instead" in result.err and result.err.rstrip().endswith("was run")


# ----------------------------------------------------------------------------- calc


def test_calc_json_has_one_shape(cli: Any) -> None:
    base = json.loads(cli("calc", "pytorch", "embed_dim=512", "num_heads=8", "-f", "json").out)
    more = json.loads(cli("calc", "pytorch", "embed_dim=512", "num_heads=8", "--heads", "4", "-f", "json").out)
    assert base["params"]["total"] == more["params"]["total"] == 1_050_624
    assert list(base) == list(more) and base["what_if"] == [] and base["vs"] is None
    assert [w["num_heads"] for w in more["what_if"]] == [8, 4]


def test_calc_compare_with_heads_or_vs_refused(cli: Any) -> None:
    for extra in (("--heads", "4"), ("--vs", "num_heads=4")):
        result = cli("calc", "--compare", "embed_dim=512", "num_heads=8", *extra)
        assert result.code == 2 and "applies to one convention" in result.err


def test_calc_vs_matlab_seed_case(cli: Any) -> None:
    args = ("calc", "matlab", "NumHeads=4", "NumKeyChannels=784", "InputSize=3136",
            "--vs", "NumHeads=8", "NumKeyChannels=392")
    result = cli(*args, columns=80)
    assert result.code == 0, result.err
    weights = next(ln for ln in result.out.splitlines() if ln.strip().startswith("weights") and "4,917,248" in ln)
    assert "9,834,496" in weights
    text = " ".join(result.out.split())
    assert "NumKeyChannels (784 → 392) moves it; NumHeads (4 → 8) alone does not change it." in text
    doc = json.loads(cli(*args, "-f", "json").out)
    assert doc["params"]["weights"] == 9_834_496 and doc["vs"]["calculation"]["params"]["weights"] == 4_917_248
    assert [(c["argument"], c["alone"]) for c in doc["vs"]["changed"]] == [("NumHeads", "same"),
                                                                            ("NumKeyChannels", "moves")]


def test_calc_text_wraps_to_the_terminal(cli: Any) -> None:
    args = ("calc", "matlab", "NumHeads=4", "NumKeyChannels=784", "InputSize=3136")
    narrow = cli(*args, columns=80).out
    piped = cli(*args).out  # no terminal: one line per paragraph
    prose = [ln for ln in narrow.splitlines() if not re.match(r"\s+(term|W_|b_|-{5}|weights|biases|total)", ln)]
    assert max(len(ln) for ln in prose) <= 80
    assert words(narrow) == words(piped)  # nothing broken mid-word
    assert "NumHeads does not enter it" in " ".join(piped.split())


# ----------------------------------------------------------------------------- Python API


def test_api_report_dict_json_repr_and_exports(tmp_path: Path) -> None:
    import mhainspect
    from mhainspect.render.json_render import report_to_dict

    report = mhainspect.inspect(BERT)
    assert report.to_dict() == report_to_dict(report) == json.loads(report.to_json())
    json.dumps(report.to_dict())
    assert repr(report) == (f"<Report {str(BERT)!r}: onnx, 33,536 params, attention 33,280, 2 blocks, 1 flag>")
    assert issubclass(mhainspect.InputError, Exception)
    with pytest.raises(mhainspect.InputError):
        mhainspect.inspect(tmp_path / "missing.onnx")
    folder = tmp_path / "one"
    folder.mkdir()
    shutil.copy(STANDARD, folder / "m.onnx")
    assert mhainspect.inspect(folder).model.total_params == 16_768  # a folder works as on the CLI
    shutil.copy(BERT, folder / "n.onnx")
    with pytest.raises(mhainspect.InputError, match="inspect_all"):
        mhainspect.inspect(folder)
    assert [r.model.total_params for r in mhainspect.inspect_all(folder)] == [16_768, 33_536]
    assert mhainspect.calc("matlab", NumHeads=4, NumKeyChannels=784, InputSize=3136).weights == 9_834_496
    assert dict(mhainspect.compare(embed_dim=512, num_heads=8))["pytorch"] is not None


def test_the_samples_are_what_this_file_says() -> None:
    """The samples the tests above rely on hold what their comments say (a changed sample fails
    here, by name, before it fails a test about wrapping or grouping)."""
    import mhainspect

    bert, keras, standard, gqa = (mhainspect.inspect(m) for m in (BERT, KERAS, STANDARD, GQA))
    assert [b.params.total for b in bert.blocks] == [16_640, 16_640]
    assert [b.num_heads for b in bert.blocks] == [8, 4] and "MHA006" in {f.code for f in bert.flags}
    (k,) = keras.blocks
    assert (k.num_heads, k.d_k, k.d_model) == (4, 16, 32)
    assert {(f.code, f.severity.value) for f in keras.flags} >= {("MHA001", "warning")}
    assert standard.model.total_params == 16_768 and standard.blocks[0].num_heads == 8 and not standard.flags
    assert [(f.code, f.severity.value) for f in gqa.flags] == [("MHA005", "info")]


def test_new_json_keys_follow_the_schema(cli: Any, tmp_path: Path) -> None:
    from jsonschema import Draft202012Validator

    schema = json.loads((REPO_ROOT / "docs" / "report.schema.json").read_text(encoding="utf-8"))
    validator = Draft202012Validator(schema)
    doc = json.loads(cli(KERAS, "-f", "json", "--max-params", "1k", "--fail-on", "warning", "--ignore", "MHA002",
                         "--heads", "3").out)
    assert [g["gate"] for g in doc["gates"]] == ["max-params", "fail-on"]
    assert not list(validator.iter_errors(doc))
    ignored = json.loads(cli(KERAS, "-f", "json", "--ignore", "MHA001").out)
    assert ignored["ignored_flags"] == {"MHA001": 1} and not list(validator.iter_errors(ignored))
    broken = {**doc, "gates": [{"gate": "max-params"}]}
    assert list(validator.iter_errors(broken))  # the schema does check the gate entries


def test_pipe_keeps_one_line_per_flag(cli: Any) -> None:
    """No terminal and no COLUMNS (a log, grep): flags are not wrapped; a terminal wraps them."""
    piped = cli(KERAS).out
    flag = next(ln for ln in piped.splitlines() if ln.startswith("MHA001"))
    assert flag.endswith("would hold 4,224.")
    wrapped = cli(KERAS, columns=80).out
    assert not next(ln for ln in wrapped.splitlines() if ln.startswith("MHA001")).endswith("4,224.")


def test_what_if_rows_fold_numbered_layers_only() -> None:
    from mhainspect.render.cells import what_if_rows

    layers = _report_with_blocks([f"model.layers.{i}.self_attn" for i in range(16)])
    assert [r[0] for r in what_if_rows(layers, [4])] == ["model.layers.{0–15}.self_attn"]
    mixed = _report_with_blocks(["encoder.attn", "decoder.cross"])
    assert [r[0] for r in what_if_rows(mixed, [4])] == ["encoder.attn", "decoder.cross"]


def test_config_json_alone_and_a_malformed_json_model_are_one_line_input_errors(cli: Any, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_head": 4, "activation_function": "gelu"}))
    result = cli(config)
    assert result.code == 2 and result.out == ""
    assert result.err.strip() == (f"mhainspect: error: {config}: a config.json alone is not a model: pass the folder "
                                  "that holds it with its weights")
    # onnx.load reads *.json as ModelProto in JSON form: a field it does not know is an input error, not internal.
    bad = tmp_path / "model.json"
    bad.write_text(json.dumps({"irVersion": "x"}))
    result = cli(bad)
    assert result.code == 2 and result.out == ""
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "not a valid ONNX model in text form" in lines[0] and "internal error" not in lines[0]
