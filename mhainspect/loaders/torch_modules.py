"""Known attention modules recognised by structure and attributes, without tracing.

nn.MultiheadAttention (packed ``in_proj_weight`` or separate q/k/v_proj_weight with kdim/vdim,
``bias_k``/``bias_v``, bias off) and Hugging Face style attention modules (q/k/v/o or fused qkv
projections; heads from ``num_heads``/``num_attention_heads``/``num_key_value_heads``/
``head_dim`` on the module or its ``config``). The projections are found by the same name
grouping as checkpoints (``mhainspect.loaders.roles``) over the module's own parameters, so a
module, its state dict and its ONNX export name their blocks the same way.

A module whose heads cannot be read from attributes or config is left for tracing (``pending``);
so is an attention-named module without recognisable projections.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from mhainspect.dtypes import canonical
from mhainspect.findings import AttentionBlock
from mhainspect.loaders.hf_config import offers_from_config
from mhainspect.loaders.roles import GroupedBlock, WeightMeta, group_attention
from mhainspect.loaders.torch_fx import storage_key
from mhainspect.size import BlockDecoding, SizeInputs
from mhainspect.static_blocks import HeadOffers, assemble

_HEAD_ATTRS = ("num_heads", "num_attention_heads", "n_heads", "n_head")
_KV_ATTRS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "kv_heads", "n_head_kv")
_HEAD_DIM_ATTRS = ("head_dim", "attention_head_size", "key_value_proj_dim", "head_size", "d_kv", "d_head", "d_k")
_GROUP_ATTRS = ("num_key_value_groups", "n_rep", "num_queries_per_kv")
_SCALE_ATTRS = ("scaling", "scale", "softmax_scale")


@dataclass(frozen=True)
class KnownModules:
    blocks: tuple[AttentionBlock, ...]
    storage_keys: frozenset[str]  # weights of recognised blocks (a traced block using them is a duplicate)
    covered: tuple[str, ...]  # module paths of recognised blocks
    pending: tuple[str, ...]  # attention-like modules left for tracing
    # Name-grouped blocks whose heads no attribute or config gives (MHA004), used when tracing
    # does not find them either.
    headless: tuple[AttentionBlock, ...] = ()


def parameter_metas(model: nn.Module) -> dict[str, WeightMeta]:
    """Every parameter (tied ones under each name) with its layout from the owning module's type."""
    owners: dict[str, nn.Module] = dict(model.named_modules(remove_duplicate=False))
    out: dict[str, WeightMeta] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        owner_path, _, leaf = name.rpartition(".")
        owner = owners.get(owner_path)
        layout = ""
        if isinstance(owner, nn.Linear) or (leaf.endswith("proj_weight") and isinstance(owner, nn.MultiheadAttention)):
            layout = "out_in"
        elif owner is not None and type(owner).__name__ == "Conv1D" and hasattr(owner, "nf"):
            layout = "in_out"
        out[name] = WeightMeta(name, tuple(int(d) for d in p.shape), canonical(str(p.dtype)),
                               storage_key(p), layout)
    return out


def module_size_inputs(model: nn.Module, blocks: list[AttentionBlock],
                       graph_causal: Mapping[str, BlockDecoding] | None = None) -> SizeInputs:
    """Size metadata of a module: its parameters and buffers (rotary tables, masks: overhead), the
    tensors under each block's module path, and what the model's config says about decoding;
    ``graph_causal``: traced blocks the graph shows caching (a causal mask), used where the config
    does not decide."""
    from mhainspect.loaders.checkpoint import checkpoint_size_inputs

    metas: dict[str, WeightMeta] = dict(parameter_metas(model))
    for name, buf in model.named_buffers(remove_duplicate=False):
        metas.setdefault(name, WeightMeta(name, tuple(int(d) for d in buf.shape), canonical(str(buf.dtype)),
                                          storage_key(buf)))
    # A module says what its parameters are: buffers are overhead.
    params = frozenset(storage_key(p) for _, p in model.named_parameters(remove_duplicate=False))
    size = checkpoint_size_inputs(metas, blocks, _config_dict(model), parameters=params, label="the model's config",
                                  no_config=f"{type(model).__name__} has no config: nothing says whether it decodes "
                                            "autoregressively")
    if not graph_causal:
        return size
    decoding = tuple(graph_causal.get(d.block, d) if d.caches is None else d for d in size.decoding)
    return dataclasses.replace(size, decoding=decoding)


def count_parameters(model: nn.Module, *, trainable_only: bool = False) -> int:
    """Unique parameters by storage (tied weights once); ``trainable_only``: those with requires_grad."""
    seen: set[str] = set()
    total = 0
    for _, p in model.named_parameters(remove_duplicate=False):
        key = storage_key(p)
        if key not in seen:
            seen.add(key)
            if p.requires_grad or not trainable_only:
                total += p.numel()
    return total


