"""How a GGUF model split into parts is named (llama.cpp's gguf-split: ``stem-00001-of-00003.gguf``).

Its own module so that listing a folder's models does not import the GGUF parser.
"""

from __future__ import annotations

import re

GGUF_SUFFIX = ".gguf"
SPLIT_NAME = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
