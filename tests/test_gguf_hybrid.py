"""Hybrid GGUF files: layers whose token mixer is a state-space model, a delta-rule linear attention
or a short convolution, named the way llama.cpp writes them (gguf-py's tensor names and keys), at
tiny shapes. Blocks only where softmax attention is; the other layers listed as mixers with the
state llama.cpp keeps per sequence (``llama_hparams::n_embd_r`` + ``n_embd_s``, float32); the KV
figure from the attention layers only, a stated lower bound where a layer is of a kind not known.
Every expected figure below is worked out by hand in its comment."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

import mhainspect
from mhainspect.results import CacheStatus, MixerKind
from tests.gguf_files import T, write_gguf

E = 64  # embedding_length


def _attention(i: int, heads: int, kv_heads: int, d: int, *, q_width: int | None = None,
               head_norms: bool = False) -> list[T]:
    out = [T(f"blk.{i}.attn_q.weight", (q_width or heads * d, E)), T(f"blk.{i}.attn_k.weight", (kv_heads * d, E)),
           T(f"blk.{i}.attn_v.weight", (kv_heads * d, E)), T(f"blk.{i}.attn_output.weight", (E, heads * d))]
    if head_norms:
        out += [T(f"blk.{i}.attn_q_norm.weight", (d,)), T(f"blk.{i}.attn_k_norm.weight", (d,))]
    return out


def _ffn(i: int) -> list[T]:
    return [T(f"blk.{i}.attn_norm.weight", (E,)), T(f"blk.{i}.ffn_norm.weight", (E,)),
            T(f"blk.{i}.ffn_up.weight", (128, E)), T(f"blk.{i}.ffn_down.weight", (E, 128))]


def _mamba1(i: int, inner: int, state: int, kernel: int, dt_rank: int) -> list[T]:
    """llama.cpp's Mamba / Jamba layer: ne reversed, so (out, in)."""
    return [T(f"blk.{i}.ssm_in.weight", (2 * inner, E)), T(f"blk.{i}.ssm_conv1d.weight", (inner, kernel)),
            T(f"blk.{i}.ssm_conv1d.bias", (inner,)), T(f"blk.{i}.ssm_x.weight", (dt_rank + 2 * state, inner)),
            T(f"blk.{i}.ssm_dt.weight", (inner, dt_rank)), T(f"blk.{i}.ssm_dt.bias", (inner,)),
            T(f"blk.{i}.ssm_a", (inner, state)), T(f"blk.{i}.ssm_d", (inner,)),
            T(f"blk.{i}.ssm_out.weight", (E, inner))]


def _mamba2(i: int, inner: int, state: int, groups: int, kernel: int, heads: int) -> list[T]:
    channels = inner + 2 * groups * state
    return [T(f"blk.{i}.ssm_in.weight", (2 * inner + 2 * groups * state + heads, E)),
            T(f"blk.{i}.ssm_conv1d.weight", (channels, kernel)), T(f"blk.{i}.ssm_conv1d.bias", (channels,)),
            T(f"blk.{i}.ssm_dt.bias", (heads,)), T(f"blk.{i}.ssm_a", (heads,)), T(f"blk.{i}.ssm_d", (heads,)),
            T(f"blk.{i}.ssm_norm.weight", (inner,)), T(f"blk.{i}.ssm_out.weight", (E, inner))]


def _audit(path: Path, arch: str, meta: Mapping[str, Any], tensors: Sequence[T]) -> Any:
    write_gguf(path, arch, {"{arch}.embedding_length": E, **meta}, tensors)
    report = mhainspect.inspect(str(path), context=1000)
    schema = json.loads((Path(__file__).parent.parent / "docs" / "report.schema.json").read_text())
    Draft202012Validator(schema).validate(report.to_dict())
    return report


def _layers(report: Any) -> dict[MixerKind, tuple[int, ...]]:
    return {m.kind: m.layers for m in report.model.mixers}


