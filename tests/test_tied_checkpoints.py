"""Tied weights a checkpoint stores twice: the config declares the tie (each architecture's
default when the key is absent), so the parameters count once, as the module counts them, while
the bytes of both copies are what the files hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mhainspect.frontends.checkpoint.hf_config import tied_copies
from mhainspect.pipeline import audit, audit_module

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")
transformers.logging.set_verbosity_error()


def _copies(model: Any) -> dict[str, Any]:
    """The state dict with every tensor its own storage (as older transformers and sharded .bin files wrote)."""
    return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


def _write(folder: Path, config: dict[str, Any], shards: list[dict[str, Any]], fmt: str) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    if fmt == "safetensors":
        safetensors_torch.save_file(shards[0], str(folder / "model.safetensors"))
        return folder
    names = [f"pytorch_model-{i + 1:05d}-of-{len(shards):05d}.bin" for i in range(len(shards))]
    for name, shard in zip(names, shards):
        torch.save(shard, folder / name)
    if len(shards) > 1:
        weight_map = {k: name for name, shard in zip(names, shards) for k in shard}
        (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


@pytest.mark.parametrize("fmt", ["bin", "safetensors"])
def test_llama_with_lm_head_and_embedding_both_stored(fmt: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                      num_hidden_layers=1, intermediate_size=128, tie_word_embeddings=True)
    model = transformers.LlamaForCausalLM(config)
    state = _copies(model)
    assert {"lm_head.weight", "model.embed_tokens.weight"} <= set(state)
    folder = _write(tmp_path / "llama", model.config.to_dict(), [state], fmt)
    report = audit(folder)
    assert report.model.total_params == audit_module(model, trace=False).model.total_params == 41_152
    assert report.model.weight_bytes == 4 * (41_152 + 64 * 64)  # both copies are on disk
    # The copy is stored but not a parameter: overhead (weight_bytes = parameter bytes + overhead).
    assert report.model.weight_bytes_overhead == 4 * 64 * 64
    assert any("lm_head.weight = model.embed_tokens.weight" in w for w in report.warnings)


def test_gpt2_default_tie_with_a_copy_in_each_shard(tmp_path: Path) -> None:
    """No tie_word_embeddings key: GPT-2's default (true) applies; the copies sit in different shards."""
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=64, n_embd=32, n_head=4, n_layer=1,
                                                                 n_positions=16))
    state = _copies(model)
    config = model.config.to_dict()
    config.pop("tie_word_embeddings", None)
    first = {k: v for k, v in state.items() if k.startswith("transformer.h.") or k == "transformer.wte.weight"}
    second = {k: v for k, v in state.items() if k not in first}
    report = audit(_write(tmp_path / "gpt2", config, [first, second], "bin"))
    assert report.model.total_params == audit_module(model, trace=False).model.total_params


def test_llama_default_is_untied() -> None:
    """Llama's config class defaults to untied: two stored matrices are two parameters."""
    shapes = {"lm_head.weight": (64, 32), "model.embed_tokens.weight": (64, 32)}
    assert tied_copies({"model_type": "llama", "vocab_size": 64}, shapes) == ()
    assert tied_copies({"model_type": "llama", "vocab_size": 64, "tie_word_embeddings": True}, shapes)


