"""More architectures than the issue names, with one generic ground-truth reader.

Each case is a transformers model built from its own config class (random weights, small sizes,
the architecture's real head layout). Ground truth comes from the attention modules themselves:
heads, kv heads and head size from the module/config, and per-role parameter counts from the
projection weights (fused QKV weights split by the widths the module uses).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from tests.conformance.zoo import BATCH, SEQ, VOCAB, BlockTruth, Case, _block, _eval, _hf_quiet, _ids, _qualname

_TOK = {"input_ids": {0: "batch", 1: "seq"}}


def _n(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel()


def _linear(lin: nn.Module | None) -> tuple[int, int]:
    if lin is None:
        return (0, 0)
    weight = getattr(lin, "weight", None)
    bias = getattr(lin, "bias", None)
    return (_n(weight) + _n(bias), _n(bias))


def _rows(lin: nn.Module, start: int, stop: int) -> tuple[int, int]:
    """Params of rows [start, stop) of a fused nn.Linear (weight [out, in])."""
    w, b = lin.weight, lin.bias
    return (_n(w[start:stop]) + (_n(b[start:stop]) if b is not None else 0), _n(b[start:stop]) if b is not None else 0)


def _qkv_rows(fused: nn.Module, h: int, kv: int, dh: int) -> tuple[tuple[int, int], ...]:
    """Q, K and V params of a fused nn.Linear whose rows are [(h + 2·kv)·dh]: q rows, then k, then v."""
    return _rows(fused, 0, h * dh), _rows(fused, h * dh, (h + kv) * dh), _rows(fused, (h + kv) * dh, (h + 2 * kv) * dh)


def _separate(model: nn.Module, attn: nn.Module, h: int, kv: int, hidden: int, dh: int,
              names: tuple[str, str, str, str] = ("q_proj", "k_proj", "v_proj", "o_proj"),
              kind: str = "self") -> BlockTruth:
    q, k, v, o = (getattr(attn, n) for n in names)
    assert q.weight.shape[0] == h * dh and k.weight.shape[0] == kv * dh, (q.weight.shape, k.weight.shape)
    return _block(_qualname(model, attn), kind, h, kv, hidden, dh, dh, _normed(_linear(q), attn, "q_norm"),
                  _normed(_linear(k), attn, "k_norm"), _linear(v), _linear(o))


def _normed(counts: tuple[int, int], attn: nn.Module, norm: str) -> tuple[int, int]:
    """A projection's (params, bias) with the norm the module applies to its output before the
    scores (Qwen3's and Gemma 3's q_norm/k_norm): part of that role's count, not of its bias."""
    module = getattr(attn, norm, None)
    return (counts[0] + sum(p.numel() for p in module.parameters()), counts[1]) if module is not None else counts


def _build(config_cls: str, model_cls: str, tuple_outputs: bool = True,
           **cfg: Any) -> Callable[[], tuple[nn.Module, tuple]]:
    def build() -> tuple[nn.Module, tuple]:
        import transformers

        _hf_quiet()
        torch.manual_seed(0)
        config = getattr(transformers, config_cls)(vocab_size=VOCAB, use_cache=False, **cfg)
        config.return_dict = not tuple_outputs  # BART's own code needs its ModelOutput objects
        model = _eval(getattr(transformers, model_cls)(config))
        return model, (_ids(BATCH, SEQ),)

    return build


def _truth_decoder(model: nn.Module) -> tuple[BlockTruth, ...]:
    """Llama-family decoders: layers[i].self_attn with q/k/v/o_proj."""
    cfg = model.config
    out = []
    for layer in model.layers:
        a = layer.self_attn
        dh = a.head_dim
        out.append(_separate(model, a, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hidden_size, dh))
    return tuple(out)


def _truth_falcon(model: nn.Module) -> tuple[BlockTruth, ...]:
    cfg = model.config
    out = []
    for layer in model.h:
        a = layer.self_attention
        h, dh, kv = a.num_heads, a.head_dim, (1 if cfg.multi_query else a.num_heads)
        q, k, v = _qkv_rows(a.query_key_value, h, kv, dh)
        out.append(_block(_qualname(model, a), "self", h, kv, cfg.hidden_size, dh, dh, q, k, v, _linear(a.dense)))
    return tuple(out)


