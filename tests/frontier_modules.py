"""Attention blocks written the way third-party toolchains write them, as small torch modules.

Each module is its own ground truth: heads and head size are its attributes, and the parameters of
the attention block are the module's own parameter count (its projections and, where it has them,
its relative-position tables). Nothing here imports torchvision, timm or a model package.

- ``VitsAttention``: the text encoder attention of VITS-style TTS models: Conv1d kernel-1
  projections over [batch, channels, time] and per-head relative-position tables (emb_rel_k,
  emb_rel_v) feeding the scores and the output.
- ``VaeAttention``: a latent-diffusion VAE mid-block attention: Conv2d 1x1 projections, one head.
- ``UNetConvAttention``: a multi-head attention over a feature map with Conv2d 1x1 projections.
- ``PackedConvAttention``: a guided-diffusion UNet attention: one Conv1d kernel-1 qkv, split per head.
- ``AnnotatedMHA``: the Annotated Transformer's MultiHeadedAttention (four nn.Linear, view + transpose).
- ``WindowAttention``: Swin-style window partition and a relative position bias table.
- ``AttentionPool``: a SigLIP-style MAP head: nn.MultiheadAttention from a learned probe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class BlockTruth:
    """What the module says about its attention block."""

    heads: int
    d_k: int
    params: int  # the attention block's parameters: projections plus relative-position tables
    extra: int = 0  # of which: the relative-position tables


def own_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


class VitsAttention(nn.Module):
    """VITS text-encoder attention (Conv1d kernel 1 projections, relative-position tables)."""

    def __init__(self, channels: int = 32, heads: int = 4, window: int = 4) -> None:
        super().__init__()
        self.heads, self.k_channels, self.window = heads, channels // heads, window
        self.conv_q = nn.Conv1d(channels, channels, 1)
        self.conv_k = nn.Conv1d(channels, channels, 1)
        self.conv_v = nn.Conv1d(channels, channels, 1)
        self.conv_o = nn.Conv1d(channels, channels, 1)
        std = self.k_channels ** -0.5
        self.emb_rel_k = nn.Parameter(torch.randn(1, 2 * window + 1, self.k_channels) * std)
        self.emb_rel_v = nn.Parameter(torch.randn(1, 2 * window + 1, self.k_channels) * std)

    def truth(self) -> BlockTruth:
        return BlockTruth(self.heads, self.k_channels, own_params(self),
                          self.emb_rel_k.numel() + self.emb_rel_v.numel())

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [b, channels, t]
        q, k, v = self.conv_q(x), self.conv_k(x), self.conv_v(x)
        b, d, t = k.size()
        q = q.view(b, self.heads, self.k_channels, t).transpose(2, 3)
        k = k.view(b, self.heads, self.k_channels, t).transpose(2, 3)
        v = v.view(b, self.heads, self.k_channels, t).transpose(2, 3)
        q = q / math.sqrt(self.k_channels)
        scores = torch.matmul(q, k.transpose(-2, -1))
        rel_k = self._relative_embeddings(self.emb_rel_k, t)
        rel_logits = torch.matmul(q, rel_k.unsqueeze(0).transpose(-2, -1))
        scores = scores + self._relative_to_absolute(rel_logits)
        p = F.softmax(scores, dim=-1)
        out = torch.matmul(p, v)
        rel_v = self._relative_embeddings(self.emb_rel_v, t)
        out = out + torch.matmul(self._absolute_to_relative(p), rel_v.unsqueeze(0))
        out = out.transpose(2, 3).contiguous().view(b, d, t)
        return self.conv_o(out)

    def _relative_embeddings(self, table: torch.Tensor, length: int) -> torch.Tensor:
        pad = max(length - (self.window + 1), 0)
        start = max((self.window + 1) - length, 0)
        if pad > 0:
            table = F.pad(table, [0, 0, pad, pad, 0, 0])
        return table[:, start:start + 2 * length - 1]

    @staticmethod
    def _relative_to_absolute(x: torch.Tensor) -> torch.Tensor:
        b, h, n, _ = x.size()
        x = F.pad(x, [0, 1, 0, 0, 0, 0, 0, 0])
        flat = F.pad(x.view([b, h, n * 2 * n]), [0, n - 1, 0, 0, 0, 0])
        return flat.view([b, h, n + 1, 2 * n - 1])[:, :, :n, n - 1:]

    @staticmethod
    def _absolute_to_relative(x: torch.Tensor) -> torch.Tensor:
        b, h, n, _ = x.size()
        x = F.pad(x, [0, n - 1, 0, 0, 0, 0, 0, 0])
        flat = F.pad(x.view([b, h, n * n + n * (n - 1)]), [n, 0, 0, 0, 0, 0])
        return flat.view([b, h, n, 2 * n])[:, :, :, 1:]


class VaeAttention(nn.Module):
    """A latent-diffusion VAE attention block: Conv2d 1x1 q/k/v/proj_out over a feature map, one head."""

    def __init__(self, channels: int = 32) -> None:
        super().__init__()
        self.q = nn.Conv2d(channels, channels, 1)
        self.k = nn.Conv2d(channels, channels, 1)
        self.v = nn.Conv2d(channels, channels, 1)
        self.proj_out = nn.Conv2d(channels, channels, 1)
        self.channels = channels

    def truth(self) -> BlockTruth:
        return BlockTruth(1, self.channels, own_params(self))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [b, c, h, w]
        q, k, v = self.q(x), self.k(x), self.v(x)
        b, c, h, w = q.shape
        q = q.reshape(b, c, h * w).permute(0, 2, 1)
        k = k.reshape(b, c, h * w)
        attn = torch.bmm(q, k) * (int(c) ** -0.5)
        attn = F.softmax(attn, dim=2)
        out = torch.bmm(v.reshape(b, c, h * w), attn.permute(0, 2, 1)).reshape(b, c, h, w)
        return x + self.proj_out(out)


class UNetConvAttention(nn.Module):
    """Multi-head attention over a feature map with Conv2d 1x1 projections."""

    def __init__(self, channels: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.d = heads, channels // heads
        self.to_q = nn.Conv2d(channels, channels, 1)
        self.to_k = nn.Conv2d(channels, channels, 1)
        self.to_v = nn.Conv2d(channels, channels, 1)
        self.to_out = nn.Conv2d(channels, channels, 1)

    def truth(self) -> BlockTruth:
        return BlockTruth(self.heads, self.d, own_params(self))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, hh, ww = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(b, self.heads, self.d, hh * ww).transpose(2, 3)

        q, k, v = heads(self.to_q(x)), heads(self.to_k(x)), heads(self.to_v(x))
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.d), dim=-1)
        out = (p @ v).transpose(2, 3).reshape(b, c, hh, ww)
        return self.to_out(out)


class PackedConvAttention(nn.Module):
    """A guided-diffusion UNet attention: qkv = Conv1d(c, 3c, 1), heads split by a reshape."""

    def __init__(self, channels: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.d = heads, channels // heads
        self.qkv = nn.Conv1d(channels, 3 * channels, 1)
        self.proj_out = nn.Conv1d(channels, channels, 1)

    def truth(self) -> BlockTruth:
        return BlockTruth(self.heads, self.d, own_params(self))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [b, c, t]
        b, c, t = x.shape
        qkv = self.qkv(x)
        q, k, v = qkv.reshape(b * self.heads, 3 * self.d, t).split(self.d, dim=1)
        scale = 1 / math.sqrt(math.sqrt(self.d))
        weight = torch.einsum("bct,bcs->bts", q * scale, k * scale)
        weight = torch.softmax(weight, dim=-1)
        out = torch.einsum("bts,bcs->bct", weight, v).reshape(b, c, t)
        return x + self.proj_out(out)


def export(model: nn.Module, args: tuple[torch.Tensor, ...], path: str, *, dynamo: bool, opset: int | None = None,
           dynamic: dict[str, dict[int, str]] | None = None, names: list[str] | None = None) -> str | None:
    """``model`` exported to ``path`` by one torch exporter (dynamic axes as given); None when that
    exporter cannot export it (the caller skips)."""
    import contextlib
    import io
    import logging
    import warnings

    names = names or [f"x{i}" for i in range(len(args))]
    kwargs: dict[str, object] = {"input_names": names, "dynamo": dynamo}
    if opset is not None:
        kwargs["opset_version"] = opset
    if dynamic:
        kwargs["dynamic_axes"] = dynamic
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(model, args, path, **kwargs)
    except Exception:  # an exporter that cannot handle the module: the caller skips that exporter
        return None
    finally:
        logging.disable(logging.NOTSET)
    return path


def with_noise(model: nn.Module, scale: float = 0.02) -> nn.Module:
    """``model`` in eval mode with seeded noise on every parameter (exporters drop all-zero biases)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)
    return model.eval()


class WideConvAttention(nn.Module):
    """Q, K and V made by 3-wide convolutions (not projections: each output mixes three positions)."""

    def __init__(self, channels: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.d = heads, channels // heads
        self.q = nn.Conv1d(channels, channels, 3, padding=1)
        self.k = nn.Conv1d(channels, channels, 3, padding=1)
        self.v = nn.Conv1d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [b, c, t]
        b, c, t = x.shape

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.reshape(b, self.heads, self.d, t).transpose(2, 3)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.d), dim=-1)
        return (p @ v).transpose(2, 3).reshape(b, c, t)
