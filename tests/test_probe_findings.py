"""Rules the architecture probe (scripts/probe_architectures.py) found missing, each from a config
dict and safetensors headers alone (no torch, no transformers).

- Canary, Dia, Cohere-ASR keep their stacks under ``encoder_config`` / ``decoder_config``: the
  blocks read the top level (no heads: unknown; or the decoder's heads and K/V heads for the
  encoder: wrong).
- Depth Pro (``patch_model_config``, ``image_model_config``), NeuCodec (``semantic_model_config``)
  and Pi0 (``vlm_config`` holding a text and a vision config, ``dit_config``) name a sub-config
  after the module path of its blocks.
- Dia sizes its cross-attention apart: ``cross_num_attention_heads``, ``cross_head_dim``; and its
  module is ``cross_attention``, which the kind-by-name rule read as self-attention.
- BLIP's ``projection``, InternVL's ``projection_layer``, BigBird-Pegasus' ``output``: output
  projections no role name covers, found by their shape.
- A layer type not known here (Muse-Glimmer's ``window_attention``, a CNN backbone's ``basic``)
  dropped the blocks its layers' weights make.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from remote_models import write_safetensors

from mhainspect.frontends.checkpoint.hf_config import offers_from_config, sub_config
from mhainspect.matchers.grouping import cross_by_name
from mhainspect.pipeline import audit
from mhainspect.results import BlockKind

LLAMA_LIKE = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24, "hidden_size": 64}


def _heads(cfg: dict[str, Any], block: str) -> tuple[int | None, int | None, int | None]:
    o = offers_from_config(cfg, block)
    return o.num_heads, o.num_kv_heads, o.head_dim


@pytest.mark.parametrize(("block", "expected", "prefix"), [
    ("encoder.layers.0.self_attn", (8, None, 32), "encoder_config."),
    ("decoder.layers.1.self_attn", (4, 2, 24), "decoder_config."),
    ("decoder.layers.1.encoder_attn", (4, 2, 24), "decoder_config."),
])
def test_encoder_and_decoder_configs_describe_their_stacks(block: str, expected: tuple[int, ...], prefix: str) -> None:
    cfg = {"encoder_config": {"num_attention_heads": 8, "head_dim": 32, "hidden_size": 64},
           "decoder_config": dict(LLAMA_LIKE), "vocab_size": 128}
    assert _heads(cfg, block) == expected
    assert sub_config(cfg, block)[0] == prefix


@pytest.mark.parametrize(("block", "expected"), [
    ("encoder.patch_encoder.model.encoder.layer.0.attention", (6, None, None)),  # patch_model_config
    ("encoder.image_encoder.model.encoder.layer.1.attention", (3, None, None)),  # image_model_config
    ("semantic_encoder.encoder.layers.0.self_attn", (2, None, 8)),  # semantic_model_config: "model" is not a word
    ("vlm.language_model.layers.0.self_attn", (8, 1, 16)),  # vlm_config.text_config
    ("vlm.vision_tower.encoder.layers.0.self_attn", (12, None, None)),  # vlm_config.vision_config
    ("dit.layers.0.self_attn", (5, 5, 16)),  # dit_config
    ("layers.0.self_attn", (4, 2, 24)),  # no sub-config named by the path: the top level
])
def test_a_sub_config_named_after_the_blocks_path(block: str, expected: tuple[int | None, ...]) -> None:
    cfg = {**LLAMA_LIKE,
           "patch_model_config": {"num_attention_heads": 6}, "image_model_config": {"num_attention_heads": 3},
           "semantic_model_config": {"num_attention_heads": 2, "head_dim": 8},
           "vlm_config": {"text_config": {"num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 16},
                          "vision_config": {"num_attention_heads": 12}},
           "dit_config": {"num_attention_heads": 5, "num_key_value_heads": 5, "head_dim": 16}}
    assert _heads(cfg, block) == expected


@pytest.mark.parametrize(("block", "expected"), [
    ("encoder.vision_tower.encoder.layers.0.self_attn", (2, None, 16)),  # encoder.vision_config
    ("encoder.text_model.layers.0.self_attn", (4, 1, 32)),  # encoder.text_config
    ("decoder.layers.0.self_attn", (8, 2, 32)),
])
def test_a_stack_config_that_nests_a_text_and_a_vision_config(block: str, expected: tuple[int | None, ...]) -> None:
    """T5Gemma 2: ``encoder`` holds no heads of its own but a text and a vision config."""
    cfg = {"encoder": {"text_config": {"num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32},
                       "vision_config": {"num_attention_heads": 2, "head_dim": 16}},
           "decoder": {"num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32}}
    assert _heads(cfg, block) == expected


def test_a_video_tower_reads_the_vision_config() -> None:
    cfg = {"text_config": dict(LLAMA_LIKE), "vision_config": {"num_attention_heads": 12, "head_dim": 16}}
    assert _heads(cfg, "video_tower.encoder.layers.0.self_attn") == (12, None, 16)
    assert _heads(cfg, "language_model.layers.0.self_attn") == (4, 2, 24)


def test_a_nested_config_without_heads_is_not_the_blocks() -> None:
    """MPT's ``attn_config`` is named by ``blocks.0.attn`` but sizes no heads: the top level does."""
    assert _heads({"n_heads": 32, "attn_config": {"attn_type": "multiquery_attention"}}, "blocks.0.attn") == (32, 1, None)


