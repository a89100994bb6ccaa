"""Keras files read directly: .keras archives (config.json + model.weights.h5) and legacy .h5
models, built here with Keras (torch backend) from small configs, random weights plus noise.

Truth from the layer objects: num_heads / num_query_heads, num_key_value_heads, key_dim / head_dim,
value_dim, count_params() of each attention layer and of the model. The reader reads the HDF5
object headers only: an audit reads a small part of a file whose weights are large.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest

import mhainspect
from mhainspect.errors import InputError
from mhainspect.results import EvidenceSource, Report
from mhainspect.sources.blob import LocalBlob

pytest.importorskip("h5py")
D = 32


@pytest.fixture(scope="module")
def keras() -> Any:
    pytest.importorskip("torch")
    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        pytest.skip("keras is loaded with another backend")
    return keras


def _noise(keras: Any, model: Any, seed: int = 0) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    for v in model.weights:
        value = keras.ops.convert_to_numpy(v.value)
        v.assign(value + rng.normal(0, 0.02, value.shape).astype(value.dtype))


def _model(keras: Any, layer: Any, *, value_width: int | None = None, key_width: int | None = None,
           causal: bool = False) -> Any:
    q = keras.Input((8, D), name="query")
    if value_width is None:
        model = keras.Model(q, layer(q, q, use_causal_mask=True) if causal else layer(q, q))
    else:
        v = keras.Input((6, value_width), name="value")
        if key_width is None:
            model = keras.Model([q, v], layer(q, v))
        else:
            k = keras.Input((6, key_width), name="key")
            model = keras.Model([q, v, k], layer(q, v, k))
    _noise(keras, model)
    return model


def _truth(keras: Any, layer: Any) -> tuple[Any, ...]:
    if isinstance(layer, keras.layers.GroupQueryAttention):
        return (layer.num_query_heads, layer.num_key_value_heads, layer.head_dim, layer.head_dim, layer.count_params())
    return (layer.num_heads, layer.num_heads, layer.key_dim, layer.value_dim or layer.key_dim, layer.count_params())


def _found(report: Report) -> list[tuple[Any, ...]]:
    return [(b.num_heads, b.num_kv_heads, b.d_k, b.d_v, b.params.total) for b in report.blocks]


CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "self": ("mha", {"num_heads": 4, "key_dim": 8}, {}),
    "per_head_width": ("mha", {"num_heads": 4, "key_dim": 32}, {}),  # the seed question: scales with heads
    "cross": ("mha", {"num_heads": 4, "key_dim": 8}, {"value_width": 24}),
    "cross_key_value": ("mha", {"num_heads": 2, "key_dim": 8, "value_dim": 12}, {"value_width": 24, "key_width": 20}),
    "value_dim": ("mha", {"num_heads": 4, "key_dim": 8, "value_dim": 6}, {}),
    "output_shape": ("mha", {"num_heads": 2, "key_dim": 8, "output_shape": 20}, {}),
    "no_bias": ("mha", {"num_heads": 4, "key_dim": 8, "use_bias": False}, {}),
    "causal": ("mha", {"num_heads": 4, "key_dim": 8}, {"causal": True}),
    "gqa": ("gqa", {"head_dim": 8, "num_query_heads": 4, "num_key_value_heads": 2}, {}),
    "mqa": ("gqa", {"head_dim": 8, "num_query_heads": 4, "num_key_value_heads": 1}, {}),
    "gqa_no_bias": ("gqa", {"head_dim": 6, "num_query_heads": 6, "num_key_value_heads": 3, "use_bias": False}, {}),
}


def _layer(keras: Any, case: str) -> tuple[Any, dict[str, Any]]:
    kind, kwargs, call = CASES[case]
    cls = keras.layers.MultiHeadAttention if kind == "mha" else keras.layers.GroupQueryAttention
    return cls(name="attn", **kwargs), call


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
@pytest.mark.parametrize("case", list(CASES))
def test_keras_file_gives_the_layer(keras: Any, case: str, suffix: str, tmp_path: Path) -> None:
    layer, call = _layer(keras, case)
    model = _model(keras, layer, **call)
    path = tmp_path / f"model{suffix}"
    model.save(str(path))
    report = mhainspect.inspect(str(path))
    assert _found(report) == [_truth(keras, layer)]
    (block,) = report.blocks
    assert str(block.kind) == ("cross" if "value_width" in call else "self")
    assert block.d_model == D
    assert report.model.total_params == model.count_params()
    assert report.model.format == ("keras" if suffix == ".keras" else "keras-h5")
    sources = {e.field: e.source for e in block.evidence}
    assert sources["num_heads"] in (EvidenceSource.KERNEL_SHAPE, EvidenceSource.CONFIG)
    assert {EvidenceSource.KERNEL_SHAPE, EvidenceSource.CONFIG} <= {e.source for e in block.evidence}


def test_per_head_key_dim_scales_with_heads(keras: Any, tmp_path: Path) -> None:
    """Keras' key_dim is per head: MultiHeadAttention(num_heads=4, key_dim=32) on 32 channels holds
    4·32-wide projections, and the report says its count follows the head count (MHA001)."""
    layer, call = _layer(keras, "per_head_width")
    _model(keras, layer, **call).save(str(tmp_path / "m.keras"))
    report = mhainspect.inspect(str(tmp_path / "m.keras"))
    (flag,) = [f for f in report.flags if f.code == "MHA001"]
    assert "scale" in flag.message
    (block,) = report.blocks
    halves = {w.num_heads: w.head_dim_fixed for w in block.what_if}
    assert halves[2] < block.params.total < halves[8]


def test_a_folder_holding_only_model_keras(keras: Any, tmp_path: Path) -> None:
    layer, call = _layer(keras, "gqa")
    _model(keras, layer, **call).save(str(tmp_path / "model.keras"))
    (report,) = mhainspect.inspect_all(str(tmp_path))
    assert _found(report) == [_truth(keras, layer)]


def test_extracted_weights_with_their_config(keras: Any, tmp_path: Path) -> None:
    """model.weights.h5 with the archive's config.json beside it (an extracted archive), or the
    folder holding them, reads as the archive does."""
    layer, call = _layer(keras, "value_dim")
    model = _model(keras, layer, **call)
    model.save(str(tmp_path / "m.keras"))
    out = tmp_path / "extracted"
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        z.extractall(out)
    for target in (out / "model.weights.h5", out):  # the weights file, or the folder holding the archive's files
        report = mhainspect.inspect(str(target))
        assert _found(report) == [_truth(keras, layer)]
        assert report.model.total_params == model.count_params()
    (out / "config.json").unlink()
    with pytest.raises(InputError, match="without the model's config"):
        mhainspect.inspect(str(out / "model.weights.h5"))


def test_weight_data_is_not_read(keras: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only HDF5 object headers are read: a file of 4 MB of weights costs a few kB."""
    layer = keras.layers.MultiHeadAttention(num_heads=8, key_dim=64, name="attn")
    q = keras.Input((4, 256))
    keras.Model(q, layer(q, q)).save(str(tmp_path / "big.keras"))
    read = 0
    original = LocalBlob.read

    def counting(self: LocalBlob, offset: int, length: int) -> bytes:
        nonlocal read
        data = original(self, offset, length)
        read += len(data)
        return data

    monkeypatch.setattr(LocalBlob, "read", counting)
    report = mhainspect.inspect(str(tmp_path / "big.keras"))
    assert report.blocks[0].num_heads == 8
    size = (tmp_path / "big.keras").stat().st_size
    assert size > 2_000_000 and read < size // 20, (read, size)


