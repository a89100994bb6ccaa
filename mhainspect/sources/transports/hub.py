"""A Hugging Face Hub model repository as a folder of blobs.

Settings as the Hub's own tools resolve them, read when a run asks (not when mhainspect is imported):
- endpoint: ``HF_ENDPOINT`` (default https://huggingface.co);
- token: what ``huggingface_hub.get_token()`` gives (``HF_TOKEN``, then the token file ``hf auth
  login`` writes; ``HF_HUB_DISABLE_IMPLICIT_TOKEN``: none); sent only to the endpoint's origin,
  never to the storage a file redirects to;
- offline: ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) = 1/ON/YES/TRUE: no request at all;
  the repo is read from the cache, or the run says it is not there;
- cache: ``HF_HUB_CACHE``, else ``HF_HOME``/hub, else ``XDG_CACHE_HOME``/huggingface/hub, else
  ~/.cache/huggingface/hub; a file of the resolved commit found in ``snapshots/<commit>/`` is read
  there, with no request.

One request lists the repo (the model-info API with file sizes: the commit a revision points at,
every file and its size); each file is then read by ranges from ``/resolve/<commit>/<path>`` (an
LFS file answers with a redirect to its storage: later ranges of that file go there directly).
Listings are kept for the process, so a repo of several models is listed once.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from mhainspect.errors import ErrorKind, InputError, MissingDependencyError
from mhainspect.sources.address import HubRef, display, hub_endpoint
from mhainspect.sources.blob import Blob, LocalBlob
from mhainspect.sources.transports.http import HttpBlob, Reply, client, reply_kind, retries
from mhainspect.sources.tree import Listed, listed_files

REMOTE_HINT = 'pip install "mhainspect[remote]"'
_COMMIT = r"^[0-9a-f]{40}$"
_TRUE = frozenset({"1", "ON", "YES", "TRUE"})
MAX_LISTING_BYTES = 2 * 1024 * 1024  # ~9,500 files with their sizes and hashes (MAX_LISTED_FILES: 10,000)


@dataclass(frozen=True)
class HubSettings:
    endpoint: str
    token: str | None
    offline: bool
    cache_dir: Path


def hub_settings() -> HubSettings:
    """The Hub settings in force now (see the module docstring)."""
    offline = (os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or "").upper() in _TRUE
    return HubSettings(hub_endpoint(), _token(), offline, cache_dir())


def cache_dir() -> Path:
    """The Hugging Face hub cache folder, by the Hub's own precedence of variables."""
    legacy = os.environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(_home(), "hub")
    return Path(os.path.expanduser(os.path.expandvars(os.environ.get("HF_HUB_CACHE") or legacy)))


