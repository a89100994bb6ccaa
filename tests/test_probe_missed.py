"""Attention modules the architecture probe (scripts/probe_architectures.py) found with no block and
no stated reason, each rule from a config dict and safetensors headers alone (no torch):

- projections whose role is a word of their name, not the whole name (CPM-Ant's ``project_q`` ...
  ``attention_out``, NeMo's ``query_net`` ... ``out_projection``);
- a module named as attention holding an output projection and one other, wider one: its packed
  Q/K/V (Bark's ``att_proj``), split by the head counts; one Q width wider than Q, K and V at those
  counts: a gate packed beside them (HRM's ``gqkv_proj``), counted with Q.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from remote_models import write_safetensors

from mhainspect.ir.weights import WeightMeta
from mhainspect.matchers.assembly import split_packed
from mhainspect.matchers.grouping import group_attention
from mhainspect.pipeline import audit


def _folder(tmp_path: Path, cfg: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> Any:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    write_safetensors(tmp_path / "model.safetensors", {n: ("F32", s) for n, s in shapes.items()})
    return audit(tmp_path)


def _metas(shapes: dict[str, tuple[int, ...]]) -> dict[str, WeightMeta]:
    return {n: WeightMeta(n, s, "F32", n) for n, s in shapes.items()}


# ----------------------------------------------------------------------------- roles by the words of a name


@pytest.mark.parametrize("names", [
    ("project_q", "project_k", "project_v", "attention_out"),  # CPM-Ant
    ("query_net", "key_net", "value_net", "out_projection"),  # NeMo's transformer decoder
])
def test_roles_from_the_words_of_the_projections_names(names: tuple[str, ...], tmp_path: Path) -> None:
    q, k, v, o = (f"layers.0.sub_layer.{n}" for n in names)
    shapes = {f"{q}.weight": (96, 64), f"{k}.weight": (48, 64), f"{v}.weight": (48, 64), f"{o}.weight": (64, 96),
              f"{q}.bias": (96,), f"{o}.bias": (64,)}
    report = _folder(tmp_path, {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24,
                                "hidden_size": 64}, shapes)
    (block,) = report.blocks
    assert block.name == "layers.0.sub_layer"
    assert {p.role: p.node for p in block.projections} == {"q": q, "k": k, "v": v, "o": o}
    assert (block.num_heads, block.num_kv_heads, block.d_k) == (4, 2, 24)
    assert block.params.total == sum(math.prod(s) for s in shapes.values())


@pytest.mark.parametrize("shapes", [
    # a role word beside a word that names no projection: a norm, not Q or K
    {"attn.q_norm.weight": (4, 16), "attn.k_norm.weight": (4, 16), "attn.v_out.weight": (64, 64)},
    # no Q, K and V among them: one ``output_layer`` elsewhere is no output projection
    {"head.output_layer.weight": (10, 64), "head.key_layer.weight": (64, 64)},
    # two projections for one role: which is Q is not told
    {**{f"attn.{n}.weight": (64, 64) for n in ("q_proj_a", "q_linear_b", "k_net", "v_net")}},
])
def test_word_roles_need_q_k_and_v_each_once(shapes: dict[str, tuple[int, ...]]) -> None:
    assert group_attention(_metas(shapes)) == ()


# ----------------------------------------------------------------------------- a packed Q/K/V by its shape


def test_a_packed_qkv_beside_the_output_projection_of_an_attention_module(tmp_path: Path) -> None:
    """Bark: ``attn.att_proj`` [3·64, 64] and ``attn.out_proj`` [64, 64]; the config's 4 heads split it
    in thirds (no K/V heads given: as many as the query heads)."""
    shapes = {"layers.0.attn.att_proj.weight": (192, 64), "layers.0.attn.att_proj.bias": (192,),
              "layers.0.attn.out_proj.weight": (64, 64), "layers.0.attn.out_proj.bias": (64,),
              "layers.0.mlp.in_proj.weight": (256, 64), "layers.0.mlp.out_proj.weight": (64, 256)}
    report = _folder(tmp_path, {"num_attention_heads": 4, "hidden_size": 64}, shapes)
    (block,) = report.blocks
    assert (block.name, block.num_heads, block.num_kv_heads, block.d_k, block.d_v) == ("layers.0.attn", 4, 4, 16, 16)
    assert block.params.total == 192 * 64 + 192 + 64 * 64 + 64
    assert not report.misses


def test_a_packed_qkv_beside_an_output_projection_named_by_its_words(tmp_path: Path) -> None:
    """Molmo 2's text attention: ``att_proj`` [96 + 2·48, 64] and ``attn_out`` [64, 96] (no role name: its
    words say output), 4 heads over 2 K/V heads of 24, Q/K norms one head wide."""
    shapes = {"layers.0.self_attn.att_proj.weight": (192, 64), "layers.0.self_attn.attn_out.weight": (64, 96),
              "layers.0.self_attn.q_norm.weight": (24,), "layers.0.self_attn.k_norm.weight": (24,)}
    report = _folder(tmp_path, {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24,
                                "hidden_size": 64}, shapes)
    (block,) = report.blocks
    assert (block.num_heads, block.num_kv_heads, block.d_k) == (4, 2, 24)
    assert {p.role: p.node for p in block.projections} == {
        "q": "layers.0.self_attn.att_proj", "k": "layers.0.self_attn.att_proj", "v": "layers.0.self_attn.att_proj",
        "o": "layers.0.self_attn.attn_out"}
    assert block.params.total == sum(math.prod(s) for s in shapes.values())


def test_a_projection_wrapped_as_a_convolution_layer(tmp_path: Path) -> None:
    """MobileViTv2's ConvLayer: ``qkv_proj.convolution`` and ``out_proj.convolution``, 1x1 convolutions:
    the wrapper's name is the role. Its packed width (1 + 2·128: a one-channel query) splits by no
    head count: the block is listed with its parameters, its heads unknown with the reason."""
    shapes = {"layer.0.attention.qkv_proj.convolution.weight": (257, 128, 1, 1),
              "layer.0.attention.qkv_proj.convolution.bias": (257,),
              "layer.0.attention.out_proj.convolution.weight": (128, 128, 1, 1),
              "layer.0.attention.out_proj.convolution.bias": (128,)}
    report = _folder(tmp_path, {"model_type": "mobilevitv2", "hidden_size": 128}, shapes)
    (block,) = report.blocks
    assert block.name == "layer.0.attention" and block.num_heads is None
    assert block.unknown_reason is not None and "nothing gives its Q/K/V split" in block.unknown_reason
    assert block.params.total == sum(math.prod(s) for s in shapes.values())


@pytest.mark.parametrize("shapes", [
    # not named as attention: an MLP's in_proj / out_proj
    {"layers.0.mlp.in_proj.weight": (192, 64), "layers.0.mlp.out_proj.weight": (64, 64)},
    # narrower than what O reads: no room for K and V
    {"layers.0.attn.gate.weight": (64, 64), "layers.0.attn.out_proj.weight": (64, 64)},
    # two candidates: which one is Q/K/V is not told
    {"layers.0.attn.a.weight": (192, 64), "layers.0.attn.b.weight": (192, 64), "layers.0.attn.out_proj.weight": (64, 64)},
])
def test_no_packed_qkv_by_shape_where_the_structure_does_not_say_so(shapes: dict[str, tuple[int, ...]]) -> None:
    assert group_attention(_metas(shapes)) == ()


def test_a_gate_packed_with_q_k_and_v(tmp_path: Path) -> None:
    """HRM: ``attn.gqkv_proj`` [4·96, 64] beside ``attn.o_proj`` [64, 96], 4 heads × 24. Q, K and V
    at those counts make 288; the other 96 rows are a gate as wide as Q, counted with Q (as Qwen3-Next's
    gate packed into ``q_proj``): the heads stay the config's, the total is the whole weight and O."""
    shapes = {"L_module.layers.0.attn.gqkv_proj.weight": (384, 64), "L_module.layers.0.attn.o_proj.weight": (64, 96)}
    report = _folder(tmp_path, {"num_attention_heads": 4, "head_dim": 24, "hidden_size": 64}, shapes)
    (block,) = report.blocks
    assert (block.num_heads, block.num_kv_heads, block.d_k, block.d_v) == (4, 4, 24, 24)
    params = {p.role: p.params for p in block.projections}
    assert params == {"q": 192 * 64, "k": 96 * 64, "v": 96 * 64, "o": 64 * 96}
    assert block.params.total == 384 * 64 + 64 * 96
    assert any("a gate as wide as Q" in e.detail for e in block.evidence)


