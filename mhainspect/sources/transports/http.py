"""HTTP(S) for remote models: ranged GETs over keep-alive connections, bounded in time and bytes.

- One connection pool per process (urllib3), at most ``CONCURRENCY`` connections per host, reused
  across requests (keep-alive).
- Redirects are followed here (at most ``MAX_REDIRECTS``). One origin rule for credentials: the
  origin (scheme, host, port) of a URL is what urllib3's own ``parse_url`` reads, the parser that
  opens the connection, so the host a token is judged for is the host it is sent to. A Location
  with a backslash, userinfo (``@``) or a control character is refused, not followed (parsers
  disagree on them, and a proxy parses the URL again), and so is one from HTTPS to plain HTTP; a
  followed one is sent as ``parse_url`` rewrites it. Once a request has left its origin, the Authorization header is gone for good:
  never sent after a redirect elsewhere, even back to the origin.
- A body is read only up to what was asked for: a Range request answered with the whole file (200)
  yields its first bytes only when they are what was asked (offset 0), a body longer than its
  announced range is cut, a shorter one is an error.
- Time: a name lookup, a connection or a read that waits ``timeout()`` seconds without data fails
  (the lookup runs in a thread the caller stops waiting for: ``lookup``); a request (its
  connection, status line and headers, and body) ends within ``4 * timeout()`` seconds in all, and
  within the model's deadline (``sources.deadline``): when its time is up, a watchdog shuts its
  socket, so a server that trickles its headers a byte at a time cannot hold it.
- 429 and 5xx answers are retried with backoff, ``retries()`` tries. A Retry-After is honoured when
  it is a finite number of seconds (or a date) up to ``MAX_RETRY_AFTER``; a longer or unusable one
  fails at once ("retry after N s"), and the waits of one request stay within ``MAX_RETRY_WAIT``
  and the model's deadline. The last answer goes back to the caller, which says what it means.

Every failure is an InputError with one line that names the file, never a header or a token.
"""

from __future__ import annotations

import heapq
import math
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urljoin

from mhainspect.errors import ErrorKind, InputError, MissingDependencyError
from mhainspect.sources import deadline
from mhainspect.sources.parallel import CONCURRENCY
from mhainspect.sources.transports import lookup

MAX_REDIRECTS = 8
MAX_RETRY_AFTER = 30.0  # seconds: a longer Retry-After is not waited for (the request fails at once)
MAX_RETRY_WAIT = 60.0  # seconds: the waits between the tries of one request, in all
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
USER_AGENT = "mhainspect (header-only reads)"
_CHUNK = 256 * 1024
_CONTENT_RANGE = r"bytes\s+(\d+)-(\d+)/(\d+|\*)"
_UNSATISFIED_RANGE = r"bytes\s+\*/(\d+)"


def timeout() -> float:
    """Seconds a connection or a read may wait (MHAINSPECT_REMOTE_TIMEOUT, default 30)."""
    return _positive_env("MHAINSPECT_REMOTE_TIMEOUT", 30.0)


def retries() -> int:
    """Tries of a request answered 429 or 5xx (MHAINSPECT_REMOTE_RETRIES, default 4)."""
    return max(1, int(_positive_env("MHAINSPECT_REMOTE_RETRIES", 4)))


def _positive_env(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"{name}={raw!r}: expected a number of seconds") from None
    if value <= 0:
        raise InputError(f"{name}={raw!r}: expected a positive number")
    return value


