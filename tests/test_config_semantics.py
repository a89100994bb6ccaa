"""Config semantics: every head / kv-head / head-size alias, applied the way each architecture's
code applies it, gives the module's numbers from a save_pretrained folder.

Models are built from the real transformers config classes with random weights; the expected
numbers are read from the built attention modules (their weights' shapes), not from the config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from remote_models import write_safetensors

from mhainspect.frontends.checkpoint.hf_config import layer_number, offers_from_config
from mhainspect.pipeline import audit
from mhainspect.results import EvidenceSource

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


def _falcon(**kw: Any) -> Any:
    return transformers.FalconConfig(vocab_size=64, hidden_size=256, num_attention_heads=4, num_hidden_layers=1, **kw)


# name -> (config, model class, expected (heads, kv heads, d_k) from the module's own layout)
CASES: dict[str, tuple[Any, str, tuple[int, int, int]]] = {
    # The case: multi_query with a fused query_key_value of (h + 2)·d rows.
    "falcon-multi-query": (_falcon(multi_query=True, new_decoder_architecture=False), "FalconModel", (4, 1, 64)),
    "falcon-mha": (_falcon(multi_query=False, new_decoder_architecture=False), "FalconModel", (4, 4, 64)),
    "falcon-new-decoder": (_falcon(new_decoder_architecture=True, num_kv_heads=2, multi_query=True), "FalconModel",
                           (4, 2, 64)),
    "gpt-bigcode-mqa": (transformers.GPTBigCodeConfig(vocab_size=64, n_embd=64, n_head=4, n_layer=1, multi_query=True),
                        "GPTBigCodeModel", (4, 1, 16)),
    "gpt-bigcode-mha": (transformers.GPTBigCodeConfig(vocab_size=64, n_embd=64, n_head=4, n_layer=1,
                                                      multi_query=False), "GPTBigCodeModel", (4, 4, 16)),
    "bloom": (transformers.BloomConfig(vocab_size=64, hidden_size=64, n_head=8, n_layer=1), "BloomModel", (8, 8, 8)),
    "mpt": (transformers.MptConfig(vocab_size=64, d_model=64, n_heads=4, n_layers=1, expansion_ratio=2), "MptModel",
            (4, 4, 16)),
    "gpt-neox": (transformers.GPTNeoXConfig(vocab_size=64, hidden_size=64, num_attention_heads=4, num_hidden_layers=1,
                                            intermediate_size=128), "GPTNeoXModel", (4, 4, 16)),
    "qwen2": (transformers.Qwen2Config(vocab_size=64, hidden_size=64, num_attention_heads=8, num_key_value_heads=2,
                                       num_hidden_layers=1, intermediate_size=128), "Qwen2Model", (8, 2, 8)),
    "gemma-head-dim": (transformers.GemmaConfig(vocab_size=64, hidden_size=64, num_attention_heads=4,
                                                num_key_value_heads=1, head_dim=32, num_hidden_layers=1,
                                                intermediate_size=128), "GemmaModel", (4, 1, 32)),
    "t5-d-kv": (transformers.T5Config(vocab_size=64, d_model=32, num_heads=4, d_kv=16, d_ff=64, num_layers=1),
                "T5EncoderModel", (4, 4, 16)),
}


def _attr(obj: Any, names: tuple[str, ...]) -> int | None:
    return next((v for n in names if isinstance(v := getattr(obj, n, None), int) and not isinstance(v, bool)), None)


def _module_truth(model: Any) -> tuple[int, int, int]:
    """(heads, kv heads, head size) the first attention module computes with (its own attributes)."""
    for name, m in model.named_modules():
        if "attention" not in type(m).__name__.lower() or not name:
            continue
        cfg = getattr(m, "config", None)
        heads = _attr(m, ("num_heads", "num_attention_heads", "n_heads")) or _attr(cfg, ("num_attention_heads",))
        d = _attr(m, ("head_dim", "head_size", "key_value_proj_dim", "attention_head_size"))
        if not heads or not d:
            continue
        kv = _attr(m, ("num_kv_heads", "kv_heads", "num_key_value_heads"))
        groups = _attr(m, ("num_key_value_groups",))
        return heads, kv or (heads // groups if groups else heads), d
    raise AssertionError("no attention module")


@pytest.mark.parametrize("case", sorted(CASES))
def test_folder_gives_the_modules_numbers(case: str, tmp_path: Path) -> None:
    config, model_cls, expected = CASES[case]
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config).eval()
    assert _module_truth(model) == expected, "the expectation must be what the module computes with"
    model.save_pretrained(tmp_path)
    report = audit(tmp_path)
    assert report.blocks
    for block in report.blocks:
        assert (block.num_heads, block.num_kv_heads, block.d_k) == expected, (block.name, block.evidence)
        assert not block.conflicts, block.conflicts
        nonstandard = expected[0] * expected[2] != block.d_model
        assert any(f.code == "MHA001" and f.block == block.name for f in report.flags) == nonstandard
    assert "MHA004" not in {f.code for f in report.flags}
    # The module door gives the same numbers.
    from mhainspect.pipeline import audit_module

    by_module = audit_module(model, trace=False)
    assert [(b.num_heads, b.num_kv_heads, b.d_k, b.d_v, b.d_model, b.params) for b in by_module.blocks] == \
        [(b.num_heads, b.num_kv_heads, b.d_k, b.d_v, b.d_model, b.params) for b in report.blocks]


def test_falcon_folder_is_multi_query_with_no_mha001(tmp_path: Path) -> None:
    """The issue's report: 4 heads, 4 KV heads, d_k 32 and MHA001; the module says 4 / 1 / 64."""
    torch.manual_seed(0)
    model = transformers.FalconModel(_falcon(multi_query=True, new_decoder_architecture=False))
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["multi_query"] is True and saved["num_kv_heads"] == 4, "Falcon writes both; multi_query decides"
    report = audit(tmp_path)
    block = report.blocks[0]
    assert (block.num_heads, block.num_kv_heads, block.d_k, block.d_v) == (4, 1, 64, 64)
    assert block.params.q == 256 * 256 and block.params.k == block.params.v == 64 * 256
    assert not [f for f in report.flags if f.code == "MHA001"]
    assert [f.code for f in report.flags if f.block == block.name] == ["MHA005"]


