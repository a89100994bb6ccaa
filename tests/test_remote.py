"""Models read over HTTP by ranges, from a server this test starts on 127.0.0.1: a remote report
equals the local report of the same files (JSON identical but for the path), for every format,
within the cost floor (requests: the floor plus a small constant; bytes: 1.5x the floor plus
64 KiB a file), and a misbehaving server ends in one line after a capped number of bytes."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from attention_graphs import Nodes, Weights, mha_nodes, model, shape_consts, value
from gguf_files import Decoder
from remote_models import (
    copy_check_floor,
    llama_config,
    llama_tensors,
    onnx_floor,
    vocabulary,
    write_hf_folder,
    write_safetensors,
)
from remote_servers import FileServer

from mhainspect.errors import InputError
from mhainspect.pipeline import audit
from mhainspect.render.json_render import report_to_dict
from mhainspect.sources.transports import http

KIB = 1024
REPO_ROOT = Path(__file__).resolve().parents[1]


def report_json(source: str | Path, *, base: str) -> str:
    """The report's JSON with ``base`` (the folder or URL prefix the model lives under) written <base>."""
    text = json.dumps(report_to_dict(audit(source)), sort_keys=True)
    return text.replace(base.rstrip("/"), "<base>")


def within(requests: int, sent: int, *, floor_requests: int, floor_bytes: int, files: int = 1,
           extra_requests: int = 2, values: tuple[int, int] = (0, 0)) -> None:
    """``values``: the (spans, bytes) a copy check reads (remote_models.copy_check_floor), on top."""
    assert requests <= floor_requests + extra_requests + values[0], (requests, floor_requests, values)
    assert sent <= 1.5 * floor_bytes + 64 * KIB * files + values[1], (sent, floor_bytes, values)


# ---------------------------------------------------------------------------------------------- models