@pytest.mark.parametrize(("args", "parts"), [
    ((384, 4, None, 24, None, 96), (192, 96, 96)),  # the gate: nothing else fits
    ((288, 4, None, 24, None, 96), (96, 96, 96)),  # no gate: Q, K and V
    ((384, 4, 2, 24, None, 96), None),  # 2 K/V heads offered: 192 + 96 ≠ 384, no reading
    ((384, 4, None, 24, None, 48), None),  # O reads 48, not the 4·24 the gate reading needs
])
def test_the_gated_split_is_the_last_reading(args: tuple[Any, ...], parts: tuple[int, ...] | None) -> None:
    split = split_packed(*args)
    assert (split.parts if split is not None else None) == parts


# ----------------------------------------------------------------------------- no softmax attention, said so


def _deformable(prefix: str, d: int, points: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.sampling_offsets.weight": (2 * points, d), f"{prefix}.sampling_offsets.bias": (2 * points,),
            f"{prefix}.attention_weights.weight": (points, d), f"{prefix}.attention_weights.bias": (points,),
            f"{prefix}.value_proj.weight": (d, d), f"{prefix}.output_proj.weight": (d, d)}


@pytest.mark.parametrize("points", [48, 64])  # 64: as wide as the value and output projections (RF-DETR)
def test_deformable_attention_is_a_near_miss_that_says_why(points: int, tmp_path: Path) -> None:
    """RT-DETR's, Deimv2's, RF-DETR's multiscale deformable attention: ``sampling_offsets`` twice as wide
    as ``attention_weights`` (x, y and a weight per sampled point) from the same input. No block: a near
    miss whose reason says what the weights are, and that nothing is cached per token."""
    shapes = {**_deformable("decoder.layers.0.encoder_attn", 64, points),
              **{f"decoder.layers.0.self_attn.{r}_proj.weight": (64, 64) for r in "qkvo"}}
    # an encoder-decoder config: its decoder's modules cache, but the sampling attention caches nothing
    report = _folder(tmp_path, {"model_type": "rt_detr", "is_encoder_decoder": True, "decoder_attention_heads": 4,
                                "d_model": 64}, shapes)
    assert [b.name for b in report.blocks] == ["decoder.layers.0.self_attn"]
    (miss,) = report.misses
    assert miss.anchor == "decoder.layers.0.encoder_attn" and not miss.caches
    kv = report.model.kv_cache
    assert kv is not None and kv.status.value != "unknown" and not kv.lower_bound
    assert miss.reason.startswith(f"sampling (deformable) attention: sampling_offsets ({2 * points} wide) = 2 × "
                                  f"attention_weights ({points})")


