"""Hub repos through a minimal Hub API the test starts on 127.0.0.1 (HF_ENDPOINT): listing, resolve
with LFS-like redirects to another host, revisions, gated and private repos, rate limits, the
local cache and offline mode; every test counts the requests and bytes it cost, and checks that
the token never reaches another host and is never printed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_models import llama_config, llama_tensors, moe_tensors, write_hf_folder
from remote_servers import FileServer, HubServer, Repo, hub
from test_remote import KIB, _onnx_model, report_json, safetensors_floor, within

from mhainspect.errors import InputError
from mhainspect.frontends.folders import expand_models
from mhainspect.pipeline import audit
from mhainspect.sources.address import HubRef, UrlRef, parse
from mhainspect.sources.transports import hub as hub_module

REPO_ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_test_secret_token_123"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import onnx
    from gguf_files import Decoder

    base = tmp_path_factory.mktemp("hub_repos")
    cfg = llama_config(256, 8, 2, 2)
    write_hf_folder(base / "llama", cfg, llama_tensors(256, 8, 2, 2), shards=3)
    write_hf_folder(base / "gated", cfg, llama_tensors(256, 8, 2, 2), shards=1)
    write_hf_folder(base / "private", cfg, llama_tensors(256, 8, 2, 2), shards=1)
    write_hf_folder(base / "noindex", cfg, llama_tensors(256, 8, 2, 2), shards=2, index=False)
    moe_cfg = llama_config(64, 4, 1, 8, num_local_experts=250, num_experts_per_tok=2)
    write_hf_folder(base / "moe", moe_cfg, moe_tensors(8, 250), shards=20)  # ~100 KB headers, 12k tensors
    multi = base / "multi"
    (multi / "onnx").mkdir(parents=True)
    onnx.save(_onnx_model(), multi / "onnx" / "model.onnx")
    onnx.save(_onnx_model(layers=1), multi / "onnx" / "model_small.onnx")
    Decoder().write(multi / "model-Q8_0.gguf")
    Decoder(layers=3).write(multi / "model-F16.gguf")
    (multi / "README.md").write_text("several models")
    from object_stores import write_models

    write_models(base / "stores")  # its copies/: a transposed tied embedding in external data (weights.bin)
    shutil.move(base / "stores" / "copies", base / "copies")
    shutil.rmtree(base / "stores")
    (base / "copies_nodata").mkdir()
    shutil.copy(base / "copies" / "model.onnx", base / "copies_nodata" / "model.onnx")  # its data file left out
    return base


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean Hub environment: no token, an empty cache, online; the listings of earlier tests forgotten."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))  # no stored token
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MHAINSPECT_REMOTE_RETRIES", "2")
    hub_module._LISTINGS.clear()
    return tmp_path / "cache"


@pytest.fixture
def servers(folders: Path, tmp_path: Path, env: Path, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[tuple[HubServer, FileServer]]:
    repos = {"org/llama": Repo(folders / "llama", revisions=("main", "v1.0")),
             "org/multi": Repo(folders / "multi"),
             "org/moe": Repo(folders / "moe"),
             "org/noindex": Repo(folders / "noindex"),
             "org/gated": Repo(folders / "gated", gated=True, token=TOKEN),
             "org/private": Repo(folders / "private", private=True, token=TOKEN),
             "org/copies": Repo(folders / "copies"), "org/copies_nodata": Repo(folders / "copies_nodata")}
    with hub(tmp_path, repos) as (api, storage):
        monkeypatch.setenv("HF_ENDPOINT", api.endpoint)
        yield api, storage


def test_parse_references(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert parse("hf://org/name") == HubRef("org/name", None, "", "hf://org/name")
    assert parse("hf://org/name@v1.0/onnx/model.onnx") == HubRef("org/name", "v1.0", "onnx/model.onnx",
                                                                 "hf://org/name@v1.0/onnx/model.onnx")
    assert parse("hf://org/name@refs/pr/3/model.safetensors").revision == "refs/pr/3"
    assert parse("hf://org/name/sub/x.gguf").path == "sub/x.gguf"
    web = "https://huggingface.co/org/name/blob/main/model.safetensors"
    assert parse(web) == HubRef("org/name", "main", "model.safetensors", web)
    assert parse("https://huggingface.co/org/name/tree/refs%2Fpr%2F1/onnx").revision == "refs/pr/1"
    assert parse("https://hf.co/org/name").path == ""
    assert parse("https://huggingface.co/org/name/resolve/abc123/a/b.gguf").path == "a/b.gguf"
    assert isinstance(parse("https://example.com/org/name/model.gguf"), UrlRef)
    for bad in ("hf://justname", "hf://org/name@", "hf://org/../x", "https://huggingface.co/org/name/discussions",
                "hf://datasets/org/name"):
        with pytest.raises(InputError):
            parse(bad)


def test_repo_report_equals_local_folder(folders: Path, servers: tuple[HubServer, FileServer]) -> None:
    api, storage = servers
    local = report_json(folders / "llama", base=str(folders / "llama"))
    remote = report_json("hf://org/llama", base="hf://org/llama")
    assert remote == local
    shards = sorted((folders / "llama").glob("*.safetensors"))
    # listing, config.json, the index; each shard: resolve (a redirect) + one range at the storage host
    assert api.log.requests == 3 + len(shards)
    assert storage.log.requests == len(shards)
    floor = sum(safetensors_floor(p) for p in shards)
    within(storage.log.requests, storage.log.bytes, floor_requests=len(shards), floor_bytes=floor,
           files=len(shards), extra_requests=0)


def test_long_shard_headers_size_the_next_first_ranges(folders: Path, servers: tuple[HubServer, FileServer]) -> None:
    from mhainspect.sources.parallel import CONCURRENCY

    _, storage = servers
    local = report_json(folders / "moe", base=str(folders / "moe"))
    assert report_json("hf://org/moe", base="hf://org/moe") == local
    shards = sorted((folders / "moe").glob("*.safetensors"))
    floors = [safetensors_floor(p) for p in shards]
    assert min(floors) > 64 * KIB  # every header is longer than a first range
    # The index (its size in the listing says the headers are long) sizes each shard's first range
    # from the tensors it names: one range a shard.
    assert storage.log.requests == len(shards)
    within(storage.log.requests, storage.log.bytes, floor_requests=len(shards), floor_bytes=sum(floors),
           files=len(shards), extra_requests=0)
    assert CONCURRENCY < len(shards)  # the later shards size theirs from the headers read first


def test_shards_without_an_index(folders: Path, servers: tuple[HubServer, FileServer]) -> None:
    _, storage = servers
    assert report_json("hf://org/noindex", base="hf://org/noindex") == report_json(folders / "noindex",
                                                                                  base=str(folders / "noindex"))
    assert storage.log.requests == 2  # one range per shard


def test_pytorch_bin_folder(tmp_path: Path, env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_remote import _torch_state

    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(llama_config(32, 4, 2, 2, vocab=64)))
    _torch_state(folder / "pytorch_model.bin")
    with hub(tmp_path, {"org/bin": Repo(folder)}) as (api, storage):
        monkeypatch.setenv("HF_ENDPOINT", api.endpoint)
        remote = report_json("hf://org/bin", base="hf://org/bin")
        assert storage.log.requests <= 3  # the first range (the pickle in it), the zip directory
    assert remote == report_json(folder, base=str(folder))


def test_legacy_pytorch_bin_folder(tmp_path: Path, env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A legacy (non-zip) torch.save shard is read remotely as locally, without torch: its pickles
    from byte 0 (the zip directory, tried first, is not there), never its storages."""
    torch = pytest.importorskip("torch")
    from test_remote import _torch_state

    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(llama_config(32, 4, 2, 2, vocab=64)))
    _torch_state(tmp_path / "zip.bin")
    torch.save(torch.load(tmp_path / "zip.bin", weights_only=True), folder / "pytorch_model.bin",
               _use_new_zipfile_serialization=False)
    assert (folder / "pytorch_model.bin").read_bytes()[:1] == b"\x80"
    with hub(tmp_path, {"org/legacy": Repo(folder)}) as (api, storage):
        monkeypatch.setenv("HF_ENDPOINT", api.endpoint)
        remote = report_json("hf://org/legacy", base="hf://org/legacy")
        # the end of the file (no zip directory there, and the span before it zipfile looks in), then
        # the pickles from byte 0
        assert storage.log.requests <= 4
        assert storage.log.bytes < (folder / "pytorch_model.bin").stat().st_size
    assert remote == report_json(folder, base=str(folder))


