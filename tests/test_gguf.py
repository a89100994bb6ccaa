"""GGUF input: files written with the gguf package's writer, named the way llama.cpp names tensors.

Exact heads / KV heads / d_k / d_v / d_model / parameters for Llama-style GQA, a Gemma-style layout,
Qwen2 biases, Phi-3's fused attn_qkv, per-layer KV-head arrays and per-head norms; F32, F16, Q8_0
and Q4_K; a file whose head_count_kv contradicts its tensors; split files; sliding windows;
hostile headers; and a proof that tensor data is never read (page-cache residency via mincore).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from gguf_files import F16, F32, Q4_K, Q8_0, Decoder, T, write_gguf
from gguf_files import kv_bytes as _kv
from gguf_files import raw_header as _header
from gguf_files import tensor_info_bytes as _tensor

from mhainspect.analysis.size import SizeOptions, with_options
from mhainspect.errors import InputError
from mhainspect.frontends.dispatch import classify
from mhainspect.frontends.folders import expand_models
from mhainspect.frontends.gguf.reader import model_weights, read_header, read_model
from mhainspect.ir import dtypes
from mhainspect.pipeline import audit
from mhainspect.results import AttentionBlock, CacheStatus, Report

gguf = pytest.importorskip("gguf")
REPO_ROOT = Path(__file__).resolve().parents[1]


def layout(b: AttentionBlock) -> tuple[int | None, ...]:
    return b.num_heads, b.num_kv_heads, b.d_k, b.d_v, b.d_model


def check_decoder(report: Report, spec: Decoder) -> None:
    assert [b.name for b in report.blocks] == [f"blk.{i}.attn" for i in range(spec.layers)]
    for i, b in enumerate(report.blocks):
        assert layout(b) == (spec.heads, spec.kv_at(i), spec.head_dim, spec.d_v, spec.d_model), b.name
        assert b.params.total == spec.attention_params(i), b.name
        assert b.matcher == "gguf" and b.kind == "self"


# ------------------------------------------------------------------------------ layouts


def test_llama_gqa_mixed_quantization(tmp_path: Path) -> None:
    spec = Decoder(qtypes={"q": Q4_K, "k": Q8_0, "v": F16, "o": F32})
    (path,) = spec.write(tmp_path / "llama.gguf")
    report = audit(path)
    check_decoder(report, spec)
    assert report.model.format == "gguf" and "llama" in report.model.producer
    assert report.model.total_params == sum(
        dtypes_numel(t.shape) for t in spec.tensors())  # logical elements, whatever the storage type
    assert {f.code for f in report.flags} == {"MHA005"}
    b = report.blocks[0]
    sources = {e.field: e.source for e in b.evidence}
    assert sources["num_heads"] == "gguf" and sources["d_model"] == "weight_shape"
    assert any("head_count_kv = 2" in e.detail for e in b.evidence if e.field == "num_kv_heads")
    weights = model_weights(read_model(path))
    assert {weights[f"blk.0.attn_{r}.weight"].dtype for r in ("q", "k", "v", "output")} == \
        {"q4_k", "q8_0", "float16", "float32"}


def dtypes_numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def test_header_matches_the_gguf_reader(tmp_path: Path) -> None:
    """Names, logical shapes, GGML types, offsets and byte sizes agree with gguf-py's own reader, and
    the bytes per GGML type come from mhainspect.ir.dtypes."""
    spec = Decoder(qtypes={"q": Q4_K, "k": Q8_0, "v": F16, "o": F32})
    (path,) = spec.write(tmp_path / "llama.gguf")
    ours = read_header(path)
    theirs = gguf.GGUFReader(path)
    assert ours.data_offset == theirs.data_offset
    assert len(ours.tensors) == len(theirs.tensors)
    for a, t in zip(ours.tensors, theirs.tensors):
        assert a.name == t.name
        assert a.ne == tuple(int(d) for d in t.shape)
        assert a.ggml_type == int(t.tensor_type)
        assert a.numel == t.n_elements
        assert a.nbytes == t.n_bytes == dtypes.nbytes(a.dtype, a.numel)
        assert ours.data_offset + a.offset == t.data_offset
    assert ours.metadata["llama.attention.head_count"] == 8
    assert ours.metadata["general.architecture"] == "llama"


def test_gemma_style_head_dim_not_hidden_over_heads(tmp_path: Path) -> None:
    """head_dim · heads ≠ d_model, key_length in the metadata, multi-query."""
    spec = Decoder(arch="gemma", d_model=64, heads=4, kv_heads=1, head_dim=32,
                   metadata={"{arch}.attention.key_length": 32, "{arch}.attention.value_length": 32})
    (path,) = spec.write(tmp_path / "gemma.gguf")
    report = audit(path)
    check_decoder(report, spec)
    codes = {f.code for f in report.flags}
    assert {"MHA001", "MHA005"} <= codes and "MHA007" not in codes
    assert any("key_length = 32" in e.detail for e in report.blocks[0].evidence if e.field == "d_k")


def test_qwen2_qkv_biases(tmp_path: Path) -> None:
    spec = Decoder(arch="qwen2", biases=True)
    (path,) = spec.write(tmp_path / "qwen2.gguf")
    report = audit(path)
    check_decoder(report, spec)
    b = report.blocks[0]
    assert b.params.bias == spec.heads * spec.head_dim + 2 * spec.kv_heads * spec.head_dim
    assert {p.role: p.bias for p in b.projections}["k"] == "blk.0.attn_k.bias"


@pytest.mark.parametrize("kv_heads", [8, 2], ids=["mha", "gqa"])
def test_phi3_fused_qkv(kv_heads: int, tmp_path: Path) -> None:
    spec = Decoder(arch="phi3", fused=True, kv_heads=kv_heads, qtypes={"q": Q8_0, "k": Q8_0, "v": Q8_0, "o": F16})
    (path,) = spec.write(tmp_path / "phi3.gguf")
    report = audit(path)
    check_decoder(report, spec)
    widths = {p.role: p.out_features for p in report.blocks[0].projections}
    assert widths == {"q": 256, "k": kv_heads * 32, "v": kv_heads * 32, "o": 256}
    assert any(e.field == "qkv_split" for e in report.blocks[0].evidence)


def test_per_layer_kv_head_arrays(tmp_path: Path) -> None:
    kv = (2, 4, 8)
    spec = Decoder(arch="openelm", layers=3, kv_per_layer=kv, metadata={"{arch}.attention.head_count_kv": list(kv)})
    (path,) = spec.write(tmp_path / "per_layer.gguf")
    report = audit(path)
    check_decoder(report, spec)
    assert [b.num_kv_heads for b in report.blocks] == list(kv)
    assert any("head_count_kv[1] = 4" in e.detail for e in report.blocks[1].evidence)
    assert "MHA006" in {f.code for f in report.flags}
    assert "MHA007" not in {f.code for f in report.flags}


def test_head_count_kv_contradicting_k_tensors(tmp_path: Path) -> None:
    """Metadata says 2 KV heads, the K/V tensors are 8 heads wide: the shapes win, the conflict is
    recorded and flagged."""
    spec = Decoder(kv_heads=2, tensor_kv_heads=8)
    (path,) = spec.write(tmp_path / "lying.gguf")
    report = audit(path)
    check_decoder(report, spec)  # 8 KV heads: the tensors' number
    b = report.blocks[0]
    assert b.num_kv_heads == 8
    assert any(e.field == "num_kv_heads" and e.source == "gguf" and e.value == 2 for e in b.evidence)  # the claim
    assert any(c.startswith("num_kv_heads") and "8" in c and "2" in c for c in b.conflicts), b.conflicts
    flags = [f for f in report.flags if f.code == "MHA007" and f.block == b.name]
    assert flags and "K width 256 / d_k 32" in flags[0].message
    assert "MHA005" not in {f.code for f in report.flags}  # not GQA: the metadata's claim is overruled


def test_fused_qkv_contradicting_head_count_kv(tmp_path: Path) -> None:
    spec = Decoder(arch="phi3", fused=True, kv_heads=8, tensor_kv_heads=2)
    (path,) = spec.write(tmp_path / "lying_fused.gguf")
    b = audit(path).blocks[0]
    assert layout(b) == (8, 2, 32, 32, 256)
    assert any(c.startswith("num_kv_heads") for c in b.conflicts), b.conflicts


def test_per_head_norm_fixes_d_k_against_the_default(tmp_path: Path) -> None:
    """No key_length: llama.cpp would take d_model / heads = 32; the per-head norms are 64 wide and
    Q is 8 · 64: the shapes win."""
    spec = Decoder(arch="qwen3", head_dim=64, head_norms=True)
    (path,) = spec.write(tmp_path / "qwen3.gguf")
    report = audit(path)
    check_decoder(report, spec)
    b = report.blocks[0]
    assert any(e.field == "d_k" and e.source == "head_shape" and "attn_q_norm" in e.detail for e in b.evidence)
    assert any("d_k" in c for c in b.conflicts)


def test_gated_q_is_not_read_as_more_heads(tmp_path: Path) -> None:
    """Gated attention packs a gate into Q (twice h·d_k wide): O's input width still says h heads, so
    the shapes do not settle it; the metadata's numbers stay and the disagreement is flagged."""
    d, h, dk = 256, 8, 32
    tensors = [T("blk.0.attn_q.weight", (2 * h * dk, d)), T("blk.0.attn_k.weight", (2 * dk, d)),
               T("blk.0.attn_v.weight", (2 * dk, d)), T("blk.0.attn_output.weight", (d, h * dk)),
               T("blk.0.attn_q_norm.weight", (dk,)), T("blk.0.attn_k_norm.weight", (dk,))]
    meta = {"{arch}.block_count": 1, "{arch}.embedding_length": d, "{arch}.attention.head_count": h,
            "{arch}.attention.head_count_kv": 2, "{arch}.attention.key_length": dk}
    (path,) = write_gguf(tmp_path / "gated.gguf", "qwen3next", meta, tensors)
    report = audit(path)
    (b,) = report.blocks
    assert (b.num_heads, b.num_kv_heads, b.d_k) == (h, 2, dk)
    assert any("Q projection is 512 wide" in c for c in b.conflicts), b.conflicts
    assert "MHA007" in {f.code for f in report.flags}