def test_encoder_decoder_ties() -> None:
    """T5 as flan-t5 says it (tie_word_embeddings false): the stacks' embeddings are the shared one,
    the LM head is its own; tie_encoder_decoder (transformers 4): the decoder's weights are the encoder's."""
    shapes = {"shared.weight": (64, 32), "encoder.embed_tokens.weight": (64, 32),
              "decoder.embed_tokens.weight": (64, 32), "lm_head.weight": (64, 32),
              "encoder.block.0.layer.0.SelfAttention.q.weight": (32, 32),
              "decoder.block.0.layer.0.SelfAttention.q.weight": (32, 32),
              "decoder.block.0.layer.1.EncDecAttention.q.weight": (32, 32)}
    flan = {"model_type": "t5", "is_encoder_decoder": True, "tie_word_embeddings": False, "vocab_size": 64}
    assert {(t.copy, t.source) for t in tied_copies(flan, shapes)} == {
        ("encoder.embed_tokens.weight", "shared.weight"), ("decoder.embed_tokens.weight", "shared.weight")}
    shared = {(t.copy, t.source) for t in tied_copies({**flan, "tie_encoder_decoder": True}, shapes)}
    assert ("decoder.block.0.layer.0.SelfAttention.q.weight", "encoder.block.0.layer.0.SelfAttention.q.weight") in shared
    assert not any(c.startswith("decoder.block.0.layer.1") for c, _ in shared)
    # EncoderDecoderModel: the decoder's base model sits one level down.
    bert2bert = {"encoder.encoder.layer.0.attention.self.query.weight": (32, 32),
                 "decoder.bert.encoder.layer.0.attention.self.query.weight": (32, 32)}
    assert [(t.copy, t.source) for t in tied_copies({"is_encoder_decoder": True, "tie_encoder_decoder": True},
                                                     bert2bert)] == [
        ("decoder.bert.encoder.layer.0.attention.self.query.weight",
         "encoder.encoder.layer.0.attention.self.query.weight")]


def _bert2bert(tmp_path: Path) -> Path:
    """A BERT2BERT EncoderDecoderModel whose config ties the decoder to the encoder, saved as a folder
    with every tensor stored (transformers 5 no longer ties the live module)."""
    torch.manual_seed(0)
    small = {"vocab_size": 64, "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 1,
             "intermediate_size": 64, "max_position_embeddings": 16}
    config = transformers.EncoderDecoderConfig.from_encoder_decoder_configs(
        transformers.BertConfig(**small),
        transformers.BertConfig(**small, is_decoder=True, add_cross_attention=True), tie_encoder_decoder=True)
    model = transformers.EncoderDecoderModel(config)
    return _write(tmp_path / "bert2bert", model.config.to_dict(), [_copies(model)], "safetensors")


def test_tie_encoder_decoder_counts_the_attention_weights_once(tmp_path: Path) -> None:
    """The decoder's self-attention is a tied copy of the encoder's: its weights count in the block
    of the tie's source (the encoder's, though the decoder's comes first in name order); the copy
    counts 0 with the graph's same_weights note."""
    report = audit(_bert2bert(tmp_path))
    per_block = {b.name: b.params.total for b in report.blocks}
    one = 4 * (32 * 32 + 32)
    assert per_block == {"decoder.bert.encoder.layer.0.attention": 0,
                         "decoder.bert.encoder.layer.0.crossattention": one, "encoder.encoder.layer.0.attention": one}
    assert report.model.attention_params == 2 * one
    tied = next(b for b in report.blocks if b.name == "decoder.bert.encoder.layer.0.attention")
    notes = [e.detail for e in tied.evidence if e.source == "same_weights"]
    assert notes[0] == ("Q projection decoder.bert.encoder.layer.0.attention.self.query.weight is shared with "
                        "encoder.encoder.layer.0.attention: counted there")
    assert [p.weight_params + p.bias_params for p in tied.projections] == [0, 0, 0, 0]


class _Attention(torch.nn.Module):
    def __init__(self, k: Any = None) -> None:
        super().__init__()
        self.num_heads, self.head_dim = 4, 8
        self.q_proj, self.v_proj, self.o_proj = (torch.nn.Linear(32, 32) for _ in range(3))
        self.k_proj = k if k is not None else torch.nn.Linear(32, 32)


