"""Model zoo + ONNX export harness for the mhainspect real-world conformance suite.

Every model is built from its config / constructor with random weights (seeded); nothing is
downloaded.  Ground truth for each attention block is read from the torch modules themselves
(``num_heads`` attributes, config values, projection weight shapes) and cross-checked for
consistency, never hard-coded.

Usage::

    python -m tests.conformance.zoo OUTDIR [-k SUBSTR] [--variant NAME] [--force] [-j N]

Writes ``OUTDIR/<case>__<variant>.onnx`` and ``OUTDIR/manifest.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import functools
import io
import json
import logging
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

BATCH = 2
SEQ = 8
SEQ_DEC = 6  # decoder / cross-attention query length (distinct from SEQ on purpose)
SEQ_KV = 10  # key/value length for the torch cross-attention case
VOCAB = 100
SEED = 0


# --------------------------------------------------------------------------------------
# Ground-truth records
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockTruth:
    """Ground truth for one attention block (parameter counts are weight+bias numels)."""

    name_hint: str  # qualified torch module name of the attention block (e.g. "encoder.layer.0.attention")
    kind: str  # "self" | "cross"
    num_heads: int
    num_kv_heads: int
    d_model: int
    d_k: int
    d_v: int
    q: int
    k: int
    v: int
    o: int
    bias: int
    total: int

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def count_params(model: nn.Module) -> int:
    """Total parameter count as torch reports it (tied/shared parameters counted once)."""
    return sum(p.numel() for p in model.parameters())


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], tuple[nn.Module, tuple]]  # -> (module in eval mode, example inputs)
    truth: Callable[[nn.Module], tuple[BlockTruth, ...]]  # graph/execution order
    has_attention: bool
    input_names: tuple[str, ...]  # forward() keyword names of the example inputs, in order
    # input name -> {axis: symbolic name}; axes exported as dynamic when the exporter accepts them
    dynamic_axes: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    family: str = ""  # "transformers" | "torch" | "control"
    notes: str = ""
    # Environment variables set while the case is exported (a library's documented switch the
    # exporters need), each with its reason in the case's notes.
    export_env: Mapping[str, str] = field(default_factory=dict)

    @functools.cached_property
    def total_params(self) -> int:  # computed from a fresh build (works on frozen dataclasses)
        model, _ = self.build()
        return count_params(model)

    def kwargs(self, inputs: tuple) -> dict[str, Any]:
        return dict(zip(self.input_names, inputs))


@dataclass(frozen=True)
class Variant:
    name: str
    dynamo: bool
    opset: int


@dataclass(frozen=True)
class ExportResult:
    path: Path | None
    error: str | None
    dynamic: bool  # True iff the written graph has at least one symbolic input dim
    dynamic_error: str | None = None  # why the dynamic attempt failed (static fallback used)
    seconds: float = 0.0
    cached: bool = False
    ort: str | None = None  # onnxruntime smoke test: "ok max_abs=..." | "mismatch ..." | "error: ..."


VARIANTS: tuple[Variant, ...] = (
    Variant("torchscript-17", dynamo=False, opset=17),
    Variant("dynamo-18", dynamo=True, opset=18),
    Variant("dynamo-23", dynamo=True, opset=23),
)


# --------------------------------------------------------------------------------------
# Truth helpers
# --------------------------------------------------------------------------------------


def _n(t: torch.Tensor | None) -> int:
    return 0 if t is None else int(t.numel())


def _lin(lin: nn.Module) -> tuple[int, int]:
    """(weight+bias numel, bias numel) of a Linear-like module."""
    b = getattr(lin, "bias", None)
    return _n(lin.weight) + _n(b), _n(b)


def _block(
    name: str,
    kind: str,
    heads: int,
    kv_heads: int,
    d_model: int,
    d_k: int,
    d_v: int,
    q: tuple[int, int],
    k: tuple[int, int],
    v: tuple[int, int],
    o: tuple[int, int],
) -> BlockTruth:
    assert kind in ("self", "cross"), kind
    assert heads > 0 and kv_heads > 0 and heads % kv_heads == 0, (heads, kv_heads)
    return BlockTruth(
        name_hint=name,
        kind=kind,
        num_heads=int(heads),
        num_kv_heads=int(kv_heads),
        d_model=int(d_model),
        d_k=int(d_k),
        d_v=int(d_v),
        q=q[0],
        k=k[0],
        v=v[0],
        o=o[0],
        bias=q[1] + k[1] + v[1] + o[1],
        total=q[0] + k[0] + v[0] + o[0],
    )


def _qualname(root: nn.Module, mod: nn.Module) -> str:
    for n, m in root.named_modules():
        if m is mod:
            return n
    raise KeyError("module not found in root")


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise AssertionError(f"ground-truth consistency check failed: {msg}")


# --------------------------------------------------------------------------------------
# transformers cases
# --------------------------------------------------------------------------------------


def _hf_quiet() -> None:
    try:
        import transformers

        transformers.logging.set_verbosity_error()
    except Exception:  # pragma: no cover
        pass


def _ids(*shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(SEED + 1)
    return torch.randint(3, VOCAB, shape, generator=g, dtype=torch.long)


def _mask(*shape: int) -> torch.Tensor:
    m = torch.ones(shape, dtype=torch.long)
    m[-1, -2:] = 0  # some right padding in the last sequence so the mask is not trivial
    return m


def _eval(model: nn.Module) -> nn.Module:
    """Trained-looking weights + eval mode, as users have them when they export.

    Fresh inits leave many parameters bit-identical (zero biases, unit LayerNorm weights), and the
    exporters deduplicate identical initializers (TorchScript turns e.g. every attention bias into
    an Identity of one shared tensor).  Real checkpoints never look like that, so every parameter
    gets a small deterministic perturbation.  Tied parameters stay tied (same tensor object).
    Parameters keep requires_grad=True on purpose: under no_grad + eval, nn.MultiheadAttention takes
    its C++ fast path (aten::_native_multi_head_attention), which the TorchScript exporter rejects.
    """
    g = torch.Generator().manual_seed(SEED + 3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.02)
    return model.eval()


def _build_bert(attn: str) -> tuple[nn.Module, tuple]:
    from transformers import BertConfig, BertModel

    _hf_quiet()
    torch.manual_seed(SEED)
    cfg = BertConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        num_attention_heads=4,
        num_hidden_layers=2,
        intermediate_size=128,
        max_position_embeddings=64,
        type_vocab_size=2,
        return_dict=False,
        attn_implementation=attn,
    )
    model = _eval(BertModel(cfg))
    return model, (_ids(BATCH, SEQ), _mask(BATCH, SEQ))


def _truth_bert(model: nn.Module) -> tuple[BlockTruth, ...]:
    cfg = model.config
    out = []
    for layer in model.encoder.layer:
        sa, so = layer.attention.self, layer.attention.output.dense
        h, dh = sa.num_attention_heads, sa.attention_head_size
        _check(h == cfg.num_attention_heads, "bert heads")
        _check(sa.query.weight.shape[0] == h * dh == sa.key.weight.shape[0] == sa.value.weight.shape[0], "bert qkv")
        _check(so.weight.shape == (cfg.hidden_size, h * dh), "bert out proj")
        out.append(
            _block(
                _qualname(model, layer.attention),
                "self",
                h,
                h,
                sa.query.weight.shape[1],
                dh,
                dh,
                _lin(sa.query),
                _lin(sa.key),
                _lin(sa.value),
                _lin(so),
            )
        )
    return tuple(out)


def _build_gpt2(attn: str) -> tuple[nn.Module, tuple]:
    from transformers import GPT2Config, GPT2Model

    _hf_quiet()
    torch.manual_seed(SEED)
    cfg = GPT2Config(
        vocab_size=VOCAB,
        n_embd=64,
        n_head=4,
        n_layer=2,
        n_positions=64,
        bos_token_id=1,
        eos_token_id=2,
        use_cache=False,
        return_dict=False,
        attn_implementation=attn,
    )
    model = _eval(GPT2Model(cfg))
    return model, (_ids(BATCH, SEQ), _mask(BATCH, SEQ))


def _truth_gpt2(model: nn.Module) -> tuple[BlockTruth, ...]:
    cfg = model.config
    out = []
    for blk in model.h:
        a = blk.attn
        h, dh, e = a.num_heads, a.head_dim, a.embed_dim
        _check(h == cfg.n_head and h * dh == e == cfg.n_embd, "gpt2 heads")
        w, b = a.c_attn.weight, a.c_attn.bias  # Conv1D: weight is [in, out] = [E, 3E]
        _check(tuple(w.shape) == (e, 3 * a.split_size), "gpt2 c_attn shape")
        s = a.split_size
        roles = []
        for i in range(3):
            wi, bi = w[:, i * s : (i + 1) * s], (b[i * s : (i + 1) * s] if b is not None else None)
            roles.append((_n(wi) + _n(bi), _n(bi)))
        out.append(_block(_qualname(model, a), "self", h, h, e, dh, dh, roles[0], roles[1], roles[2], _lin(a.c_proj)))
    return tuple(out)


def _build_llama(attn: str) -> tuple[nn.Module, tuple]:
    from transformers import LlamaConfig, LlamaModel

    _hf_quiet()
    torch.manual_seed(SEED)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,  # 8 heads x head_dim 16: heads, kv heads (2), groups (4), head_dim all distinct
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=16,
        num_hidden_layers=2,
        intermediate_size=128,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        use_cache=False,
        return_dict=False,
        attn_implementation=attn,
    )
    model = _eval(LlamaModel(cfg))
    return model, (_ids(BATCH, SEQ), _mask(BATCH, SEQ))


def _truth_llama(model: nn.Module) -> tuple[BlockTruth, ...]:
    cfg = model.config
    out = []
    for layer in model.layers:
        a = layer.self_attn
        dh = a.head_dim
        h = a.q_proj.weight.shape[0] // dh
        kv = a.k_proj.weight.shape[0] // dh
        _check(h == cfg.num_attention_heads and kv == cfg.num_key_value_heads, "llama heads/kv")
        _check(h // kv == a.num_key_value_groups, "llama groups")
        _check(a.v_proj.weight.shape[0] == kv * dh and a.o_proj.weight.shape == (cfg.hidden_size, h * dh), "llama")
        out.append(
            _block(
                _qualname(model, a),
                "self",
                h,
                kv,
                cfg.hidden_size,
                dh,
                dh,
                _lin(a.q_proj),
                _lin(a.k_proj),
                _lin(a.v_proj),
                _lin(a.o_proj),
            )
        )
    return tuple(out)


def _build_t5(attn: str) -> tuple[nn.Module, tuple]:
    from transformers import T5Config, T5Model

    _hf_quiet()
    torch.manual_seed(SEED)
    cfg = T5Config(
        vocab_size=VOCAB,
        d_model=32,
        num_heads=4,
        d_kv=16,  # heads * d_kv = 64 != d_model
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        relative_attention_num_buckets=8,
        use_cache=False,
        attn_implementation=attn,
    )
    model = _eval(T5Model(cfg))
    # transformers 5: T5 encoder/decoder stacks deep-copy the config and T5Model reads
    # `decoder_outputs.last_hidden_state`, so only the top-level model may return a tuple.
    model.config.return_dict = False
    return model, (_ids(BATCH, SEQ), _mask(BATCH, SEQ), _ids(BATCH, SEQ_DEC))


def _t5_block(model: nn.Module, a: nn.Module, kind: str) -> BlockTruth:
    cfg = model.config
    h, dkv = a.n_heads, a.key_value_proj_dim
    _check(h == cfg.num_heads and dkv == cfg.d_kv and a.inner_dim == h * dkv, "t5 heads")
    _check(a.q.weight.shape == (h * dkv, a.d_model) and a.o.weight.shape == (a.d_model, h * dkv), "t5 proj")
    return _block(_qualname(model, a), kind, h, h, a.d_model, dkv, dkv, _lin(a.q), _lin(a.k), _lin(a.v), _lin(a.o))


def _truth_t5(model: nn.Module) -> tuple[BlockTruth, ...]:
    out = [_t5_block(model, blk.layer[0].SelfAttention, "self") for blk in model.encoder.block]
    for blk in model.decoder.block:  # decoder runs after the whole encoder
        out.append(_t5_block(model, blk.layer[0].SelfAttention, "self"))
        out.append(_t5_block(model, blk.layer[1].EncDecAttention, "cross"))
    return tuple(out)


def _build_vit(attn: str) -> tuple[nn.Module, tuple]:
    from transformers import ViTConfig, ViTModel

    _hf_quiet()
    torch.manual_seed(SEED)
    cfg = ViTConfig(
        hidden_size=64,
        num_attention_heads=4,
        num_hidden_layers=2,
        intermediate_size=128,
        image_size=32,
        patch_size=8,
        num_channels=3,
        return_dict=False,
        attn_implementation=attn,
    )
    model = _eval(ViTModel(cfg))
    g = torch.Generator().manual_seed(SEED + 2)
    return model, (torch.randn(BATCH, 3, 32, 32, generator=g),)


def _truth_vit(model: nn.Module) -> tuple[BlockTruth, ...]:
    cfg = model.config
    # transformers 5 ViT: model.layers[i].attention = ViTAttention(q_proj, k_proj, v_proj, o_proj);
    # older releases: model.encoder.layer[i].attention.{attention.query/key/value, output.dense}.
    layers = model.layers if hasattr(model, "layers") else model.encoder.layer
    out = []
    for layer in layers:
        a = layer.attention
        if hasattr(a, "q_proj"):
            h, dh = a.num_attention_heads, a.head_dim
            q, k, v, o = a.q_proj, a.k_proj, a.v_proj, a.o_proj
        else:  # pragma: no cover - transformers < 5
            h, dh = a.attention.num_attention_heads, a.attention.attention_head_size
            q, k, v, o = a.attention.query, a.attention.key, a.attention.value, a.output.dense
        _check(h == cfg.num_attention_heads and q.weight.shape[0] == h * dh == k.weight.shape[0], "vit heads")
        _check(o.weight.shape == (cfg.hidden_size, h * dh), "vit out proj")
        out.append(
            _block(_qualname(model, a), "self", h, h, cfg.hidden_size, dh, dh, _lin(q), _lin(k), _lin(v), _lin(o))
        )
    return tuple(out)


def _build_resnet() -> tuple[nn.Module, tuple]:
    from transformers import ResNetConfig, ResNetModel

    _hf_quiet()
    torch.manual_seed(SEED)
    cfg = ResNetConfig(
        num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic", return_dict=False
    )
    model = _eval(ResNetModel(cfg))
    g = torch.Generator().manual_seed(SEED + 2)
    return model, (torch.randn(BATCH, 3, 32, 32, generator=g),)


# --------------------------------------------------------------------------------------
# torch cases
# --------------------------------------------------------------------------------------

D = 64


class MHASelf(nn.Module):
    """nn.MultiheadAttention used as self-attention (q = k = v = x), default need_weights."""

    def __init__(self, batch_first: bool, bias: bool = True, num_heads: int = 4) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(D, num_heads, bias=bias, batch_first=batch_first)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.mha(x, x, x)
        return out


class MHACross(nn.Module):
    """nn.MultiheadAttention cross-attention with kdim/vdim != embed_dim."""

    def __init__(self, kdim: int = 48, vdim: int = 40, num_heads: int = 4) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(D, num_heads, kdim=kdim, vdim=vdim, batch_first=True)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        out, _ = self.mha(query, key, value, need_weights=False)
        return out


def _truth_mha(model: nn.Module) -> tuple[BlockTruth, ...]:
    m: nn.MultiheadAttention = model.mha
    e, h, dh = m.embed_dim, m.num_heads, m.head_dim
    _check(h * dh == e, "mha head_dim")
    bias = m.in_proj_bias
    roles = []
    if m._qkv_same_embed_dim:
        w = m.in_proj_weight
        _check(tuple(w.shape) == (3 * e, e), "mha in_proj shape")
        ws = [w[i * e : (i + 1) * e] for i in range(3)]
    else:
        ws = [m.q_proj_weight, m.k_proj_weight, m.v_proj_weight]
        _check(ws[1].shape == (e, m.kdim) and ws[2].shape == (e, m.vdim), "mha k/v proj shape")
    for i, wi in enumerate(ws):
        bi = bias[i * e : (i + 1) * e] if bias is not None else None
        roles.append((_n(wi) + _n(bi), _n(bi)))
    kind = "self" if isinstance(model, MHASelf) else "cross"
    return (_block(_qualname(model, m), kind, h, h, e, dh, dh, roles[0], roles[1], roles[2], _lin(m.out_proj)),)


def _mha_build(batch_first: bool, bias: bool = True) -> Callable[[], tuple[nn.Module, tuple]]:
    def build() -> tuple[nn.Module, tuple]:
        torch.manual_seed(SEED)
        model = _eval(MHASelf(batch_first=batch_first, bias=bias))
        shape = (BATCH, SEQ, D) if batch_first else (SEQ, BATCH, D)
        return model, (torch.randn(*shape),)

    return build


def _build_mha_cross() -> tuple[nn.Module, tuple]:
    torch.manual_seed(SEED)
    model = _eval(MHACross())
    m = model.mha
    return model, (torch.randn(BATCH, SEQ, D), torch.randn(BATCH, SEQ_KV, m.kdim), torch.randn(BATCH, SEQ_KV, m.vdim))


class SDPAAttention(nn.Module):
    """Hand-written attention with its own q/k/v/o Linear layers and F.scaled_dot_product_attention."""

    def __init__(self, d_model: int = D, num_heads: int = 4) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v)
        y = y.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim)
        return self.o_proj(y)


class SDPAWrapper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = SDPAAttention()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x)


def _build_sdpa() -> tuple[nn.Module, tuple]:
    torch.manual_seed(SEED)
    return _eval(SDPAWrapper()), (torch.randn(BATCH, SEQ, D),)


def _truth_sdpa(model: nn.Module) -> tuple[BlockTruth, ...]:
    a = model.attn
    h, dh = a.num_heads, a.head_dim
    _check(a.q_proj.weight.shape[0] == h * dh, "sdpa heads")
    return (
        _block(
            _qualname(model, a),
            "self",
            h,
            h,
            a.q_proj.in_features,
            dh,
            dh,
            _lin(a.q_proj),
            _lin(a.k_proj),
            _lin(a.v_proj),
            _lin(a.o_proj),
        ),
    )


# --- The Annotated Transformer (harvardnlp), verbatim in the parts that matter ---------


def clones(module: nn.Module, N: int) -> nn.ModuleList:
    "Produce N identical layers."
    return nn.ModuleList([copy.deepcopy(module) for _ in range(N)])


def attention(query, key, value, mask=None, dropout=None):
    "Compute 'Scaled Dot Product Attention'"
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        "Take in model size and number of heads."
        super().__init__()
        assert d_model % h == 0
        # We assume d_v always equals d_k
        self.d_k = d_model // h
        self.h = h
        self.linears = clones(nn.Linear(d_model, d_model), 4)
        self.attn = None
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        "Implements Figure 2"
        if mask is not None:
            # Same mask applied to all h heads.
            mask = mask.unsqueeze(1)
        nbatches = query.size(0)

        # 1) Do all the linear projections in batch from d_model => h x d_k
        query, key, value = [
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value))
        ]

        # 2) Apply attention on all the projected vectors in batch.
        x, self.attn = attention(query, key, value, mask=mask, dropout=self.dropout)

        # 3) "Concat" using a view and apply a final linear.
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        del query
        del key
        del value
        return self.linears[-1](x)


class AnnotatedSelfAttn(nn.Module):
    def __init__(self, h: int, d_model: int = D) -> None:
        super().__init__()
        self.self_attn = MultiHeadedAttention(h, d_model)

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return self.self_attn(x, x, x, src_mask)


def _annotated_build(h: int) -> Callable[[], tuple[nn.Module, tuple]]:
    def build() -> tuple[nn.Module, tuple]:
        torch.manual_seed(SEED)
        model = _eval(AnnotatedSelfAttn(h))
        mask = torch.ones(BATCH, 1, SEQ, dtype=torch.long)
        mask[-1, :, -2:] = 0
        return model, (torch.randn(BATCH, SEQ, D), mask)

    return build


def _truth_annotated(model: nn.Module) -> tuple[BlockTruth, ...]:
    a = model.self_attn
    h, dk = a.h, a.d_k
    q, k, v, o = a.linears
    _check(q.weight.shape[0] == h * dk and o.weight.shape[1] == h * dk, "annotated heads")
    return (_block(_qualname(model, a), "self", h, h, q.in_features, dk, dk, _lin(q), _lin(k), _lin(v), _lin(o)),)


# --- 1x1 convolutions as projections: VITS's text encoder (jaywalnut310/vits, attentions.py) and the
#     latent-diffusion VAE's AttnBlock (CompVis, model.py), verbatim in the parts that matter ---------


def convert_pad_shape(pad_shape):
    return [item for sublist in pad_shape[::-1] for item in sublist]


class VitsMultiHeadAttention(nn.Module):
    def __init__(self, channels, out_channels, n_heads, window_size=None, heads_share=True):
        super().__init__()
        assert channels % n_heads == 0
        self.channels, self.out_channels, self.n_heads = channels, out_channels, n_heads
        self.window_size, self.heads_share = window_size, heads_share
        self.k_channels = channels // n_heads
        self.conv_q = nn.Conv1d(channels, channels, 1)
        self.conv_k = nn.Conv1d(channels, channels, 1)
        self.conv_v = nn.Conv1d(channels, channels, 1)
        self.conv_o = nn.Conv1d(channels, out_channels, 1)
        if window_size is not None:
            n_heads_rel = 1 if heads_share else n_heads
            rel_stddev = self.k_channels ** -0.5
            self.emb_rel_k = nn.Parameter(torch.randn(n_heads_rel, window_size * 2 + 1, self.k_channels) * rel_stddev)
            self.emb_rel_v = nn.Parameter(torch.randn(n_heads_rel, window_size * 2 + 1, self.k_channels) * rel_stddev)

    def forward(self, x, c):
        q, k, v = self.conv_q(x), self.conv_k(c), self.conv_v(c)
        x = self.attention(q, k, v)
        return self.conv_o(x)

    def attention(self, query, key, value):
        b, d, t_s, t_t = (*key.size(), query.size(2))
        query = query.view(b, self.n_heads, self.k_channels, t_t).transpose(2, 3)
        key = key.view(b, self.n_heads, self.k_channels, t_s).transpose(2, 3)
        value = value.view(b, self.n_heads, self.k_channels, t_s).transpose(2, 3)
        scores = torch.matmul(query / math.sqrt(self.k_channels), key.transpose(-2, -1))
        if self.window_size is not None:
            key_relative_embeddings = self._get_relative_embeddings(self.emb_rel_k, t_s)
            rel_logits = self._matmul_with_relative_keys(query / math.sqrt(self.k_channels), key_relative_embeddings)
            scores = scores + self._relative_position_to_absolute_position(rel_logits)
        p_attn = F.softmax(scores, dim=-1)
        output = torch.matmul(p_attn, value)
        if self.window_size is not None:
            relative_weights = self._absolute_position_to_relative_position(p_attn)
            value_relative_embeddings = self._get_relative_embeddings(self.emb_rel_v, t_s)
            output = output + self._matmul_with_relative_values(relative_weights, value_relative_embeddings)
        return output.transpose(2, 3).contiguous().view(b, d, t_t)

    def _matmul_with_relative_values(self, x, y):
        return torch.matmul(x, y.unsqueeze(0))

    def _matmul_with_relative_keys(self, x, y):
        return torch.matmul(x, y.unsqueeze(0).transpose(-2, -1))

    def _get_relative_embeddings(self, relative_embeddings, length):
        pad_length = max(length - (self.window_size + 1), 0)
        slice_start_position = max((self.window_size + 1) - length, 0)
        slice_end_position = slice_start_position + 2 * length - 1
        if pad_length > 0:
            padded = F.pad(relative_embeddings, convert_pad_shape([[0, 0], [pad_length, pad_length], [0, 0]]))
        else:
            padded = relative_embeddings
        return padded[:, slice_start_position:slice_end_position]

    def _relative_position_to_absolute_position(self, x):
        batch, heads, length, _ = x.size()
        x = F.pad(x, convert_pad_shape([[0, 0], [0, 0], [0, 0], [0, 1]]))
        x_flat = x.view([batch, heads, length * 2 * length])
        x_flat = F.pad(x_flat, convert_pad_shape([[0, 0], [0, 0], [0, length - 1]]))
        return x_flat.view([batch, heads, length + 1, 2 * length - 1])[:, :, :length, length - 1:]

    def _absolute_position_to_relative_position(self, x):
        batch, heads, length, _ = x.size()
        x = F.pad(x, convert_pad_shape([[0, 0], [0, 0], [0, 0], [0, length - 1]]))
        x_flat = x.view([batch, heads, length ** 2 + length * (length - 1)])
        x_flat = F.pad(x_flat, convert_pad_shape([[0, 0], [0, 0], [length, 0]]))
        return x_flat.view([batch, heads, length, 2 * length])[:, :, :, 1:]


class VitsEncoder(nn.Module):
    """VITS's text encoder stack: relative-position attention and a kernel-3 convolution FFN per layer."""

    def __init__(self, hidden=D, heads=4, layers=2, window_size=4):
        super().__init__()
        self.attn_layers = nn.ModuleList(VitsMultiHeadAttention(hidden, hidden, heads, window_size=window_size)
                                         for _ in range(layers))
        self.ffn_layers = nn.ModuleList(nn.Sequential(nn.Conv1d(hidden, 2 * hidden, 3, padding=1), nn.ReLU(),
                                                      nn.Conv1d(2 * hidden, hidden, 3, padding=1))
                                        for _ in range(layers))
        self.norms = nn.ModuleList(nn.GroupNorm(1, hidden) for _ in range(2 * layers))

    def forward(self, x):
        for i, (attn, ffn) in enumerate(zip(self.attn_layers, self.ffn_layers)):
            x = self.norms[2 * i](x + attn(x, x))
            x = self.norms[2 * i + 1](x + ffn(x))
        return x


