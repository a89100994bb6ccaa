"""What a Keras config says about attention layers: each layer's own arguments, by layer name.

A Keras config is a tree of ``{"class_name", "config"}`` nodes: a functional model lists its
layers (``config.layers``), a wrapper holds its layer, a keras-hub task its backbone; a keras-hub
backbone keeps only its own arguments (``num_heads`` or ``num_query_heads``, ...), which are every
layer's. The arguments Keras' attention layers take, under the names they take them:
``MultiHeadAttention(num_heads, key_dim, value_dim)``, ``GroupQueryAttention(num_query_heads,
num_key_value_heads, head_dim)``. A claim, like a Hugging Face config's: the weights' shapes
outrank it (``matchers.assembly.decide``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mhainspect.ir.limits import MAX_CONFIG_INT
from mhainspect.ir.weights import HeadOffers
from mhainspect.results import EvidenceSource

_HEADS = ("num_heads", "num_query_heads", "num_attention_heads")
_KV_HEADS = ("num_key_value_heads", "num_kv_heads")
_HEAD_DIM = ("key_dim", "head_dim")
_VALUE_DIM = ("value_dim",)
_MAX_DEPTH = 64  # nodes nest a few levels (task -> backbone -> layers); a deeper tree is no model's


@dataclass(frozen=True)
class LayerClaim:
    """One config node that names attention arguments."""

    name: str  # the layer's (or model's) name
    class_name: str
    offers: HeadOffers
    # Where a functional model calls the layer with a value that is not its query (its
    # inbound_nodes): what it says, else "" (self-attention, or the config does not show the call).
    cross: str = ""


def _history(arg: Any) -> tuple[Any, ...] | None:
    """The (layer, node, tensor) a call argument comes from (a Keras tensor's keras_history)."""
    if isinstance(arg, dict) and isinstance(arg.get("config"), dict):
        history = arg["config"].get("keras_history")
        if isinstance(history, list):
            return tuple(str(h) for h in history)
    return None


def _cross_call(node: Mapping[str, Any]) -> str:
    """The first call of the layer whose value (second argument, or ``value=``) is another tensor
    than its query: cross-attention, as its functional model's config records the call."""
    calls = node.get("inbound_nodes")
    if not isinstance(calls, list):
        return ""
    for call in calls:
        if not isinstance(call, dict):
            continue
        raw_args, raw_kwargs = call.get("args"), call.get("kwargs")
        args: list[Any] = raw_args if isinstance(raw_args, list) else []
        kwargs: dict[str, Any] = raw_kwargs if isinstance(raw_kwargs, dict) else {}
        query = _history(args[0]) if args else _history(kwargs.get("query"))
        value = _history(args[1]) if len(args) > 1 else _history(kwargs.get("value"))
        if query is not None and value is not None and query != value:
            return f"called with query from {query[0]} and value from {value[0]}"
    return ""


def _int(config: Mapping[str, Any], keys: Sequence[str]) -> tuple[str, int] | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_CONFIG_INT:
            return key, value
    return None


def _claim(node: Mapping[str, Any], label: str) -> LayerClaim | None:
    config = node.get("config")
    if not isinstance(config, dict):
        return None
    heads, kv, dim, vdim = (_int(config, k) for k in (_HEADS, _KV_HEADS, _HEAD_DIM, _VALUE_DIM))
    if heads is None and kv is None and dim is None:
        return None
    name = config.get("name") if isinstance(config.get("name"), str) else ""
    class_name = node.get("class_name") if isinstance(node.get("class_name"), str) else "?"
    said = ", ".join(f"{p[0]}={p[1]}" for p in (heads, kv, dim, vdim) if p is not None)
    offers = HeadOffers(num_heads=heads[1] if heads else None, num_kv_heads=kv[1] if kv else None,
                        head_dim=dim[1] if dim else None, v_head_dim=vdim[1] if vdim else None,
                        source=EvidenceSource.CONFIG, detail=f"{label}: {class_name} '{name}' {said}")
    return LayerClaim(str(name), str(class_name), offers, _cross_call(node))


def _nodes(value: Any, depth: int = 0) -> Iterator[Mapping[str, Any]]:
    """Every ``{"class_name", "config"}`` node of a config tree, parents first."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(value, dict):
        if isinstance(value.get("class_name"), str) and isinstance(value.get("config"), dict):
            yield value
        for child in value.values():
            if isinstance(child, (dict, list)):
                yield from _nodes(child, depth + 1)
    elif isinstance(value, list):
        for child in value:
            if isinstance(child, (dict, list)):
                yield from _nodes(child, depth + 1)


def model_class(config: Mapping[str, Any]) -> str:
    """The model's own class (Functional, Sequential, LlamaBackbone, ...), or ""."""
    name = config.get("class_name")
    return name if isinstance(name, str) else ""


class Claims:
    """The attention arguments of a config, looked up for a block by the Keras layer names on its
    module path: the nearest named layer that states them, else the model's own (a keras-hub
    backbone's arguments are every layer's)."""

    def __init__(self, config: Mapping[str, Any], label: str) -> None:
        self.by_name: dict[str, LayerClaim] = {}
        self.model: LayerClaim | None = None
        for i, node in enumerate(_nodes(config)):
            claim = _claim(node, label)
            if claim is None:
                continue
            if i == 0:
                self.model = claim
            self.by_name.setdefault(claim.name, claim)

    def for_block(self, module_path: str) -> LayerClaim | None:
        parts = module_path.split(".") if module_path else []
        for i in range(len(parts), 0, -1):
            claim = self.by_name.get(parts[i - 1])
            if claim is not None:
                return claim
        return self.model
