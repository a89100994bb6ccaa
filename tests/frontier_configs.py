"""config.json dicts shaped after the published configs of 2025-26 hybrid and frontier decoders (the
keys their Hub folders write, with their real widths and layer counts), for real-size folders of
safetensors headers (tests/hybrid_models.py ``meta_folder``). Only what the figures depend on is
kept; a key the file leaves out takes the config class's default, as transformers reads it."""

from __future__ import annotations

from typing import Any

_BF16 = {"torch_dtype": "bfloat16", "tie_word_embeddings": False}

FRONTIER: dict[str, tuple[str, dict[str, Any]]] = {
    # name: (model_type, config.json)
    "Qwen3-Next-80B-A3B": ("qwen3_next", {
        "architectures": ["Qwen3NextForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 48,
        "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": 5120,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
        "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "vocab_size": 151936, "max_position_embeddings": 262144, **_BF16}),
    "MiniMax-Text-01": ("minimax", {
        "architectures": ["MiniMaxForCausalLM"], "hidden_size": 6144, "num_hidden_layers": 80,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 9216,
        "num_local_experts": 32, "num_experts_per_tok": 2, "vocab_size": 200064,
        "layer_types": (["linear_attention"] * 7 + ["full_attention"]) * 10,
        "max_position_embeddings": 10240000, **_BF16}),
    "Kimi-Linear-48B-A3B": ("kimi_linear", {
        "architectures": ["KimiLinearForCausalLM"], "hidden_size": 2304, "num_hidden_layers": 27,
        "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 72, "kv_lora_rank": 512,
        "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "intermediate_size": 9216, "moe_intermediate_size": 1024, "num_experts": 256, "num_experts_per_tok": 8,
        "num_shared_experts": 1, "first_k_dense_replace": 1, "vocab_size": 163840,
        "linear_attn_config": {"full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
                               "kda_layers": [i for i in range(1, 28) if i not in (4, 8, 12, 16, 20, 24, 27)],
                               "head_dim": 128, "num_heads": 32, "short_conv_kernel_size": 4},
        "pad_token_id": 163839, "bos_token_id": 163584, "eos_token_id": 163585, **_BF16}),
    "Jamba-v0.1": ("jamba", {
        "architectures": ["JambaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "attn_layer_period": 8, "attn_layer_offset": 4, "expert_layer_period": 2, "expert_layer_offset": 1,
        "num_experts": 16, "num_experts_per_tok": 2, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
        "mamba_dt_rank": 256, "vocab_size": 65536, "max_position_embeddings": 262144, **_BF16}),
    "Bamba-9B": ("bamba", {
        "architectures": ["BambaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "attn_layer_indices": [9, 18, 27], "mamba_n_heads": 128, "mamba_d_head": 64, "mamba_d_state": 128,
        "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2, "vocab_size": 128256, **_BF16}),
    "Zamba2-2.7B": ("zamba2", {
        "architectures": ["Zamba2ForCausalLM"], "hidden_size": 2560, "num_hidden_layers": 54,
        "num_attention_heads": 32, "num_key_value_heads": 32, "num_mem_blocks": 2, "mamba_d_state": 64,
        "n_mamba_heads": 80, "mamba_ngroups": 1, "mamba_d_conv": 4, "mamba_expand": 2, "adapter_rank": 128,
        "use_shared_attention_adapter": False, "vocab_size": 32000, "torch_dtype": "bfloat16",
        "tie_word_embeddings": True}),
    "Falcon-H1-7B": ("falcon_h1", {
        "architectures": ["FalconH1ForCausalLM"], "hidden_size": 3072, "num_hidden_layers": 44,
        "num_attention_heads": 12, "num_key_value_heads": 2, "head_dim": 128, "intermediate_size": 12288,
        "mamba_d_ssm": 3072, "mamba_n_heads": 24, "mamba_d_head": 128, "mamba_d_state": 256, "mamba_n_groups": 1,
        "mamba_d_conv": 4, "mamba_expand": 2, "vocab_size": 130048, **_BF16}),
    "Nemotron-H-8B": ("nemotron_h", {
        "architectures": ["NemotronHForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 21504,
        "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
        "vocab_size": 131072, **_BF16}),
    "Granite-4.0-H-Tiny": ("granitemoehybrid", {
        "architectures": ["GraniteMoeHybridForCausalLM"], "hidden_size": 1536, "num_hidden_layers": 40,
        "num_attention_heads": 12, "num_key_value_heads": 4, "intermediate_size": 512,
        "shared_intermediate_size": 1024, "num_local_experts": 64, "num_experts_per_tok": 6,
        "layer_types": ["mamba" if i not in (5, 15, 25, 35) else "attention" for i in range(40)],
        "mamba_n_heads": 48, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4,
        "mamba_expand": 2, "vocab_size": 100352, "torch_dtype": "bfloat16", "tie_word_embeddings": True}),
    "LFM2-1.2B": ("lfm2", {
        "architectures": ["Lfm2ForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 12288,
        "block_auto_adjust_ff_dim": True, "block_ff_dim": 12288, "block_multiple_of": 256,
        "block_ffn_dim_multiplier": 1.0, "full_attn_idxs": [2, 5, 8, 10, 12, 14], "conv_L_cache": 3,
        "vocab_size": 65536, "torch_dtype": "bfloat16", "tie_word_embeddings": True}),
    "Gemma-3n-E4B (text)": ("gemma3n_text", {
        "architectures": ["Gemma3nForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 35,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": [16384] * 35,
        "sliding_window": 512, "num_kv_shared_layers": 15,
        "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 7, "vocab_size": 262400,
        "vocab_size_per_layer_input": 262144, "hidden_size_per_layer_input": 256, "altup_num_inputs": 4,
        "laurel_rank": 64, "activation_sparsity_pattern": [0.95] * 10 + [0.0] * 25,
        "torch_dtype": "bfloat16", "tie_word_embeddings": True}),
    "Llama-4-Scout-17B-16E (text)": ("llama4_text", {
        "architectures": ["Llama4ForCausalLM"], "hidden_size": 5120, "num_hidden_layers": 48,
        "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_local_experts": 16, "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1, "attention_chunk_size": 8192, "vocab_size": 202048,
        "max_position_embeddings": 10485760, **_BF16}),
    "DeepSeek-V3.2-Exp": ("deepseek_v32", {
        "architectures": ["DeepseekV32ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512, "q_lora_rank": 1536,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "intermediate_size": 18432,
        "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
        "first_k_dense_replace": 3, "n_group": 8, "topk_group": 4, "index_head_dim": 128, "index_n_heads": 64,
        "index_topk": 2048, "vocab_size": 129280, "max_position_embeddings": 163840, **_BF16}),
    "gpt-oss-20b": ("gpt_oss", {
        "architectures": ["GptOssForCausalLM"], "hidden_size": 2880, "num_hidden_layers": 24,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880,
        "num_local_experts": 32, "num_experts_per_tok": 4, "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 12, "vocab_size": 201088,
        "max_position_embeddings": 131072, **_BF16}),
}