def test_two_sub_configs_equally_named_by_a_path_decide_nothing() -> None:
    """``audio`` and ``speech`` both in the path: neither config is the block's (the top level is)."""
    cfg = {**LLAMA_LIKE, "audio_encoder_config": {"num_attention_heads": 6},
           "speech_encoder_config": {"num_attention_heads": 3}}
    assert _heads(cfg, "audio_speech.encoder.layers.0.attn") == (4, 2, 24)
    assert _heads(cfg, "speech_encoder.layers.0.attn") == (3, None, None)


def test_cross_attention_reads_its_own_keys() -> None:
    cfg = {**LLAMA_LIKE, "cross_num_attention_heads": 16, "cross_num_key_value_heads": 16, "cross_head_dim": 128}
    cross = offers_from_config(cfg, "decoder.layers.0.cross_attention")
    assert (cross.num_heads, cross.num_kv_heads, cross.head_dim) == (16, 16, 128)
    assert "cross_num_attention_heads=16" in cross.detail and "cross_head_dim=128" in cross.detail
    assert _heads(cfg, "decoder.layers.0.self_attention") == (4, 2, 24)
    partial = offers_from_config({**LLAMA_LIKE, "cross_num_attention_heads": 8}, "decoder.layers.0.cross_attention")
    assert (partial.num_heads, partial.num_kv_heads, partial.head_dim) == (8, 2, 24)
    assert "cross_num_attention_heads=8" in partial.detail and "cross_head_dim" not in partial.detail


@pytest.mark.parametrize(("name", "cross"), [
    ("decoder.layers.0.cross_attention", True), ("decoder.layers.0.cross_attn", True),
    ("layer.0.crossattention", True), ("decoder.layers.0.encoder_attn", True),
    ("decoder.block.0.layer.1.EncDecAttention", True), ("decoder.layers.0.self_attention", False),
    ("encoder.layers.0.self_attn", False),
])
def test_cross_attention_by_name(name: str, cross: bool) -> None:
    assert cross_by_name(name) is cross


def _write_safetensors(path: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    write_safetensors(path, {name: ("F32", shape) for name, shape in shapes.items()})


def _attention(prefix: str, d: int, q: int, kv: int, kv_in: int | None = None) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.q_proj.weight": (q, d), f"{prefix}.k_proj.weight": (kv, kv_in or d),
            f"{prefix}.v_proj.weight": (kv, kv_in or d), f"{prefix}.o_proj.weight": (d, q)}


