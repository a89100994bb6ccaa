"""Layers that read another layer's K/V cache (KV sharing), from configs: blocks of their own (their
heads, d_k, Q/O and whatever K/V weights they hold), whose cache is counted once, at its source.

Folders are written with random weights (every tensor drawn, none left at a constant); the K/V per
token is computed by hand in each test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

import mhainspect
from mhainspect.frontends.checkpoint.layer_types import layer_plan
from mhainspect.render import render
from mhainspect.results import CacheStatus
from tests.test_layer_types import schema_check

HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 32, 4, 2, 8


def _folder(path: Path, layers: int, holds_kv: set[int], extra: dict[str, Any]) -> Path:
    """A Llama-style decoder folder: every layer holds Q and O, the layers in ``holds_kv`` K and V too."""
    path.mkdir()
    tensors = {"model.embed_tokens.weight": torch.randn(64, HIDDEN)}
    for i in range(layers):
        pre = f"model.layers.{i}.self_attn"
        tensors[f"{pre}.q_proj.weight"] = torch.randn(HEADS * HEAD_DIM, HIDDEN)
        tensors[f"{pre}.o_proj.weight"] = torch.randn(HIDDEN, HEADS * HEAD_DIM)
        if i in holds_kv:
            tensors[f"{pre}.k_proj.weight"] = torch.randn(KV_HEADS * HEAD_DIM, HIDDEN)
            tensors[f"{pre}.v_proj.weight"] = torch.randn(KV_HEADS * HEAD_DIM, HIDDEN)
    save_file(tensors, str(path / "model.safetensors"))
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": HIDDEN,
              "num_hidden_layers": layers, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
              "head_dim": HEAD_DIM, "torch_dtype": "float32", **extra}
    (path / "config.json").write_text(json.dumps(config))
    return path


# Each caching layer: 2 kv heads x (d_k 8 + d_v 8) x 4 bytes (float32) = 128 bytes per token.
PER_LAYER = KV_HEADS * (HEAD_DIM + HEAD_DIM) * 4
QO = 2 * HIDDEN * HEADS * HEAD_DIM


@pytest.mark.parametrize("readers_hold_kv", [False, True])
def test_cross_layer_sharing_counts_each_cache_once(tmp_path: Path, readers_hold_kv: bool) -> None:
    """kv_source_layers [0, 0, 2, 2]: layers 1 and 3 read layers 0's and 2's caches. Two caches of
    128 bytes per token: 256, whether the readers hold K/V weights of their own or not."""
    folder = _folder(tmp_path / "m", 4, {0, 1, 2, 3} if readers_hold_kv else {0, 2},
                     {"kv_source_layers": [0, 0, 2, 2]})
    report = mhainspect.inspect(str(folder), context=10)
    assert [b.name for b in report.blocks] == [f"model.layers.{i}.self_attn" for i in range(4)]
    assert not report.misses
    kv = report.model.kv_cache
    assert kv is not None and kv.status is CacheStatus.CACHES and not kv.lower_bound
    assert kv.bytes_per_token == 2 * PER_LAYER == 256
    assert kv.total_bytes == 256 * 10
    by_name = {b.name: b for b in report.blocks}
    for reader, source in ((1, 0), (3, 2)):
        b = by_name[f"model.layers.{reader}.self_attn"]
        assert b.kv_cache_shared_from == f"model.layers.{source}.self_attn"
        assert b.kv_cache_status is CacheStatus.NONE and b.kv_cache_bytes_per_token is None
        assert (b.num_heads, b.num_kv_heads, b.d_k, b.d_v) == (HEADS, KV_HEADS, HEAD_DIM, HEAD_DIM)
        # Its own weights are its parameters; K/V it borrows count at the source only.
        kv_weights = 2 * KV_HEADS * HEAD_DIM * HIDDEN if readers_hold_kv else 0
        assert b.params.total == QO + kv_weights
        assert any(e.field == "kv_cache_shared_from" and e.value == source for e in b.evidence)
    for source in (0, 2):
        b = by_name[f"model.layers.{source}.self_attn"]
        assert b.kv_cache_shared_from is None and b.kv_cache_bytes_per_token == PER_LAYER
    # K and V of the layers that hold them: 4 layers or 2, each 2 x (16 x 32).
    assert report.model.attention_params == 4 * QO + (4 if readers_hold_kv else 2) * 2 * KV_HEADS * HEAD_DIM * HIDDEN
    assert "model.layers.1.self_attn reads model.layers.0.self_attn" in render(report, "text", width=400)
    schema_check(report)


def test_shared_last_layers_read_the_last_layer_of_their_type(tmp_path: Path) -> None:
    """num_kv_shared_layers 2 over sliding/full layers (Gemma-3n's rule): layer 4 (sliding) reads
    layer 2, layer 5 (full) reads layer 3. Caches: layers 0-3, two of them sliding (window 4: at
    most 3 past tokens). At 10 tokens: 2 x 128 x 10 + 2 x 128 x 3 = 3,328 bytes."""
    types = ["sliding_attention", "full_attention"] * 3
    folder = _folder(tmp_path / "m", 6, {0, 1, 2, 3},
                     {"num_kv_shared_layers": 2, "layer_types": types, "sliding_window": 4})
    report = mhainspect.inspect(str(folder), context=10)
    readers = {b.name: b.kv_cache_shared_from for b in report.blocks if b.kv_cache_shared_from}
    assert readers == {"model.layers.4.self_attn": "model.layers.2.self_attn",
                       "model.layers.5.self_attn": "model.layers.3.self_attn"}
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == 4 * PER_LAYER and not kv.lower_bound
    assert kv.total_bytes == 2 * PER_LAYER * 10 + 2 * PER_LAYER * 3


def test_a_sharing_the_tool_cannot_place_is_a_stated_lower_bound(tmp_path: Path) -> None:
    """kv_source_layers naming a layer that itself reads another (transformers refuses it): no layer
    is placed as a reader, and the layers without K/V weights are attention modules that cache what
    no block sizes: the figure is a stated lower bound (layer 0's 128 bytes per token, the others
    named as not counted), never a confident number."""
    assert layer_plan({"num_hidden_layers": 3, "kv_source_layers": [0, 0, 1]}, "llama") is not None
    folder = _folder(tmp_path / "m", 3, {0}, {"kv_source_layers": [0, 0, 1]})
    report = mhainspect.inspect(str(folder))
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == PER_LAYER and kv.lower_bound
    assert kv.not_counted and "model.layers.1.self_attn" in kv.not_counted and "model.layers.2.self_attn" in kv.not_counted
    assert sorted(m.anchor for m in report.misses) == ["model.layers.1.self_attn", "model.layers.2.self_attn"]
    assert not any(b.kv_cache_shared_from for b in report.blocks)
