"""Mixture of experts: active parameters per token beside the total (checked against a hand
computation from the config and against the torch module transformers builds), memory at a
context and --weight-dtype, in every format."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from cli_run import in_process
from gguf_files import T, write_gguf
from jsonschema import Draft202012Validator
from remote_models import write_safetensors

from mhainspect.analysis.size import SizeOptions
from mhainspect.pipeline import AuditOptions, audit
from mhainspect.render.json_render import report_to_dict


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    return in_process(capsys, monkeypatch)


def _torch_active(model: Any) -> int:
    """The parameters one token uses, counted on the module: every parameter, less each MoE block's
    experts but for top_k of them (the router's own attribute)."""
    total = sum(p.numel() for p in model.parameters())
    for module in model.modules():
        experts = getattr(module, "experts", None)
        router = getattr(module, "gate", None) or getattr(module, "router", None)
        if experts is None or router is None:
            continue
        top_k = getattr(router, "top_k", None) or getattr(module, "top_k", None)
        linear = router if hasattr(router, "weight") else router.layer  # DBRX: router.layer is the linear
        num_experts = linear.weight.shape[0]
        routed = sum(p.numel() for p in experts.parameters())
        total -= routed - routed // num_experts * top_k
    return total


def _saved(tmp_path: Path, config: Any, model_class: Any) -> tuple[Path, Any]:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = model_class(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 1e-3)
    model.save_pretrained(tmp_path / "model")
    return tmp_path / "model", model


def test_mixtral_active_params_by_hand_and_by_the_module(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    d, f, layers, experts, k, vocab = 32, 48, 2, 4, 2, 128
    config = transformers.MixtralConfig(vocab_size=vocab, hidden_size=d, intermediate_size=f, num_hidden_layers=layers,
                                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=experts,
                                        num_experts_per_tok=k)
    folder, model = _saved(tmp_path, config, transformers.MixtralForCausalLM)
    report = audit(folder)
    moe = report.model.experts
    assert moe is not None and moe.active_params is not None
    per_expert = 3 * d * f  # w1, w3: [f, d]; w2: [d, f]
    by_hand = report.model.total_params - layers * experts * per_expert + layers * k * per_expert
    assert (moe.num_experts, moe.experts_per_token, moe.moe_layers) == (experts, k, layers)
    assert moe.params_per_expert == per_expert and moe.expert_params == layers * experts * per_expert
    assert moe.active_params == by_hand == _torch_active(model)
    assert report.model.total_params == sum(p.numel() for p in model.parameters())
    sources = {e.field: e.source.value for e in moe.evidence}
    assert sources == {"num_experts": "weight_shape", "experts_per_token": "config", "active_params": "weight_shape"}


def test_qwen3_moe_active_params(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    d, f_moe, layers, experts, k = 32, 16, 2, 8, 2
    config = transformers.Qwen3MoeConfig(vocab_size=128, hidden_size=d, intermediate_size=64, moe_intermediate_size=f_moe,
                                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                         head_dim=8, num_experts=experts, num_experts_per_tok=k, decoder_sparse_step=1,
                                         mlp_only_layers=[])
    folder, model = _saved(tmp_path, config, transformers.Qwen3MoeForCausalLM)
    moe = audit(folder).model.experts
    assert moe is not None
    per_expert = 3 * d * f_moe
    total = sum(p.numel() for p in model.parameters())
    assert moe.active_params == total - layers * (experts - k) * per_expert == _torch_active(model)


def test_deepseek_shared_experts_and_dense_first_layers(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    d, f_moe, layers, dense, experts, shared, k = 32, 16, 3, 1, 8, 2, 2
    config = transformers.DeepseekV3Config(
        vocab_size=128, hidden_size=d, intermediate_size=64, moe_intermediate_size=f_moe, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=experts, num_experts_per_tok=k,
        n_shared_experts=shared, first_k_dense_replace=dense, q_lora_rank=16, kv_lora_rank=8, qk_rope_head_dim=4,
        qk_nope_head_dim=4, v_head_dim=8, n_group=2, topk_group=1)
    folder, model = _saved(tmp_path, config, transformers.DeepseekV3ForCausalLM)
    report = audit(folder)
    moe = report.model.experts
    assert moe is not None
    per_expert = 3 * d * f_moe
    moe_layers = layers - dense
    assert (moe.moe_layers, moe.num_experts, moe.num_shared_experts) == (moe_layers, experts, shared)
    assert moe.shared_expert_params == moe_layers * shared * per_expert  # one fused MLP of shared × f_moe
    assert moe.active_params == report.model.total_params - moe_layers * (experts - k) * per_expert
    # The checkpoint also stores the routers' e_score_correction_bias: a buffer of the module, not in
    # total_params (its bytes are); the experts a token skips are the same either way.
    torch_total = sum(p.numel() for p in model.parameters())
    assert report.model.total_params == torch_total
    assert report.model.total_params - moe.active_params == torch_total - _torch_active(model)


def test_dbrx_fused_experts_by_the_module(tmp_path: Path) -> None:
    """DBRX stores a layer's experts fused along one axis (ffn.experts.mlp.w1/v1/w2 [E * f, d]):
    counted as E experts (the router's rows; config ffn_config.ffn_hidden_size splits the axis)."""
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "DbrxForCausalLM"):
        pytest.skip("this transformers has no DBRX")
    d, f, layers, experts, k = 32, 48, 2, 4, 2
    config = transformers.DbrxConfig(d_model=d, n_heads=4, n_layers=layers, max_seq_len=64, vocab_size=128,
                                     attn_config={"kv_n_heads": 2, "rope_theta": 10000.0},
                                     ffn_config={"moe_num_experts": experts, "moe_top_k": k, "ffn_hidden_size": f})
    folder, model = _saved(tmp_path, config, transformers.DbrxForCausalLM)
    report = audit(folder)
    moe = report.model.experts
    assert moe is not None and moe.reason is None
    per_expert = 3 * d * f
    total = sum(p.numel() for p in model.parameters())
    assert report.model.total_params == total
    assert (moe.num_experts, moe.experts_per_token, moe.moe_layers, moe.params_per_expert) == (experts, k, layers,
                                                                                                per_expert)
    assert moe.expert_params == layers * experts * per_expert
    assert moe.active_params == total - layers * (experts - k) * per_expert == _torch_active(model)
    assert not report.warnings
    evidence = {e.field: e for e in moe.evidence}
    assert evidence["num_experts"].source.value == "weight_shape" and "router.layer.weight [4, 32]" in \
        evidence["num_experts"].detail and "ffn_config.ffn_hidden_size = 48" in evidence["num_experts"].detail
    assert [(b.num_heads, b.num_kv_heads, b.d_k) for b in report.blocks] == [(4, 2, 8)] * layers


def test_switch_transformers_experts_named_expert_i(tmp_path: Path) -> None:
    """Switch Transformers (and NLLB-MoE) index experts as ``mlp.experts.expert_<i>``: one module each."""
    transformers = pytest.importorskip("transformers")
    d, f, experts = 32, 48, 4
    config = transformers.SwitchTransformersConfig(vocab_size=128, d_model=d, d_kv=8, d_ff=f, num_layers=2,
                                                   num_decoder_layers=2, num_heads=4, num_experts=experts,
                                                   expert_capacity=8, encoder_sparse_step=1, decoder_sparse_step=1)
    folder, model = _saved(tmp_path, config, transformers.SwitchTransformersForConditionalGeneration)
    moe = audit(folder).model.experts
    assert moe is not None
    routed = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    assert (moe.num_experts, moe.moe_layers, moe.params_per_expert) == (experts, 4, 2 * d * f)
    assert moe.expert_params == routed == 4 * experts * 2 * d * f
    # top-1 routing is the architecture's, and nothing in the config states it
    assert moe.active_params is None and moe.reason is not None and "how many experts a token uses" in moe.reason


def _dbrx_header(folder: Path, *, router: bool = True, ffn_hidden: int = 40) -> dict[str, int]:
    """A DBRX-shaped folder, header only (the names and layout of databricks/dbrx-base: fused experts
    without a .weight suffix, packed Wqkv): 8 experts of width 40 in 3 layers, 2 per token."""
    d, f, experts, layers, vocab, heads, kv, head_dim = 64, 40, 8, 3, 256, 8, 2, 8
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {"transformer.wte.weight": ("BF16", (vocab, d)),
                                                        "transformer.norm_f.weight": ("BF16", (d,)),
                                                        "lm_head.weight": ("BF16", (vocab, d))}
    for i in range(layers):
        p = f"transformer.blocks.{i}"
        tensors[f"{p}.norm_attn_norm.norm_1.weight"] = ("BF16", (d,))
        tensors[f"{p}.norm_attn_norm.attn.Wqkv.weight"] = ("BF16", ((heads + 2 * kv) * head_dim, d))
        tensors[f"{p}.norm_attn_norm.attn.out_proj.weight"] = ("BF16", (d, d))
        tensors[f"{p}.norm_attn_norm.norm_2.weight"] = ("BF16", (d,))
        if router:
            tensors[f"{p}.ffn.router.layer.weight"] = ("BF16", (experts, d))
        for name in ("w1", "v1", "w2"):
            tensors[f"{p}.ffn.experts.mlp.{name}"] = ("BF16", (experts * f, d))
    config = {"architectures": ["DbrxForCausalLM"], "model_type": "dbrx", "d_model": d, "n_heads": heads,
              "n_layers": layers, "max_seq_len": 4096, "vocab_size": vocab, "torch_dtype": "bfloat16",
              "attn_config": {"kv_n_heads": kv, "rope_theta": 500000.0, "clip_qkv": 8},
              "ffn_config": {"moe_num_experts": experts, "moe_top_k": 2, "ffn_hidden_size": ffn_hidden}}
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    write_safetensors(folder / "model.safetensors", tensors)
    total = sum(math.prod(s) for _, s in tensors.values())
    per_expert = 3 * f * d
    return {"total": total, "per_expert": per_expert, "layers": layers, "experts": experts,
            "active": total - layers * experts * per_expert + layers * 2 * per_expert}


def test_dbrx_header_fused_experts_by_hand(tmp_path: Path) -> None:
    facts = _dbrx_header(tmp_path / "m")
    report = audit(tmp_path / "m")
    moe = report.model.experts
    assert report.model.total_params == facts["total"] == 3 * (64 + 64 * 96 + 64 * 64 + 64 + 8 * 64 + 3 * 320 * 64) \
        + 2 * 256 * 64 + 64
    assert moe is not None and (moe.num_experts, moe.params_per_expert) == (facts["experts"], facts["per_expert"])
    assert moe.active_params == facts["active"] == facts["total"] - 3 * 6 * 3 * 40 * 64
    assert [(b.num_heads, b.num_kv_heads) for b in report.blocks] == [(8, 2)] * 3


def test_fused_experts_without_a_router_count_from_the_config(tmp_path: Path) -> None:
    facts = _dbrx_header(tmp_path / "m", router=False)
    moe = audit(tmp_path / "m").model.experts
    assert moe is not None and moe.active_params == facts["active"]
    evidence = {e.field: e for e in moe.evidence}
    assert evidence["num_experts"].source.value == "config"
    assert "320 = 8 experts (config.json ffn_config.moe_num_experts = 8) x 40" in evidence["num_experts"].detail


def test_fused_experts_nothing_splits_are_unknown_with_the_reason(tmp_path: Path) -> None:
    # the config's width (48) does not split the fused axis (8 x 40 = 320): no count, no active figure
    _dbrx_header(tmp_path / "m", router=False, ffn_hidden=48)
    moe = audit(tmp_path / "m").model.experts
    assert moe is not None and moe.active_params is None and moe.num_experts is None
    assert moe.reason is not None and "leading axis (320)" in moe.reason and "ffn_hidden_size = 48" in moe.reason


def _qwen2_moe_header(folder: Path, *, experts_per_token: int | None = 2, num_experts: int = 4) -> dict[str, Any]:
    """A Qwen2-MoE-shaped folder, header only: routed experts, one shared expert and its gate."""
    d, f, f_shared, layers, vocab = 64, 32, 96, 2, 256
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {"model.embed_tokens.weight": ("BF16", (vocab, d)),
                                                        "lm_head.weight": ("BF16", (vocab, d))}
    for i in range(layers):
        p = f"model.layers.{i}"
        for name, shape in (("q_proj", (d, d)), ("k_proj", (16, d)), ("v_proj", (16, d)), ("o_proj", (d, d))):
            tensors[f"{p}.self_attn.{name}.weight"] = ("BF16", shape)
        tensors[f"{p}.mlp.gate.weight"] = ("BF16", (4, d))
        for e in range(4):
            for name, shape in (("gate_proj", (f, d)), ("up_proj", (f, d)), ("down_proj", (d, f))):
                tensors[f"{p}.mlp.experts.{e}.{name}.weight"] = ("BF16", shape)
        for name, shape in (("gate_proj", (f_shared, d)), ("up_proj", (f_shared, d)), ("down_proj", (d, f_shared))):
            tensors[f"{p}.mlp.shared_expert.{name}.weight"] = ("BF16", shape)
        tensors[f"{p}.mlp.shared_expert_gate.weight"] = ("BF16", (1, d))
        tensors[f"{p}.input_layernorm.weight"] = ("BF16", (d,))
    config: dict[str, Any] = {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": d,
                              "num_attention_heads": 4, "num_key_value_heads": 1, "num_hidden_layers": layers,
                              "vocab_size": vocab, "num_experts": num_experts, "moe_intermediate_size": f,
                              "shared_expert_intermediate_size": f_shared, "max_position_embeddings": 4096,
                              "torch_dtype": "bfloat16"}
    if experts_per_token is not None:
        config["num_experts_per_tok"] = experts_per_token
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    write_safetensors(folder / "model.safetensors", tensors)
    total = sum(math.prod(s) for _, s in tensors.values())
    return {"total": total, "per_expert": 3 * d * f, "shared": layers * 3 * d * f_shared, "layers": layers}


def test_header_only_shared_expert_by_hand(tmp_path: Path) -> None:
    facts = _qwen2_moe_header(tmp_path / "m")
    report = audit(tmp_path / "m")
    moe = report.model.experts
    assert report.model.total_params == facts["total"]
    assert moe is not None and moe.shared_expert_params == facts["shared"] and moe.num_shared_experts == 1
    assert moe.active_params == facts["total"] - facts["layers"] * (4 - 2) * facts["per_expert"]


def test_no_experts_per_token_is_unknown_with_the_reason(tmp_path: Path) -> None:
    _qwen2_moe_header(tmp_path / "m", experts_per_token=None)
    moe = audit(tmp_path / "m").model.experts
    assert moe is not None and moe.active_params is None and moe.num_experts == 4
    assert moe.reason is not None and "num_experts_per_tok" in moe.reason


def test_shapes_outrank_a_config_expert_count(tmp_path: Path) -> None:
    _qwen2_moe_header(tmp_path / "m", num_experts=16)
    report = audit(tmp_path / "m")
    assert report.model.experts is not None and report.model.experts.num_experts == 4
    assert any("num_experts = 16, but the expert tensors show 4" in w for w in report.warnings)


def test_dense_model_has_no_experts_entry(tmp_path: Path, sample_dir: Path) -> None:
    report = audit(sample_dir / "gqa_llama.onnx")
    assert report.model.experts is None and "experts" not in report_to_dict(report)["model"]


def test_gguf_moe_from_metadata_and_stacked_tensors(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    d, f, layers, experts, used, shared, vocab = 64, 32, 2, 8, 2, 1, 64
    tensors = [T("token_embd.weight", (vocab, d)), T("output.weight", (vocab, d)), T("output_norm.weight", (d,))]
    for i in range(layers):
        b = f"blk.{i}"
        tensors += [T(f"{b}.attn_q.weight", (d, d)), T(f"{b}.attn_k.weight", (16, d)), T(f"{b}.attn_v.weight", (16, d)),
                    T(f"{b}.attn_output.weight", (d, d)), T(f"{b}.attn_norm.weight", (d,)),
                    T(f"{b}.ffn_gate_inp.weight", (experts, d)),
                    T(f"{b}.ffn_gate_exps.weight", (experts, f, d)), T(f"{b}.ffn_up_exps.weight", (experts, f, d)),
                    T(f"{b}.ffn_down_exps.weight", (experts, d, f)),
                    T(f"{b}.ffn_gate_shexp.weight", (f, d)), T(f"{b}.ffn_up_shexp.weight", (f, d)),
                    T(f"{b}.ffn_down_shexp.weight", (d, f))]
    path = tmp_path / "moe.gguf"
    write_gguf(path, "qwen2moe", {"{arch}.block_count": layers, "{arch}.embedding_length": d,
                                  "{arch}.attention.head_count": 4, "{arch}.attention.head_count_kv": 1,
                                  "{arch}.context_length": 4096, "{arch}.expert_count": experts,
                                  "{arch}.expert_used_count": used, "{arch}.expert_shared_count": shared}, tensors)
    report = audit(path)
    moe = report.model.experts
    total = sum(math.prod(t.shape) for t in tensors)
    per_expert = 3 * d * f
    assert report.model.total_params == total
    assert moe is not None and (moe.num_experts, moe.experts_per_token, moe.num_shared_experts) == (experts, used, 1)
    assert moe.shared_expert_params == layers * per_expert
    assert moe.active_params == total - layers * (experts - used) * per_expert
    assert {e.field: e.source.value for e in moe.evidence}["experts_per_token"] == "gguf"


# ----------------------------------------------------------------------------- memory and --weight-dtype


def test_memory_at_context_and_weight_dtype(tmp_path: Path, schema_validator: Draft202012Validator) -> None:
    facts = _qwen2_moe_header(tmp_path / "m")
    report = audit(tmp_path / "m", AuditOptions(size=SizeOptions(context=8192, weight_dtype="int4")))
    m = report.model
    assert m.kv_cache is not None and m.kv_cache.total_bytes is not None and m.weight_bytes is not None
    assert m.memory is not None and m.memory.context_source == "--context"
    assert m.memory.total_bytes == m.weight_bytes + m.kv_cache.total_bytes
    assert m.weight_dtype is not None and m.weight_dtype.bytes == math.ceil(facts["total"] / 2)
    assert m.weight_dtype.memory_bytes == m.weight_dtype.bytes + m.kv_cache.total_bytes
    assert not list(schema_validator.iter_errors(report_to_dict(report)))


def test_memory_without_context_is_at_the_models_maximum(tmp_path: Path) -> None:
    _qwen2_moe_header(tmp_path / "m")
    m = audit(tmp_path / "m").model
    assert m.memory is not None and m.memory.context == 4096 and "max_position_embeddings" in m.memory.context_source
    assert m.kv_cache is not None and m.kv_cache.bytes_per_token is not None and m.weight_bytes is not None
    assert m.memory.total_bytes == m.weight_bytes + 4096 * m.kv_cache.bytes_per_token


def test_weight_dtype_block_types_and_llama_cpp_mixes(tmp_path: Path) -> None:
    facts = _qwen2_moe_header(tmp_path / "m")
    w = audit(tmp_path / "m", AuditOptions(size=SizeOptions(weight_dtype="q4_k_m"))).model.weight_dtype
    assert w is not None and w.dtype == "q4_k" and w.bits_per_element == 4.5
    assert w.bytes == math.ceil(facts["total"] / 256) * 144 and "floor" in w.note
    fp8 = audit(tmp_path / "m", AuditOptions(size=SizeOptions(weight_dtype="fp8"))).model.weight_dtype
    assert fp8 is not None and fp8.dtype == "float8e4m3fn" and fp8.bytes == facts["total"]


def test_every_format_shows_active_params_memory_and_weight_dtype(cli: Any, tmp_path: Path) -> None:
    _qwen2_moe_header(tmp_path / "m")
    model = tmp_path / "m"
    args = (model, "--context", "2k", "--weight-dtype", "q8_0")
    table = cli(*args).out
    assert "active per token" in table and "Memory at context 2,000" in table and "as q8_0:" in table
    markdown = cli(*args, "-f", "markdown").out.replace("\\", "")  # markdown escapes _ and :
    assert "active per token" in markdown and "Memory at context 2,000" in markdown and "as q8_0:" in markdown
    page = cli(*args, "-f", "html").out
    assert "active per token" in page and "Memory at context 2,000" in page and "as q8_0:" in page
    doc = json.loads(cli(*args, "-f", "json").out)["model"]
    assert doc["experts"]["active_params"] and doc["memory"]["context"] == 2000 and doc["weight_dtype"]["dtype"] == "q8_0"
    bad = cli(model, "--weight-dtype", "q9_z")
    assert bad.code == 2 and "--weight-dtype: 'q9_z' is not a weight type" in bad.err
