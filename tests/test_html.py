"""The HTML report (issue 18) without a browser: structure, numbers, CSP, size fields, calc pages.

tests/test_html_browser.py loads the same pages in headless Chromium.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import re
from pathlib import Path

import pytest

from mhainspect import conventions
from mhainspect.analysis.charts import kv_bytes_at, with_charts
from mhainspect.analysis.size import self_cache_bytes
from mhainspect.analysis.whatif import what_if
from mhainspect.cli.app import main
from mhainspect.ir.units import format_bytes, group
from mhainspect.pipeline import audit
from mhainspect.render import links
from mhainspect.render.calc_html import render_calc_html, render_compare_html
from mhainspect.render.html import render_html, render_html_body
from mhainspect.render.safe import html
from mhainspect.render.size_lines import IF_DECODED_LABEL, size_lines
from mhainspect.results import CacheStatus, KVCache, Report

SAMPLES = Path(__file__).resolve().parents[1] / "sample_models"


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    return {p.stem: audit(str(p)) for p in sorted(SAMPLES.glob("*.onnx"))}


def _csp(page: str) -> str:
    m = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', page)
    assert m, "CSP meta tag"
    return m.group(1)


def test_page_is_self_contained_and_csp_allows_only_its_stylesheet(reports: dict[str, Report]) -> None:
    page = render_html(reports["bert_two_layers"])
    csp = _csp(page)
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["default-src"] == "'none'" and directives["script-src"] == "'none'"
    (style,) = re.findall(r"<style>(.*?)</style>", page, re.S)
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    assert directives["style-src"] == f"'sha256-{digest}'"
    assert "<script" not in page and " style=" not in page  # no inline script, no style attributes
    assert not re.search(r"\b(src|srcset|action)=", page) and "url(" not in page and "@import" not in page
    base = links.docs_base()  # links only to the project's published docs, and none when it names none
    assert [h for h in re.findall(r'href="([^"]+)"', page) if base is None or not h.startswith(base)] == []
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") >= 4


def test_every_block_and_its_numbers(reports: dict[str, Report]) -> None:
    r = reports["bert_two_layers"]
    page = render_html(r)
    for b in r.blocks:
        assert f"<code>{html(b.name)}</code>" in page  # the evidence summary
        assert f"<code>{html(b.name).replace('.', '.<wbr>')}</code>" in page  # the table row, wrapping at dots
        assert f"<b>{group(b.params.total)}</b>" in page
        for ev in b.evidence:
            assert html(ev.detail) in page
    assert "<b>MHA006</b>" in page  # linked to flags.md#mha006 where the project names its docs (test_output_identity)
    assert "The layout changes between blocks (MHA006, info)" in page
    assert 'class="model tone-info"' in page  # an informational MHA006 is not drawn in alarm red
    assert page.count('<rect class="seg') >= 2 * 5  # Q/K/V/O/bias per block


def test_whatif_chart_uses_whatif_numbers(reports: dict[str, Report]) -> None:
    """One source of truth: the chart's points are whatif.what_if's counts, stored in the Report."""
    for name in ("keras_per_head", "standard_mha", "gqa_llama"):
        r = reports[name]
        b = r.blocks[0]
        assert b.what_if_curve and all(w == what_if(b, w.num_heads) for w in b.what_if_curve)
        body = render_html_body(r)
        h = b.num_heads
        assert h is not None
        low, high = what_if(b, 1), what_if(b, 2 * h)  # the chart's first and last points
        assert low is not None and high is not None
        assert html(f"With h·d_k fixed, 1 heads hold {group(low.total_width_fixed)} and {2 * h} heads "
                    f"{group(high.total_width_fixed)} parameters; with d_k fixed at {b.d_k}, 1 heads hold "
                    f"{group(low.head_dim_fixed)} and {2 * h} heads {group(high.head_dim_fixed)}") in body
        own = what_if(b, h)
        assert own is not None
        assert html(f"this block: {h} heads, {group(own.head_dim_fixed)}") in body
    # Keras: widths follow heads, so the d_k-fixed line rises; PyTorch: the width-fixed one is flat.
    keras = render_html_body(reports["keras_per_head"])
    assert "with d_k fixed at 16, 1 heads hold 2," in keras


def test_kv_chart_draws_the_other_mixers_state_apart(reports: dict[str, Report]) -> None:
    """A hybrid's linear-attention / state-space / convolution layers keep a fixed state per sequence:
    analysis puts it beside the KV points (times the batch, constant over the context), and the chart
    draws it as its own series with a legend; a model without such layers draws no such series."""
    r = reports["gqa_llama"]
    b = dataclasses.replace(r.blocks[0], kv_cache_bytes_per_token=128)
    kv = KVCache(bytes_per_token=128, dtype="float32", context=4096, batch=2, total_bytes=2 * 128 * 4096,
                 state_bytes_per_sequence=3_000_000)
    sized = with_charts(dataclasses.replace(r, model=dataclasses.replace(r.model, kv_cache=kv), blocks=(b,)))
    stored = sized.model.kv_cache
    assert stored is not None and stored.state_by_context
    assert [c for c, _ in stored.state_by_context] == [c for c, _ in stored.by_context]
    assert {v for _, v in stored.state_by_context} == {2 * 3_000_000}  # batch 2, whatever the context
    assert dict(stored.by_context)[4096] == 2 * 128 * 4096
    page = render_html_body(sized)
    state_path = re.search(r'<path class="line state" d="([^"]+)"', page)
    assert state_path is not None
    ys = {float(y) for y in re.findall(r"[ML][\d.]+,([\d.]+)", state_path.group(1))}
    assert len(ys) == 1  # a flat line
    assert '<i class="sw state"></i>' in page
    assert html(f"the other mixers' state: {format_bytes(6_000_000)} per sequence, batch 2") in page
    # Only a state (a pure state-space model: no K/V at all) is still drawn.
    only = dataclasses.replace(kv, bytes_per_token=None, total_bytes=None, status=CacheStatus.NONE)
    alone = with_charts(dataclasses.replace(r, model=dataclasses.replace(r.model, kv_cache=only), blocks=()))
    assert alone.model.kv_cache is not None and not alone.model.kv_cache.by_context
    assert '<path class="line state"' in render_html_body(alone) and 'class="line kv"' not in render_html_body(alone)
    # No mixers: no state series, no legend.
    plain = with_charts(dataclasses.replace(r, model=dataclasses.replace(
        r.model, kv_cache=dataclasses.replace(kv, state_bytes_per_sequence=None)), blocks=(b,)))
    assert plain.model.kv_cache is not None and not plain.model.kv_cache.state_by_context
    assert "line state" not in render_html_body(plain) and "sw state" not in render_html_body(plain)


def test_kv_cache_and_sizes_render_when_known(reports: dict[str, Report]) -> None:
    r = reports["gqa_llama"]
    assert "KV cache against context" not in render_html(r)  # unknown: not drawn
    b = dataclasses.replace(r.blocks[0], weight_bytes=40_960, kv_cache_bytes_per_token=128)
    kv = KVCache(bytes_per_token=128, dtype="float32", context=4096, total_bytes=128 * 4096)
    model = dataclasses.replace(r.model, weight_bytes=41_216, weight_bytes_by_dtype=(("float32", 41_216),),
                                weight_bytes_overhead=256, kv_cache=kv)
    sized = with_charts(dataclasses.replace(r, model=model, blocks=(b,)))  # the chart's points, as analysis stores them
    stored = sized.model.kv_cache
    assert stored is not None and dict(stored.by_context)[4096] == 128 * 4096
    page = render_html(sized)
    assert "KV cache against context length" in page and "KV cache per token" in page
    assert "40.2 KiB" in page and "float32 40.2 KiB" in page and "overhead" in page
    # The overhead is named as the table and markdown name it (one label, render.size_lines).
    label = next(line for line in size_lines(sized) if "overhead" in line).strip().split(": 256")[0]
    assert html(label) in page
    assert "4,096 tokens: 512 KiB" in page  # the model's own point, marked
    assert "from a causal mask only" not in page
    # A figure only a causal mask gives says so, as the table and markdown do (was: shown as known).
    guessed = dataclasses.replace(sized, model=dataclasses.replace(sized.model, kv_cache=dataclasses.replace(
        stored, status=CacheStatus.IF_DECODED)))
    assert html(IF_DECODED_LABEL) in render_html(guessed)
    assert any(IF_DECODED_LABEL in line for line in size_lines(guessed))
    assert kv_bytes_at(sized, 8192) == 128 * 8192
    windowed = dataclasses.replace(sized, blocks=(dataclasses.replace(b, sliding_window=1024),))
    # Capped at the window as mhainspect.analysis.size counts it (a sliding layer holds window - 1 past tokens),
    # so the chart and KVCache.total_bytes never disagree.
    assert kv_bytes_at(windowed, 8192) == 128 * 1023
    assert kv_bytes_at(windowed, 8192) == self_cache_bytes(windowed.blocks, 8192)


def test_several_models_one_page(reports: dict[str, Report]) -> None:
    items = list(reports.values())
    page = render_html(items)
    assert page.count('<section class="model') == len(items)
    assert "<h2>Comparison</h2>" in page
    for r in items:
        assert html(r.model.path) in page
    ids = re.findall(r'id="([^"]+)"', page)
    assert len(ids) == len(set(ids)), "ids unique across the page"


def test_no_blocks_page(reports: dict[str, Report]) -> None:
    page = render_html(reports["no_attention"])
    assert "No attention blocks found." in page and "<svg" not in page


def test_format_bytes() -> None:
    assert [format_bytes(n) for n in (0, 1023, 1024, 1536, 3 * 2**30)] == ["0 B", "1,023 B", "1 KiB", "1.5 KiB",
                                                                          "3 GiB"]


def test_repr_html_is_the_body_with_its_style(reports: dict[str, Report]) -> None:
    r = reports["standard_mha"]
    out = r._repr_html_()
    assert out.startswith("<style>") and "<html" not in out and "<meta" not in out
    assert out.count("<svg") == render_html_body(r).count("<svg") and "m-t-1" not in out


def test_calc_pages_draw_the_formula_and_the_curve() -> None:
    c = conventions.calculate("keras", {"num_heads": "8", "key_dim": "64", "query_dim": "512"})
    page = render_calc_html(c, (32,))
    assert html("W_Q = query_dim × num_heads × key_dim = 512 × 8 × 64 = 262,144") in page
    assert "the count changes with the head count" in page
    at32 = conventions.calculate("keras", {"num_heads": "32", "key_dim": "64", "query_dim": "512"})
    assert f"32 heads {group(at32.total)}" in page  # the curve's point is the convention's own count
    compare = render_compare_html(conventions.compare({"embed_dim": "512", "num_heads": "8"}))
    assert "pytorch: the head count does not change the count" in compare
    assert "keras: the count changes with the head count" in compare
    assert "<script" not in page + compare and _csp(page) == _csp(compare)


def test_cli_html_to_file_and_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.html"
    with pytest.raises(SystemExit) as exit_:
        main([str(SAMPLES / "gqa_llama.onnx"), "--format", "html", "-o", str(out)])
    assert exit_.value.code == 0
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    with pytest.raises(SystemExit) as exit_:
        main(["calc", "pytorch", "embed_dim=512", "num_heads=8", "--format", "html"])
    assert exit_.value.code == 0
    assert "torch.nn.MultiheadAttention(embed_dim=512" in capsys.readouterr().out


def test_browser_tests_skip_locally_but_fail_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    import chromium

    monkeypatch.setattr(chromium, "chromium_path", lambda: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        chromium.require_chromium()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI: chromium not installed"):
        chromium.require_chromium()
