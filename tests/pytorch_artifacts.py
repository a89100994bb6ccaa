"""Modules and the PyTorch artifacts built from them (torch.export.save .pt2 with dynamic shapes,
torch.jit.trace / torch.jit.script archives), for tests/test_pytorch_archives.py.

Every model has random weights plus a little noise on every parameter (tests/random_weights.py):
nothing is downloaded. Each builder returns the module (eval mode), example inputs as a tuple of
positional tensors, and the dims to export as dynamic.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from random_weights import add_noise
from torch import nn


@dataclass
class Built:
    module: nn.Module
    inputs: tuple[Any, ...]
    dynamic: tuple[dict[int, str], ...]  # per input: dim -> name


class MhaBlock(nn.Module):
    """nn.MultiheadAttention in a transformer block (pre-norm, feed-forward)."""

    def __init__(self, d: int = 32, h: int = 4) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        a, _ = self.attn(y, y, y, need_weights=False)
        x = x + a
        return x + self.ff(x)


def _clones(module: nn.Module, n: int) -> nn.ModuleList:
    return nn.ModuleList([copy.deepcopy(module) for _ in range(n)])


class AnnotatedAttention(nn.Module):
    """The Annotated Transformer's MultiHeadedAttention (view-based heads), as published."""

    def __init__(self, h: int, d_model: int, dropout: float = 0.1) -> None:
        super().__init__()
        assert d_model % h == 0
        self.d_k = d_model // h
        self.h = h
        self.linears = _clones(nn.Linear(d_model, d_model), 4)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        nbatches = query.size(0)
        query, key, value = [lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
                             for lin, x in zip(self.linears, (query, key, value))]
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(self.d_k)
        p_attn = self.dropout(scores.softmax(dim=-1))
        x = torch.matmul(p_attn, value)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](x)


class AnnotatedLayer(nn.Module):
    """Self-attention with the Annotated Transformer's heads, as an encoder layer calls it."""

    def __init__(self, h: int, d_model: int = 64) -> None:
        super().__init__()
        self.self_attn = AnnotatedAttention(h, d_model)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        return x + self.self_attn(y, y, y)


def mha_block() -> Built:
    torch.manual_seed(0)
    return Built(add_noise(MhaBlock()), (torch.randn(2, 8, 32),), ({0: "batch", 1: "seq"},))


def annotated(h: int) -> Callable[[], Built]:
    def build() -> Built:
        torch.manual_seed(0)
        return Built(add_noise(AnnotatedLayer(h)), (torch.randn(2, 8, 64),), ({0: "batch", 1: "seq"},))

    return build


class _Ids(nn.Module):
    """A transformers model as a function of input_ids alone (no cache, a plain tensor out)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=input_ids)
        return out[0]


def _transformers() -> Any:
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def bert() -> Built:
    transformers = _transformers()
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=32, attn_implementation="eager")
    model = add_noise(transformers.BertModel(cfg))
    return Built(model, (torch.randint(0, 100, (2, 8)),), ({0: "batch", 1: "seq"},))


def llama_gqa() -> Built:
    transformers = _transformers()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                                   num_key_value_heads=2, intermediate_size=96, max_position_embeddings=32,
                                   attn_implementation="eager", use_cache=False)
    model = add_noise(transformers.LlamaForCausalLM(cfg))
    return Built(model, (torch.randint(0, 100, (2, 8)),), ({0: "batch", 1: "seq"},))


BUILDERS: dict[str, Callable[[], Built]] = {
    "mha_block": mha_block, "annotated_h8": annotated(8), "annotated_h1": annotated(1), "bert": bert,
    "llama_gqa": llama_gqa,
}


def export_pt2(built: Built, path: Path) -> Path:
    """torch.export with the builder's dims dynamic (Dim.AUTO: export keeps each one a symbol
    unless the model pins it), saved with torch.export.save."""
    from torch.export import Dim

    shapes = tuple({d: Dim.AUTO for d in spec} for spec in built.dynamic)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(built.module, built.inputs, dynamic_shapes=shapes, strict=False)
        torch.export.save(program, str(path))
    return path


def is_transformers(module: nn.Module) -> bool:
    return type(module).__module__.startswith("transformers.")


def trace_ts(built: Built, path: Path) -> Path:
    """torch.jit.trace (a transformers model's dict output allowed: strict=False), saved."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(built.module, built.inputs, check_trace=False, strict=False)
        traced.save(str(path))
    return path


def script_ts(built: Built, path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(built.module)
        scripted.save(str(path))
    return path
