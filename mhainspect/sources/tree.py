"""A folder: its files (listed once) and a blob for each.

A local folder, a Hub revision, an object-store folder and the folder of a URL are all a ``Tree``:
relative POSIX paths with their sizes, ``listdir(folder)`` for one level of it, and ``blob(path)``
to read one. A URL's folder lists only the file named
(``complete`` is False): a sibling (config.json beside a checkpoint, the parts of a split GGUF
model) is tried by reading it. Which files are models is for the front ends to say
(``frontends.kinds``): a tree knows names and sizes only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mhainspect.errors import ErrorKind, InputError

if TYPE_CHECKING:  # a listing's helpers serve local folder scans too, which read no byte range
    from mhainspect.sources.blob import Blob


class Tree(Protocol):
    @property
    def complete(self) -> bool:
        """Whether files() lists every file (False: a sibling may exist unlisted)."""

    def files(self) -> Mapping[str, int | None]:
        """Every file: relative POSIX path -> size (None: unknown). ``path in files()`` is the test
        of one file (a local tree answers it from the file system, without listing)."""

    def listdir(self, folder: str) -> Entries:
        """The names of the files and of the subfolders directly in ``folder`` ("" = the root)."""

    def name(self, path: str) -> str:
        """How reports and messages name a file or folder of the tree."""

    def blob(self, path: str) -> Blob:
        """The file at ``path``, for ranged reads."""


MAX_LISTED_FILES = 10_000  # files one listing may hold (the largest model repos hold a few thousand)
def name_problem(path: str) -> str | None:
    """Why a listed name cannot be a file of the tree (it would leave it, or name nothing), or None:
    an absolute path, an empty, '.' or '..' segment, a backslash, or a character that does not print
    (control characters, C1 and bidirectional controls: a name goes into messages on a terminal)."""
    if not path or path.startswith("/"):
        return "an absolute or empty path"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "an empty, '.' or '..' segment"
    if "\\" in path or not path.isprintable():
        return "a backslash or a character that does not print"
    return None


def listed_files(entries: Iterable[tuple[str, int | None]], where: str) -> dict[str, int | None]:
    """A listing's files: names that cannot be a file of the tree are left out (never used as a
    path), and a listing longer than MAX_LISTED_FILES is refused."""
    out: dict[str, int | None] = {}
    for path, size in entries:
        if name_problem(path) is not None:
            continue
        out[path] = size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None
        if len(out) > MAX_LISTED_FILES:
            raise InputError(f"{where}: the listing holds more than {MAX_LISTED_FILES:,} files; mhainspect reads "
                             "folders of models, not archives of this size: name the model's own folder or file",
                             ErrorKind.BAD_SERVER)
    return out


def folder_index(files: Mapping[str, int | None]) -> dict[str, tuple[list[str], set[str]]]:
    """Every folder of a listing ("" = the root) -> (its files' names, its subfolders' names),
    built in one pass: a walk over the folders looks each one up instead of rescanning the listing."""
    index: dict[str, tuple[list[str], set[str]]] = {"": ([], set())}
    for path in files:
        folder, _, name = path.rpartition("/")
        entry = index.get(folder)
        if entry is None:
            entry = index[folder] = ([], set())
            child = folder
            while child:  # register the new folder in its parent, and a new parent in its own
                up, _, last = child.rpartition("/")
                parent = index.get(up)
                new = parent is None
                if parent is None:
                    parent = index[up] = ([], set())
                parent[1].add(last)
                child = up if new else ""
        entry[0].append(name)
    return index


@dataclass(frozen=True)
class Entries:
    """One level of a folder: its files and subfolders by name, sorted; ``linked``: the subfolders
    reached through a symbolic link (a scan looks at them, never below them: a link may loop)."""

    files: tuple[str, ...]
    folders: tuple[str, ...]
    linked: frozenset[str] = frozenset()


class Listed:
    """``listdir`` of a tree whose ``files()`` is one listing held in memory (remote trees)."""

    def files(self) -> Mapping[str, int | None]:
        raise NotImplementedError

    def listdir(self, folder: str) -> Entries:
        index = self.__dict__.get("_folder_index")
        if index is None:  # built once: a walk over many folders looks each one up
            index = self.__dict__["_folder_index"] = folder_index(self.files())
        names, subs = index.get(folder, ([], set()))
        return Entries(tuple(sorted(names)), tuple(sorted(subs)))


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