def _onnx_model(layers: int = 2, d: int = 64, heads: int = 4) -> onnx.ModelProto:
    g = Nodes()
    x = "x"
    for i in range(layers):
        w = Weights(f"layers.{i}.attn", d)
        g.inits.extend(w.tensors())
        x = mha_nodes(g, f"/layers.{i}/attn", x, w.prefix, heads, d // heads)
    g.inits.extend(shape_consts(heads, d // heads))
    return model(g.nodes, g.inits, [value("x", "batch", "seq", d)], [value(x, "batch", "seq", d)])


def _torch_state(path: Path, d: int = 32, heads: int = 4, layers: int = 2, wrap: bool = False) -> None:
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    state: dict[str, Any] = {}
    for name, (_dtype, shape) in llama_tensors(d, heads, heads // 2, layers, vocab=64).items():
        t = torch.randn(*shape, generator=gen)
        state[name] = torch.nn.Parameter(t) if name.endswith("q_proj.weight") else t.to(torch.bfloat16)
    state["lm_head.weight"] = state["model.embed_tokens.weight"]  # one storage under two names
    torch.save({"state_dict": state, "epoch": 3} if wrap else state, path)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("remote_models")
    cfg = llama_config(256, 8, 2, 2)
    write_hf_folder(base / "st", cfg, llama_tensors(256, 8, 2, 2), shards=1)
    write_hf_folder(base / "sharded", cfg, llama_tensors(256, 8, 2, 2), shards=3)
    write_hf_folder(base / "sharded_noindex", cfg, llama_tensors(256, 8, 2, 2), shards=2, index=False)
    big = llama_tensors(256, 8, 2, 120)  # a header of ~120 KB: longer than the first range
    (base / "big").mkdir()
    write_safetensors(base / "big" / "model.safetensors", big)
    onnx.save(_onnx_model(), base / "model.onnx")
    (base / "ext").mkdir()
    onnx.save_model(_onnx_model(), str(base / "ext" / "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=1024)
    (base / "gguf").mkdir()
    dec = Decoder(metadata={"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": vocabulary(20000),
                            "tokenizer.ggml.token_type": [1] * 20000})
    dec.write(base / "gguf" / "model.gguf")
    (base / "split").mkdir()
    dec.write(base / "split" / "model.gguf", split_max_tensors=8)
    return base


@pytest.fixture(scope="module")
def torch_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("remote_torch")
    _torch_state(base / "model.pt")
    (base / "bin").mkdir()
    (base / "bin" / "config.json").write_text(json.dumps(llama_config(32, 4, 2, 2, vocab=64)))
    _torch_state(base / "bin" / "pytorch_model.bin", wrap=True)
    return base


@pytest.fixture
def server(root: Path) -> Iterator[FileServer]:
    with FileServer(root) as s:
        yield s


# ---------------------------------------------------------------------------------------------- floors


def safetensors_floor(path: Path) -> int:
    with open(path, "rb") as fh:
        return 8 + struct.unpack("<Q", fh.read(8))[0]


def gguf_floor(path: Path) -> int:
    from mhainspect.frontends.gguf.reader import read_header

    h = read_header(path)
    return h.data_offset


def zip_floor(path: Path) -> int:
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        pkl = next(i for i in infos if i.filename.endswith("data.pkl"))
        directory = sum(46 + len(i.filename) + len(i.extra) for i in infos)
    return directory + 22 + 30 + len(pkl.filename) + pkl.compress_size


# ---------------------------------------------------------------------------------------------- equality


@pytest.mark.parametrize("rel", ["st/model.safetensors", "big/model.safetensors", "model.onnx", "ext/model.onnx",
                                 "gguf/model.gguf", "split/model-00001-of-00003.gguf"])
def test_url_report_equals_local(root: Path, server: FileServer, rel: str) -> None:
    local = report_json(root / rel, base=str(root))
    server.log.reset()
    remote = report_json(server.url(rel), base=server.url(""))
    assert remote == local
    assert server.log.requests > 0


def test_safetensors_costs_one_range(root: Path, server: FileServer) -> None:
    audit(server.url("st/model.safetensors"))
    file_log = server.log.by_path["/st/model.safetensors"]
    assert file_log[0] == 1  # the header is in the first speculative range
    within(file_log[0], file_log[1], floor_requests=1, floor_bytes=safetensors_floor(root / "st/model.safetensors"))
    assert server.log.by_path["/st/config.json"][0] == 1  # the config beside it, read once


def test_long_safetensors_header_costs_a_second_range(root: Path, server: FileServer) -> None:
    audit(server.url("big/model.safetensors"))
    requests, sent = server.log.by_path["/big/model.safetensors"]
    floor = safetensors_floor(root / "big/model.safetensors")
    assert floor > 64 * KIB
    assert requests == 2
    assert sent == floor  # the second range starts where the first ended: no byte twice
    assert "/big/config.json" in server.log.by_path  # tried (absent: 404)


def test_gguf_header_in_a_few_ranges_never_twice(root: Path, server: FileServer) -> None:
    path = root / "gguf/model.gguf"
    audit(server.url("gguf/model.gguf"))
    requests, sent = server.log.by_path["/gguf/model.gguf"]
    floor = gguf_floor(path)
    assert floor > 4 * 64 * KIB  # the tokenizer makes the header longer than a few first ranges
    # The first range, then the rest of the vocabulary at the mean length of the tokens in the first
    # (the per-token types after it, the tensor infos): the floor + 1.
    assert requests == 2
    within(requests, sent, floor_requests=1, floor_bytes=floor, extra_requests=1)
    assert sent < path.stat().st_size  # the tensor data is not fetched


def _gguf_ranges(dec: Decoder, tmp_path: Path, header_above: int) -> int:
    """The requests a GGUF file written by ``dec`` (a header longer than ``header_above``) costs at a
    URL, after checking that its remote report equals the local one and that the bytes stay within
    1.5x the header + 64 KiB (the requests within the floor + 2)."""
    path = tmp_path / "model.gguf"
    dec.write(path)
    floor = gguf_floor(path)
    assert floor > header_above
    local = report_json(path, base=str(tmp_path))
    with FileServer(tmp_path) as s:
        remote = report_json(s.url("model.gguf"), base=s.url(""))
        requests, sent = s.log.by_path["/model.gguf"]
    assert remote == local
    within(requests, sent, floor_requests=1, floor_bytes=floor)
    return requests


def test_gguf_sentencepiece_tokenizer_header_in_two_ranges(tmp_path: Path) -> None:
    """Tokens, then their scores (float32) and types (int32), as in a SentencePiece tokenizer
    (~5 MB): the first range samples the tokens, the second holds the rest of the header."""
    n = 200000
    dec = Decoder(metadata={"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": vocabulary(n),
                            "tokenizer.ggml.scores": [0.5] * n, "tokenizer.ggml.token_type": [1] * n})
    assert _gguf_ranges(dec, tmp_path, header_above=4 * 1024 * KIB) == 2


def test_gguf_bpe_tokenizer_header_in_three_ranges(tmp_path: Path) -> None:
    """Short string arrays (tags, languages), then tokens, their types and merges (a BPE tokenizer,
    ~4.6 MB): the first range samples the tokens,
    the second holds the rest of them, the types and a sample of the merges, the third the rest of
    the merges and the tensor infos. No byte twice, at most 1.5x the header."""
    from remote_models import merges

    dec = Decoder(metadata={"general.tags": ["text-generation", "llama"], "general.languages": ["en", "de"],
                            "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": vocabulary(120000),
                            "tokenizer.ggml.token_type": [1] * 120000, "tokenizer.ggml.merges": merges(120000)})
    assert _gguf_ranges(dec, tmp_path, header_above=2 * 1024 * KIB) == 3


def test_split_gguf_reads_each_part_header(root: Path, server: FileServer) -> None:
    audit(server.url("split/model-00002-of-00003.gguf"))
    parts = sorted((root / "split").glob("model-*-of-*.gguf"))
    assert len(parts) == 3
    for p in parts:
        requests, sent = server.log.by_path[f"/split/{p.name}"]
        within(requests, sent, floor_requests=1, floor_bytes=gguf_floor(p), extra_requests=1)


def test_onnx_skips_payloads(root: Path, server: FileServer) -> None:
    from mhainspect.frontends.onnx.wire import stripped

    path = root / "model.onnx"
    audit(server.url("model.onnx"))
    requests, sent = server.log.by_path["/model.onnx"]
    data = path.read_bytes()
    kept = len(stripped(memoryview(data)))
    assert kept < len(data) / 4
    spans, _ = onnx_floor(path)
    within(requests, sent, floor_requests=spans, floor_bytes=kept, extra_requests=2)
    assert sent < len(data)


def test_large_inline_onnx_costs_under_two_percent(tmp_path: Path) -> None:
    from remote_models import write_sparse_onnx

    path = tmp_path / "model.onnx"
    payloads = write_sparse_onnx(path, layers=12, d=512, heads=8)  # ~240 MB, sparse
    size = path.stat().st_size
    local = report_json(path, base=str(tmp_path))
    with FileServer(tmp_path) as s:
        remote = report_json(s.url("model.onnx"), base=s.url(""))
        requests, sent = s.log.by_path["/model.onnx"]
    assert remote == local
    assert sent < 0.02 * size
    # The floor with one range a request: the spans the payloads cut the needed bytes into (the
    # biases, under 4 KiB, are kept whole with the header after them). The first range and the
    # rest of the graph's nodes, then a header each, predicted from layer 1 on; no window wasted.
    spans, kept = onnx_floor(path)
    assert payloads > spans > 6 * 12
    within(requests, sent, floor_requests=spans, floor_bytes=kept, extra_requests=2)


def test_torch_exported_onnx_with_anonymous_weight_names(tmp_path: Path) -> None:
    """torch.onnx's exporter names transposed weights onnx::MatMul_N (one name pattern for all of
    them) and writes the biases before them (kept whole under 4 KiB; the MLP's 4 KiB ones are skipped,
    so the read-ahead over them must not run on into their payloads): the predictions follow the
    numbers' step a layer, checked against the nodes; a few early guesses (equal-sized q/k/v/o
    look like a pattern of one) cost a small window each."""
    torch = pytest.importorskip("torch")

    class Layer(torch.nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
            self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

        def forward(self, x: Any) -> Any:
            b, t, d = x.shape
            q, k, v = (p(x).view(b, t, 4, d // 4).transpose(1, 2) for p in (self.q, self.k, self.v))
            a = torch.softmax(q @ k.transpose(-1, -2) / (d // 4) ** 0.5, -1) @ v
            x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
            return x + self.down(torch.relu(self.up(x)))

    model = torch.nn.Sequential(*(Layer(256) for _ in range(6))).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.01)
    path = tmp_path / "model.onnx"
    torch.onnx.export(model, (torch.randn(1, 8, 256),), str(path), dynamo=False, input_names=["x"],
                      dynamic_axes={"x": {1: "t"}})
    local = report_json(path, base=str(tmp_path))
    with FileServer(tmp_path) as s:
        remote = report_json(s.url("model.onnx"), base=s.url(""))
        requests, sent = s.log.by_path["/model.onnx"]
    assert remote == local
    spans, kept = onnx_floor(path)
    assert spans > 6 * 6
    # Every MatMul weight is an exporter-named float tensor (onnx::MatMul_N): a copy candidate, whose
    # first and last elements and first slices along each axis are read (none is a copy).
    values = copy_check_floor(path)
    assert values[0] > 0
    within(requests, sent, floor_requests=spans, floor_bytes=kept, extra_requests=10, values=values)


def test_onnx_initializers_before_nodes_predicted_two_layers_at_a_time(tmp_path: Path) -> None:
    """Initializers before the nodes (valid, if not what a serializer writes): no node names to
    check a prediction by, so two layers ahead at a time; the round past the last layer is the
    waste (at most two layers' tensors), the nodes after the payloads are read in a few ranges."""
    from remote_models import write_sparse_onnx

    path = tmp_path / "model.onnx"
    write_sparse_onnx(path, layers=12, d=512, heads=8, inits_first=True)
    local = report_json(path, base=str(tmp_path))
    with FileServer(tmp_path) as s:
        remote = report_json(s.url("model.onnx"), base=s.url(""))
        requests, sent = s.log.by_path["/model.onnx"]
    assert remote == local
    spans, kept = onnx_floor(path)
    within(requests, sent, floor_requests=spans, floor_bytes=kept, extra_requests=2 * 6 + 10)


def test_onnx_external_data_is_never_fetched(root: Path, server: FileServer) -> None:
    audit(server.url("ext/model.onnx"))
    assert not any(p.endswith(".data") for p in server.log.by_path)
    requests, sent = server.log.by_path["/ext/model.onnx"]
    assert requests == 1 and sent == (root / "ext/model.onnx").stat().st_size


@pytest.mark.parametrize("rel", ["model.pt", "bin/pytorch_model.bin"])
def test_torch_zip_reads_directory_and_pickle_only(torch_root: Path, rel: str) -> None:
    local = report_json(torch_root / rel, base=str(torch_root))
    with FileServer(torch_root) as s:
        remote = report_json(s.url(rel), base=s.url(""))
        requests, sent = s.log.by_path["/" + rel]
    assert remote == local
    within(requests, sent, floor_requests=2, floor_bytes=zip_floor(torch_root / rel))


def test_torch_zip_reads_every_tensor_form_torch_writes(tmp_path: Path) -> None:
    """A state dict of every tensor form torch.save writes (untyped storages with their dtype in
    _rebuild_tensor_v3: fp8, bf16; a parameter; a strided view; an empty and a quantized tensor)
    reads remotely, without torch, as torch.load reads it locally."""
    torch = pytest.importorskip("torch")
    with pytest.warns(UserWarning):  # quantized tensor creation is deprecated; the format is not
        quantized = torch.quantize_per_tensor(torch.randn(5, 4), 0.1, 0, torch.qint8)
    state = {"a.weight": torch.nn.Parameter(torch.randn(4, 8)), "b": torch.randn(3, 2).to(torch.bfloat16),
             "c": torch.randn(6, 2).to(torch.float8_e4m3fn), "d": torch.arange(6).view(2, 3).t(),
             "e": torch.zeros(0), "q": quantized}
    torch.save({"state_dict": state}, tmp_path / "model.pt")
    local = report_json(tmp_path / "model.pt", base=str(tmp_path))
    with FileServer(tmp_path) as s:
        remote = report_json(s.url("model.pt"), base=s.url(""))
    assert remote == local
    assert json.loads(local)["model"]["total_params"] == 32 + 6 + 12  # the float tensors: a, b, c


def test_torch_zip_refuses_other_globals(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import argparse

    # A class the weights-only loader does not allow.
    torch.save({"w": torch.zeros(2, 2), "holder": argparse.Namespace(x=1)}, tmp_path / "model.pt")
    with pytest.raises(InputError) as local:
        audit(tmp_path / "model.pt")
    with FileServer(tmp_path) as s, pytest.raises(InputError) as remote:
        audit(s.url("model.pt"))
    assert "refused" in str(remote.value) and "nothing from the file was run" in str(remote.value)
    assert str(remote.value).replace(s.url(""), "") == str(local.value).replace(str(tmp_path) + "/", "")


# ---------------------------------------------------------------------------------------------- misbehaving servers


def _client_bytes() -> int:
    return http.client().counters.bytes


@pytest.mark.parametrize("rel", ["big/model.safetensors", "gguf/model.gguf", "model.onnx"])
def test_server_ignoring_range_ends_in_one_line(root: Path, rel: str) -> None:
    assert (root / rel).stat().st_size > 64 * KIB  # more than the first range is needed
    with FileServer(root, mode="no_range") as s:
        before = _client_bytes()
        with pytest.raises(InputError, match="ignores Range requests"):
            audit(s.url(rel))
        assert _client_bytes() - before <= 64 * KIB + 1024  # the first range's worth, then it stopped


def test_small_file_from_a_server_ignoring_range_is_read(root: Path) -> None:
    with FileServer(root, mode="no_range") as s:
        report = audit(s.url("st/model.safetensors"))
    assert report.blocks


def test_server_announcing_more_than_it_sends(root: Path) -> None:
    with FileServer(root, mode="short") as s, pytest.raises(InputError, match="misreports lengths|sent"):
        audit(s.url("st/model.safetensors"))


def test_stalled_server_times_out(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MHAINSPECT_REMOTE_TIMEOUT", "0.5")
    with FileServer(root, mode="stall") as s, pytest.raises(InputError, match="stalled"):
        audit(s.url("st/model.safetensors"))


def test_absurd_safetensors_header_length(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}" * 100)
    with FileServer(tmp_path) as s, pytest.raises(InputError, match="header length"):
        audit(s.url("model.safetensors"))
    assert s.log.by_path["/model.safetensors"][0] == 1


def test_absurd_gguf_string_length_is_refused_before_fetching(tmp_path: Path) -> None:
    from gguf_files import kv_bytes, raw_header

    path = tmp_path / "model.gguf"
    body = raw_header(0, 1) + kv_bytes(b"general.name", 8, struct.pack("<Q", 1 << 50) + b"x" * 64)
    with open(path, "wb") as fh:
        fh.write(body)
        fh.truncate(512 * KIB * 1024)  # a 512 MB sparse file: whatever the length says, it is never fetched
    with FileServer(tmp_path) as s, pytest.raises(InputError, match="corrupt GGUF header"):
        audit(s.url("model.gguf"))
    assert s.log.bytes <= 64 * KIB


def test_missing_url_is_one_line(server: FileServer) -> None:
    with pytest.raises(InputError, match=r"not found \(HTTP 404\)"):
        audit(server.url("nope.safetensors"))


def test_redirect_is_followed(root: Path) -> None:
    with FileServer(root) as target, FileServer(root, redirects={"alias.safetensors": target.url(
            "st/model.safetensors")}) as front:
        report = audit(front.url("alias.safetensors"))
    assert len(report.blocks) == 2


def test_unreachable_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MHAINSPECT_REMOTE_TIMEOUT", "2")
    with pytest.raises(InputError, match="cannot reach|no answer"):
        audit("http://127.0.0.1:9/model.safetensors")


def test_cli_remote_error_is_one_line_exit_2(server: FileServer) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "MHAINSPECT_NO_PROGRESS": "1"}
    done = subprocess.run([sys.executable, "-m", "mhainspect", server.url("missing.gguf")], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    ok = subprocess.run([sys.executable, "-m", "mhainspect", server.url("st/model.safetensors"), "-f", "json"],
                        capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["model"]["path"] == server.url("st/model.safetensors")


def test_sparse_view_never_fetches_twice() -> None:
    from mhainspect.sources.blob import MemoryBlob, SparseView

    data = bytes(range(256)) * 4096
    calls: list[tuple[int, int]] = []

    class Counting(MemoryBlob):
        speculative = True

        def read(self, offset: int, length: int) -> bytes:
            calls.append((offset, length))
            return super().read(offset, length)

    view = SparseView(Counting(data, "m", "m"), len(data))
    assert view[10:20] == data[10:20]
    assert view[5] == data[5]
    assert view[0:100_000] == data[0:100_000]
    assert view[500_000] == data[500_000]
    spans = sorted(calls)
    for (a, n), (b, _m) in zip(spans, spans[1:]):
        assert a + n <= b  # no byte fetched twice
    assert np.sum([n for _a, n in calls]) < 2 * 100_000


def test_head_cached_serves_what_it_holds_and_fetches_only_the_gaps() -> None:
    """The blob the dispatch decides a remote file's kind through (HeadCached) keeps its first range
    and the spans the member test reads (a zip's tail and directory), so the archive's reader gets
    them without a request; a read that straddles held spans fetches only its gaps; a local blob
    keeps its head alone; past the limit nothing more is kept."""
    from mhainspect.sources.blob import HeadCached, MemoryBlob

    data = bytes(range(256)) * 4096  # 1 MiB
    calls: list[tuple[int, int]] = []

    class Counting(MemoryBlob):
        def read(self, offset: int, length: int) -> bytes:
            calls.append((offset, length))
            return super().read(offset, length)

        def tail(self, length: int) -> bytes:
            calls.append((len(self.data) - length, length))
            return self.data[-length:]

    class Remote(Counting):
        speculative = True

    blob = HeadCached(Remote(data, "m", "m"), first=1024)
    assert blob.read(0, 10) == data[:10] and calls == [(0, 1024)]  # the first read fetches the first range
    assert blob.tail(100) == data[-100:] and blob.tail(50) == data[-50:] and len(calls) == 2
    assert blob.read(5000, 100) == data[5000:5100] and blob.read(5000, 100) == data[5000:5100]
    assert len(calls) == 3  # a span read once is served from memory after
    assert blob.read(900, 4300) == data[900:5200]  # head, gap, held span, gap
    assert calls[3:] == [(1024, 5000 - 1024), (5100, 100)]
    assert blob.read(len(data) - 120, 120) == data[-120:] and calls[-1] == (len(data) - 120, 20)
    assert blob.read(len(data) - 10, 100) == data[-10:]  # cut at the end of the file

    calls.clear()
    local = HeadCached(Counting(data, "m", "m"), first=64)  # a local file: its head alone is kept
    assert local.read(0, 8) == data[:8] and local.read(100, 10) == data[100:110]
    assert local.read(100, 10) == data[100:110] and calls == [(0, 64), (100, 10), (100, 10)]

    calls.clear()
    big = HeadCached(Remote(data * 3, "m", "m"), first=1024)
    big.read(0, 1)
    for start in range(0, 3 * len(data), 512 * 1024):  # 1.5 MiB read in spans: more than the limit
        big.read(start + 4096, 512 * 1024 - 8192)
    calls.clear()
    big.read(4096, 10)
    big.read(len(data) * 2 + 4096, 10)
    assert calls == [(len(data) * 2 + 4096, 10)]  # kept up to the limit, fetched again past it


def test_payload_offsets_come_from_the_walk_at_no_request(tmp_path: Path) -> None:
    """Where each inline payload lies is read from the headers the walk fetched: the same spans as
    the local file's, and not a byte more fetched."""
    import mmap

    from remote_models import write_sparse_onnx

    from mhainspect.frontends.onnx.values import initializer_spans
    from mhainspect.frontends.onnx.landings import remote_model_view
    path = tmp_path / "model.onnx"
    write_sparse_onnx(path, layers=3, d=256, heads=4)
    with FileServer(tmp_path) as s:
        blob = http.HttpBlob(s.url("model.onnx"), name="model.onnx", basename="model.onnx")
        _data, view = remote_model_view(blob)
        fetched, requests = view.fetched, s.log.requests
        remote = initializer_spans(view)
        assert view.fetched == fetched and s.log.requests == requests
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view_local = memoryview(mm)
        local = initializer_spans(view_local)
        view_local.release()
    assert remote == local and len(local) > 3 * 4
    assert fetched < path.stat().st_size // 100  # the payloads were skipped, yet their places are known
