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
           dynamic: dict[str, dict[int, str]] | None = None, names: list[str] | None = None,
           fold: bool = True) -> str | None:
    """``model`` exported to ``path`` by one torch exporter (dynamic axes as given); None when that
    exporter cannot export it (the caller skips)."""
    import contextlib
    import io
    import logging
    import warnings

    names = names or [f"x{i}" for i in range(len(args))]
    kwargs: dict[str, object] = {"input_names": names, "dynamo": dynamo}
    if not dynamo and not fold:
        kwargs["do_constant_folding"] = False  # keep the graph's own computations on stored tensors
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


class AnnotatedMHA(nn.Module):
    """The Annotated Transformer's MultiHeadedAttention: four nn.Linear, view + transpose per head."""

    def __init__(self, d_model: int = 32, h: int = 4) -> None:
        super().__init__()
        self.d_k, self.h = d_model // h, h
        self.linears = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(4)])

    def truth(self) -> BlockTruth:
        return BlockTruth(self.h, self.d_k, own_params(self))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nbatches = x.size(0)
        query, key, value = [lin(t).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
                             for lin, t in zip(self.linears, (x, x, x))]
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(self.d_k)
        p = scores.softmax(dim=-1)
        out = torch.matmul(p, value).transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](out)


class TorchMHA(nn.Module):
    """nn.MultiheadAttention over [batch, seq, d] (self-attention), its output only."""

    def __init__(self, d_model: int = 32, h: int = 4, need_weights: bool = False) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, h, batch_first=True)
        self.h, self.d_k, self.need_weights = h, d_model // h, need_weights

    def truth(self) -> BlockTruth:
        return BlockTruth(self.h, self.d_k, own_params(self))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # need_weights=True: the explicit softmax path (no scaled_dot_product_attention below opset 14)
        return self.attn(x, x, x, need_weights=self.need_weights)[0]