def _build_vits() -> tuple[nn.Module, tuple]:
    torch.manual_seed(SEED)
    return _eval(VitsEncoder()), (torch.randn(BATCH, D, SEQ),)


def _truth_vits(model: nn.Module) -> tuple[BlockTruth, ...]:
    out = []
    for a in model.attn_layers:
        h, dk = a.n_heads, a.k_channels
        _check(a.conv_q.weight.shape[:2] == (h * dk, a.channels) and a.conv_q.kernel_size == (1,), "vits 1x1 convs")
        out.append(_block(_qualname(model, a), "self", h, h, a.channels, dk, dk, _lin(a.conv_q), _lin(a.conv_k),
                          _lin(a.conv_v), _lin(a.conv_o)))
    return tuple(out)


def Normalize(in_channels, num_groups=8):
    return torch.nn.GroupNorm(num_groups=num_groups, num_channels=in_channels, eps=1e-6, affine=True)


class AttnBlock(nn.Module):
    def __init__(self, in_channels):
        super().__init__()
        self.in_channels = in_channels
        self.norm = Normalize(in_channels)
        self.q = torch.nn.Conv2d(in_channels, in_channels, kernel_size=1, stride=1, padding=0)
        self.k = torch.nn.Conv2d(in_channels, in_channels, kernel_size=1, stride=1, padding=0)
        self.v = torch.nn.Conv2d(in_channels, in_channels, kernel_size=1, stride=1, padding=0)
        self.proj_out = torch.nn.Conv2d(in_channels, in_channels, kernel_size=1, stride=1, padding=0)

    def forward(self, x):
        h_ = self.norm(x)
        q, k, v = self.q(h_), self.k(h_), self.v(h_)
        b, c, h, w = q.shape
        q = q.reshape(b, c, h * w).permute(0, 2, 1)  # b,hw,c
        k = k.reshape(b, c, h * w)  # b,c,hw
        w_ = torch.bmm(q, k)  # b,hw,hw    w[b,i,j]=sum_c q[b,i,c]k[b,c,j]
        w_ = w_ * (int(c) ** (-0.5))
        w_ = torch.nn.functional.softmax(w_, dim=2)
        v = v.reshape(b, c, h * w)
        w_ = w_.permute(0, 2, 1)  # b,hw,hw (first hw of k, second of q)
        h_ = torch.bmm(v, w_)  # b, c,hw (hw of q) h_[b,c,j] = sum_i v[b,c,i] w_[b,i,j]
        h_ = h_.reshape(b, c, h, w)
        return x + self.proj_out(h_)


