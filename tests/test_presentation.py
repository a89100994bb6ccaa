"""Issue 29: how reports read. Identical layers collapse (terminal, markdown, HTML), a many-model
run starts with one row per model, columns give way by priority, display names at the edge.

A Llama-3-8B-shaped Hugging Face folder (config.json and a safetensors file whose data is a hole:
the header is all the audit reads) is the big model every view must show at a glance.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from big_models import LAYERS, write_llama_folder
from cli_run import Run, in_process

from mhainspect.pipeline import audit
from mhainspect.render.grouping import common_prefix, fold_names, group_blocks
from mhainspect.render.html import render_html
from mhainspect.render.markdown import render_markdown
from mhainspect.render.table import render_table
from mhainspect.results import AttentionBlock, ModelSummary, ParamBreakdown, Report

SAMPLES = Path(__file__).resolve().parents[1] / "sample_models"


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_llama_folder(tmp_path_factory.mktemp("llama") / "llama3-8b")


@pytest.fixture()
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    return in_process(capsys, monkeypatch)


# ------------------------------------------------------------------------------ the big model


def test_llama_folder_fits_one_80x50_screen_with_every_number(cli: Any, llama: Path) -> None:
    out = cli(llama, columns=80).out
    lines = out.rstrip("\n").splitlines()
    assert len(lines) <= 50 and max(len(line) for line in lines) <= 80, out
    for number in ("8,030,261,248", "1,342,177,280", "16.71", "32/8 kv", "4096", "128", "41,943,040", "0.52",
                   "16,777,216", "4,194,304", "131,072"):
        assert number in out, number
    # one row for the 32 identical layers, one flag line, nothing shortened or hidden
    assert out.count("self_attn ×32") == 2 and out.count("MHA005") == 1
    assert "…" not in out and "hidden" not in out and "abbreviated" not in out
    assert "Format: Hugging Face  architecture LlamaForCausalLM" in out


def test_no_group_lists_every_layer(cli: Any, llama: Path) -> None:
    out = cli(llama, "--no-group", columns=200).out
    assert all(f"model.layers.{i}.self_attn " in out for i in range(LAYERS))
    assert "×32" not in out and out.count("MHA005") == LAYERS


def test_markdown_folds_identical_layers(cli: Any, llama: Path) -> None:
    md = cli(llama, "-f", "markdown").out
    rows = [line for line in md.splitlines() if line.startswith("| `")]
    assert rows == [next(r for r in rows if r.startswith("| `model.layers.{0–31}.self_attn` ×32 |"))]
    assert "| 16,777,216 | 4,194,304 | 4,194,304 | 16,777,216 |" in rows[0]
    listed = cli(llama, "-f", "markdown", "--no-group").out
    assert sum(line.startswith("| `") for line in listed.splitlines()) == LAYERS


# ------------------------------------------------------------------------- grouping mechanism


def _block(name: str, heads: int = 8, total: int = 1000) -> AttentionBlock:
    q = total // 4
    return AttentionBlock(name=name, matcher="checkpoint", kind="self", num_heads=heads, num_kv_heads=heads,
                          d_model=64, d_k=64 // heads, d_v=64 // heads,
                          params=ParamBreakdown(q=q, k=q, v=q, o=q, bias=0, total=4 * q), projections=(), evidence=())


def _report(blocks: list[AttentionBlock]) -> Report:
    total = sum(b.params.total for b in blocks)
    return Report("1.0", ModelSummary(path="m", format="safetensors", total_params=total, num_nodes=0, opset=None,
                                      producer="", attention_params=total), tuple(blocks), (), ())


def test_group_blocks_folds_same_numbers_in_report_order() -> None:
    blocks = [_block(f"h.{i}.attn", heads=4 if i == 2 else 8) for i in range(6)]
    groups = group_blocks(blocks, lambda b: b.num_heads)
    assert [(g.label, g.count) for g in groups] == [("h.{0–1, 3–5}.attn", 5), ("h.2.attn", 1)]
    assert [g.label for g in group_blocks(blocks, lambda b: b.num_heads, group=False)] == [b.name for b in blocks]
    # names that differ in two numbers fold over the one that leaves the fewest rows
    t5 = [_block(f"encoder.block.{i}.layer.0.attn") for i in range(3)] + [_block("encoder.block.0.layer.1.attn")]
    assert sorted(g.label for g in group_blocks(t5, lambda b: 0)) == ["encoder.block.0.layer.1.attn",
                                                                       "encoder.block.{0–2}.layer.0.attn"]
    # names without one differing number (or with leading zeros) are never folded
    assert fold_names(["a.attn", "b.attn"]) is None and fold_names(["h.01.attn", "h.02.attn"]) is None


def test_common_prefix_keeps_the_word_before_the_number() -> None:
    assert common_prefix(["model.layers.0.self_attn", "model.layers.1.self_attn"]) == "model."
    assert common_prefix(["model.encoder.layers.0.attn", "model.decoder.layers.0.attn"]) == "model."
    assert common_prefix(["encoder.block.0.x", "decoder.block.0.x"]) == ""
    assert common_prefix(["only.one.name"]) == ""


def test_table_rows_fold_and_columns_give_way_by_priority() -> None:
    report = _report([_block(f"model.encoder.layer.{i}.attention.self", total=2_362_368) for i in range(24)])
    wide = render_table(report, color=False, width=160)
    assert "model.encoder.layer.{0–23}.attention.self ×24" in wide and "×N: N blocks" in wide
    # at 100 columns the common prefix goes before any number column does: Q/K/V/O stay visible
    narrow = render_table(report, color=False, width=100)
    assert "\nlayer.{0–23}.attention.self ×24 " in narrow and "590,592" in narrow
    assert 'without their common prefix "model.encoder."' in narrow
    assert max(len(line) for line in narrow.splitlines()) <= 100
    # many distinct rows: the detail columns are hidden, and -v (not JSON) is where they are
    distinct = _report([_block(f"layers.{i}.attn", heads=1 + i % 2, total=4 * (1000 + i)) for i in range(40)])
    text = render_table(distinct, color=False, width=80, group_repeats=True)
    assert "Q/K/V/O/Bias columns hidden at 80 columns; -v lists them per block." in text
    assert "--format json" not in text


def test_markdown_evidence_summary_is_html_escaped() -> None:
    report = _report([_block("enc.a*b<c>.attn")])
    md = render_markdown(report, verbose=True)
    summary = next(line for line in md.splitlines() if line.startswith("<summary>Evidence"))
    assert summary == "<summary>Evidence: <code>enc.a*b&lt;c&gt;.attn</code> (checkpoint)</summary>"


def test_paragraphs_wrap_with_a_hanging_indent() -> None:
    report = _report([_block(f"layers.{i}.attn", heads=1 + i % 2) for i in range(3)])
    text = render_table(report, color=False, width=60)
    para = [line for line in text.splitlines() if line.startswith("The head count")]
    assert para and text.split(para[0] + "\n")[1].startswith("  "), text
    assert not re.search(r"Near misses \(0\)", render_table(report, color=False, verbose=True))


# ------------------------------------------------------------------------------- HTML page


_VOID = frozenset({"meta", "wbr", "br", "link", "img", "hr", "input"})


class _Visible(HTMLParser):
    """What a reader sees before opening any toggle: text outside closed <details> (their
    <summary> lines count), collected per kind of element."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0  # open <details> around the current position
        self.stack: list[str] = []
        self.items: dict[str, list[str]] = {"li": [], "tr": [], "h3": [], "summary": [], "label": []}
        self.current: dict[str, list[str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            return
        css = dict(attrs).get("class") or ""
        if tag == "details":
            self.depth += 1
        key = "label" if tag == "text" and css.startswith("label") else tag
        if key in self.items:
            self.current[key] = []
        self.stack.append(key)

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            return
        key = self.stack.pop()
        if tag == "details":
            self.depth -= 1
        if key in self.current:
            text = " ".join("".join(self.current.pop(key)).split())
            if self.depth == 0 or (key == "summary" and self.depth == 1):
                self.items[key].append(text)

    def handle_data(self, data: str) -> None:
        for parts in self.current.values():
            parts.append(data)


def _visible(page: str) -> dict[str, list[str]]:
    parser = _Visible()
    parser.feed(page)
    return parser.items


def test_llama_html_page_repeats_no_row_flag_or_section(llama: Path) -> None:
    report = audit(llama)
    page = render_html(report)
    seen = _visible(page)
    for kind, texts in seen.items():
        repeated = {t for t in texts if texts.count(t) > 1}
        assert not repeated, (kind, repeated)
    assert len([t for t in seen["li"] if "MHA005" in t]) == 1
    assert sum(t.startswith("layers.{0–31}.self_attn ×32") for t in seen["label"]) == 1  # one bar, its count
    assert sum("model.layers.{0–31}.self_attn ×32" in t for t in seen["tr"]) == 1  # one table row
    assert "1flag, raised 32 times" in page.replace("</b><span>", "")
    # per-layer detail is there, behind a toggle
    assert all(f"model.layers.{i}.self_attn" in page for i in range(LAYERS))
    assert "Every block, one row each (32)" in page


def test_comparison_bars_have_absolute_lengths(llama: Path) -> None:
    small = audit(SAMPLES / "standard_mha.onnx")
    page = render_html([small, audit(llama)])
    chart = page.split("<h2>Comparison</h2>")[1].split("</svg>")[0]
    widths = [float(w) for w in re.findall(r'<rect class="seg rest"[^>]*width="([\d.]+)"', chart)]
    assert len(widths) == 2 and widths[1] > 2 * widths[0]  # 8B against 17k: not alike
    assert "log" in chart and ">1B<" in chart


def test_folder_of_models_starts_with_one_row_per_model(cli: Any) -> None:
    samples = sorted(SAMPLES.glob("*.onnx"))
    out = cli(SAMPLES, columns=100).out
    assert out.startswith(f"Models ({len(samples)})\n")
    table = out.split("\n\n")[0]
    assert all(f"{p.name} " in table for p in samples)
    assert "sample_models/" not in table  # the folder they share is not repeated
    md = cli(SAMPLES, "-f", "markdown").out
    assert md.startswith(f"## Models ({len(samples)})\n") and "| `bert_two_layers.onnx` | ONNX | 33,536 |" in md


# ------------------------------------------------------------------------------- Python API


def test_report_reads_as_text_and_markdown() -> None:
    import mhainspect

    report = mhainspect.inspect(SAMPLES / "bert_two_layers.onnx")
    assert str(report) == report.to_text() and "Attention blocks (2" in str(report)
    assert "\x1b[" not in str(report)
    narrow = report.to_text(width=60)
    assert max(len(line) for line in narrow.splitlines()) <= 60
    assert report.to_markdown().startswith("## `") and "| Block |" in report.to_markdown()
    assert repr(report).startswith("<Report ")  # still one line


def test_inspect_all_is_a_list_that_shows_the_comparison_page() -> None:
    import mhainspect

    reports = mhainspect.inspect_all(SAMPLES)
    assert isinstance(reports, list) and isinstance(reports, mhainspect.Reports) and len(reports) > 2
    page = reports._repr_html_()
    assert "<h2>Comparison</h2>" in page and page.startswith("<style>")
    assert reports.to_text().startswith(f"Models ({len(reports)})")
    assert reports.to_markdown().startswith(f"## Models ({len(reports)})")


def test_calc_results_read_as_text_and_show_in_a_notebook() -> None:
    import mhainspect

    c = mhainspect.calc("pytorch", embed_dim=512, num_heads=8)
    assert len(repr(c)) < 200 and "1,050,624" in repr(c)
    assert "W_Q" in str(c) and "The head count does not change this count" in str(c)
    html_view = c._repr_html_()
    assert html_view is not None and html_view.startswith("<style>") and "<svg" in html_view
    rows = mhainspect.compare(embed_dim=512, num_heads=8)
    assert isinstance(rows, tuple) and rows[0][0] == "pytorch"
    assert str(rows).startswith("Same arguments under each convention")
    compare_view = rows._repr_html_()
    assert compare_view is not None and "keras = t5" in compare_view  # lines that coincide are named together


# ------------------------------------------------------------------------------------- calc


MATLAB = ("calc", "matlab", "NumHeads=4", "NumKeyChannels=784", "InputSize=3136")
VS = ("--vs", "NumHeads=8", "NumKeyChannels=392")


def test_calc_vs_answer_comes_first_in_text(cli: Any) -> None:
    out = cli(*MATLAB, *VS, columns=100).out
    first = out.split("\n\n")[0]
    assert first.startswith("MATLAB selfAttentionLayer, two argument sets:")
    answer = out.index("NumKeyChannels (784 → 392) moves it")
    assert answer < out.index("W_Q ")  # the first set's breakdown follows the answer


def test_calc_writes_files_and_vs_as_html(cli: Any, tmp_path: Path) -> None:
    page = tmp_path / "vs.html"
    run = cli(*MATLAB, *VS, "-o", page)
    assert run.code == 0 and run.out == ""
    assert f"wrote {page} (html from the suffix .html" in run.err
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "NumKeyChannels (784 → 392) moves it" in text
    assert "9,839,984" in text and "4,921,560" in text
    assert cli(*MATLAB, *VS, "-f", "html").out.startswith("<!DOCTYPE html>")
    doc = tmp_path / "calc.json"
    assert cli(*MATLAB, "-o", doc).code == 0 and json.loads(doc.read_text())["params"]["total"] == 9_839_984
    plain = tmp_path / "calc.out"
    assert cli(*MATLAB, "-o", plain).code == 0 and "W_Q" in plain.read_text()
    assert cli(*MATLAB, "-o", tmp_path / "missing" / "x.txt").code == 2


def test_huge_numbers_keep_their_separators() -> None:
    from mhainspect.ir.units import format_bytes

    assert format_bytes(107_374_182_400_000_000) == "97,656.2 TiB"
    assert format_bytes(3 * 2**40) == "3 TiB"


def test_batch_is_grouped_in_the_size_line(cli: Any, llama: Path) -> None:
    out = cli(llama, "--context", "8192", "--batch", "100000000", columns=200).out
    assert "at context 8,192 × batch 100,000,000" in out and "97,656.2 TiB" in out