def _parse(url: str) -> Any:
    """urllib3's reading of ``url`` (what it connects to); InputError when it cannot read one."""
    try:
        from urllib3.util import parse_url
    except ImportError:
        raise MissingDependencyError('reading a model over HTTP(S) needs urllib3: pip install "mhainspect[remote]"'
                                     ) from None
    from urllib3.exceptions import LocationParseError

    try:
        return parse_url(url)
    except LocationParseError:
        raise InputError("not a URL that can be requested", ErrorKind.BAD_SERVER) from None


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a URL as urllib3 reads it when it connects: where a token may go."""
    parts = _parse(url)
    scheme = (parts.scheme or "http").lower()
    port = parts.port or (443 if scheme == "https" else 80)
    return scheme, (parts.host or "").lower(), port


def host_of(url: str) -> str:
    """The host[:port] a URL connects to, for messages (never its userinfo or path)."""
    try:
        parts = _parse(url)
    except InputError:
        return "the server"
    host = parts.host or "the server"
    return f"{host}:{parts.port}" if parts.port else host


_UNSAFE_LOCATION = re.compile(r"[\\\x00-\x20\x7f]")


def redirect_target(url: str, location: str, name: str) -> str:
    """The URL a redirect from ``url`` leads to, as urllib3 will request it; InputError for a
    Location parsers may read differently (a backslash, userinfo, control characters or spaces) or
    one that leaves HTTP(S)."""
    if _UNSAFE_LOCATION.search(location):
        raise InputError(f"{name}: {host_of(url)} redirected to an address with a backslash, a space or a control "
                         "character (read differently by different parsers); not followed", ErrorKind.BAD_SERVER)
    try:
        parts = _parse(urljoin(url, location))
    except (InputError, ValueError):  # urljoin: "Invalid IPv6 URL"
        raise InputError(f"{name}: {host_of(url)} redirected to an address that is not a URL", ErrorKind.BAD_SERVER
                         ) from None
    if parts.auth is not None:
        raise InputError(f"{name}: {host_of(url)} redirected to an address with a user name in it (before '@'); "
                         "not followed", ErrorKind.BAD_SERVER)
    if (parts.scheme or "").lower() not in ("http", "https") or not parts.host:
        raise InputError(f"{name}: {host_of(url)} redirected to a non-HTTP(S) address; not followed",
                         ErrorKind.BAD_SERVER)
    if origin(url)[0] == "https" and parts.scheme.lower() == "http":
        # Off TLS, the rest (a signed storage URL, the bytes read) could be read or changed on the way.
        raise InputError(f"{name}: {host_of(url)} redirected from HTTPS to plain HTTP ({host_of(str(parts.url))}); "
                         "not followed", ErrorKind.BAD_SERVER)
    return str(parts.url)


class _Watch:
    """One request's time: its connection, head and body end by ``at``. When that passes, the
    watchdog shuts the connection's socket (a read blocked on a trickling server returns), and
    ``expired`` says why the request failed."""

    def __init__(self, wait: float, at: float, model: deadline.Deadline | None) -> None:
        self.wait = wait  # what one connection or read may wait without data
        self.at = at
        self.model = model if model is not None and model.at <= at else None  # the model's time ends first
        self.span = at - time.monotonic()
        self.expired = False
        self._lock = threading.Lock()
        self._sock: Any = None
        self._done = False

    def left(self) -> float:
        return max(0.001, self.at - time.monotonic())

    def bind(self, sock: Any) -> None:
        """The socket the request is sent on (set by its connection: a new one as soon as it is
        opened, before a TLS handshake; a kept-alive one when the request is sent)."""
        with self._lock:
            self._sock = sock
            if self.expired:
                _shut(sock)

    def fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            if self._sock is not None:
                _shut(self._sock)

    def finish(self) -> None:
        with self._lock:
            self._done = True
            self._sock = None

    def late(self) -> bool:
        return self.expired or time.monotonic() > self.at

    def error(self, name: str, url: str) -> InputError:
        if self.model is not None:
            return deadline.expired(name, self.model)
        return InputError(f"{name}: {host_of(url)} did not answer in full within {self.span:.3g} s (a request's "
                          f"limit: 4x MHAINSPECT_REMOTE_TIMEOUT)", ErrorKind.NETWORK)


def _shut(sock: Any) -> None:
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's: a TLS socket's reader gets EOF
    except (OSError, TypeError):
        pass


class _Watchdog:
    """One thread that fires the watches whose time has come (earliest first)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Watch]] = []
        self._thread: threading.Thread | None = None

    def add(self, watch: _Watch) -> None:
        with self._cond:
            heapq.heappush(self._heap, (watch.at, id(watch), watch))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="mhainspect-http-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                at, _key, watch = self._heap[0]
                now = time.monotonic()
                if at > now:
                    self._cond.wait(at - now)
                    continue
                heapq.heappop(self._heap)
            watch.fire()