class VaeMid(nn.Module):
    """The middle of a latent-diffusion VAE encoder: a 3x3 convolution, AttnBlock, a 3x3 convolution."""

    def __init__(self, channels=D):
        super().__init__()
        self.conv_in = nn.Conv2d(4, channels, 3, padding=1)
        self.attn_1 = AttnBlock(channels)
        self.conv_out = nn.Conv2d(channels, 4, 3, padding=1)

    def forward(self, x):
        return self.conv_out(self.attn_1(self.conv_in(x)))


def _build_vae() -> tuple[nn.Module, tuple]:
    torch.manual_seed(SEED)
    return _eval(VaeMid()), (torch.randn(BATCH, 4, 4, 6),)


def _truth_vae(model: nn.Module) -> tuple[BlockTruth, ...]:
    a = model.attn_1
    c = a.in_channels
    _check(a.q.weight.shape == (c, c, 1, 1), "vae 1x1 convs")
    return (_block(_qualname(model, a), "self", 1, 1, c, c, c, _lin(a.q), _lin(a.k), _lin(a.v), _lin(a.proj_out)),)


# --- no-attention controls -------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, softmax_head: bool = False) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, D), nn.GELU(), nn.Linear(D, D), nn.GELU(), nn.Linear(D, 16))
        self.softmax_head = softmax_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.net(x)
        return torch.softmax(y, dim=-1) if self.softmax_head else y


class LSTMNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(32, D, num_layers=2, batch_first=True)
        self.head = nn.Linear(D, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        return self.head(y)


def _control_build(cls: Callable[[], nn.Module], shape: tuple[int, ...]) -> Callable[[], tuple[nn.Module, tuple]]:
    def build() -> tuple[nn.Module, tuple]:
        torch.manual_seed(SEED)
        return _eval(cls()), (torch.randn(*shape),)

    return build


def _no_blocks(model: nn.Module) -> tuple[BlockTruth, ...]:
    return ()


# --------------------------------------------------------------------------------------
# Case table
# --------------------------------------------------------------------------------------

_TOK = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}


def _hf_cases() -> list[Case]:
    specs = [
        (
            "bert",
            _build_bert,
            _truth_bert,
            ("input_ids", "attention_mask"),
            _TOK,
            "BertModel hidden 64, 4 heads x 16, 2 layers, with pooler; o-proj is attention.output.dense",
        ),
        (
            "gpt2",
            _build_gpt2,
            _truth_gpt2,
            ("input_ids", "attention_mask"),
            _TOK,
            "GPT2Model n_embd 64, 4 heads x 16, 2 layers; fused c_attn Conv1D weight [in, 3*out], causal",
        ),
        (
            "llama",
            _build_llama,
            _truth_llama,
            ("input_ids", "attention_mask"),
            _TOK,
            "LlamaModel hidden 128, 8 heads x head_dim 16, 2 kv heads (GQA, 4 groups), RoPE, no biases, causal",
        ),
        (
            "t5",
            _build_t5,
            _truth_t5,
            ("input_ids", "attention_mask", "decoder_input_ids"),
            {**_TOK, "decoder_input_ids": {0: "batch", 1: "dec_seq"}},
            "T5Model d_model 32, 4 heads x d_kv 16 (inner 64 != d_model), no qk scaling, no biases; "
            "layer-0 blocks also own relative_attention_bias Embedding[8, heads] (not in q/k/v/o)",
        ),
        (
            "vit",
            _build_vit,
            _truth_vit,
            ("pixel_values",),
            {"pixel_values": {0: "batch"}},
            "ViTModel hidden 64, 4 heads x 16, image 32 / patch 8 (17 tokens incl. CLS), 2 layers",
        ),
    ]
    out = []
    for name, build, truth, names, dyn, notes in specs:
        for attn in ("eager", "sdpa"):
            out.append(
                Case(
                    name=f"{name}-{attn}",
                    build=functools.partial(build, attn),
                    truth=truth,
                    has_attention=True,
                    input_names=names,
                    dynamic_axes=dyn,
                    family="transformers",
                    notes=f"{notes}; attn_implementation={attn!r}",
                )
            )
    return out


