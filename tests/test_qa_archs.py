"""Regressions from a sweep of transformers architectures no other test names (each built from its
config with small random weights; truth read from the torch module):

- A TorchScript export stores the values its trace computed as Constant nodes: XGLM's and
  M2M100's sinusoidal position tables, GPT-J's and CodeGen's rotary sin/cos tables, MPT's ALiBi
  table, the ones and zeros an OLMo LayerNorm without weight or bias is given. Torch's exporters
  write every parameter as an initializer, so none of these is a parameter: the model's count
  equals torch's, and the tables are overhead bytes.
- XGLM's config names its head count ``attention_heads``: a Hugging Face folder read the heads as
  unknown.
- DeepSeek-V3's latent attention (MLA: Q from a low-rank latent, K and V from one shared latent)
  was a confident wrong block in a graph (d_model = the Q latent's width, kind cross, the
  down-projections uncounted), nothing at all from a module (its trace returned a KV-cache object)
  and nothing, not even a near miss, from a folder. It is now one latent block from every source
  (tests/test_latent_attention.py): d_model the input width, K and V the shares of kv_b_proj, the
  down-projections and norms its extra.
- Swin's relative-position bias table (a score bias held by the attention module, as T5's
  ``relative_attention_bias``) was in no block: it is the block's ``extra``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from mhainspect.frontends.checkpoint.hf_config import offers_from_config
from mhainspect.ir.weights import WeightMeta
from mhainspect.matchers.grouping import group_attention

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

import mhainspect  # noqa: E402
from tests.random_weights import add_noise, export_last_hidden_state  # noqa: E402


def _model(cfg_cls: str, model_cls: str, **cfg: Any) -> Any:
    config = getattr(transformers, cfg_cls)(vocab_size=64, **cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return add_noise(getattr(transformers, model_cls)(config))


def _ts_export(model: Any, path: Path) -> Path:
    ids = torch.randint(2, 60, (2, 8), generator=torch.Generator().manual_seed(0))
    return export_last_hidden_state(model, ids, path, dynamic_batch=True)


# Each: a model whose trace bakes a float table (or LayerNorm fill) into Constant nodes, and the
# elements of those constants (so the test shows they were there to be miscounted).
CONSTANT_TABLES = {
    # sinusoidal positions: (max_position_embeddings + 2 offset) x d_model
    "xglm": (("XGLMConfig", "XGLMModel"), dict(d_model=32, attention_heads=4, num_layers=1, ffn_dim=64,
                                               max_position_embeddings=30), 32 * 32),
    # rotary sin/cos table: n_positions x rotary_dim
    "gptj": (("GPTJConfig", "GPTJModel"), dict(n_embd=32, n_head=4, n_layer=1, rotary_dim=4, n_positions=40), 40 * 4),
    # LayerNorm without weight and bias: ones and zeros per norm (2 per layer + final)
    "olmo": (("OlmoConfig", "OlmoModel"), dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=1,
                                               intermediate_size=64), 3 * 2 * 32),
}


@pytest.mark.parametrize("arch", sorted(CONSTANT_TABLES))
@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_constant_nodes_of_a_torch_export_are_not_parameters(arch: str, tmp_path: Path) -> None:
    import onnx

    (cfg_cls, model_cls), cfg, table = CONSTANT_TABLES[arch]
    model = _model(cfg_cls, model_cls, **cfg)
    path = _ts_export(model, tmp_path / f"{arch}.onnx")
    proto = onnx.load(str(path))
    assert proto.producer_name == "pytorch"
    baked = sum(int(torch.tensor(list(a.t.dims)).prod()) for n in proto.graph.node if n.op_type == "Constant"
                for a in n.attribute if a.name == "value" and a.t.data_type == onnx.TensorProto.FLOAT and a.t.dims)
    assert baked >= table  # the trace did bake them in: there was something to miscount
    d = mhainspect.inspect(str(path)).to_dict()
    assert d["model"]["total_params"] == sum(p.numel() for p in model.parameters())
    assert d["model"]["weight_bytes_overhead"] >= 4 * table  # stored, but not parameters
    (b,) = d["blocks"]
    assert (b["num_heads"], b["d_k"], b["d_model"]) == (4, 8, 32)


def test_constant_nodes_of_other_producers_still_count(tmp_path: Path) -> None:
    """The rule is the torch exporters' own: a converter that stores weights in Constant nodes
    (producer not 'pytorch') keeps them as parameters."""
    import onnx

    model = _model("OlmoConfig", "OlmoModel", hidden_size=32, num_attention_heads=4, num_hidden_layers=1,
                   intermediate_size=64)
    path = _ts_export(model, tmp_path / "olmo.onnx")
    proto = onnx.load(str(path))
    proto.producer_name = "some-converter"
    onnx.save(proto, str(tmp_path / "other.onnx"))
    torch_total = mhainspect.inspect(str(path)).to_dict()["model"]["total_params"]
    other_total = mhainspect.inspect(str(tmp_path / "other.onnx")).to_dict()["model"]["total_params"]
    assert other_total == torch_total + 3 * 2 * 32


def test_xglm_folder_reads_attention_heads(tmp_path: Path) -> None:
    model = _model("XGLMConfig", "XGLMModel", d_model=32, attention_heads=4, num_layers=2, ffn_dim=64,
                   max_position_embeddings=30)
    model.save_pretrained(tmp_path)
    d = mhainspect.inspect(str(tmp_path)).to_dict()
    assert len(d["blocks"]) == 2
    for b, layer in zip(d["blocks"], model.layers):
        attn = layer.self_attn
        assert (b["num_heads"], b["num_kv_heads"], b["d_k"], b["d_v"], b["d_model"]) == (
            attn.num_heads, attn.num_heads, attn.head_dim, attn.head_dim, model.config.d_model)
        assert b["params"]["total"] == sum(p.numel() for p in attn.parameters())
        assert b["unknown_reason"] is None


@pytest.mark.parametrize(("cfg", "block", "want"), [
    ({"attention_heads": 12}, "layers.0.self_attn", (12, None)),  # XGLM, Kosmos-2 text
    ({"num_encoder_attention_heads": 8, "num_decoder_attention_heads": 4}, "encoder.layers.0.self_attn", (8, None)),
    ({"num_encoder_attention_heads": 8, "num_decoder_attention_heads": 4}, "decoder.layers.0.encoder_attn", (4, None)),
    ({"num_attention_heads": 64, "num_attention_groups": 8}, "model.layers.3.self_attn", (64, 8)),  # Step3
])
def test_config_head_aliases(cfg: dict[str, int], block: str, want: tuple[int, int | None]) -> None:
    offers = offers_from_config(cfg, block)
    assert (offers.num_heads, offers.num_kv_heads) == want


@pytest.mark.parametrize("front", ["module", "folder"])
def test_swin_relative_position_table_is_the_blocks_extra(front: str, tmp_path: Path) -> None:
    config = transformers.SwinConfig(image_size=32, patch_size=4, num_channels=3, embed_dim=32, depths=[2],
                                     num_heads=[4], window_size=4)
    torch.manual_seed(0)
    model = transformers.SwinModel(config).eval()
    if front == "folder":
        model.save_pretrained(tmp_path)
    d = mhainspect.inspect(model if front == "module" else str(tmp_path)).to_dict()
    assert d["model"]["total_params"] == sum(p.numel() for p in model.parameters())
    blocks = model.encoder.layers[0].blocks
    assert len(d["blocks"]) == len(blocks) == 2
    for b, layer in zip(d["blocks"], blocks):
        attn = layer.attention
        table = attn.relative_position_bias.relative_position_bias_table
        assert b["params"]["extra"] == table.numel() == 49 * 4
        assert b["params"]["total"] + b["params"]["extra"] == sum(p.numel() for p in attn.parameters())
        assert (b["num_heads"], b["d_k"], b["d_model"]) == (4, 8, 32)


def test_timm_style_table_on_the_attention_module_is_its_extra() -> None:
    """timm's Swin/BEiT keep the table on the attention module itself, beside ``qkv`` and ``proj``."""
    def meta(name: str, *shape: int) -> WeightMeta:
        return WeightMeta(name, shape, "float32", name)

    weights = {m.name: m for m in (meta("blocks.0.attn.qkv.weight", 96, 32), meta("blocks.0.attn.qkv.bias", 96),
                                   meta("blocks.0.attn.proj.weight", 32, 32), meta("blocks.0.attn.proj.bias", 32),
                                   meta("blocks.0.attn.relative_position_bias_table", 49, 4))}
    (group,) = group_attention(weights)
    assert group.owner == "blocks.0.attn"
    assert [e.name for e in group.extras] == ["blocks.0.attn.relative_position_bias_table"]