def _one_line_error(path: Path, match: str) -> None:
    with pytest.raises(InputError, match=match) as info:
        mhainspect.inspect(str(path))
    assert "\n" not in str(info.value)


def test_broken_keras_files_are_one_line(tmp_path: Path) -> None:
    fake = tmp_path / "fake.keras"
    with zipfile.ZipFile(fake, "w") as z:
        z.writestr("config.json", '{"class_name": "Functional", "config": {}}')
        z.writestr("model.weights.h5", b"\x89HDF\r\n\x1a\n" + bytes(64))
    _one_line_error(fake, "Keras archive")
    bad_json = tmp_path / "bad.keras"
    with zipfile.ZipFile(bad_json, "w") as z:
        z.writestr("config.json", "{not json")
        z.writestr("model.weights.h5", b"")
    _one_line_error(bad_json, "not valid JSON")
    deflated = tmp_path / "deflated.keras"
    with zipfile.ZipFile(deflated, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("config.json", '{"class_name": "Functional", "config": {}}')
        z.writestr("model.weights.h5", b"\x89HDF\r\n\x1a\n" + bytes(4096))
    _one_line_error(deflated, "compressed")
    h5 = tmp_path / "junk.h5"
    h5.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(504))
    _one_line_error(h5, "HDF5")


def test_hdf5_without_a_keras_model(tmp_path: Path) -> None:
    import h5py

    with h5py.File(tmp_path / "data.h5", "w") as f:
        f.create_dataset("x", data=[1.0, 2.0])
    _one_line_error(tmp_path / "data.h5", "holds no Keras model")


