"""Servers the remote tests start on 127.0.0.1: files by ranges, a minimal Hub API, and their counts.

- ``FileServer``: a folder over HTTP/1.1 with keep-alive, HEAD, single ranges (and suffix ranges),
  ETag, redirects; misbehaving modes: ``no_range`` (answers 200 with the whole file), ``short``
  (announces more bytes than it sends, then closes), ``stall`` (sends headers, then nothing).
- ``HubServer``: /api/models/{repo}[/revision/{rev}] (model info with file sizes),
  /api/models/{repo}/tree/{rev}[/path], /{repo}/resolve/{rev}/{path} (LFS-like files answer with a
  redirect to a FileServer on another host name), gated and private repos, a rate-limited one.

- ``ScriptedServer``: answers each request with what a function of (path, request headers) says
  (``Answer``): any status, headers and body, or raw bytes, trickled or stalled: a hostile server.

Every server counts requests and body bytes sent, per path, and records the Authorization header
of each request (None when absent).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".gguf", ".onnx", ".bin", ".pt", ".pth", ".ckpt", ".data")


@dataclass
class Log:
    """What a server was asked and sent. A handler records after it has written its answer, so a
    client can hold the answer before the record exists: every read of the counts first waits for
    the requests in flight to finish (``settle``)."""

    _requests: int = 0
    _bytes: int = 0
    _by_path: dict[str, list[int]] = field(default_factory=dict)  # path -> [requests, bytes]
    _auth: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Authorization)
    lock: threading.Condition = field(default_factory=threading.Condition)
    active: int = 0  # requests being handled

    def add(self, path: str, sent: int, auth: str | None) -> None:
        with self.lock:
            self._requests += 1
            self._bytes += sent
            entry = self._by_path.setdefault(path, [0, 0])
            entry[0] += 1
            entry[1] += sent
            self._auth.append((path, auth))

    def begin(self) -> None:
        with self.lock:
            self.active += 1

    def end(self) -> None:
        with self.lock:
            self.active -= 1
            self.lock.notify_all()

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until no request is in flight (a stalled one is left after ``timeout``)."""
        with self.lock:
            self.lock.wait_for(lambda: self.active == 0, timeout)

    @property
    def requests(self) -> int:
        self.settle()
        return self._requests

    @property
    def bytes(self) -> int:
        self.settle()
        return self._bytes

    @property
    def by_path(self) -> dict[str, list[int]]:
        self.settle()
        return self._by_path

    @property
    def auth(self) -> list[tuple[str, str | None]]:
        self.settle()
        return self._auth

    def reset(self) -> None:
        self.settle()
        with self.lock:
            self._requests = self._bytes = 0
            self._by_path.clear()
            self._auth.clear()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # 16 connections at once must not overflow the listen backlog (a 1 s SYN retry)
    log: Log | None = None  # set by the owner: each request counts as in flight until it is answered