_BTD = {0: "batch", 1: "seq"}

CASES: tuple[Case, ...] = (
    *_hf_cases(),
    Case(
        "mha-batch-first",
        _mha_build(True),
        _truth_mha,
        True,
        ("x",),
        {"x": _BTD},
        "torch",
        "nn.MultiheadAttention(64, 4, batch_first=True), self-attention, need_weights=True",
    ),
    Case(
        "mha-seq-first",
        _mha_build(False),
        _truth_mha,
        True,
        ("x",),
        {"x": {0: "seq", 1: "batch"}},
        "torch",
        "nn.MultiheadAttention(64, 4, batch_first=False), input [T, B, E]",
    ),
    Case(
        "mha-cross-kvdim",
        _build_mha_cross,
        _truth_mha,
        True,
        ("query", "key", "value"),
        {"query": {0: "batch", 1: "tgt_seq"}, "key": {0: "batch", 1: "src_seq"}, "value": {0: "batch", 1: "src_seq"}},
        "torch",
        "nn.MultiheadAttention(64, 4, kdim=48, vdim=40, batch_first=True), need_weights=False",
    ),
    Case(
        "mha-nobias",
        _mha_build(True, bias=False),
        _truth_mha,
        True,
        ("x",),
        {"x": _BTD},
        "torch",
        "nn.MultiheadAttention(64, 4, bias=False, batch_first=True)",
    ),
    Case(
        "sdpa-linear",
        _build_sdpa,
        _truth_sdpa,
        True,
        ("x",),
        {"x": _BTD},
        "torch",
        "own q/k/v/o nn.Linear + F.scaled_dot_product_attention, 4 heads",
    ),
    Case(
        "annotated-h8",
        _annotated_build(8),
        _truth_annotated,
        True,
        ("x", "src_mask"),
        {"x": _BTD, "src_mask": {0: "batch", 2: "seq"}},
        "torch",
        "Annotated Transformer MultiHeadedAttention h=8",
    ),
    Case(
        "annotated-h1",
        _annotated_build(1),
        _truth_annotated,
        True,
        ("x", "src_mask"),
        {"x": _BTD, "src_mask": {0: "batch", 2: "seq"}},
        "torch",
        "Annotated Transformer MultiHeadedAttention h=1",
    ),
    Case(
        "vits-conv1d",
        _build_vits,
        _truth_vits,
        True,
        ("x",),
        {"x": {0: "batch", 2: "seq"}},
        "torch",
        "VITS text encoder: Conv1d kernel-1 Q/K/V/O over [B, C, T], per-head relative-position tables, 2 layers",
    ),
    Case(
        "vae-conv2d",
        _build_vae,
        _truth_vae,
        True,
        ("x",),
        {"x": {0: "batch", 2: "height", 3: "width"}},
        "torch",
        "latent-diffusion VAE AttnBlock: Conv2d 1x1 q/k/v/proj_out, one head over H·W, V·Pᵀ by bmm",
    ),
    Case("mlp", _control_build(MLP, (BATCH, SEQ, 32)), _no_blocks, False, ("x",), {"x": _BTD}, "control"),
    Case("lstm", _control_build(LSTMNet, (BATCH, SEQ, 32)), _no_blocks, False, ("x",), {"x": _BTD}, "control"),
    Case("resnet", _build_resnet, _no_blocks, False, ("pixel_values",), {"pixel_values": {0: "batch"}}, "control"),
    Case(
        "mlp-softmax",
        _control_build(functools.partial(MLP, softmax_head=True), (BATCH, 32)),
        _no_blocks,
        False,
        ("x",),
        {"x": {0: "batch"}},
        "control",
        "MLP ending in a softmax classifier head",
    ),
)