_WATCHDOG = _Watchdog()
_CURRENT = threading.local()  # the watch of the request this thread is sending


def _bind_current(sock: Any) -> None:
    watch = getattr(_CURRENT, "watch", None)
    if watch is not None and sock is not None:
        watch.bind(sock)


def _open(conn: Any, exc_types: Any) -> socket.socket:
    """urllib3's ``HTTPConnection._new_conn`` with the name lookup bounded in time: it may wait as
    long as a connection may (``timeout()``, within the request's and the model's deadlines), and
    the connection is made to the addresses it found, under the host's own name (TLS, Host)."""
    from urllib3.util.connection import allowed_gai_family

    watch = getattr(_CURRENT, "watch", None)
    limit = conn.timeout if isinstance(conn.timeout, (int, float)) else None
    wait = min(watch.wait, watch.left()) if watch is not None else (limit if limit is not None else timeout())
    try:
        sock = lookup.connect(conn._dns_host, conn.port, allowed_gai_family(), limit, wait, conn.source_address,
                              conn.socket_options)
    except socket.gaierror as exc:
        raise exc_types.NameResolutionError(conn.host, conn, exc) from exc
    except lookup.LookupTimeout as exc:
        raise exc_types.NewConnectionError(conn, f"name lookup: {exc}") from exc
    except TimeoutError as exc:
        raise exc_types.ConnectTimeoutError(conn, f"Connection to {conn.host} timed out. (connect timeout={limit})"
                                            ) from exc
    except OSError as exc:
        raise exc_types.NewConnectionError(conn, f"Failed to establish a new connection: {exc}") from exc
    sys.audit("http.client.connect", conn, conn.host, conn.port)
    return sock


def _watched_pools(urllib3: Any) -> dict[str, Any]:
    """Pool classes whose connections tell the current request's watch which socket to shut."""
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    exc_types = urllib3.exceptions

    class WatchedHTTP(HTTPConnection):
        def _new_conn(self) -> socket.socket:
            sock = _open(self, exc_types)
            _bind_current(sock)  # before any TLS handshake: a trickling handshake is cut too
            return sock

        def request(self, *args: Any, **kwargs: Any) -> None:
            _bind_current(self.sock)  # a kept-alive connection (a new one binds when it opens)
            super().request(*args, **kwargs)

    class WatchedHTTPS(HTTPSConnection):
        def _new_conn(self) -> socket.socket:
            sock = _open(self, exc_types)
            _bind_current(sock)
            return sock

        def connect(self) -> None:
            super().connect()
            _bind_current(self.sock)  # the TLS socket took the plain one's descriptor over

        def request(self, *args: Any, **kwargs: Any) -> None:
            _bind_current(self.sock)
            super().request(*args, **kwargs)

    class HTTPPool(HTTPConnectionPool):
        ConnectionCls = WatchedHTTP

    class HTTPSPool(HTTPSConnectionPool):
        ConnectionCls = WatchedHTTPS

    return {"http": HTTPPool, "https": HTTPSPool}