def test_sliding_window_pattern_array_and_period(tmp_path: Path) -> None:
    pattern = [True, False, True, False]
    spec = Decoder(arch="gemma3", layers=4, metadata={"{arch}.attention.sliding_window": 512,
                                                      "{arch}.attention.sliding_window_pattern": pattern})
    (path,) = spec.write(tmp_path / "swa.gguf")
    report = audit(path)
    assert [b.sliding_window for b in report.blocks] == [512, None, 512, None]
    ev = next(e for e in report.blocks[2].evidence if e.field == "sliding_window")
    assert "sliding_window_pattern[2] = True" in ev.detail and ev.source == "gguf"
    spec = Decoder(arch="gemma3", layers=6, metadata={"{arch}.attention.sliding_window": 512,
                                                      "{arch}.attention.sliding_window_pattern": 3})
    (path,) = spec.write(tmp_path / "swa_period.gguf")
    # llama.cpp's set_swa_pattern(3): layers 2 and 5 are dense.
    assert [b.sliding_window for b in audit(path).blocks] == [512, 512, None, 512, 512, None]


def test_sliding_window_without_pattern_takes_llama_cpps_default(tmp_path: Path) -> None:
    """convert_hf_to_gguf writes no pattern for Gemma 2/3 or Cohere 2: llama.cpp's loader hard-codes
    the period per architecture (Gemma 2 also its window), and so does the size figure."""
    spec = Decoder(arch="gemma3", layers=7, metadata={"{arch}.attention.sliding_window": 512})
    (path,) = spec.write(tmp_path / "gemma3.gguf")
    report = with_options(audit(path), SizeOptions(context=4096))
    # set_swa_pattern(6): layers 5 and 11, ... are global.
    assert [b.sliding_window for b in report.blocks] == [512, 512, 512, 512, 512, None, 512]
    ev = next(e for e in report.blocks[0].evidence if e.field == "sliding_window")
    assert "llama.cpp's gemma3 default period 6" in ev.detail
    assert not any("sliding_window" in w for w in report.warnings)
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token is not None and kv.total_bytes is not None
    per_layer = kv.bytes_per_token // 7
    assert kv.total_bytes == per_layer * (6 * 511 + 4096)
    spec = Decoder(arch="gemma2", layers=3)  # no window key either: Gemma 2's 4096
    (path,) = spec.write(tmp_path / "gemma2.gguf")
    assert [b.sliding_window for b in audit(path).blocks] == [4096, None, 4096]