def test_web_urls_name_the_same_model(folders: Path, servers: tuple[HubServer, FileServer]) -> None:
    api, _ = servers
    local = report_json(folders / "llama" / "model-00001-of-00003.safetensors", base=str(folders / "llama"))
    for url in (f"{api.endpoint}/org/llama/blob/main/model-00001-of-00003.safetensors",
                f"{api.endpoint}/org/llama/resolve/v1.0/model-00001-of-00003.safetensors",
                "hf://org/llama@main/model-00001-of-00003.safetensors"):
        base = url.rsplit("/", 1)[0]
        assert report_json(url, base=base) == local
    assert len(audit(f"{api.endpoint}/org/llama/tree/main").blocks) == 2


def test_revision_and_not_found(servers: tuple[HubServer, FileServer]) -> None:
    with pytest.raises(InputError, match="revision 'nope' not found in org/llama"):
        audit("hf://org/llama@nope")
    with pytest.raises(InputError, match=r"repository org/missing not found \(or private"):
        audit("hf://org/missing")
    api, _ = servers
    audit("hf://org/llama")
    before = api.log.requests
    with pytest.raises(InputError, match="no file or folder 'nope.safetensors' in org/llama"):
        audit("hf://org/llama/nope.safetensors")
    assert api.log.requests == before  # the listing was kept: no request to say so