class _Handler(BaseHTTPRequestHandler):
    """A request is in flight from its request line until its handler returns (per request, not per
    kept-alive connection), so Log.settle() sees every answer recorded. Keep-alive HTTP/1.1, quiet,
    HEAD answered by do_GET, which reads self.command."""

    server: _Server
    _counted = False
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as they are written (no 40 ms ACK wait)

    def log_message(self, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        raise NotImplementedError

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok and self.server.log is not None:
            self.server.log.begin()
            self._counted = True
        return ok

    def handle_one_request(self) -> None:
        self._counted = False
        try:
            super().handle_one_request()
        finally:
            if self._counted and self.server.log is not None:
                self.server.log.end()


def _send_file(handler: BaseHTTPRequestHandler, path: Path, log: Log, mode: str, latency: float) -> None:
    size = path.stat().st_size
    etag = '"' + hashlib.sha1(f"{path}:{size}:{path.stat().st_mtime_ns}".encode()).hexdigest()[:16] + '"'
    rng = handler.headers.get("Range")
    start, end = 0, size - 1
    status = 200
    if rng and mode != "no_range":
        m = re.match(r"bytes=(\d*)-(\d*)$", rng.strip())
        if m is None:
            handler.send_response(400)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            log.add(handler.path, 0, handler.headers.get("Authorization"))
            return
        a, b = m.group(1), m.group(2)
        if a == "":
            start, end = max(0, size - int(b)), size - 1
        else:
            start = int(a)
            end = min(int(b), size - 1) if b else size - 1
        if start >= size:
            handler.send_response(416)
            handler.send_header("Content-Range", f"bytes */{size}")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            log.add(handler.path, 0, handler.headers.get("Authorization"))
            return
        status = 206
    length = end - start + 1
    if latency:
        time.sleep(latency)
    handler.send_response(status)
    handler.send_header("Accept-Ranges", "none" if mode == "no_range" else "bytes")
    handler.send_header("ETag", etag)
    if status == 206:
        handler.send_header("Content-Range", f"bytes {start}-{end}/{size}")
    announced = length * 2 + 10 if mode == "short" else length
    handler.send_header("Content-Length", str(announced))
    handler.end_headers()
    if handler.command == "HEAD":
        log.add(handler.path, 0, handler.headers.get("Authorization"))
        return
    if mode == "stall":
        time.sleep(30)
        return
    sent = 0
    with open(path, "rb") as fh:
        fh.seek(start)
        while sent < length:
            chunk = fh.read(min(1 << 20, length - sent))
            if not chunk:
                break
            try:
                handler.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break  # the client stopped reading (a whole file it never asked for)
            sent += len(chunk)
    log.add(handler.path, sent, handler.headers.get("Authorization"))
    if mode == "short":
        handler.close_connection = True


class FileServer:
    """A folder served over HTTP on 127.0.0.1 (``url(path)``), with counts."""

    def __init__(self, root: Path, mode: str = "ok", latency: float = 0.0, host: str = "127.0.0.1",
                 redirects: Mapping[str, str] | None = None) -> None:
        self.root, self.mode, self.latency, self.host = root, mode, latency, host
        self.redirects = dict(redirects or {})
        self.log = Log()
        outer = self

        class Handler(_Handler):
            def do_GET(self) -> None:
                rel = unquote(urlsplit(self.path).path).lstrip("/")
                if rel in outer.redirects:
                    self.send_response(302)
                    self.send_header("Location", outer.redirects[rel])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    outer.log.add(self.path, 0, self.headers.get("Authorization"))
                    return
                path = outer.root / rel
                if ".." in rel.split("/") or not path.is_file():
                    body = b"not found"
                    self.send_response(404)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    outer.log.add(self.path, len(body), self.headers.get("Authorization"))
                    return
                _send_file(self, path, outer.log, outer.mode, outer.latency)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.log = self.log
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, rel: str = "") -> str:
        return f"http://{self.host}:{self.port}/{rel}"

    def __enter__(self) -> FileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass(frozen=True)
