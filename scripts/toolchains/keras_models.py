"""The Keras models every Keras toolchain script builds (on TensorFlow, torch or JAX: the backend is
chosen by KERAS_BACKEND before this module is imported), and their truth read from the layer
objects: ``num_heads``, ``key_dim``, ``value_dim`` (MultiHeadAttention), ``num_query_heads``,
``num_key_value_heads``, ``head_dim`` (GroupQueryAttention and keras-hub's attention layers),
each layer's ``count_params()`` and the model's.

Each model is small (widths 32, two layers), its weights random plus noise, the same seed on
every backend: the same model, so its exports must give the same blocks and totals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
from common import NOISE, block

D = 32  # model width
SEQ = 8


@dataclass
class Built:
    model: keras.Model
    inputs: list[np.ndarray]  # one example batch (what an exporter traces with), in model.inputs' order
    source: str  # how the model was made, in words
    kind: str = "self"  # the attention layers' kind


def _x(width: int = D, seq: int = SEQ) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(1, seq, width)).astype("float32")


def _functional(layer: keras.layers.Layer, *, kv_width: int | None = None, causal: bool = False) -> tuple[keras.Model, list[np.ndarray]]:
    q = keras.Input((SEQ, D), name="query")
    if kv_width is None:
        out = layer(q, q, use_causal_mask=True) if causal else layer(q, q)
        return keras.Model(q, out), [_x()]
    kv = keras.Input((6, kv_width), name="context")
    return keras.Model([q, kv], layer(q, kv)), [_x(), _x(kv_width, 6)]


def mha(name: str, *, kv_width: int | None = None, causal: bool = False, **kwargs: Any) -> Callable[[], Built]:
    def make() -> Built:
        layer = keras.layers.MultiHeadAttention(name="attention", **kwargs)
        model, inputs = _functional(layer, kv_width=kv_width, causal=causal)
        args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        what = f"keras.layers.MultiHeadAttention({args}) on d_model {D}"
        if kv_width is not None:
            what += f", key/value from a {kv_width}-wide context"
        if causal:
            what += ", use_causal_mask=True"
        return Built(model, inputs, what, "cross" if kv_width is not None else "self")
    make.__name__ = name
    return make


def gqa(name: str, **kwargs: Any) -> Callable[[], Built]:
    def make() -> Built:
        layer = keras.layers.GroupQueryAttention(name="attention", **kwargs)
        model, inputs = _functional(layer)
        args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        return Built(model, inputs, f"keras.layers.GroupQueryAttention({args}) on d_model {D}")
    make.__name__ = name
    return make


HUB_SEQ = 16  # the backbones' max_sequence_length: an export at that length reads the whole position table


def _tokens(model: keras.Model) -> list[np.ndarray]:
    names = [t.name for t in model.inputs]
    ids = (np.arange(HUB_SEQ, dtype="int32")[None] * 7 + 3) % 64
    out = []
    for n in names:
        out.append(np.ones_like(ids) if "mask" in n else (np.zeros_like(ids) if "segment" in n else ids))
    return out


def hub(name: str, cls: str, **kwargs: Any) -> Callable[[], Built]:
    def make() -> Built:
        import keras_hub

        model = getattr(keras_hub.models, cls)(**kwargs)
        args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        return Built(model, _tokens(model), f"keras_hub.models.{cls}({args})")
    make.__name__ = name
    return make


_HUB = {"vocabulary_size": 64, "num_layers": 2, "hidden_dim": D, "intermediate_dim": 48}
MODELS: dict[str, Callable[[], Built]] = {m.__name__: m for m in (
    mha("keras_mha_self", num_heads=4, key_dim=8),
    mha("keras_mha_seed", num_heads=4, key_dim=32),  # the seed question: key_dim per head, params scale with heads
    mha("keras_mha_cross", num_heads=4, key_dim=8, kv_width=24),
    mha("keras_mha_value_dim", num_heads=4, key_dim=8, value_dim=6),
    mha("keras_mha_output_shape", num_heads=2, key_dim=8, output_shape=20),
    mha("keras_mha_no_bias", num_heads=4, key_dim=8, use_bias=False),
    mha("keras_mha_causal", num_heads=4, key_dim=8, causal=True),
    gqa("keras_gqa", head_dim=8, num_query_heads=4, num_key_value_heads=2),
    gqa("keras_mqa", head_dim=8, num_query_heads=4, num_key_value_heads=1),
    hub("keras_hub_bert", "BertBackbone", num_heads=4, max_sequence_length=HUB_SEQ, **_HUB),
    hub("keras_hub_gpt2", "GPT2Backbone", num_heads=4, max_sequence_length=HUB_SEQ, **_HUB),
    # tied: an untied reverse embedding is the task head's, which a backbone never reads (no export holds it)
    hub("keras_hub_llama", "LlamaBackbone", num_query_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
        **_HUB),
    hub("keras_hub_gemma", "GemmaBackbone", num_query_heads=4, num_key_value_heads=1, head_dim=8, **_HUB),
)}


def add_noise(model: keras.Model, seed: int) -> None:
    """Random weights plus noise on every variable (biases and norms too: none stays 0 or 1)."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        value = keras.ops.convert_to_numpy(v.value)
        if np.issubdtype(value.dtype, np.floating):
            v.assign(value + rng.normal(0, NOISE, value.shape).astype(value.dtype))


