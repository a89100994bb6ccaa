"""The hostile-server matrix: one safetensors file at a URL on 127.0.0.1, served by a server that
misbehaves in one way per case. Each case ends in a report or one InputError line with the words
the case names, within its time, having taken no more bytes than the reader needed (the client's
own count of body bytes received: what a server writes past that is never read).

Other rows of the matrix live beside the mechanisms they test: where a token may go after a
redirect (test_remote_hostile: confusing Locations, other origins, a detour), Retry-After values
(test_remote_hostile), a server that ignores Range on a file larger than the first range
(test_remote), a fuzz over every answer (test_remote_fuzz).
"""

from __future__ import annotations

import gzip
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from remote_models import llama_tensors, write_safetensors
from remote_servers import Answer, ScriptedServer
from test_remote_hostile import COMMIT, TOKEN, hub_script, ranged, tls_server_context, token_env, trust

from mhainspect.errors import InputError
from mhainspect.pipeline import audit
from mhainspect.sources.deadline import model_deadline
from mhainspect.sources.transports import hub as hub_module
from mhainspect.sources.transports.http import HttpBlob, client

FIRST = 64 * 1024  # the first range a safetensors header is read with (all the header here)
NOT_FOUND = b"no"  # the answer for config.json beside the file (the client reads that error page)
Script = Callable[[str, Mapping[str, str]], Answer]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("matrix") / "m.safetensors"
    write_safetensors(path, llama_tensors(64, 4, 2, 1))
    data = path.read_bytes()
    assert 8 + int.from_bytes(data[:8], "little") < FIRST < len(data)  # the header fits the first range
    return data


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MHAINSPECT_REMOTE_TIMEOUT", "1")
    monkeypatch.setenv("MHAINSPECT_REMOTE_RETRIES", "1")


def _first(data: bytes, headers: Mapping[str, str]) -> tuple[int, int]:
    m = re.match(r"bytes=(\d+)-(\d+)$", headers.get("range", ""))
    assert m is not None, headers
    return int(m.group(1)), int(m.group(2))


def _gzipped(data: bytes, headers: Mapping[str, str]) -> Answer:
    a = ranged(data, headers)
    return Answer(a.status, a.headers + (("Content-Encoding", "gzip"),), gzip.compress(a.body))


_BOMB = gzip.compress(b"\0" * (64 << 20))  # 64 MiB of zeros in ~64 KiB


def _shifted(data: bytes, headers: Mapping[str, str]) -> Answer:
    start, end = _first(data, headers)
    return Answer(206, (("Content-Range", f"bytes {start + 10}-{end + 10}/{len(data)}"),), data[start + 10:end + 11])