def test_jamba_like_attention_among_mamba_layers(tmp_path: Path) -> None:
    """Layer 1 attention (4 heads, 2 KV heads, head size 64/4 = 16), layers 0, 2, 3 Mamba.
    KV: 2 heads × (16 + 16) × 2 bytes (f16) = 128 bytes a token, 128,000 at 1,000 tokens.
    State a Mamba layer: conv (4 - 1) × 128 = 384 + state 16 × 128 = 2,048 -> 2,432 × 4 bytes =
    9,728; three layers 29,184."""
    tensors = [t for i in range(4) for t in (_ffn(i) + (_attention(i, 4, 2, 16) if i == 1 else
                                                         _mamba1(i, 128, 16, 4, 4)))]
    report = _audit(tmp_path / "jamba.gguf", "jamba", {
        "{arch}.block_count": 4, "{arch}.attention.head_count": 4, "{arch}.attention.head_count_kv": [0, 2, 0, 0],
        "{arch}.ssm.conv_kernel": 4, "{arch}.ssm.inner_size": 128, "{arch}.ssm.state_size": 16,
        "{arch}.ssm.time_step_rank": 4}, tensors)
    assert [(b.name, b.num_heads, b.num_kv_heads, b.d_k) for b in report.blocks] == [("blk.1.attn", 4, 2, 16)]
    assert _layers(report) == {MixerKind.STATE_SPACE: (0, 2, 3)}
    (mixer,) = report.model.mixers
    assert mixer.state_bytes_per_layer == 9728 and mixer.dtype == "float32"
    kv = report.model.kv_cache
    assert kv is not None and kv.status is CacheStatus.CACHES and not kv.lower_bound
    assert kv.bytes_per_token == 128 and kv.total_bytes == 128_000
    assert kv.state_bytes_per_sequence == 29_184
    assert "state_space" in report.to_text()


def test_mamba2_like_has_no_kv_cache(tmp_path: Path) -> None:
    """No attention at all: no block, no KV claim; the state is the whole per-sequence memory.
    A layer: conv (4 - 1) × (128 + 2 × 2 × 16) = 576 + state 16 × 128 = 2,048 -> 2,624 × 4 =
    10,496 bytes; two layers 20,992."""
    tensors = [t for i in range(2) for t in [T(f"blk.{i}.attn_norm.weight", (E,)), *_mamba2(i, 128, 16, 2, 4, 8)]]
    report = _audit(tmp_path / "mamba2.gguf", "mamba2", {
        "{arch}.block_count": 2, "{arch}.attention.head_count": 0, "{arch}.attention.head_count_kv": 0,
        "{arch}.ssm.conv_kernel": 4, "{arch}.ssm.inner_size": 128, "{arch}.ssm.state_size": 16,
        "{arch}.ssm.group_count": 2, "{arch}.ssm.time_step_rank": 8}, tensors)
    assert report.blocks == () and report.misses == ()
    assert _layers(report) == {MixerKind.STATE_SPACE: (0, 1)}
    kv = report.model.kv_cache
    assert kv is not None and kv.status is CacheStatus.NONE and kv.bytes_per_token is None and not kv.lower_bound
    assert kv.state_bytes_per_sequence == 20_992


def _qwen3next_linear(i: int) -> list[T]:
    """A Gated DeltaNet layer as llama.cpp's qwen3next writes it: 2 key heads of 16, 4 value heads of 16."""
    kh, kd, vh, vd, k = 2, 16, 4, 16, 4
    conv = 2 * kh * kd + vh * vd
    return [T(f"blk.{i}.ssm_in.weight", (2 * kh * kd + 2 * vh * vd, E)), T(f"blk.{i}.ssm_ba.weight", (2 * vh, E)),
            T(f"blk.{i}.ssm_conv1d.weight", (conv, k)), T(f"blk.{i}.ssm_a", (vh,)), T(f"blk.{i}.ssm_dt.bias", (vh,)),
            T(f"blk.{i}.ssm_norm.weight", (vd,)), T(f"blk.{i}.ssm_out.weight", (E, vh * vd))]


def _qwen35_linear(i: int) -> list[T]:
    """The same mixer as qwen35 writes it: its q/k/v in attn_qkv, its output gate in attn_gate, beta and
    alpha apart; the attn_* tensors are the mixer's, with no attention output of their own."""
    kh, kd, vh, vd, k = 2, 16, 4, 16, 4
    conv = 2 * kh * kd + vh * vd
    return [T(f"blk.{i}.attn_qkv.weight", (conv, E)), T(f"blk.{i}.attn_gate.weight", (vh * vd, E)),
            T(f"blk.{i}.ssm_beta.weight", (vh, E)), T(f"blk.{i}.ssm_alpha.weight", (vh, E)),
            T(f"blk.{i}.ssm_conv1d.weight", (conv, k)), T(f"blk.{i}.ssm_a", (vh,)), T(f"blk.{i}.ssm_dt.bias", (vh,)),
            T(f"blk.{i}.ssm_norm.weight", (vd,)), T(f"blk.{i}.ssm_out.weight", (E, vh * vd))]