def test_module_blocks_sharing_a_linear_under_two_names() -> None:
    """Cross-layer K sharing: one Linear is ``a.k_proj`` and ``b.k_proj``; it counts in ``a`` only (the
    ONNX export of the same model gives the same numbers), so attention_params never exceeds total."""
    model = torch.nn.Module()
    model.a = _Attention()
    model.b = _Attention(k=model.a.k_proj)
    report = audit_module(model, trace=False)
    assert [(b.name, b.params.k, b.params.total) for b in report.blocks] == [("a", 1056, 4224), ("b", 0, 3168)]
    assert report.model.attention_params == report.model.total_params == 7 * 1056
    assert [e.detail for e in report.blocks[1].evidence if e.source == "same_weights"] == [
        "K projection b.k_proj.weight is shared with a: counted there"]


def _bert2bert_state(tie_encoder_decoder: bool) -> tuple[Any, dict[str, Any]]:
    torch.manual_seed(0)
    small = {"vocab_size": 64, "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 1,
             "intermediate_size": 64, "max_position_embeddings": 16}
    config = transformers.EncoderDecoderConfig.from_encoder_decoder_configs(
        transformers.BertConfig(**small), transformers.BertConfig(**small, is_decoder=True, add_cross_attention=True),
        tie_encoder_decoder=tie_encoder_decoder)
    model = transformers.EncoderDecoderModel(config)
    return model, _copies(model)


def test_nested_decoder_config_ties_its_head(tmp_path: Path) -> None:
    """The decoder's own config ties its MLM head to its word embeddings (``decoder.tie_word_embeddings``,
    which transformers applies to the decoder sub-model; the top-level config says nothing): with
    every tensor stored, the folder counts what the module counts (shared parameters once)."""
    model, state = _bert2bert_state(False)
    folder = _write(tmp_path / "b2b", model.config.to_dict(), [state], "safetensors")
    report = audit(folder)
    assert report.model.total_params == sum(p.numel() for p in model.parameters()) == 28_992
    assert any("decoder.cls.predictions.decoder.weight = decoder.bert.embeddings.word_embeddings.weight "
               "(decoder.tie_word_embeddings=true)" in w for w in report.warnings)


def test_nested_ties_with_tie_encoder_decoder_match_save_pretrained(tmp_path: Path) -> None:
    """tie_encoder_decoder (which transformers 5 no longer applies in memory) plus the decoder's head
    tie: every tensor stored counts what save_pretrained's folder (the head dropped) counts, and the
    head's chain ends at the encoder's embedding, the stored source."""
    model, state = _bert2bert_state(True)
    every = audit(_write(tmp_path / "every", model.config.to_dict(), [state], "safetensors"))
    model.save_pretrained(tmp_path / "pretrained")
    pretrained = audit(tmp_path / "pretrained")
    assert every.model.total_params == pretrained.model.total_params == 17_760
    ties = {t.copy: t.source for t in tied_copies(model.config.to_dict(), {k: tuple(v.shape) for k, v in state.items()})}
    assert ties["decoder.cls.predictions.decoder.weight"] == "encoder.embeddings.word_embeddings.weight"


def test_nested_text_config_ties_only_the_language_model() -> None:
    """A composite config (transformers 4's LLaVA layout): the text config's tie applies to the
    language model's weights; a vision config that says tie_word_embeddings (every v4 config dict
    did) ties nothing in the tower."""
    shapes = {"language_model.lm_head.weight": (64, 32), "language_model.model.embed_tokens.weight": (64, 32),
              "vision_tower.vision_model.embeddings.weight": (32, 3),
              "vision_tower.vision_model.head.weight": (32, 3)}
    cfg = {"model_type": "llava", "text_config": {"model_type": "llama", "tie_word_embeddings": True, "vocab_size": 64},
           "vision_config": {"model_type": "clip_vision_model", "tie_word_embeddings": True}}
    assert [(t.copy, t.source, t.said) for t in tied_copies(cfg, shapes)] == [
        ("language_model.lm_head.weight", "language_model.model.embed_tokens.weight",
         "text_config.tie_word_embeddings=true")]
    untied = {**cfg, "text_config": {**cfg["text_config"], "tie_word_embeddings": False}}
    assert tied_copies(untied, shapes) == ()
