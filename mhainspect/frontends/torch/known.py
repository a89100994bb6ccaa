"""What a module's class and attributes say about its attention, without torch.

One reading for every door a module comes through: a live nn.Module (its attributes,
mhainspect.frontends.torch.modules), a TorchScript archive (the attributes pickled with it) and a
torch.export program (the class each node's module stack names). Attributes are read through a
getter, so a live module and a pickled attribute table meet the same rules.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from mhainspect.ir.weights import HeadOffers
from mhainspect.results import EvidenceSource

MHA_CLASS = "torch.nn.modules.activation.MultiheadAttention"
MHA_SCALE = "nn.MultiheadAttention scales scores by 1/sqrt(head_dim)"
HEAD_ATTRS = ("num_heads", "num_attention_heads", "n_heads", "n_head")
KV_ATTRS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "kv_heads", "n_head_kv")
HEAD_DIM_ATTRS = ("head_dim", "attention_head_size", "key_value_proj_dim", "head_size", "d_kv", "d_head", "d_k")
GROUP_ATTRS = ("num_key_value_groups", "n_rep", "num_queries_per_kv")
SCALE_ATTRS = ("scaling", "scale", "softmax_scale")

Getter = Callable[[str], Any]


def int_attr(get: Getter, names: tuple[str, ...]) -> tuple[str, int] | None:
    """The first of ``names`` whose value is a positive int (not a bool), with its name."""
    for n in names:
        v = get(n)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return n, v
    return None


def mha_offers(num_heads: int, head_dim: int, label: str) -> HeadOffers:
    return HeadOffers(num_heads=num_heads, head_dim=head_dim, source=EvidenceSource.MODULE,
                      detail=f"{label}: nn.MultiheadAttention num_heads={num_heads}, head_dim={head_dim}")


def attribute_offers(get: Getter, class_name: str, label: str) -> HeadOffers | None:
    """Head evidence from a module's attributes (num_heads, num_key_value_heads, head_dim, groups)."""
    heads = int_attr(get, HEAD_ATTRS)
    kv = int_attr(get, KV_ATTRS)
    hd = int_attr(get, HEAD_DIM_ATTRS)
    groups = int_attr(get, GROUP_ATTRS)
    if kv is None and groups is not None and heads is not None and heads[1] % groups[1] == 0:
        kv = (f"{heads[0]}/{groups[0]}", heads[1] // groups[1])
    found = [f"{item[0]}={item[1]}" for item in (heads, kv, hd, groups) if item is not None]
    if not found:
        return None
    return HeadOffers(num_heads=heads[1] if heads else None, num_kv_heads=kv[1] if kv else None,
                      head_dim=hd[1] if hd else None, source=EvidenceSource.MODULE,
                      detail=f"{label} ({class_name}): " + ", ".join(found))


def mha_scale(head_dim: int) -> tuple[float, str]:
    return 1.0 / math.sqrt(head_dim), MHA_SCALE


def class_name(qualified: str) -> str:
    """'__torch__.torch.nn.modules.linear.___torch_mangle_2.Linear' -> 'torch.nn.modules.linear.Linear'
    (TorchScript's namespace and name mangling dropped)."""
    parts = [p for p in qualified.split(".") if not p.startswith("___torch_mangle_")]
    if parts and parts[0] == "__torch__":
        parts = parts[1:]
    return ".".join(parts)
