"""Every layer classified: the layer plan read from a config as transformers reads it, the layers
that are no attention block listed as mixers, and the cache (K/V per token, fixed state per
sequence) against what transformers' own cache classes hold after a forward pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mhainspect
from mhainspect.frontends.checkpoint.layer_types import DERIVATIONS, LayerType, layer_plan
from mhainspect.results import CacheStatus, MixerKind

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests import hybrid_models as hm  # noqa: E402


def _transformers_types(cfg: Any) -> list[LayerType]:
    """The layer types transformers' config object holds, in this module's vocabulary."""
    from mhainspect.frontends.checkpoint.layer_types import _type_of

    types = getattr(cfg, "layer_types", None) or getattr(cfg, "layers_block_type", None)
    return [_type_of(t) for t in types]


# model_type -> config dicts as a config.json may write them (no layer_types: the class derives it)
DERIVED: dict[str, list[dict[str, Any]]] = {
    "jamba": [{"num_hidden_layers": 16}, {"num_hidden_layers": 6, "attn_layer_period": 3, "attn_layer_offset": 1}],
    "bamba": [{"num_hidden_layers": 8, "attn_layer_indices": [2, 5]}, {"num_hidden_layers": 3}],
    "lfm2": [{"num_hidden_layers": 6, "full_attn_idxs": [1, 4]}, {"num_hidden_layers": 3}],
    "qwen3_next": [{"num_hidden_layers": 8}, {"num_hidden_layers": 6, "full_attention_interval": 3}],
    "minimax": [{"num_hidden_layers": 5}],
    "kimi_linear": [{"num_hidden_layers": 9},
                    {"num_hidden_layers": 4, "linear_attn_config": {"full_attn_layers": [2, 4], "kda_layers": [1, 3]}}],
    "llama4_text": [{"num_hidden_layers": 8}, {"num_hidden_layers": 4, "no_rope_layers": [1, 0, 1, 0]},
                    {"num_hidden_layers": 4, "attention_chunk_size": None}],
    "granitemoehybrid": [{"num_hidden_layers": 3}],
    "falcon_h1": [{"num_hidden_layers": 3}],
    "nemotron_h": [{}, {"hybrid_override_pattern": "M-M*E"}],
    "zamba2": [{"num_hidden_layers": 54}],
    "gemma3n_text": [{"num_hidden_layers": 10, "num_kv_shared_layers": 5}],
    "deepseek_v32": [{"num_hidden_layers": 3}],
    "recurrent_gemma": [{"num_hidden_layers": 5}, {"num_hidden_layers": 4, "block_types": ["recurrent", "attention"]}],
}


@pytest.mark.parametrize("model_type", sorted(DERIVED))
def test_derivations_follow_the_config_classes(model_type: str) -> None:
    """A config.json without layer_types: the plan is the layer_types transformers' class derives."""
    if not hm.available(model_type):
        pytest.skip(f"transformers {transformers.__version__} has no {model_type}")
    for given in DERIVED[model_type]:
        cfg = transformers.AutoConfig.for_model(model_type, **given)
        plan = layer_plan({"model_type": model_type, **given}, model_type)
        assert plan is not None
        assert list(plan.types) == _transformers_types(cfg), given


def test_every_derivation_is_checked() -> None:
    # xlstm, rwkv: their config classes list no layer types (every block recurrent: test_recurrent_state_modules)
    assert set(DERIVATIONS) - set(DERIVED) <= {"zamba", "mamba", "mamba2", "falcon_mamba", "lfm2_moe", "qwen3_5_text",
                                               "qwen3_5_moe_text", "xlstm", "rwkv"}


def test_listed_types_and_legacy_names() -> None:
    plan = layer_plan({"layer_types": ["mamba", "attention", "conv", "moe", "deepseek_sparse_attention", "new_thing"]},
                      None)
    assert plan is not None
    assert plan.types == (LayerType.LINEAR, LayerType.FULL, LayerType.CONV, LayerType.NONE, LayerType.INDEXED,
                          LayerType.UNKNOWN)
    pattern = layer_plan({"hybrid_override_pattern": "M*-E"}, "nemotron_h")
    assert pattern is not None and pattern.types == (LayerType.LINEAR, LayerType.FULL, LayerType.NONE, LayerType.NONE)
    assert layer_plan({"num_hidden_layers": 4}, "llama") is None  # a plain decoder: nothing per layer


# ----------------------------------------------------------------------------- small folders vs the cache


def _attending(cfg: Any) -> list[int]:
    return [i for i, t in enumerate(_transformers_types(cfg)) if t.attends]


