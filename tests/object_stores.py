"""The object-store emulators of tests/test_remote_stores.py, each started on 127.0.0.1 with the same
models uploaded: S3 (moto's ThreadedMotoServer, through s3fs), Google Cloud Storage
(gcp-storage-emulator, in memory, through gcsfs) and Azure Blob Storage (Azurite, through adlfs).

Each store counts the requests its server (or SDK) logs for the bucket, so a test compares them
with the reader's own counters. What an fsspec implementation adds on its own is a field of the
store, in one place: adlfs asks whether a folder's own name is a blob (a HEAD) before it lists it,
and lists the folder beside a file twice (without, then with its slash).

gcsfs's experimental zonal/hierarchical-bucket support asks a gRPC control API for each bucket's
layout, which no emulator serves: the GCS store uses gcsfs's plain GCSFileSystem (what
GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false selects), the class every request goes through either way.

Azurite is a Node.js program from the npm registry (``.ci/run`` installs it into .azurite/ with the
machine's Node.js): ``$MHAINSPECT_AZURITE`` (the azurite-blob script), .azurite/node_modules/.bin/
azurite-blob, then azurite-blob on PATH; without one the Azure store skips, except under CI=true,
where it fails.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from remote_models import llama_config, llama_tensors, write_hf_folder
from remote_servers import store_requests

BUCKET = "models"
REPO = Path(__file__).resolve().parents[1]


class RequestLog(logging.Handler):
    """The bucket's requests, one line each, as ``accept`` keeps them from a logger's records."""

    def __init__(self, accept: Callable[[str], str | None]) -> None:
        super().__init__()
        self.accept = accept
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = self.accept(record.getMessage())
        if line is not None:
            self.lines.append(line)


@dataclass
class Store:
    """One emulator with the models uploaded below ``url``; ``base`` holds the same files locally."""

    scheme: str
    base: Path
    logger: str  # the logger that records each request
    accept: Callable[[str], str | None]  # a request line of the bucket from a log message, else None
    is_listing: Callable[[str], bool]  # a request line that lists
    # requests the fsspec implementation adds to what the reader asks: a folder read, a file read
    extra_folder_requests: int = 0
    extra_file_requests: int = 0
    file_listings: int = 1  # listings of the folder beside a file

    @property
    def url(self) -> str:
        return f"{self.scheme}://{BUCKET}"

    def requests(self) -> AbstractContextManager[RequestLog]:
        """The bucket's requests during the block, with the reader's counters and listings cold."""
        return store_requests(self.logger, RequestLog(self.accept), protocol=self.scheme)


def write_models(base: Path) -> None:
    """What every store holds: a sharded Hugging Face folder, a folder of two models (GGUF, ONNX),
    and an ONNX model with a tied embedding and its transposed copy in external data."""
    import onnx
    from gguf_files import Decoder
    from test_folded_copies import _model, _table
    from test_remote import _onnx_model

    write_hf_folder(base / "llama", llama_config(256, 8, 2, 2), llama_tensors(256, 8, 2, 2), shards=3)
    (base / "multi" / "onnx").mkdir(parents=True)
    onnx.save(_onnx_model(), base / "multi" / "onnx" / "model.onnx")
    Decoder().write(base / "multi" / "model.gguf")
    (base / "copies").mkdir()
    emb = _table(2048, 40)  # [2048, 40] and its transposed copy onnx::MatMul_7
    _model(base / "copies" / "model.onnx", {"model.embed_tokens.weight": emb, "onnx::MatMul_7": emb.T.copy()},
           [("Gather", "model.embed_tokens.weight"), ("MatMul", "onnx::MatMul_7")], external=True)


def _files(base: Path) -> Iterator[tuple[Path, str]]:
    for p in sorted(base.rglob("*")):
        if p.is_file():
            yield p, p.relative_to(base).as_posix()


@contextmanager
def _fsspec_conf() -> Iterator[None]:
    import fsspec

    saved = dict(fsspec.config.conf)
    try:
        yield
    finally:
        fsspec.config.conf.clear()
        fsspec.config.conf.update(saved)


@contextmanager
def s3(base: Path) -> Iterator[Store]:
    moto_server = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    import boto3
    import fsspec

    for key, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                       ("AWS_DEFAULT_REGION", "us-east-1")):
        os.environ.setdefault(key, value)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=url, aws_access_key_id="testing", aws_secret_access_key="testing",
                          region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    for p, rel in _files(base):
        client.upload_file(str(p), BUCKET, rel)
    with _fsspec_conf():
        fsspec.config.conf["s3"] = {"endpoint_url": url, "key": "testing", "secret": "testing"}
        try:
            yield Store("s3", base, "werkzeug", lambda text: text if f"/{BUCKET}" in text else None,
                        lambda line: "list-type" in line)
        finally:
            server.stop()


@contextmanager
def gcs(base: Path) -> Iterator[Store]:
    emulator = pytest.importorskip("gcp_storage_emulator.server")
    gcsfs_core = pytest.importorskip("gcsfs.core")
    import fsspec
    from fsspec.registry import _registry

    server = emulator.create_server("127.0.0.1", 0, in_memory=True, default_bucket=BUCKET)
    server.start()
    host, port = server._api._httpd.server_address  # port 0: the one the OS chose
    saved_impl = {p: fsspec.registry.get(p) for p in ("gs", "gcs")}
    with _fsspec_conf():
        for protocol in ("gs", "gcs"):
            fsspec.register_implementation(protocol, gcsfs_core.GCSFileSystem, clobber=True)
        fsspec.config.conf["gs"] = {"endpoint_url": f"http://{host}:{port}", "token": "anon"}
        try:
            fs = fsspec.filesystem("gs")
            for p, rel in _files(base):
                fs.put_file(str(p), f"{BUCKET}/{rel}")
            fs.invalidate_cache()
            yield Store("gs", base, "gcp_storage_emulator.server",
                        lambda text: text if f"/b/{BUCKET}" in text and "HTTP/" in text else None,
                        lambda line: "/o?" in line)
        finally:
            for protocol, impl in saved_impl.items():  # as before: gcsfs's default class, resolved on first use
                if impl is None:
                    _registry.pop(protocol, None)
                else:
                    _registry[protocol] = impl
            server.stop()


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


def _azure_request(text: str) -> str | None:
    """The Azure SDK's HTTP logging policy logs every request it sends (retries included)."""
    found = re.match(r"Request URL: '([^']*)'\s+Request method: '(\w+)'", text)
    if found and f"/{_ACCOUNT}/{BUCKET}" in found.group(1):
        return f"{found.group(2)} {found.group(1).split(f'/{_ACCOUNT}/', 1)[1]}"
    return None


