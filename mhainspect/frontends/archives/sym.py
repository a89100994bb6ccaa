"""A symbolic dim as torch.export serializes it -> the text a live trace gives it.

torch.export writes a dynamic dim as sympy's ``srepr`` ("Mul(Integer(4), Symbol('s77',
positive=True, integer=True))"); a live trace names it ``str(expr)`` ("4*s77"). This parses the
srepr form (never with eval or sympy: the text comes from the file) into that text, so a graph read
from a .pt2 archive names its dims as the traced module's graph does. Anything else (an older
archive's plain "s0", an unknown constructor) stays as written, bounded in length: a dim symbol is
only ever compared with others, never computed with here.
"""

from __future__ import annotations

import functools
import re

_MAX_TEXT = 512  # longer expressions are no dims a tracer writes: kept as one opaque symbol
_MAX_DEPTH = 32
_TOKEN = re.compile(r"\s*(?:(?P<name>[A-Za-z_][A-Za-z_0-9]*)|(?P<int>-?\d+)|(?P<str>'[^']*')|(?P<punct>[(),=]))")


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                if text[pos:].strip():
                    raise ValueError(text[pos:pos + 20])
                break
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.at = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.at] if self.at < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok[0] == "end" or (value is not None and tok[1] != value):
            raise ValueError(f"expected {value or 'a token'}")
        self.at += 1
        return tok

    def expr(self, depth: int) -> str:
        if depth > _MAX_DEPTH:
            raise ValueError("nested too deeply")
        kind, value = self.take()
        if kind in ("int", "str"):
            return value.strip("'")
        if kind != "name":
            raise ValueError(value)
        if self.peek()[1] != "(":
            return value
        self.take("(")
        args: list[str] = []
        while self.peek()[1] != ")":
            if self.peek()[0] == "name" and self.at + 1 < len(self.tokens) and self.tokens[self.at + 1][1] == "=":
                self.take()
                self.take("=")
                self.expr(depth + 1)  # Symbol's assumptions (positive=True): not part of the name
            else:
                args.append(self.expr(depth + 1))
            if self.peek()[1] == ",":
                self.take(",")
        self.take(")")
        return _text(value, args)


def _text(func: str, args: list[str]) -> str:
    if func in ("Symbol", "Integer", "Float") and len(args) == 1:
        return args[0]
    if func == "Rational" and len(args) == 2:
        return f"{args[0]}/{args[1]}"
    if func == "Mul" and args:
        return "*".join(f"({a})" if " " in a else a for a in args)
    if func == "Add" and args:
        return " + ".join(args).replace("+ -", "- ")
    if func == "Pow" and len(args) == 2:
        return f"{args[0]}**{args[1]}"
    return f"{func}({', '.join(args)})"


@functools.lru_cache(maxsize=4096)  # a graph names the same few dims thousands of times
def dim_text(expr: str) -> str:
    """The text a live trace gives the dim ``expr`` (sympy srepr), or ``expr`` itself when it is not
    in that form (cut to a bounded length)."""
    if len(expr) > _MAX_TEXT:
        return expr[:_MAX_TEXT]
    try:
        parser = _Parser(expr)
        out = parser.expr(0)
        if parser.peek()[0] != "end":
            return expr
        return out
    except (ValueError, IndexError):
        return expr
