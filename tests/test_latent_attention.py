"""Latent attention (DeepSeek-V2/V3's MLA) is one block from every source: the nn.Module, its
save_pretrained folder, its ONNX export and a GGUF written as llama.cpp's converter writes it.

Truth comes from the torch module: heads and widths from its config, Q/K/V/O from its projection
weights (K and V the shares of kv_b_proj), the total the module's own parameter count (its
down-projections and norms in it, as ``params.latent``). The KV cache
is the latent and the rotary key (kv_lora_rank + qk_rope_head_dim values per token per layer),
with the per-head K/V it expands to beside it.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from mhainspect.analysis.size import SizeOptions, with_options
from mhainspect.analysis.whatif import what_if
from mhainspect.pipeline import audit
from mhainspect.results import AttentionBlock, CacheStatus, Report

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
transformers.logging.set_verbosity_error()

from gguf_files import deepseek_gguf  # noqa: E402

from tests.conformance.extended import LATENT_CONFIG, latent_params, latent_truth  # noqa: E402
from tests.random_weights import add_noise, export_last_hidden_state  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _model(version: str = "V3", **overrides: Any) -> Any:
    cfg = {**LATENT_CONFIG, **overrides}
    if version == "V2":  # DeepSeek-V2's config class has no first_k_dense_replace toy MoE quirks we need
        cfg = {k: v for k, v in cfg.items() if k not in ("n_group", "topk_group")}
    config = getattr(transformers, f"Deepseek{version}Config")(vocab_size=64, **cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return add_noise(getattr(transformers, f"Deepseek{version}Model")(config))


def _layout(b: AttentionBlock) -> tuple[Any, ...]:
    p = b.params
    assert b.latent is not None, b.name
    return (b.kind, b.num_heads, b.num_kv_heads, b.d_k, b.d_v, b.d_model, p.q, p.k, p.v, p.o, p.bias, p.total, p.latent,
            b.latent.kv_rank, b.latent.rope_dim, b.latent.q_rank)


def _expected(model: Any) -> list[tuple[Any, ...]]:
    cfg = model.config
    out = []
    for t, layer in zip(latent_truth(model), model.layers):
        a = layer.self_attn
        out.append((t.kind, t.num_heads, t.num_kv_heads, t.d_k, t.d_v, t.d_model, t.q, t.k, t.v, t.o, t.bias, t.total,
                    latent_params(a), cfg.kv_lora_rank, cfg.qk_rope_head_dim, cfg.q_lora_rank))
    return out


def _shapes(model: Any) -> dict[str, tuple[int, ...]]:
    return {n: tuple(p.shape) for n, p in model.state_dict().items()}


def _check(report: Report, model: Any) -> None:
    assert [_layout(b) for b in report.blocks] == _expected(model)
    assert not report.misses
    assert not [f for f in report.flags if f.code in ("MHA004", "MHA007")], report.flags
    assert report.model.total_params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("version", ["V3", "V2"])
def test_folder(version: str, tmp_path: Path) -> None:
    model = _model(version)
    model.save_pretrained(tmp_path)
    report = audit(tmp_path)
    _check(report, model)
    cfg = model.config
    b = report.blocks[0]
    # float32 weights, no cache dtype in the config: the latent and the rotary key, 4 bytes each.
    assert b.kv_cache_bytes_per_token == (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * 4
    assert b.kv_cache_expanded_bytes_per_token == cfg.num_attention_heads * (
        cfg.qk_nope_head_dim + cfg.qk_rope_head_dim + cfg.v_head_dim) * 4
    assert b.kv_cache_status is CacheStatus.CACHES
    assert b.weight_bytes == 4 * b.params.total  # down-projections and norms included
    assert b.params.total == sum(p.numel() for p in model.layers[0].self_attn.parameters())


def test_without_a_q_latent(tmp_path: Path) -> None:
    """DeepSeek-V2-Lite: Q projected from the input directly (q_proj), no q_lora_rank."""
    model = _model("V2", q_lora_rank=None)
    assert hasattr(model.layers[0].self_attn, "q_proj")
    model.save_pretrained(tmp_path)
    report = audit(tmp_path)
    _check(report, model)
    assert report.blocks[0].latent is not None and report.blocks[0].latent.q_rank is None


def test_module(tmp_path: Path) -> None:
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from mhainspect.pipeline import audit_module

        _check(audit_module(model), model)


def test_onnx_export(tmp_path: Path) -> None:
    model = _model()
    ids = torch.randint(2, 60, (2, 8), generator=torch.Generator().manual_seed(0))
    path = tmp_path / "mla.onnx"
    export_last_hidden_state(model, ids, path, dynamic_batch=True)
    report = audit(path)
    assert [_layout(b)[:13] for b in report.blocks] == [e[:13] for e in _expected(model)]
    b = report.blocks[0]
    assert b.latent is not None and (b.latent.kv_rank, b.latent.rope_dim) == (16, 8)
    assert not [f for f in report.flags if f.code in ("MHA004", "MHA007")]
    # A graph without cache tensors: what the latent cache holds if it is decoded token by token.
    assert b.kv_cache_status is CacheStatus.IF_DECODED and b.kv_cache_bytes_per_token == 24 * 4


@pytest.mark.parametrize("split", [True, False], ids=["k_b-v_b", "legacy-kv_b"])
def test_gguf(split: bool, tmp_path: Path) -> None:
    model = _model()
    (path,) = deepseek_gguf(tmp_path / "ds.gguf", _shapes(model), model.config.to_dict(), split_kv_b=split)
    report = audit(path)
    expected = _expected(model)
    assert [_layout(b)[1:] for b in report.blocks] == [e[1:] for e in expected]
    assert not [f for f in report.flags if f.code in ("MHA004", "MHA007")], report.flags
    assert report.model.total_params == sum(p.numel() for p in model.parameters())
    b = report.blocks[0]
    assert b.latent is not None
    compressed, expanded = 24 * 2, 4 * (24 + 12) * 2  # llama.cpp's f16 cache
    assert b.kv_cache_expanded_bytes_per_token == expanded
    if split:  # llama.cpp keeps the latent (its MLA cache)
        assert not b.latent.runtime_expands and b.kv_cache_bytes_per_token == compressed
    else:  # with the unsplit attn_kv_b llama.cpp caches the per-head K/V
        assert b.latent.runtime_expands and b.kv_cache_bytes_per_token == expanded
        ev = next(e for e in b.evidence if e.field == "kv_cache_bytes_per_token")
        assert "unsplit attn_kv_b" in ev.detail


def test_kv_cache_beside_its_expanded_equivalent(tmp_path: Path) -> None:
    model = _model(num_hidden_layers=2)
    model.save_pretrained(tmp_path)
    report = with_options(audit(tmp_path), SizeOptions(context=1000, kv_dtype="bfloat16"))
    kv = report.model.kv_cache
    assert kv is not None and kv.status is CacheStatus.CACHES
    assert kv.bytes_per_token == 2 * 24 * 2 and kv.total_bytes == 1000 * 2 * 24 * 2
    assert kv.expanded_bytes_per_token == 2 * 4 * 36 * 2 and kv.expanded_total_bytes == 1000 * 2 * 4 * 36 * 2
    assert all(b.kv_cache_expanded_bytes_per_token == 4 * 36 * 2 for b in report.blocks)
    from mhainspect.render.size_lines import size_lines

    lines = size_lines(report)
    assert any("latent attention (2 blocks)" in ln and "6.0×" in ln for ln in lines), lines


def test_what_if_keeps_the_rotary_key_outside_the_heads(tmp_path: Path) -> None:
    """At 8 heads with the same per-head widths, q_b_proj, kv_b_proj and o_proj double; the
    down-projections and norms (params.latent) do not change. The module built with 8 heads says the
    same: the what-if is that module's own parameter count; at the block's own heads, its total."""
    model = _model()
    model.save_pretrained(tmp_path)
    b = audit(tmp_path).blocks[0]
    doubled = _model(num_attention_heads=8, num_key_value_heads=8).layers[0].self_attn
    assert next(w for w in b.what_if if w.num_heads == 8).head_dim_fixed == sum(p.numel() for p in doubled.parameters())
    same = what_if(b, 4)
    assert same is not None and same.head_dim_fixed == same.total_width_fixed == b.params.total


def test_config_claims_lose_to_the_shapes(tmp_path: Path) -> None:
    """A config whose kv_lora_rank and heads contradict the weights: the shapes win, each overruled
    claim is a conflict (MHA007)."""
    model = _model()
    model.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.update(kv_lora_rank=32, num_attention_heads=8)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    report = audit(tmp_path)
    b = report.blocks[0]
    assert (b.num_heads, b.latent.kv_rank if b.latent else None) == (4, 16)
    assert any(c.startswith("kv_rank: config says 32") for c in b.conflicts), b.conflicts
    assert any(c.startswith("num_heads: config says 8") for c in b.conflicts), b.conflicts
    assert "MHA007" in {f.code for f in report.flags}


def test_json_validates(tmp_path: Path) -> None:
    from jsonschema import Draft202012Validator

    model = _model()
    model.save_pretrained(tmp_path)
    doc = with_options(audit(tmp_path), SizeOptions(context=64)).to_dict()
    schema = json.loads((DOCS / "report.schema.json").read_text())
    validator = Draft202012Validator(schema)
    assert not list(validator.iter_errors(doc))
    block = doc["blocks"][0]
    assert block["latent"] == {"kv_rank": 16, "rope_dim": 8, "q_rank": 32, "cached_width": 24,
                               "tensors": block["latent"]["tensors"], "runtime_expands": False}
    assert len(block["latent"]["tensors"]) == 4
    assert doc["model"]["kv_cache"]["expanded_bytes_per_token"] == 576
    block["latent"]["extra_key"] = 1  # a closed object
    assert list(validator.iter_errors(doc))


@pytest.mark.parametrize("key", ["written", "left to the class default"])
def test_multi_token_prediction_layer_is_counted_and_caches_nothing(key: str, tmp_path: Path) -> None:
    """DeepSeek-V3's checkpoint stores num_nextn_predict_layers multi-token-prediction layers after
    its num_hidden_layers decoder layers (layer 61 of 61; here layer 1 of 1): a full decoder layer plus
    enorm, hnorm, eh_proj and a shared head. Its attention is a block whose parameters count (they are
    stored), but plain decoding never runs it: transformers builds num_hidden_layers layers and lists
    the extra one in _keys_to_ignore_on_load_unexpected, and llama.cpp's converter drops it. So it
    adds nothing to the KV cache. Was: a caching block, the cache one layer too large."""
    from safetensors.torch import load_file, save_file

    model = _model()
    cfg = model.config
    assert cfg.num_nextn_predict_layers == 1 and transformers.DeepseekV3Config().num_nextn_predict_layers == 1
    n = cfg.num_hidden_layers
    assert any(f"layers\\.{61}" in p for p in transformers.DeepseekV3ForCausalLM._keys_to_ignore_on_load_unexpected)
    model.save_pretrained(tmp_path)
    stored = load_file(tmp_path / "model.safetensors")
    d = cfg.hidden_size
    mtp = {k.replace(f"layers.{n - 1}.", f"layers.{n}."): v.clone() for k, v in stored.items()
           if k.startswith(f"layers.{n - 1}.")}
    mtp.update({f"layers.{n}.enorm.weight": torch.ones(d), f"layers.{n}.hnorm.weight": torch.ones(d),
                f"layers.{n}.eh_proj.weight": torch.zeros(d, 2 * d),
                f"layers.{n}.shared_head.norm.weight": torch.ones(d),
                f"layers.{n}.shared_head.head.weight": torch.zeros(cfg.vocab_size, d)})
    save_file({**stored, **mtp}, tmp_path / "model.safetensors", metadata={"format": "pt"})
    saved = json.loads((tmp_path / "config.json").read_text())
    if key == "written":
        assert saved["num_nextn_predict_layers"] == 1
    else:
        del saved["num_nextn_predict_layers"]
    (tmp_path / "config.json").write_text(json.dumps(saved))

    report = audit(tmp_path)
    *decoder, draft = report.blocks
    assert [_layout(b) for b in decoder] == _expected(model)
    assert _layout(draft) == _layout(decoder[-1]) and draft.name == f"layers.{n}.self_attn"
    assert report.model.total_params == sum(p.numel() for p in model.parameters()) + sum(t.numel() for t in mtp.values())
    assert [b.kv_cache_status for b in decoder] == [CacheStatus.CACHES] * n
    assert draft.kv_cache_status is CacheStatus.NONE and draft.kv_cache_bytes_per_token is None
    assert f"layer {n} is a multi-token-prediction layer (num_hidden_layers = {n}, num_nextn_predict_layers = 1" in \
        (draft.kv_cache_reason or "")
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == sum(b.kv_cache_bytes_per_token or 0 for b in decoder)


# Published configs (the keys that shape the weights), at real size: DeepSeek-V2-Lite (Q projected
# directly) and DeepSeek-V3 (Q through its own latent).
_REAL_SIZE = {
    "DeepSeek-V2-Lite": ("deepseek_v2", dict(
        architectures=["DeepseekV2ForCausalLM"], hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
        n_routed_experts=64, n_shared_experts=2, num_experts_per_tok=6, num_hidden_layers=27, num_attention_heads=16,
        num_key_value_heads=16, kv_lora_rank=512, q_lora_rank=None, qk_nope_head_dim=128, qk_rope_head_dim=64,
        v_head_dim=128, vocab_size=102400, first_k_dense_replace=1, max_position_embeddings=163840, n_group=1,
        topk_group=1, topk_method="greedy", tie_word_embeddings=False, torch_dtype="bfloat16")),
    "DeepSeek-V3": ("deepseek_v3", dict(
        architectures=["DeepseekV3ForCausalLM"], hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
        n_routed_experts=256, n_shared_experts=1, num_experts_per_tok=8, num_hidden_layers=61, num_attention_heads=128,
        num_key_value_heads=128, kv_lora_rank=512, q_lora_rank=1536, qk_nope_head_dim=128, qk_rope_head_dim=64,
        v_head_dim=128, vocab_size=129280, first_k_dense_replace=3, max_position_embeddings=163840, n_group=8,
        topk_group=4, num_nextn_predict_layers=1, tie_word_embeddings=False, torch_dtype="bfloat16")),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_REAL_SIZE))
def test_real_size_block_totals_are_the_attention_modules(name: str, tmp_path: Path) -> None:
    """A folder as published (config.json, the safetensors header of the model transformers builds
    from it): each block's total is its attention module's sum(p.numel()), down-projections and
    latent norms included (they were left out: 8% below on both models)."""
    from tests import hybrid_models as hm

    model_type, config = _REAL_SIZE[name]
    model = hm.meta_model(model_type, config)
    folder = hm.write_meta_folder(model, {**config, "model_type": model_type}, tmp_path / "model")
    report = audit(folder)
    layers = model.model.layers
    assert len(report.blocks) == len(layers)
    for b, layer in zip(report.blocks, layers):
        assert b.params.total == sum(p.numel() for p in layer.self_attn.parameters()), b.name
        assert b.latent is not None and b.params.latent == latent_params(layer.self_attn)
        assert b.params.latent / b.params.total > 0.07  # what the totals were missing
    assert report.model.total_params == sum(p.numel() for p in model.parameters())
    assert report.model.attention_params == sum(p.numel() for layer in layers for p in layer.self_attn.parameters())
