"""Benchmark: what a remote Keras file costs (requests, bytes) against its local audit, on loopback.

    KERAS_BACKEND=torch python benchmarks/keras_remote.py [--layers 12] [--width 256] [--dir DIR]

Builds a Keras model (torch backend) of ``--layers`` MultiHeadAttention layers (8 heads, each
followed by a Dense; random weights) and saves it three ways: a legacy ``model.h5``, a
``model.keras`` archive, and that archive extracted (config.json + model.weights.h5). Each is
audited locally, then remotely through the tests' servers on 127.0.0.1 (tests/remote_servers.py):
the .h5 and the .keras at a plain URL, the extracted folder as a Hub repository. Prints each
form's size, the requests and bytes the servers answered, h5py's reads through the blob (what the
requests would be with one read a request), and whether the remote JSON equals the local one but
for the path. Needs keras, torch and h5py. Files go to --dir or /tmp/mhainspect-bench/keras.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("KERAS_BACKEND", "torch")


def build(folder: Path, layers: int, width: int) -> int:
    """The three forms of one model in ``folder``; returns its variable count."""
    import keras
    import numpy as np

    q = keras.Input((4, width), name="query")
    x = q
    for i in range(layers):
        x = keras.layers.MultiHeadAttention(num_heads=8, key_dim=width // 8, name=f"attn{i}")(x, x)
        x = keras.layers.Dense(width, name=f"dense{i}")(x)
    model = keras.Model(q, x)
    rng = np.random.default_rng(0)
    for v in model.weights:
        value = keras.ops.convert_to_numpy(v.value)
        v.assign(value + rng.normal(0, 0.02, value.shape).astype(value.dtype))
    folder.mkdir(parents=True, exist_ok=True)
    model.save(str(folder / "model.h5"))
    model.save(str(folder / "model.keras"))
    with zipfile.ZipFile(folder / "model.keras") as z:
        z.extractall(folder / "extracted")
    return len(model.weights)


def without_path(text: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(text)
    doc["model"]["path"] = ""
    return doc


class ReadCount:
    """h5py's reads through BlobFile while it is installed."""

    def __init__(self) -> None:
        from mhainspect.sources.blob import BlobFile

        self.reads = 0
        self.cls = BlobFile
        self.read, self.readinto = BlobFile.read, BlobFile.readinto

    def __enter__(self) -> ReadCount:
        counter = self

        def read(blob_file: Any, size: int | None = -1) -> bytes:
            counter.reads += 1
            return counter.read(blob_file, size)  # type: ignore[no-any-return]

        def readinto(blob_file: Any, buffer: Any) -> int:
            counter.reads += 1
            return counter.readinto(blob_file, buffer)  # type: ignore[no-any-return]

        self.cls.read, self.cls.readinto = read, readinto  # type: ignore[method-assign, assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        self.cls.read, self.cls.readinto = self.read, self.readinto  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("MHAINSPECT_BENCH_DIR", "/tmp/mhainspect-bench"))
                        / "keras")
    args = parser.parse_args()

    from remote_servers import FileServer, Repo, hub

    import mhainspect
    from mhainspect.sources.transports import hub as hub_module

    folder: Path = args.dir
    variables = build(folder, args.layers, args.width)
    os.environ["HF_HOME"] = str(folder / "home")
    os.environ["HF_HUB_CACHE"] = str(folder / "cache")
    print(f"{args.layers} attention layers, width {args.width}: {variables} variables\n")
    print("| form | size | requests | bytes | reads through BlobFile (h5py, zipfile) | JSON as local |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for rel in ("model.h5", "model.keras", "extracted"):
        local = without_path(mhainspect.inspect(str(folder / rel)).to_json())
        hub_module._LISTINGS.clear()
        with ReadCount() as count:
            if rel == "extracted":
                with hub(folder / "hub", {"org/keras": Repo(folder / rel)}) as (api, storage):
                    os.environ["HF_ENDPOINT"] = api.endpoint
                    remote = mhainspect.inspect("hf://org/keras").to_json()
                    api.log.settle()
                    storage.log.settle()
                    requests = api.log.requests + storage.log.requests
                    sent = api.log.bytes + storage.log.bytes
            else:
                with FileServer(folder) as server:
                    remote = mhainspect.inspect(server.url(rel)).to_json()
                    server.log.settle()
                    requests, sent = server.log.requests, server.log.bytes
        path = folder / rel if rel != "extracted" else folder / rel / "model.weights.h5"
        same = "yes" if without_path(remote) == local else "NO"
        print(f"| {rel} | {path.stat().st_size:,} | {requests} | {sent:,} | {count.reads:,} | {same} |")


if __name__ == "__main__":
    main()
