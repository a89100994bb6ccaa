"""One model, one answer: the ONNX export, the nn.Module and the save_pretrained folder of every
zoo architecture (extended set included) give the same blocks. A composite model (sub-configs per
tower) has one more door: its folder with each sub-config cut down to what differs from its
class's defaults, as published config.json files are (a Gemma 3 text_config without heads).

Compared per block name: kind, heads, kv heads, d_k, d_v, d_model and the per-role parameter
counts. A difference that is a fact of a door (not a bug) is listed in KNOWN_DIFFERENCES with its
reason and runs as a strict xfail, so the entry must go when the difference does. The ONNX door
reuses the session's cached exports (tests/conformance/conftest.py); the module and folder doors
build the model from its config once per case (random weights, no download).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from mhainspect.frontends.torch.frontend import recognise  # noqa: E402
from mhainspect.matchers.grouping import natural_key  # noqa: E402
from mhainspect.pipeline import audit, audit_module  # noqa: E402
from mhainspect.results import AttentionBlock, Report  # noqa: E402
from tests.conformance import zoo  # noqa: E402
from tests.conformance.extended import EXTENDED_CASES  # noqa: E402

pytestmark = pytest.mark.conformance

CASES = {c.name: c for c in (*zoo.CASES, *EXTENDED_CASES) if c.has_attention}
# The export compared: the first variant of this order that the session exported without error.
_ONNX_VARIANTS = ("dynamo-18", "torchscript-17", "dynamo-23")

# (case, door) -> why that door cannot give the module's blocks. Doors: "onnx", "folder".
KNOWN_DIFFERENCES: dict[tuple[str, str], str] = {}
# (case, door) -> why the door names the blocks differently; the numbers are still compared, block
# by block in name order, and the names must still differ (so a fixed entry fails until removed).
KNOWN_RENAMES: dict[tuple[str, str], str] = {
    **{(vit, door): "transformers 5 saves ViT under its legacy keys (encoder.layer.N.attention.attention.query) "
                        "while the module is layers.N.attention.q_proj: the folder's blocks carry the file's names"
       for vit in ("vit-eager", "vit-sdpa") for door in ("folder", "folder-defaults")},
    **{("gemma3-vlm", door): "transformers 5 saves Gemma 3 under its published keys (language_model.model.layers.N) "
                             "while the module is language_model.layers.N: the folder's blocks carry the file's names"
       for door in ("folder", "folder-defaults")},
}

# Doors: the ONNX export; a transformers model's save_pretrained folder; and that folder with its
# config.json cut down to what differs from its config classes' defaults ("folder-defaults").
DOORS = [(name, door) for name, case in CASES.items()
         for door in (("onnx", "folder", "folder-defaults") if case.family == "transformers" else ("onnx",))]


def _class_defaults(model_type: str) -> dict[str, Any]:
    import transformers

    return transformers.AutoConfig.for_model(model_type).to_dict()  # type: ignore[no-any-return]


def _cut_to_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` as transformers 4 wrote it (``to_diff_dict``) and as published files are: every key
    whose value is its config class's default left out, each sub-config (a dict naming its own
    model_type) cut against its own class, model_type and architectures always kept."""
    defaults = _class_defaults(config["model_type"])
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and "model_type" in value:
            out[key] = _cut_to_defaults(value)
        elif key in ("model_type", "architectures") or key not in defaults or defaults[key] != value:
            out[key] = value
    return out


def layout(b: AttentionBlock) -> tuple[Any, ...]:
    p = b.params
    return (b.kind, b.num_heads, b.num_kv_heads, b.d_k, b.d_v, b.d_model, p.q, p.k, p.v, p.o, p.bias, p.total)


def _by_name(report: Report) -> dict[str, tuple[Any, ...]]:
    return {b.name: layout(b) for b in report.blocks}


_MODULES: dict[str, tuple[Any, Report]] = {}