def test_sliding_window_of_an_unknown_pattern_is_a_warning(tmp_path: Path) -> None:
    spec = Decoder(arch="llama", metadata={"{arch}.attention.sliding_window": 4096})
    (path,) = spec.write(tmp_path / "swa_no_pattern.gguf")
    report = audit(path)
    assert all(b.sliding_window is None for b in report.blocks)
    assert any("sliding_window = 4096" in w and "pattern" in w for w in report.warnings)


def test_encoder_blocks_say_why_they_cache_nothing(tmp_path: Path) -> None:
    d = 64
    tensors = [T(f"blk.0.attn_{r}.weight", (d, d)) for r in ("q", "k", "v", "output")]
    meta = {"{arch}.block_count": 1, "{arch}.embedding_length": d, "{arch}.attention.head_count": 4,
            "{arch}.attention.causal": False}
    (path,) = write_gguf(tmp_path / "bert.gguf", "bert", meta, tensors)
    (b,) = audit(path).blocks
    assert b.kv_cache_status is CacheStatus.NONE
    assert b.kv_cache_reason is not None and "causal = false" in b.kv_cache_reason
    assert layout(b) == (4, 4, 16, 16, 64)


def test_t5_encoder_decoder_and_cross_attention(tmp_path: Path) -> None:
    d, h, dk = 64, 4, 32  # T5: d_kv · heads ≠ d_model
    tensors = [T(f"enc.blk.0.attn_{r}.weight", (h * dk, d)) for r in ("q", "k", "v")]
    tensors += [T("enc.blk.0.attn_o.weight", (d, h * dk)), T("enc.blk.0.attn_rel_b.weight", (32, h))]
    for kind in ("attn", "cross_attn"):
        tensors += [T(f"dec.blk.0.{kind}_{r}.weight", (h * dk, d)) for r in ("q", "k", "v")]
        tensors.append(T(f"dec.blk.0.{kind}_o.weight", (d, h * dk)))
    meta = {"{arch}.block_count": 1, "{arch}.embedding_length": d, "{arch}.attention.head_count": h,
            "{arch}.attention.key_length": dk, "{arch}.attention.value_length": dk}
    (path,) = write_gguf(tmp_path / "t5.gguf", "t5", meta, tensors)
    report = audit(path)
    by_name = {b.name: b for b in report.blocks}
    assert set(by_name) == {"enc.blk.0.attn", "dec.blk.0.attn", "dec.blk.0.cross_attn"}
    assert all(layout(b) == (h, h, dk, dk, d) for b in report.blocks)
    assert by_name["dec.blk.0.cross_attn"].kind == "cross"
    assert by_name["enc.blk.0.attn"].params.extra == 32 * h
    assert by_name["enc.blk.0.attn"].kv_cache_status is CacheStatus.NONE
    assert by_name["enc.blk.0.attn"].kv_cache_reason is not None
    assert by_name["dec.blk.0.attn"].kv_cache_status is CacheStatus.CACHES
    assert by_name["dec.blk.0.attn"].kv_cache_reason is None


