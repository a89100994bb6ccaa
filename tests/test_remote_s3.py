"""s3:// through fsspec (s3fs) against an S3 emulator this test starts on 127.0.0.1 (moto's
ThreadedMotoServer): a file, a Hugging Face folder, a folder of several models; requests counted
at the server (its request log) and bytes at the client."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_models import llama_config, llama_tensors, write_hf_folder
from remote_servers import store_requests
from test_remote import report_json, safetensors_floor, within

from mhainspect.errors import InputError
from mhainspect.frontends.folders import expand_models
from mhainspect.pipeline import audit
from mhainspect.sources.transports import store

moto_server = pytest.importorskip("moto.server")
pytest.importorskip("s3fs")
BUCKET = "models"


class _RequestLog(logging.Handler):
    """Counts the requests the emulator's HTTP server logs for the bucket."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if f"/{BUCKET}" in text:
            self.lines.append(text)


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    import os

    import boto3
    import fsspec
    import onnx
    from gguf_files import Decoder
    from test_remote import _onnx_model

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    base = tmp_path_factory.mktemp("s3_models")
    cfg = llama_config(256, 8, 2, 2)
    write_hf_folder(base / "llama", cfg, llama_tensors(256, 8, 2, 2), shards=3)
    (base / "multi" / "onnx").mkdir(parents=True)
    onnx.save(_onnx_model(), base / "multi" / "onnx" / "model.onnx")
    Decoder().write(base / "multi" / "model.gguf")
    _tied_copy(base / "copies")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=url, aws_access_key_id="testing", aws_secret_access_key="testing",
                          region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    for p in sorted(base.rglob("*")):
        if p.is_file():
            client.upload_file(str(p), BUCKET, p.relative_to(base).as_posix())
    saved = dict(fsspec.config.conf)
    fsspec.config.conf["s3"] = {"endpoint_url": url, "key": "testing", "secret": "testing"}
    try:
        yield url, base
    finally:
        fsspec.config.conf.clear()
        fsspec.config.conf.update(saved)
        server.stop()


def _tied_copy(folder: Path) -> None:
    """A tied embedding [2048, 40] and its transposed copy (onnx::MatMul_7), in external data."""
    from test_folded_copies import _model, _table

    folder.mkdir()
    emb = _table(2048, 40)
    _model(folder / "model.onnx", {"model.embed_tokens.weight": emb, "onnx::MatMul_7": emb.T.copy()},
           [("Gather", "model.embed_tokens.weight"), ("MatMul", "onnx::MatMul_7")], external=True)


@pytest.fixture
def requests_log() -> Iterator[_RequestLog]:
    with store_requests("werkzeug", _RequestLog()) as handler:
        yield handler


def test_s3_folder_equals_local(s3: tuple[str, Path], requests_log: _RequestLog) -> None:
    _, base = s3
    local = report_json(base / "llama", base=str(base))
    remote = report_json(f"s3://{BUCKET}/llama/", base=f"s3://{BUCKET}")
    assert remote == local
    shards = sorted((base / "llama").glob("*.safetensors"))
    # the listing, config.json, the index, one range per shard
    assert store.counters.requests == 3 + len(shards)
    assert len(requests_log.lines) == store.counters.requests
    floor = sum(safetensors_floor(p) for p in shards)
    within(store.counters.requests, store.counters.bytes, floor_requests=3 + len(shards),
           floor_bytes=floor + (base / "llama/config.json").stat().st_size
           + (base / "llama/model.safetensors.index.json").stat().st_size, files=len(shards) + 2, extra_requests=0)


def test_s3_file_equals_local(s3: tuple[str, Path], requests_log: _RequestLog) -> None:
    _, base = s3
    rel = "llama/model-00002-of-00003.safetensors"
    assert report_json(f"s3://{BUCKET}/{rel}", base=f"s3://{BUCKET}") == report_json(base / rel, base=str(base))
    assert store.counters.requests <= 3  # the folder's listing, the header, config.json beside it


def test_s3_folder_of_models(s3: tuple[str, Path], requests_log: _RequestLog) -> None:
    _, base = s3
    models = expand_models([f"s3://{BUCKET}/multi"])
    assert models == (f"s3://{BUCKET}/multi/model.gguf", f"s3://{BUCKET}/multi/onnx/model.onnx")
    for spec in models:
        assert isinstance(spec, str)
        rel = spec[len(f"s3://{BUCKET}/"):]
        assert report_json(spec, base=f"s3://{BUCKET}") == report_json(base / rel, base=str(base))
    assert sum("list-type" in line for line in requests_log.lines) == 1  # listed once: expanded, then each read


def test_s3_missing(s3: tuple[str, Path]) -> None:
    with pytest.raises(InputError, match="no file or folder 'nope.gguf'|not found"):
        audit(f"s3://{BUCKET}/multi/nope.gguf")
    with pytest.raises(InputError, match="nothing there|not found"):
        audit(f"s3://{BUCKET}/no-such-prefix/")


def test_s3_copy_decided_by_ranges_of_the_data_file(s3: tuple[str, Path], requests_log: _RequestLog) -> None:
    """The transposed copy is recognised by its values, read from the data file in a few ranges (its
    first and last elements, a sample of each tensor), never whole: the report is the local one."""
    from mhainspect.ir.copies import SAMPLE

    _, base = s3
    local = report_json(base / "copies" / "model.onnx", base=str(base))
    assert "onnx::MatMul_7 [40, 2048] = model.embed_tokens.weight [2048, 40] transposed" in local
    remote = report_json(f"s3://{BUCKET}/copies/model.onnx", base=f"s3://{BUCKET}")
    assert remote == local
    data = (base / "copies" / "weights.bin").stat().st_size
    model = (base / "copies" / "model.onnx").stat().st_size
    # the listing, the model, config.json beside it (absent: not asked), the values
    print(f"s3 copy: {store.counters.requests} requests {store.counters.bytes:,} B (model {model:,} B, data {data:,} B)")
    assert store.counters.requests <= 2 + 2 * (2 + SAMPLE)
    assert store.counters.bytes <= model + 64 * 1024 + 2 * (2 + SAMPLE) * 64  # a few bytes a range
    assert store.counters.bytes < data // 4
