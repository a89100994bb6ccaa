"""az:// through fsspec (adlfs) against Azurite, Microsoft's Azure Storage emulator, started by this
test on 127.0.0.1 (blob service only, in memory): a Hugging Face folder, a file, a GGUF file and an
ONNX model in a folder of several models, each report equal to the local one; requests counted as
the Azure SDK sends them (its HTTP logging policy logs every request, retries included) and at the
client.

Azurite is a Node.js program from the npm registry (``.ci/run`` installs it into .azurite/ with the
machine's Node.js). The test looks for ``$MHAINSPECT_AZURITE`` (the azurite-blob script),
.azurite/node_modules/.bin/azurite-blob, then azurite-blob on PATH; without one it skips, except
under CI=true, where it fails.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_models import llama_config, llama_tensors, write_hf_folder
from remote_servers import store_requests
from test_remote import gguf_floor, report_json, safetensors_floor, within

from mhainspect.errors import InputError
from mhainspect.frontends.folders import expand_models
from mhainspect.pipeline import audit
from mhainspect.sources.transports import store

pytest.importorskip("adlfs")
CONTAINER = "models"
REPO = Path(__file__).resolve().parents[1]
# Azurite's documented development account (public, the same in every Azurite).
_ACCOUNT = "devstoreaccount1"
_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _azurite() -> str:
    for candidate in (os.environ.get("MHAINSPECT_AZURITE", ""), str(REPO / ".azurite/node_modules/.bin/azurite-blob"),
                      shutil.which("azurite-blob") or ""):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    reason = "azurite not installed (npm install --prefix .azurite azurite@3.35.0)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI: {reason}")
    pytest.skip(reason)


class _SdkRequests(logging.Handler):
    """The requests the Azure SDK sends to the container (its HTTP logging policy's "Request URL" lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = re.match(r"Request URL: '([^']*)'\s+Request method: '(\w+)'", record.getMessage())
        if found and f"/{_ACCOUNT}/{CONTAINER}" in found.group(1):
            url = found.group(1).split(f"/{_ACCOUNT}/", 1)[1]
            self.urls.append(f"{found.group(2)} {url}")


def _listings(log: _SdkRequests) -> int:
    return sum("?restype=" in url for url in log.urls)  # the SDK's log keeps the query's names (values redacted)


@pytest.fixture(scope="module")
def azure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    import fsspec
    import onnx
    from gguf_files import Decoder
    from test_remote import _onnx_model

    program = _azurite()
    base = tmp_path_factory.mktemp("azure_models")
    write_hf_folder(base / "llama", llama_config(256, 8, 2, 2), llama_tensors(256, 8, 2, 2), shards=3)
    (base / "multi" / "onnx").mkdir(parents=True)
    onnx.save(_onnx_model(), base / "multi" / "onnx" / "model.onnx")
    Decoder().write(base / "multi" / "model.gguf")
    server = subprocess.Popen([program, "--blobHost", "127.0.0.1", "--blobPort", "0", "--inMemoryPersistence",
                               "--silent", "--skipApiVersionCheck", "--loose"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    saved = dict(fsspec.config.conf)
    try:
        assert server.stdout is not None
        port = None
        for line in server.stdout:  # it prints the port it listens on (--silent: no access log after)
            found = re.search(r"listens on http://127\.0\.0\.1:(\d+)", line)
            if found:
                port = int(found.group(1))
                break
        assert port is not None, "azurite did not start"
        threading.Thread(target=server.stdout.read, daemon=True).start()  # drained, so it never blocks on a full pipe
        fsspec.config.conf["az"] = {"connection_string": (
            f"DefaultEndpointsProtocol=http;AccountName={_ACCOUNT};AccountKey={_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{port}/{_ACCOUNT};")}
        fs = fsspec.filesystem("az")
        fs.mkdir(CONTAINER)
        for p in sorted(base.rglob("*")):
            if p.is_file():
                fs.put_file(str(p), f"{CONTAINER}/{p.relative_to(base).as_posix()}")
        yield base
    finally:
        fsspec.config.conf.clear()
        fsspec.config.conf.update(saved)
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def requests_log() -> Iterator[_SdkRequests]:
    sdk_log = "azure.core.pipeline.policies.http_logging_policy"
    with store_requests(sdk_log, _SdkRequests(), protocol="az") as handler:
        yield handler


def test_azure_folder_equals_local(azure: Path, requests_log: _SdkRequests) -> None:
    base = azure
    assert report_json(f"az://{CONTAINER}/llama/", base=f"az://{CONTAINER}") == report_json(base / "llama",
                                                                                          base=str(base))
    shards = sorted((base / "llama").glob("*.safetensors"))
    # the listing, config.json, the index, one range per shard
    assert store.counters.requests == 3 + len(shards)
    # adlfs's find asks whether the folder's own name is a blob (a HEAD) before it lists: one more request
    assert len(requests_log.urls) == store.counters.requests + 1, requests_log.urls
    assert requests_log.urls[0].startswith("HEAD ") and _listings(requests_log) == 1
    floor = sum(safetensors_floor(p) for p in shards)
    within(store.counters.requests, store.counters.bytes, floor_requests=3 + len(shards),
           floor_bytes=floor + (base / "llama/config.json").stat().st_size
           + (base / "llama/model.safetensors.index.json").stat().st_size, files=len(shards) + 2, extra_requests=0)


def test_azure_safetensors_file_equals_local(azure: Path, requests_log: _SdkRequests) -> None:
    rel = "llama/model-00002-of-00003.safetensors"
    assert report_json(f"az://{CONTAINER}/{rel}", base=f"az://{CONTAINER}") == report_json(azure / rel,
                                                                                          base=str(azure))
    assert store.counters.requests <= 3  # the folder's listing, the header, config.json beside it
    # adlfs's ls of the folder beside the file lists twice (the name without, then with its slash)
    assert len(requests_log.urls) == store.counters.requests + 1 and _listings(requests_log) == 2, requests_log.urls


def test_azure_gguf_file_equals_local(azure: Path, requests_log: _SdkRequests) -> None:
    rel = "multi/model.gguf"
    assert report_json(f"az://{CONTAINER}/{rel}", base=f"az://{CONTAINER}") == report_json(azure / rel,
                                                                                          base=str(azure))
    within(store.counters.requests, store.counters.bytes, floor_requests=2, floor_bytes=gguf_floor(azure / rel))
    # adlfs's ls of the folder beside the file lists twice (the name without, then with its slash)
    assert len(requests_log.urls) == store.counters.requests + 1 and _listings(requests_log) == 2, requests_log.urls


def test_azure_folder_of_models(azure: Path, requests_log: _SdkRequests) -> None:
    models = expand_models([f"az://{CONTAINER}/multi"])
    assert models == (f"az://{CONTAINER}/multi/model.gguf", f"az://{CONTAINER}/multi/onnx/model.onnx")
    for spec in models:
        assert isinstance(spec, str)
        rel = spec[len(f"az://{CONTAINER}/"):]
        assert report_json(spec, base=f"az://{CONTAINER}") == report_json(azure / rel, base=str(azure))
    assert _listings(requests_log) == 1, requests_log.urls  # listed once: expanded, then each model read


def test_azure_missing(azure: Path) -> None:
    with pytest.raises(InputError, match="no file or folder 'nope.gguf'|not found"):
        audit(f"az://{CONTAINER}/multi/nope.gguf")
    with pytest.raises(InputError, match="nothing there|not found"):
        audit(f"az://{CONTAINER}/no-such-prefix/")