def test_mmproj_vision_encoder(tmp_path: Path) -> None:
    """A multimodal projector file (arch "clip"): v.blk.N blocks read their heads from clip.vision.*."""
    d = 64
    tensors = [T(f"v.blk.0.attn_{r}.weight", (d, d)) for r in ("q", "k", "v", "out")]
    tensors += [T(f"v.blk.0.attn_{r}.bias", (d,)) for r in ("q", "k", "v", "out")]
    meta = {"clip.vision.block_count": 1, "clip.vision.embedding_length": d, "clip.vision.attention.head_count": 8,
            "clip.has_vision_encoder": True}
    (path,) = write_gguf(tmp_path / "mmproj.gguf", "clip", meta, tensors)
    (b,) = audit(path).blocks
    assert b.name == "v.blk.0.attn" and layout(b) == (8, 8, 8, 8, d)
    assert any("clip.vision.attention.head_count = 8" in e.detail for e in b.evidence)
    assert b.params.total == 4 * d * d + 4 * d
    assert b.kv_cache_reason is not None and "encoder" in b.kv_cache_reason


def test_latent_attention_without_its_heads_tensor_is_a_near_miss(tmp_path: Path) -> None:
    """K/V down- and up-projections without a Q projection: not a block, a near miss."""
    d = 64
    tensors = [T("blk.0.attn_kv_a_mqa.weight", (48, d)), T("blk.0.attn_kv_b.weight", (128, 32)),
               T("blk.0.attn_output.weight", (d, d))]
    meta = {"{arch}.block_count": 1, "{arch}.embedding_length": d, "{arch}.attention.head_count": 4}
    (path,) = write_gguf(tmp_path / "mla.gguf", "deepseek2", meta, tensors)
    report = audit(path)
    assert report.blocks == ()
    assert len(report.misses) == 1 and "attn_kv_a_mqa" in report.misses[0].reason


def test_latent_attention_of_a_decoder_caches_its_latent(tmp_path: Path) -> None:
    """DeepSeek-V2 as convert_hf_to_gguf.py writes it since llama.cpp's MLA cache (attn_k_b
    [h, rank, nope] and attn_v_b [h, v, rank] in llama.cpp's order): one latent block whose cache
    is the latent and the rotary key in f16 (was: a near miss and an unknown cache). An encoder's
    latent block caches nothing."""
    d, h, rank, rope, nope, v = 64, 4, 32, 8, 16, 16
    tensors = [T("blk.0.attn_q.weight", (h * (nope + rope), d)), T("blk.0.attn_kv_a_mqa.weight", (rank + rope, d)),
               T("blk.0.attn_kv_a_norm.weight", (rank,)), T("blk.0.attn_k_b.weight", (h, rank, nope)),
               T("blk.0.attn_v_b.weight", (h, v, rank)), T("blk.0.attn_output.weight", (d, h * v))]
    meta = {"{arch}.block_count": 1, "{arch}.embedding_length": d, "{arch}.attention.head_count": h,
            "{arch}.attention.kv_lora_rank": rank}
    (path,) = write_gguf(tmp_path / "ds2.gguf", "deepseek2", meta, tensors)
    report = audit(path)
    (b,) = report.blocks
    assert not report.misses
    assert layout(b) == (h, h, nope + rope, v, d) and b.latent is not None and b.latent.q_rank is None
    assert (b.params.q, b.params.k, b.params.v, b.params.o) == (h * (nope + rope) * d, h * rank * nope,
                                                                 h * v * rank, d * h * v)
    assert (b.params.latent, b.params.extra) == ((rank + rope) * d + rank, 0)
    assert b.params.total == b.params.q + b.params.k + b.params.v + b.params.o + b.params.latent
    assert b.kv_cache_bytes_per_token == (rank + rope) * 2 and b.kv_cache_status is CacheStatus.CACHES
    kv = with_options(report, SizeOptions(context=128)).model.kv_cache
    assert kv is not None and kv.total_bytes == 128 * (rank + rope) * 2
    assert kv.expanded_total_bytes == 128 * h * (nope + rope + v) * 2
    (path,) = write_gguf(tmp_path / "enc.gguf", "bert", {**meta, "{arch}.attention.causal": False}, tensors)
    kv = audit(path).model.kv_cache
    assert kv is not None and kv.status is CacheStatus.NONE


def test_ollama_blob_without_suffix_is_gguf(tmp_path: Path) -> None:
    """Ollama keeps models as blobs/sha256-<hex>: the GGUF magic says what it is (was: read as ONNX, exit 2)."""
    spec = Decoder()
    (path,) = spec.write(tmp_path / "llama.gguf")
    blob = tmp_path / "blobs" / ("sha256-" + "ab" * 32)
    blob.parent.mkdir()
    blob.write_bytes(path.read_bytes())
    assert classify(str(blob)).kind == "gguf"
    check_decoder(audit(blob), spec)