def test_an_encoder_decoder_folder_with_nested_stack_configs(tmp_path: Path) -> None:
    """A Dia-shaped folder: an encoder stack (encoder_config: 8 heads × 16), a decoder whose self-
    attention is grouped (4 heads over 2 × 24) and whose cross-attention has its own 16 heads × 8
    reading the encoder's 128-wide output. Every block gets its own stack's numbers, the encoder
    caches nothing, the cross-attention is cross."""
    cfg = {"model_type": "dia", "is_encoder_decoder": True,
           "encoder_config": {"num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 16, "hidden_size": 128},
           "decoder_config": {**LLAMA_LIKE, "cross_num_attention_heads": 16, "cross_num_key_value_heads": 16,
                              "cross_head_dim": 8, "cross_hidden_size": 128}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shapes = {**_attention("encoder.layers.0.self_attention", 128, 128, 128),
              **_attention("decoder.layers.0.self_attention", 64, 96, 48),
              **_attention("decoder.layers.0.cross_attention", 64, 128, 128, kv_in=128)}
    _write_safetensors(tmp_path / "model.safetensors", shapes)
    report = audit(tmp_path)
    got = {b.name: (b.kind, b.num_heads, b.num_kv_heads, b.d_k, b.conflicts) for b in report.blocks}
    assert got == {
        "encoder.layers.0.self_attention": (BlockKind.SELF, 8, 8, 16, ()),
        "decoder.layers.0.self_attention": (BlockKind.SELF, 4, 2, 24, ()),
        "decoder.layers.0.cross_attention": (BlockKind.CROSS, 16, 16, 8, ()),
    }
    cache = {b.name: (b.kv_cache_status, b.kv_cache_bytes_per_token) for b in report.blocks}
    assert cache["encoder.layers.0.self_attention"][1] is None  # run once over the input
    assert cache["decoder.layers.0.self_attention"][1] == 2 * (24 + 24) * 4
    assert cache["decoder.layers.0.cross_attention"][1] == 16 * (8 + 8) * 4
    assert report.model.kv_cache is not None
    assert report.model.kv_cache.bytes_per_token == 2 * (24 + 24) * 4  # the cross-attention's is per encoder token
    assert report.model.kv_cache.bytes_per_encoder_token == 16 * (8 + 8) * 4


# ----------------------------------------------------------------------------- O by shape


@pytest.mark.parametrize(("shapes", "o"), [
    # BLIP's vision attention: a packed qkv and ``projection``
    ({"layers.0.self_attn.qkv.weight": (192, 64), "layers.0.self_attn.qkv.bias": (192,),
      "layers.0.self_attn.projection.weight": (64, 64), "layers.0.self_attn.projection.bias": (64,)},
     "layers.0.self_attn.projection"),
    # InternVL's vision attention: q/k/v_proj and ``projection_layer``
    ({**{f"layers.0.attention.{r}_proj.weight": (64, 64) for r in "qkv"},
      "layers.0.attention.projection_layer.weight": (64, 64)}, "layers.0.attention.projection_layer"),
    # BigBird-Pegasus: Q/K/V under ``self``, the output a Linear beside it
    ({**{f"layers.0.self_attn.self.{r}.weight": (64, 64) for r in ("query", "key", "value")},
      "layers.0.self_attn.output.weight": (64, 64)}, "layers.0.self_attn.output"),
    # Longformer-style: three more projections that read Q's width: no single O, none taken
    ({**{f"layers.0.attn.self.{r}.weight": (64, 64) for r in ("query", "key", "value", "query_global",
                                                                "key_global", "value_global")}}, None),
    # A projection that does not write the block's input width is not its output
    ({**{f"layers.0.attn.{r}_proj.weight": (64, 64) for r in "qkv"}, "layers.0.attn.gate.weight": (32, 64)}, None),
])
def test_output_projection_by_shape(shapes: dict[str, tuple[int, ...]], o: str | None, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 4, "hidden_size": 64}))
    _write_safetensors(tmp_path / "model.safetensors", shapes)
    (block,) = audit(tmp_path).blocks
    outputs = [p.node for p in block.projections if p.role == "o"]
    assert outputs == ([o] if o else [])
    assert (block.num_heads, block.d_k) == (4, 16)
    if o is not None:
        assert block.params.total == sum(math.prod(s) for s in shapes.values())


# ----------------------------------------------------------------------------- layer types not known here


def _llama_layers(n: int) -> dict[str, tuple[int, ...]]:
    return {k: v for i in range(n) for k, v in _attention(f"layers.{i}.self_attn", 64, 96, 48).items()}


def test_a_layer_type_not_known_here_keeps_the_block_its_weights_make(tmp_path: Path) -> None:
    """Muse-Glimmer's vision tower says ``window_attention``, PP-DocLayout's config keeps its CNN
    backbone's ``basic``/``bottleneck`` at the top: names no rule here knows. The weights make an
    attention block at each layer; the block stays (heads, parameters), its cache unknown with the
    reason, and the layer is listed as of an unknown kind: the model's KV figure is the other
    layer's, stated as a lower bound."""
    cfg = {**LLAMA_LIKE, "model_type": "llama", "layer_types": ["window_attention", "full_attention"]}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    _write_safetensors(tmp_path / "model.safetensors", _llama_layers(2))
    report = audit(tmp_path)
    assert [(b.name, b.num_heads, b.num_kv_heads, b.d_k) for b in report.blocks] == [
        ("layers.0.self_attn", 4, 2, 24), ("layers.1.self_attn", 4, 2, 24)]
    first, second = report.blocks
    assert first.kv_cache_bytes_per_token is None and first.kv_cache_reason is not None
    assert "('window_attention') is not known here" in first.kv_cache_reason
    assert second.kv_cache_bytes_per_token == 2 * 48 * 4
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == 2 * 48 * 4 and kv.lower_bound
    assert kv.not_counted is not None and "window_attention" in kv.not_counted
    assert [(m.kind.value, m.layers) for m in report.model.mixers] == [("unknown", (0,))]


def test_a_layer_type_without_attention_still_drops_the_block(tmp_path: Path) -> None:
    """A type known to hold no softmax attention (linear attention) outweighs q/k/v/o-shaped weights
    (lightning attention has them too): the layer is a mixer, not a block."""
    cfg = {**LLAMA_LIKE, "model_type": "llama", "layer_types": ["linear_attention", "full_attention"]}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    _write_safetensors(tmp_path / "model.safetensors", _llama_layers(2))
    report = audit(tmp_path)
    assert [b.name for b in report.blocks] == ["layers.1.self_attn"]
    assert [(m.kind.value, m.layers) for m in report.model.mixers] == [("linear_attention", (0,))]