CASES_BY_NAME: dict[str, Case] = {c.name: c for c in CASES}
VARIANTS_BY_NAME: dict[str, Variant] = {v.name: v for v in VARIANTS}


# --------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------

_NOISY_LOGGERS = (
    "torch",
    "torch.onnx",
    "torch.export",
    "torch._dynamo",
    "torch._export",
    "torch.fx",
    "torch._subclasses",
    "torch.fx.experimental.symbolic_shapes",
    "onnxscript",
    "onnx_ir",
    "transformers",
)


@contextlib.contextmanager
def _quiet():
    """Silence Python warnings, noisy loggers and anything written to fd 1/2 (C++ warnings, prints)."""
    saved_levels = {n: logging.getLogger(n).level for n in _NOISY_LOGGERS}
    for n in _NOISY_LOGGERS:
        logging.getLogger(n).setLevel(logging.CRITICAL)
    _hf_quiet()
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = []
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            saved_fds.append((fd, os.dup(fd)))
            os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:  # pragma: no cover - e.g. no real fds under some runners
        pass
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in saved_fds:
            os.dup2(saved, fd)
            os.close(saved)
        for n, lvl in saved_levels.items():
            logging.getLogger(n).setLevel(lvl)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """Compact one-line error: outer exception plus its innermost cause."""

    def first(e: BaseException) -> str:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        return f"{type(e).__name__}: {lines[0] if lines else ''}".strip()

    chain = [exc]
    while (nxt := (chain[-1].__cause__ or chain[-1].__context__)) is not None and len(chain) < 10:
        chain.append(nxt)
    msg = first(exc).split(" This is step ")[0]
    if len(chain) > 1:
        msg += " <- " + first(chain[-1])
    msg = " ".join(_ANSI.sub("", msg).split())
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def _graph_is_dynamic(path: Path) -> bool:
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    for vi in m.graph.input:
        t = vi.type.tensor_type
        if t.HasField("shape"):
            for d in t.shape.dim:
                if d.HasField("dim_param") or not d.HasField("dim_value"):
                    return True
    return False


def _dynamo_shapes(case: Case) -> dict[str, Any]:
    from torch.export import Dim

    dims: dict[str, Any] = {}
    shapes: dict[str, Any] = {}
    for name in case.input_names:
        axes = case.dynamic_axes.get(name)
        if not axes:
            shapes[name] = None
            continue
        shapes[name] = {ax: dims.setdefault(label, Dim(label)) for ax, label in axes.items()}
    return shapes


def _narrow_forward(model: nn.Module, names: Sequence[str]) -> None:
    """Shadow model.forward with a function taking exactly `names` (instance attribute, same module).

    The TorchScript exporter appends every defaulted forward() parameter positionally
    (_decide_input_format), which collides with transformers 5's merge_with_config_defaults
    ("forward() got multiple values for argument 'use_cache'").  Module hierarchy (and hence scope
    names / initializer names) is unchanged.
    """
    import inspect

    orig = model.forward

    def forward(*args: Any) -> Any:
        return orig(**dict(zip(names, args)))

    forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    )
    model.forward = forward  # type: ignore[method-assign]


