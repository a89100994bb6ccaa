"""Which layers of a GGUF model have a K/V cache of their own, as llama.cpp's loader decides.

llama.cpp gives a layer a cache of its own when ``llama_hparams::has_kv(il)``: every layer, unless
the architecture's loader sets ``n_layer_kv_from_start``, after which a layer reuses the cache of an
earlier layer of the same kind (the ``reuse`` callback of ``llama_model::create_memory``) and adds
none. ``LLAMA_CPP_KV_LAYERS`` follows the loaders that set it:

- gemma3n: ``n_layer_kv_from_start = 20`` written in its loader (E2B's 30 layers and E4B's 35
  alike); the file's ``attention.shared_kv_layers`` is not read;
- gemma4: ``block_count - attention.shared_kv_layers`` (every layer when the key is absent).

Pure: metadata in, the first layer without a cache of its own (and why) out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mhainspect.ir.limits import config_int


@dataclass(frozen=True)
class KvLayersRule:
    """How one architecture's loader sets n_layer_kv_from_start."""

    fixed: int | None = None  # set in code, whatever the file says
    shared_key: str = ""  # block_count minus this key's value (absent: every layer has its own cache)
    note: str = ""


LLAMA_CPP_KV_LAYERS: Mapping[str, KvLayersRule] = {
    "gemma3n": KvLayersRule(fixed=20, note="llama.cpp's gemma3n loader sets n_layer_kv_from_start = 20"),
    "gemma4": KvLayersRule(shared_key="attention.shared_kv_layers",
                           note="llama.cpp's gemma4 loader sets n_layer_kv_from_start = block_count - "
                                "attention.shared_kv_layers"),
}


def kv_from_start(arch: str, prefix: str, metadata: Mapping[str, object]) -> tuple[int, str] | None:
    """(n_layer_kv_from_start, where it comes from) when llama.cpp sets it for ``arch``, else None."""
    rule = LLAMA_CPP_KV_LAYERS.get(arch)
    if rule is None:
        return None
    if rule.fixed is not None:
        return rule.fixed, rule.note
    blocks = config_int(metadata.get(f"{prefix}block_count"))
    shared = config_int(metadata.get(f"{prefix}{rule.shared_key}"))
    if blocks is None or not shared or shared >= blocks:
        return None
    return blocks - shared, f"{rule.note} = {blocks} - {shared}"


def reused_kv_reason(arch: str, prefix: str, metadata: Mapping[str, object], layer: int | None) -> str | None:
    """Why layer ``layer`` adds no K/V cache (it reuses an earlier layer's), or None when it has its own."""
    found = kv_from_start(arch, prefix, metadata) if layer is not None else None
    if found is None or layer is None or layer < found[0]:
        return None
    start, source = found
    return (f"GGUF {arch}: layer {layer} reuses the K/V cache of an earlier layer of its kind ({source}: layers "
            f"{start} and on have no cache of their own), so it adds none")
