"""Small torch modules that name and shape their parameters and buffers as timm's LeViT and Swin
do (timm itself is not a dependency: it pulls torchvision). Their state dicts are what a timm
checkpoint of those models holds, at toy sizes.

- LeViT (timm/models/levit.py, the linear variant): ``LinearNorm`` is a bias-free Linear followed
  by a BatchNorm1d (``.linear``, ``.bn``); an attention holds a packed ``qkv`` LinearNorm whose
  rows are per head [q (key_dim), k (key_dim), v (attn_ratio·key_dim)], ``proj`` = Sequential(act,
  ``ln`` LinearNorm), the learned ``attention_biases`` [heads, resolution²] and the index buffer
  ``attention_bias_idxs``. A stage's downsampling attention (``AttentionDownsample``) has ``kv``
  and ``q`` = Sequential(subsample, ``ln``) instead.
- Swin (timm/models/swin_transformer.py): ``WindowAttention`` holds ``qkv`` and ``proj`` Linears,
  ``relative_position_bias_table`` [(2·window-1)², heads] and the ``relative_position_index``
  buffer; each stage (``layers.N``) has its own head count.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
from torch import nn


class LinearNorm(nn.Module):  # type: ignore[misc]
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x: Any) -> Any:
        x = self.linear(x)
        return self.bn(x.flatten(0, 1)).reshape_as(x)


def _rel_pos(q_res: int, k_res: int, stride: int) -> Any:
    k_pos = torch.stack(torch.meshgrid(torch.arange(k_res), torch.arange(k_res), indexing="ij")).flatten(1)
    q_pos = torch.stack(torch.meshgrid(torch.arange(0, k_res, step=stride), torch.arange(0, k_res, step=stride),
                                       indexing="ij")).flatten(1)
    rel = (q_pos[..., :, None] - k_pos[..., None, :]).abs()
    return (rel[0] * k_res) + rel[1]


class LevitAttention(nn.Module):  # type: ignore[misc]
    def __init__(self, dim: int, key_dim: int, num_heads: int, attn_ratio: float, resolution: int) -> None:
        super().__init__()
        self.num_heads, self.key_dim, self.scale = num_heads, key_dim, key_dim ** -0.5
        self.val_dim = int(attn_ratio * key_dim)
        self.val_attn_dim = self.val_dim * num_heads
        self.qkv = LinearNorm(dim, self.val_attn_dim + key_dim * num_heads * 2)
        self.proj = nn.Sequential(OrderedDict([("act", nn.Hardswish()), ("ln", LinearNorm(self.val_attn_dim, dim))]))
        self.attention_biases = nn.Parameter(torch.zeros(num_heads, resolution * resolution))
        self.register_buffer("attention_bias_idxs", _rel_pos(resolution, resolution, 1), persistent=False)

    def forward(self, x: Any) -> Any:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, self.num_heads, -1).split([self.key_dim, self.key_dim, self.val_dim], dim=3)
        q, k, v = q.permute(0, 2, 1, 3), k.permute(0, 2, 3, 1), v.permute(0, 2, 1, 3)
        attn = q @ k * self.scale + self.attention_biases[:, self.attention_bias_idxs]
        x = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, self.val_attn_dim)
        return self.proj(x)


class _Subsample(nn.Module):  # type: ignore[misc]
    def __init__(self, stride: int, resolution: int) -> None:
        super().__init__()
        self.stride, self.resolution = stride, resolution

    def forward(self, x: Any) -> Any:
        b, _, c = x.shape
        x = x.view(b, self.resolution, self.resolution, c)[:, ::self.stride, ::self.stride]
        return x.reshape(b, -1, c)


class LevitAttentionDownsample(nn.Module):  # type: ignore[misc]
    def __init__(self, in_dim: int, out_dim: int, key_dim: int, num_heads: int, attn_ratio: float,
                 resolution: int, stride: int = 2) -> None:
        super().__init__()
        self.num_heads, self.key_dim, self.scale = num_heads, key_dim, key_dim ** -0.5
        self.val_dim = int(attn_ratio * key_dim)
        self.val_attn_dim = self.val_dim * num_heads
        self.kv = LinearNorm(in_dim, self.val_attn_dim + key_dim * num_heads)
        self.q = nn.Sequential(OrderedDict([("down", _Subsample(stride, resolution)),
                                            ("ln", LinearNorm(in_dim, key_dim * num_heads))]))
        self.proj = nn.Sequential(OrderedDict([("act", nn.Hardswish()), ("ln", LinearNorm(self.val_attn_dim, out_dim))]))
        self.attention_biases = nn.Parameter(torch.zeros(num_heads, resolution * resolution))
        self.register_buffer("attention_bias_idxs", _rel_pos(resolution, resolution, stride), persistent=False)

    def forward(self, x: Any) -> Any:
        b, n, _ = x.shape
        k, v = self.kv(x).view(b, n, self.num_heads, -1).split([self.key_dim, self.val_dim], dim=3)
        k, v = k.permute(0, 2, 3, 1), v.permute(0, 2, 1, 3)
        q = self.q(x).view(b, -1, self.num_heads, self.key_dim).permute(0, 2, 1, 3)
        attn = q @ k * self.scale + self.attention_biases[:, self.attention_bias_idxs]
        x = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, -1, self.val_attn_dim)
        return self.proj(x)


class _LevitMlp(nn.Module):  # type: ignore[misc]
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.ln1, self.act, self.ln2 = LinearNorm(dim, hidden), nn.Hardswish(), LinearNorm(hidden, dim)

    def forward(self, x: Any) -> Any:
        return self.ln2(self.act(self.ln1(x)))


class _LevitBlock(nn.Module):  # type: ignore[misc]
    def __init__(self, dim: int, key_dim: int, heads: int, resolution: int) -> None:
        super().__init__()
        self.attn = LevitAttention(dim, key_dim, heads, 2.0, resolution)
        self.mlp = _LevitMlp(dim, dim * 2)

    def forward(self, x: Any) -> Any:
        x = x + self.attn(x)
        return x + self.mlp(x)


class _LevitDownsample(nn.Module):  # type: ignore[misc]
    def __init__(self, in_dim: int, out_dim: int, key_dim: int, heads: int, resolution: int) -> None:
        super().__init__()
        self.attn_downsample = LevitAttentionDownsample(in_dim, out_dim, key_dim, heads, 4.0, resolution)
        self.mlp = _LevitMlp(out_dim, out_dim * 2)

    def forward(self, x: Any) -> Any:
        x = self.attn_downsample(x)
        return x + self.mlp(x)


class _LevitStage(nn.Module):  # type: ignore[misc]
    def __init__(self, in_dim: int, dim: int, key_dim: int, heads: int, depth: int, resolution: int,
                 down_heads: int | None) -> None:
        super().__init__()
        if down_heads is not None:
            self.downsample: nn.Module = _LevitDownsample(in_dim, dim, key_dim, down_heads, resolution)
            resolution = (resolution - 1) // 2 + 1
        else:
            self.downsample = nn.Identity()
        self.blocks = nn.Sequential(*[_LevitBlock(dim, key_dim, heads, resolution) for _ in range(depth)])

    def forward(self, x: Any) -> Any:
        return self.blocks(self.downsample(x))


class Levit(nn.Module):  # type: ignore[misc]
    """timm's Levit at toy size: a conv stem with BatchNorm, stages of attention blocks, each stage
    after the first entered through a downsampling attention."""

    def __init__(self, dims: tuple[int, ...] = (32, 48, 64), heads: tuple[int, ...] = (2, 3, 4),
                 depth: tuple[int, ...] = (2, 2, 2), key_dim: int = 8, resolution: int = 4) -> None:
        super().__init__()
        self.stem = nn.Sequential(OrderedDict([("conv1", nn.Sequential(OrderedDict([
            ("linear", nn.Conv2d(3, dims[0], 3, 2, 1, bias=False)), ("bn", nn.BatchNorm2d(dims[0]))])))]))
        stages = []
        in_dim = dims[0]
        for i, (dim, h, d) in enumerate(zip(dims, heads, depth)):
            stages.append(_LevitStage(in_dim, dim, key_dim, h, d, resolution, None if i == 0 else in_dim // key_dim))
            if i:
                resolution = (resolution - 1) // 2 + 1
            in_dim = dim
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(dims[-1], 10)

    def forward(self, img: Any) -> Any:
        x = self.stem(img).flatten(2).transpose(1, 2)
        return self.head(self.stages(x).mean(1))


class WindowAttention(nn.Module):  # type: ignore[misc]
    def __init__(self, dim: int, num_heads: int, window: int) -> None:
        super().__init__()
        self.num_heads, self.window = num_heads, window
        self.scale = (dim // num_heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, num_heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += window - 1
        rel[:, :, 1] += window - 1
        rel[:, :, 0] *= 2 * window - 1
        self.register_buffer("relative_position_index", rel.sum(-1), persistent=False)
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Any) -> Any:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        attn = (q * self.scale) @ k.transpose(-2, -1) + bias.permute(2, 0, 1).unsqueeze(0)
        return self.proj((attn.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c))


class _SwinBlock(nn.Module):  # type: ignore[misc]
    def __init__(self, dim: int, heads: int, window: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, heads, window)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(OrderedDict([("fc1", nn.Linear(dim, 2 * dim)), ("act", nn.GELU()),
                                              ("fc2", nn.Linear(2 * dim, dim))]))

    def forward(self, x: Any) -> Any:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class _SwinStage(nn.Module):  # type: ignore[misc]
    def __init__(self, dim: int, heads: int, depth: int, window: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[_SwinBlock(dim, heads, window) for _ in range(depth)])

    def forward(self, x: Any) -> Any:
        return self.blocks(x)


class Swin(nn.Module):  # type: ignore[misc]
    """timm's SwinTransformer's attention layout at toy size: stages of window attention with their
    own head counts (one window per image here; the patch merging between stages is a Linear)."""

    def __init__(self, dim: int = 32, heads: tuple[int, ...] = (2, 4), depth: tuple[int, ...] = (2, 2),
                 window: int = 3) -> None:
        super().__init__()
        self.patch_embed = nn.Linear(12, dim)
        self.layers = nn.Sequential(*[_SwinStage(dim, h, d, window) for h, d in zip(heads, depth)])
        self.head = nn.Linear(dim, 10)

    def forward(self, x: Any) -> Any:
        return self.head(self.layers(self.patch_embed(x)).mean(1))