# ----------------------------------------------------------------------------- config dicts alone


@pytest.mark.parametrize(("cfg", "block", "expected"), [
    ({"num_attention_heads": 32, "multi_query_attention": True, "multi_query_group_num": 2, "kv_channels": 128},
     "transformer.encoder.layers.0.self_attention", (32, 2, 128)),  # ChatGLM
    ({"num_attention_heads": 32, "multi_query_attention": False, "kv_channels": 128},
     "transformer.encoder.layers.0.self_attention", (32, None, 128)),
    ({"n_head": 71, "n_head_kv": 8, "multi_query": True, "new_decoder_architecture": True}, "h.0", (71, 8, None)),
    ({"n_head": 71, "multi_query": True}, "transformer.h.3.self_attention", (71, 1, None)),  # RW / Falcon-7B
    ({"n_heads": 32, "attn_config": {"attn_type": "multiquery_attention"}}, "blocks.0.attn", (32, 1, None)),
    ({"n_heads": 32, "attn_config": {"attn_type": "grouped_query_attention", "kv_n_heads": 8}}, "blocks.0.attn",
     (32, 8, None)),
    ({"num_query_heads": [4, 8, 12], "num_kv_heads": [1, 2, 3], "head_dim": 64}, "transformer.layers.2.attn",
     (12, 3, 64)),  # OpenELM: per-layer lists
    ({"num_attention_heads": 32, "block_configs": [{"attention": {"n_heads_in_group": 8}},
                                                   {"attention": {"n_heads_in_group": 4}}]},
     "model.layers.1.self_attn", (32, 8, None)),  # DeciLM
    ({"text_config": {"num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32},
      "vision_config": {"num_attention_heads": 12}}, "language_model.model.layers.0.self_attn", (8, 2, 32)),
    ({"num_heads": 8, "d_kv": 64}, "encoder.block.0.layer.0.SelfAttention", (8, None, 64)),  # T5
    ({"encoder_attention_heads": 16, "decoder_attention_heads": 8}, "model.decoder.layers.0.encoder_attn",
     (8, None, None)),  # BART family
    ({"num_attention_heads": 8, "attention_head_size": 40}, "layer.0.attention", (8, None, 40)),
])
def test_config_aliases(cfg: dict[str, Any], block: str, expected: tuple[int | None, ...]) -> None:
    offers = offers_from_config(cfg, block)
    assert (offers.num_heads, offers.num_kv_heads, offers.head_dim) == expected, offers.detail
    assert offers.source is EvidenceSource.CONFIG


def test_layer_number() -> None:
    assert layer_number("model.layers.12.self_attn") == 12
    assert layer_number("h.0") == 0
    assert layer_number("attention") is None


def _write_safetensors(path: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    write_safetensors(path, {name: ("F32", shape) for name, shape in shapes.items()})


@pytest.mark.parametrize("packed", [False, True])
def test_shapes_win_over_the_config_and_the_conflict_is_recorded(packed: bool, tmp_path: Path) -> None:
    """A config claiming 4 kv heads next to K/V weights one head wide: the widths are what runs."""
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 4, "num_key_value_heads": 4,
                                                      "head_dim": 16, "hidden_size": 64}))
    if packed:
        shapes = {"layers.0.attn.qkv_proj.weight": (96, 64), "layers.0.attn.o_proj.weight": (64, 64)}
    else:
        shapes = {f"layers.0.attn.{r}_proj.weight": (rows, 64) for r, rows in (("q", 64), ("k", 16), ("v", 16))}
        shapes["layers.0.attn.o_proj.weight"] = (64, 64)
    _write_safetensors(tmp_path / "model.safetensors", shapes)
    block = audit(tmp_path).blocks[0]
    assert (block.num_heads, block.num_kv_heads, block.d_k, block.d_v) == (4, 1, 16, 16)
    assert block.params.k == block.params.v == 16 * 64
    assert any("num_kv_heads" in c and "4" in c for c in block.conflicts), block.conflicts
    assert any(e.field == "num_kv_heads" and e.source is EvidenceSource.WEIGHT_SHAPE and e.value == 1
               for e in block.evidence)


