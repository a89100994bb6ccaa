"""Known attention modules of a TorchScript archive, recognised by class and attributes.

The same rules as a live module's (mhainspect.frontends.torch.frontend.recognise): projections are
grouped by their names (mhainspect.matchers.grouping), heads come from the owning module's
attributes as the archive pickled them (a scripted nn.MultiheadAttention keeps num_heads and
head_dim, a Hugging Face attention num_attention_heads ...; mhainspect.frontends.torch.known), and
the blocks are assembled as for a checkpoint. A traced module keeps no such attributes: its blocks
come from its code's graph; a group whose heads no attribute gives waits for the graph (headless).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from mhainspect.frontends.archives.program import ArchiveWeight
from mhainspect.frontends.torch.known import (
    MHA_CLASS,
    SCALE_ATTRS,
    attribute_offers,
    int_attr,
    mha_offers,
    mha_scale,
)
from mhainspect.ir.weights import HeadOffers, WeightMeta
from mhainspect.matchers.grouping import group_attention
from mhainspect.matchers.static import assemble
from mhainspect.results import AttentionBlock, BlockKind, Matcher


@dataclass(frozen=True)
class ModuleFacts:
    """What an archive says of one module: its class (qualified, mangling dropped) and attributes."""

    class_name: str
    attrs: Mapping[str, object]


@dataclass(frozen=True)
class KnownBlocks:
    blocks: tuple[AttentionBlock, ...]
    storage_keys: frozenset[str]  # weights of recognised blocks (a graph block using them is a duplicate)
    headless: tuple[AttentionBlock, ...]  # grouped by names, heads unknown: used when the graph has none


def weight_metas(weights: Mapping[str, ArchiveWeight], modules: Mapping[str, ModuleFacts]) -> dict[str, WeightMeta]:
    """The parameters as WeightMeta, with the layout their owner's class gives (a Linear: out_in)."""
    out: dict[str, WeightMeta] = {}
    for name, w in weights.items():
        if not w.is_parameter:
            continue
        owner, _, leaf = name.rpartition(".")
        cls = modules[owner].class_name if owner in modules else ""
        layout = ""
        if _is_linear(cls) or (leaf.endswith("proj_weight") and cls == MHA_CLASS):
            layout = "out_in"
        elif cls.rsplit(".", 1)[-1] == "Conv1D":
            layout = "in_out"
        out[name] = WeightMeta(name, w.shape, w.dtype, w.storage_key, layout)
    return out


def _is_linear(cls: str) -> bool:
    return cls.startswith("torch.nn.modules.linear.") and cls.rsplit(".", 1)[-1] in (
        "Linear", "NonDynamicallyQuantizableLinear", "LazyLinear")


def recognise(weights: Mapping[str, ArchiveWeight], modules: Mapping[str, ModuleFacts]) -> KnownBlocks:
    metas = weight_metas(weights, modules)
    order = {path: i for i, path in enumerate(modules)}
    blocks: list[tuple[int, AttentionBlock]] = []
    headless: list[tuple[int, AttentionBlock]] = []
    keys: set[str] = set()
    for group in group_attention(metas):
        owner = modules.get(group.owner)
        if owner is None:
            continue
        label = group.owner or owner.class_name.rsplit(".", 1)[-1]
        offers = [o for o in (_offers(owner, label),) if o is not None]
        scale, detail = _scale(owner)
        block = assemble(group, offers, matcher=Matcher.MODULE, scale=scale, scale_detail=detail,
                         no_heads_reason=f"{owner.class_name.rsplit('.', 1)[-1]} at '{label}' has projections but no "
                                         "head count attribute (a traced archive keeps none), and its code's graph "
                                         "did not give it either")
        if group.cross or (owner.class_name == MHA_CLASS and owner.attrs.get("_qkv_same_embed_dim") is False):
            block = replace(block, kind=BlockKind.CROSS)
        at = order.get(group.owner, len(order))
        if not offers:
            headless.append((at, block))
            continue
        blocks.append((at, block))
        for r in group.roles:
            keys.add(r.weight.storage_key)
            if r.bias is not None:
                keys.add(r.bias.storage_key)
        keys.update(b.storage_key for _, b in group.role_biases)
    blocks.sort(key=lambda x: x[0])
    headless.sort(key=lambda x: x[0])
    return KnownBlocks(tuple(b for _, b in blocks), frozenset(keys), tuple(b for _, b in headless))


def _offers(owner: ModuleFacts, label: str) -> HeadOffers | None:
    get = owner.attrs.get
    if owner.class_name == MHA_CLASS:
        heads, head_dim = int_attr(get, ("num_heads",)), int_attr(get, ("head_dim",))
        return mha_offers(heads[1], head_dim[1], label) if heads and head_dim else None
    return attribute_offers(get, owner.class_name.rsplit(".", 1)[-1], label)


def _scale(owner: ModuleFacts) -> tuple[float | None, str]:
    if owner.class_name == MHA_CLASS:
        hd = int_attr(owner.attrs.get, ("head_dim",))
        return mha_scale(hd[1]) if hd else (None, "")
    for n in SCALE_ATTRS:
        v = owner.attrs.get(n)
        if isinstance(v, float) and math.isfinite(v) and v > 0:
            return v, f"{owner.class_name.rsplit('.', 1)[-1]}.{n} = {v:.6g}"
    return None, ""