@pytest.mark.parametrize("kind", ["adapter", "vocab"])
def test_files_that_are_not_a_whole_model_say_so(kind: str, tmp_path: Path) -> None:
    """convert_lora_to_gguf.py's adapters (general.type = adapter, lora_a / lora_b tensors) and
    vocab-only files: no blocks, and a warning that says why (was: an empty report, as a model)."""
    tensors = [T(f"blk.0.attn_{r}.weight.lora_{ab}", (8, 64) if ab == "a" else (64, 8))
               for r in ("q", "v") for ab in ("a", "b")] if kind == "adapter" else []
    meta = {"general.type": kind, "adapter.type": "lora", "adapter.lora.alpha": 16.0} if kind == "adapter" \
        else {"general.type": kind}
    (path,) = write_gguf(tmp_path / f"{kind}.gguf", "llama", meta, tensors)
    report = audit(path)
    assert report.blocks == ()
    assert any(f"general.type = {kind}" in str(w) for w in report.warnings)


def test_heads_unknown_without_metadata(tmp_path: Path) -> None:
    d = 64
    tensors = [T(f"blk.0.attn_{r}.weight", (d, d)) for r in ("q", "k", "v", "output")]
    (path,) = write_gguf(tmp_path / "bare.gguf", "llama", {}, tensors)
    (b,) = audit(path).blocks
    assert b.num_heads is None and b.d_model == d and b.unknown_reason
    assert "MHA004" in {f.code for f in audit(path).flags}


# ------------------------------------------------------------------------------ split files and folders


def test_split_files_are_one_model(tmp_path: Path) -> None:
    spec = Decoder(layers=3)
    parts = spec.write(tmp_path / "model.gguf", split_max_tensors=8)
    assert len(parts) >= 3 and parts[0].name.endswith(f"-00001-of-{len(parts):05d}.gguf")
    (tmp_path / "single").mkdir()
    (single,) = Decoder(layers=3).write(tmp_path / "single" / "model.gguf")
    expected = audit(single)
    for part in (parts[0], parts[1]):  # any part names the whole model
        report = audit(part)
        check_decoder(report, spec)
        assert report.model.total_params == expected.model.total_params
    assert expand_models([tmp_path]) == (parts[0], single)  # a folder lists the split model once


def test_split_model_with_a_missing_part(tmp_path: Path) -> None:
    parts = Decoder(layers=3).write(tmp_path / "model.gguf", split_max_tensors=8)
    parts[-1].unlink()
    with pytest.raises(InputError, match="missing 1 of its"):
        audit(parts[0])
    parts[0].unlink()
    assert expand_models([tmp_path]) == (parts[1],)  # listed once, by the first part present
    with pytest.raises(InputError, match=f"missing 2 of its {len(parts)} files, first '{parts[0].name}'"):
        audit(parts[1])


def test_folder_of_gguf_files(tmp_path: Path) -> None:
    Decoder().write(tmp_path / "a.gguf")
    (tmp_path / "sub").mkdir()
    Decoder(arch="qwen2", biases=True).write(tmp_path / "sub" / "b.gguf")
    assert [p.name for p in expand_models([tmp_path])] == ["a.gguf", "b.gguf"]
    assert classify(str(tmp_path / "a.gguf")).kind == "gguf"