class Answer:
    """What a ScriptedServer sends: a status line, headers and a body (Content-Length added unless
    a header names it or ``length=False``), or ``raw`` bytes as they are; ``trickle``: seconds
    between the bytes of the answer (a server that sends it one byte at a time);
    ``stall``: seconds of silence after the head; ``close``: the connection ends after the answer;
    ``endless``: the body repeats until the client goes away (no length: an answer without end)."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    raw: bytes | None = None
    trickle: float = 0.0
    stall: float = 0.0
    close: bool = False
    length: bool = True
    endless: bool = False  # the body is sent again and again until the client goes away (60 s at most)


class ScriptedServer:
    """A server on 127.0.0.1 whose every answer is ``script(path, headers)`` (an Answer), with counts;
    ``host``: the name its URLs use (``localhost`` makes it another origin than 127.0.0.1)."""

    def __init__(self, script: Callable[[str, Mapping[str, str]], Answer], host: str = "127.0.0.1",
                 tls: ssl.SSLContext | None = None) -> None:
        self.script, self.host = script, host
        self.log = Log()
        outer = self

        class Handler(_Handler):
            def do_GET(self) -> None:
                outer._answer(self)

        self.server = _Server(("127.0.0.1", 0), Handler)
        if tls is not None:  # HTTPS: every accepted connection is a TLS one
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        self.server.log = self.log
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, rel: str = "") -> str:
        return f"{self.scheme}://{self.host}:{self.port}/{rel}"

    def _answer(self, h: BaseHTTPRequestHandler) -> None:
        answer = self.script(h.path, {k.lower(): v for k, v in h.headers.items()})
        auth = h.headers.get("Authorization")
        if answer.raw is not None:
            head, body = answer.raw, b""
        else:
            lines = [f"HTTP/1.1 {answer.status} X"] + [f"{k}: {v}" for k, v in answer.headers]
            if answer.length and not answer.endless and not any(k.lower() in ("content-length", "transfer-encoding")
                                         for k, _ in answer.headers):
                lines.append(f"Content-Length: {len(answer.body)}")
            head, body = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), answer.body
        data = head + (body if h.command != "HEAD" else b"")
        try:
            if answer.trickle:
                for i in range(len(data)):
                    h.wfile.write(data[i:i + 1])
                    time.sleep(answer.trickle)
            else:
                h.wfile.write(head)
                if answer.stall:
                    time.sleep(answer.stall)
                h.wfile.write(data[len(head):])
                until = time.monotonic() + 60
                while answer.endless and body and time.monotonic() < until:
                    h.wfile.write(body)
        except OSError:  # the client went away (a cut connection; over TLS an SSL error)
            pass
        self.log.add(h.path, len(body), auth)
        if answer.close or answer.endless or answer.raw is not None:
            h.close_connection = True

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Repo:
    """A repo of the fake Hub: its files (a folder), commit, and who may read it."""

    folder: Path
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    private: bool = False
    gated: bool = False
    token: str | None = None  # the token that may read a private or gated repo
    revisions: tuple[str, ...] = ("main",)


class HubServer:
    """A minimal Hub: model info, tree, resolve (LFS files redirect to ``storage``, another host)."""

    def __init__(self, repos: Mapping[str, Repo], storage: FileServer, latency: float = 0.0,
                 rate_limited: bool = False) -> None:
        self.repos = dict(repos)
        self.storage = storage
        self.latency = latency
        self.rate_limited = rate_limited
        self.log = Log()
        outer = self

        class Handler(_Handler):
            def do_GET(self) -> None:
                outer._handle(self)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.log = self.log
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, message: str,
               extra: Mapping[str, str] | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        h.send_response(status)
        if code:
            h.send_header("X-Error-Code", code)
        h.send_header("X-Error-Message", message)
        for k, v in (extra or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
        self.log.add(h.path, len(body), h.headers.get("Authorization"))

    def _json(self, h: BaseHTTPRequestHandler, data: Any) -> None:
        body = json.dumps(data).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
        self.log.add(h.path, len(body), h.headers.get("Authorization"))

    def _allowed(self, h: BaseHTTPRequestHandler, repo: Repo, for_files: bool) -> bool:
        auth = h.headers.get("Authorization")
        has = auth is not None and repo.token is not None and auth == f"Bearer {repo.token}"
        if repo.private and not has:
            status = 401 if auth is None else 404
            self._error(h, status, "RepoNotFound", "Repository Not Found")
            return False
        if repo.gated and for_files and not has:
            self._error(h, 401 if auth is None else 403, "GatedRepo",
                        "Access to model is restricted and you are not in the authorized list.")
            return False
        return True

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        if self.latency:
            time.sleep(self.latency)
        if self.rate_limited:
            self._error(h, 429, "", "Too many requests", {"Retry-After": "0"})
            return
        path = unquote(urlsplit(h.path).path)
        m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/(revision|tree)/([^/]+)(?:/(.*))?)?$", path)
        if m is not None:
            self._api(h, m.group(1), m.group(2), m.group(3), m.group(4) or "")
            return
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if m is not None:
            self._resolve(h, m.group(1), m.group(2), m.group(3))
            return
        self._error(h, 404, "", "Not Found")

    def _repo(self, h: BaseHTTPRequestHandler, repo_id: str) -> Repo | None:
        repo = self.repos.get(repo_id)
        if repo is None:
            self._error(h, 401 if h.headers.get("Authorization") is None else 404, "RepoNotFound",
                        "Repository Not Found")
        return repo

    def _files(self, repo: Repo) -> dict[str, int]:
        out: dict[str, int] = {}
        for root, _dirs, names in os.walk(repo.folder):
            for n in names:
                p = Path(root) / n
                out[p.relative_to(repo.folder).as_posix()] = p.stat().st_size
        return dict(sorted(out.items()))

    def _api(self, h: BaseHTTPRequestHandler, repo_id: str, kind: str | None, rev: str | None, sub: str) -> None:
        repo = self._repo(h, repo_id)
        if repo is None or not self._allowed(h, repo, for_files=False):
            return
        if rev is not None and rev not in repo.revisions and rev != repo.commit:
            self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return
        files = self._files(repo)
        if kind == "tree":
            prefix = sub.strip("/") + "/" if sub.strip("/") else ""
            entries = [{"type": "file", "path": p, "size": s, "oid": "0" * 40}
                       for p, s in files.items() if p.startswith(prefix)]
            self._json(h, entries)
            return
        siblings = []
        for p, s in files.items():
            entry: dict[str, Any] = {"rfilename": p, "size": s}
            if p.endswith(LFS_SUFFIXES):
                entry["lfs"] = {"size": s, "sha256": "0" * 64, "pointerSize": 134}
            siblings.append(entry)
        self._json(h, {"id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": repo.private,
                       "gated": "auto" if repo.gated else False, "siblings": siblings})

    def _resolve(self, h: BaseHTTPRequestHandler, repo_id: str, rev: str, rel: str) -> None:
        repo = self._repo(h, repo_id)
        if repo is None or not self._allowed(h, repo, for_files=True):
            return
        if rev not in repo.revisions and rev != repo.commit:
            self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return
        path = repo.folder / rel
        if not path.is_file():
            self._error(h, 404, "EntryNotFound", f"{rel} does not exist")
            return
        if rel.endswith(LFS_SUFFIXES):
            storage_rel = f"{repo_id}/{rel}"
            h.send_response(302)
            h.send_header("Location", self.storage.url(storage_rel) + "?X-Signature=abc")
            h.send_header("X-Repo-Commit", repo.commit)
            h.send_header("Content-Length", "0")
            h.end_headers()
            self.log.add(h.path, 0, h.headers.get("Authorization"))
            return
        _send_file(h, path, self.log, "ok", 0.0)


@contextmanager
def hub(tmp: Path, repos: Mapping[str, Repo], latency: float = 0.0, rate_limited: bool = False
        ) -> Iterator[tuple[HubServer, FileServer]]:
    """A Hub on 127.0.0.1 and its LFS storage on 'localhost' (another host: no token may reach it).
    The storage serves ``tmp/storage/<repo>/<path>``: symlinks to the repos' own folders."""
    storage_root = tmp / "storage"
    for repo_id, repo in repos.items():
        link = storage_root / repo_id
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(repo.folder.resolve(), target_is_directory=True)
    with FileServer(storage_root, host="localhost", latency=latency) as storage:
        storage.root = storage_root
        with HubServer(repos, storage, latency=latency, rate_limited=rate_limited) as server:
            yield server, storage


_Handler_T = TypeVar("_Handler_T", bound=logging.Handler)


@contextmanager
def store_requests(logger_name: str, handler: _Handler_T, protocol: str | None = None) -> Iterator[_Handler_T]:
    """``handler`` on an object-store emulator's (or its SDK's) request logger at INFO for the block,
    the store reader's counters at zero and its listings cold (and fsspec's, for ``protocol``: its
    filesystems keep listings per instance)."""
    from mhainspect.sources.transports import store

    if protocol is not None:
        import fsspec

        fsspec.filesystem(protocol).invalidate_cache()
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    store.counters.requests = store.counters.bytes = 0
    store._LISTINGS.clear()
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