def test_an_attention_module_without_a_sampling_pair_keeps_the_general_reason(tmp_path: Path) -> None:
    shapes = {"layers.0.attn.kv_a.weight": (32, 64), "layers.0.attn.q.weight": (64, 64),
              "layers.0.attn.o.weight": (64, 64)}
    report = _folder(tmp_path, {"num_attention_heads": 4, "hidden_size": 64}, shapes)
    (miss,) = report.misses
    assert "no separate K and V projections" in miss.reason


def test_rwkv_time_mixing_is_a_linear_attention_mixer(tmp_path: Path) -> None:
    """RWKV's ``attention``: key/value/receptance/output projections and the per-channel decay and
    bonus of its recurrence (``time_decay``, ``time_first``): a mixer with a fixed state, not a
    near miss that caches K/V, also where no config says the model type (an RWKV config's layer plan
    says so first: ``layer_types``)."""
    shapes = {k: v for i in range(2) for k, v in {
        f"blocks.{i}.attention.{p}.weight": (64, 64) for p in ("key", "value", "receptance", "output")}.items()}
    shapes.update({f"blocks.{i}.attention.{p}": (64,) for i in range(2) for p in ("time_decay", "time_first")})
    (tmp_path / "named").mkdir()
    (tmp_path / "typed").mkdir()
    report = _folder(tmp_path / "named", {"hidden_size": 64, "num_hidden_layers": 2}, shapes)
    assert not report.blocks and not report.misses
    assert [(m.kind.value, m.layers) for m in report.model.mixers] == [("linear_attention", (0, 1))]
    assert "time_decay" in report.model.mixers[0].source
    # With its model_type, the config's plan says so too, and sizes the state (RwkvModel's: 2 token-shift
    # vectors + 3 float32 WKV vectors of hidden_size: (128 + 192) × 4 bytes a layer).
    report = _folder(tmp_path / "typed", {"model_type": "rwkv", "hidden_size": 64, "num_hidden_layers": 2}, shapes)
    assert not report.blocks and not report.misses
    assert [(m.kind.value, m.layers, m.state_bytes_per_layer) for m in report.model.mixers] == [
        ("linear_attention", (0, 1), 1280)]