@pytest.mark.parametrize("model_type", sorted(hm.SMALL))
def test_small_folder_matches_the_cache(model_type: str, tmp_path: Path) -> None:
    """Blocks only where softmax attention is, the other layers as mixers, K/V per token and the
    fixed state per sequence as transformers' cache holds them."""
    if not hm.available(model_type):
        pytest.skip(f"transformers {transformers.__version__} has no {model_type}")
    folder, model = hm.small_folder(model_type, tmp_path / model_type)
    truth = hm.cache_truth(model)
    report = mhainspect.inspect(str(folder), context=100)
    kv = report.model.kv_cache
    assert kv is not None and kv.status is CacheStatus.CACHES
    assert kv.bytes_per_token == truth.per_token
    assert (kv.state_bytes_per_sequence or 0) == truth.state
    assert not kv.lower_bound
    cfg = model.config
    attending = _attending(cfg)
    reused = [i for i, mode in enumerate(getattr(cfg, "kv_sharing_modes", None) or []) if mode == "reuse"]
    layers = {hm_layer(b.name) for b in report.blocks}
    shared = getattr(cfg, "num_mem_blocks", None) if model_type == "zamba2" else None
    # Layers that reuse another layer's K/V hold Q and O only: blocks that read the cache of the layer
    # transformers stores it from (the "store" layer of their type) and cache nothing of their own.
    assert len(report.blocks) == (shared if shared else len(attending))
    assert layers <= set(attending)
    assert not report.misses
    modes = getattr(cfg, "kv_sharing_modes", None) or []
    kinds = getattr(cfg, "layer_types", None) or []
    truth_source = {i: max(j for j, m in enumerate(modes) if m == "store" and kinds[j] == kinds[i]) for i in reused}
    readers = {hm_layer(b.name): b for b in report.blocks if b.kv_cache_shared_from is not None}
    assert {i: hm_layer(b.kv_cache_shared_from or "") for i, b in readers.items()} == truth_source
    assert all(b.kv_cache_bytes_per_token is None and b.kv_cache_status is CacheStatus.NONE for b in readers.values())
    # Block parameters: the attention module's projections and its Q/K norms (hm.attention_params; a
    # latent block's down-projections are its extra), each module once.
    modules = {n[n.index("layers."):]: m for n, m in model.named_modules() if "layers." in n}
    for b in report.blocks:
        module = modules[b.name[b.name.index("layers."):]]
        linear = hm.attention_params(module)
        assert b.params.total + (b.params.extra if b.latent is None else 0) >= linear - b.params.extra, b.name
        if b.latent is None:
            assert b.params.total == linear, b.name
    stateful = [i for i, t in enumerate(_transformers_types(cfg)) if t.has_state]
    assert sorted(i for m in report.model.mixers for i in m.layers) == stateful
    assert all(m.kind is not MixerKind.UNKNOWN for m in report.model.mixers)
    memory = report.model.memory
    assert memory is not None and memory.total_bytes is not None
    assert memory.state_bytes == (truth.state or None)
    schema_check(report)


def hm_layer(name: str) -> int:
    from mhainspect.frontends.checkpoint.size_inputs import layer_index

    found = layer_index(name)
    assert found is not None
    return found


def schema_check(report: Any) -> None:
    import json

    from jsonschema import Draft202012Validator

    schema = json.loads((Path(__file__).parent.parent / "docs" / "report.schema.json").read_text())
    Draft202012Validator(schema).validate(report.to_dict())


def test_unknown_layer_type_makes_a_lower_bound(tmp_path: Path) -> None:
    """A layer type no rule knows: the attention layers' figure stands as a stated lower bound."""
    import json

    folder, _ = hm.small_folder("qwen3_next", tmp_path / "q")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["layer_types"] = ["future_attention", "linear_attention", "linear_attention", "full_attention"]
    (folder / "config.json").write_text(json.dumps(cfg))
    report = mhainspect.inspect(str(folder), context=100)
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == 256 and kv.lower_bound
    assert kv.not_counted is not None and "layer 0" in kv.not_counted and "future_attention" in kv.not_counted
    assert "at least" in report.to_text()
    schema_check(report)


def test_an_attention_module_no_block_sizes_leaves_a_lower_bound(tmp_path: Path) -> None:
    """An attention layer whose module is no block (here: the config says layer 2 attends, its
    weights are a DeltaNet): the sized layers' figure stands, stated as a lower bound naming it."""
    import json

    folder, _ = hm.small_folder("qwen3_next", tmp_path / "q")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["layer_types"] = ["linear_attention", "linear_attention", "full_attention", "full_attention"]
    (folder / "config.json").write_text(json.dumps(cfg))
    report = mhainspect.inspect(str(folder), context=100)
    kv = report.model.kv_cache
    assert kv is not None and kv.status is CacheStatus.CACHES
    assert kv.bytes_per_token == 256 and kv.total_bytes == 25600 and kv.lower_bound
    assert kv.not_counted is not None and "model.layers.2.linear_attn" in kv.not_counted
    memory = report.model.memory
    assert memory is not None and memory.reason is not None and "lower bound" in memory.reason
    schema_check(report)


