"""Flax NNX attention exported by jax2onnx: flax.nnx.MultiHeadAttention self, masked (a boolean
mask input), causal, grouped-query (num_kv_heads), cross (in_kv_features) and wide
(qkv_features != in_features, out_features != in_features), each with its int8 copy.

Run in an environment with jax, flax, jax2onnx and onnxruntime (not the project's):
    python scripts/toolchains/make_flax.py [NAME ...]
Truth: the module's own attributes (num_heads, num_kv_heads, head_dim, in_features) and its
nnx.Param leaves.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx
from common import NOISE, block, clear_failure, only, out_dir, record_failure, versions, write
from flax import nnx
from jax2onnx import to_onnx

TOOLCHAIN = "flax-jax2onnx"
VERSIONS = versions("flax", "jax", "jax2onnx", "onnxruntime")
D, SEQ = 32, 8


def params(module: nnx.Module) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(nnx.state(module, nnx.Param)))


def add_noise(module: nnx.Module, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _, node in nnx.iter_graph(module):
        if isinstance(node, nnx.Param):
            node.value = node.value + jnp.asarray(rng.normal(0, NOISE, node.value.shape), node.value.dtype)


def truth(m: nnx.MultiHeadAttention, kind: str) -> dict[str, Any]:
    heads = m.num_heads
    kv_heads = getattr(m, "num_kv_heads", None) or heads
    return block(heads=heads, kv_heads=kv_heads, d_k=m.head_dim, d_v=m.head_dim, d_model=m.in_features,
                 params=params(m), kind=kind, layer="attention")


def spec(*shape: int, dtype: Any = jnp.float32) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype)


Made = tuple[nnx.MultiHeadAttention, Callable[..., Any], list[jax.ShapeDtypeStruct], str, str]


def self_attention(rngs: nnx.Rngs) -> Made:
    m = nnx.MultiHeadAttention(num_heads=4, in_features=D, decode=False, rngs=rngs)
    return m, lambda x: m(x), [spec(1, SEQ, D)], "self", "nnx.MultiHeadAttention(num_heads=4, in_features=32)"


def masked(rngs: nnx.Rngs) -> Made:
    m = nnx.MultiHeadAttention(num_heads=4, in_features=D, decode=False, rngs=rngs)
    return (m, lambda x, mask: m(x, mask=mask), [spec(1, SEQ, D), spec(1, 1, SEQ, SEQ, dtype=jnp.bool_)], "self",
            "nnx.MultiHeadAttention(num_heads=4, in_features=32) with a boolean mask input")


def causal(rngs: nnx.Rngs) -> Made:
    m = nnx.MultiHeadAttention(num_heads=2, in_features=D, decode=False, rngs=rngs)
    return (m, lambda x: m(x, mask=nnx.make_causal_mask(jnp.ones(x.shape[:2]))), [spec(1, SEQ, D)], "self",
            "nnx.MultiHeadAttention(num_heads=2, in_features=32) with nnx.make_causal_mask")


def grouped(rngs: nnx.Rngs) -> Made:
    m = nnx.MultiHeadAttention(num_heads=4, num_kv_heads=2, in_features=D, decode=False, rngs=rngs)
    return m, lambda x: m(x), [spec(1, SEQ, D)], "self", "nnx.MultiHeadAttention(num_heads=4, num_kv_heads=2, in_features=32)"


def cross(rngs: nnx.Rngs) -> Made:
    m = nnx.MultiHeadAttention(num_heads=4, in_features=D, in_kv_features=24, decode=False, rngs=rngs)
    return (m, lambda x, c: m(x, c), [spec(1, SEQ, D), spec(1, 6, 24)], "cross",
            "nnx.MultiHeadAttention(num_heads=4, in_features=32, in_kv_features=24), K/V from a context")


def wide(rngs: nnx.Rngs) -> Made:
    m = nnx.MultiHeadAttention(num_heads=4, in_features=D, qkv_features=64, out_features=24, decode=False, rngs=rngs)
    return (m, lambda x: m(x), [spec(1, SEQ, D)], "self",
            "nnx.MultiHeadAttention(num_heads=4, in_features=32, qkv_features=64, out_features=24)")


MODELS: dict[str, Callable[[nnx.Rngs], Made]] = {
    "flax_mha_self": self_attention,
    "flax_mha_masked": masked,
    "flax_mha_causal": causal,
    "flax_gqa": grouped,
    "flax_mha_cross": cross,
    "flax_mha_wide": wide,
}


def main(argv: list[str]) -> None:
    wanted = only(argv)
    for seed, (name, make) in enumerate(MODELS.items()):
        if wanted and name not in wanted:
            continue
        module, fn, inputs, kind, source = make(nnx.Rngs(seed))
        add_noise(module, seed)
        path = out_dir(TOOLCHAIN) / f"{name}.onnx"
        try:
            proto = to_onnx(fn, inputs, model_name=name)
        except Exception as exc:  # recorded, the others go on
            record_failure(TOOLCHAIN, name, exc)
            continue
        clear_failure(TOOLCHAIN, name)
        onnx.save(proto, str(path))
        write(TOOLCHAIN, name, path, source=source, blocks=[truth(module, kind)], total=params(module), versions=VERSIONS)


if __name__ == "__main__":
    main(sys.argv)