def older_opset(model_proto: object, opset: int) -> object:
    """An ONNX model rewritten into the forms older exporters wrote (for opsets modern torch no longer
    exports a module at): a node computing from constants only (Mod of two constants) folded to a
    Constant; Slice (opset <= 9), Pad (<= 10), Unsqueeze/Squeeze/Split/Reduce* (<= 12) with their
    constant inputs as attributes; every int64 Constant written as an int32 Constant cast to int64
    (tf2onnx and early torch exporters built shape constants that way); the opset set to ``opset``."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model_proto)  # type: ignore[arg-type]
    graph = m.graph
    consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer
                                     if t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)}
    out: list[onnx.NodeProto] = []
    attr_form = {"Slice": 9, "Pad": 10, "Unsqueeze": 12, "Squeeze": 12, "Split": 12, "ReduceSum": 12,
                 "ReduceMean": 12, "ReduceMax": 12}
    names = {"Slice": ("starts", "ends", "axes", "steps"), "Pad": ("pads", "value"), "Unsqueeze": ("axes",),
             "Squeeze": ("axes",), "Split": ("split",), "ReduceSum": ("axes",), "ReduceMean": ("axes",),
             "ReduceMax": ("axes",)}
    for node in graph.node:
        if node.op_type == "Constant":
            value = numpy_helper.to_array(node.attribute[0].t)
            consts[node.output[0]] = value
            out.append(node)
            continue
        if node.op_type == "Mod" and all(x in consts for x in node.input):
            value = np.mod(consts[node.input[0]], consts[node.input[1]])  # Mod (fmod=0) on integers
            consts[node.output[0]] = value
            out.append(helper.make_node("Constant", [], [node.output[0]], value=numpy_helper.from_array(value)))
            continue
        limit = attr_form.get(node.op_type)
        extra = list(node.input[1:])
        if limit is not None and opset <= limit and all(x == "" or x in consts for x in extra):
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            for key, x in zip(names[node.op_type], extra):
                if x and key != "value":
                    attrs[key] = [int(v) for v in consts[x].flatten()]
                elif x:
                    attrs[key] = float(consts[x].flatten()[0])
            if node.op_type == "Slice" and any(s != 1 for s in attrs.pop("steps", [1])):
                out.append(node)
                continue
            out.append(helper.make_node(node.op_type, [node.input[0]], list(node.output), name=node.name, **attrs))
            continue
        out.append(node)
    final: list[onnx.NodeProto] = []
    for node in out:
        value = consts.get(node.output[0]) if node.op_type == "Constant" else None
        if value is not None and value.dtype == np.int64 and np.all(np.abs(value) < 2**31):
            narrow = node.output[0] + "_int32"
            final.append(helper.make_node("Constant", [], [narrow],
                                          value=numpy_helper.from_array(value.astype(np.int32))))
            final.append(helper.make_node("Cast", [narrow], [node.output[0]], to=onnx.TensorProto.INT64))
            continue
        final.append(node)
    del graph.node[:]
    graph.node.extend(final)
    del m.opset_import[:]
    m.opset_import.append(helper.make_opsetid("", opset))
    return m


class ScaledAttention(nn.Module):
    """Attention with a learned temperature on the scores and a learned gate on the output, each a
    one-element parameter (shape [1])."""

    def __init__(self, d: int = 32, h: int = 4) -> None:
        super().__init__()
        self.h, self.d = h, d // h
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.temperature = nn.Parameter(torch.ones(1))
        self.gate = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-2, -1)) * self.temperature
        out = (a.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(out) + self.gate


class PooledClassifier(nn.Module):
    """ScaledAttention, mean pooling and a classifier matrix: an nn.Parameter, or (``plain``) the same
    learned matrix kept as a plain tensor attribute, which exporters write as a constant."""

    def __init__(self, d: int = 32, h: int = 4, classes: int = 10, plain: bool = False) -> None:
        super().__init__()
        self.attn = ScaledAttention(d, h)
        weight = torch.randn(classes, d) * 0.02
        self.head_weight: torch.Tensor = weight if plain else nn.Parameter(weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x).mean(1) @ self.head_weight.t()


def weights_as_constant_nodes(model_proto: object, producer: str = "a converter") -> object:
    """An ONNX model whose initializers are written as Constant nodes of the same names, as some
    converters write every weight (the producer renamed: torch never does this)."""
    import onnx
    from onnx import helper

    m = onnx.ModelProto()
    m.CopyFrom(model_proto)  # type: ignore[arg-type]
    nodes = [helper.make_node("Constant", [], [t.name], value=t) for t in m.graph.initializer]
    del m.graph.initializer[:]
    old = list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(nodes + old)
    m.producer_name = producer
    return m


class WindowAttention(nn.Module):
    """Swin-style window attention: a packed qkv Linear, a relative position bias table [(2w-1)², heads]
    gathered by a relative position index buffer and added to the scores, and an output Linear."""

    def __init__(self, dim: int = 32, window: int = 4, heads: int = 4) -> None:
        super().__init__()
        self.dim, self.window, self.heads = dim, window, heads
        self.head_dim = dim // heads
        self.scale = self.head_dim ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads) * 0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.register_buffer("relative_position_index", rel[..., 0] * (2 * window - 1) + rel[..., 1],
                             persistent=False)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def truth(self) -> BlockTruth:
        return BlockTruth(self.heads, self.head_dim, own_params(self), self.relative_position_bias_table.numel())

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [windows·batch, window², dim]
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        attn = (attn + bias.permute(2, 0, 1).contiguous().unsqueeze(0)).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class SwinWindowBlock(nn.Module):
    """A feature map [batch, H, W, dim] padded to whole windows, cyclically shifted by half a window
    (``shift``: with the attention mask of the shifted windows, added through a 5-D view of the
    scores), partitioned into windows, WindowAttention in each, merged back."""

    def __init__(self, dim: int = 32, window: int = 4, heads: int = 4, shift: bool = True) -> None:
        super().__init__()
        self.window, self.shift, self.heads = window, window // 2 if shift else 0, heads
        self.attn = WindowAttention(dim, window, heads)

    def truth(self) -> BlockTruth:
        return self.attn.truth()

    def _mask(self, height: int, width: int, device: torch.device) -> torch.Tensor:
        w, s = self.window, self.shift
        img = torch.zeros((1, height, width, 1), device=device)
        count = 0
        for hs in (slice(0, -w), slice(-w, -s), slice(-s, None)):
            for ws in (slice(0, -w), slice(-w, -s), slice(-s, None)):
                img[:, hs, ws, :] = count
                count += 1
        windows = self._partition(img).view(-1, w * w)
        mask = windows.unsqueeze(1) - windows.unsqueeze(2)
        return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)

    def _partition(self, x: torch.Tensor) -> torch.Tensor:
        b, h, wd, c = x.shape
        w = self.window
        return x.view(b, h // w, w, wd // w, w, c).permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, w, w, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [batch, H, W, dim]
        b, h, wd, c = x.shape
        w = self.window
        pad_b, pad_r = (w - h % w) % w, (w - wd % w) % w
        x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
        _, hp, wp, _ = x.shape
        if self.shift:
            x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        windows = self._partition(x).view(-1, w * w, c)
        if self.shift:
            mask = self._mask(hp, wp, x.device)
            out = self._masked_attention(windows, mask)
        else:
            out = self.attn(windows)
        out = out.view(b, hp // w, wp // w, w, w, c).permute(0, 1, 3, 2, 4, 5).contiguous().view(b, hp, wp, c)
        if self.shift:
            out = torch.roll(out, shifts=(self.shift, self.shift), dims=(1, 2))
        return out[:, :h, :wd, :].contiguous()

    def _masked_attention(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        a = self.attn
        bw, n, c = x.shape
        qkv = a.qkv(x).reshape(bw, n, 3, a.heads, c // a.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * a.scale) @ k.transpose(-2, -1)
        bias = a.relative_position_bias_table[a.relative_position_index.view(-1)].view(n, n, -1)
        attn = attn + bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        windows = mask.shape[0]
        attn = attn.view(bw // windows, windows, a.heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
        attn = attn.view(-1, a.heads, n, n).softmax(dim=-1)
        return a.proj((attn @ v).transpose(1, 2).reshape(bw, n, c))


class AttentionPool(nn.Module):
    """A SigLIP-style multihead attention pooling (MAP) head: a learned probe [1, 1, d] attends to the
    encoder output through nn.MultiheadAttention, then a LayerNorm and an MLP with a residual."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.probe = nn.Parameter(torch.randn(1, 1, d))
        self.attention = nn.MultiheadAttention(d, heads, batch_first=True)
        self.layernorm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.heads, self.d_k = heads, d // heads

    def truth(self) -> BlockTruth:
        return BlockTruth(self.heads, self.d_k, own_params(self.attention))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [batch, seq, d]
        probe = self.probe.repeat(x.shape[0], 1, 1)
        out = self.attention(probe, x, x, need_weights=True)[0]
        return (out + self.mlp(self.layernorm(out)))[:, 0]


class EncoderWithPool(nn.Module):
    """A one-layer encoder (nn.MultiheadAttention self-attention) and an AttentionPool head."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.encoder = TorchMHA(d, heads, need_weights=True)
        self.head = AttentionPool(d, heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))