def _truth_phi3(model: nn.Module) -> tuple[BlockTruth, ...]:
    cfg = model.config
    out = []
    for layer in model.layers:
        a = layer.self_attn
        h, kv, dh = cfg.num_attention_heads, cfg.num_key_value_heads, a.head_dim
        q, k, v = _qkv_rows(a.qkv_proj, h, kv, dh)
        out.append(_block(_qualname(model, a), "self", h, kv, cfg.hidden_size, dh, dh, q, k, v, _linear(a.o_proj)))
    return tuple(out)


def _truth_neox(model: nn.Module) -> tuple[BlockTruth, ...]:
    cfg = model.config
    out = []
    for layer in model.layers:
        a = layer.attention
        h, dh = cfg.num_attention_heads, a.head_size
        fused = a.query_key_value  # rows interleaved per head: (h, 3, dh)
        share = (_n(fused.weight) // 3 + (_n(fused.bias) // 3 if fused.bias is not None else 0),
                 _n(fused.bias) // 3 if fused.bias is not None else 0)
        out.append(_block(_qualname(model, a), "self", h, h, cfg.hidden_size, dh, dh, share, share, share,
                          _linear(a.dense)))
    return tuple(out)


def _truth_bart(model: nn.Module) -> tuple[BlockTruth, ...]:
    cfg = model.config
    out = []
    names = ("q_proj", "k_proj", "v_proj", "out_proj")
    for layer in model.encoder.layers:
        a = layer.self_attn
        out.append(_separate(model, a, a.num_heads, a.num_heads, cfg.d_model, a.head_dim, names))
    for layer in model.decoder.layers:
        for a, kind in ((layer.self_attn, "self"), (layer.encoder_attn, "cross")):
            out.append(_separate(model, a, a.num_heads, a.num_heads, cfg.d_model, a.head_dim, names, kind))
    return tuple(out)


def latent_truth(model: nn.Module) -> tuple[BlockTruth, ...]:
    """DeepSeek-V2/V3 latent attention: K and V are the shares of kv_b_proj (per head
    qk_nope_head_dim rows of K, then v_head_dim rows of V), Q is q_b_proj (q_proj without a Q
    latent); the down-projections and norms are in the block's total (``latent_params``), which is
    the attention module's own parameter count."""
    cfg = model.config
    h, nope, rope, v = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    out = []
    for layer in model.layers:
        a = layer.self_attn
        kv_b = a.kv_b_proj
        assert kv_b.weight.shape[0] == h * (nope + v)
        per_head = kv_b.weight.view(h, nope + v, -1)
        k = (_n(per_head[:, :nope]), 0)
        vv = (_n(per_head[:, nope:]), 0)
        q = _linear(getattr(a, "q_b_proj", None) or a.q_proj)
        block = _block(_qualname(model, a), "self", h, h, cfg.hidden_size, nope + rope, v, q, k, vv, _linear(a.o_proj))
        assert block.total + latent_params(a) == sum(p.numel() for p in a.parameters())
        out.append(dataclasses.replace(block, total=sum(p.numel() for p in a.parameters())))
    return tuple(out)


def latent_params(attn: nn.Module) -> int:
    """The parameters of a latent-attention module beside Q/K/V/O: its down-projections and norms."""
    parts = ("q_a_proj", "q_a_layernorm", "kv_a_proj_with_mqa", "kv_a_layernorm")
    return sum(p.numel() for n in parts if (m := getattr(attn, n, None)) is not None for p in m.parameters())


# DeepSeek-V3 at toy size: one dense layer, then an MoE layer (no router in the dense one, so the
# exporters can export at least its first layer's graph), Q through its own latent.
LATENT_CONFIG: dict[str, Any] = dict(
    hidden_size=64, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16,
    qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12, n_routed_experts=4, num_experts_per_tok=2,
    moe_intermediate_size=32, first_k_dense_replace=1, n_group=1, topk_group=1, num_hidden_layers=1,
    intermediate_size=128)


# Gemma 3 at toy size: a SigLIP vision tower (2 heads × 16, one layer, no pooling head, as the
# published checkpoints have it) and a text stack whose heads are left to Gemma3TextConfig's own
# defaults (8 heads, 4 K/V heads, head_dim 256: nothing of that in text_config), one sliding-window
# layer then one full one (sliding_window_pattern 2). Image tokens: 28 px / 7 px patches = 4 × 4
# patches, pooled to mm_tokens_per_image = 4 soft tokens, placed at IMAGE_TOKENS in every sequence.
MULTIMODAL_CONFIG: dict[str, Any] = dict(
    text_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, vocab_size=VOCAB,
                     sliding_window=4, sliding_window_pattern=2),
    vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                       image_size=28, patch_size=7, vision_use_head=False),
    mm_tokens_per_image=4, image_token_index=VOCAB - 1, boi_token_index=VOCAB - 3, eoi_token_index=VOCAB - 2)
