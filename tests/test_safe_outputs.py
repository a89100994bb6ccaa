"""Issue 21: strings from a model are inert in every output format.

One hostile model (tests/hostile_names.py) is rendered in every format, and each output is read
the way its consumer reads it: Markdown by a CommonMark parser (GFM tables on), GitHub workflow
commands line by line, SARIF and JSON by a JSON parser and the SARIF schema, HTML by an HTML
parser (and in Chromium: tests/test_html_browser.py), the terminal table for escape sequences.
"""

from __future__ import annotations

import html as html_lib
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hostile_names import FILE_NAME, HOSTILE, write_hostile_model
from jsonschema import Draft4Validator
from markdown_it import MarkdownIt

from mhainspect.cli.app import main
from mhainspect.pipeline import audit
from mhainspect.render import safe
from mhainspect.render.github import render_github
from mhainspect.render.html import render_html
from mhainspect.render.json_render import report_to_json
from mhainspect.render.links import docs_base
from mhainspect.render.markdown import render_markdown
from mhainspect.render.sarif import sarif_dict
from mhainspect.render.table import render_table
from mhainspect.results import Report

SARIF_SCHEMA = Path(__file__).resolve().parent / "data" / "sarif-schema-2.1.0.json"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Report:
    path = write_hostile_model(tmp_path_factory.mktemp("hostile"))
    report = audit(str(path))
    name = report.blocks[0].name if report.blocks else ""
    # The scope keeps the text ('/' becomes the scope separator '.'): markup, commands and escapes.
    assert all(part in name for part in ("<script>console.error('pwned')", "<img src=x onerror=console.error(1)>",
                                         "`a|b``|\r\n::error::pwned\n::add-mask::", "\x1b[31m", "L" * 3000))
    assert report.flags and report.flags[0].block == report.blocks[0].name, "and a flag that names the block"
    assert report.model.producer.startswith(HOSTILE)  # producer name + version
    return report


def _one_line(text: str) -> str:
    return " ".join(safe.printable(text).split())


# ------------------------------------------------------------------------------- terminal


def test_terminal_has_no_escape_but_its_own(hostile: Report) -> None:
    plain = render_table(hostile, color=False, verbose=True)
    assert "\x1b" not in plain and "\r" not in plain and "\u2028" not in plain
    # shown, escaped (the terminal text wraps at word boundaries: compare without the whitespace)
    assert "".join(safe.printable(hostile.blocks[0].name).split()) in "".join(plain.split())
    coloured = render_table(hostile, color=True, verbose=True)
    assert set(re.findall(r"\x1b.", coloured)) <= {"\x1b["}  # no OSC (\x1b]) or other sequence
    assert all(re.fullmatch(r"\x1b\[[0-9;]*m", m) for m in re.findall(r"\x1b\[[^a-zA-Z]*[a-zA-Z]", coloured))


# ------------------------------------------------------------------------------- markdown


def _walk(tokens: list[Any]) -> list[Any]:
    out = []
    for t in tokens:
        out.append(t)
        out.extend(_walk(t.children or []))
    return out


def test_markdown_names_stay_text(hostile: Report) -> None:
    md = render_markdown(hostile)
    parser = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    tokens = _walk(parser.parse(md))
    types = {t.type for t in tokens}
    # The report's own markup is <details>/<summary> (near misses) only; this model has none.
    assert not {"html_inline", "html_block", "link_open", "image", "fence", "code_block"} & types, types
    name = _one_line(hostile.blocks[0].name)
    code = [t.content for t in tokens if t.type == "code_inline"]
    assert name in code  # the flag line: the name is exactly one code span
    assert name.replace("|", "\\|") not in code  # not escaped outside a table
    cells = [t.content for t in tokens if t.type == "code_inline"]
    assert cells.count(name) >= 2, "the table cell holds the whole name too (pipes did not split it)"
    rows = [t for t in tokens if t.type == "tr_open"]
    assert len(rows) == 1 + len(hostile.blocks)
    text = "".join(t.content for t in tokens if t.type == "text")
    assert _one_line(HOSTILE) in text  # the producer, as text
    assert "\x1b" not in md and "\r" not in md


def test_markdown_table_has_every_column(hostile: Report) -> None:
    html_out = MarkdownIt("commonmark").enable("table").render(render_markdown(hostile))
    body = html_out.split("<tbody>")[1].split("</tbody>")[0]
    for row in re.findall(r"<tr>(.*?)</tr>", body, re.S):
        assert row.count("<td") == 13


# ------------------------------------------------------------------------------- GitHub


_LINE = re.compile(r"::(?P<cmd>warning|notice|error) file=(?P<file>[^,:\r\n]*),title=(?P<title>[^,:\r\n]*)"
                   r"::(?P<msg>[^\r\n]*)")


