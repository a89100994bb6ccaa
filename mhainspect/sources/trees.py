"""A remote address -> the ``Tree`` it reads from and the path it names in it: the transport is
chosen by the address (the Hub and its cache, a plain URL, an fsspec store)."""

from __future__ import annotations

from collections.abc import Callable

from mhainspect.errors import ErrorKind, InputError
from mhainspect.sources.address import HubRef, Ref, StoreRef, UrlRef, parse
from mhainspect.sources.tree import Tree, is_folder


def open_tree(ref: Ref, names_file: Callable[[str], bool]) -> tuple[Tree, str]:
    """The folder a reference reads from and the path it names in it ("" = the folder itself);
    ``names_file``: whether a last path part names a file (an object store has no folders to ask)."""
    if isinstance(ref, HubRef):
        from mhainspect.sources.transports.hub import HubTree

        return HubTree(ref), ref.path
    if isinstance(ref, UrlRef):
        from mhainspect.sources.transports.url import UrlTree

        url_tree = UrlTree(ref)
        return url_tree, url_tree.basename
    from mhainspect.sources.transports.store import StoreTree

    last = ref.url.rstrip("/").rsplit("/", 1)[-1]
    store = StoreTree(ref, as_file=names_file(last))
    return store, store.selection


def _where(ref: Ref, tree: Tree) -> str:
    if isinstance(ref, HubRef):
        return f"{ref.repo}" + (f"@{ref.revision}" if ref.revision else "")
    return tree.name("")


def locate(spec: str, names_file: Callable[[str], bool]) -> tuple[Tree, str, str]:
    """(tree, path in it, "file" or "folder") for a remote argument; InputError when nothing is there."""
    ref = parse(spec)
    tree, path = open_tree(ref, names_file)
    files = tree.files()
    if path in files:
        return tree, path, "file"
    if is_folder(files, path):
        return tree, path, "folder"
    if isinstance(ref, StoreRef) and not path:
        raise InputError(f"{spec}: nothing there (no such object or folder)", ErrorKind.NOT_FOUND)
    raise InputError(f"{spec}: no file or folder '{path}' in {_where(ref, tree)}", ErrorKind.NOT_FOUND)