def test_qwen3next_like_delta_rule_layers(tmp_path: Path) -> None:
    """Layer 3 full attention (4 heads of 32, 2 KV heads), layers 0-2 Gated DeltaNet (qwen3next's ssm_ba;
    qwen35's attn_qkv + attn_gate + ssm_beta/ssm_alpha, which must not make a block).
    KV: 2 × (32 + 32) × 2 = 256 bytes a token. A DeltaNet layer (llama.cpp: inner_size = 4 value heads ×
    16, state_size = key head 16, group_count = 2 key heads): conv (4 - 1) × (64 + 2 × 2 × 16) = 384 +
    state 16 × 64 = 1,024 -> 1,408 × 4 = 5,632 bytes; three layers 16,896."""
    meta = {"{arch}.block_count": 4, "{arch}.attention.head_count": 4, "{arch}.attention.head_count_kv": 2,
            "{arch}.attention.key_length": 32, "{arch}.attention.value_length": 32, "{arch}.ssm.conv_kernel": 4,
            "{arch}.ssm.inner_size": 64, "{arch}.ssm.state_size": 16, "{arch}.ssm.group_count": 2,
            "{arch}.ssm.time_step_rank": 4, "{arch}.full_attention_interval": 4}
    for arch, linear in (("qwen3next", _qwen3next_linear), ("qwen35", _qwen35_linear)):
        tensors = [t for i in range(4) for t in (_ffn(i) + (_attention(i, 4, 2, 32, head_norms=True) if i == 3
                                                             else linear(i)))]
        report = _audit(tmp_path / f"{arch}.gguf", arch, meta, tensors)
        assert [(b.name, b.num_heads, b.num_kv_heads, b.d_k) for b in report.blocks] == [("blk.3.attn", 4, 2, 32)], arch
        assert report.misses == (), arch
        assert _layers(report) == {MixerKind.LINEAR_ATTENTION: (0, 1, 2)}, arch
        kv = report.model.kv_cache
        assert kv is not None and kv.status is CacheStatus.CACHES and not kv.lower_bound, arch
        assert kv.bytes_per_token == 256 and kv.state_bytes_per_sequence == 16_896, arch
        if arch == "qwen35":
            assert "mixer's own projections" in report.model.mixers[0].source


def test_falcon_h1_like_attention_beside_mamba2_in_every_layer(tmp_path: Path) -> None:
    """Both mixers in each of 2 layers: 2 blocks, 2 Mamba-2 layers beside them.
    KV: 2 layers × 2 × (16 + 16) × 2 = 256 bytes a token. State: conv (4 - 1) × (128 + 2 × 1 × 16)
    = 480 + 16 × 128 = 2,048 -> 2,528 × 4 = 10,112 bytes a layer; 20,224."""
    tensors = [t for i in range(2) for t in _ffn(i) + _attention(i, 4, 2, 16) + _mamba2(i, 128, 16, 1, 4, 8)]
    report = _audit(tmp_path / "falcon-h1.gguf", "falcon-h1", {
        "{arch}.block_count": 2, "{arch}.attention.head_count": 4, "{arch}.attention.head_count_kv": 2,
        "{arch}.attention.key_length": 16, "{arch}.attention.value_length": 16, "{arch}.ssm.conv_kernel": 4,
        "{arch}.ssm.inner_size": 128, "{arch}.ssm.state_size": 16, "{arch}.ssm.group_count": 1,
        "{arch}.ssm.time_step_rank": 8}, tensors)
    assert [b.name for b in report.blocks] == ["blk.0.attn", "blk.1.attn"]
    assert _layers(report) == {MixerKind.STATE_SPACE: (0, 1)}
    assert "beside the layer's attention" in report.model.mixers[0].source
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == 256 and kv.state_bytes_per_sequence == 20_224
    assert not kv.lower_bound


def test_lfm2_like_short_convolutions(tmp_path: Path) -> None:
    """Layers 0 and 2 short convolutions, layer 1 attention (4 heads, 2 KV heads of 16).
    A convolution layer (llama.cpp): 64 × (3 - 1) = 128 × 4 = 512 bytes; two layers 1,024."""
    conv = [lambda i: [T(f"blk.{i}.shortconv.conv.weight", (E, 3)), T(f"blk.{i}.shortconv.in_proj.weight", (3 * E, E)),
                       T(f"blk.{i}.shortconv.out_proj.weight", (E, E))]][0]
    tensors = [t for i in range(3) for t in _ffn(i) + (_attention(i, 4, 2, 16) if i == 1 else conv(i))]
    for meta in ({"{arch}.shortconv.l_cache": 3}, {}):  # without the key: the convolution's [64, 3]
        report = _audit(tmp_path / f"lfm2{len(meta)}.gguf", "lfm2", {
            "{arch}.block_count": 3, "{arch}.attention.head_count": 4, "{arch}.attention.head_count_kv": [0, 2, 0],
            **meta}, tensors)
        assert [b.name for b in report.blocks] == ["blk.1.attn"]
        assert _layers(report) == {MixerKind.CONVOLUTION: (0, 2)}
        kv = report.model.kv_cache
        assert kv is not None and kv.bytes_per_token == 128 and kv.state_bytes_per_sequence == 1024


