"""Config semantics by architecture (mhainspect.frontends.checkpoint.arch_defaults): every table
entry checked against the installed transformers' own config classes, and folders whose
sub-configs rely on those defaults.

- ARCHITECTURE_DEFAULTS: each value is the class's field default (sliding_window_pattern: the
  period its __post_init__ builds layer_types with);
- SUB_CONFIG_TYPES: the composite class builds that sub-config type, with those init_kwargs;
- ENCODER_MODEL_TYPES: a real model_type, and no causal-LM class of transformers decodes with it
  unless the config says is_decoder.

Was: a Gemma 3 text_config without heads took the SigLIP tower's (16 heads, 64-wide heads for a
text stack of 8 / 4 / 256), its layers an encoder (KV unknown) without sliding windows; BERT with
"is_decoder": false, CLIP and ViT folders had KV cache "unknown".
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from mhainspect.frontends.checkpoint.arch_defaults import (
    ARCHITECTURE_DEFAULTS,
    DERIVED_DEFAULTS,
    ENCODER_MODEL_TYPES,
    SUB_CONFIG_TYPES,
    with_defaults,
)
from mhainspect.pipeline import audit
from mhainspect.results import CacheStatus

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
transformers.logging.set_verbosity_error()

from transformers import CONFIG_MAPPING  # noqa: E402
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # noqa: E402

from tests.random_weights import add_noise  # noqa: E402


@pytest.mark.parametrize("model_type", sorted(ARCHITECTURE_DEFAULTS))
def test_architecture_defaults_are_transformers(model_type: str) -> None:
    cls = CONFIG_MAPPING[model_type]
    for key, value in ARCHITECTURE_DEFAULTS[model_type].items():
        if key == "sliding_window_pattern":  # derived in __post_init__: layer_types with that period
            layers = cls(num_hidden_layers=2 * value).layer_types
            assert layers == ["full_attention" if (i + 1) % value == 0 else "sliding_attention"
                              for i in range(2 * value)], (model_type, layers)
        else:  # a field default, or a value the class's __init__ sets (DeepseekV3Config's num_nextn_predict_layers)
            default = getattr(cls, key) if hasattr(cls, key) else getattr(cls(), key)
            assert default == value, (model_type, key, default)


@pytest.mark.parametrize("model_type", sorted(DERIVED_DEFAULTS))
@pytest.mark.parametrize("given", [{"hidden_size": 256, "num_attention_heads": 4}, {"hidden_size": 96}])
def test_derived_defaults_are_transformers(model_type: str, given: dict[str, Any]) -> None:
    """What a config class derives when the file leaves a key out is what the class itself sets."""
    built = CONFIG_MAPPING[model_type](**given)
    view = with_defaults({"model_type": model_type, **given})
    derived = DERIVED_DEFAULTS[model_type]({**ARCHITECTURE_DEFAULTS.get(model_type, {}), **given})
    assert derived
    for key, value in derived.items():
        assert view[key] == value == getattr(built, key), key


@pytest.mark.parametrize(("parent", "key"), sorted(SUB_CONFIG_TYPES))
def test_sub_config_types_are_transformers(parent: str, key: str) -> None:
    spec = CONFIG_MAPPING[parent].sub_configs_defaults[key]
    sub_type, init = SUB_CONFIG_TYPES[(parent, key)]
    assert spec.model_type == sub_type
    assert {k: spec.init_kwargs[k] for k in init} == dict(init)
    # What the composite builds when the file leaves the sub-config out: the type's defaults and init.
    built = getattr(CONFIG_MAPPING[parent](), key)
    assert built.model_type == sub_type
    for k, v in {**ARCHITECTURE_DEFAULTS.get(sub_type, {}), **init}.items():
        if k == "sliding_window_pattern" or (k == "sliding_window" and getattr(built, "use_sliding_window", None) is False):
            continue  # Qwen2's __post_init__ drops a window that use_sliding_window turns off (so do the rules)
        assert getattr(built, k) == v, (parent, key, k)


@pytest.mark.parametrize("model_type", sorted(ENCODER_MODEL_TYPES))
def test_encoder_model_types_do_not_decode(model_type: str) -> None:
    assert model_type in CONFIG_MAPPING
    causal = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if causal is not None:  # the BERT family: a decoder only when the config says is_decoder
        assert "is_decoder" in inspect.getsource(getattr(transformers, causal)), causal
        assert getattr(CONFIG_MAPPING[model_type](), "is_decoder", False) is False


def _gemma3(tmp_path: Path, drop: tuple[str, ...]) -> tuple[Any, Path]:
    """A tiny Gemma 3 (SigLIP tower + text stack) saved, its text_config without ``drop``."""
    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=7, vocab_size=300)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, image_size=28,
                  patch_size=14)
    config = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4)
    torch.manual_seed(0)
    model = add_noise(transformers.Gemma3ForConditionalGeneration(config))
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    for key in drop:
        saved["text_config"].pop(key, None)
    saved["text_config"].pop("model_type", None)  # the composite's own type for its text_config
    saved["text_config"].pop("layer_types", None)
    (tmp_path / "config.json").write_text(json.dumps(saved))
    return model, tmp_path


def test_multimodal_text_stack_takes_its_architectures_defaults(tmp_path: Path) -> None:
    heads = ("num_attention_heads", "num_key_value_heads", "head_dim", "sliding_window")
    model, folder = _gemma3(tmp_path, heads)
    text, vision = model.config.text_config, model.config.vision_config
    report = audit(folder)
    by_tower = {"text": [b for b in report.blocks if "language_model" in b.name],
                "vision": [b for b in report.blocks if "vision_tower.encoder" in b.name]}
    assert len(by_tower["text"]) == text.num_hidden_layers and len(by_tower["vision"]) == vision.num_hidden_layers
    assert all(b.kv_cache_status is CacheStatus.NONE for b in report.blocks if "vision_tower" in b.name)
    for b in by_tower["text"]:
        assert (b.num_heads, b.num_kv_heads, b.d_k) == (text.num_attention_heads, text.num_key_value_heads,
                                                         text.head_dim) == (8, 4, 256), b.name
        assert b.kv_cache_status is CacheStatus.CACHES
        said = next(e.detail for e in b.evidence if e.field == "num_heads" and e.source == "config")
        assert "num_attention_heads=8 (gemma3_text default)" in said
    # Gemma3TextConfig: five sliding layers (window 4096), then one global.
    assert [b.sliding_window for b in by_tower["text"]] == [4096 if (i + 1) % 6 else None for i in range(7)]
    for b in by_tower["vision"]:
        assert (b.num_heads, b.d_k) == (vision.num_attention_heads, vision.hidden_size // vision.num_attention_heads)
        assert b.kv_cache_status is CacheStatus.NONE
    assert not [f for f in report.flags if f.code in ("MHA004", "MHA007")]


def test_shapes_still_win_over_a_default(tmp_path: Path) -> None:
    """A text stack whose per-head norms are 32 wide: the norm's width beats the default head_dim
    (256), with the conflict recorded."""
    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, vocab_size=300, head_dim=32)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, image_size=28,
                  patch_size=14)
    config = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4)
    torch.manual_seed(0)
    add_noise(transformers.Gemma3ForConditionalGeneration(config)).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["text_config"].pop("head_dim")
    (tmp_path / "config.json").write_text(json.dumps(saved))
    report = audit(tmp_path)
    (b,) = [b for b in report.blocks if "language_model" in b.name]
    assert (b.num_heads, b.d_k) == (8, 32)
    assert any("d_k" in c and "256" in c for c in b.conflicts), b.conflicts


def test_bert_with_is_decoder_false_caches_nothing(tmp_path: Path) -> None:
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64)
    add_noise(transformers.BertModel(config)).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["is_decoder"] = False
    (tmp_path / "config.json").write_text(json.dumps(saved))
    report = audit(tmp_path)
    assert len(report.blocks) == 2
    assert all(b.kv_cache_status is CacheStatus.NONE for b in report.blocks)
    assert report.model.kv_cache is not None and report.model.kv_cache.status is CacheStatus.NONE
    assert "model_type bert" in (report.blocks[0].kv_cache_reason or "")
    # The same config saying is_decoder: a decoder (BertLMHeadModel), its blocks cache.
    saved["is_decoder"] = True
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert all(b.kv_cache_status is CacheStatus.CACHES for b in audit(tmp_path).blocks)


@pytest.mark.parametrize("kind", ["clip", "vit"])
def test_contrastive_and_vision_encoders_cache_nothing(kind: str, tmp_path: Path) -> None:
    if kind == "clip":
        config = transformers.CLIPConfig(
            text_config=dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=4),
            vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                               image_size=28, patch_size=14))
        model = transformers.CLIPModel(config)
    else:
        config = transformers.ViTConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, image_size=28, patch_size=14)
        model = transformers.ViTModel(config)
    add_noise(model).save_pretrained(tmp_path)
    report = audit(tmp_path)
    assert report.blocks and all(b.kv_cache_status is CacheStatus.NONE for b in report.blocks)
    assert report.model.kv_cache is not None and report.model.kv_cache.status is CacheStatus.NONE


def test_falcon_without_multi_query_is_one_kv_head(tmp_path: Path) -> None:
    """FalconConfig's multi_query defaults to true: a config.json that leaves it out (as a diff against
    the class's defaults does) is one K/V head, whatever num_kv_heads says. Was: num_kv_heads=4 read,
    then overruled by the K width with an MHA007 conflict on every block."""
    config = transformers.FalconConfig(vocab_size=100, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                                       new_decoder_architecture=False, multi_query=True)
    model = add_noise(transformers.FalconModel(config))
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved.pop("multi_query") is True and saved.pop("new_decoder_architecture") is False
    (tmp_path / "config.json").write_text(json.dumps(saved))
    report = audit(tmp_path)
    assert [(b.num_heads, b.num_kv_heads) for b in report.blocks] == [(4, 1)] * 2
    assert [a.num_kv_heads for a in (layer.self_attention for layer in model.h)] == [1, 1]
    said = next(e.detail for e in report.blocks[0].evidence if e.field == "num_kv_heads" and e.source == "config")
    assert "multi_query=true (falcon default) -> 1" in said
    assert not [f for f in report.flags if f.code == "MHA007"]


def test_a_multi_token_prediction_module_is_counted_and_caches_nothing(tmp_path: Path) -> None:
    """Qwen3-Next, Qwen3.5, ERNIE 4.5, LongCat-Flash and DeepSeek-V4 store their multi-token-prediction
    layers under a module named ``mtp`` (``mtp.layers.0.self_attn...``, ``mtp.fc``), which transformers
    does not load (``_keys_to_ignore_on_load_unexpected``). Here a Qwen3 stack with such a module: its
    attention block counts its parameters, but plain decoding never runs it, so it caches nothing.
    Was: one more caching layer."""
    from safetensors.torch import load_file, save_file

    assert any("mtp" in p for p in transformers.Qwen3NextForCausalLM._keys_to_ignore_on_load_unexpected)
    config = transformers.Qwen3Config(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    torch.manual_seed(0)
    model = add_noise(transformers.Qwen3ForCausalLM(config))
    model.save_pretrained(tmp_path)
    stored = load_file(tmp_path / "model.safetensors")
    mtp = {k.replace("model.layers.1.", "mtp.layers.0."): v.clone() for k, v in stored.items()
           if k.startswith("model.layers.1.")}
    mtp["mtp.fc.weight"] = torch.zeros(64, 128)
    save_file({**stored, **mtp}, tmp_path / "model.safetensors", metadata={"format": "pt"})
    report = audit(tmp_path)
    *decoder, draft = report.blocks
    assert [b.name for b in decoder] == ["model.layers.0.self_attn", "model.layers.1.self_attn"]
    assert draft.name == "mtp.layers.0.self_attn" and draft.params == decoder[1].params
    assert [b.kv_cache_status for b in decoder] == [CacheStatus.CACHES] * 2
    assert draft.kv_cache_status is CacheStatus.NONE
    assert "multi-token-prediction module 'mtp'" in (draft.kv_cache_reason or "")
    assert report.model.total_params == sum(p.numel() for p in model.parameters()) + sum(v.numel() for v in mtp.values())
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == 2 * config.num_key_value_heads * 2 * 16 * 4