def _decode(value: str) -> str:
    return (value.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",")
            .replace("%25", "%"))


def test_github_one_command_per_annotation(hostile: Report) -> None:
    text = render_github([hostile])
    assert "\r" not in text and "\x1b" not in text and "\u2028" not in text
    lines = text.split("\n")
    assert lines[-1] == ""
    lines = lines[:-1]
    assert len(lines) == len(hostile.flags)
    for line, flag in zip(lines, hostile.flags):
        m = _LINE.fullmatch(line)
        assert m, line[:200]
        assert _decode(m["file"]) == safe.printable(hostile.model.path)
        assert m["title"] == flag.code
        assert _decode(m["msg"]).startswith(safe.printable(f"{flag.block}: "))
        assert "::" not in m["file"] + m["title"]


def test_github_via_cli_reads_one_line_per_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    write_hostile_model(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.mhainspect]\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main([FILE_NAME, "--format", "github"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    commands = [line for line in out.splitlines() if line.startswith("::")]
    assert commands == out.splitlines() and len(commands) == 1
    assert _LINE.fullmatch(commands[0])


# ------------------------------------------------------------------------------- SARIF / JSON


def _unescaped(text: str, chars: str) -> list[str]:
    """Characters of ``chars`` in ``text`` not preceded by a backslash escape."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] in chars:
            out.append(text[i])
        i += 1
    return out


def test_sarif_is_valid_and_names_are_data(hostile: Report) -> None:
    text = json.dumps(sarif_dict([hostile]), ensure_ascii=False)
    doc = json.loads(text)
    validator = Draft4Validator(json.loads(SARIF_SCHEMA.read_text(encoding="utf-8")))
    assert not list(validator.iter_errors(doc))
    (result,) = doc["runs"][0]["results"]
    assert result["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == hostile.blocks[0].name
    message = result["message"]["text"]
    assert not _unescaped(message, "[]"), "no embedded link can form"
    assert "{" not in message.replace("{{", "") and "}" not in message.replace("}}", "")


def test_json_keeps_every_byte(hostile: Report) -> None:
    doc = json.loads(report_to_json(hostile))
    assert doc["blocks"][0]["name"] == hostile.blocks[0].name
    assert doc["model"]["producer"] == hostile.model.producer
    assert doc["model"]["path"] == hostile.model.path


# ------------------------------------------------------------------------------- HTML


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


_ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "div", "section", "h1", "h2", "h3", "p", "b",
                 "i", "span", "code", "ul", "li", "a", "table", "tr", "th", "td", "details", "summary", "figure",
                 "figcaption", "footer", "wbr", "svg", "desc", "g", "rect", "line", "path", "circle", "text"}


def test_html_names_are_text(hostile: Report) -> None:
    page = render_html(hostile)
    parser = _Collect()
    parser.feed(page)
    tags = {t for t, _ in parser.tags}
    assert tags <= _ALLOWED_TAGS, tags - _ALLOWED_TAGS
    for tag, attrs in parser.tags:
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name)
            assert name not in ("src", "srcset", "style", "background", "action", "formaction")
            if name == "href":  # only to the project's own docs, when it names where they are
                base = docs_base()
                assert value is not None and base is not None and value.startswith(base)
    text = "".join(parser.text)
    assert "<script>console.error('pwned')" in text and "<img src=x onerror=console.error(1)>" in text
    assert "\x1b" not in page and "\r" not in page and "\u2028" not in page
    # Escaped for its context: a raw quote could end an attribute, a raw < start a tag.
    assert "<script" not in page and "<img" not in page
    assert html_lib.escape("<img src=x onerror=console.error(3)>") in page  # the file name, as text


def test_safe_functions_directly() -> None:
    assert safe.md_code("a`b|c", table_cell=True) == "``a`b\\|c``"
    assert safe.md_code("`x`") == "`` `x` ``"
    assert safe.md_text("<b>*x*</b>") == "\\<b\\>\\*x\\*\\<\\/b\\>".replace("\\/", "/")
    assert safe.github_message("50%\r\n::x") == "50%25\\x0d\\x0a::x"
    assert safe.github_property("a:b,c") == "a%3Ab%2Cc"
    assert safe.html("<a href='x'>&\x1b") == "&lt;a href=&#x27;x&#x27;&gt;&amp;\\x1b"
    assert safe.sarif_text("a[b](c) {0} \\") == "a\\[b\\](c) {{0}} \\\\"


@pytest.mark.parametrize("text", [HOSTILE, "a&amp;<b>\"c\"'d'&", "&lt;", "", "plain"])
def test_html_escape_is_the_stdlib_one(text: str) -> None:
    # safe.html writes html.escape out (importing html costs every run its entity table).
    assert safe.html(text) == html_lib.escape(safe.printable(text), quote=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