def _cut(data: bytes, headers: Mapping[str, str]) -> Answer:
    a = ranged(data, headers)
    return Answer(a.status, a.headers, a.body[:len(a.body) // 2], length=False, close=True)


@dataclass(frozen=True)
class Case:
    script: Callable[[bytes, Mapping[str, str]], Answer]
    words: str | None  # None: the audit reports the model
    most_bytes: int  # body bytes the client may receive
    seconds: float = 3.0


CASES: dict[str, Case] = {
    # Range ignored: the whole file (200) without end. From offset 0, its first bytes are the range
    # asked for, and no more is read; without a length the file's size stays unknown.
    "200 whole file, endless, no length": Case(lambda d, h: Answer(200, (), d, endless=True),
                                               "does not say how long the file is", FIRST + 1),
    "200 whole file, endless, a huge length": Case(
        lambda d, h: Answer(200, (("Content-Length", str(10**12)),), d, endless=True), None, FIRST + len(NOT_FOUND)),
    # Lengths that lie.
    "206, Content-Length shorter than the range": Case(
        lambda d, h: Answer(206, ranged(d, h).headers + (("Content-Length", str(FIRST - 10)),), ranged(d, h).body),
        "lengths disagree", 0),
    "206, Content-Length longer than the range": Case(
        lambda d, h: Answer(206, ranged(d, h).headers + (("Content-Length", str(FIRST + 10)),), ranged(d, h).body,
                            close=True), "lengths disagree", 0),
    "200, Content-Length longer than what is sent": Case(
        lambda d, h: Answer(200, (("Content-Length", str(len(d))),), d[:1000], close=True), "sent 1,000 of the", 1000),
    "206, the body cut short (closed mid-body)": Case(_cut, f"sent {FIRST // 2:,} of the {FIRST:,} bytes", FIRST // 2),
    "206, endless body past its Content-Range": Case(
        lambda d, h: Answer(206, ranged(d, h).headers, ranged(d, h).body, endless=True), None,
        FIRST + len(NOT_FOUND)),
    # A Content-Range other than asked.
    "206 starting elsewhere": Case(_shifted, "sent bytes 10-65545 for a request starting at 0", 0),
    "206 with fewer bytes than asked": Case(
        lambda d, h: Answer(206, (("Content-Range", f"bytes 0-99/{len(d)}"),), d[:100]),
        f"sent 100 of {FIRST:,} bytes", 100),
    "206 with more bytes than asked": Case(
        lambda d, h: Answer(206, (("Content-Range", f"bytes 0-{len(d) - 1}/{len(d)}"),), d),
        f"bytes for a {FIRST:,}-byte range", 0),
    # Compression: never inflated, never taken for the file's bytes.
    "206 gzip-compressed": Case(_gzipped, "compressed (Content-Encoding 'gzip')", 0),
    "206 gzip bomb": Case(lambda d, h: Answer(206, (("Content-Range", f"bytes 0-{len(_BOMB) - 1}/{len(_BOMB)}"),
                                                    ("Content-Encoding", "gzip")), _BOMB),
                          "compressed (Content-Encoding 'gzip')", 0),
    # Heads past http.client's bounds (100 header lines of at most 64 KiB).
    "5,000 headers": Case(lambda d, h: Answer(206, ranged(d, h).headers + tuple((f"X-{i}", "y") for i in range(5000)),
                                              ranged(d, h).body), "malformed answer (got more than 100 headers)", 0),
    "a 2 MB header line": Case(lambda d, h: Answer(206, ranged(d, h).headers + (("X-Long", "y" * 2_000_000),),
                                                   ranged(d, h).body), "malformed answer", 0),
    # Redirects that never end.
    "a redirect loop": Case(lambda d, h: Answer(302, (("Location", "/m.safetensors"),)), "more than 8 redirects", 0),
    # Bodies nobody needs, without end: an error page, a redirect's (read to 64 KiB at most).
    "404 with an endless page": Case(lambda d, h: Answer(404, (), b"e" * 4096, endless=True), "not found (HTTP 404)",
                                     64 * 1024 + len(NOT_FOUND)),
    "302 with an endless body": Case(lambda d, h: Answer(302, (("Location", "/gone"),), b"e" * 4096, endless=True),
                                     "not found (HTTP 404)", 64 * 1024 + 2 * len(NOT_FOUND)),
}


def _serving(case: Case, data: bytes) -> Script:
    def script(path: str, headers: Mapping[str, str]) -> Answer:
        if not path.endswith("/m.safetensors"):
            return Answer(404, (), NOT_FOUND)  # config.json beside it: none
        return case.script(data, headers)

    return script


@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_server_costs_at_most_what_was_needed(quick: None, data: bytes, name: str) -> None:
    case = CASES[name]
    with ScriptedServer(_serving(case, data)) as server:
        before = client().counters.bytes
        start = time.monotonic()
        with model_deadline(case.seconds + 5):
            if case.words is None:
                assert audit(server.url("m.safetensors")).blocks
            else:
                with pytest.raises(InputError) as exc:
                    audit(server.url("m.safetensors"))
                message = str(exc.value)
                assert case.words in message and "\n" not in message, message
        took = time.monotonic() - start
        received = client().counters.bytes - before
        if name == "a redirect loop":
            assert server.log.requests == 9  # the first request and 8 redirects, then it stops
    assert took < case.seconds, took
    assert received <= case.most_bytes, received


def test_a_drip_fed_body_ends_with_the_models_deadline(data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """A byte a second never trips a read's timeout (30 s): the model's deadline ends the read."""
    monkeypatch.setenv("MHAINSPECT_REMOTE_TIMEOUT", "30")
    with ScriptedServer(_serving(Case(lambda d, h: Answer(206, ranged(d, h).headers, ranged(d, h).body,
                                                                 trickle=1.0), None, 0), data)) as server:
        start = time.monotonic()
        with model_deadline(2.5), pytest.raises(InputError, match=r"took longer than its 2.5 s \(--timeout\)"):
            audit(server.url("m.safetensors"))
        assert time.monotonic() - start < 4.5


def test_a_suffix_range_answered_with_other_bytes_is_refused(quick: None) -> None:
    """A range from the end (an archive's directory, the file's size unknown) answered with bytes
    that are not the file's last ones."""
    body = bytes(range(256)) * 4

    def script(path: str, headers: Mapping[str, str]) -> Answer:
        assert headers.get("range") == "bytes=-100"
        if path.endswith("good.pt"):
            return Answer(206, (("Content-Range", f"bytes 924-1023/{len(body)}"),), body[924:])
        if path.endswith("unsized.pt"):
            return Answer(206, (("Content-Range", "bytes 924-1023/*"),), body[924:])
        return Answer(206, (("Content-Range", f"bytes 0-99/{len(body)}"),), body[:100])

    with ScriptedServer(script) as server:
        assert HttpBlob(server.url("good.pt"), name="good.pt", basename="good.pt").tail(100) == body[924:]
        for bad, words in (("head.pt", "sent bytes 0-99 of 1024 for the file's last 100 bytes"),
                           ("unsized.pt", "sent bytes 924-1023 of * for the file's last 100 bytes")):
            with pytest.raises(InputError, match=re.escape(words)):
                HttpBlob(server.url(bad), name=bad, basename=bad).tail(100)


@pytest.fixture
def hub_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    token_env(monkeypatch, tmp_path, retries=1, timeout=1)
    hub_module._LISTINGS.clear()
    yield
    hub_module._LISTINGS.clear()


def test_a_listing_answered_with_an_endless_part_is_refused(hub_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The listing is asked whole: a 206 (a Content-Range of a terabyte, a body without end) is not
    read, where its Content-Range would have been the length read."""
    def script(path: str, headers: Mapping[str, str]) -> Answer:
        return Answer(206, (("Content-Range", f"bytes 0-{10**12 - 1}/{10**12}"),), b"[" * 65536, endless=True)

    with ScriptedServer(script) as server:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.port}")
        before = client().counters.bytes
        start = time.monotonic()
        with pytest.raises(InputError, match=r"answered a request for the whole file with a part of it"):
            audit("hf://org/x")
        assert time.monotonic() - start < 3 and client().counters.bytes == before


def test_https_to_plain_http_is_never_followed(hub_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An HTTPS endpoint whose file redirects to plain HTTP (its storage, same host, another port):
    not followed, so neither the signed URL nor the bytes travel off TLS; the token stays at the
    endpoint."""
    context, cert_path = tls_server_context(tmp_path)
    trust(monkeypatch, cert_path)
    data = b"x" * 100
    with ScriptedServer(lambda path, headers: ranged(data, headers)) as plain:
        files = {"model.safetensors": data}
        listing = {"sha": COMMIT, "siblings": [{"rfilename": "model.safetensors", "size": len(data)}]}
        base = hub_script(listing, files)

        def endpoint(path: str, headers: Mapping[str, str]) -> Answer:
            if "/resolve/" in path:
                return Answer(302, (("Location", plain.url("lfs/model.safetensors?sig=secret")),))
            return base(path, headers)

        with ScriptedServer(endpoint, tls=context) as secure:
            monkeypatch.setenv("HF_ENDPOINT", f"https://127.0.0.1:{secure.port}")
            with pytest.raises(InputError) as exc:
                audit("hf://org/x")
            assert all(auth == f"Bearer {TOKEN}" for _p, auth in secure.log.auth)
        assert "redirected from HTTPS to plain HTTP" in str(exc.value) and "secret" not in str(exc.value)
        assert plain.log.requests == 0


# ------------------------------------------------------------------------------------ object stores


def _s3_page(keys: range, token: int | None) -> bytes:
    """A ListObjectsV2 page naming ``keys`` (more follow when ``token`` is given)."""
    contents = "".join(f"<Contents><Key>big/f{i}.bin</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
                       f"<ETag>&quot;x&quot;</ETag><Size>1</Size><StorageClass>STANDARD</StorageClass></Contents>"
                       for i in keys)
    more = (f"<IsTruncated>true</IsTruncated><NextContinuationToken>t{token}</NextContinuationToken>"
            if token is not None else "<IsTruncated>false</IsTruncated>")
    return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>models</Name><Prefix>big/</Prefix><KeyCount>{len(keys)}</KeyCount><MaxKeys>1000</MaxKeys>"
            f"{more}{contents}</ListBucketResult>").encode()


@pytest.fixture
def s3_at(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Script], ScriptedServer]]:
    """An S3 endpoint on 127.0.0.1 whose every answer a test scripts (s3fs pointed at it)."""
    pytest.importorskip("s3fs")
    import fsspec

    from mhainspect.sources.transports import store

    started: list[ScriptedServer] = []

    def start(script: Script) -> ScriptedServer:
        server = ScriptedServer(script).__enter__()
        started.append(server)
        monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": f"http://127.0.0.1:{server.port}",
                                                       "key": "testing", "secret": "testing"})
        store._LISTINGS.clear()
        store.counters.requests = store.counters.bytes = 0
        return server

    yield start
    store._LISTINGS.clear()
    for server in started:
        server.__exit__(None, None, None)