@dataclass(frozen=True)
class Reply:
    """An answer: its status, headers (lower-case names), the body read (capped) and the URL that
    answered (after redirects)."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str
    total: int | None = None  # the file's size, when the answer says it (Content-Range, Content-Length)


@dataclass
class Counters:
    """Requests sent and body bytes received, for benchmarks and tests."""

    requests: int = 0
    bytes: int = 0


class HttpClient:
    """Requests through one pool of keep-alive connections (thread-safe)."""

    def __init__(self) -> None:
        try:
            import urllib3
        except ImportError:
            raise MissingDependencyError('reading a model over HTTP(S) needs urllib3: pip install "mhainspect[remote]"'
                                         ) from None

        self._urllib3 = urllib3
        self._lock = threading.Lock()
        self._managers: dict[str, Any] = {}
        self.counters = Counters()

    def _manager(self, url: str) -> Any:
        """The pool for ``url``: direct, or through the proxy the environment names for its scheme."""
        import urllib.request

        scheme, host, _port = origin(url)
        proxy = urllib.request.getproxies().get(scheme)
        key = proxy if proxy and not urllib.request.proxy_bypass(host) else ""
        with self._lock:
            found = self._managers.get(key)
            if found is None:
                kwargs: dict[str, Any] = {"num_pools": 32, "maxsize": CONCURRENCY, "block": True, "retries": False}
                try:
                    import certifi

                    kwargs["ca_certs"] = certifi.where()
                except ImportError:
                    pass
                found = (self._urllib3.ProxyManager(key, **kwargs) if key else self._urllib3.PoolManager(**kwargs))
                found.pool_classes_by_scheme = _watched_pools(self._urllib3)
                self._managers[key] = found
            return found

    def get(self, url: str, *, name: str, headers: Mapping[str, str] | None = None, auth_origin: str | None = None,
            start: int | None = None, length: int | None = None, limit: int | None = None,
            method: str = "GET") -> Reply:
        """GET ``url`` (a range when ``start`` is given: ``length`` bytes, or the last ``-start``
        bytes when start < 0), following redirects; Authorization only to ``auth_origin``'s origin.
        ``limit`` caps a body without a range. 429/5xx are retried; other statuses are returned."""
        tries = retries()
        waited = 0.0
        for attempt in range(tries):
            reply = self._follow(url, name, headers or {}, auth_origin, start, length, limit, method)
            if reply.status not in RETRY_STATUSES or attempt == tries - 1:
                return reply
            pause = _pause(reply, attempt, name)
            model = deadline.current()
            if waited + pause > MAX_RETRY_WAIT or model is not None and pause >= model.left():
                raise InputError(f"{name}: {_busy(reply)}, retry after {_seconds(pause)} s (more than this model's "
                                 "reads may still wait)", reply_kind(reply))
            time.sleep(pause)
            waited += pause
        raise AssertionError("unreachable")

    def _follow(self, url: str, name: str, headers: Mapping[str, str], auth_origin: str | None,
                start: int | None, length: int | None, limit: int | None, method: str) -> Reply:
        sent = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        sent.update(headers)
        if start is not None:
            sent["Range"] = f"bytes={start}-" if length is None else (
                f"bytes={start}" if start < 0 else f"bytes={start}-{start + length - 1}")
        try:
            allowed = origin(auth_origin) if auth_origin is not None else origin(url)
        except InputError as exc:
            raise InputError(f"{name}: {exc}", ErrorKind.BAD_SERVER) from None
        for _ in range(MAX_REDIRECTS + 1):
            if origin(url) != allowed:  # another origin: the token never goes there, nor anywhere after it
                sent = without_credentials(sent)
            reply, location = self._once(url, name, sent, start, length, limit, method)
            if location is None:
                return reply
            url = redirect_target(url, location, name)
        raise InputError(f"{name}: more than {MAX_REDIRECTS} redirects", ErrorKind.NETWORK)

    def _once(self, url: str, name: str, headers: Mapping[str, str], start: int | None, length: int | None,
              limit: int | None, method: str) -> tuple[Reply, str | None]:
        deadline.check(name)
        wait = timeout()
        model = deadline.current()
        at = time.monotonic() + 4 * wait
        watch = _Watch(wait, at if model is None else min(at, model.at), model)
        _WATCHDOG.add(watch)
        _CURRENT.watch = watch
        try:
            return self._send(url, name, headers, start, length, limit, method, watch)
        finally:
            _CURRENT.watch = None
            watch.finish()

    def _send(self, url: str, name: str, headers: Mapping[str, str], start: int | None, length: int | None,
              limit: int | None, method: str, watch: _Watch) -> tuple[Reply, str | None]:
        exc_types = self._urllib3.exceptions
        try:
            left = min(watch.wait, watch.left())
            response = self._manager(url).request(
                method, url, headers=dict(headers), preload_content=False, redirect=False, retries=False,
                decode_content=False, timeout=self._urllib3.Timeout(connect=left, read=left))
        except exc_types.HTTPError as exc:
            if watch.late():
                raise watch.error(name, url) from None
            head = _malformed_head(exc)
            if head is not None:  # http.client's bounds on a head: 100 header lines of at most 64 KiB
                raise InputError(f"{name}: {host_of(url)} sent a malformed answer ({head}); not read further",
                                 ErrorKind.BAD_SERVER) from None
            raise InputError(f"{name}: {_unreachable(url, exc, watch.wait)}", ErrorKind.NETWORK) from None
        with self._lock:
            self.counters.requests += 1
        try:
            if watch.expired:  # cut in its head: http.client keeps the part it had as the whole head
                raise watch.error(name, url)
            got = {k.lower(): v for k, v in response.headers.items()}
            if 300 <= response.status < 400 and "location" in got:
                self._read(response, 64 * 1024, url, name, watch, exact=False)  # drained: the connection stays
                return Reply(response.status, got, b"", url), got["location"]
            body, total = self._body(response, got, url, name, start, length, limit, watch)
            return Reply(response.status, got, body, url, total), None
        finally:
            if not response.isclosed():
                response.close()  # bytes left unread (a cut body): this connection cannot serve another request
            response.release_conn()

    def _body(self, response: Any, headers: Mapping[str, str], url: str, name: str, start: int | None,
              length: int | None, limit: int | None, watch: _Watch) -> tuple[bytes, int | None]:
        """The body up to what was asked for, and the file's size when the answer tells it."""
        status = response.status
        declared = _int(headers.get("content-length"))
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if status in (200, 206) and encoding not in ("", "identity"):
            # Asked for the bytes as stored (Accept-Encoding: identity): compressed ones are not the
            # file's bytes at their offsets, and are never inflated (a small answer can inflate to GBs).
            raise InputError(f"{name}: the server sent its answer compressed (Content-Encoding "
                             f"{_printable(encoding)}) though asked for the bytes as stored; not read",
                             ErrorKind.BAD_SERVER)
        if status == 206 and start is None:
            raise InputError(f"{name}: the server answered a request for the whole file with a part of it (HTTP 206)",
                             ErrorKind.BAD_SERVER)
        if status == 206:
            return self._range_body(response, headers, url, name, start, length, watch, declared)
        if status == 416:
            m = re.match(_UNSATISFIED_RANGE, headers.get("content-range", ""))
            return b"", int(m.group(1)) if m else None
        if status == 200 and start is not None:
            # The server ignored Range: the body is the whole file. Its first bytes are what was
            # asked only from offset 0, and no more of it is read than the range's length.
            if start != 0 or length is None:
                raise InputError(f"{name}: the server ignores Range requests (it answered with the whole "
                                 f"{_size_words(declared)}); reading a header from it would mean downloading the "
                                 "file, which mhainspect never does", ErrorKind.BAD_SERVER)
            want = length if declared is None else min(length, declared)
            return self._read(response, want, url, name, watch, exact=declared is not None), declared
        if status == 200:
            return self._whole_body(response, url, name, limit, watch, declared)
        return self._read(response, 64 * 1024, url, name, watch, exact=False), None  # an error page, capped

    def _range_body(self, response: Any, headers: Mapping[str, str], url: str, name: str, start: int | None,
                    length: int | None, watch: _Watch, declared: int | None) -> tuple[bytes, int | None]:
        """A 206 answer's body, checked against what was asked and what the answer announces."""
        m = re.match(_CONTENT_RANGE, headers.get("content-range", ""))
        if m is None:
            raise InputError(f"{name}: the server answered a range request without a valid Content-Range",
                             ErrorKind.BAD_SERVER)
        first, last = int(m.group(1)), int(m.group(2))
        total = None if m.group(3) == "*" else int(m.group(3))
        if start is not None and start >= 0 and first != start or last < first:
            raise InputError(f"{name}: the server sent bytes {first}-{last} for a request starting at {start}",
                             ErrorKind.BAD_SERVER)
        if start is not None and start < 0 and (total is None or last != total - 1 or first != max(0, total + start)):
            raise InputError(f"{name}: the server sent bytes {first}-{last} of {m.group(3)} for the file's last "
                             f"{-start:,} bytes", ErrorKind.BAD_SERVER)
        expected = last - first + 1
        if declared is not None and declared != expected:
            raise InputError(f"{name}: the server's lengths disagree (Content-Length {declared:,}, Content-Range "
                             f"{expected:,} bytes): it misreports lengths", ErrorKind.BAD_SERVER)
        if length is not None and expected > length:
            raise InputError(f"{name}: the server sent {expected:,} bytes for a {length:,}-byte range",
                             ErrorKind.BAD_SERVER)
        return self._read(response, expected, url, name, watch, exact=True), total

    def _whole_body(self, response: Any, url: str, name: str, limit: int | None, watch: _Watch,
                    declared: int | None) -> tuple[bytes, int | None]:
        """A small file asked for whole (a listing), at most ``limit`` bytes."""
        cap = limit if limit is not None else _CHUNK
        if declared is not None and declared > cap:
            raise InputError(f"{name}: the answer announces {declared:,} bytes, more than the {cap:,} read for a "
                             "listing; not read", ErrorKind.BAD_SERVER)
        body = self._read(response, cap + 1, url, name, watch, exact=False)
        if len(body) > cap:
            raise InputError(f"{name}: the answer runs past the {cap:,} bytes read for a listing (endless, or a "
                             "listing of more files than mhainspect reads); not read further", ErrorKind.BAD_SERVER)
        if declared is not None and len(body) != declared:
            raise InputError(f"{name}: the server announced {declared:,} bytes and sent {len(body):,}",
                             ErrorKind.BAD_SERVER)
        return body, len(body)

    def _read(self, response: Any, want: int, url: str, name: str, watch: _Watch, *, exact: bool) -> bytes:
        """Up to ``want`` body bytes (exactly ``want`` when ``exact``), each read waiting at most
        ``watch.wait`` seconds, all of them ending by the request's deadline."""
        exc_types = self._urllib3.exceptions
        out = bytearray()
        try:
            while len(out) < want:
                chunk = response.read1(min(_CHUNK, want - len(out)))
                if not chunk:
                    break
                out += chunk
                if watch.late():
                    raise watch.error(name, url)
        except (exc_types.ReadTimeoutError, TimeoutError):
            if watch.late():
                raise watch.error(name, url) from None
            raise InputError(f"{name}: {host_of(url)} stalled (no data for {watch.wait:g} s)", ErrorKind.NETWORK
                             ) from None
        except (exc_types.HTTPError, OSError) as exc:
            if watch.late():
                raise watch.error(name, url) from None
            if not exact:
                raise InputError(f"{name}: the connection to {host_of(url)} broke ({type(exc).__name__})",
                                 ErrorKind.NETWORK) from None
        finally:
            with self._lock:
                self.counters.bytes += len(out)
        if watch.late():
            raise watch.error(name, url)
        if exact and len(out) < want:
            raise InputError(f"{name}: {host_of(url)} sent {len(out):,} of the {want:,} bytes it announced "
                             "(connection closed early; the server misreports lengths?)", ErrorKind.BAD_SERVER)
        return bytes(out)