def _export_once(case: Case, variant: Variant, path: Path, dynamic: bool) -> None:
    with _environment(case.export_env):
        _export_in_env(case, variant, path, dynamic)


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _export_in_env(case: Case, variant: Variant, path: Path, dynamic: bool) -> None:
    model, inputs = case.build()
    kwargs = case.kwargs(inputs)
    common: dict[str, Any] = dict(
        kwargs=kwargs,
        input_names=list(case.input_names),
        opset_version=variant.opset,
        external_data=False,
    )
    if not variant.dynamo:
        if dynamic and case.dynamic_axes:
            common["dynamic_axes"] = {k: dict(v) for k, v in case.dynamic_axes.items()}
        _narrow_forward(model, case.input_names)
        common.pop("kwargs")
        torch.onnx.export(model, tuple(inputs), str(path), dynamo=False, **common)
    else:
        if dynamic and case.dynamic_axes:
            common["dynamic_shapes"] = _dynamo_shapes(case)
        prog = torch.onnx.export(model, (), None, dynamo=True, verbose=False, report=False, **common)
        prog.save(str(path), external_data=False)


def export_case(case: Case, variant: Variant | str, outdir: str | os.PathLike) -> ExportResult:
    """Export one case with one exporter variant; never raises for exporter failures."""
    if isinstance(variant, str):
        variant = VARIANTS_BY_NAME[variant]
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / f"{case.name}__{variant.name}.onnx"
    t0 = time.perf_counter()
    dyn_err: str | None = None
    attempts = [True, False] if case.dynamic_axes else [False]
    for dynamic in attempts:
        tmp = path.with_suffix(".onnx.tmp")
        try:
            with _quiet():
                _export_once(case, variant, tmp, dynamic)
            if not tmp.exists():
                raise RuntimeError("exporter produced no file")
            os.replace(tmp, path)
            secs = time.perf_counter() - t0
            return ExportResult(path, None, _graph_is_dynamic(path), dyn_err, secs, ort=ort_check(case, path))
        except Exception as e:  # noqa: BLE001 - exporter failures are data, not crashes
            with contextlib.suppress(OSError):
                tmp.unlink()
            err = _one_line(e)
            if dynamic:
                dyn_err = err
                continue
            if dyn_err is not None:
                err = f"{err} (dynamic attempt: {dyn_err})"
            return ExportResult(None, err, False, dyn_err, time.perf_counter() - t0)
    raise AssertionError("unreachable")  # pragma: no cover


def _first_tensor(y: Any) -> torch.Tensor:
    while not isinstance(y, torch.Tensor):
        y = y[0]
    return y


_RESIZE = {"batch": 3, "seq": 5, "dec_seq": 4, "tgt_seq": 5, "src_seq": 7}


def resized_inputs(case: Case, inputs: tuple) -> tuple | None:
    """Example inputs with every dynamic axis resized (batch 3, seq 5, ...); None if no dynamic axes."""
    if not case.dynamic_axes:
        return None
    g = torch.Generator().manual_seed(SEED + 4)
    out = []
    for name, t in zip(case.input_names, inputs):
        shape = list(t.shape)
        for ax, label in case.dynamic_axes.get(name, {}).items():
            shape[ax] = _RESIZE.get(label, shape[ax] + 1)
        if t.dtype.is_floating_point:
            out.append(torch.randn(shape, generator=g, dtype=t.dtype))
        elif "mask" in name:
            out.append(torch.ones(shape, dtype=t.dtype))
        else:
            out.append(torch.randint(3, VOCAB, shape, generator=g, dtype=t.dtype))
    return tuple(out)


def ort_check(case: Case, path: str | os.PathLike) -> str:
    """Run the export in onnxruntime and compare the first output with torch.

    Checks the example inputs and, when the case has dynamic axes, a second input set with every
    dynamic axis resized (catches graphs that claim dynamic dims but baked a traced size in).
    Returns "ok max_abs=..[; resized ok ..]" or a "mismatch"/"error" description.
    """
    try:
        import numpy as np
        import onnxruntime as ort

        ort.set_default_logger_severity(4)
        so = ort.SessionOptions()
        so.log_severity_level = 4
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        with _quiet():
            model, inputs = case.build()  # seeded: same weights as the exported instance
    except Exception as e:  # noqa: BLE001
        return "error: " + _one_line(e, 200)

    def run(xs: tuple) -> tuple[str, bool]:
        try:
            with _quiet(), torch.no_grad():
                ref = _first_tensor(model(**case.kwargs(xs))).numpy()
            feed_all = {n: t.numpy() for n, t in zip(case.input_names, xs)}
            feed = {i.name: feed_all[i.name] for i in sess.get_inputs()}
            got = sess.run(None, feed)[0]
        except Exception as e:  # noqa: BLE001
            return "error: " + _one_line(e, 200), False
        if got.shape != ref.shape:
            return f"mismatch shape {list(got.shape)} vs torch {list(ref.shape)}", False
        err = float(np.max(np.abs(got - ref))) if ref.size else 0.0
        return (f"ok max_abs={err:.1e}", True) if err < 1e-3 else (f"mismatch max_abs={err:.1e}", False)

    msg, ok = run(inputs)
    resized = resized_inputs(case, inputs)
    if ok and resized is not None and _graph_is_dynamic(Path(path)):
        rmsg, _ = run(resized)
        msg += "; resized " + rmsg
    return msg


# --------------------------------------------------------------------------------------
# Matrix
# --------------------------------------------------------------------------------------


def _truth_and_params(case: Case) -> tuple[tuple[BlockTruth, ...], int, dict[str, Any]]:
    with _quiet():
        model, inputs = case.build()
    blocks = case.truth(model)
    assert case.has_attention == bool(blocks), case.name
    spec = {
        n: {
            "shape": list(t.shape),
            "dtype": str(t.dtype).removeprefix("torch."),
            "dynamic_axes": {str(ax): label for ax, label in case.dynamic_axes.get(n, {}).items()},
        }
        for n, t in zip(case.input_names, inputs)
    }
    return blocks, count_params(model), spec