def _pages_without_end(serve: Callable[[Script], ScriptedServer], address: str,
                       page: Callable[[range, int | None], Answer]) -> None:
    """A store that answers every listing page with 1,000 more names and a next page (the last at
    50: a reader that does not stop fails, never hangs): ``address`` is refused in one line once the
    listing holds one name over MAX_LISTED_FILES, after 11 pages. ``page(names, next)``: the
    store's page of those names, ``next`` its continuation (None: the last)."""
    from mhainspect.sources.tree import MAX_LISTED_FILES

    pages: list[str] = []

    def script(path: str, headers: Mapping[str, str]) -> Answer:
        pages.append(path)
        n = len(pages) - 1
        return page(range(n * 1000, n * 1000 + 1000), n if n < 50 else None)

    serve(script)
    start = time.monotonic()
    with model_deadline(20), pytest.raises(InputError, match=f"more than {MAX_LISTED_FILES:,} files"):
        audit(address)
    assert time.monotonic() - start < 15
    assert len(pages) == MAX_LISTED_FILES // 1000 + 1


def test_an_s3_listing_that_pages_without_end_stops_past_the_cap(s3_at: Callable[[Script], ScriptedServer]) -> None:
    """ListObjectsV2 pages of 1,000 keys, always one more: the listing stops once it holds one key
    over MAX_LISTED_FILES (11 pages), refused in one line."""
    _pages_without_end(s3_at, "s3://models/big/", lambda names, more: Answer(
        200, (("Content-Type", "application/xml"),), _s3_page(names, more)))