IMAGE_TOKENS = slice(2, 6)


def _build_multimodal() -> tuple[nn.Module, tuple]:
    import transformers

    _hf_quiet()
    torch.manual_seed(0)
    config = transformers.Gemma3Config(**MULTIMODAL_CONFIG, attn_implementation="eager")
    config.text_config.use_cache = False  # no DynamicCache among the outputs (the exporters reject it)
    model = _eval(transformers.Gemma3Model(config))
    ids = _ids(BATCH, SEQ) % (VOCAB - 3)  # no image/boi/eoi token by chance
    ids[:, IMAGE_TOKENS] = config.image_token_index
    vision = config.vision_config
    pixels = torch.randn(BATCH, vision.num_channels, vision.image_size, vision.image_size,
                         generator=torch.Generator().manual_seed(1))
    return model, (ids, pixels)


def _truth_multimodal(model: nn.Module) -> tuple[BlockTruth, ...]:
    """The vision tower's blocks (run first: its output replaces the image tokens), then the text
    stack's, each with the heads and head size of its own tower's config (the attention modules'
    own attributes, checked against the projection widths by ``_separate``)."""
    vision, text = model.config.vision_config, model.config.text_config
    names = ("q_proj", "k_proj", "v_proj", "out_proj")
    out = [_separate(model, layer.self_attn, layer.self_attn.num_heads, layer.self_attn.num_heads, vision.hidden_size,
                     layer.self_attn.head_dim, names)
           for layer in model.vision_tower.encoder.layers]
    out += [_separate(model, layer.self_attn, text.num_attention_heads, text.num_key_value_heads, text.hidden_size,
                      layer.self_attn.head_dim)
            for layer in model.language_model.layers]
    return tuple(out)


def _bart_inputs(build: Callable[[], tuple[nn.Module, tuple]]) -> Callable[[], tuple[nn.Module, tuple]]:
    def with_decoder() -> tuple[nn.Module, tuple]:
        model, (ids,) = build()
        return model, (ids, _ids(BATCH, SEQ - 2))

    return with_decoder


_SMALL = {"num_hidden_layers": 2, "intermediate_size": 128}