def test_attention_experts_are_a_near_miss_that_caches(tmp_path: Path) -> None:
    """JetMoE's mixture of attention: Q and O projections stacked per expert under
    ``self_attention.experts``, one K/V projection shared. No rule reads its heads: a near miss that
    names the stacks, and (a decoder) one that caches: the model's KV figure is unknown, not none."""
    shapes = {"layers.0.self_attention.experts.input_linear.weight": (8, 256, 64),
              "layers.0.self_attention.experts.output_linear.weight": (8, 64, 256),
              "layers.0.self_attention.experts.router.layer.weight": (8, 64),
              "layers.0.self_attention.kv_proj.weight": (512, 64),
              "layers.0.mlp.input_linear.weight": (8, 256, 64), "layers.0.mlp.output_linear.weight": (8, 64, 128)}
    report = _folder(tmp_path, {"model_type": "jetmoe", "architectures": ["JetMoeForCausalLM"],
                                "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64}, shapes)
    assert not report.blocks
    (miss,) = report.misses
    assert miss.anchor == "layers.0.self_attention" and miss.caches
    assert "experts.input_linear [8, 256, 64], experts.output_linear [8, 64, 256] are stacked per expert" in miss.reason
    kv = report.model.kv_cache
    assert kv is not None and kv.status.value == "unknown"


def test_k_and_v_from_another_width_than_q_are_cross_attention(tmp_path: Path) -> None:
    """NeMo's transformer decoder (Cohere-ASR, Canary): ``first_sub_layer`` and ``second_sub_layer``,
    names that say no kind. The second's K and V read the encoder's 96-wide output, Q the decoder's
    64: cross-attention, cached per encoder token; the first reads one width: self."""
    layer = "transf_decoder._decoder.layers.0"
    shapes = {f"{layer}.first_sub_layer.{n}.weight": s
              for n, s in (("query_net", (64, 64)), ("key_net", (64, 64)), ("value_net", (64, 64)),
                           ("out_projection", (64, 64)))}
    shapes.update({f"{layer}.second_sub_layer.{n}.weight": s
                   for n, s in (("query_net", (64, 64)), ("key_net", (64, 96)), ("value_net", (64, 96)),
                                ("out_projection", (64, 64)))})
    report = _folder(tmp_path, {"num_attention_heads": 4, "hidden_size": 64, "is_encoder_decoder": True}, shapes)
    kinds = {b.name.rpartition(".")[2]: b.kind.value for b in report.blocks}
    assert kinds == {"first_sub_layer": "self", "second_sub_layer": "cross"}
    (cross,) = [b for b in report.blocks if b.kind.value == "cross"]
    assert any(e.field == "kind" and "from width 96, Q from width 64" in e.detail for e in cross.evidence)


def test_latent_attention_under_deepseeks_own_names(tmp_path: Path) -> None:
    """Mistral-Large-4's checkpoint keeps DeepSeek's inference-code names for its latent attention
    (``wq``, ``wkv_a_with_mqa``, ``kv_a_norm``, ``wkv_b``) beside an indexer whose Q up-projection is
    ``wq_b``: one latent block with its indexer whole, as the transformers names make it."""
    a = "layers.0.attention"
    shapes = {f"{a}.wq.weight": (512, 64), f"{a}.wkv_a_with_mqa.weight": (576, 64), f"{a}.kv_a_norm.weight": (512,),
              f"{a}.wkv_b.weight": (768, 512), f"{a}.o_proj.weight": (64, 512),
              f"{a}.indexer.wq_b.weight": (4096, 64), f"{a}.indexer.wk.weight": (128, 64),
              f"{a}.indexer.k_norm.weight": (128,), f"{a}.indexer.weights_proj.weight": (32, 64)}
    cfg = {"model_type": "deepseek_v32", "num_attention_heads": 4, "num_key_value_heads": 4, "hidden_size": 64,
           "kv_lora_rank": 512, "qk_nope_head_dim": 64, "qk_rope_head_dim": 64, "v_head_dim": 128,
           "index_head_dim": 128, "index_n_heads": 32}
    report = _folder(tmp_path, cfg, shapes)
    (block,) = report.blocks
    assert (block.name, block.num_heads, block.num_kv_heads, block.d_k, block.d_v) == (a, 4, 4, 128, 128)
    assert block.params.indexer == 4096 * 64 + 128 * 64 + 128 + 32 * 64
    assert block.params.total == sum(math.prod(s) for s in shapes.values())
