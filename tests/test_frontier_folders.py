"""Real-size Hugging Face folders of 2025-26 hybrid and frontier decoders (config.json shaped after
the published one, safetensors headers of the model transformers builds from it, no data), against
transformers itself: the attention modules of the meta-device model, the bytes of its tensors,
and what its cache classes hold after a forward pass on the meta device (K/V per token, the fixed
state of linear-attention / state-space / convolution layers, each cache layer's window), so the
KV figure at 32,768 tokens is checked too. docs/architectures.md lists the figures."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import mhainspect
from mhainspect.results import CacheStatus

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests import hybrid_models as hm  # noqa: E402
from tests.frontier_configs import FRONTIER  # noqa: E402

CONTEXT = 32768


def _layer(name: str) -> int:
    from mhainspect.frontends.checkpoint.size_inputs import layer_index

    found = layer_index(name)
    assert found is not None
    return found


def _block_params(module: torch.nn.Module, latent: bool) -> int:
    """The attention module's projections and the norms it applies to Q and K (Qwen3-Next's
    q_norm/k_norm, LFM2's q_layernorm/k_layernorm, Gemma-3n's: ``hm.attention_params``); a latent
    (MLA) block's total also holds its down-projections' norms and a sparse-attention indexer
    (DeepSeek-V3.2's ``indexer``, ``params.indexer``), i.e. every parameter of the module."""
    if latent:
        return sum(p.numel() for p in module.parameters())
    return hm.attention_params(module)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FRONTIER))
def test_real_size_folder_matches_transformers(name: str, tmp_path: Path) -> None:
    model_type, config = FRONTIER[name]
    if not hm.available(model_type):
        pytest.skip(f"transformers {transformers.__version__} has no {model_type}")
    model = hm.meta_model(model_type, config)
    truth = hm.cache_truth(model)
    folder = hm.write_meta_folder(model, {**config, "model_type": model_type}, tmp_path / "model")
    report = mhainspect.inspect(str(folder), context=CONTEXT)

    # Weight bytes: every stored tensor as the header lists it.
    stored = {id(t): t for t in model.state_dict(keep_vars=True).values() if isinstance(t, torch.Tensor)}
    assert report.model.weight_bytes == sum(math.prod(t.shape) * t.element_size() for t in stored.values())

    # Blocks: one per layer with softmax attention that owns its K/V (Zamba2: one per shared block);
    # a layer reusing another's K/V (Gemma-3n) holds Q and O only: a block that reads the cache of the
    # layer of its type transformers stores it from, and caches nothing of its own.
    cfg = model.config
    types = getattr(cfg, "layer_types", None) or getattr(cfg, "layers_block_type", None) or []
    attending = [i for i, t in enumerate(types) if t not in ("linear_attention", "mamba", "conv", "moe", "mlp")]
    modes = getattr(cfg, "kv_sharing_modes", None) or []
    reused = [i for i, m in enumerate(modes) if m == "reuse"]
    expected = getattr(cfg, "num_mem_blocks", 0) if model_type == "zamba2" else len(attending)
    assert len(report.blocks) == expected
    assert {_layer(b.name) for b in report.blocks} <= set(attending)
    assert not report.misses
    readers = {_layer(b.name): _layer(b.kv_cache_shared_from) for b in report.blocks if b.kv_cache_shared_from}
    assert readers == {i: max(j for j, m in enumerate(modes) if m == "store" and types[j] == types[i]) for i in reused}
    modules = {n[n.index("layers."):]: m for n, m in model.named_modules() if "layers." in n}
    for b in report.blocks:
        assert b.params.total == _block_params(modules[b.name[b.name.index("layers."):]], b.latent is not None), b.name

    # The cache: K/V (and indexer keys) per token, the mixers' fixed state, and both at 32,768 tokens.
    kv = report.model.kv_cache
    assert kv is not None and kv.status is CacheStatus.CACHES and not kv.lower_bound
    assert kv.bytes_per_token == truth.per_token
    assert (kv.state_bytes_per_sequence or 0) == truth.state
    assert kv.total_bytes is not None and kv.total_bytes + (kv.state_bytes_per_sequence or 0) == truth.at(CONTEXT)
    memory = report.model.memory
    assert memory is not None and memory.total_bytes == report.model.weight_bytes + truth.at(CONTEXT)
