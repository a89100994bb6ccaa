"""Paddle fixtures: paddle.nn.MultiHeadAttention (self, cross with kdim/vdim, masked) and a small
TransformerEncoder, exported by paddle2onnx (paddle.onnx.export), each with its int8 copy.

Run in an environment with paddlepaddle, paddle2onnx and onnxruntime (not the project's):
    python scripts/toolchains/make_paddle.py [NAME ...]
Truth: the layers' own attributes (num_heads, head_dim, embed_dim, kdim, vdim) and parameters.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import paddle
from common import block, only, out_dir, versions, write

TOOLCHAIN = "paddle2onnx"
VERSIONS = versions("paddlepaddle", "paddle2onnx", "onnxruntime")


def noise(layer: paddle.nn.Layer, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for p in layer.parameters():
        p.set_value(p.numpy() + rng.normal(0, 0.02, p.shape).astype(p.numpy().dtype))


def params(layer: paddle.nn.Layer) -> int:
    return sum(int(np.prod(p.shape)) for p in layer.parameters())


def mha_truth(mha: paddle.nn.MultiHeadAttention, kind: str, layer: str) -> dict[str, Any]:
    # paddle projects K and V to embed_dim: every head is head_dim wide for Q, K and V
    return block(heads=mha.num_heads, kv_heads=mha.num_heads, d_k=mha.head_dim, d_v=mha.head_dim,
                 d_model=mha.embed_dim, params=params(mha), kind=kind, layer=layer)


class SelfAttention(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.mha = paddle.nn.MultiHeadAttention(32, 4)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.mha(x, x, x)


class CrossAttention(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.mha = paddle.nn.MultiHeadAttention(32, 4, kdim=24, vdim=20)

    def forward(self, x: paddle.Tensor, k: paddle.Tensor, v: paddle.Tensor) -> paddle.Tensor:
        return self.mha(x, k, v)


class MaskedAttention(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.mha = paddle.nn.MultiHeadAttention(32, 2)

    def forward(self, x: paddle.Tensor, mask: paddle.Tensor) -> paddle.Tensor:
        return self.mha(x, x, x, attn_mask=mask)


class Encoder(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.embed = paddle.nn.Linear(16, 32)
        self.encoder = paddle.nn.TransformerEncoder(paddle.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0), 2)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.encoder(self.embed(x))


def spec(shape: list[int], name: str, dtype: str = "float32") -> paddle.static.InputSpec:
    return paddle.static.InputSpec(shape, dtype, name)


def export(layer: paddle.nn.Layer, name: str, specs: list[paddle.static.InputSpec]) -> Path:
    target = out_dir(TOOLCHAIN) / name
    paddle.onnx.export(layer, str(target), input_spec=specs, opset_version=17)
    return target.with_suffix(".onnx")


def self_attention() -> tuple[paddle.nn.Layer, list[Any], list[dict[str, Any]], str]:
    m = SelfAttention()
    return m, [spec([1, 8, 32], "x")], [mha_truth(m.mha, "self", "mha")], "paddle.nn.MultiHeadAttention(32, 4)"


def cross_attention() -> tuple[paddle.nn.Layer, list[Any], list[dict[str, Any]], str]:
    m = CrossAttention()
    specs = [spec([1, 8, 32], "x"), spec([1, 6, 24], "k"), spec([1, 6, 20], "v")]
    return m, specs, [mha_truth(m.mha, "cross", "mha")], "paddle.nn.MultiHeadAttention(32, 4, kdim=24, vdim=20)"


def masked_attention() -> tuple[paddle.nn.Layer, list[Any], list[dict[str, Any]], str]:
    m = MaskedAttention()
    specs = [spec([1, 8, 32], "x"), spec([1, 2, 8, 8], "mask")]
    return m, specs, [mha_truth(m.mha, "self", "mha")], "paddle.nn.MultiHeadAttention(32, 2) with an additive attn_mask"


def encoder() -> tuple[paddle.nn.Layer, list[Any], list[dict[str, Any]], str]:
    m = Encoder()
    blocks = [mha_truth(layer.self_attn, "self", f"encoder.layers.{i}.self_attn") for i, layer in enumerate(m.encoder.layers)]
    return m, [spec([1, 8, 16], "x")], blocks, "paddle.nn.TransformerEncoder(TransformerEncoderLayer(32, 4, 64), 2)"


MODELS: dict[str, Callable[[], tuple[paddle.nn.Layer, list[Any], list[dict[str, Any]], str]]] = {
    "paddle_mha_self": self_attention,
    "paddle_mha_cross": cross_attention,
    "paddle_mha_masked": masked_attention,
    "paddle_encoder": encoder,
}


def main(argv: list[str]) -> None:
    wanted = only(argv)
    for seed, (name, make) in enumerate(MODELS.items()):
        if wanted and name not in wanted:
            continue
        paddle.seed(seed)
        layer, specs, blocks, source = make()
        noise(layer, seed)
        layer.eval()
        path = export(layer, name, specs)
        write(TOOLCHAIN, name, path, source=source, blocks=blocks, total=params(layer), versions=VERSIONS)


if __name__ == "__main__":
    main(sys.argv)