@pytest.mark.parametrize(("layers", "groups", "inner", "runs"), [(3, 1, 1, [3]), (3, 1, 2, [3, 3]), (4, 3, 1, [2, 1, 1]),
                                                                (3, 3, 1, [1, 1, 1])])  # runs: per block, in order
def test_albert_shared_layers_report_their_applications(layers: int, groups: int, inner: int, runs: list[int],
                                                        tmp_path: Path) -> None:
    """ALBERT's layer groups run num_hidden_layers / num_hidden_groups times each (as its ONNX export
    shows, ``applications``), from the module and from its folder alike; parameters once."""
    from mhainspect.pipeline import audit_module

    config = transformers.AlbertConfig(vocab_size=64, embedding_size=16, hidden_size=32, num_attention_heads=4,
                                       intermediate_size=48, num_hidden_layers=layers, num_hidden_groups=groups,
                                       inner_group_num=inner)
    torch.manual_seed(0)
    model = transformers.AlbertModel(config).eval()
    model.save_pretrained(tmp_path)
    for report in (audit_module(model, trace=False), audit(tmp_path)):
        assert [b.applications for b in report.blocks] == runs
        assert all(b.params.total == 4 * (32 * 32 + 32) for b in report.blocks)
        assert report.model.total_params == sum(p.numel() for p in model.parameters())
        assert all(any(e.field == "applications" and e.source is EvidenceSource.CONFIG for e in b.evidence)
                   for b in report.blocks if b.applications > 1)