# ----------------------------------------------------------------------------- K/V heads that are no layout


def test_kv_heads_from_a_width_that_do_not_divide_the_query_heads_are_not_taken() -> None:
    """Deimv2's AIFI encoder: the config's ``head_dim`` (16) is not its attention's (256 / 4 heads =
    64). K's width over it gave 16 K/V heads for 4 query heads, no layout at all; now the K/V heads
    stay unknown and the disagreement is said (MHA007)."""
    from mhainspect.matchers.assembly import Widths, decide
    from mhainspect.results import Evidence, EvidenceSource

    said = "config.json encoder_attention_heads=4, head_dim=16"
    d = decide([Evidence("num_heads", 4, EvidenceSource.CONFIG, said), Evidence("d_k", 16, EvidenceSource.CONFIG, said)],
               Widths(q=256, k=256, v=256, o_in=256))
    assert (d.num_heads, d.num_kv_heads) == (4, None)
    assert any("do not divide the 4 query heads" in c for c in d.conflicts), d.conflicts
    grouped = decide([Evidence("num_heads", 8, EvidenceSource.CONFIG, "config"),
                      Evidence("d_k", 16, EvidenceSource.CONFIG, "config")], Widths(q=128, k=32, v=32, o_in=128))
    assert (grouped.num_heads, grouped.num_kv_heads, grouped.conflicts) == (8, 2, ())


