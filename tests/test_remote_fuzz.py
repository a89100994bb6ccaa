"""A bounded fuzz pass over what a server answers (deterministic seed, fixed budget).

A small safetensors checkpoint with its config.json is served by a scripted server on 127.0.0.1,
by URL and as a Hub repo (listing, resolve); in each case one answer (chosen by the seed) is
mutated: its status, a header (dropped, garbled, duplicated), its body (cut, extended, flipped,
replaced), its framing (raw bytes, broken chunks, an early close) or its pace. Every case must end
within its deadline in a report or one InputError line (never another exception, never "internal
error", never the token), having received at most 2x the legitimate bytes + 1 MiB.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from remote_models import llama_config, llama_tensors, write_safetensors
from remote_servers import Answer, ScriptedServer
from test_remote_hostile import COMMIT, TOKEN, hub_script, ranged, token_env

from mhainspect.errors import InputError
from mhainspect.pipeline import audit
from mhainspect.sources.deadline import model_deadline
from mhainspect.sources.transports import hub as hub_module
from mhainspect.sources.transports.http import client

SEED = 20261207
CASES = 48
MIB = 1024 * 1024
Mutation = Callable[[random.Random, Answer], Answer]


def _status(rng: random.Random, a: Answer) -> Answer:
    status = rng.choice([199, 200, 204, 206, 301, 302, 304, 307, 400, 401, 403, 404, 410, 416, 418, 429, 500, 502,
                         503, 599, 999])
    return Answer(status, a.headers, a.body)


def _drop_header(rng: random.Random, a: Answer) -> Answer:
    if not a.headers:
        return Answer(a.status, (), a.body, length=False, close=True)
    kept = list(a.headers)
    kept.pop(rng.randrange(len(kept)))
    return Answer(a.status, tuple(kept), a.body)


def _garble_header(rng: random.Random, a: Answer) -> Answer:
    name, values = rng.choice([
        ("Content-Range", ["bytes 0-0/0", "bytes */*", "bytes 5-1/10", "bytes 0-99999999999/1", "bytes -1-5/10",
                           "garbage", "bytes 0-10/5", "bytes 0-1/99999999999999999999", "bytes 0-1/nan"]),
        ("Content-Length", ["-1", "0", "99999999999", "abc", "1e3", "5, 6", str(2**70)]),
        ("Retry-After", ["nan", "inf", "-1", "1e308", "Wed, 21 Oct 2099 07:28:00 GMT", "x" * 300]),
        ("Location", ["", "\\\\x", "http://[::1", "//", "file:///etc/passwd", "?x", "%", "http://" + "a" * 5000]),
        ("Transfer-Encoding", ["chunked", "gzip", "identity, chunked"]),
        ("Content-Encoding", ["gzip", "br", "deflate"]),
    ])
    headers = tuple((k, v) for k, v in a.headers if k.lower() != name.lower()) + ((name, rng.choice(values)),)
    status = rng.choice([a.status, 302, 429, 503]) if name in ("Location", "Retry-After") else a.status
    return Answer(status, headers, a.body)


def _duplicate_header(rng: random.Random, a: Answer) -> Answer:
    if not a.headers:
        return a
    k, v = rng.choice(a.headers)
    return Answer(a.status, a.headers + ((k, v + "0"),), a.body)


def _body(rng: random.Random, a: Answer) -> Answer:
    body = bytearray(a.body)
    how = rng.randrange(5)
    if how == 0:
        body = body[:rng.randrange(len(body) + 1)]
    elif how == 1:
        body += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    elif how == 2 and body:
        for _ in range(rng.randrange(1, 8)):
            body[rng.randrange(len(body))] = rng.randrange(256)
    elif how == 3:
        body = bytearray(json.dumps(rng.choice([None, 5, "x", [1, {"a": []}], {"sha": 1}, {"siblings": "x"}])).encode())
    else:
        body = bytearray()
    cut_length = rng.random() < 0.5  # the announced length kept: a lie the client must catch
    return Answer(a.status, a.headers, bytes(body), length=not cut_length, close=cut_length) if cut_length else \
        Answer(a.status, a.headers, bytes(body))


def _framing(rng: random.Random, a: Answer) -> Answer:
    return rng.choice([
        Answer(raw=bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))),
        Answer(raw=b"HTTP/1.1 206 X\r\nTransfer-Encoding: chunked\r\nContent-Range: bytes 0-9/10\r\n\r\nZZ\r\nxx\r\n"),
        Answer(raw=b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 2000 + b"\r\n"),
        Answer(raw=b"HTTP/1.1 200 OK\r\nX: " + b"a" * 100_000 + b"\r\n\r\n"),
        Answer(raw=b"HTTP/0.9 200\r\n\r\n"),
        Answer(a.status, a.headers, a.body[: len(a.body) // 2], length=False, close=True),
    ])


def _pace(rng: random.Random, a: Answer) -> Answer:
    return Answer(a.status, a.headers, a.body[:200], trickle=0.02) if rng.random() < 0.5 else \
        Answer(a.status, a.headers, a.body, stall=1.5)


MUTATIONS: tuple[Mutation, ...] = (_status, _drop_header, _garble_header, _duplicate_header, _body, _framing, _pace)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("fuzz")
    write_safetensors(folder / "model.safetensors", llama_tensors(64, 4, 2, 1))
    (folder / "config.json").write_text(json.dumps(llama_config(64, 4, 2, 1)))
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.fixture
def fuzz_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    token_env(monkeypatch, tmp_path, retries=2, timeout=0.5)
    yield


def _legit_bytes(files: Mapping[str, bytes]) -> int:
    header = 8 + int.from_bytes(files["model.safetensors"][:8], "little")
    return header + len(files["config.json"]) + 64 * 1024 + 16 * 1024  # the first range, the listing


def _url_files(files: Mapping[str, bytes]) -> Callable[[str, Mapping[str, str]], Answer]:
    def script(path: str, headers: Mapping[str, str]) -> Answer:
        name = path.rsplit("/", 1)[-1]
        return ranged(files[name], headers) if name in files else Answer(404, (), b"no")

    return script


def _mutated(base: Callable[[str, Mapping[str, str]], Answer], target: int, mutate: Mutation,
             rng: random.Random) -> Callable[[str, Mapping[str, str]], Answer]:
    """``base`` with its answer number ``target`` (0: the first) mutated."""
    count = [0]

    def script(path: str, headers: Mapping[str, str]) -> Answer:
        answer = base(path, headers)
        count[0] += 1
        return mutate(rng, answer) if count[0] - 1 == target else answer

    return script


@pytest.mark.slow
def test_fuzzed_answers_end_in_a_report_or_one_line(files: dict[str, bytes], fuzz_env: None,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(SEED)
    listing = {"sha": COMMIT, "siblings": [{"rfilename": n, "size": len(b)} for n, b in files.items()]}
    seen: dict[str, int] = {}
    for case in range(CASES):
        mutate = MUTATIONS[case % len(MUTATIONS)]
        target = rng.randrange(3)  # which answer of the run is mutated (0: the first)
        hub = case % 2 == 1
        script = _mutated(hub_script(listing, files) if hub else _url_files(files), target, mutate,
                          random.Random(rng.random()))
        with ScriptedServer(script) as server:
            monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.port}")
            hub_module._LISTINGS.clear()
            spec = "hf://org/x" if hub else server.url("model.safetensors")
            before = client().counters.bytes
            start = time.monotonic()
            try:
                with model_deadline(4):
                    audit(spec)
                outcome = "report"
            except InputError as exc:
                message = str(exc)
                assert "\n" not in message and "internal error" not in message and TOKEN not in message, (case, message)
                outcome = "error"
            took = time.monotonic() - start
            received = client().counters.bytes - before
        assert took < 8, (case, mutate.__name__, took)
        assert received <= 2 * _legit_bytes(files) + MIB, (case, mutate.__name__, received)
        seen[f"{mutate.__name__}:{outcome}"] = seen.get(f"{mutate.__name__}:{outcome}", 0) + 1
    assert sum(seen.values()) == CASES
    print(sorted(seen.items()))
    assert any(k.endswith(":error") for k in seen) and any(k.endswith(":report") for k in seen), seen
