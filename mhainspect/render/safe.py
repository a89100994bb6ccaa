"""The one place that makes a string from a model file inert in each output format.

Node, initializer and producer names, doc strings and metadata are written by whoever made the
model. Every renderer passes them through the function of its format here, so a name can never
become terminal escapes, markup, a workflow command, a link or a request:

- terminal: control characters (ESC, CR, LF, ...) shown as ``\\xNN`` (``printable``);
- HTML: text, quoted attributes and inline SVG (``html``); a model string never goes into a
  script, a style, a URL or an element id;
- Markdown: plain text with every ASCII punctuation character backslash-escaped (``md_text``) or a
  code span (``md_code``), one line, pipes escaped inside table cells;
- GitHub workflow commands: message and property values encoded as the runner decodes them
  (``github_message``, ``github_property``), after ``printable``, so the annotation is one line;
- SARIF message text: placeholder braces doubled and embedded-link brackets escaped (``sarif_text``);
- JSON: the encoder escapes every control character; names stay exact data (nothing here).
"""

from __future__ import annotations

import dataclasses
import re
from enum import Enum
from typing import TypeVar

__all__ = [
    "github_message",
    "github_property",
    "html",
    "md_code",
    "md_text",
    "printable",
    "printable_fields",
    "sarif_text",
]

# C0, DEL, C1 and the Unicode line/paragraph separators: anything that moves the cursor, starts an
# escape sequence or ends a line in some reader.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with control characters escaped (\\xNN, \\uNNNN): it prints on one line and cannot
    drive the terminal (no ESC sequences reach it)."""
    return _CONTROL.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


T = TypeVar("T")


def printable_fields(obj: T) -> T:
    """A copy of a frozen dataclass tree (a Report) with every string made ``printable``.

    Text renderers call it once at their entry, so no name or message from the file reaches the
    terminal raw; JSON needs no such step (the encoder escapes control characters itself).
    """
    if isinstance(obj, Enum):
        return obj  # a closed vocabulary's member, never a file's text: kept, so `is` comparisons hold
    if isinstance(obj, str):
        return printable(obj)  # type: ignore[return-value]
    if isinstance(obj, tuple):
        return tuple(printable_fields(x) for x in obj)  # type: ignore[return-value]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: printable_fields(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        return dataclasses.replace(obj, **changes)
    return obj


# ----------------------------------------------------------------------------------------- HTML


def html(text: str) -> str:
    """Text for an HTML or SVG text node or a double/single-quoted attribute value.

    ``& < > " '`` become character references (all valid in XML too, so inline SVG is covered)
    and control characters become visible ``\\xNN``: the HTML parser never sees a tag, an end of
    the attribute or a raw control character from the model.
    """
    # html.escape(text, quote=True), written out: importing html (its 2,000-entry entity table)
    # costs every run ~1 ms, and only the HTML report needs these five replacements.
    return (printable(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#x27;"))


# ------------------------------------------------------------------------------------- Markdown

# The ASCII punctuation CommonMark and GFM give a meaning to inline (emphasis, code, links, images,
# autolinks and e-mail links, entities, HTML, tables, strikethrough, list and heading markers); the
# rest (, ; = ? ' " % $ /) stays readable in the Markdown source.
_MD_PUNCTUATION = re.compile(r"([\\`*_{}\[\]<>()#+\-.!|~&:@^])")


def _one_line(text: str) -> str:
    return " ".join(printable(text).split())


def md_text(text: str) -> str:
    """Inline Markdown text that renders as exactly ``text``: one line, and every meaningful ASCII
    punctuation character backslash-escaped (CommonMark: a backslash before punctuation is always
    literal), so no emphasis, link, image, autolink, entity, HTML tag or table pipe starts from it."""
    return _MD_PUNCTUATION.sub(r"\\\1", _one_line(text))


def md_code(text: str, *, table_cell: bool = False) -> str:
    """An inline code span holding ``text`` literally (HTML tags, entities and emphasis are not
    parsed inside it); the fence is longer than any backtick run in the text. In a GFM table cell
    the pipes are escaped, because the table is split at pipes before code spans are parsed."""
    one_line = _one_line(text)
    if table_cell:
        one_line = one_line.replace("|", "\\|")
    if not one_line:
        return "(unnamed)"
    longest = max((len(run) for run in re.findall(r"`+", one_line)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if one_line.startswith("`") or one_line.endswith("`") else ""
    return f"{fence}{pad}{one_line}{pad}{fence}"


# ------------------------------------------------------------------------- GitHub workflow commands


def github_message(text: str) -> str:
    """The message of a workflow command (after the second ``::``): the runner decodes ``%25``,
    ``%0D``, ``%0A``; control characters are made visible first, so the annotation stays one line
    and a name can never begin a command of its own (``::add-mask::``, ``::stop-commands::``)."""
    return printable(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_property(text: str) -> str:
    """A property value (``file=``, ``title=``): as a message, and ``:`` and ``,`` also encoded,
    so a value cannot end the property list or add a property."""
    return github_message(text).replace(":", "%3A").replace(",", "%2C")


# ---------------------------------------------------------------------------------------- SARIF


def sarif_text(text: str) -> str:
    """A plain-text SARIF ``message.text``: ``{`` and ``}`` doubled (SARIF 2.1.0 §3.11.5, they
    would be placeholders) and ``\\``, ``[`` and ``]`` backslash-escaped (§3.11.6, so no name forms
    an embedded link to a URL). JSON encoding happens later; names in locations stay exact data."""
    escaped = re.sub(r"([\\\[\]])", r"\\\1", text)
    return escaped.replace("{", "{{").replace("}", "}}")
