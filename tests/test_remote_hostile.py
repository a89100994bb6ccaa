"""Servers that misbehave on purpose, on 127.0.0.1: where a token may go, whatever the redirect.

The Hub endpoint (``HF_ENDPOINT``) is a scripted server; a second server, reached by another name
(``localhost``, an IPv4-mapped IPv6 literal, a trailing dot...), records every Authorization header
it receives. Besides the wire, a spy on urllib3's connection pools records the host each request
was actually sent to with its credentials: the token goes to the endpoint's origin only.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from remote_servers import Answer, ScriptedServer

from mhainspect.errors import InputError
from mhainspect.pipeline import audit
from mhainspect.sources.transports import hub as hub_module
from mhainspect.sources.transports.http import origin, redirect_target

TOKEN = "hf_hostile_test_secret_987"
LISTING = "/api/models/org/x"


@dataclass
class Pair:
    endpoint: ScriptedServer
    other: ScriptedServer
    sent: list[tuple[str, int, str | None]]  # (host, port, Authorization) of every request urllib3 sent

    def credentials_went_elsewhere(self) -> list[tuple[str, int]]:
        return [(h, p) for h, p, auth in self.sent if auth is not None and (h, p) != ("127.0.0.1", self.endpoint.port)]


def token_env(monkeypatch: pytest.MonkeyPatch, home: Path, *, retries: int, timeout: float) -> None:
    """A Hub session holding TOKEN, with its own cache under ``home`` and the given request limits
    (the token must never reach another origin; nothing of the user's own Hub setup is read)."""
    for name in ("HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_IMPLICIT_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HOME", str(home / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "cache"))
    monkeypatch.setenv("MHAINSPECT_REMOTE_RETRIES", str(retries))
    monkeypatch.setenv("MHAINSPECT_REMOTE_TIMEOUT", str(timeout))


@pytest.fixture
def hub_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_env(monkeypatch, tmp_path, retries=1, timeout=2)
    hub_module._LISTINGS.clear()


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, str | None]]:
    """Every request as urllib3's pool sends it: the host it is connected to and its credentials."""
    import urllib3.connectionpool

    sent: list[tuple[str, int, str | None]] = []
    real = urllib3.connectionpool.HTTPConnectionPool.urlopen

    def urlopen(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        headers = kwargs.get("headers") or {}
        sent.append((str(self.host), int(self.port or 80), headers.get("Authorization")))
        return real(self, method, url, *args, **kwargs)

    monkeypatch.setattr(urllib3.connectionpool.HTTPConnectionPool, "urlopen", urlopen)
    return sent


def _not_found(path: str, headers: Mapping[str, str]) -> Answer:
    return Answer(404, (("X-Error-Code", "RepoNotFound"),), b"{}")


@pytest.fixture
def pair(hub_env: None, spy: list[tuple[str, int, str | None]], monkeypatch: pytest.MonkeyPatch) -> Iterator[Pair]:
    """An endpoint whose listing answer is a redirect the test sets (``locations[0]``) and another
    server that answers 404 to everything (``localhost``: another origin)."""
    locations: list[str] = []

    def endpoint(path: str, headers: Mapping[str, str]) -> Answer:
        if path.startswith(LISTING) and locations:
            return Answer(302, (("Location", locations[0]),))
        return _not_found(path, headers)

    with ScriptedServer(endpoint) as ep, ScriptedServer(_not_found, host="localhost") as other:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{ep.port}")
        p = Pair(ep, other, spy)
        p.locations = locations  # type: ignore[attr-defined]
        yield p


def _redirect_to(pair: Pair, location: str) -> str:
    pair.locations[:] = [location]  # type: ignore[attr-defined]
    hub_module._LISTINGS.clear()
    with pytest.raises(InputError) as exc:
        audit("hf://org/x")
    message = str(exc.value)
    assert TOKEN not in message and "\n" not in message
    return message


@pytest.mark.parametrize("template", [
    "http://localhost:{o}\\@127.0.0.1:{e}/api/models/org/x",  # urllib.parse reads the endpoint, urllib3 the other
    "http://localhost:{o}\\\\127.0.0.1:{e}/x",
    "http://127.0.0.1:{e}@localhost:{o}/x",  # userinfo
    "http://127.0.0.1%3A{e}@localhost:{o}/x",  # userinfo, percent-encoded
    "http://local\thost:{o}/x",  # a tab (urljoin drops it: parsers disagree)
    "http://localhost:{o}/x y",
    "file:///etc/passwd",
    "ftp://localhost:{o}/x",
])
def test_confusing_redirects_are_refused(pair: Pair, template: str) -> None:
    location = template.format(o=pair.other.port, e=pair.endpoint.port)
    message = _redirect_to(pair, location)
    assert "not followed" in message or "not a URL" in message
    assert pair.other.log.requests == 0
    assert all(auth == f"Bearer {TOKEN}" for _path, auth in pair.endpoint.log.auth)


@pytest.mark.parametrize("template", [
    "http://local%68ost:{o}/x",  # a percent-encoded host: urllib3 decodes it and connects to localhost
    "HTTP://LOCALHOST:{o}/x",  # an uppercase scheme and host
    "http://localhost.:{o}/x",  # a trailing dot
    "http://[::ffff:127.0.0.1]:{o}/x",  # an IPv6 literal (IPv4-mapped: the other server on 127.0.0.1)
    "http://[::ffff:127.0.0.1]:{e}/x",  # the endpoint's own port by another spelling: another origin
    "http://127.0.0.1:{o}/x",  # the endpoint's own host, another port
    "//localhost:{o}/x",  # scheme-relative
])
def test_other_origins_never_get_the_token(pair: Pair, template: str) -> None:
    _redirect_to(pair, template.format(o=pair.other.port, e=pair.endpoint.port))
    assert all(auth is None for _path, auth in pair.other.log.auth)
    assert pair.credentials_went_elsewhere() == []
    assert pair.sent and pair.sent[0][2] == f"Bearer {TOKEN}"  # the endpoint itself got it
    if "[::ffff" not in template and "localhost." not in template:
        assert pair.other.log.requests == 1  # followed, without the token


def test_same_origin_keeps_it_and_a_detour_loses_it(pair: Pair) -> None:
    e, o = pair.endpoint.port, pair.other.port
    # A redirect within the endpoint keeps the token (relative, and by its own spelling).
    for location in ("/elsewhere", f"http://127.0.0.1:{e}/elsewhere"):
        pair.endpoint.log.reset()
        _redirect_to(pair, location)
        assert [auth for _p, auth in pair.endpoint.log.auth] == [f"Bearer {TOKEN}"] * 2
    # A redirect elsewhere, then back to the endpoint: no token after the detour.
    pair.other.script = lambda path, headers: Answer(302, (("Location", f"http://127.0.0.1:{e}/back"),))
    pair.endpoint.log.reset()
    _redirect_to(pair, f"http://localhost:{o}/detour")
    assert [auth for _p, auth in pair.endpoint.log.auth] == [f"Bearer {TOKEN}", None]
    assert pair.other.log.auth == [("/detour", None)]
    assert pair.credentials_went_elsewhere() == []


def test_origin_is_what_urllib3_connects_to() -> None:
    assert origin("HTTP://Example.COM/x") == ("http", "example.com", 80)
    assert origin("https://example.com:8443") == ("https", "example.com", 8443)
    assert origin("http://local%68ost:1/x") == ("http", "localhost", 1)
    assert origin("http://[::1]:5/") == ("http", "[::1]", 5)
    assert redirect_target("http://a:1/p/q", "r", "m") == "http://a:1/p/r"
    assert redirect_target("http://a:1/p", "https://b/x?sig=1", "m") == "https://b/x?sig=1"
    for bad in ("http://b:1\\@a:1/", "http://u@b/", "http://b/\x00", "data:,x", "javascript:x", "http://[::1"):
        with pytest.raises(InputError):
            redirect_target("http://a:1/", bad, "m")


# ------------------------------------------------------------------------------------------- time


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests may wait 1 s for data (4 s in all), one try each unless a test says otherwise."""
    monkeypatch.setenv("MHAINSPECT_REMOTE_TIMEOUT", "1")
    monkeypatch.setenv("MHAINSPECT_REMOTE_RETRIES", "1")


def _fails_within(spec: str, seconds: float) -> str:
    start = time.monotonic()
    with pytest.raises(InputError) as exc:
        audit(spec)
    took = time.monotonic() - start
    assert took < seconds, (took, str(exc.value))
    message = str(exc.value)
    assert "\n" not in message and TOKEN not in message
    return message


@pytest.mark.parametrize("where", ["head", "body"])
def test_a_trickling_server_ends_within_the_request_deadline(quick: None, where: str) -> None:
    """A byte every 0.2 s never trips a 1 s read timeout: the request's deadline (4 s) ends it."""
    body = b"x" * 200

    def script(path: str, headers: Mapping[str, str]) -> Answer:
        if where == "head":
            return Answer(206, (("Content-Range", f"bytes 0-199/{len(body)}"),) * 20, body, trickle=0.2)
        return Answer(206, (("Content-Range", f"bytes 0-199/{len(body)}"),), body, trickle=0.1)

    with ScriptedServer(script) as server:
        message = _fails_within(server.url("m.safetensors"), 7)
    assert "did not answer in full within 4 s" in message


def test_the_model_deadline_bounds_every_request(quick: None) -> None:
    from mhainspect.sources.deadline import model_deadline

    def script(path: str, headers: Mapping[str, str]) -> Answer:
        return Answer(206, (("Content-Range", "bytes 0-9/10"),), b"0123456789", trickle=0.3)

    with ScriptedServer(script) as server, model_deadline(1.5):
        message = _fails_within(server.url("m.safetensors"), 3.5)
    assert "took longer than its 1.5 s (--timeout)" in message


@pytest.mark.parametrize(("after", "words"), [("100000", "retry after 100,000 s"), ("nan", "'nan') is not a time"),
                                              ("inf", "'inf') is not a time"), ("-5", "'-5') is not a time"),
                                              ("Wed, 21 Oct 2099 07:28:00 GMT", "retry after")])
def test_retry_after_beyond_the_cap_fails_at_once(quick: None, monkeypatch: pytest.MonkeyPatch, after: str,
                                                  words: str) -> None:
    monkeypatch.setenv("MHAINSPECT_REMOTE_RETRIES", "4")
    with ScriptedServer(lambda path, headers: Answer(429, (("Retry-After", after),))) as server:
        message = _fails_within(server.url("m.safetensors"), 2)
        assert server.log.requests == 1
    assert "rate limited (HTTP 429)" in message and words in message


def test_retry_after_is_honoured_within_the_total_wait(quick: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from mhainspect.sources.transports import http

    monkeypatch.setenv("MHAINSPECT_REMOTE_RETRIES", "4")
    tries: list[float] = []

    def script(path: str, headers: Mapping[str, str]) -> Answer:
        tries.append(time.monotonic())
        return Answer(503, (("Retry-After", "0.5"),))

    with ScriptedServer(script) as server:
        _fails_within(server.url("m.safetensors"), 4)  # 4 tries, 3 waits of 0.5 s
        assert len(tries) == 4 and all(b - a >= 0.45 for a, b in zip(tries, tries[1:]))
        tries.clear()
        monkeypatch.setattr(http, "MAX_RETRY_WAIT", 0.8)
        message = _fails_within(server.url("m.safetensors"), 2)
        assert len(tries) == 2 and "server busy (HTTP 503), retry after 0.5 s" in message


def test_batch_reports_the_good_model_after_a_slow_one(quick: None, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from cli_run import in_process

    standard = Path(__file__).resolve().parents[1] / "sample_models" / "standard_mha.onnx"

    def script(path: str, headers: Mapping[str, str]) -> Answer:
        return Answer(206, (("Content-Range", "bytes 0-9/10"),), b"0123456789", trickle=0.3)

    monkeypatch.setenv("MHAINSPECT_REMOTE_TIMEOUT", "30")  # only --timeout can end it in time
    with ScriptedServer(script) as server:
        listing = tmp_path / "models.txt"
        listing.write_text(f"{server.url('slow.safetensors')}\n{standard}\n", encoding="utf-8")
        start = time.monotonic()
        run = in_process(capsys, monkeypatch)("--from-file", listing, "--timeout", "1.5")
        assert time.monotonic() - start < 10
    records = [json.loads(line) for line in run.out.splitlines()]
    assert run.code == 2 and len(records) == 2
    assert records[0]["error"]["kind"] == "network" and "1.5 s (--timeout)" in records[0]["error"]["message"]
    assert records[1]["model"]["total_params"] > 0
    bad = in_process(capsys, monkeypatch)(str(standard), "--timeout", "nan")
    assert bad.code == 2 and "--timeout 'nan'" in bad.err and len(bad.err.strip().splitlines()) == 1


# -------------------------------------------------------------------------------- fan-out, listings

COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


def ranged(data: bytes, headers: Mapping[str, str]) -> Answer:
    """``data`` answered as a file server answers a (single) range request."""
    m = re.match(r"bytes=(\d+)-(\d*)$", headers.get("range", ""))
    if m is None:
        return Answer(200, (), data)
    start = int(m.group(1))
    end = min(int(m.group(2)) if m.group(2) else len(data) - 1, len(data) - 1)
    if start >= len(data):
        return Answer(416, (("Content-Range", f"bytes */{len(data)}"),))
    return Answer(206, (("Content-Range", f"bytes {start}-{end}/{len(data)}"),), data[start:end + 1])


def hub_script(listing: object, files: Mapping[str, bytes] | None = None,
               raw_listing: bytes | None = None) -> Callable[[str, Mapping[str, str]], Answer]:
    """A Hub whose repo org/x answers ``listing`` (JSON, or ``raw_listing`` as it is) and serves ``files``."""
    files = files or {}

    def script(path: str, headers: Mapping[str, str]) -> Answer:
        if path.startswith("/api/models/org/x"):
            return Answer(200, (("Content-Type", "application/json"),),
                          raw_listing if raw_listing is not None else json.dumps(listing).encode())
        m = re.match(r"^/org/x/resolve/[^/]+/(.+)$", path.split("?")[0])
        if m is not None and m.group(1) in files:
            return ranged(files[m.group(1)], headers)
        return Answer(404, (("X-Error-Code", "EntryNotFound"),), b"{}")

    return script


def _siblings(names: Mapping[str, int]) -> dict[str, object]:
    return {"sha": COMMIT, "siblings": [{"rfilename": n, "size": s} for n, s in names.items()]}


@pytest.fixture
def hub_at(hub_env: None, monkeypatch: pytest.MonkeyPatch) -> Callable[..., ScriptedServer]:
    """A ScriptedServer started as HF_ENDPOINT (stopped at the end of the test)."""
    started: list[ScriptedServer] = []

    def start(script: Callable[[str, Mapping[str, str]], Answer]) -> ScriptedServer:
        server = ScriptedServer(script).__enter__()
        started.append(server)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.port}")
        hub_module._LISTINGS.clear()
        return server

    yield start  # type: ignore[misc]
    for server in started:
        server.__exit__(None, None, None)


def _gguf_bytes(tmp_path: Path) -> bytes:
    from gguf_files import Decoder

    path = tmp_path / "one.gguf"
    Decoder().write(path)
    return path.read_bytes()


def test_a_split_gguf_url_guesses_few_parts_and_stops_at_the_first_failure(quick: None, tmp_path: Path) -> None:
    from mhainspect.frontends.gguf.reader import MAX_GUESSED_PARTS
    from mhainspect.sources.parallel import CONCURRENCY

    first = _gguf_bytes(tmp_path)

    def script(path: str, headers: Mapping[str, str]) -> Answer:
        if "-00001-of-" in path:
            return ranged(first, headers)
        if "-00002-of-" in path:
            return Answer(404, (), b"no")
        return Answer(206, (("Content-Range", "bytes 0-65535/900000"),), b"", stall=30)  # the others stall

    with ScriptedServer(script) as server:
        message = _fails_within(server.url("m-00001-of-04096.gguf"), 5)
        assert f"at most {MAX_GUESSED_PARTS}" in message and server.log.requests == 1
        server.log.reset()
        message = _fails_within(server.url(f"m-00001-of-{MAX_GUESSED_PARTS:05d}.gguf"), 8)
        assert "m-00002-of-" in message and "not found" in message
        requests = server.log._requests  # the stalled answers are still in flight: not settled
    assert requests <= 2 + CONCURRENCY + 2  # not every one of 256 parts


def test_listing_names_that_leave_the_repo_are_never_paths(hub_at: Callable[..., ScriptedServer]) -> None:
    from mhainspect.frontends.folders import expand_models

    gguf = {"good/model.gguf": 10}
    bad = {"/etc/model.gguf": 1, "a//b.gguf": 1, "./c.gguf": 1, "../d.gguf": 1, "e/../../f.gguf": 1,
           "g\\..\\h.gguf": 1, "nul\x00.gguf": 1, "": 1, "\x1b[31mred.gguf": 1, "c1\x9b2J.gguf": 1,
           "bidi\u202efgg.gguf": 1}
    hub_at(hub_script(_siblings({**bad, **gguf})))
    start = time.monotonic()
    assert expand_models(["hf://org/x"]) == ("hf://org/x/good/model.gguf",)
    assert time.monotonic() - start < 5


def test_listing_caps(hub_at: Callable[..., ScriptedServer]) -> None:
    from mhainspect.frontends.kinds import models_below
    from mhainspect.sources.tree import MAX_LISTED_FILES, Listed

    class Listing(Listed):
        def __init__(self, files: dict[str, int | None]) -> None:
            self._files = files

        def files(self) -> dict[str, int | None]:
            return self._files

    hub_at(hub_script(_siblings({f"f{i}/README.md": 1 for i in range(MAX_LISTED_FILES + 1)})))
    with pytest.raises(InputError, match=f"more than {MAX_LISTED_FILES:,} files"):
        audit("hf://org/x")
    # A listing just under the cap: its folders are walked once each (no rescan per folder).
    files: dict[str, int | None] = {f"f{i}/g/README.md": 1 for i in range(MAX_LISTED_FILES - 1)}
    files["f7/g/model.onnx"] = 1
    start = time.monotonic()
    assert models_below(Listing(files), "") == ["f7/g/model.onnx"]
    assert time.monotonic() - start < 15  # a quadratic walk takes minutes


def test_an_index_naming_too_many_shards_is_refused_before_reading_them(hub_at: Callable[..., ScriptedServer]
                                                                        ) -> None:
    from mhainspect.ir.limits import MAX_SHARD_FILES

    n = MAX_SHARD_FILES + 1
    shards = [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    index = json.dumps({"weight_map": {f"t{i}": s for i, s in enumerate(shards)}}).encode()
    config = json.dumps({"model_type": "llama"}).encode()
    files = {"config.json": config, "model.safetensors.index.json": index}
    server = hub_at(hub_script(_siblings({**{s: 100 for s in shards}, "config.json": len(config),
                                          "model.safetensors.index.json": len(index)}), files))
    with pytest.raises(InputError, match=f"names {n:,} shard files, more than the {MAX_SHARD_FILES:,}"):
        audit("hf://org/x")
    assert server.log.requests == 3  # the listing, config.json, the index: no shard


@pytest.mark.parametrize(("listing", "words"), [
    (b'{"sha": "' + COMMIT.encode() + b'", "siblings": 5}', "not what its API returns"),
    (b"[" * 200_000, "not what its API returns"),
    (b'{"sha": "../../../x", "siblings": []}', "no commit id"),
    (b'{"sha": 7, "siblings": []}', "not what its API returns"),
    (b"[1, 2]", "not what its API returns"),
])
def test_malformed_listings_end_in_one_line(hub_at: Callable[..., ScriptedServer], listing: bytes,
                                            words: str) -> None:
    hub_at(hub_script(None, raw_listing=listing))
    with pytest.raises(InputError, match=re.escape(words)):
        audit("hf://org/x")


@pytest.mark.parametrize("spec", ["hf://org/x@../../etc", "hf://org/x@a%2F..%2Fb", "hf://org/x@%2E%2E",
                                  "hf://org/x@a%5Cb", "hf://org/x@a%00b"])
def test_revisions_that_would_leave_the_cache_are_refused(spec: str) -> None:
    from mhainspect.sources.address import parse

    with pytest.raises(InputError, match="not a revision|'..' in a path"):
        parse(spec)


def test_a_batch_reports_every_good_model_after_a_malformed_listing(hub_at: Callable[..., ScriptedServer],
                                                                    tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from cli_run import in_process

    standard = Path(__file__).resolve().parents[1] / "sample_models" / "standard_mha.onnx"
    hub_at(hub_script(None, raw_listing=b'{"sha": "' + COMMIT.encode() + b'", "siblings": 5}'))
    listing = tmp_path / "models.txt"
    listing.write_text(f"hf://org/x\n{standard}\nhf://org/x/sub\n", encoding="utf-8")
    run = in_process(capsys, monkeypatch)("--from-file", listing)
    records = {r["input"]: r for r in map(json.loads, run.out.splitlines())}
    assert run.code == 2 and len(records) == 3 and "Traceback" not in run.err
    assert records["hf://org/x"]["error"]["kind"] == "bad_server"
    assert records[str(standard)]["model"]["total_params"] > 0


# ------------------------------------------------------------------------------------------ sizes


def test_a_config_the_listing_says_is_huge_is_never_fetched(hub_at: Callable[..., ScriptedServer],
                                                             tmp_path: Path) -> None:
    from remote_models import llama_tensors, write_safetensors

    write_safetensors(tmp_path / "model.safetensors", llama_tensors(64, 4, 2, 1))
    weights = (tmp_path / "model.safetensors").read_bytes()
    server = hub_at(hub_script(_siblings({"config.json": 500_000_000, "model.safetensors": len(weights)}),
                               {"model.safetensors": weights, "config.json": b"{}"}))
    with pytest.raises(InputError, match=r"config.json: larger than 16,777,216 bytes \(500,000,000 bytes\)"):
        audit("hf://org/x")
    assert not [p for p in server.log.by_path if "config.json" in p]


def test_a_config_whose_first_range_states_a_huge_size_costs_that_range(quick: None, tmp_path: Path) -> None:
    from remote_models import llama_tensors, write_safetensors

    from mhainspect.sources.blob import SMALL_FIRST

    write_safetensors(tmp_path / "model.safetensors", llama_tensors(64, 4, 2, 1))
    weights = (tmp_path / "model.safetensors").read_bytes()

    def script(path: str, headers: Mapping[str, str]) -> Answer:
        if path.endswith("config.json"):  # a 500 MB config.json, answered by ranges
            m = re.match(r"bytes=(\d+)-(\d+)$", headers.get("range", ""))
            assert m is not None
            start, end = int(m.group(1)), int(m.group(2))
            return Answer(206, (("Content-Range", f"bytes {start}-{end}/500000000"),), b" " * (end - start + 1))
        return ranged(weights, headers)

    with ScriptedServer(script) as server:
        report = audit(server.url("model.safetensors"))  # the config is optional beside a checkpoint
        assert report.blocks
        ((requests, sent),) = [v for p, v in server.log.by_path.items() if p.endswith("config.json")]
    assert requests == 1 and sent <= SMALL_FIRST


def test_an_endless_listing_is_cut_at_its_cap(hub_at: Callable[..., ScriptedServer]) -> None:
    from mhainspect.sources.transports.http import client
    from mhainspect.sources.transports.hub import MAX_LISTING_BYTES

    def script(path: str, headers: Mapping[str, str]) -> Answer:  # no length, no end
        return Answer(200, (), b'{"sha": "' + COMMIT.encode() + b'", "siblings": [' + b"[" * 65536, endless=True)

    server = hub_at(script)
    before = client().counters.bytes
    with pytest.raises(InputError, match=f"runs past the {MAX_LISTING_BYTES:,} bytes read for a listing"):
        audit("hf://org/x")
    assert server.log.requests == 1
    assert client().counters.bytes - before == MAX_LISTING_BYTES + 1  # the cap and a byte, no more
    # A listing that announces more than the cap is not read at all.
    server.script = lambda path, headers: Answer(200, (("Content-Length", str(10 * MAX_LISTING_BYTES)),),
                                                 b"[" * 1024, close=True)
    hub_module._LISTINGS.clear()
    before = client().counters.bytes
    with pytest.raises(InputError, match=f"announces {10 * MAX_LISTING_BYTES:,} bytes, more than the"):
        audit("hf://org/x")
    assert client().counters.bytes == before


def test_the_cli_in_a_process_with_a_token_set(tmp_path: Path) -> None:
    """The issue's harness in small: a fresh process, HF_TOKEN set, a list mixing a confusing
    redirect, a trickling server, a malformed listing and a good model: one record each, no
    traceback, the token in no output and never at the other server."""
    import subprocess
    import sys

    standard = Path(__file__).resolve().parents[1] / "sample_models" / "standard_mha.onnx"

    def slow(path: str, headers: Mapping[str, str]) -> Answer:
        return Answer(206, (("Content-Range", "bytes 0-9/10"),), b"0123456789", trickle=0.5)

    with ScriptedServer(_not_found, host="localhost") as other, ScriptedServer(slow) as trickle:
        def endpoint(path: str, headers: Mapping[str, str]) -> Answer:
            if path.startswith("/api/models/org/redirect"):
                return Answer(302, (("Location", f"http://localhost:{other.port}\\@127.0.0.1:{ep.port}/x"),))
            if path.startswith("/api/models/org/broken"):
                return Answer(200, (), b"[" * 200_000)
            return _not_found(path, headers)

        with ScriptedServer(endpoint) as ep:
            listing = tmp_path / "models.txt"
            inputs = ["hf://org/redirect", trickle.url("m.safetensors"), "hf://org/broken", str(standard)]
            listing.write_text("\n".join(inputs) + "\n", encoding="utf-8")
            env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "MHAINSPECT_"))}
            env.update({"PYTHONPATH": str(Path(__file__).resolve().parents[1]), "HF_TOKEN": TOKEN,
                        "HF_ENDPOINT": f"http://127.0.0.1:{ep.port}", "HF_HOME": str(tmp_path / "home"),
                        "HF_HUB_CACHE": str(tmp_path / "cache"), "MHAINSPECT_REMOTE_TIMEOUT": "1",
                        "MHAINSPECT_NO_PROGRESS": "1"})
            start = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "mhainspect", "--from-file", str(listing)],
                                  capture_output=True, text=True, env=env, timeout=60)
            assert time.monotonic() - start < 30
        assert all(auth is None for _path, auth in other.log.auth)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "internal error" not in done.stdout + done.stderr
    assert TOKEN not in done.stdout + done.stderr
    records = {r["input"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert set(records) == set(inputs)
    assert "not followed" in records["hf://org/redirect"]["error"]["message"]
    assert records[inputs[1]]["error"]["kind"] == "network"
    assert records["hf://org/broken"]["error"]["kind"] == "bad_server"
    assert records[str(standard)]["model"]["total_params"] > 0


class _UnsizedBlob:
    """A remote file whose answers never state its size (Content-Range: bytes a-b/*)."""

    name = basename = "config.json"
    speculative = True

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reads: list[tuple[int, int]] = []

    def known_size(self) -> int | None:
        return None

    def size(self) -> int:
        raise AssertionError("a small file is read without asking its size")

    def read(self, offset: int, length: int) -> bytes:
        self.reads.append((offset, length))
        return self.data[offset:offset + length]

    def tail(self, length: int) -> bytes:
        raise AssertionError


def test_a_small_file_of_unstated_size_grows_to_its_cap() -> None:
    from mhainspect.sources.blob import SMALL_FIRST, small_file

    small = _UnsizedBlob(b"{}")
    assert small_file(small, 16 * 1024 * 1024) == b"{}" and small.reads == [(0, SMALL_FIRST)]
    middle = _UnsizedBlob(b" " * (SMALL_FIRST * 3 // 2))
    assert len(small_file(middle, 16 * 1024 * 1024)) == SMALL_FIRST * 3 // 2
    assert middle.reads == [(0, SMALL_FIRST), (SMALL_FIRST, SMALL_FIRST)]  # the range doubles the bytes held
    huge = _UnsizedBlob(b" " * (40 * 1024 * 1024))
    with pytest.raises(InputError, match="larger than 16,777,216 bytes"):
        small_file(huge, 16 * 1024 * 1024)
    assert sum(n for _o, n in huge.reads) == 16 * 1024 * 1024 + 1  # never more than the cap and a byte


def tls_server_context(tmp_path: Path, names: tuple[str, ...] = ("localhost",), ips: tuple[str, ...] = ("127.0.0.1",)
                       ) -> tuple[Any, Path]:
    """A server-side TLS context with a self-signed certificate for ``names`` and ``ips``, and the
    certificate's file (for the client to trust)."""
    import datetime
    import ipaddress
    import ssl

    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.timezone.utc)
    alt: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    alt += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return context, cert_path


def trust(monkeypatch: pytest.MonkeyPatch, cert_path: Path) -> None:
    """A new HTTP client that trusts the certificate at ``cert_path`` (and no other)."""
    import certifi

    from mhainspect.sources.transports import http

    monkeypatch.setattr(certifi, "where", lambda: str(cert_path))
    monkeypatch.setattr(http, "_CLIENT", None)


def test_a_trickling_tls_server_ends_within_the_request_deadline(quick: None, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Over HTTPS the watchdog shuts the TLS socket (which took the plain socket's descriptor over)."""
    from mhainspect.sources.transports import http

    context, cert_path = tls_server_context(tmp_path)
    trust(monkeypatch, cert_path)

    def script(path: str, headers: Mapping[str, str]) -> Answer:
        if path.endswith("fast.safetensors"):
            return Answer(404, (), b"no")
        return Answer(206, (("Content-Range", "bytes 0-199/200"),) * 20, b"x" * 200, trickle=0.2)

    with ScriptedServer(script, tls=context) as server:
        with pytest.raises(InputError, match="not found"):
            audit(server.url("fast.safetensors"))  # the TLS connection itself works
        monkeypatch.setattr(http, "_CLIENT", None)  # a new connection: its socket is bound as it opens
        message = _fails_within(server.url("m.safetensors"), 7)
    assert "did not answer in full within 4 s" in message


# ---------------------------------------------------------------------------------- name lookups


@dataclass
class Resolver:
    """socket.getaddrinfo as a test's resolver sees it: ``stuck`` names do not answer (until the test
    ends), ``names`` resolve to 127.0.0.1, every call is recorded."""

    stuck: set[str]
    names: set[str]
    calls: list[str]


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Resolver]:
    import socket
    import threading

    real = socket.getaddrinfo
    release = threading.Event()
    r = Resolver(set(), set(), [])

    def getaddrinfo(host: str, *args: Any, **kwargs: Any) -> Any:
        r.calls.append(host)
        if host in r.stuck:  # until the test ends (30 s at most: a reader that waits for it fails, not hangs)
            release.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "no answer")
        return real("127.0.0.1" if host in r.names else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield r
    release.set()  # the lookups left waiting end with the test


def test_a_resolver_that_never_answers_ends_with_the_deadline(resolver: Resolver, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """getaddrinfo cannot be interrupted: the lookup is waited for within the model's deadline, one
    clear line, exit 2; a batch naming the stuck host three times starts one lookup, not three."""
    from cli_run import in_process

    from mhainspect.sources.transports import lookup

    resolver.stuck.add("stuck.test")
    monkeypatch.setenv("MHAINSPECT_REMOTE_TIMEOUT", "30")  # only --timeout can end it in time
    run = in_process(capsys, monkeypatch)
    start = time.monotonic()
    single = run("http://stuck.test:8/m.safetensors", "--timeout", "1")
    assert time.monotonic() - start < 3
    assert single.code == 2 and single.out == ""
    assert single.err.strip().splitlines() == [
        "mhainspect: error: http://stuck.test:8/m.safetensors: reading this model remotely took longer than its "
        "1 s (--timeout)"]
    listing = tmp_path / "models.txt"
    listing.write_text("".join(f"http://stuck.test:8/{n}.safetensors\n" for n in "abc"), encoding="utf-8")
    start = time.monotonic()
    batch = run("--from-file", listing, "--timeout", "1")
    assert time.monotonic() - start < 6
    records = [json.loads(line) for line in batch.out.splitlines()]
    assert batch.code == 2 and [r["error"]["kind"] for r in records] == ["network"] * 3
    assert resolver.calls.count("stuck.test") == 1  # the first lookup is still in flight: the others wait for it
    # Without a model deadline, the lookup may wait as long as a connection (MHAINSPECT_REMOTE_TIMEOUT).
    monkeypatch.setenv("MHAINSPECT_REMOTE_TIMEOUT", "1")
    resolver.stuck.add("other.test")
    message = _fails_within("http://other.test:8/m.safetensors", 3)
    assert message.endswith("cannot reach other.test:8 (the name other.test did not resolve within 1 s)")
    # Lookups left stuck are bounded: with MAX_PENDING in flight, a new one fails at once.
    pending = len(lookup._PENDING)
    assert pending >= 1  # other.test's, at least
    monkeypatch.setattr(lookup, "MAX_PENDING", pending)
    resolver.stuck.add("third.test")
    message = _fails_within("http://third.test:8/m.safetensors", 0.5)
    assert f"{pending} name lookups are waiting for the resolver already" in message
    assert "third.test" not in resolver.calls


def test_a_lookup_is_used_for_its_connection_under_the_hosts_name(resolver: Resolver, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The addresses found are connected to without a second lookup, and TLS still checks the
    certificate against the host's name (a certificate for model.test only: an IP would fail)."""
    context, cert_path = tls_server_context(tmp_path, names=("model.test",), ips=())
    trust(monkeypatch, cert_path)
    resolver.names.add("model.test")
    hosts: list[str | None] = []

    def script(path: str, headers: Mapping[str, str]) -> Answer:
        hosts.append(headers.get("host"))
        return Answer(404, (), b"no")

    with ScriptedServer(script, tls=context) as server:
        with pytest.raises(InputError, match="not found"):
            audit(f"https://model.test:{server.port}/m.safetensors")
    assert hosts == [f"model.test:{server.port}"]
    assert resolver.calls == ["model.test"]
