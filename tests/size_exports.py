"""Small decoders exported with their KV cache (past_key_values.* in, present.* out) for the size tests.

Built from transformers configs with random weights (noise added to every parameter, so no bias is
all zeros), exported with torch.onnx.export (TorchScript exporter, fast) and run once with
onnxruntime by the tests. Nothing is downloaded.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tests.random_weights import add_noise

BATCH = 2
PAST = 3  # past tokens fed to the run
NEW = 2  # new tokens in the run: the present outputs hold PAST + NEW tokens (capped for sliding layers)
ENCODER_TOKENS = 6  # encoder sequence length for encoder-decoders (T5) / audio frames after the conv (Whisper)


@dataclass(frozen=True)
class Export:
    """An exported model, the feed for one run, and what the run's context is."""

    path: Path
    feed: dict[str, np.ndarray]
    context: int  # tokens the decoder's self-attention cache holds after the run (before any window)
    encoder_tokens: int | None = None


def _export(module: nn.Module, args: tuple[Any, ...], path: Path, inputs: list[str], outputs: list[str],
            dynamic: dict[str, dict[int, str]]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(path), input_names=inputs, output_names=outputs,
                          dynamic_axes=dynamic, dynamo=False, opset_version=17)


class _CausalLM(nn.Module):
    """input_ids, attention_mask, past_key_values.{i}.key/value -> logits, present.{i}.key/value."""

    def __init__(self, model: nn.Module, layers: int, cache_config: Any) -> None:
        super().__init__()
        self.model, self.layers, self.cache_config = model, layers, cache_config

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from transformers.cache_utils import DynamicCache

        cache = DynamicCache(config=self.cache_config)
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        res = [out.logits]
        for layer in out.past_key_values.layers[: self.layers]:
            res += [layer.keys, layer.values]
        return tuple(res)


def causal_lm(model: nn.Module, config: Any, path: Path, *, kv_heads: int, head_dim: int,
              dtype: torch.dtype = torch.float32, past_len: int = PAST) -> Export:
    """Export a causal LM with its cache; ``past_len`` past tokens (at most the window - 1 of a
    sliding layer), NEW new tokens."""
    layers = config.num_hidden_layers
    model = add_noise(model).to(dtype)
    ids = torch.randint(0, config.vocab_size, (BATCH, NEW))
    mask = torch.ones(BATCH, past_len + NEW, dtype=torch.long)
    past = [torch.randn(BATCH, kv_heads, past_len, head_dim, dtype=dtype) for _ in range(2 * layers)]
    names_in = ["input_ids", "attention_mask"] + [f"past_key_values.{i}.{kv}" for i in range(layers)
                                                  for kv in ("key", "value")]
    names_out = ["logits"] + [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    dynamic = {n: {0: "batch", 2: "past_sequence_length"} for n in names_in[2:]}
    dynamic.update({"input_ids": {0: "batch", 1: "sequence_length"},
                    "attention_mask": {0: "batch", 1: "total_sequence_length"}})
    _export(_CausalLM(model, layers, config), (ids, mask, *past), path, names_in, names_out, dynamic)
    config.to_json_file(str(path.parent / "config.json"))
    feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    feed.update({n: t.numpy() for n, t in zip(names_in[2:], past)})
    return Export(path, feed, past_len + NEW)


class _Seq2Seq(nn.Module):
    """Encoder input, decoder_input_ids, past self-attention K/V -> logits, present.{i}.decoder.key/value
    (self-attention) and present.{i}.encoder.key/value (cross-attention, computed in this run)."""

    def __init__(self, model: nn.Module, layers: int, encoder_arg: str) -> None:
        super().__init__()
        self.model, self.layers, self.encoder_arg = model, layers, encoder_arg

    def forward(self, enc: torch.Tensor, dec: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        self_cache = DynamicCache()
        for i in range(self.layers):
            self_cache.update(past[2 * i], past[2 * i + 1], i)
        cache = EncoderDecoderCache(self_cache, DynamicCache())
        out = self.model(**{self.encoder_arg: enc}, decoder_input_ids=dec, past_key_values=cache, use_cache=True)
        res = [out.logits]
        pkv = out.past_key_values
        for i in range(self.layers):
            res += [pkv.self_attention_cache.layers[i].keys, pkv.self_attention_cache.layers[i].values]
        for i in range(self.layers):
            res += [pkv.cross_attention_cache.layers[i].keys, pkv.cross_attention_cache.layers[i].values]
        return tuple(res)


def seq2seq(model: nn.Module, config: Any, path: Path, *, encoder_input: torch.Tensor, encoder_arg: str,
            encoder_tokens: int, layers: int, kv_heads: int, head_dim: int, vocab: int) -> Export:
    model = add_noise(model)
    dec = torch.randint(0, vocab, (BATCH, NEW))
    past = [torch.randn(BATCH, kv_heads, PAST, head_dim) for _ in range(2 * layers)]
    names_in = [encoder_arg, "decoder_input_ids"] + [f"past_key_values.{i}.decoder.{kv}" for i in range(layers)
                                                     for kv in ("key", "value")]
    names_out = (["logits"] + [f"present.{i}.decoder.{kv}" for i in range(layers) for kv in ("key", "value")]
                 + [f"present.{i}.encoder.{kv}" for i in range(layers) for kv in ("key", "value")])
    dynamic = {n: {0: "batch", 2: "past_decoder_sequence_length"} for n in names_in[2:]}
    dynamic.update({"decoder_input_ids": {0: "batch", 1: "decoder_sequence_length"}})
    dynamic[encoder_arg] = {0: "batch"}
    _export(_Seq2Seq(model, layers, encoder_arg), (encoder_input, dec, *past), path, names_in, names_out, dynamic)
    config.to_json_file(str(path.parent / "config.json"))
    feed = {encoder_arg: encoder_input.numpy(), "decoder_input_ids": dec.numpy()}
    feed.update({n: t.numpy() for n, t in zip(names_in[2:], past)})
    return Export(path, feed, PAST + NEW, encoder_tokens)


def _dir(root: Path, name: str) -> Path:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    return d / "model.onnx"


def gpt2(root: Path) -> Export:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    return causal_lm(GPT2LMHeadModel(cfg), cfg, _dir(root, "gpt2"), kv_heads=4, head_dim=8)


def llama(root: Path, kv_heads: int, name: str, dtype: torch.dtype = torch.float32) -> Export:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=kv_heads, max_position_embeddings=64)
    return causal_lm(LlamaForCausalLM(cfg), cfg, _dir(root, name), kv_heads=kv_heads, head_dim=8, dtype=dtype)


WINDOW = 4  # sliding window of the Mistral-style and hybrid models: layers keep WINDOW - 1 past tokens


def mistral(root: Path) -> Export:
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, max_position_embeddings=64, sliding_window=WINDOW)
    return causal_lm(MistralForCausalLM(cfg), cfg, _dir(root, "mistral"), kv_heads=2, head_dim=8,
                     past_len=WINDOW - 1)


