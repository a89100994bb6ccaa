"""A remote folder: its files (listed once) and a blob for each; which models it holds.

A Hub revision, an object-store folder and the folder of a URL are all a ``Tree``: relative POSIX
paths with their sizes, and ``blob(path)`` to read one. A URL's folder lists only the file named
(``complete`` is False): a sibling (config.json beside a checkpoint, the parts of a split GGUF
model) is tried by reading it. Which files are models and which folders are one model follow
the rules local folders follow (``kinds.file_kind``, ``kinds.model_folder_names``,
``folders.models_in``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Protocol
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from mhainspect.errors import InputError
from mhainspect.frontends.kinds import checkpoint_names, models_in
from mhainspect.frontends.remote.blob import Blob
from mhainspect.frontends.remote.http import HttpBlob
from mhainspect.frontends.remote.locate import UrlRef


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


class UrlTree:
    """The folder of one URL: the file itself, and siblings by their URLs (tried, never listed)."""

    complete = False

    def __init__(self, ref: UrlRef) -> None:
        self.ref = ref
        parts = urlsplit(ref.url)
        self.basename = unquote(parts.path.rsplit("/", 1)[-1])
        if not self.basename:
            raise InputError(f"{ref.text}: a URL to a folder; name a model file (folders are listed on the Hub "
                             "and in object stores only)")
        folder = parts.path.rsplit("/", 1)[0] + "/"
        self._folder = urlunsplit((parts.scheme, parts.netloc, folder, "", ""))

    def files(self) -> Mapping[str, int | None]:
        return {self.basename: None}

    def name(self, path: str) -> str:
        return self.ref.url if path == self.basename else self._folder + quote(path)

    def blob(self, path: str) -> Blob:
        return HttpBlob(self.name(path), name=self.name(path), basename=path.rsplit("/", 1)[-1])


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


def models_below(files: Mapping[str, int | None], folder: str) -> list[str]:
    """Every model under ``folder`` of a listed tree, as local folders.models_below finds them: model
    files, and Hugging Face folders as one model each (not looked into); sorted as paths sort."""
    found: list[str] = []
    pending = [folder]
    while pending:
        here = pending.pop()
        for d in subfolders(files, here):
            sub = f"{here}/{d}" if here else d
            names = children(files, sub)
            if "config.json" in names and checkpoint_names(names):
                found.append(sub)
            else:
                pending.append(sub)
        found.extend(f"{here}/{n}" if here else n for n in models_in(children(files, here)))
    return sorted(found, key=lambda p: tuple(p.split("/")))