def _token() -> str | None:
    """huggingface_hub.get_token()'s answer. Its plain cases are read here, without importing it
    (0.3-0.5 s): HF_HUB_DISABLE_IMPLICIT_TOKEN (no token), HF_TOKEN / HUGGING_FACE_HUB_TOKEN, the
    token file (HF_TOKEN_PATH, else $HF_HOME/token) or none; an OIDC exchange (HF_OIDC_RESOURCE),
    Colab secrets and an OAuth login that refreshes its token are left to huggingface_hub."""
    if (os.environ.get("HF_HUB_DISABLE_IMPLICIT_TOKEN") or "").upper() in _TRUE:
        return None
    if os.environ.get("HF_OIDC_RESOURCE") or "google.colab" in sys.modules:
        return _library_token()
    found = _clean(os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"))
    if found is not None:
        return found
    path = Path(os.path.expanduser(os.path.expandvars(os.environ.get("HF_TOKEN_PATH") or os.path.join(_home(),
                                                                                                      "token"))))
    try:
        stored = path.read_text(encoding="utf-8")
    except OSError:
        return None
    try:
        refreshable = "refresh_token" in (path.parent / "stored_tokens").read_text(encoding="utf-8")
    except OSError:
        refreshable = False
    return _library_token() if refreshable else _clean(stored)


def _clean(token: str | None) -> str | None:
    return (token.replace("\r", "").replace("\n", "").strip() or None) if token is not None else None


def _home() -> str:
    return os.path.expanduser(os.path.expandvars(os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")))


def _library_token() -> str | None:
    try:
        from huggingface_hub import get_token
    except ImportError:
        raise MissingDependencyError(f"reading from the Hugging Face Hub needs huggingface_hub: {REMOTE_HINT}"
                                     ) from None
    return get_token()


@dataclass(frozen=True)
class Listing:
    """What one revision of a repo holds: its commit and every file with its size."""

    commit: str
    files: Mapping[str, int | None]
    from_cache: bool = False


_LISTINGS: dict[tuple[str, str, str | None, bool], Listing] = {}
_LISTINGS_LOCK = threading.Lock()


def listing(ref: HubRef, settings: HubSettings) -> Listing:
    """The files of ``ref``'s revision (one request, kept for the process; none when offline)."""
    key = (settings.endpoint, ref.repo, ref.revision, settings.offline)
    with _LISTINGS_LOCK:
        found = _LISTINGS.get(key)
    if found is None:
        found = _cached_listing(ref, settings) if settings.offline else _online_listing(ref, settings)
        with _LISTINGS_LOCK:
            _LISTINGS[key] = found
    return found


def _repo_folder(ref: HubRef, settings: HubSettings) -> Path:
    return settings.cache_dir / ("models--" + ref.repo.replace("/", "--"))


def _cached_listing(ref: HubRef, settings: HubSettings) -> Listing:
    folder = _repo_folder(ref, settings)
    revision = ref.revision or "main"
    commit = revision if re.match(_COMMIT, revision) else None
    if commit is None:
        try:
            commit = (folder / "refs" / revision).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            commit = None
        if commit is not None and not re.match(_COMMIT, commit):
            commit = None  # not what the Hub's tools write there: not a snapshot's name either
    snapshot = folder / "snapshots" / commit if commit else None
    if commit is None or snapshot is None or not snapshot.is_dir():
        raise InputError(f"{display(ref, '')}: offline (HF_HUB_OFFLINE is set) and revision '{revision}' of "
                         f"{ref.repo} is not in the Hugging Face cache ({settings.cache_dir})", ErrorKind.OFFLINE)
    def walk() -> Iterator[tuple[str, int | None]]:
        for root, _dirs, names in os.walk(snapshot):
            for n in names:
                p = Path(root) / n
                try:
                    yield p.relative_to(snapshot).as_posix(), p.stat().st_size
                except OSError:  # a dangling link: the blob was removed
                    continue

    return Listing(commit, listed_files(walk(), display(ref, "")), from_cache=True)


def _auth(settings: HubSettings) -> dict[str, str]:
    return {"Authorization": f"Bearer {settings.token}"} if settings.token else {}


def _online_listing(ref: HubRef, settings: HubSettings) -> Listing:
    base = f"{settings.endpoint}/api/models/{ref.repo}"
    url = (base if ref.revision is None else f"{base}/revision/{quote(ref.revision, safe='')}") + "?blobs=true"
    name = display(ref, "")
    reply = client().get(url, name=name, headers=_auth(settings), auth_origin=settings.endpoint,
                         limit=MAX_LISTING_BYTES)
    if reply.status != 200:
        raise InputError(f"{name}: {failure(reply, ref, '', settings)}", reply_kind(reply))
    not_api = InputError(f"{name}: the Hub's answer about the repo is not what its API returns", ErrorKind.BAD_SERVER)
    try:
        info = json.loads(reply.body)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        raise not_api from None
    siblings = info.get("siblings") if isinstance(info, dict) else None
    commit = info.get("sha") if isinstance(info, dict) else None
    if not isinstance(siblings, list) or not isinstance(commit, str):
        raise not_api
    if not re.match(_COMMIT, commit):  # it names the cache's snapshot folder and the files' URLs
        raise InputError(f"{name}: the Hub's answer names commit {commit[:64]!r}, which is no commit id (40 hex "
                         "digits)", ErrorKind.BAD_SERVER)
    return Listing(commit, listed_files(_sibling_files(siblings), name))


def _sibling_files(siblings: list[object]) -> Iterator[tuple[str, int | None]]:
    for s in siblings:
        if isinstance(s, dict) and isinstance(s.get("rfilename"), str):
            lfs = s.get("lfs")
            size = lfs.get("size") if isinstance(lfs, dict) else s.get("size")
            yield s["rfilename"], size if isinstance(size, int) else None


def failure(reply: Reply, ref: HubRef, path: str, settings: HubSettings) -> str:
    """What a failed Hub answer means for this repo, revision or file, in one line."""
    code = reply.headers.get("x-error-code", "")
    repo_page = f"{settings.endpoint}/{ref.repo}"
    login = "set HF_TOKEN or run `hf auth login`"
    if code == "GatedRepo" or (reply.status in (401, 403) and "gated" in reply.headers.get("x-error-message", "")):
        if settings.token:
            return (f"gated repository: this token has no access yet; accept the conditions on {repo_page} with the "
                    "account the token belongs to")
        return f"gated repository: accept its conditions on {repo_page}, then {login}"
    if code == "RevisionNotFound":
        return f"revision '{ref.revision}' not found in {ref.repo}"
    if code == "EntryNotFound" or (reply.status == 404 and path and code != "RepoNotFound"):
        return f"file '{path}' not found in {ref.repo}" + (f"@{ref.revision}" if ref.revision else "")
    if code == "RepoNotFound" or reply.status in (401, 404):
        if settings.token:
            return f"repository {ref.repo} not found, or private and this token has no access to it"
        return f"repository {ref.repo} not found (or private: {login})"
    if reply.status == 403:
        return f"access denied (HTTP 403) to {ref.repo}" + ("" if settings.token else f" ({login})")
    if reply.status == 429:
        return (f"rate-limited by the Hub (HTTP 429) after {retries()} tries; wait and run again"
                + ("" if settings.token else f" (logged-in users get higher limits: {login})"))
    if reply.status >= 500:
        return f"the Hub answered HTTP {reply.status} after {retries()} tries; try again later"
    return f"unexpected answer from the Hub (HTTP {reply.status})"


class HubTree(Listed):
    """A revision of a Hub repo as a folder: its files listed once, each read from the cache when
    it is there, else by ranges from the Hub."""

    complete = True

    def __init__(self, ref: HubRef) -> None:
        self.ref = ref
        self.settings = hub_settings()
        self.listing = listing(ref, self.settings)

    def files(self) -> Mapping[str, int | None]:
        return self.listing.files

    def name(self, path: str) -> str:
        return display(self.ref, path)

    def blob(self, path: str) -> Blob:
        cached = _repo_folder(self.ref, self.settings) / "snapshots" / self.listing.commit / path
        if cached.is_file():
            return LocalBlob(cached, self.name(path))
        if self.settings.offline:
            raise InputError(f"{self.name(path)}: offline (HF_HUB_OFFLINE is set) and this file is not in the "
                             f"Hugging Face cache ({self.settings.cache_dir})", ErrorKind.OFFLINE)
        settings, ref = self.settings, self.ref
        url = f"{settings.endpoint}/{ref.repo}/resolve/{self.listing.commit}/{quote(path)}"

        def describe(reply: Reply) -> str:
            return failure(reply, ref, path, settings)

        return HttpBlob(url, name=self.name(path), basename=path.rsplit("/", 1)[-1], size=self.files().get(path),
                        headers=_auth(settings), auth_origin=settings.endpoint, describe=describe)
