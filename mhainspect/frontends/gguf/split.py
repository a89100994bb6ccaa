"""How a GGUF model split into parts is named (llama.cpp's gguf-split: ``stem-00001-of-00003.gguf``).

Its own module so that listing a folder's models does not import the GGUF parser.
"""

from __future__ import annotations

import re

GGUF_SUFFIX = ".gguf"
_SPLIT_NAME = r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$"


def split_name(name: str) -> re.Match[str] | None:
    """The parts of a split file's ``name`` (groups ``stem``, ``no``, ``count``), or None.

    Compiled on first use (re's cache): most runs never see a .gguf name."""
    return re.match(_SPLIT_NAME, name, re.IGNORECASE)
