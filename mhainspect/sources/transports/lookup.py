"""Name lookups that a deadline can end.

``socket.getaddrinfo`` cannot be interrupted: a resolver that never answers would hold the thread
that asked past every timeout (a socket timeout starts only once there is an address). So the
lookup runs in a daemon thread and the caller waits for it at most ``wait`` seconds; the
addresses it returns are the ones the connection is made to (no second lookup), while the
connection keeps the host's name for TLS (SNI, certificate check) and the Host header.

A lookup that never ends leaves its thread behind. Two bounds keep that finite in a long batch:
a lookup of a name already in flight waits for that one (one thread per stuck name, whatever the
number of requests), and at most ``MAX_PENDING`` lookups may be in flight at once (more: the
resolver is stuck, and a new lookup fails at once instead of leaving one more thread).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

MAX_PENDING = 32  # lookups in flight at once (a batch reads from a few hosts; more means a stuck resolver)

AddrInfo = tuple[Any, ...]  # what socket.getaddrinfo returns per address: (family, type, proto, canonname, sockaddr)


class LookupTimeout(OSError):
    """The name did not resolve within the time the request had."""


_LOCK = threading.Lock()
_PENDING: dict[tuple[str, int, int], Future[list[AddrInfo]]] = {}


def _numeric(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])  # an IPv6 literal may carry a zone (fe80::1%eth0)
    except ValueError:
        return False
    return True


def addresses(host: str, port: int, family: int, wait: float) -> list[AddrInfo]:
    """``socket.getaddrinfo(host, port, family, SOCK_STREAM)``, waited for at most ``wait``
    seconds (LookupTimeout after that; socket.gaierror as getaddrinfo raises it)."""
    if _numeric(host):  # no lookup: the resolver is not asked, no thread is started
        return socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    key = (host, port, family)
    with _LOCK:
        pending = _PENDING.get(key)
        if pending is None:
            if len(_PENDING) >= MAX_PENDING:
                raise LookupTimeout(f"{len(_PENDING)} name lookups are waiting for the resolver already")
            pending = _PENDING[key] = Future()
            threading.Thread(target=_lookup, args=(key, pending), name="mhainspect-lookup", daemon=True).start()
    try:
        return pending.result(timeout=max(0.0, wait))
    except FutureTimeout:
        raise LookupTimeout(f"the name {host} did not resolve within {wait:.3g} s") from None


def _lookup(key: tuple[str, int, int], pending: Future[list[AddrInfo]]) -> None:
    host, port, family = key
    try:
        found = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)
    except BaseException as exc:  # handed to every waiter as getaddrinfo raised it
        with _LOCK:
            _PENDING.pop(key, None)
        pending.set_exception(exc)
        return
    with _LOCK:
        _PENDING.pop(key, None)  # the next connection looks the name up again (no cache past its TTL)
    pending.set_result(found)


def connect(host: str, port: int, family: int, timeout: float | None, wait: float,
            source_address: tuple[str, int] | None, options: Any) -> socket.socket:
    """A socket connected to the first of ``host``'s addresses that accepts (as
    ``socket.create_connection`` does), the lookup bounded by ``wait`` seconds."""
    if host.startswith("["):
        host = host.strip("[]")
    error: OSError | None = None
    for af, socktype, proto, _canon, sa in addresses(host, port, family, wait):
        sock = None
        try:
            sock = socket.socket(af, socktype, proto)
            for option in options or ():
                sock.setsockopt(*option)
            if timeout is not None:
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(sa)
            return sock
        except OSError as exc:
            error = exc
            if sock is not None:
                sock.close()
    raise error if error is not None else OSError("getaddrinfo returned no address")