def _stage_folder(tmp_path: Path, cfg: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    _write_safetensors(tmp_path / "model.safetensors", shapes)
    return {b.name: b for b in audit(tmp_path).blocks}


def test_per_stage_lists_are_read_at_the_stage_the_blocks_width_names(tmp_path: Path) -> None:
    """A Hiera-shaped backbone (SAM 2): per-stage lists (``num_attention_heads_per_stage``,
    ``embed_dim_per_stage``) number the stages, not the blocks (Hiera numbers its blocks through the
    stages: ``blocks.3`` is in stage 2). Each block reads the stage whose width is its attention
    width; the first block of a stage reads its input at the stage before's width and is still the
    new stage's (its attention width ranks above its input width)."""
    cfg = {"model_type": "stage_backbone", "hidden_size": 32, "num_attention_heads": 2,
           "num_attention_heads_per_stage": [2, 4, 8], "embed_dim_per_stage": [32, 64, 128],
           "blocks_per_stage": [1, 2, 1]}
    blocks = _stage_folder(tmp_path, cfg, {**_attention("blocks.0.attn", 32, 32, 32),
                                           **_attention("blocks.1.attn", 32, 64, 64),
                                           **_attention("blocks.2.attn", 64, 64, 64),
                                           **_attention("blocks.3.attn", 64, 128, 128)})
    got = {n: (b.num_heads, b.num_kv_heads, b.d_k, b.d_model) for n, b in blocks.items()}
    assert got == {"blocks.0.attn": (2, 2, 16, 32), "blocks.1.attn": (4, 4, 16, 32),
                   "blocks.2.attn": (4, 4, 16, 64), "blocks.3.attn": (8, 8, 16, 64)}
    assert any(e.field == "num_heads" and "num_attention_heads_per_stage[2]=8" in e.detail
               for e in blocks["blocks.3.attn"].evidence)


def test_per_stage_lists_without_a_stage_of_the_blocks_width_give_no_count(tmp_path: Path) -> None:
    """No stage of the lists is as wide as the block: its heads stay unknown (the top-level count is
    the stages' and not read either)."""
    cfg = {"model_type": "stage_backbone", "hidden_size": 32, "num_attention_heads": 2,
           "num_attention_heads_per_stage": [2, 4], "embed_dim_per_stage": [32, 64]}
    (block,) = _stage_folder(tmp_path, cfg, _attention("blocks.0.attn", 96, 96, 96)).values()
    assert (block.num_heads, block.d_model) == (None, 96)


def test_a_config_is_not_read_for_a_block_of_another_width(tmp_path: Path) -> None:
    """A config whose width is neither the block's d_model nor its attention width, nor its heads ×
    head size the block's Q width, describes another block: its heads are not taken, and the block
    says why."""
    cfg = {"model_type": "other_width", "hidden_size": 32, "num_attention_heads": 2}
    (block,) = _stage_folder(tmp_path, cfg, _attention("blocks.0.attn", 64, 64, 64)).values()
    assert (block.num_heads, block.num_kv_heads, block.d_k, block.d_model) == (None, None, None, 64)
    assert block.unknown_reason is not None and "width 32" in block.unknown_reason \
        and "d_model 64" in block.unknown_reason
    assert any(e.field == "num_heads" and e.value is None and "num_attention_heads=2" in e.detail
               for e in block.evidence)


def test_a_config_of_another_width_whose_heads_fill_the_block_is_read(tmp_path: Path) -> None:
    """A block whose input is not the config's width (a projection from a narrower stream), but whose
    Q width is the config's heads × head size: the config describes it; its counts are taken."""
    cfg = {"model_type": "narrow_input", **LLAMA_LIKE}
    blocks = _stage_folder(tmp_path, cfg, _attention("layers.0.self_attn", 48, 96, 48))
    (block,) = blocks.values()
    assert (block.num_heads, block.num_kv_heads, block.d_k, block.d_model) == (4, 2, 24, 48)


def test_a_block_at_the_configs_inner_width_is_the_configs(tmp_path: Path) -> None:
    """MobileBERT's attention runs at its bottleneck (``intra_bottleneck_size``), not the hidden size:
    a width the config states, so its head count is the block's."""
    cfg = {"model_type": "bottleneck", "hidden_size": 64, "intra_bottleneck_size": 128, "num_attention_heads": 4}
    (block,) = _stage_folder(tmp_path, cfg, _attention("encoder.layer.0.attention", 128, 128, 128)).values()
    assert (block.num_heads, block.d_k, block.d_model) == (4, 32, 128)


def test_a_stacks_head_key_describes_the_stacks_width(tmp_path: Path) -> None:
    """RT-DETR-shaped (PP-DocLayout v3): ``encoder_attention_heads`` counts the heads of the encoder,
    whose width is ``encoder_hidden_dim``, not the 64-wide ``d_model`` of the rest: its blocks are
    the config's, the mit-like ``mit_hidden_size`` of another stack is not a width of the encoder's."""
    cfg = {"model_type": "stack_widths", "d_model": 64, "encoder_attention_heads": 4, "encoder_hidden_dim": 256}
    (block,) = _stage_folder(tmp_path, cfg, _attention("encoder.aifi.0.layers.0.self_attn", 256, 256, 256)).values()
    assert (block.num_heads, block.d_k, block.d_model) == (4, 64, 256)
    cfg = {**cfg, "num_attention_heads": 4, "mit_hidden_size": 512}
    assert offers_from_config(cfg, "encoder.aifi.0.layers.0.self_attn").widths == (64,)
    # a prefixed width is a width of the blocks whose path names the prefix only
    assert offers_from_config(cfg, "mit.layers.0.self_attn").widths == (64, 512)


# ----------------------------------------------------------------------------- sparse-attention indexers


def _mla(prefix: str, d: int = 64, heads: int = 4, q_rank: int = 48, kv_rank: int = 32, nope: int = 16,
         rope: int = 8, v: int = 16) -> dict[str, tuple[int, ...]]:
    """A DeepSeek-V3-style latent attention module's weights."""
    return {f"{prefix}.q_a_proj.weight": (q_rank, d), f"{prefix}.q_a_layernorm.weight": (q_rank,),
            f"{prefix}.q_b_proj.weight": (heads * (nope + rope), q_rank),
            f"{prefix}.kv_a_proj_with_mqa.weight": (kv_rank + rope, d), f"{prefix}.kv_a_layernorm.weight": (kv_rank,),
            f"{prefix}.kv_b_proj.weight": (heads * (nope + v), kv_rank), f"{prefix}.o_proj.weight": (d, heads * v)}


def _indexer(prefix: str, d: int = 64, q_rank: int = 48, heads: int = 3, width: int = 20) -> dict[str, tuple[int, ...]]:
    """DeepSeek-V3.2's lightning indexer under the attention module: its Q from Q's latent, its one
    key from the input with a LayerNorm, and a weight per head from the input."""
    return {f"{prefix}.indexer.wq_b.weight": (heads * width, q_rank), f"{prefix}.indexer.wk.weight": (width, d),
            f"{prefix}.indexer.k_norm.weight": (width,), f"{prefix}.indexer.k_norm.bias": (width,),
            f"{prefix}.indexer.weights_proj.weight": (heads, d)}


DSA_CONFIG = {"model_type": "deepseek_v32", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
              "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
              "num_hidden_layers": 2, "index_head_dim": 20, "index_n_heads": 3,
              "layer_types": ["indexed_attention", "indexed_attention"]}


def test_a_sparse_attention_indexer_counts_in_its_block_and_caches_its_key(tmp_path: Path) -> None:
    """DeepSeek-V3.2 (GLM-MoE-DSA, HunYuan-V4 alike): the ``indexer`` under the attention module has a
    K projection of its own from the block's input and no V. It is the block's (``params.indexer``, in
    the total, its heads its Q's width over its key's), not a block of its own, and its key is cached
    per token beside the latent. A layer whose attention holds no indexer (GLM-MoE-DSA's "shared"
    ``indexer_types``: it reuses an earlier layer's selection) caches no index key, although its
    config layer type is ``indexed_attention``."""
    (tmp_path / "config.json").write_text(json.dumps({**DSA_CONFIG, "indexer_types": ["full", "shared"]}))
    shapes = {**_mla("layers.0.self_attn"), **_indexer("layers.0.self_attn"), **_mla("layers.1.self_attn")}
    _write_safetensors(tmp_path / "model.safetensors", shapes)
    report = audit(tmp_path)
    first, second = report.blocks
    assert [b.name for b in report.blocks] == ["layers.0.self_attn", "layers.1.self_attn"]
    module = {n: math.prod(s) for n, s in shapes.items() if n.startswith("layers.0.")}
    indexer = sum(n for name, n in module.items() if ".indexer." in name)
    assert first.params.indexer == indexer == 3 * 20 * 48 + 20 * 64 + 2 * 20 + 3 * 64
    assert first.params.total == sum(module.values())  # every tensor of the module
    assert second.params.indexer == 0 and second.indexer is None
    assert first.indexer is not None
    assert (first.indexer.module, first.indexer.d_k, first.indexer.num_heads) == ("layers.0.self_attn.indexer", 20, 3)
    assert (first.num_heads, first.d_k) == (4, 24)  # the block's own heads, not the indexer's
    latent = (32 + 8) * 4
    assert first.kv_cache_bytes_per_token == latent + 20 * 4 and first.kv_cache_indexer_bytes_per_token == 20 * 4
    assert second.kv_cache_bytes_per_token == latent and second.kv_cache_indexer_bytes_per_token == 0
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == 2 * latent + 20 * 4 and kv.indexer_bytes_per_token == 20 * 4
    data = report.to_dict()
    assert data["blocks"][0]["params"]["indexer"] == indexer and "indexer" not in data["blocks"][1]["params"]
    assert data["blocks"][0]["indexer"]["d_k"] == 20 and "indexer" not in data["blocks"][1]
    from jsonschema import Draft202012Validator

    schema = json.loads((Path(__file__).parents[1] / "docs" / "report.schema.json").read_text())
    assert not list(Draft202012Validator(schema).iter_errors(data))


def test_an_indexers_key_must_read_the_blocks_input(tmp_path: Path) -> None:
    """A sub-module with a K projection and no V whose key does not read the block's input is not
    taken for its indexer: its weights stay out of the block, and without indexer weights the config's
    indexed layers cache ``index_head_dim`` each."""
    (tmp_path / "config.json").write_text(json.dumps(DSA_CONFIG))
    shapes = {**_mla("layers.0.self_attn"), **_indexer("layers.0.self_attn", d=32),
              **_mla("layers.1.self_attn")}
    shapes["layers.0.self_attn.indexer.weights_proj.weight"] = (3, 32)
    _write_safetensors(tmp_path / "model.safetensors", shapes)
    report = audit(tmp_path)
    assert [b.params.indexer for b in report.blocks] == [0, 0]
    assert [b.kv_cache_indexer_bytes_per_token for b in report.blocks] == [20 * 4, 20 * 4]


def test_a_child_holding_q_and_k_is_no_indexer(tmp_path: Path) -> None:
    """Zaya keeps Q and K (and two V halves no rule names) in a child ``qkv_proj`` of a module that
    holds only O: the child is the block, not an indexer of a module with no Q of its own."""
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA_LIKE, "model_type": "llama"}))
    shapes = {"layers.0.self_attn.qkv_proj.q_proj.weight": (96, 64), "layers.0.self_attn.qkv_proj.k_proj.weight": (48, 64),
              "layers.0.self_attn.qkv_proj.v_proj_current.weight": (24, 64), "layers.0.self_attn.o_proj.weight": (64, 96)}
    _write_safetensors(tmp_path / "model.safetensors", shapes)
    (block,) = audit(tmp_path).blocks
    assert block.indexer is None and block.params.indexer == 0
    assert {p.role for p in block.projections} == {"q", "k", "o"}