def test_an_s3_listing_of_empty_pages_without_end_ends_with_the_deadline(s3_at: Callable[[Script], ScriptedServer]
                                                                        ) -> None:
    pages: list[float] = []

    def script(path: str, headers: Mapping[str, str]) -> Answer:
        pages.append(time.monotonic())  # (no more after 8 s: a reader that does not stop fails, never hangs)
        more = len(pages) if pages[-1] - pages[0] < 8 else None
        return Answer(200, (("Content-Type", "application/xml"),), _s3_page(range(0), more))

    s3_at(script)
    start = time.monotonic()
    with model_deadline(2), pytest.raises(InputError, match=r"took longer than its 2 s \(--timeout\)"):
        audit("s3://models/big/")
    assert time.monotonic() - start < 4 and len(pages) > 1


def test_an_s3_redirect_to_another_host_carries_no_signature(s3_at: Callable[[Script], ScriptedServer],
                                                             data: bytes) -> None:
    """The store library signs each request for the endpoint (AWS SigV4 in Authorization): when
    the endpoint redirects a listing or a read to another host, that host gets no Authorization."""
    with ScriptedServer(lambda path, headers: ranged(data, headers), host="localhost") as other:
        def endpoint(path: str, headers: Mapping[str, str]) -> Answer:
            assert headers.get("authorization", "").startswith("AWS4-HMAC-SHA256")  # signed for the endpoint
            if "list-type" in path:
                page = _s3_page(range(0), None).replace(
                    b"<IsTruncated>", b"<Contents><Key>big/m.safetensors</Key><LastModified>2026-01-01T00:00:00.000Z"
                    b"</LastModified><ETag>&quot;x&quot;</ETag><Size>" + str(len(data)).encode() +
                    b"</Size><StorageClass>STANDARD</StorageClass></Contents><IsTruncated>")
                return Answer(200, (("Content-Type", "application/xml"),), page)
            return Answer(307, (("Location", other.url("elsewhere/m.safetensors")),))

        s3_at(endpoint)
        with model_deadline(20):
            try:
                audit("s3://models/big/m.safetensors")
            except InputError as exc:
                assert "\n" not in str(exc)
        assert other.log.requests >= 1  # the read was redirected there
        assert [auth for _p, auth in other.log.auth] == [None] * other.log.requests


