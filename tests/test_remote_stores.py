"""s3://, gs:// and az:// through fsspec, each against an emulator started on 127.0.0.1
(tests/object_stores.py): a sharded Hugging Face folder, a safetensors file, a GGUF file, a folder of
several models and an ONNX model whose transposed copy is decided by ranges of its data file. Every
report equals the local one; requests are counted at the server (or the SDK) and at the client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from object_stores import STORES, Store, write_models
from test_remote import gguf_floor, report_json, safetensors_floor, within

from mhainspect.errors import InputError
from mhainspect.frontends.folders import expand_models
from mhainspect.pipeline import audit
from mhainspect.sources.transports import store as reader


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("store_models")
    write_models(base)
    return base


@pytest.fixture(scope="module", params=sorted(STORES))
def store(request: pytest.FixtureRequest, models: Path) -> Iterator[Store]:
    with STORES[request.param](models) as started:
        yield started


def _same(store: Store, rel: str) -> None:
    assert report_json(f"{store.url}/{rel}", base=store.url) == report_json(store.base / rel, base=str(store.base))


def test_folder_equals_local(store: Store) -> None:
    base = store.base
    with store.requests() as log:
        _same(store, "llama/")
    shards = sorted((base / "llama").glob("*.safetensors"))
    # the listing, config.json, the index, one range per shard
    assert reader.counters.requests == 3 + len(shards)
    assert len(log.lines) == reader.counters.requests + store.extra_folder_requests, log.lines
    assert sum(map(store.is_listing, log.lines)) == 1
    floor = sum(safetensors_floor(p) for p in shards)
    within(reader.counters.requests, reader.counters.bytes, floor_requests=3 + len(shards),
           floor_bytes=floor + (base / "llama/config.json").stat().st_size
           + (base / "llama/model.safetensors.index.json").stat().st_size, files=len(shards) + 2, extra_requests=0)


def test_safetensors_file_equals_local(store: Store) -> None:
    with store.requests() as log:
        _same(store, "llama/model-00002-of-00003.safetensors")
    assert reader.counters.requests <= 3  # the folder's listing, the header, config.json beside it
    assert len(log.lines) == reader.counters.requests + store.extra_file_requests, log.lines
    assert sum(map(store.is_listing, log.lines)) == store.file_listings


def test_gguf_file_equals_local(store: Store) -> None:
    rel = "multi/model.gguf"
    with store.requests() as log:
        _same(store, rel)
    within(reader.counters.requests, reader.counters.bytes, floor_requests=2, floor_bytes=gguf_floor(store.base / rel))
    assert len(log.lines) == reader.counters.requests + store.extra_file_requests, log.lines


def test_folder_of_models(store: Store) -> None:
    with store.requests() as log:
        models = expand_models([f"{store.url}/multi"])
        assert models == (f"{store.url}/multi/model.gguf", f"{store.url}/multi/onnx/model.onnx")
        for spec in models:
            assert isinstance(spec, str)
            _same(store, spec[len(store.url) + 1:])
    assert sum(map(store.is_listing, log.lines)) == 1, log.lines  # listed once: expanded, then each model read


def test_missing(store: Store) -> None:
    with pytest.raises(InputError, match="no file or folder 'nope.gguf'|not found"):
        audit(f"{store.url}/multi/nope.gguf")
    with pytest.raises(InputError, match="nothing there|not found"):
        audit(f"{store.url}/no-such-prefix/")


def test_copy_decided_by_ranges_of_the_data_file(store: Store) -> None:
    """The transposed copy is recognised by its values, read from the data file in a few ranges (its
    first and last elements, a sample of each tensor), never whole: the report is the local one."""
    from mhainspect.ir.copies import SAMPLE

    base = store.base
    local = report_json(base / "copies" / "model.onnx", base=str(base))
    assert "onnx::MatMul_7 [40, 2048] = model.embed_tokens.weight [2048, 40] transposed" in local
    with store.requests():
        assert report_json(f"{store.url}/copies/model.onnx", base=store.url) == local
    data = (base / "copies" / "weights.bin").stat().st_size
    model = (base / "copies" / "model.onnx").stat().st_size
    # the listing, the model, config.json beside it (absent: not asked), the values
    assert reader.counters.requests <= 2 + 2 * (2 + SAMPLE)
    assert reader.counters.bytes <= model + 64 * 1024 + 2 * (2 + SAMPLE) * 64  # a few bytes a range
    assert reader.counters.bytes < data // 4
