"""Which config (or which part of a nested config) describes which attention block of a multimodal or
multi-stack model, each rule from a config dict and safetensors headers alone (no torch, no
transformers). The architecture probe (scripts/probe_architectures.py, docs/probe.md) found them:

- V-JEPA 2's predictor (``pred_*``), Idefics2's resampler (``perceiver_config.resampler_*``), XCLIP's
  message transformer (``vision_config.mit_*``) and prompts generator (``prompt_*``), RF-DETR's decoder
  (``decoder_self_*``): keys prefixed with words of the block's path;
- SAM 3's ``detr_decoder.layers.N.vision_cross_attn``: the sub-model named first in the path;
- Video-LLaVA's ``image_tower``, Aria's projector, Phi-4's image head: no config named by the path,
  the language model's counts not the block's; the tree's config whose widths describe it;
- SAM 2's Hiera stages: tests/test_probe_findings.py (per-stage lists).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from remote_models import write_safetensors

from mhainspect.frontends.checkpoint.hf_config import offers_from_config, sub_config
from mhainspect.pipeline import audit

LLAMA_LIKE = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24, "hidden_size": 64}


def _attention(prefix: str, d: int, q: int, kv: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.q_proj.weight": (q, d), f"{prefix}.k_proj.weight": (kv, d),
            f"{prefix}.v_proj.weight": (kv, d), f"{prefix}.o_proj.weight": (d, q)}


def _stage_folder(tmp_path: Path, cfg: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    write_safetensors(tmp_path / "model.safetensors", {name: ("F32", shape) for name, shape in shapes.items()})
    return {b.name: b for b in audit(tmp_path).blocks}


@pytest.mark.parametrize(("block", "expected", "said"), [
    # V-JEPA 2: the predictor's keys carry an abbreviation of its module's name
    ("predictor.layer.0.attention", (12, None, None), "pred_num_attention_heads=12"),
    ("encoder.layer.0.attention", (4, None, None), "num_attention_heads=4"),
    # Idefics2: perceiver_config names the resampler, whose keys say resampler_
    ("connector.perceiver_resampler.layers.0.self_attn", (16, 2, 96), "perceiver_config.resampler_n_heads=16"),
    # XCLIP: the message transformer's keys sit in the vision config, the prompts generator's at the top
    ("mit.encoder.layers.0.self_attn", (8, None, None), "vision_config.mit_num_attention_heads=8"),
    ("prompts_generator.decoder.0.cross_attn", (8, None, None), "prompt_num_attention_heads=8"),
    # RF-DETR: the decoder's self-attention and cross-attention are sized apart
    ("transformer.decoder.layers.0.self_attn", (8, None, None), "decoder_self_attention_heads=8"),
    ("transformer.decoder.layers.0.cross_attn", (16, None, None), "decoder_cross_attention_heads=16"),
])
def test_keys_prefixed_with_words_of_the_blocks_path(block: str, expected: tuple[int | None, ...], said: str) -> None:
    cfg = {"model_type": "composite", "hidden_size": 64, "num_attention_heads": 4,
           "pred_hidden_size": 384, "pred_num_attention_heads": 12,
           "prompt_num_attention_heads": 8,
           "decoder_self_attention_heads": 8, "decoder_cross_attention_heads": 16,
           "perceiver_config": {"hidden_size": 64, "resampler_n_heads": 16, "resampler_head_dim": 96,
                                "num_key_value_heads": 2},
           "vision_config": {"hidden_size": 64, "num_attention_heads": 4, "mit_hidden_size": 512,
                             "mit_num_attention_heads": 8}}
    offer = offers_from_config(cfg, block)
    assert (offer.num_heads, offer.num_kv_heads, offer.head_dim) == expected
    assert said in offer.detail
    if block.startswith("predictor"):
        assert offer.widths == (64, 384)  # the predictor's own width is one the config describes


def test_a_prefix_the_path_names_in_part_is_a_reading_the_widths_must_choose(tmp_path: Path) -> None:
    """EdgeTAM's ``perceiver_resampler_*`` keys and its ``spatial_perceiver``: the path names one word
    of the prefix. That is no naming (the config read is the top level, which says no count), but a
    reading the widths may choose: taken where its width and heads × head size are the block's, not
    for a block of another width. A word of every attention's path (``memory_attention_*`` for a
    ``self_attention``) names nothing."""
    cfg = {"model_type": "edgetam_like", "perceiver_resampler_num_attention_heads": 1,
           "perceiver_resampler_attention_head_dim": 64, "perceiver_resampler_hidden_size": 64,
           "memory_attention_num_attention_heads": 2, "memory_attention_hidden_size": 128}
    offer = offers_from_config(cfg, "spatial_perceiver.layers.0.self_attention")
    assert offer.num_heads is None  # the config read says none ...
    assert [(a.num_heads, a.head_dim, a.widths) for a in offer.alternatives] == [(1, 64, (64,))]  # ... this may
    assert offers_from_config(cfg, "memory_attention.layers.0.self_attn").num_heads == 2  # named in full
    blocks = _stage_folder(tmp_path, cfg, {**_attention("spatial_perceiver.layers.0.self_attention", 64, 64, 64),
                                           **_attention("spatial_perceiver.layers.1.self_attention", 32, 32, 32)})
    fits, other = blocks["spatial_perceiver.layers.0.self_attention"], blocks["spatial_perceiver.layers.1.self_attention"]
    assert (fits.num_heads, fits.num_kv_heads, fits.d_k) == (1, 1, 64)
    assert any(e.field == "num_heads" and "perceiver_resampler_num_attention_heads=1" in e.detail for e in fits.evidence)
    assert other.num_heads is None  # 32 wide: not the perceiver the keys describe


def test_the_sub_model_named_first_in_the_path_describes_its_blocks() -> None:
    """SAM 3's DETR decoder holds a ``vision_cross_attn``: the block is the decoder's (outermost
    component), not the vision config's (whose heads sit in its backbone config)."""
    cfg = {"detr_decoder_config": {"hidden_size": 64, "num_attention_heads": 8},
           "vision_config": {"backbone_config": {"hidden_size": 32, "num_attention_heads": 2}},
           "text_config": {"hidden_size": 64, "num_attention_heads": 4}}
    assert sub_config(cfg, "detr_decoder.layers.0.vision_cross_attn")[0] == "detr_decoder_config."
    assert sub_config(cfg, "detr_decoder.layers.0.text_cross_attn")[0] == "detr_decoder_config."
    assert sub_config(cfg, "vision_encoder.backbone.layers.0.attention")[0] == "vision_config.backbone_config."
    assert sub_config(cfg, "text_encoder.text_model.encoder.layers.0.self_attn")[0] == "text_config."