# ------------------------------------------------------------------------------ CLI, JSON, gates


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "mhainspect", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_cli_json_schema_and_gates(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    Decoder(kv_heads=2, tensor_kv_heads=8).write(tmp_path / "lying.gguf")
    run = run_cli("lying.gguf", "--format", "json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    schema = json.loads((REPO_ROOT / "docs" / "report.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(doc, schema)
    assert doc["model"]["format"] == "gguf"
    assert doc["blocks"][0]["num_kv_heads"] == 8 and doc["blocks"][0]["conflicts"]
    gate = run_cli("lying.gguf", "--fail-on", "MHA007", "--quiet", cwd=tmp_path)
    assert gate.returncode == 1 and "MHA007" in gate.stderr


def test_python_api(tmp_path: Path) -> None:
    import mhainspect

    spec = Decoder()
    (path,) = spec.write(tmp_path / "m.gguf")
    report = mhainspect.inspect(path)
    assert report.model.format == "gguf"
    check_decoder(report, spec)


def test_verify_leaves_gguf_blocks_unchecked(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    Decoder().write(tmp_path / "m.gguf")
    run = run_cli("m.gguf", "--verify", "--format", "json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    verdicts = [b["verify"] for b in json.loads(run.stdout)["blocks"]]
    assert verdicts and all(v["status"] == "unchecked" and "ONNX models only" in v["reason"] for v in verdicts)


def test_gguf_run_imports_neither_numpy_nor_gguf(tmp_path: Path) -> None:
    Decoder().write(tmp_path / "m.gguf")
    code = ("import sys; from mhainspect.cli.app import main\n"
            "try:\n    main(['m.gguf', '--format', 'json', '-o', 'out.json'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('numpy', 'gguf', 'torch', 'onnx') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


# ------------------------------------------------------------------------------ tensor data is never read

_PAGE = mmap.PAGESIZE


def _resident_pages(path: Path) -> list[bool]:
    """Which pages of ``path`` are in the page cache (benchmarks/page_cache.py, the benchmark's own proof)."""
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    try:
        from page_cache import page_residency
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))
    return [b & 1 == 1 for b in page_residency(path)]


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore/posix_fadvise page-cache proof is Linux")
def test_tensor_data_is_never_read(tmp_path: Path) -> None:
    """After an audit, no page of the data section is in the page cache: the header's pages were
    read, nothing else. The control read proves the check sees a read when there is one."""
    big = Decoder(d_model=1024, heads=16, kv_heads=4, head_dim=64, layers=4, vocab=2048)  # ~40 MB of F32/F16
    (path,) = big.write(tmp_path / "big.gguf")
    header = read_header(path)
    first_data_page = -(-header.data_offset // _PAGE)
    _evict(path)
    before = _resident_pages(path)
    if any(before[first_data_page:]):
        pytest.skip("this filesystem keeps the file cached (cannot evict it): residency proves nothing here")

    report = audit(path)
    assert len(report.blocks) == 4
    after = _resident_pages(path)
    touched = [i for i, r in enumerate(after[first_data_page:], first_data_page) if r]
    assert touched == [], f"{len(touched)} data pages were read, first at byte {touched[0] * _PAGE:,}"
    assert any(after[:first_data_page]), "the header pages should have been read"

    # Control: reading one tensor's bytes is visible to the check.
    probe = header.data_offset + header.tensors[-1].offset + _PAGE
    with open(path, "rb") as fh:
        fh.seek(probe)
        fh.read(1)
    if not _resident_pages(path)[probe // _PAGE]:
        pytest.skip("mincore does not report this file's page cache here")


# ------------------------------------------------------------------------------ hostile headers

HOSTILE: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "empty file"),
    "short": (b"GGUF\x03\x00", "shorter than the 24-byte header"),
    "magic": (b"GGML" + bytes(40), "no GGUF magic"),
    "version_1": (_header(0, 0, 1), "version 1"),
    "version_99": (_header(0, 0, 99), "unsupported GGUF version 99"),
    "truncated_header": (_header(1, 1) + _kv(b"general.architecture", 8, struct.pack("<Q", 5) + b"lla"),
                         "truncated"),
    "absurd_counts": (_header(2**63, 2**62), "more than its"),
    "absurd_kv_count": (_header(0, 10**6) + bytes(64), "more than its"),
    "huge_string": (_header(0, 1) + _kv(b"general.name", 8, struct.pack("<Q", 2**62)), "needs"),
    "huge_key": (_header(0, 1) + struct.pack("<Q", 2**40) + bytes(32), "bytes long"),
    "huge_array": (_header(0, 1) + _kv(b"k", 9, struct.pack("<IQ", 0, 2**40)), "elements of 'k'"),
    "huge_string_array": (_header(0, 1) + _kv(b"tokens", 9, struct.pack("<IQ", 8, 2**40)), "strings of 'tokens'"),
    "string_past_end": (_header(0, 1) + _kv(b"t", 9, struct.pack("<IQ", 8, 2) + struct.pack("<Q", 1) + b"a"
                                            + struct.pack("<Q", 99) + b"x"), "runs past the end"),
    "nested_array": (_header(0, 1) + _kv(b"k", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 0, 0)), "nested"),
    "unknown_value_type": (_header(0, 1) + _kv(b"k", 77, b"\x00" * 8), "unknown value type 77"),
    "duplicate_key": (_header(0, 2) + _kv(b"k", 4, b"\x01\x00\x00\x00") * 2, "duplicate key"),
    "non_utf8_key": (_header(0, 1) + _kv(b"\xff\xfe", 4, b"\x01\x00\x00\x00"), "not UTF-8"),
    "bad_alignment": (_header(0, 1) + _kv(b"general.alignment", 4, struct.pack("<I", 3)), "power of two"),
    "too_many_dims": (_header(1, 0) + _tensor(b"w", [1] * 5, 0, 0) + bytes(64), "5 dims"),
    "negative_dim": (_header(1, 0) + _tensor(b"w", [2**64 - 4, 2], 0, 0) + bytes(64), "negative dim"),
    "overflowing_dims": (_header(1, 0) + _tensor(b"w", [2**40, 2**40], 0, 0) + bytes(64), "int64"),
    "unknown_type": (_header(1, 0) + _tensor(b"w", [4], 99, 0) + bytes(64), "unknown GGML type 99"),
    "partial_block": (_header(1, 0) + _tensor(b"w", [33, 2], 8, 0) + bytes(128), "whole number of q8_0 blocks"),
    "offset_past_end": (_header(1, 0) + _tensor(b"w", [4], 0, 0) + bytes(8), "past the end"),
    "offset_out_of_order": (_header(1, 0) + _tensor(b"w", [4], 0, 1 << 40) + bytes(64), "expected 0"),
    "duplicate_tensor": (_header(2, 0) + _tensor(b"w", [8], 0, 0) + _tensor(b"w", [8], 0, 32) + bytes(128),
                         "duplicate tensor name"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_header_is_one_input_error(case: str, tmp_path: Path) -> None:
    data, match = HOSTILE[case]
    path = tmp_path / f"{case}.gguf"
    path.write_bytes(data)
    with pytest.raises(InputError) as exc:
        audit(path)
    message = str(exc.value)
    assert "\n" not in message and match in message, message
    assert message.startswith(str(path))


def test_fifo_named_gguf_is_refused_without_opening(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        audit(fifo)  # opening it for reading would block forever


def test_truncated_anywhere(tmp_path: Path) -> None:
    """Every prefix length of a real file is a report or an InputError, nothing else."""
    (path,) = Decoder(layers=1, metadata={"tokenizer.ggml.tokens": ["a", "bb", "ccc"]}).write(tmp_path / "m.gguf")
    data = path.read_bytes()
    header_end = read_header(path).data_offset
    cut = tmp_path / "cut.gguf"
    for n in list(range(0, header_end + 1, 7)) + [header_end + 1, len(data) - 1]:
        cut.write_bytes(data[:n])
        try:
            audit(cut)
        except InputError as exc:
            assert "\n" not in str(exc)


def test_big_endian_file(tmp_path: Path) -> None:
    w = gguf.GGUFWriter(tmp_path / "be.gguf", "llama", endianess=gguf.GGUFEndian.BIG)
    w.add_block_count(1)
    w.add_embedding_length(64)
    w.add_head_count(4)
    import numpy as np

    for r in ("q", "k", "v", "output"):
        w.add_tensor(f"blk.0.attn_{r}.weight", np.zeros((64, 64), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    (b,) = audit(tmp_path / "be.gguf").blocks
    assert layout(b) == (4, 4, 16, 16, 64)


def test_benchmark_generator_small(tmp_path: Path) -> None:
    """benchmarks/make_models.write_gguf at 2 layers: a sparse file the audit reads exactly."""
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    try:
        import make_models
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))
    shape = make_models.LlamaShape(layers=2, d_model=256, heads=8, kv_heads=2, ffn=512, vocab=300)
    path = tmp_path / "bench.gguf"
    make_models.write_gguf(path, shape, merges=50)
    report = audit(path)
    assert [layout(b) for b in report.blocks] == [(8, 2, 32, 32, 256)] * 2
    assert report.model.total_params == shape.total_params()
    assert sum(b.params.total for b in report.blocks) == shape.attention_params()
    assert path.stat().st_blocks * 512 < path.stat().st_size  # the data is a hole


def test_mutated_headers_are_reports_or_input_errors(tmp_path: Path) -> None:
    """Random byte and word mutations of a real header: a report or one InputError line, never
    another exception (seeded, 300 mutants)."""
    import random

    (path,) = Decoder(layers=2, metadata={"tokenizer.ggml.tokens": ["a", "bb", "ccc"],
                                          "{arch}.attention.head_count_kv": [2, 2]}).write(tmp_path / "m.gguf")
    data = path.read_bytes()
    header_end = read_header(path).data_offset
    rng = random.Random(17)
    mutant = tmp_path / "mutant.gguf"
    for _ in range(300):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(header_end)
            if rng.random() < 0.5:
                buf[at] = rng.randrange(256)
            else:
                word = rng.choice([0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1, rng.randrange(2**64)])
                buf[at:at + 8] = word.to_bytes(8, "little")
        mutant.write_bytes(bytes(buf[:len(data)]))
        try:
            audit(mutant)
        except InputError as exc:
            assert "\n" not in str(exc)


# ------------------------------------------------------------------------------ llama.cpp's sliding layers
# One case per entry of LLAMA_CPP_SWA: (arch, block_count, metadata, expected window per layer (None:
# full attention)), as llama_model::load_hparams sets them.
_W = None
SWA_CASES = {
    "gemma2": [("gemma2", 4, {}, [4096, _W, 4096, _W]),
               ("gemma2", 4, {"sliding_window": 512}, [512, _W, 512, _W])],
    "gemma3": [("gemma3", 8, {"sliding_window": 512}, [512] * 5 + [_W] + [512] * 2),
               ("gemma3", 8, {}, [_W] * 8)],  # the key is required by llama.cpp: without it, nothing slides
    "gemma3n": [("gemma3n", 7, {"sliding_window": 512}, [512] * 4 + [_W] + [512] * 2)],
    "gemma-embedding": [("gemma-embedding", 7, {"sliding_window": 256}, [256] * 5 + [_W, 256])],
    "cohere2": [("cohere2", 5, {"sliding_window": 4096}, [4096] * 3 + [_W, 4096])],
    "olmo2": [("olmo2", 4, {}, [_W] * 4), ("olmo2", 5, {"sliding_window": 4096}, [4096] * 3 + [_W, 4096])],
    "exaone4": [("exaone4", 64, {}, [4096, 4096, 4096, _W] * 16),
                ("exaone4", 30, {"sliding_window": 4096}, [_W] * 30)],
    "gpt-oss": [("gpt-oss", 4, {"sliding_window": 128}, [128, _W, 128, _W])],
    "smallthinker": [("smallthinker", 5, {"sliding_window": 2048}, [_W, 4096, 4096, 4096, _W]),
                     ("smallthinker", 2, {}, [_W, _W])],
    "llama4": [("llama4", 5, {}, [8192] * 3 + [_W, 8192]), ("llama4", 4, {"sliding_window": 0}, [_W] * 4),
               ("llama4", 4, {"sliding_window": 1000}, [8192] * 3 + [_W])],
    "phi3": [("phi3", 2, {"sliding_window": 2047}, [_W, _W])],
}


def test_every_llama_cpp_swa_entry_has_a_case() -> None:
    from mhainspect.frontends.gguf.swa import LLAMA_CPP_SWA

    assert set(SWA_CASES) == set(LLAMA_CPP_SWA)


@pytest.mark.parametrize(("arch", "layers", "meta", "expected"),
                         [c for cases in SWA_CASES.values() for c in cases],
                         ids=[f"{a}-{i}" for a, cases in SWA_CASES.items() for i in range(len(cases))])
def test_llama_cpp_sliding_layers_by_architecture(arch: str, layers: int, meta: dict[str, int],
                                                  expected: list[int | None]) -> None:
    from mhainspect.frontends.gguf.swa import swa_layout

    metadata = {f"{arch}.block_count": layers, **{f"{arch}.attention.{k}": v for k, v in meta.items()}}
    layout = swa_layout(arch, f"{arch}.", metadata)
    found = [None] * layers if layout is None else [layout.window if s else None for s in layout.slides]
    assert found == expected


def test_gpt_oss_kv_cache_counts_its_sliding_layers(tmp_path: Path) -> None:
    """gpt-oss: every second layer slides over 128 tokens (llama.cpp sets the pattern in code, the file
    has only the window): at 32k the cache is about half the full-context figure, without a warning."""
    spec = Decoder(arch="gpt-oss", layers=4, metadata={"{arch}.attention.sliding_window": 128})
    (path,) = spec.write(tmp_path / "gpt-oss.gguf")
    report = with_options(audit(path), SizeOptions(context=32768))
    assert [b.sliding_window for b in report.blocks] == [128, None, 128, None]
    assert not any("sliding_window" in w for w in report.warnings)
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token is not None
    per_layer = kv.bytes_per_token // 4
    assert per_layer == spec.kv_heads * 2 * spec.head_dim * 2  # K and V, f16
    assert kv.total_bytes == per_layer * (2 * 127 + 2 * 32768)
    ev = next(e for e in report.blocks[0].evidence if e.field == "sliding_window")
    assert "llama.cpp's gpt-oss default period 2" in ev.detail


def test_phi3_window_is_off_in_llama_cpp(tmp_path: Path) -> None:
    spec = Decoder(arch="phi3", metadata={"{arch}.attention.sliding_window": 2047})
    (path,) = spec.write(tmp_path / "phi3.gguf")
    report = audit(path)
    assert all(b.sliding_window is None for b in report.blocks)
    assert not any("sliding_window" in w for w in report.warnings)
    ev = next(e for e in report.blocks[0].evidence if e.field == "kv_cache_bytes_per_token")
    assert "disables Phi-3's sliding window" in ev.detail


# ------------------------------------------------------------------------------ llama.cpp's layers without a cache
# One case per entry of LLAMA_CPP_KV_LAYERS: (arch, block_count, metadata, layers with a cache of their own).
KV_LAYER_CASES = {
    "gemma3n": [("gemma3n", 22, {"sliding_window": 512}, 20),  # 20 written in llama.cpp's loader
                ("gemma3n", 22, {"sliding_window": 512, "shared_kv_layers": 10}, 20)],  # the key is not read
    "gemma4": [("gemma4", 6, {"shared_kv_layers": 2}, 4),
               ("gemma4", 6, {}, 6)],  # no key: every layer has its own cache
}


def test_every_llama_cpp_kv_layers_entry_has_a_case() -> None:
    from mhainspect.frontends.gguf.kv_layers import LLAMA_CPP_KV_LAYERS

    assert set(KV_LAYER_CASES) == set(LLAMA_CPP_KV_LAYERS)


@pytest.mark.parametrize(("arch", "layers", "meta", "own"), [c for cases in KV_LAYER_CASES.values() for c in cases],
                         ids=[f"{a}-{i}" for a, cases in KV_LAYER_CASES.items() for i in range(len(cases))])
def test_layers_reusing_an_earlier_cache_add_none(arch: str, layers: int, meta: dict[str, int], own: int,
                                                  tmp_path: Path) -> None:
    """llama.cpp gives a layer no cache of its own from n_layer_kv_from_start on (gemma3n: 20, set in its
    loader; gemma4: block_count - attention.shared_kv_layers): such a layer reuses an earlier layer's K/V,
    so the GGUF KV figure counts the first ``own`` layers only. Was: every layer."""
    spec = Decoder(arch=arch, layers=layers, metadata={f"{{arch}}.attention.{k}": v for k, v in meta.items()})
    (path,) = spec.write(tmp_path / f"{arch}.gguf")
    report = audit(path)
    assert len(report.blocks) == layers
    statuses = [b.kv_cache_status for b in report.blocks]
    assert statuses == [CacheStatus.CACHES] * own + [CacheStatus.NONE] * (layers - own)
    per_layer = spec.kv_heads * (spec.head_dim + spec.d_v) * 2  # f16, llama.cpp's default cache type
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == own * per_layer
    layout = [b.sliding_window is not None for b in report.blocks[:own]]
    for i, b in enumerate(report.blocks[own:], start=own):
        assert f"layers {own} and on have no cache of their own" in (b.kv_cache_reason or ""), b.kv_cache_reason
        assert b.params.total == report.blocks[0].params.total  # its weights still count
        # It reads the last layer with a cache of its own of its kind (sliding or not).
        sliding = bool(arch == "gemma3n" and (i + 1) % 5)  # llama.cpp's gemma3n: four sliding, then one global
        source = max(j for j in range(own) if layout[j] == sliding)
        assert b.kv_cache_shared_from == f"blk.{source}.attn", (i, b.kv_cache_shared_from)
    assert all(b.kv_cache_shared_from is None for b in report.blocks[:own])