def _deepseek() -> Any:
    # One dense layer (first_k_dense_replace): the MoE router does not export to ONNX.
    return _model("DeepseekV3Config", "DeepseekV3Model", hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                  q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12,
                  n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, first_k_dense_replace=1,
                  n_group=1, topk_group=1, num_hidden_layers=1, intermediate_size=128)


@pytest.mark.parametrize("front", ["onnx", "module", "folder"])
@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_latent_attention_is_one_latent_block(front: str, tmp_path: Path) -> None:
    model = _deepseek()
    cfg = model.config
    if front == "folder":
        model.save_pretrained(tmp_path)
        source: Any = str(tmp_path)
    else:
        source = model if front == "module" else str(_ts_export(model, tmp_path / "mla.onnx"))
    d = mhainspect.inspect(source).to_dict()
    assert len(d["blocks"]) == cfg.num_hidden_layers and not d["misses"]
    for b, layer in zip(d["blocks"], model.layers):
        a = layer.self_attn
        assert b["kind"] == "self"  # Q's and K/V's latents come from the same input
        assert b["d_model"] == cfg.hidden_size != cfg.q_lora_rank
        assert (b["num_heads"], b["d_k"], b["d_v"]) == (
            cfg.num_attention_heads, cfg.qk_nope_head_dim + cfg.qk_rope_head_dim, cfg.v_head_dim)
        downs = sum(p.numel() for m in (a.q_a_proj, a.kv_a_proj_with_mqa, a.q_a_layernorm, a.kv_a_layernorm)
                    for p in m.parameters())
        assert (b["params"]["latent"], b["params"]["extra"]) == (downs, 0)
        assert b["params"]["total"] == sum(p.numel() for p in a.parameters())  # the module's own count
        assert (b["params"]["q"], b["params"]["o"]) == (a.q_b_proj.weight.numel(), a.o_proj.weight.numel())
        assert b["params"]["k"] + b["params"]["v"] == a.kv_b_proj.weight.numel()
        assert b["params"]["k"] == cfg.num_attention_heads * cfg.qk_nope_head_dim * cfg.kv_lora_rank
        assert b["latent"]["cached_width"] == cfg.kv_lora_rank + cfg.qk_rope_head_dim
        assert not b["conflicts"] and not any(f["code"] == "MHA007" for f in d["flags"])