# ----------------------------------------------------------------------------- output gates


@pytest.mark.parametrize(("extra", "gate"), [
    ({"layers.0.self_attn.gate_proj.weight": (96, 64)}, 96 * 64),  # AFMoE, Muse-Glimmer: one gate per value
    ({"layers.0.self_attn.g_proj.weight": (4, 64)}, 4 * 64),  # Laguna: one gate per head
    ({"layers.0.self_attn.gate_proj.weight": (96, 64), "layers.0.self_attn.gate_proj.bias": (96,)}, 96 * 65),
    ({"layers.0.self_attn.gate_proj.weight": (96, 32)}, 0),  # does not read the block's input: not taken
    ({"layers.0.self_attn.gate_proj.weight": (48, 64)}, 0),  # neither O's input nor the heads: not taken
    ({"layers.0.self_attn.r_proj.weight": (96, 64)}, 0),  # not named as a gate: not taken by its widths alone
])
def test_an_output_gates_own_projection_counts_in_the_total(extra: dict[str, tuple[int, ...]], gate: int,
                                                             tmp_path: Path) -> None:
    """Gated attention multiplies the attention's result by sigmoid(x W) before O. Its gate, packed
    into Q's projection (Qwen3-Next), was counted under Q; as a projection of its own (AFMoE, Beam,
    Dory, Laguna, Muse-Glimmer, HunYuan-V4) it was left out. One rule now: an output gate is in the
    block's total, its own projection as ``params.gate`` when it reads the block's input and writes
    O's input width or one value per head."""
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA_LIKE, "model_type": "llama"}))
    shapes = {**_attention("layers.0.self_attn", 64, 96, 48), **extra}
    _write_safetensors(tmp_path / "model.safetensors", shapes)
    report = audit(tmp_path)
    (block,) = report.blocks
    assert (block.num_heads, block.num_kv_heads, block.d_k) == (4, 2, 24)
    assert block.params.gate == gate
    assert block.params.total == 2 * 96 * 64 + 2 * 48 * 64 + gate
    assert report.model.attention_params == block.params.total
    at_8 = next(w.head_dim_fixed for w in block.what_if if w.num_heads == 8)
    assert at_8 == 2 * (96 * 64 + 48 * 64 + 48 * 64 + 96 * 64) + 2 * gate  # the gate follows the heads too


