"""A folder: its files (listed once) and a blob for each.

A Hub revision, an object-store folder and the folder of a URL are all a ``Tree``: relative POSIX
paths with their sizes, and ``blob(path)`` to read one. A URL's folder lists only the file named
(``complete`` is False): a sibling (config.json beside a checkpoint, the parts of a split GGUF
model) is tried by reading it. Which files are models is for the front ends to say
(``frontends.kinds``): a tree knows names and sizes only.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # a listing's helpers serve local folder scans too, which read no byte range
    from mhainspect.sources.blob import Blob


class Tree(Protocol):
    @property
    def complete(self) -> bool:
        """Whether files() lists every file (False: a sibling may exist unlisted)."""

    def files(self) -> Mapping[str, int | None]:
        """Every file: relative POSIX path -> size (None: unknown)."""

    def name(self, path: str) -> str:
        """How reports and messages name a file or folder of the tree."""

    def blob(self, path: str) -> Blob:
        """The file at ``path``, for ranged reads."""


def children(files: Mapping[str, int | None], folder: str) -> list[str]:
    """The names of the files directly in ``folder`` ("" = the root)."""
    prefix = folder + "/" if folder else ""
    return [p[len(prefix):] for p in files if p.startswith(prefix) and "/" not in p[len(prefix):]]


def is_folder(files: Mapping[str, int | None], path: str) -> bool:
    prefix = path + "/" if path else ""
    return any(p.startswith(prefix) for p in files)


def subfolders(files: Mapping[str, int | None], folder: str) -> list[str]:
    prefix = folder + "/" if folder else ""
    found = {p[len(prefix):].split("/", 1)[0] for p in files if p.startswith(prefix) and "/" in p[len(prefix):]}
    return sorted(found)


def beside(path: str, name: str) -> str:
    """The path of ``name`` in the folder of ``path``."""
    folder = posixpath.dirname(path)
    return f"{folder}/{name}" if folder else name