class _AttentionPool(torch.nn.Module):  # type: ignore[misc]
    """A learned probe attends over the sequence (SigLIP's pooling head, Perceiver latents): Q comes
    from a parameter broadcast to the batch, K/V from the input."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.probe = torch.nn.Parameter(torch.randn(1, 1, d))
        self.attention = torch.nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x: Any) -> Any:
        probe = self.probe.expand(x.shape[0], -1, -1)
        return self.attention(probe, x, x, need_weights=False)[0]


@pytest.mark.parametrize("dynamic", [False, True])
def test_learned_probe_query_is_a_cross_attention_block(dynamic: bool, tmp_path: Path) -> None:
    d, h = 32, 4
    torch.manual_seed(0)
    model = add_noise(_AttentionPool(d, h))
    path = tmp_path / "pool.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 5, d),), str(path), input_names=["x"], opset_version=17,
                          dynamo=False, dynamic_axes={"x": {0: "batch", 1: "seq"}} if dynamic else None)
    report = mhainspect.inspect(str(path))
    assert not report.misses, report.misses
    (b,) = report.blocks
    assert (b.kind, b.num_heads, b.num_kv_heads, b.d_model, b.d_k, b.d_v) == ("cross", h, h, d, d // h, d // h)
    assert (b.params.total, b.params.bias) == (4 * d * d + 4 * d, 4 * d)


def test_a_classifier_over_a_learned_table_stays_a_near_miss(tmp_path: Path) -> None:
    """Scores of the input against a stored class table (a classifier) are no attention."""
    d = 16
    model = add_noise(torch.nn.Sequential(torch.nn.Linear(d, 10), torch.nn.Softmax(dim=-1)))
    path = tmp_path / "clf.onnx"
    torch.onnx.export(model, (torch.randn(2, d),), str(path), opset_version=17, dynamo=False)
    report = mhainspect.inspect(str(path))
    assert not report.blocks and len(report.misses) == 1


# ---------------------------------------------------------------------------------- second sweep
# (Mistral ... Mamba: module, save_pretrained folder, TorchScript and dynamo exports.)


def _jamba() -> Any:
    # Layer 0 a Mamba mixer (in_proj, out_proj), layer 1 attention (GQA 4/2).
    return _model("JambaConfig", "JambaModel", hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                  num_hidden_layers=2, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, num_experts=2,
                  mamba_d_state=4, mamba_expand=2, intermediate_size=64, use_mamba_kernels=False)


@pytest.mark.parametrize("front", ["module", "folder"])
def test_state_space_in_proj_and_out_proj_are_no_attention(front: str, tmp_path: Path) -> None:
    """A Mamba mixer's ``in_proj``/``out_proj`` were read as a packed Q/K/V and its O: Jamba's layer 0
    was a confident 4-head GQA block (d_k 16, 6,144 params) beside the real attention of layer 1."""
    model = _jamba()
    if front == "folder":
        model.save_pretrained(tmp_path)
    d = (mhainspect.inspect(model) if front == "module" else mhainspect.inspect(str(tmp_path))).to_dict()
    (b,) = d["blocks"]
    attn = model.layers[1].self_attn
    assert b["name"] == "layers.1.self_attn"
    assert (b["num_heads"], b["num_kv_heads"], b["d_k"]) == (4, 2, 8)
    assert b["params"]["total"] == sum(p.numel() for p in attn.parameters())
    assert d["misses"] == []


def test_mamba_has_no_attention(tmp_path: Path) -> None:
    model = _model("MambaConfig", "MambaModel", hidden_size=32, state_size=4, num_hidden_layers=2, expand=2)
    model.save_pretrained(tmp_path)
    for d in (mhainspect.inspect(str(tmp_path)).to_dict(), mhainspect.inspect(model, trace=False).to_dict()):
        assert d["blocks"] == [] and d["misses"] == []
        assert not any(f["code"] == "MHA004" for f in d["flags"])


def test_in_proj_under_an_attention_module_is_still_packed_qkv() -> None:
    """The rule is the owner's name, not the word: DeBERTa's ``attention.self.in_proj`` stays Q/K/V."""
    def meta(name: str, *shape: int) -> WeightMeta:
        return WeightMeta(name, shape, "float32", name)

    weights = {m.name: m for m in (meta("layer.0.attention.self.in_proj.weight", 96, 32),
                                   meta("layer.0.attention.output.dense.weight", 32, 32),
                                   meta("layer.0.mixer.in_proj.weight", 128, 32),
                                   meta("layer.0.mixer.out_proj.weight", 32, 64))}
    (group,) = group_attention(weights)
    assert group.owner == "layer.0.attention.self"
    assert [r.role for r in group.roles] == ["qkv", "o"]


def test_convbert_head_ratio(tmp_path: Path) -> None:
    """ConvBERT gives ``num_attention_heads // head_ratio`` heads to attention (the rest are
    convolution heads): a folder said 4 heads of d_k 4 where the module computes 2 of d_k 8."""
    model = _model("ConvBertConfig", "ConvBertModel", hidden_size=32, num_attention_heads=4, embedding_size=32,
                   head_ratio=2, num_hidden_layers=2, intermediate_size=64)
    model.save_pretrained(tmp_path)
    for d in (mhainspect.inspect(str(tmp_path)).to_dict(), mhainspect.inspect(model).to_dict()):
        assert len(d["blocks"]) == 2
        for b, layer in zip(d["blocks"], model.encoder.layer):
            s = layer.attention.self
            assert (b["num_heads"], b["num_kv_heads"], b["d_k"], b["d_v"]) == (
                s.num_attention_heads, s.num_attention_heads, s.attention_head_size, s.attention_head_size) == (2, 2, 8, 8)
            assert b["conflicts"] == []
    assert offers_from_config({"num_attention_heads": 1, "head_ratio": 2}, "encoder.layer.0.attention").num_heads == 1


@pytest.mark.parametrize("front", ["module", "folder"])
def test_beit_layer_held_relative_position_table_is_the_blocks_extra(front: str, tmp_path: Path) -> None:
    """transformers 5's BEiT keeps ``layers.N.relative_position_bias`` on the layer, beside
    ``layers.N.attention``: the module said extra 0 where its folder (legacy keys, the table under
    the attention module) said 208."""
    config = transformers.BeitConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64,
                                     image_size=32, patch_size=8, use_relative_position_bias=True)
    torch.manual_seed(0)
    model = transformers.BeitModel(config).eval()
    if front == "folder":
        model.save_pretrained(tmp_path)
    d = mhainspect.inspect(model if front == "module" else str(tmp_path)).to_dict()
    assert len(d["blocks"]) == 2
    for b, layer in zip(d["blocks"], model.layers):
        table = layer.relative_position_bias.relative_position_bias_table
        assert b["params"]["extra"] == table.numel() == 52 * 4
        assert b["params"]["total"] == sum(p.numel() for p in layer.attention.parameters())


def test_a_table_above_several_blocks_is_no_single_blocks_extra() -> None:
    def meta(name: str, *shape: int) -> WeightMeta:
        return WeightMeta(name, shape, "float32", name)

    weights = {m.name: m for m in (
        meta("encoder.relative_position_bias.relative_position_bias_table", 52, 4),
        *(meta(f"encoder.layers.{i}.attention.{r}.weight", 32, 32) for i in (0, 1) for r in ("q_proj", "k_proj",
                                                                                              "v_proj", "o_proj")))}
    assert [g.extras for g in group_attention(weights)] == [(), ()]


@pytest.mark.parametrize("front", ["module", "folder"])
def test_funnel_q_head_k_head_v_head_post_proj(front: str, tmp_path: Path) -> None:
    """Funnel names its projections q_head/k_head/v_head/post_proj and its head size d_head: a folder
    had no block (four near misses), the module found them only by tracing."""
    model = _model("FunnelConfig", "FunnelModel", d_model=32, n_head=4, d_head=8, block_sizes=[1, 1], d_inner=64)
    if front == "folder":
        model.save_pretrained(tmp_path)
    d = mhainspect.inspect(model, trace=False) if front == "module" else mhainspect.inspect(str(tmp_path))
    attns = [m for m in model.modules() if type(m).__name__ == "FunnelRelMultiheadAttention"]
    assert len(d.blocks) == len(attns) == 4 and not d.misses
    for b in d.blocks:
        a = model.get_submodule(b.name)
        assert (b.num_heads, b.num_kv_heads, b.d_k, b.d_v, b.d_model) == (4, 4, 8, 8, 32)
        assert b.params.total == sum(p.numel() for m in (a.q_head, a.k_head, a.v_head, a.post_proj)
                                     for p in m.parameters())


@pytest.mark.parametrize(("cfg_cls", "model_cls", "cfg"), [
    ("GraniteConfig", "GraniteModel", dict(attention_multiplier=0.5)),
    ("Gemma3TextConfig", "Gemma3TextModel", dict(head_dim=16, query_pre_attn_scalar=64, sliding_window=4)),
])
def test_folder_reads_the_score_scale_from_its_config(cfg_cls: str, model_cls: str, cfg: dict[str, Any],
                                                     tmp_path: Path) -> None:
    """Granite's attention_multiplier and Gemma's query_pre_attn_scalar set the scale: the module
    (its ``scaling`` attribute) and the ONNX export flagged MHA003, the folder said nothing."""
    model = _model(cfg_cls, model_cls, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                   num_hidden_layers=2, intermediate_size=64, **cfg)
    model.save_pretrained(tmp_path)
    folder = mhainspect.inspect(str(tmp_path))
    module = mhainspect.inspect(model)
    for f, m, layer in zip(folder.blocks, module.blocks, model.layers):
        assert f.scale_known and f.scale == pytest.approx(layer.self_attn.scaling) == pytest.approx(m.scale)
    assert sorted(f.code for f in folder.flags) == sorted(f.code for f in module.flags)
    assert sum(f.code == "MHA003" for f in folder.flags) == 2