def test_an_output_gate_beside_o_in_an_output_wrapper(tmp_path: Path) -> None:
    """NeoMME keeps its O and its gate in ``output_projection``: the wrapper's O is the block's O
    (the block's total left O out) and the gate beside it the block's gate."""
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA_LIKE, "model_type": "llama"}))
    shapes = {"layers.0.self_attn.q_proj.weight": (96, 64), "layers.0.self_attn.k_proj.weight": (48, 64),
              "layers.0.self_attn.v_proj.weight": (48, 64),
              "layers.0.self_attn.output_projection.o_proj.weight": (64, 96),
              "layers.0.self_attn.output_projection.gate_proj.weight": (96, 64)}
    _write_safetensors(tmp_path / "model.safetensors", shapes)
    (block,) = audit(tmp_path).blocks
    assert block.name == "layers.0.self_attn"
    assert [p.node for p in block.projections if p.role == "o"] == ["layers.0.self_attn.output_projection.o_proj"]
    assert (block.params.gate, block.params.total) == (96 * 64, sum(math.prod(s) for s in shapes.values()))


def test_a_gguf_files_indexer_is_its_layers(tmp_path: Path) -> None:
    """llama.cpp names DeepSeek-V3.2's indexer ``blk.N.indexer.attn_q_b``, ``indexer.attn_k``,
    ``indexer.k_norm``, ``indexer.proj``: beside ``blk.N.attn_*``, not under it. It is the layer's
    attention's indexer (in its total) and its key is cached beside the latent (in llama.cpp's f16)."""
    pytest.importorskip("gguf")
    from gguf_files import deepseek_gguf

    shapes = {**_mla("model.layers.0.self_attn"), **_indexer("model.layers.0.self_attn"),
              **_mla("model.layers.1.self_attn")}
    (path,) = deepseek_gguf(tmp_path / "ds.gguf", shapes, DSA_CONFIG)
    report = audit(path)
    first, second = report.blocks
    indexer = 3 * 20 * 48 + 20 * 64 + 2 * 20 + 3 * 64
    assert (first.name, first.params.indexer, second.params.indexer) == ("blk.0.attn", indexer, 0)
    assert first.indexer is not None and (first.indexer.d_k, first.indexer.num_heads) == (20, 3)
    assert (first.num_heads, first.d_k) == (4, 24)
    assert first.kv_cache_indexer_bytes_per_token == 20 * 2 and second.kv_cache_indexer_bytes_per_token == 0
    assert not report.misses


# ----------------------------------------------------------------------------- what the module holds besides


def test_what_the_attention_module_holds_besides_its_counted_parts_is_its_extra(tmp_path: Path) -> None:
    """Score terms (WavLM's gated relative bias, ProphetNet's relative_pos_embeddings, Doge's dynamic
    mask), attention sinks, side convolutions (Nyströmformer's, FunASR's):
    parameters the attention module holds that are none of its Q/K/V/O projections, norms, latent,
    indexer or gate. They were in neither the total nor ``extra``; they are ``extra`` now, so that the
    block's total and extra hold every parameter of its module. What a layer holds beside the module
    (its MLP, its norms) is not the block's."""
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA_LIKE, "model_type": "llama"}))
    p = "layers.0.self_attn"
    besides = {f"{p}.sinks": (4,), f"{p}.rel_pos.weight": (32, 64), f"{p}.rel_pos.bias": (32,),
               f"{p}.fsmn.conv.weight": (64, 1, 11)}
    shapes = {**_attention(p, 64, 96, 48), f"{p}.q_norm.weight": (24,), f"{p}.k_norm.weight": (24,), **besides,
              "layers.0.mlp.up_proj.weight": (128, 64), "layers.0.input_layernorm.weight": (64,)}
    _write_safetensors(tmp_path / "model.safetensors", shapes)
    (block,) = audit(tmp_path).blocks
    assert block.params.total == 2 * 96 * 64 + 2 * 48 * 64 + 2 * 24  # projections and the Q/K norms
    assert block.params.extra == sum(math.prod(s) for s in besides.values())
    named = {e.detail.split(" ")[0] for e in block.evidence if e.field == "extra"}
    assert named == set(besides)