def without_credentials(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` without the ones that carry credentials."""
    return {k: v for k, v in headers.items() if k.lower() not in CREDENTIAL_HEADERS}


def _int(raw: str | None) -> int | None:
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _printable(raw: str) -> str:
    """A header's value for a message: quoted, at most 40 characters, escaped where it does not print."""
    return ascii(raw.strip()[:40])


def _size_words(n: int | None) -> str:
    return f"{n:,}-byte file" if n is not None else "file"


def _pause(reply: Reply, attempt: int, name: str) -> float:
    """Seconds to wait before the next try: the answer's Retry-After (seconds or a date) when it
    gives one up to MAX_RETRY_AFTER, else a doubling backoff. A longer one, or a number that is no
    time (nan, inf, negative), fails at once."""
    raw = reply.headers.get("retry-after")
    if raw is None or not raw.strip():
        return min(0.5 * (1 << attempt), MAX_RETRY_AFTER)
    after = _retry_after(raw.strip())
    if after is None:
        raise InputError(f"{name}: {_busy(reply)}, and its Retry-After ({_printable(raw)}) is not a time",
                         reply_kind(reply))
    if after > MAX_RETRY_AFTER:
        raise InputError(f"{name}: {_busy(reply)}, retry after {_seconds(after)} s", reply_kind(reply))
    return after


def _retry_after(raw: str) -> float | None:
    """A Retry-After's seconds (from now, for a date); None when it is no finite, non-negative time."""
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:
            return None
        seconds = max(0.0, when.timestamp() - time.time())
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _seconds(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def _busy(reply: Reply) -> str:
    return f"rate limited (HTTP {reply.status})" if reply.status == 429 else f"server busy (HTTP {reply.status})"


def _malformed_head(exc: BaseException) -> str | None:
    """What http.client found wrong with an answer's status line or headers (too many, too long),
    when that is why the request failed."""
    import http.client

    for arg in (exc, *exc.args, exc.__cause__, exc.__context__):
        if isinstance(arg, http.client.HTTPException) and not isinstance(arg, http.client.RemoteDisconnected):
            return str(arg)[:120] or type(arg).__name__
    return None


def _unreachable(url: str, exc: Exception, wait: float) -> str:
    text = f"{type(exc).__name__}: {exc}"
    host = host_of(url)
    if isinstance(exc.__cause__, lookup.LookupTimeout):
        return f"cannot reach {host} ({exc.__cause__})"
    if "timed out" in text.lower() or "timeout" in type(exc).__name__.lower():
        return f"no answer from {host} within {wait:g} s"
    if "refused" in text.lower():
        return f"cannot reach {host} (connection refused)"
    if "name or service" in text.lower() or "resolve" in text.lower() or "nodename" in text.lower():
        return f"cannot reach {host} (unknown host)"
    return f"cannot reach {host} ({type(exc).__name__})"


_CLIENT: HttpClient | None = None
_CLIENT_LOCK = threading.Lock()


def client() -> HttpClient:
    """The process's client (one pool: keep-alive across every file of a run)."""
    global _CLIENT
    with _CLIENT_LOCK:
        if _CLIENT is None:
            _CLIENT = HttpClient()
        return _CLIENT


class HttpBlob:
    """A file at a URL, read by ranges. After a redirect to another origin (a Hub file's storage),
    later ranges go straight to where the first one was sent, without the token."""

    speculative = True

    def __init__(self, url: str, *, name: str, basename: str, size: int | None = None,
                 headers: Mapping[str, str] | None = None, auth_origin: str | None = None,
                 describe: Any = None) -> None:
        self.url = url
        self.name = name
        self.basename = basename
        self._size = size
        self._headers = dict(headers or {})
        self._auth_origin = auth_origin
        self._describe = describe  # reply -> message for a failed answer (Hub errors), or None
        self._lock = threading.Lock()

    def known_size(self) -> int | None:
        return self._size

    def size(self) -> int:
        if self._size is None:
            reply = client().get(self.url, name=self.name, headers=self._headers, auth_origin=self._auth_origin,
                                 start=0, length=1)
            self._check(reply)
            if reply.total is None:
                raise InputError(f"{self.name}: the server does not say how long the file is", ErrorKind.BAD_SERVER)
            self._moved(reply)
            self._size = reply.total
        return self._size

    def read(self, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        if self._size is not None:
            if offset >= self._size:
                return b""
            length = min(length, self._size - offset)
        with self._lock:
            url, headers = self.url, self._headers
        reply = client().get(url, name=self.name, headers=headers, auth_origin=self._auth_origin, start=offset,
                             length=length)
        self._check(reply)
        self._moved(reply)
        if reply.total is not None:
            if self._size is not None and reply.total != self._size:
                raise InputError(f"{self.name}: the server says the file has {reply.total:,} bytes, the listing "
                                 f"{self._size:,} (changed while read?)", ErrorKind.BAD_SERVER)
            self._size = reply.total
        if self._size is not None and len(reply.body) < min(length, self._size - offset):
            raise InputError(f"{self.name}: the server sent {len(reply.body):,} of {length:,} bytes",
                             ErrorKind.BAD_SERVER)
        return reply.body

    def tail(self, length: int) -> bytes:
        if self._size is not None:
            return self.read(max(0, self._size - length), min(length, self._size))
        with self._lock:
            url, headers = self.url, self._headers
        reply = client().get(url, name=self.name, headers=headers, auth_origin=self._auth_origin, start=-length,
                             length=length)
        self._check(reply)
        self._moved(reply)
        if reply.status == 200 or reply.total is None:
            raise InputError(f"{self.name}: the server does not answer a range from the end of the file (needed "
                             "to find an archive's directory without downloading the file)", ErrorKind.BAD_SERVER)
        self._size = reply.total
        return reply.body

    def _moved(self, reply: Reply) -> None:
        if reply.url != self.url and origin(reply.url) != origin(self._auth_origin or self.url):
            with self._lock:
                self.url = reply.url
                self._headers = without_credentials(self._headers)

    def _check(self, reply: Reply) -> None:
        if reply.status in (200, 206, 416):
            return
        if self._describe is not None:
            message = self._describe(reply)
            if message:
                raise InputError(f"{self.name}: {message}", reply_kind(reply))
        raise InputError(f"{self.name}: {status_words(reply)}", reply_kind(reply))


def reply_kind(reply: Reply) -> ErrorKind:
    """The kind of a failed answer: the Hub's error code where it sends one, else the status."""
    code = reply.headers.get("x-error-code", "")
    status = reply.status
    if code == "GatedRepo" or status in (401, 403) and "gated" in reply.headers.get("x-error-message", ""):
        return ErrorKind.GATED
    if code in ("RepoNotFound", "RevisionNotFound", "EntryNotFound") or status in (404, 410):
        return ErrorKind.NOT_FOUND
    if status in (401, 403):
        return ErrorKind.ACCESS_DENIED
    if status == 429:
        return ErrorKind.RATE_LIMITED
    return ErrorKind.NETWORK if status >= 500 else ErrorKind.BAD_SERVER


def status_words(reply: Reply) -> str:
    """What a failed answer means, for a plain URL."""
    s = reply.status
    if s == 404 or s == 410:
        return f"not found (HTTP {s})"
    if s in (401, 403):
        return f"access denied (HTTP {s}): the server wants credentials this URL does not carry"
    if s == 429:
        return f"rate-limited (HTTP 429) after {retries()} tries; try again later"
    if s >= 500:
        return f"server error (HTTP {s}) after {retries()} tries"
    return f"unexpected answer HTTP {s}"