def test_a_layer_of_an_unknown_mixer_makes_a_lower_bound(tmp_path: Path) -> None:
    """The metadata says layer 1 has no attention (head_count_kv[1] = 0) and it holds no tensor of a
    mixer known here: the attention layer's 128 bytes a token are a stated lower bound."""
    tensors = [*_ffn(0), *_attention(0, 4, 2, 16), *_ffn(1), T("blk.1.wavelet_mix.weight", (E, E)),
               T("blk.1.wavelet_decay", (E,))]
    report = _audit(tmp_path / "future.gguf", "futurehybrid", {
        "{arch}.block_count": 2, "{arch}.attention.head_count": 4, "{arch}.attention.head_count_kv": [2, 0]},
        tensors)
    assert [b.name for b in report.blocks] == ["blk.0.attn"]
    assert _layers(report) == {MixerKind.UNKNOWN: (1,)}
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == 128 and kv.lower_bound
    assert kv.not_counted is not None and "layer 1" in kv.not_counted and "head_count_kv[1] = 0" in kv.not_counted
    assert "at least" in report.to_text()


def test_missing_state_widths_from_the_tensor_shapes(tmp_path: Path) -> None:
    """A Mamba layer without ssm.inner_size: its tensors still determine the state: conv ssm_conv1d
    [128, 4] -> 128 × (4 - 1) = 384, state ssm_a [128, 16] -> 2,048: 2,432 × 4 = 9,728 bytes (what
    the keys give in the Jamba test above), the key's absence said."""
    tensors = [t for i in range(2) for t in (_ffn(i) + (_attention(i, 4, 2, 16) if i == 0 else
                                                         _mamba1(i, 128, 16, 4, 4)))]
    report = _audit(tmp_path / "nokeys.gguf", "jamba", {
        "{arch}.block_count": 2, "{arch}.attention.head_count": 4, "{arch}.attention.head_count_kv": [2, 0],
        "{arch}.ssm.conv_kernel": 4, "{arch}.ssm.state_size": 16}, tensors)
    (mixer,) = report.model.mixers
    assert mixer.layers == (1,) and mixer.state_bytes_per_layer == 9728
    assert "jamba.ssm.inner_size absent" in mixer.state_source and "from the tensor shapes" in mixer.state_source


def test_missing_state_widths_are_said(tmp_path: Path) -> None:
    """A Mamba-2 layer without ssm.state_size: ssm_a [8] gives the heads, not their size or d_state:
    listed, its state not sized, and the reason says which key and what the tensors give."""
    tensors = [t for i in range(2) for t in (_ffn(i) + (_attention(i, 4, 2, 16) if i == 0 else
                                                         _mamba2(i, 128, 16, 2, 4, 8)))]
    report = _audit(tmp_path / "nokeys2.gguf", "mamba2", {
        "{arch}.block_count": 2, "{arch}.attention.head_count": 4, "{arch}.attention.head_count_kv": [2, 0],
        "{arch}.ssm.conv_kernel": 4, "{arch}.ssm.inner_size": 128}, tensors)
    (mixer,) = report.model.mixers
    assert mixer.layers == (1,) and mixer.state_bytes_per_layer is None
    assert mixer.reason is not None and "mamba2.ssm.state_size absent" in mixer.reason
    assert "give the heads (8, ssm_a)" in mixer.reason
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == 128 and kv.state_bytes_per_sequence is None
    assert kv.state_reason is not None and "state_size" in kv.state_reason