def test_a_layer_holding_q_k_v_hands_none_of_its_other_weights_to_the_block(tmp_path: Path) -> None:
    """Q/K/V held by a module not named as attention (a layer): its MLP is not the block's extra."""
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA_LIKE, "model_type": "llama"}))
    shapes = {**_attention("layers.0", 64, 96, 48), "layers.0.up_proj.weight": (128, 64)}
    _write_safetensors(tmp_path / "model.safetensors", shapes)
    (block,) = audit(tmp_path).blocks
    assert block.params.extra == 0


@pytest.mark.parametrize(("conv", "role"), [
    ("layers.0.self_attn.k_sconv.conv1d.weight", "k"),  # Inkling: K's width, a K word
    ("layers.0.self_attn.value_conv.weight", "v"),
])
def test_a_short_convolution_of_k_or_v_counts_in_that_role(conv: str, role: str, tmp_path: Path) -> None:
    """Inkling convolves K and V over the sequence (depthwise, [width, 1, kernel]) before the scores:
    the convolution makes the K (or V) the scores read, so it counts in that role (``projections[].conv``),
    not in ``extra``. One of another width, or under a name of no role or of two, stays ``extra``. (The
    config's layer types say the layer is attention, as Inkling's do: a depthwise convolution under a
    ``conv`` name would otherwise make it a convolution mixer.)"""
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA_LIKE, "model_type": "llama", "num_hidden_layers": 1,
                                                      "layer_types": ["full_attention"]}))
    others = {"layers.0.self_attn.qk_conv.weight": (48, 1, 4),  # two roles' words: not placed
              "layers.0.self_attn.k_wide.conv.weight": (96, 1, 4)}  # not K's width (48)
    shapes = {**_attention("layers.0.self_attn", 64, 96, 48), conv: (48, 1, 4), **others}
    _write_safetensors(tmp_path / "model.safetensors", shapes)
    report = audit(tmp_path)
    (block,) = report.blocks
    (proj,) = [p for p in block.projections if p.role == role]
    assert (proj.conv, proj.conv_params) == (conv, 48 * 4)
    assert getattr(block.params, role) == 48 * 64 + 48 * 4
    assert block.params.extra == sum(math.prod(s) for s in others.values())
    assert block.params.total == 2 * 96 * 64 + 2 * 48 * 64 + 48 * 4
    data = report.to_dict()["blocks"][0]["projections"]
    assert [p.get("conv") for p in data if p["role"] == role] == [conv]
    from jsonschema import Draft202012Validator

    schema = json.loads((Path(__file__).parents[1] / "docs" / "report.schema.json").read_text())
    assert not list(Draft202012Validator(schema).iter_errors(report.to_dict()))


@pytest.mark.parametrize("width", [4, 96])
def test_a_gguf_files_attn_gate_is_its_blocks_output_gate(width: int, tmp_path: Path) -> None:
    """llama.cpp stores Laguna's and Step3.5's per-head ``g_proj`` (and a per-value gate) as
    ``blk.N.attn_gate``: the block's output gate, in its total (``params.gate``)."""
    pytest.importorskip("gguf")
    from gguf_files import T, write_gguf

    tensors = [T("blk.0.attn_q.weight", (96, 64)), T("blk.0.attn_k.weight", (48, 64)), T("blk.0.attn_v.weight", (48, 64)),
               T("blk.0.attn_output.weight", (64, 96)), T("blk.0.attn_gate.weight", (width, 64))]
    meta = {"{arch}.block_count": 1, "{arch}.embedding_length": 64, "{arch}.attention.head_count": 4,
            "{arch}.attention.head_count_kv": 2, "{arch}.attention.key_length": 24, "{arch}.attention.value_length": 24,
            "{arch}.context_length": 128}
    (path,) = write_gguf(tmp_path / "gated.gguf", "llama", meta, tensors)
    (block,) = audit(path).blocks
    assert (block.num_heads, block.num_kv_heads, block.d_k) == (4, 2, 24)
    assert block.params.gate == width * 64
    assert block.params.total == 2 * 96 * 64 + 2 * 48 * 64 + width * 64