def _int_attr(obj: Any, names: tuple[str, ...]) -> tuple[str, int] | None:
    for n in names:
        v = getattr(obj, n, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return n, v
    return None


def module_offers(module: nn.Module, label: str) -> HeadOffers | None:
    """Head evidence from a module's own attributes."""
    if isinstance(module, nn.MultiheadAttention):
        return HeadOffers(num_heads=module.num_heads, head_dim=module.head_dim, source="module",
                          detail=f"{label}: nn.MultiheadAttention num_heads={module.num_heads}, "
                                 f"head_dim={module.head_dim}")
    heads = _int_attr(module, _HEAD_ATTRS)
    kv = _int_attr(module, _KV_ATTRS)
    hd = _int_attr(module, _HEAD_DIM_ATTRS)
    groups = _int_attr(module, _GROUP_ATTRS)
    if kv is None and groups is not None and heads is not None and heads[1] % groups[1] == 0:
        kv = (f"{heads[0]}/{groups[0]}", heads[1] // groups[1])
    found = [f"{item[0]}={item[1]}" for item in (heads, kv, hd, groups) if item is not None]
    if not found:
        return None
    return HeadOffers(num_heads=heads[1] if heads else None, num_kv_heads=kv[1] if kv else None,
                      head_dim=hd[1] if hd else None, source="module",
                      detail=f"{label} ({type(module).__name__}): " + ", ".join(found))


def _config_dict(obj: Any) -> Mapping[str, Any] | None:
    cfg = getattr(obj, "config", None)
    if cfg is None:
        return None
    to_dict = getattr(cfg, "to_dict", None)
    if callable(to_dict):
        try:
            d = to_dict()
        except Exception:  # a third-party config whose to_dict fails: use its attributes
            d = None
        if isinstance(d, Mapping):
            return d
    if isinstance(cfg, Mapping):
        return cfg
    attrs = getattr(cfg, "__dict__", None)
    return attrs if isinstance(attrs, Mapping) else None


def _scale(module: nn.Module) -> tuple[float | None, str]:
    if isinstance(module, nn.MultiheadAttention):
        return 1.0 / math.sqrt(module.head_dim), "nn.MultiheadAttention scales scores by 1/sqrt(head_dim)"
    for n in _SCALE_ATTRS:
        v = getattr(module, n, None)
        if isinstance(v, float) and v > 0:
            return v, f"{type(module).__name__}.{n} = {v:.6g}"
    return None, ""


def _is_cross(module: nn.Module, group: GroupedBlock) -> bool:
    if group.cross or getattr(module, "is_cross_attention", False) is True:
        return True
    if isinstance(module, nn.MultiheadAttention):
        return not module._qkv_same_embed_dim
    return False


def recognise(model: nn.Module) -> KnownModules:
    """Known attention modules of ``model`` as AttentionBlocks, in module order."""
    modules = dict(model.named_modules(remove_duplicate=False))
    order = {name: i for i, name in enumerate(modules)}
    metas = parameter_metas(model)
    root_cfg = _config_dict(model)
    blocks: list[tuple[int, AttentionBlock]] = []
    keys: set[str] = set()
    covered: list[str] = []
    pending: list[str] = []
    headless: list[tuple[int, AttentionBlock]] = []
    for group in group_attention(metas):
        owner = modules.get(group.owner)
        if owner is None:
            continue
        label = group.owner or type(model).__name__
        offers: list[HeadOffers] = []
        own = module_offers(owner, label)
        if own is not None:
            offers.append(own)
        cfg = _config_dict(owner) or root_cfg
        if cfg is not None:
            cfg_offer = offers_from_config(cfg, group.name, label="config")
            if cfg_offer.num_heads or cfg_offer.head_dim:
                offers.append(cfg_offer)
        scale, scale_detail = _scale(owner)
        block = assemble(group, offers, matcher="module", scale=scale, scale_detail=scale_detail,
                         no_heads_reason=f"{type(owner).__name__} at '{label}' has projections but no head count "
                                         "attribute or config, and tracing did not find it")
        if _is_cross(owner, group):
            block = _as_cross(block)
        if not block.name:
            block = _renamed(block, type(model).__name__)
        if not offers:
            pending.append(group.owner)
            headless.append((order.get(group.owner, len(order)), block))
            continue
        blocks.append((order.get(group.owner, len(order)), block))
        covered.append(group.name)
        for r in group.roles:
            keys.add(r.weight.storage_key)
            if r.bias is not None:
                keys.add(r.bias.storage_key)
    for name, m in modules.items():
        cls = type(m).__name__.lower()
        if ("attention" in cls or "attn" in cls) and not _inside(name, covered) and not _contains(name, covered):
            if any(True for _ in m.parameters(recurse=True)) and name not in pending:
                pending.append(name)
    blocks.sort(key=lambda x: x[0])
    headless.sort(key=lambda x: x[0])
    return KnownModules(tuple(b for _, b in blocks), frozenset(keys), tuple(covered), tuple(pending),
                        tuple(b for _, b in headless))


def _inside(name: str, scopes: list[str]) -> bool:
    return any(s == "" or name == s or name.startswith(s + ".") for s in scopes)


def _contains(name: str, scopes: list[str]) -> bool:
    return any(name == "" or s.startswith(name + ".") for s in scopes)


def _as_cross(block: AttentionBlock) -> AttentionBlock:
    import dataclasses

    return dataclasses.replace(block, kind="cross")


def _renamed(block: AttentionBlock, name: str) -> AttentionBlock:
    import dataclasses

    return dataclasses.replace(block, name=name)