VIDEO_LLAVA_LIKE = {"model_type": "video_llava_like",
                    "text_config": {"model_type": "llama", **LLAMA_LIKE},
                    "vision_config": {"model_type": "clip_vision_model", "hidden_size": 64, "num_attention_heads": 4}}


def test_a_block_no_path_names_reads_the_config_whose_widths_describe_it(tmp_path: Path) -> None:
    """Video-LLaVA's ``image_tower`` (Aria's projector, Phi-4's image head alike): no config is named
    by its path, and the language model's (the default) has 2 K/V heads × 24 for a 64-wide CLIP block
    (4 × 24 is not its Q width 64). The vision config's widths describe it: its numbers are taken,
    with what was passed over."""
    shapes = {**_attention("image_tower.encoder.layers.0.self_attn", 64, 64, 64),
              **_attention("language_model.model.layers.0.self_attn", 64, 96, 48)}
    blocks = _stage_folder(tmp_path, VIDEO_LLAVA_LIKE, shapes)
    tower, text = blocks["image_tower.encoder.layers.0.self_attn"], blocks["language_model.model.layers.0.self_attn"]
    assert (tower.num_heads, tower.num_kv_heads, tower.d_k, tower.conflicts) == (4, 4, 16, ())
    assert any(e.field == "num_heads" and "vision_config.num_attention_heads=4" in e.detail
               and "not config.json text_config.num_attention_heads=4" in e.detail for e in tower.evidence)
    assert (text.num_heads, text.num_kv_heads, text.d_k) == (4, 2, 24)


def test_configs_that_describe_a_block_equally_but_differ_give_it_none(tmp_path: Path) -> None:
    """Two configs of the tree as wide as the block with different counts: nothing tells which is
    the block's, so neither is taken; the one read first stays, the shapes overruling it as before."""
    cfg = {**VIDEO_LLAVA_LIKE, "audio_config": {"hidden_size": 64, "num_attention_heads": 8}}
    blocks = _stage_folder(tmp_path, cfg, _attention("image_tower.encoder.layers.0.self_attn", 64, 64, 64))
    (tower,) = blocks.values()
    assert not any("its widths describe this block" in e.detail for e in tower.evidence)
    assert tower.conflicts  # the language model's 4 × 24 against Q's 64, as before


def test_a_config_without_a_count_is_not_replaced_by_one_of_the_same_width_by_chance(tmp_path: Path) -> None:
    """The top level says no heads for the block; its mask decoder's config is as wide by chance. A
    config that says nothing is not replaced by another config of the tree: the heads stay unknown."""
    cfg = {"model_type": "edgetam_like", "mask_decoder_config": {"hidden_size": 64, "num_attention_heads": 4}}
    (block,) = _stage_folder(tmp_path, cfg, _attention("spatial_perceiver.layers.0.self_attention", 64, 64, 64)).values()
    assert block.num_heads is None


def test_hostile_per_stage_lists_and_config_trees_stay_bounded() -> None:
    """A per-stage list past MAX_CONFIG_STAGES is not read as one (a 16 MiB config could hold millions
    of entries: one reading each, per block), and a config tree of many nested configs is compared
    up to MAX_CONFIG_TREE of them."""
    from mhainspect.ir.limits import MAX_CONFIG_STAGES, MAX_CONFIG_TREE

    long = {"hidden_size": 64, "num_attention_heads_per_stage": [2] * (MAX_CONFIG_STAGES + 1),
            "embed_dim_per_stage": [64] * (MAX_CONFIG_STAGES + 1)}
    assert offers_from_config(long, "blocks.0.attn").alternatives == ()
    wide = {**LLAMA_LIKE, **{f"c{i}": {"hidden_size": 64, "num_attention_heads": 8} for i in range(10 * MAX_CONFIG_TREE)}}
    assert len(offers_from_config(wide, "image_tower.layers.0.self_attn").alternatives) <= MAX_CONFIG_TREE