def _module_door(name: str) -> tuple[Any, Report]:
    """(model, report) for a case, built once: known modules, tracing only where they fall short."""
    if name not in _MODULES:
        case = CASES[name]
        model, inputs = case.build()
        known = recognise(model)
        example = case.kwargs(inputs) if known.pending or not known.blocks else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _MODULES[name] = model, audit_module(model, example)
    return _MODULES[name]


def _onnx_door(manifest: dict[tuple[str, str], dict[str, Any]], name: str) -> Report:
    for variant in _ONNX_VARIANTS:
        entry = manifest.get((name, variant))
        if entry is not None and not entry["error"]:
            return audit(entry["path"])
    pytest.skip(f"no exporter exported {name}")


@pytest.mark.parametrize(("case", "door"), [
    pytest.param(c, d, marks=pytest.mark.xfail(strict=True, reason=KNOWN_DIFFERENCES[(c, d)]))
    if (c, d) in KNOWN_DIFFERENCES else (c, d) for c, d in DOORS], ids=[f"{c}-{d}" for c, d in DOORS])
def test_doors_give_the_modules_blocks(manifest: dict[tuple[str, str], dict[str, Any]], case: str, door: str,
                                       tmp_path: Path) -> None:
    model, by_module = _module_door(case)
    expected = _by_name(by_module)
    assert expected, f"the module door found no block in {case}"
    assert not [f for f in by_module.flags if f.code == "MHA004"], "every module block identified"
    if door == "onnx":
        other = _onnx_door(manifest, case)
    else:
        model.save_pretrained(tmp_path)
        if door == "folder-defaults":
            config_path = tmp_path / "config.json"
            config_path.write_text(json.dumps(_cut_to_defaults(json.loads(config_path.read_text()))))
        other = audit(tmp_path)
        assert other.model.total_params == by_module.model.total_params
    found = _by_name(other)
    if (case, door) in KNOWN_RENAMES:
        assert sorted(found) != sorted(expected), f"names agree now: remove {(case, door)} from KNOWN_RENAMES"
        assert len(found) == len(expected)
        found = dict(zip(sorted(expected, key=natural_key), (found[n] for n in sorted(found, key=natural_key))))
    assert sorted(found) == sorted(expected), "the doors name different blocks"
    wrong = {n: (found[n], expected[n]) for n in expected if found[n] != expected[n]}
    assert not wrong, "\n".join(f"{n}: {door} {a} != module {b} (kind, h, kv, d_k, d_v, d_model, q, k, v, o, bias, "
                                f"total)" for n, (a, b) in wrong.items())
    assert sorted(f.code for f in other.flags if f.code != "MHA003") == \
        sorted(f.code for f in by_module.flags if f.code != "MHA003")


def test_known_differences_name_real_doors() -> None:
    assert set(KNOWN_DIFFERENCES) | set(KNOWN_RENAMES) <= set(DOORS)


_LATENT_CASE = "deepseek-v3-mla"


def _latent_layout(b: AttentionBlock) -> tuple[Any, ...]:
    assert b.latent is not None and b.kv_cache_bytes_per_token is not None and b.kv_cache_dtype is not None, b.name
    from mhainspect.ir.dtypes import lookup

    itemsize = lookup(b.kv_cache_dtype)
    assert itemsize is not None
    values = b.kv_cache_bytes_per_token // int(itemsize.block_bytes)  # cached values per token, whatever the dtype
    return (*layout(b)[1:], b.params.latent, b.latent.kv_rank, b.latent.rope_dim, b.latent.q_rank, values)


