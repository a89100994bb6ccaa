"""What a remote MODEL argument names: a Hub repo (and a revision and a path inside it), a URL, or
an object in a store. Text only: nothing is imported or requested here.

- ``hf://org/name``, ``hf://org/name@revision``, ``hf://org/name@revision/path/in/repo``,
  ``hf://org/name/path`` (revision ``refs/pr/N`` and ``refs/convert/NAME`` keep their slashes);
- the Hub's web URLs as a browser shows them: ``https://huggingface.co/org/name``, and with
  ``/blob/REV/PATH``, ``/resolve/REV/PATH``, ``/raw/REV/PATH``, ``/tree/REV[/PATH]`` (also on
  ``hf.co`` and on the host of ``HF_ENDPOINT``);
- any other ``http(s)://`` URL: one file;
- ``s3://``, ``gs://``/``gcs://``, ``az://``/``abfs://``/``abfss://``: a file or a folder in an
  object store, read through fsspec.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from mhainspect.errors import InputError
from mhainspect.sources import HF_SCHEME, STORE_SCHEMES, URL_SCHEMES, is_remote
from mhainspect.sources.tree import name_problem

__all__ = ["HF_SCHEME", "STORE_SCHEMES", "URL_SCHEMES", "HubRef", "Ref", "StoreRef", "UrlRef", "display",
           "hub_endpoint", "is_remote", "parse"]
HUB_HOSTS = frozenset({"huggingface.co", "www.huggingface.co", "hf.co"})
DEFAULT_ENDPOINT = "https://huggingface.co"
# Revisions that hold slashes (Hub pull requests, conversions): matched before the path is split off.
_SLASHED_REVISION = r"^(refs/pr/\d+|refs/convert/[\w.-]+)(?:/(.*))?$"
_REPO_PART = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
_WEB_ACTIONS = frozenset({"blob", "resolve", "raw", "tree"})


@dataclass(frozen=True)
class HubRef:
    """A model repository on the Hub, a revision (None: the default branch) and a path in it."""

    repo: str
    revision: str | None
    path: str
    text: str  # the argument as given (how reports name it)


@dataclass(frozen=True)
class UrlRef:
    """One file at an HTTP(S) URL."""

    url: str
    text: str


@dataclass(frozen=True)
class StoreRef:
    """A file or folder in an object store (fsspec protocol and URL)."""

    url: str
    protocol: str
    text: str


Ref = HubRef | UrlRef | StoreRef


def hub_endpoint() -> str:
    """HF_ENDPOINT as the Hub's own tools read it (at call time), without a trailing slash."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def parse(spec: str) -> Ref:
    """The reference ``spec`` makes; InputError when it is malformed."""
    low = spec.lower()
    if low.startswith(HF_SCHEME):
        return _hf_uri(spec, spec[len(HF_SCHEME):])
    if low.startswith(STORE_SCHEMES):
        protocol = low.split("://", 1)[0]
        if not spec.split("://", 1)[1].strip("/"):
            raise InputError(f"{spec}: no bucket or container named")
        return StoreRef(spec, protocol, spec)
    if low.startswith(URL_SCHEMES):
        web = _web_url(spec)
        return web if web is not None else UrlRef(spec, spec)
    raise InputError(f"{spec}: not a remote model reference")


def _repo(spec: str, org: str, name: str) -> str:
    if not (re.match(_REPO_PART, org) and re.match(_REPO_PART, name)) or ".." in org + name:
        raise InputError(f"{spec}: '{org}/{name}' is not a Hub repository id (expected org/name)")
    return f"{org}/{name}"


def _hf_uri(spec: str, body: str) -> HubRef:
    """``org/name[@rev][/path]`` (the part after ``hf://``)."""
    body = body.strip("/")
    if body.startswith(("datasets/", "spaces/", "buckets/")):
        raise InputError(f"{spec}: only model repositories are audited (not {body.split('/', 1)[0]})")
    if body.startswith("models/"):
        body = body[len("models/"):]
    parts = body.split("/", 2)
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise InputError(f"{spec}: expected hf://org/name[@revision][/path]")
    org, rest = parts[0], "/".join(parts[1:])
    if "@" in rest.split("/", 1)[0]:
        name, after = rest.split("@", 1)
        m = re.match(_SLASHED_REVISION, after)
        if m is not None:
            revision, path = m.group(1), m.group(2) or ""
        else:
            revision, _, path = after.partition("/")
        if not revision:
            raise InputError(f"{spec}: empty revision after '@'")
    else:
        name, _, path = rest.partition("/")
        revision = None
    return HubRef(_repo(spec, org, name), _revision(spec, unquote(revision)) if revision else None,
                  _clean_path(spec, path), spec)


def _revision(spec: str, revision: str) -> str:
    """A revision as given, when it can name a branch, tag or commit: it goes into URLs and, offline,
    into a path of the cache (refs/<revision>), so no empty, '.' or '..' segment, no backslash or
    control character."""
    problem = name_problem(revision)
    if problem is not None or len(revision) > 256:
        raise InputError(f"{spec}: not a revision (it has {problem or 'more than 256 characters'})")
    return revision


def _clean_path(spec: str, path: str) -> str:
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise InputError(f"{spec}: '..' in a path inside a repository")
    return "/".join(parts)


def _web_url(spec: str) -> HubRef | None:
    """A Hub web URL (huggingface.co, hf.co or HF_ENDPOINT's host) as a HubRef; None for another host."""
    parts = urlsplit(spec)
    endpoint = urlsplit(hub_endpoint())
    host = (parts.hostname or "").lower()
    prefix = ""
    if parts.netloc.lower() == endpoint.netloc.lower() and parts.netloc:
        prefix = endpoint.path.strip("/")
    elif host not in HUB_HOSTS:
        return None
    path = parts.path.strip("/")
    if prefix:
        if not (path + "/").startswith(prefix + "/"):
            return None
        path = path[len(prefix):].strip("/")
    segments = path.split("/")
    if segments and segments[0] in ("datasets", "spaces"):
        raise InputError(f"{spec}: only model repositories are audited (not {segments[0]})")
    if segments and segments[0] == "api" or len(segments) < 2:
        raise InputError(f"{spec}: not a model page of the Hub (expected {parts.scheme}://{parts.netloc}/org/name)")
    repo = _repo(spec, segments[0], segments[1])
    if len(segments) == 2:
        return HubRef(repo, None, "", spec)
    action = segments[2]
    if action not in _WEB_ACTIONS or len(segments) < 4:
        raise InputError(f"{spec}: not a model file or folder page (expected /blob/, /resolve/ or /tree/ "
                         "with a revision)")
    revision = unquote(segments[3])
    rest = segments[4:]
    joined = "/".join([revision, *rest])
    m = re.match(_SLASHED_REVISION, joined)
    if m is not None:  # refs/pr/1 written with its slashes
        revision, rest = m.group(1), (m.group(2) or "").split("/")
    return HubRef(repo, _revision(spec, revision), _clean_path(spec, unquote("/".join(rest))), spec)


def display(ref: HubRef, path: str) -> str:
    """How reports name a file or folder of a Hub repo: ``hf://org/name[@rev]/path``."""
    at = f"@{ref.revision}" if ref.revision else ""
    return f"hf://{ref.repo}{at}" + (f"/{path}" if path else "")
