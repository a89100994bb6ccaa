"""The folder of one HTTP(S) URL as a ``Tree``: the file named, and its siblings by their URLs."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from mhainspect.errors import InputError
from mhainspect.sources.address import UrlRef
from mhainspect.sources.blob import Blob
from mhainspect.sources.transports.http import HttpBlob
from mhainspect.sources.tree import Listed


class UrlTree(Listed):
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