@contextmanager
def azure(base: Path) -> Iterator[Store]:
    pytest.importorskip("adlfs")
    import fsspec

    program = _azurite()
    server = subprocess.Popen([program, "--blobHost", "127.0.0.1", "--blobPort", "0", "--inMemoryPersistence",
                               "--silent", "--skipApiVersionCheck", "--loose"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with _fsspec_conf():
        try:
            assert server.stdout is not None
            port = None
            for line in server.stdout:  # it prints the port it listens on (--silent: no access log after)
                found = re.search(r"listens on http://127\.0\.0\.1:(\d+)", line)
                if found:
                    port = int(found.group(1))
                    break
            assert port is not None, "azurite did not start"
            threading.Thread(target=server.stdout.read, daemon=True).start()  # drained: never blocks on a full pipe
            fsspec.config.conf["az"] = {"connection_string": (
                f"DefaultEndpointsProtocol=http;AccountName={_ACCOUNT};AccountKey={_KEY};"
                f"BlobEndpoint=http://127.0.0.1:{port}/{_ACCOUNT};")}
            fs = fsspec.filesystem("az")
            fs.mkdir(BUCKET)
            for p, rel in _files(base):
                fs.put_file(str(p), f"{BUCKET}/{rel}")
            # the SDK's log keeps the query's names (values redacted): a listing asks ?restype=
            yield Store("az", base, "azure.core.pipeline.policies.http_logging_policy", _azure_request,
                        lambda line: "?restype=" in line, extra_folder_requests=1, extra_file_requests=1,
                        file_listings=2)
        finally:
            server.terminate()
            server.wait(timeout=10)


STORES: dict[str, Callable[[Path], AbstractContextManager[Store]]] = {"s3": s3, "gs": gcs, "az": azure}
