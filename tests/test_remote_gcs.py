"""gs:// through fsspec (gcsfs) against a Google Cloud Storage emulator this test starts on 127.0.0.1
(gcp-storage-emulator, in memory): a Hugging Face folder, a file, a GGUF file and an ONNX model in a
folder of several models; requests counted at the server (its request log) and at the client.

gcsfs's experimental zonal/hierarchical-bucket support asks a gRPC control API for each bucket's
layout, which no emulator serves: the test uses gcsfs's plain GCSFileSystem (what
GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false selects), the class every request below goes through either way.
"""

from __future__ import annotations

import logging
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

emulator = pytest.importorskip("gcp_storage_emulator.server")
gcsfs_core = pytest.importorskip("gcsfs.core")
BUCKET = "models"


class _RequestLog(logging.Handler):
    """The emulator's HTTP request lines for the bucket (one per request)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if f"/b/{BUCKET}" in text and "HTTP/" in text:
            self.lines.append(text)


@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    import fsspec
    import onnx
    from gguf_files import Decoder
    from test_remote import _onnx_model

    base = tmp_path_factory.mktemp("gcs_models")
    write_hf_folder(base / "llama", llama_config(256, 8, 2, 2), llama_tensors(256, 8, 2, 2), shards=3)
    (base / "multi" / "onnx").mkdir(parents=True)
    onnx.save(_onnx_model(), base / "multi" / "onnx" / "model.onnx")
    Decoder().write(base / "multi" / "model.gguf")
    server = emulator.create_server("127.0.0.1", 0, in_memory=True, default_bucket=BUCKET)
    server.start()
    host, port = server._api._httpd.server_address  # port 0: the one the OS chose
    saved_conf = dict(fsspec.config.conf)
    saved_impl = {p: fsspec.registry.get(p) for p in ("gs", "gcs")}
    for protocol in ("gs", "gcs"):
        fsspec.register_implementation(protocol, gcsfs_core.GCSFileSystem, clobber=True)
    fsspec.config.conf["gs"] = {"endpoint_url": f"http://{host}:{port}", "token": "anon"}
    try:
        fs = fsspec.filesystem("gs")
        for p in sorted(base.rglob("*")):
            if p.is_file():
                fs.put_file(str(p), f"{BUCKET}/{p.relative_to(base).as_posix()}")
        fs.invalidate_cache()
        yield base
    finally:
        fsspec.config.conf.clear()
        fsspec.config.conf.update(saved_conf)
        from fsspec.registry import _registry

        for protocol, impl in saved_impl.items():  # as before: gcsfs's default class, resolved on first use
            if impl is None:
                _registry.pop(protocol, None)
            else:
                _registry[protocol] = impl
        server.stop()


@pytest.fixture
def requests_log() -> Iterator[_RequestLog]:
    with store_requests("gcp_storage_emulator.server", _RequestLog(), protocol="gs") as handler:
        yield handler


def test_gcs_folder_equals_local(gcs: Path, requests_log: _RequestLog) -> None:
    base = gcs
    assert report_json(f"gs://{BUCKET}/llama/", base=f"gs://{BUCKET}") == report_json(base / "llama", base=str(base))
    shards = sorted((base / "llama").glob("*.safetensors"))
    # the listing, config.json, the index, one range per shard
    assert store.counters.requests == 3 + len(shards)
    assert len(requests_log.lines) == store.counters.requests
    floor = sum(safetensors_floor(p) for p in shards)
    within(store.counters.requests, store.counters.bytes, floor_requests=3 + len(shards),
           floor_bytes=floor + (base / "llama/config.json").stat().st_size
           + (base / "llama/model.safetensors.index.json").stat().st_size, files=len(shards) + 2, extra_requests=0)


def test_gcs_safetensors_file_equals_local(gcs: Path, requests_log: _RequestLog) -> None:
    rel = "llama/model-00002-of-00003.safetensors"
    assert report_json(f"gs://{BUCKET}/{rel}", base=f"gs://{BUCKET}") == report_json(gcs / rel, base=str(gcs))
    assert store.counters.requests <= 3  # the folder's listing, the header, config.json beside it
    assert len(requests_log.lines) == store.counters.requests


def test_gcs_gguf_file_equals_local(gcs: Path, requests_log: _RequestLog) -> None:
    rel = "multi/model.gguf"
    assert report_json(f"gs://{BUCKET}/{rel}", base=f"gs://{BUCKET}") == report_json(gcs / rel, base=str(gcs))
    assert len(requests_log.lines) == store.counters.requests
    within(store.counters.requests, store.counters.bytes, floor_requests=2, floor_bytes=gguf_floor(gcs / rel))


def test_gcs_folder_of_models(gcs: Path, requests_log: _RequestLog) -> None:
    models = expand_models([f"gs://{BUCKET}/multi"])
    assert models == (f"gs://{BUCKET}/multi/model.gguf", f"gs://{BUCKET}/multi/onnx/model.onnx")
    for spec in models:
        assert isinstance(spec, str)
        rel = spec[len(f"gs://{BUCKET}/"):]
        assert report_json(spec, base=f"gs://{BUCKET}") == report_json(gcs / rel, base=str(gcs))
    listings = [line for line in requests_log.lines if "/o?" in line]
    assert len(listings) == 1, listings  # listed once: expanded, then each model read from that listing


def test_gcs_missing(gcs: Path) -> None:
    with pytest.raises(InputError, match="no file or folder 'nope.gguf'|not found"):
        audit(f"gs://{BUCKET}/multi/nope.gguf")
    with pytest.raises(InputError, match="nothing there|not found"):
        audit(f"gs://{BUCKET}/no-such-prefix/")