def _kda(i: int, heads: int, dim: int, kernel: int) -> list[T]:
    """A Kimi Delta Attention layer as llama.cpp's kimi-linear writes it: its q/k/v/o projections as
    attn_* (no ssm_out), a short convolution per q, k and v ([d_conv, 1, d_inner, 1] in GGML's order),
    the gate and decay low-rank pairs, beta, A per head, the output norm."""
    inner = heads * dim
    return [*_attention(i, heads, heads, dim),
            *[T(f"blk.{i}.ssm_conv1d_{r}.weight", (1, inner, 1, kernel)) for r in "qkv"],
            T(f"blk.{i}.ssm_f_a.weight", (dim, E)), T(f"blk.{i}.ssm_f_b.weight", (inner, dim)),
            T(f"blk.{i}.ssm_beta.weight", (heads, E)), T(f"blk.{i}.ssm_a", (1, 1, heads, 1)),
            T(f"blk.{i}.ssm_g_a.weight", (dim, E)), T(f"blk.{i}.ssm_g_b.weight", (inner, dim)),
            T(f"blk.{i}.ssm_dt.bias", (inner,)), T(f"blk.{i}.ssm_norm.weight", (dim,))]


def test_kimi_linear_kda_layers(tmp_path: Path) -> None:
    """Kimi-Linear: layers 0-2 KDA (head_count_kv 0), layer 3 attention (4 heads, 4 KV heads of 16).
    llama.cpp writes no ssm.inner_size; its KDA state is n_embd_r = 3 × (d_conv 4 - 1) × n_head 4 ×
    head_dim 16 = 576 + n_embd_s = 16² × 4 = 1,024 -> 1,600 × 4 = 6,400 bytes a layer, 19,200 for
    three, with kda.head_dim or without it (ssm_conv1d_q's 64 channels / 4 heads). KV: 4 × (16 + 16)
    × 2 = 256 bytes a token. The KDA layers' attn_* tensors make no block."""
    tensors = [t for i in range(4) for t in _ffn(i) + (_attention(i, 4, 4, 16) if i == 3 else _kda(i, 4, 16, 4))]
    meta: dict[str, Any] = {"{arch}.block_count": 4, "{arch}.attention.head_count": 4,
                            "{arch}.attention.head_count_kv": [0, 0, 0, 4], "{arch}.attention.key_length": 16,
                            "{arch}.attention.value_length": 16, "{arch}.ssm.conv_kernel": 4}
    for extra in ({"{arch}.kda.head_dim": 16}, {}):
        report = _audit(tmp_path / f"kimi{len(extra)}.gguf", "kimi-linear", {**meta, **extra}, tensors)
        assert [(b.name, b.num_heads, b.num_kv_heads, b.d_k) for b in report.blocks] == [("blk.3.attn", 4, 4, 16)]
        (mixer,) = report.model.mixers
        assert mixer.kind is MixerKind.LINEAR_ATTENTION and mixer.layers == (0, 1, 2)
        assert mixer.state_bytes_per_layer == 6400, mixer.reason
        assert ("kda.head_dim = 16" if extra else "ssm_conv1d_q's 64 channels / 4") in mixer.state_source
        kv = report.model.kv_cache
        assert kv is not None and kv.bytes_per_token == 256 and kv.state_bytes_per_sequence == 19_200
        assert not kv.lower_bound


def test_rwkv_like_time_mix_layers(tmp_path: Path) -> None:
    """RWKV: every layer a WKV linear attention (time_mix_*), no attention, no KV claim. llama.cpp's
    state a layer: token shift 2 × 64 = 128 + WKV 64 × head_size 16 = 1,024 -> 1,152 × 4 = 4,608
    bytes; two layers 9,216."""
    def layer(i: int) -> list[T]:
        return [T(f"blk.{i}.attn_norm.weight", (E,)), T(f"blk.{i}.time_mix_lerp_fused.weight", (6, 1, 1, E)),
                T(f"blk.{i}.time_mix_key.weight", (E, E)), T(f"blk.{i}.time_mix_value.weight", (E, E)),
                T(f"blk.{i}.time_mix_receptance.weight", (E, E)), T(f"blk.{i}.time_mix_output.weight", (E, E)),
                T(f"blk.{i}.channel_mix_key.weight", (128, E)), T(f"blk.{i}.channel_mix_value.weight", (E, 128))]
    report = _audit(tmp_path / "rwkv7.gguf", "rwkv7", {
        "{arch}.block_count": 2, "{arch}.wkv.head_size": 16, "{arch}.token_shift_count": 2}, [*layer(0), *layer(1)])
    assert report.blocks == ()
    assert _layers(report) == {MixerKind.LINEAR_ATTENTION: (0, 1)}
    kv = report.model.kv_cache
    assert kv is not None and kv.status is CacheStatus.NONE and kv.state_bytes_per_sequence == 9216
