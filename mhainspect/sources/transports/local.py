"""A folder on this machine as a ``Tree``: its files answered from the file system when asked
(a stat for one file, a directory read for one level), never listed ahead; blobs read with pread."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from mhainspect.sources.blob import LocalBlob

if TYPE_CHECKING:  # a listing's type: a local file is read without listing its folder
    from mhainspect.sources.tree import Entries


class _LocalFiles(Mapping[str, int | None]):
    """The files below a folder: one stat per lookup; iterating walks the folder (symlinked folders
    are not followed)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _stat(self, path: str) -> int | None:
        try:
            st = (self.root / path).stat()
        except (OSError, ValueError):
            return None
        return st.st_size if (st.st_mode & 0o170000) == 0o100000 else None

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and self._stat(path) is not None

    def __getitem__(self, path: str) -> int | None:
        size = self._stat(path)
        if size is None:
            raise KeyError(path)
        return size

    def __iter__(self) -> Iterator[str]:
        for here, _, names in os.walk(self.root):
            rel = os.path.relpath(here, self.root)
            for name in names:
                if (Path(here) / name).is_file():
                    yield name if rel == "." else f"{Path(rel).as_posix()}/{name}"

    def __len__(self) -> int:
        return sum(1 for _ in self)


class LocalTree:
    """The folder ``root``; ``name(path)`` is ``root / path`` as the file system spells it."""

    complete = True

    def __init__(self, root: Path) -> None:
        self.root = root
        self._files = _LocalFiles(root)

    def files(self) -> Mapping[str, int | None]:
        return self._files

    def listdir(self, folder: str) -> Entries:
        from mhainspect.sources.tree import Entries

        files: list[str] = []
        folders: list[str] = []
        linked: set[str] = set()
        try:
            entries = list(os.scandir(self.path(folder)))
        except OSError:
            return Entries((), ())
        for entry in entries:
            try:
                if entry.is_dir():
                    folders.append(entry.name)
                    if entry.is_symlink():
                        linked.add(entry.name)
                elif entry.is_file():
                    files.append(entry.name)
            except OSError:
                continue
        return Entries(tuple(sorted(files)), tuple(sorted(folders)), frozenset(linked))

    def path(self, path: str) -> Path:
        return self.root / path if path else self.root

    def name(self, path: str) -> str:
        return str(self.path(path))

    def blob(self, path: str) -> LocalBlob:
        return LocalBlob(self.path(path))


def local_folder(tree: object, folder: str) -> str | None:
    """Where ``folder`` of ``tree`` is on this machine when the tree is a local folder (where a
    symlink inside it resolves says whether a path stays inside), else None (a remote tree's
    names are only names)."""
    return str(tree.path(folder)) if isinstance(tree, LocalTree) else None