def test_latent_attention_from_every_door(manifest: dict[tuple[str, str], dict[str, Any]], tmp_path: Path) -> None:
    """The MLA model gives one latent block per layer from the module, its save_pretrained folder, its
    ONNX export (when an exporter exports it) and a GGUF written as llama.cpp's converter writes it
    (attn_k_b / attn_v_b): heads, widths, Q/K/V/O, the down-projections and norms (params.latent, in the total), the latent
    widths and the values cached per token, all equal to the module's own numbers."""
    from tests.conformance.extended import latent_params, latent_truth
    from tests.gguf_files import deepseek_gguf

    pytest.importorskip("gguf")
    model, by_module = _module_door(_LATENT_CASE)
    cfg = model.config
    expected = [(t.num_heads, t.num_kv_heads, t.d_k, t.d_v, t.d_model, t.q, t.k, t.v, t.o, t.bias, t.total,
                 latent_params(layer.self_attn), cfg.kv_lora_rank, cfg.qk_rope_head_dim, cfg.q_lora_rank,
                 cfg.kv_lora_rank + cfg.qk_rope_head_dim)
                for t, layer in zip(latent_truth(model), model.layers)]
    model.save_pretrained(tmp_path / "folder")
    shapes = {n: tuple(p.shape) for n, p in model.state_dict().items()}
    (gguf_path,) = deepseek_gguf(tmp_path / "mla.gguf", shapes, cfg.to_dict())
    doors = {"module": by_module, "folder": audit(tmp_path / "folder"), "gguf": audit(gguf_path)}
    entry = next((e for v in _ONNX_VARIANTS if (e := manifest.get((_LATENT_CASE, v))) and not e["error"]), None)
    if entry is not None:
        doors["onnx"] = audit(entry["path"])
    for door, report in doors.items():
        assert [_latent_layout(b) for b in report.blocks] == expected, door
        assert report.model.total_params == sum(p.numel() for p in model.parameters()), door
        assert not report.misses, door
        kv = report.model.kv_cache
        assert kv is not None and kv.expanded_bytes_per_token is not None, door


_MULTIMODAL_CASE = "gemma3-vlm"


@pytest.mark.parametrize("door", ["folder", "folder-defaults"])
def test_multimodal_cache_from_the_folder(door: str, tmp_path: Path) -> None:
    """The vision-language model's folder (as saved, and cut to what differs from the config classes'
    defaults: a text_config without heads) sizes the cache as the module runs: every text layer caches
    its K/V heads × (d_k + d_v) per token, at its window where its layer type is sliding; the vision
    tower caches nothing."""
    from mhainspect.results import CacheStatus

    model, _ = _module_door(_MULTIMODAL_CASE)
    text = model.config.text_config
    itemsize = next(model.parameters()).element_size()
    model.save_pretrained(tmp_path)
    if door == "folder-defaults":
        config_path = tmp_path / "config.json"
        cut = _cut_to_defaults(json.loads(config_path.read_text()))
        assert not {"num_attention_heads", "num_key_value_heads", "head_dim"} & set(cut["text_config"])
        config_path.write_text(json.dumps(cut))
    report = audit(tmp_path)
    text_blocks = [b for b in report.blocks if ".layers." in b.name and "vision_tower" not in b.name]
    vision_blocks = [b for b in report.blocks if "vision_tower" in b.name]
    assert len(text_blocks) == text.num_hidden_layers and len(vision_blocks) == len(model.vision_tower.encoder.layers)
    per_layer = [text.num_key_value_heads * 2 * layer.self_attn.head_dim * itemsize for layer in model.language_model.layers]
    assert [b.kv_cache_bytes_per_token for b in text_blocks] == per_layer
    assert [b.kv_cache_status for b in text_blocks] == [CacheStatus.CACHES] * len(text_blocks)
    assert [b.sliding_window for b in text_blocks] == [
        text.sliding_window if kind == "sliding_attention" else None for kind in text.layer_types]
    assert {b.sliding_window for b in text_blocks} == {text.sliding_window, None}  # both kinds in the case
    assert all(b.kv_cache_status is CacheStatus.NONE and b.kv_cache_bytes_per_token is None for b in vision_blocks)
    kv = report.model.kv_cache
    assert kv is not None and kv.status is CacheStatus.CACHES and kv.bytes_per_token == sum(per_layer)