@pytest.mark.parametrize("model_type", sorted(hm.SMALL))
def test_small_module_matches_the_cache(model_type: str) -> None:
    """The same from the nn.Module (its parameters and config): blocks only where softmax attention
    is, the other layers as mixers, K/V per token and the mixers' state as the cache holds them."""
    if not hm.available(model_type):
        pytest.skip(f"transformers {transformers.__version__} has no {model_type}")
    model = hm.small_model(model_type)
    truth = hm.cache_truth(model)
    report = mhainspect.inspect(model)
    kv = report.model.kv_cache
    assert kv is not None and kv.status is CacheStatus.CACHES and not kv.lower_bound
    assert kv.bytes_per_token == truth.per_token
    assert (kv.state_bytes_per_sequence or 0) == truth.state
    assert {hm_layer(b.name) for b in report.blocks} <= set(_attending(model.config))
    stateful = [i for i, t in enumerate(_transformers_types(model.config)) if t.has_state]
    assert sorted(i for m in report.model.mixers for i in m.layers) == stateful


def test_a_prediction_module_is_not_read_by_the_stack_plan(tmp_path: Path) -> None:
    """Qwen3-Next's multi-token-prediction module (``mtp.layers.0``, full attention) is numbered from 0
    again: the stack's layer types (layer 0: linear attention) do not apply to it."""
    from safetensors.torch import load_file, save_file

    folder, _ = hm.small_folder("qwen3_next", tmp_path / "q")
    stored = load_file(folder / "model.safetensors")
    mtp = {k.replace("model.layers.3.", "mtp.layers.0."): v.clone() for k, v in stored.items()
           if k.startswith("model.layers.3.self_attn.")}
    save_file({**stored, **mtp}, folder / "model.safetensors", metadata={"format": "pt"})
    report = mhainspect.inspect(str(folder))
    names = [b.name for b in report.blocks]
    assert names == ["model.layers.3.self_attn", "mtp.layers.0.self_attn"]
    assert report.blocks[1].kv_cache_status is CacheStatus.NONE
    assert sorted(i for m in report.model.mixers for i in m.layers) == [0, 1, 2]


def _module_state(model: Any, model_type: str) -> int:
    """The fixed state transformers keeps per sequence after a forward pass, for the recurrent models
    whose cache the common helper cannot read: RecurrentGemma's (held by its modules: the temporal
    blocks' conv1d_state and RG-LRU recurrent_states), xLSTM's (its cache's rnn_state) and RWKV's
    (the output's state)."""
    ids = (torch.arange(5) % 7 + 1).unsqueeze(0)
    with torch.no_grad():
        out = model(ids, use_cache=True)
    if model_type == "xlstm":
        return sum(t.numel() * t.element_size() for layer in out.cache_params.rnn_state.values() for t in layer)
    if model_type == "rwkv":
        return sum(t.numel() * t.element_size() for t in out.state)
    return sum(t.numel() * t.element_size() for mod in model.modules()
               for t in (getattr(mod, "conv1d_state", None), getattr(mod, "recurrent_states", None))
               if isinstance(t, torch.Tensor))


@pytest.mark.parametrize(("model_type", "config", "kind"), [
    ("recurrent_gemma", {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 1,
                         "num_hidden_layers": 3, "vocab_size": 128, "lru_width": 64, "attention_window_size": 16,
                         "conv1d_width": 4}, MixerKind.STATE_SPACE),
    ("xlstm", {"hidden_size": 128, "embedding_dim": 128, "num_heads": 4, "num_blocks": 2, "num_hidden_layers": 2,
               "vocab_size": 128}, MixerKind.LINEAR_ATTENTION),
    ("rwkv", {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 128, "attention_hidden_size": 64,
              "intermediate_size": 128}, MixerKind.LINEAR_ATTENTION)])
def test_recurrent_state_modules(model_type: str, config: dict[str, Any], kind: MixerKind, tmp_path: Path) -> None:
    """RecurrentGemma (Griffin: two RG-LRU blocks, then local attention), xLSTM (every block an mLSTM,
    whose q/k/v/out projections look like attention) and RWKV: the recurrent blocks are mixers sized
    as transformers keeps them (RG-LRU: conv [lru_width, width - 1] + state [lru_width] float32; mLSTM:
    C [heads, qk, v] + n [heads, qk] + m [heads]; RWKV: 2 token-shift + 3 float32 WKV vectors of
    hidden_size), no recurrent block claims a K/V cache, and the local attention layer caches at
    most its window."""
    if not hm.available(model_type):
        pytest.skip(f"transformers {transformers.__version__} has no {model_type}")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(model_type, **config)).eval()
    truth = _module_state(model, model_type)
    model.save_pretrained(tmp_path / model_type)
    report = mhainspect.inspect(str(tmp_path / model_type), context=100)
    assert {m.kind for m in report.model.mixers} == {kind}
    kv = report.model.kv_cache
    assert kv is not None and kv.state_bytes_per_sequence == truth and not kv.lower_bound
    if model_type in ("xlstm", "rwkv"):
        assert report.blocks == () and kv.bytes_per_token is None
        assert sorted(i for m in report.model.mixers for i in m.layers) == [0, 1]
    else:
        (block,) = report.blocks
        assert hm_layer(block.name) == 2 and block.sliding_window == 16
        assert kv.bytes_per_token == 1 * (16 + 16) * 4
        assert sorted(i for m in report.model.mixers for i in m.layers) == [0, 1]
    schema_check(report)