def _s3_object(data: bytes, answer: Callable[[bytes, Mapping[str, str]], Answer]) -> Script:
    """An S3 endpoint holding big/m.safetensors (``data``), whose GetObject answers are ``answer``."""
    def script(path: str, headers: Mapping[str, str]) -> Answer:
        if "list-type" in path:
            entry = (b"<Contents><Key>big/m.safetensors</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
                     b"<ETag>&quot;x&quot;</ETag><Size>" + str(len(data)).encode() +
                     b"</Size><StorageClass>STANDARD</StorageClass></Contents><IsTruncated>")
            return Answer(200, (("Content-Type", "application/xml"),),
                          _s3_page(range(0), None).replace(b"<IsTruncated>", entry))
        if path.split("?")[0].endswith("/big/m.safetensors"):
            return answer(data, headers)
        return Answer(404, (("Content-Type", "application/xml"),), b"<Error><Code>NoSuchKey</Code></Error>")

    return script


@pytest.fixture(scope="module")
def long_header(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A safetensors file whose header is longer than the first range (a second read, at 64 KiB)."""
    path = tmp_path_factory.mktemp("matrix") / "long.safetensors"
    write_safetensors(path, llama_tensors(64, 4, 2, 120))
    data = path.read_bytes()
    assert 8 + int.from_bytes(data[:8], "little") > FIRST
    return data


def _gcs_object(data: bytes, answer: Callable[[bytes, Mapping[str, str]], Answer]) -> Script:
    """A GCS endpoint (JSON API) holding big/m.safetensors (``data``), whose media GETs answer ``answer``."""
    import json

    def script(path: str, headers: Mapping[str, str]) -> Answer:
        if path.startswith("/storage/v1/b/models/o") and "alt=media" not in path:
            item = {"kind": "storage#object", "bucket": "models", "name": "big/m.safetensors", "size": str(len(data))}
            listing = {"kind": "storage#objects", "items": [item], "prefixes": []}
            return Answer(200, (("Content-Type", "application/json"),), json.dumps(listing).encode())
        if "alt=media" in path and "m.safetensors" in path:
            return answer(data, headers)
        return Answer(404, (("Content-Type", "application/json"),), b'{"error": {"code": 404, "message": "No"}}')

    return script


@pytest.fixture
def gcs_at(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Script], ScriptedServer]]:
    """A GCS endpoint on 127.0.0.1 whose every answer a test scripts (gcsfs pointed at it, anonymous)."""
    gcsfs_core = pytest.importorskip("gcsfs.core")
    import fsspec

    from mhainspect.sources.transports import store

    saved = fsspec.registry.get("gs")
    # The plain GCSFileSystem: the experimental zonal-bucket class asks a gRPC API no test server serves.
    fsspec.register_implementation("gs", gcsfs_core.GCSFileSystem, clobber=True)
    started: list[ScriptedServer] = []

    def start(script: Script) -> ScriptedServer:
        server = ScriptedServer(script).__enter__()
        started.append(server)
        monkeypatch.setitem(fsspec.config.conf, "gs", {"endpoint_url": f"http://127.0.0.1:{server.port}",
                                                       "token": "anon"})
        store._LISTINGS.clear()
        store.counters.requests = store.counters.bytes = 0
        return server

    yield start
    store._LISTINGS.clear()
    if saved is not None:
        fsspec.register_implementation("gs", saved, clobber=True)
    for server in started:
        server.__exit__(None, None, None)


STORE_READS = ["200 whole object, endless", "200 whole object, a later range", "206 elsewhere",
               "206 endless past its Content-Range", "206 gzip bomb"]


@pytest.mark.parametrize("scheme", ["s3", "gs"])
@pytest.mark.parametrize("how", STORE_READS)
def test_a_store_read_takes_only_its_range(request: pytest.FixtureRequest, data: bytes, long_header: bytes,
                                           scheme: str, how: str) -> None:
    """The store libraries' cat_file reads whatever body comes (and gcsfs's aiohttp inflates a
    compressed one): a store that ignores Range would be downloaded whole. Each read takes the
    range's length at most, and compressed bytes are never taken for the object's."""
    from mhainspect.sources.transports import store

    answers: dict[str, tuple[bytes, Callable[[bytes, Mapping[str, str]], Answer], str | None, int]] = {
        "200 whole object, endless": (data, lambda d, h: Answer(200, (), d, endless=True), None, FIRST),
        "200 whole object, a later range": (long_header, lambda d, h: Answer(200, (), d, endless=True),
                                            "the store ignores Range requests", FIRST),
        "206 elsewhere": (data, _shifted, "for a request starting at 0", 0),
        "206 endless past its Content-Range": (data, lambda d, h: Answer(206, ranged(d, h).headers, ranged(d, h).body,
                                                                         endless=True), None, FIRST),
        "206 gzip bomb": (data, lambda d, h: Answer(206, (("Content-Range", f"bytes 0-{len(_BOMB) - 1}/{len(d)}"),
                                                          ("Content-Encoding", "gzip")), _BOMB),
                          "compressed (Content-Encoding 'gzip')", 0),
    }
    content, answer, words, most = answers[how]
    at = request.getfixturevalue("s3_at" if scheme == "s3" else "gcs_at")
    at((_s3_object if scheme == "s3" else _gcs_object)(content, answer))
    start = time.monotonic()
    with model_deadline(20):
        if words is None:
            assert audit(f"{scheme}://models/big/m.safetensors").blocks
        else:
            with pytest.raises(InputError, match=re.escape(words)):
                audit(f"{scheme}://models/big/m.safetensors")
    assert time.monotonic() - start < 10
    assert store.counters.bytes <= most, store.counters.bytes


def test_a_gcs_listing_that_pages_without_end_stops_past_the_cap(gcs_at: Callable[[Script], ScriptedServer]) -> None:
    """objects.list pages of 1,000 objects, always a next page token: the listing stops once it
    holds one object over MAX_LISTED_FILES (11 pages), refused in one line."""
    import json

    def page(names: range, more: int | None) -> Answer:
        body: dict[str, object] = {"kind": "storage#objects", "items": [
            {"kind": "storage#object", "bucket": "models", "name": f"big/f{i}.bin", "size": "1"} for i in names]}
        if more is not None:
            body["nextPageToken"] = f"t{more}"
        return Answer(200, (("Content-Type", "application/json"),), json.dumps(body).encode())

    _pages_without_end(gcs_at, "gs://models/big/", page)