EXTENDED_CASES: tuple[Case, ...] = (
    Case("qwen3", _build("Qwen3Config", "Qwen3Model", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=32, attn_implementation="sdpa", **_SMALL),
         _truth_decoder, True, ("input_ids",), _TOK, "transformers",
         "Qwen3: head_dim 32 with hidden 64 / 4 heads (h·d_k = 128 ≠ d_model), per-head q_norm/k_norm, GQA"),
    Case("gemma", _build("GemmaConfig", "GemmaModel", hidden_size=64, num_attention_heads=4, num_key_value_heads=1,
                         head_dim=32, attn_implementation="eager", **_SMALL),
         _truth_decoder, True, ("input_ids",), _TOK, "transformers",
         "Gemma: multi-query (1 kv head), head_dim 32 ≠ hidden/heads"),
    Case("qwen2", _build("Qwen2Config", "Qwen2Model", hidden_size=64, num_attention_heads=8, num_key_value_heads=2,
                         attn_implementation="eager", **_SMALL),
         _truth_decoder, True, ("input_ids",), _TOK, "transformers", "Qwen2: GQA with q/k/v biases, o without"),
    Case("gemma2", _build("Gemma2Config", "Gemma2Model", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=32, attn_logit_softcapping=50.0, attn_implementation="eager", **_SMALL),
         _truth_decoder, True, ("input_ids",), _TOK, "transformers",
         "Gemma 2: attention-logit soft-capping (tanh) between Q·Kᵀ and Softmax, head_dim 32 ≠ hidden/heads, GQA"),
    Case("phi3", _build("Phi3Config", "Phi3Model", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                        pad_token_id=0, attn_implementation="eager", **_SMALL),
         _truth_phi3, True, ("input_ids",), _TOK, "transformers",
         "Phi-3: one fused qkv_proj holding 4 query heads and 2 K/V heads (GQA packed in one weight)"),
    Case("falcon", _build("FalconConfig", "FalconModel", hidden_size=64, num_attention_heads=4, multi_query=True,
                          new_decoder_architecture=False, num_hidden_layers=2),
         _truth_falcon, True, ("input_ids",), _TOK, "transformers",
         "Falcon: one fused query_key_value for 4 query heads and 1 shared K/V head (multi-query)"),
    Case("gpt-neox", _build("GPTNeoXConfig", "GPTNeoXModel", hidden_size=64, num_attention_heads=4, rotary_pct=0.25,
                            **_SMALL),
         _truth_neox, True, ("input_ids",), _TOK, "transformers",
         "GPT-NeoX: fused QKV interleaved per head, partial rotary (25%)"),
    Case("deepseek-v3-mla", _build("DeepseekV3Config", "DeepseekV3Model", attn_implementation="eager", **LATENT_CONFIG),
         latent_truth, True, ("input_ids",), _TOK, "transformers",
         "DeepSeek-V3 latent attention (MLA): Q from its own latent, K/V up-projected per head from one compressed "
         "latent plus a rotary key shared by the heads; d_k = qk_nope + qk_rope ≠ d_v"),
    Case("gemma3-vlm", _build_multimodal, _truth_multimodal, True, ("input_ids", "pixel_values"),
         {}, "transformers",
         "Gemma 3 vision-language model: a SigLIP tower (2 heads × 16) and a text stack of 8 heads / 4 K/V "
         "heads × head_dim 256 on d_model 64 that its config leaves to Gemma3TextConfig's defaults; one "
         "sliding-window layer (window 4), one full. Static shapes: the image tokens sit at fixed positions. "
         "Exported with TRANSFORMERS_DISABLE_TORCH_CHECK=1, transformers' documented switch for its input "
         "checks: the image-token count check becomes aten._is_all_true, which the dynamo exporter cannot "
         "convert (ConversionError: No ONNX function found for aten._is_all_true)",
         export_env={"TRANSFORMERS_DISABLE_TORCH_CHECK": "1"}),
    Case("bart", _bart_inputs(_build("BartConfig", "BartModel", tuple_outputs=False, d_model=64, encoder_attention_heads=4,
                                     decoder_attention_heads=4, encoder_layers=1, decoder_layers=1,
                                     encoder_ffn_dim=128, decoder_ffn_dim=128)),
         _truth_bart, True, ("input_ids", "decoder_input_ids"),
         {**_TOK, "decoder_input_ids": {0: "batch", 1: "dec_seq"}}, "transformers",
         "BART: encoder self, decoder self and cross attention with out_proj"),
)

# One exporter keeps the default suite fast; MHAINSPECT_CONFORMANCE_FULL=1 runs all variants.
DEFAULT_VARIANTS = ("dynamo-18",)

__all__ = ["EXTENDED_CASES", "DEFAULT_VARIANTS"]