def _attr(layer: Any, *names: str, default: int | None = None) -> int:
    for n in names:
        value = getattr(layer, n, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    if default is not None:
        return default
    raise AttributeError(f"{type(layer).__name__} has none of {names}")


def _head_width(layer: Any, role: str) -> int:
    """A head's width where the layer keeps no attribute for it (keras-hub's LlamaAttention
    derives it in build): the last axis of its per-head projection (EinsumDense ``...h,d``)."""
    dense = getattr(layer, f"_{role}_dense", None) or getattr(layer, f"{role}_dense")
    return int(dense.kernel.shape[-1])


def attention_layers(model: keras.Model) -> list[keras.layers.Layer]:
    """The model's attention layers: MultiHeadAttention and GroupQueryAttention (and their
    subclasses), and any layer holding query/key/value projections (keras-hub's own)."""
    out = []
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, (keras.layers.MultiHeadAttention, keras.layers.GroupQueryAttention)) or (
                any(hasattr(layer, a) for a in ("_query_dense", "query_dense"))
                and any(hasattr(layer, a) for a in ("_key_dense", "key_dense"))):
            out.append(layer)
    return out


def truth(built: Built) -> tuple[list[dict[str, Any]], int]:
    """Each attention layer as its object says it, and the model's count_params()."""
    blocks = []
    for layer in attention_layers(built.model):
        heads = _attr(layer, "num_heads", "num_query_heads", "_num_heads")
        kv_heads = _attr(layer, "num_key_value_heads", "num_heads", "_num_heads")
        if isinstance(layer, keras.layers.MultiHeadAttention):
            d_k, d_v = layer.key_dim, layer.value_dim or layer.key_dim
        else:
            d_k = _attr(layer, "key_dim", "head_dim", "_head_dim", default=_head_width(layer, "query"))
            d_v = _attr(layer, "value_dim", "head_dim", "_head_dim", default=_head_width(layer, "value"))
        blocks.append(block(heads=heads, kv_heads=kv_heads, d_k=d_k, d_v=d_v, d_model=D,  # every query is D wide
                            params=layer.count_params(), kind=built.kind, layer=layer.path))
    return blocks, built.model.count_params()


def feed(built: Built) -> Any:
    """The example batch as the model takes it: a dict by input name (keras-hub), a list, or one array."""
    if isinstance(built.model.input, dict):
        return {t.name: x for t, x in zip(built.model.inputs, built.inputs)}
    return built.inputs if len(built.inputs) > 1 else built.inputs[0]


def build(name: str, seed: int) -> Built:
    keras.utils.set_random_seed(seed)
    built = MODELS[name]()
    built.model(feed(built))
    add_noise(built.model, seed)
    return built
