"""A Llama-3-8B-shaped Hugging Face folder for tests of how big models read: config.json and a
safetensors file whose tensor data is a sparse hole (the header is all an audit reads)."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

LAYERS, HEADS, KV_HEADS, HIDDEN, FFN, VOCAB = 32, 32, 8, 4096, 14336, 128256


# Llama-3-70B: 80 layers of 64 query and 8 K/V heads of 128, width 8192, MLP 28,672.
LLAMA_70B = {"layers": 80, "heads": 64, "kv_heads": 8, "hidden": 8192, "ffn": 28672}


def write_llama_folder(folder: Path, layers: int = LAYERS, *, heads: int = HEADS, kv_heads: int = KV_HEADS,
                       hidden: int = HIDDEN, ffn: int = FFN, vocab: int = VOCAB) -> Path:
    """config.json and model.safetensors (bfloat16, Llama-3-8B shapes unless told: LLAMA_70B); the
    tensor data is a sparse hole, so the folder costs a few kilobytes."""
    HEADS, KV_HEADS, HIDDEN, FFN, VOCAB = heads, kv_heads, hidden, ffn, vocab  # noqa: N806 (the shapes below)
    folder.mkdir(parents=True, exist_ok=True)
    head_dim = HIDDEN // HEADS
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
              "intermediate_size": FFN, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
              "num_hidden_layers": layers, "vocab_size": VOCAB, "max_position_embeddings": 8192,
              "torch_dtype": "bfloat16", "tie_word_embeddings": False}
    (folder / "config.json").write_text(json.dumps(config))
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,),
                                          "lm_head.weight": (VOCAB, HIDDEN)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (HEADS * head_dim, HIDDEN),
                       p + "self_attn.k_proj.weight": (KV_HEADS * head_dim, HIDDEN),
                       p + "self_attn.v_proj.weight": (KV_HEADS * head_dim, HIDDEN),
                       p + "self_attn.o_proj.weight": (HIDDEN, HEADS * head_dim),
                       p + "mlp.gate_proj.weight": (FFN, HIDDEN), p + "mlp.up_proj.weight": (FFN, HIDDEN),
                       p + "mlp.down_proj.weight": (HIDDEN, FFN), p + "input_layernorm.weight": (HIDDEN,),
                       p + "post_attention_layernorm.weight": (HIDDEN,)})
    header: dict[str, Any] = {}
    offset = 0
    for name, shape in shapes.items():
        size = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    with open(folder / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)  # a hole: no data is written
    return folder