def test_keras_archive_at_a_url(keras: Any, tmp_path: Path) -> None:
    """A .keras archive at an HTTP(S) URL reads by ranges as a local one does: the zip directory,
    config.json and the HDF5 headers, a small part of a file whose weights are large."""
    from remote_servers import FileServer

    layer = keras.layers.GroupQueryAttention(head_dim=64, num_query_heads=8, num_key_value_heads=2, name="attn")
    q = keras.Input((4, 512))
    model = keras.Model(q, layer(q, q))
    model.save(str(tmp_path / "model.keras"))
    local = mhainspect.inspect(str(tmp_path / "model.keras"))
    with FileServer(tmp_path) as server:
        remote = mhainspect.inspect(server.url("model.keras"))
        sent = server.log.bytes
    assert _found(remote) == _found(local) == [_truth(keras, layer)]
    assert remote.model.total_params == model.count_params()
    size = (tmp_path / "model.keras").stat().st_size
    assert size > 2_000_000 and sent < size // 10, (sent, size)


def _stacked(keras: Any, layers: int) -> Any:
    """A model of ``layers`` attention layers (each followed by a Dense), random weights plus noise."""
    q = keras.Input((4, 256), name="query")
    x = q
    for i in range(layers):
        x = keras.layers.MultiHeadAttention(num_heads=8, key_dim=32, name=f"attn{i}")(x, x)
        x = keras.layers.Dense(256, name=f"dense{i}")(x)
    model = keras.Model(q, x)
    _noise(keras, model)
    return model


def test_legacy_h5_at_a_url(keras: Any, tmp_path: Path) -> None:
    """A legacy .h5 model at an HTTP(S) URL is read by the reader of a local one, through its blob:
    the same JSON but for the path. h5py reads the file in about a thousand small reads; the view under
    it fetches a window around each object header it jumps to, so the requests follow the HDF5
    objects (about one per variable), and the bytes stay a small part of the file."""
    from remote_servers import FileServer
    from test_remote import report_json

    model = _stacked(keras, 3)
    model.save(str(tmp_path / "model.h5"))
    local = report_json(tmp_path / "model.h5", base=str(tmp_path))
    with FileServer(tmp_path) as server:
        remote = report_json(server.url("model.h5"), base=server.url())
        server.log.settle()
        requests, sent = server.log.requests, server.log.bytes
    assert remote == local
    assert json.loads(local)["model"]["format"] == "keras-h5"
    size = (tmp_path / "model.h5").stat().st_size
    assert requests <= 2 * len(model.weights) + 8, requests
    assert size > 2_000_000 and sent < size // 20, (sent, size)


def test_extracted_archive_folder_on_a_hub(keras: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An extracted .keras archive (config.json + model.weights.h5) as a Hub repository is read as
    the local folder is, through the repository's tree: the same JSON but for the path."""
    from remote_servers import Repo, hub
    from test_remote import report_json

    from mhainspect.sources.transports import hub as hub_module

    model = _stacked(keras, 2)
    model.save(str(tmp_path / "m.keras"))
    folder = tmp_path / "extracted"
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        z.extractall(folder)
    local = report_json(folder, base=str(folder))
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    hub_module._LISTINGS.clear()
    with hub(tmp_path / "hub", {"org/keras": Repo(folder)}) as (api, storage):
        monkeypatch.setenv("HF_ENDPOINT", api.endpoint)
        remote = report_json("hf://org/keras", base="hf://org/keras")
        api.log.settle()
        storage.log.settle()
        requests, sent = api.log.requests + storage.log.requests, api.log.bytes + storage.log.bytes
    assert remote == local
    size = (folder / "model.weights.h5").stat().st_size
    assert requests <= 2 * len(model.weights) + 8, requests
    assert size > 1_000_000 and sent < size // 10, (sent, size)


def test_extracted_weights_at_a_url(keras: Any, tmp_path: Path) -> None:
    """model.weights.h5 at a URL, its config.json beside it (a URL's folder lists nothing: the config
    is tried by reading it) reads as the local file does; without the config, the same refusal."""
    from remote_servers import FileServer
    from test_remote import report_json

    model = _stacked(keras, 1)
    model.save(str(tmp_path / "m.keras"))
    folder = tmp_path / "extracted"
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        z.extractall(folder)
    local = report_json(folder / "model.weights.h5", base=str(folder))
    with FileServer(folder) as server:
        assert report_json(server.url("model.weights.h5"), base=server.url()) == local
        (folder / "config.json").unlink()
        with pytest.raises(InputError, match="without the model's config"):
            mhainspect.inspect(server.url("model.weights.h5"))