def test_gated_repo(servers: tuple[HubServer, FileServer], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match="gated repository: accept its conditions") as exc:
        audit("hf://org/gated")
    assert "HF_TOKEN" in str(exc.value)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub_module._LISTINGS.clear()
    assert audit("hf://org/gated").blocks


def test_private_repo_and_where_the_token_goes(servers: tuple[HubServer, FileServer],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    api, storage = servers
    with pytest.raises(InputError, match="not found \\(or private: set HF_TOKEN"):
        audit("hf://org/private")
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    hub_module._LISTINGS.clear()
    with pytest.raises(InputError, match="private and this token has no access"):
        audit("hf://org/private")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub_module._LISTINGS.clear()
    api.log.reset()
    storage.log.reset()
    assert audit("hf://org/private").blocks
    assert all(auth == f"Bearer {TOKEN}" for _path, auth in api.log.auth)
    assert storage.log.requests > 0 and all(auth is None for _path, auth in storage.log.auth)


def test_token_file_as_hf_login_writes_it(servers: tuple[HubServer, FileServer], env: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    home = env.parent / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "token").write_text(TOKEN + "\n")
    assert audit("hf://org/private").blocks
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    hub_module._LISTINGS.clear()
    with pytest.raises(InputError, match="not found \\(or private"):
        audit("hf://org/private")


def test_rate_limited(folders: Path, tmp_path: Path, env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with hub(tmp_path, {"org/llama": Repo(folders / "llama")}, rate_limited=True) as (api, _storage):
        monkeypatch.setenv("HF_ENDPOINT", api.endpoint)
        with pytest.raises(InputError, match=r"rate-limited by the Hub \(HTTP 429\) after 2 tries"):
            audit("hf://org/llama")
        assert api.log.requests == 2


def _cache(folder: Path, cache: Path, repo: str, files: list[str]) -> None:
    root = cache / ("models--" + repo.replace("/", "--"))
    snap = root / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(COMMIT)
    for f in files:
        shutil.copy(folder / f, snap / f)


def test_cached_files_cost_no_request(folders: Path, servers: tuple[HubServer, FileServer], env: Path) -> None:
    api, storage = servers
    names = sorted(p.name for p in (folders / "llama").iterdir())
    _cache(folders / "llama", env, "org/llama", names)
    report = audit("hf://org/llama")
    assert report.blocks
    assert api.log.requests == 1  # the listing (the revision's commit): every file came from the cache
    assert storage.log.requests == 0


def test_offline(folders: Path, servers: tuple[HubServer, FileServer], env: Path,
                 monkeypatch: pytest.MonkeyPatch) -> None:
    api, storage = servers
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputError, match="offline .* not in the Hugging Face cache"):
        audit("hf://org/llama")
    names = sorted(p.name for p in (folders / "llama").iterdir())
    _cache(folders / "llama", env, "org/llama", names)
    local = report_json(folders / "llama", base=str(folders / "llama"))
    assert report_json("hf://org/llama", base="hf://org/llama") == local
    assert api.log.requests == 0 and storage.log.requests == 0


def test_repo_of_several_models_is_a_folder(folders: Path, servers: tuple[HubServer, FileServer]) -> None:
    models = expand_models(["hf://org/multi"])
    assert models == ("hf://org/multi/model-F16.gguf", "hf://org/multi/model-Q8_0.gguf",
                      "hf://org/multi/onnx/model.onnx", "hf://org/multi/onnx/model_small.onnx")
    for spec in models:
        assert isinstance(spec, str)
        rel = spec[len("hf://org/multi/"):]
        assert report_json(spec, base="hf://org/multi") == report_json(folders / "multi" / rel,
                                                                      base=str(folders / "multi"))
    with pytest.raises(InputError, match="holds 4 models"):
        audit("hf://org/multi")
    api, _ = servers
    assert sum(1 for p in api.log.by_path if p.startswith("/api/")) == 1  # listed once for the whole run


def test_onnx_in_a_repo_costs_its_scan(folders: Path, servers: tuple[HubServer, FileServer]) -> None:
    from mhainspect.frontends.onnx.wire import stripped

    _, storage = servers
    audit("hf://org/multi/onnx/model.onnx")
    requests, sent = storage.log.by_path["/org/multi/onnx/model.onnx?X-Signature=abc"]
    kept = len(stripped(memoryview((folders / "multi/onnx/model.onnx").read_bytes())))
    within(requests, sent, floor_requests=1, floor_bytes=kept, extra_requests=len(_onnx_model().graph.initializer))
    assert sent <= kept * 1.5 + 64 * KIB


def test_cli_hub_errors_print_no_token(servers: tuple[HubServer, FileServer], env: Path) -> None:
    api, _ = servers
    base = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    run_env = {**base, "PYTHONPATH": str(REPO_ROOT), "HF_ENDPOINT": api.endpoint, "HF_TOKEN": "hf_wrong_but_secret",
               "HF_HUB_CACHE": str(env), "HF_HOME": str(env.parent / "home"), "MHAINSPECT_NO_PROGRESS": "1"}
    done = subprocess.run([sys.executable, "-m", "mhainspect", "hf://org/gated"], capture_output=True, text=True,
                          env=run_env, timeout=120)
    assert done.returncode == 2
    assert "gated repository" in done.stderr and "hf_wrong_but_secret" not in done.stderr + done.stdout
    assert len(done.stderr.strip().splitlines()) == 1
    ok = subprocess.run([sys.executable, "-m", "mhainspect", "hf://org/multi", "-f", "json"], capture_output=True,
                        text=True, env=run_env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    paths = [m["model"]["path"] for m in json.loads(ok.stdout)["models"]]
    assert paths == ["hf://org/multi/model-F16.gguf", "hf://org/multi/model-Q8_0.gguf",
                     "hf://org/multi/onnx/model.onnx", "hf://org/multi/onnx/model_small.onnx"]


def test_copy_decided_from_the_repos_data_file(folders: Path, servers: tuple[HubServer, FileServer]) -> None:
    """The data file beside the model is resolved like any file of the repo (a redirect, then ranges
    at the storage host), read at a few elements; a repo whose listing lacks it is never asked for
    it, and its report is the local one without the data file (the copy counts as stored)."""
    from mhainspect.ir.copies import SAMPLE

    api, storage = servers
    local = report_json(folders / "copies" / "model.onnx", base=str(folders / "copies"))
    assert "= model.embed_tokens.weight [2048, 40] transposed" in local
    assert report_json("hf://org/copies/model.onnx", base="hf://org/copies") == local
    ((requests, sent),) = [v for k, v in storage.log.by_path.items() if k.startswith("/org/copies/weights.bin")]
    assert requests <= 2 * (2 + SAMPLE) and sent < (folders / "copies" / "weights.bin").stat().st_size // 100
    # One redirect for the data file: its first range goes alone, the others straight to the storage.
    assert sum(v[0] for k, v in api.log.by_path.items() if k.endswith("/weights.bin")) == 1
    local = report_json(folders / "copies_nodata" / "model.onnx", base=str(folders / "copies_nodata"))
    assert "exporter-made copies" not in local
    api.log.reset()
    assert report_json("hf://org/copies_nodata/model.onnx", base="hf://org/copies_nodata") == local
    assert not [p for p in api.log.by_path if "weights.bin" in p]