def hybrid(root: Path) -> Export:
    """Sliding and full layers alternating (gpt-oss, Gemma 2 style), declared by layer_types."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, max_position_embeddings=64, sliding_window=WINDOW,
                      use_sliding_window=True, max_window_layers=0,
                      layer_types=["sliding_attention", "full_attention"])
    return causal_lm(Qwen3ForCausalLM(cfg), cfg, _dir(root, "hybrid"), kv_heads=2, head_dim=8,
                     past_len=WINDOW - 1)


def t5(root: Path) -> Export:
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                   decoder_start_token_id=0)
    ids = torch.randint(0, 64, (BATCH, ENCODER_TOKENS))
    return seq2seq(T5ForConditionalGeneration(cfg), cfg, _dir(root, "t5"), encoder_input=ids, encoder_arg="input_ids",
                   encoder_tokens=ENCODER_TOKENS, layers=2, kv_heads=4, head_dim=8, vocab=64)


def whisper(root: Path) -> Export:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    frames = ENCODER_TOKENS
    cfg = WhisperConfig(vocab_size=64, num_mel_bins=8, d_model=32, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                        max_source_positions=frames, max_target_positions=32, pad_token_id=0, bos_token_id=1,
                        eos_token_id=2, decoder_start_token_id=1)
    features = torch.randn(BATCH, 8, 2 * frames)
    return seq2seq(WhisperForConditionalGeneration(cfg), cfg, _dir(root, "whisper"), encoder_input=features,
                   encoder_arg="input_features", encoder_tokens=frames, layers=2, kv_heads=4, head_dim=8, vocab=64)


BUILDERS: dict[str, Callable[[Path], Export]] = {
    "gpt2": gpt2,
    "llama_gqa": lambda root: llama(root, 2, "llama_gqa"),
    "llama_mqa": lambda root: llama(root, 1, "llama_mqa"),
    "llama_fp16": lambda root: llama(root, 2, "llama_fp16", torch.float16),
    "mistral": mistral,
    "hybrid": hybrid,
    "t5": t5,
    "whisper": whisper,
}


def run(export: Export, path: Path | None = None) -> dict[str, np.ndarray]:
    """Output name -> array of one onnxruntime run (CPU)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path or export.path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, export.feed)))
