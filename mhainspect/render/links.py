"""Where the documentation the outputs link to is published, derived from the one place the
project names its URLs: ``[project.urls]`` in pyproject.toml, as the installed package's metadata
carries it. A project that names none gets no links (plain text instead), never an invented host.

- ``Documentation``: the URL of the published docs/ folder, used as given;
- else ``Repository`` / ``Source`` / ``Homepage`` on a forge whose file URLs are known (GitHub,
  GitLab, Codeberg): ``<repository>/blob/HEAD/docs/`` (GitLab ``/-/blob/HEAD/docs/``).
"""

from __future__ import annotations

from functools import cache
from importlib import metadata
from urllib.parse import urlparse

_DOCS_KEYS = ("documentation", "docs")
_REPOSITORY_KEYS = ("repository", "source", "source code", "homepage")
_FORGE_PATHS = {"github.com": "/blob/HEAD/docs/", "codeberg.org": "/src/branch/HEAD/docs/",
                "gitlab.com": "/-/blob/HEAD/docs/"}


def docs_base_from(project_urls: list[str]) -> str | None:
    """The docs/ base URL (ending in '/') from ``Project-URL`` metadata lines ("Label, URL"),
    None when none of them says where the docs are."""
    urls: dict[str, str] = {}
    for line in project_urls:
        label, sep, url = line.partition(",")
        url = url.strip()
        if sep and urlparse(url).scheme == "https":
            urls.setdefault(label.strip().lower(), url)
    docs = next((urls[k] for k in _DOCS_KEYS if k in urls), None)
    if docs is not None:
        return docs if docs.endswith("/") else docs + "/"
    for key in _REPOSITORY_KEYS:
        if key not in urls:
            continue
        url = urls[key]
        parsed = urlparse(url)
        tail = _FORGE_PATHS.get(parsed.netloc.lower())
        if tail is not None and parsed.path.strip("/").count("/") >= 1:
            return url.rstrip("/").removesuffix(".git") + tail
    return None


@cache
def docs_base() -> str | None:
    """The docs/ base URL of the installed mhainspect (see the module docstring), or None."""
    try:
        lines = metadata.metadata("mhainspect").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return None
    return docs_base_from([str(line) for line in lines])