def _versions() -> dict[str, str]:
    import onnx

    v = {"torch": torch.__version__, "onnx": onnx.__version__}
    for mod in ("transformers", "onnxscript", "onnxruntime"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:  # pragma: no cover
            v[mod] = "n/a"
    return v


def _entry(
    case: Case,
    variant: Variant,
    res: ExportResult,
    blocks: tuple[BlockTruth, ...],
    total: int,
    inputs: dict[str, Any],
) -> dict[str, Any]:
    return {
        "case": case.name,
        "variant": variant.name,
        "family": case.family,
        "file": res.path.name if res.path else None,
        "error": res.error,
        "dynamic": res.dynamic,
        "dynamic_error": res.dynamic_error,
        "seconds": round(res.seconds, 3),
        "cached": res.cached,
        "ort": res.ort,
        "total_params": total,
        "has_attention": case.has_attention,
        "blocks": [b.as_dict() for b in blocks],
        "inputs": inputs,
        "notes": case.notes,
    }


def _worker(case_name: str, variant_name: str, outdir: str) -> ExportResult:
    torch.set_num_threads(1)
    return export_case(CASES_BY_NAME[case_name], VARIANTS_BY_NAME[variant_name], outdir)


def export_all(
    outdir: str | os.PathLike,
    cases: Iterable[Case] = CASES,
    variants: Iterable[Variant] = VARIANTS,
    *,
    force: bool = False,
    retry_failed: bool = False,
    jobs: int = 1,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Export every case x variant into outdir and write outdir/manifest.json.

    Caching: an existing ``<case>__<variant>.onnx`` is not re-exported (unless ``force``); a
    failure recorded in the previous manifest under the same library versions is not retried
    (unless ``retry_failed`` or ``force``).  Cached entries reuse the previous manifest's metadata.
    Entries of the previous manifest for case x variant pairs outside this call are kept.

    Returns the manifest dict: {"versions", "batch", "seq", "entries": [one per case x variant]}.
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    cases, variants = list(cases), list(variants)
    man_path = outdir / "manifest.json"
    versions = _versions()
    previous: dict[tuple[str, str], dict[str, Any]] = {}
    prev_versions: dict[str, str] = {}
    if man_path.exists():
        with contextlib.suppress(Exception):
            old = json.loads(man_path.read_text())
            prev_versions = old.get("versions", {})
            for e in old["entries"]:
                previous[(e["case"], e["variant"])] = e

    truths = {c.name: _truth_and_params(c) for c in cases}
    todo: list[tuple[Case, Variant]] = []
    results: dict[tuple[str, str], ExportResult] = {}
    for c in cases:
        for v in variants:
            path = outdir / f"{c.name}__{v.name}.onnx"
            if path.exists() and not force:
                prev = previous.get((c.name, v.name), {})
                results[(c.name, v.name)] = ExportResult(
                    path,
                    None,
                    _graph_is_dynamic(path),
                    prev.get("dynamic_error"),
                    float(prev.get("seconds", 0.0)),
                    cached=True,
                    ort=prev.get("ort"),
                )
            elif (
                not (force or retry_failed)
                and prev_versions == versions
                and (prev := previous.get((c.name, v.name), {})).get("error")
            ):
                results[(c.name, v.name)] = ExportResult(
                    None, prev["error"], False, prev.get("dynamic_error"), float(prev.get("seconds", 0.0)), cached=True
                )
            else:
                todo.append((c, v))

    def done(c: Case, v: Variant, r: ExportResult) -> None:
        results[(c.name, v.name)] = r
        if progress:
            progress(_entry(c, v, r, *truths[c.name]))

    if jobs > 1 and len(todo) > 1 and all(c.name in CASES_BY_NAME for c, _ in todo):
        import concurrent.futures as cf
        import multiprocessing as mp

        with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as ex:
            futs = {ex.submit(_worker, c.name, v.name, str(outdir)): (c, v) for c, v in todo}
            for fut in cf.as_completed(futs):
                c, v = futs[fut]
                try:
                    r = fut.result()
                except Exception as e:  # worker crash (should not happen)
                    r = ExportResult(None, _one_line(e), False)
                done(c, v, r)
    else:
        for c, v in todo:
            done(c, v, export_case(c, v, outdir))

    fresh = {
        (c.name, v.name): _entry(c, v, results[(c.name, v.name)], *truths[c.name]) for c in cases for v in variants
    }
    merged = {**{k: e for k, e in previous.items() if prev_versions == versions}, **fresh}
    order = {c.name: i for i, c in enumerate(CASES)}
    vorder = {v.name: i for i, v in enumerate(VARIANTS)}
    keys = sorted(merged, key=lambda k: (order.get(k[0], len(order)), k[0], vorder.get(k[1], len(vorder)), k[1]))
    manifest = {"versions": versions, "batch": BATCH, "seq": SEQ, "entries": [merged[k] for k in keys]}
    tmp = man_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2))
    os.replace(tmp, man_path)
    return manifest


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.conformance.zoo", description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("-k", dest="filter", action="append", default=[], help="only cases whose name contains this")
    ap.add_argument("--variant", action="append", default=[], choices=[v.name for v in VARIANTS])
    ap.add_argument("--force", action="store_true", help="re-export even if the .onnx file exists")
    ap.add_argument("--retry-failed", action="store_true", help="retry exports that failed in the previous run")
    ap.add_argument("-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1), help="parallel export processes")
    a = ap.parse_args(argv)

    cases = [c for c in CASES if not a.filter or any(f in c.name for f in a.filter)]
    variants = [v for v in VARIANTS if not a.variant or v.name in a.variant]
    w = max(len(c.name) for c in cases)
    fmt = f"{{:<{w}}}  {{:<14}}  {{:>7}}  {{:<7}}  {{}}"
    print(fmt.format("case", "variant", "seconds", "dynamic", "result"))
    t0 = time.perf_counter()

    def show(e: dict[str, Any]) -> None:
        res = f"ok (ort {e['ort']})" if e["error"] is None else f"ERROR {e['error']}"
        if e["error"] is None and e["dynamic_error"]:
            res += f" (static fallback: {e['dynamic_error']})"
        print(fmt.format(e["case"], e["variant"], f"{e['seconds']:.1f}", str(e["dynamic"]), res), flush=True)

    man = export_all(a.outdir, cases, variants, force=a.force, retry_failed=a.retry_failed, jobs=a.jobs, progress=show)
    wanted = {(c.name, v.name) for c in cases for v in variants}
    mine = [e for e in man["entries"] if (e["case"], e["variant"]) in wanted]
    for e in mine:
        if e["cached"]:
            show(e)
    n_ok = sum(e["error"] is None for e in mine)
    n_cached = sum(e["cached"] for e in mine)
    print(
        f"{n_ok}/{len(mine)} exported ({n_cached} cached), total {time.perf_counter() - t0:.1f}s"
        f" -> {a.outdir}/manifest.json"
    )
    return 0 if n_ok == len(mine) else 1


if __name__ == "__main__":
    sys.exit(main())
