"""Engine failures a QA run found on models no other test names, each built from its config with
random weights, exported as the QA run did (TorchScript, opset 17, dynamic batch; onnxruntime
quantize_dynamic) and checked against numbers read from the torch module.

- nn.MultiheadAttention cross-attention (query is not key): Q and K/V are Slices of the packed
  in_proj_weight with bounds computed from shapes; the parts are weights (all 4·E·(E+1) counted).
- DeBERTa's relative-position bias goes through GatherElements: its shape must propagate, or every
  later layer loses its shapes (heads unknown from layer 1 on).
- ALBERT after quantize_dynamic: one application reads X_quantized, the other the float X the
  file still keeps; one module applied twice, its parameters counted once.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import mhainspect  # noqa: E402
from tests.random_weights import LastHiddenState, add_noise  # noqa: E402


def _export(model: Any, inputs: tuple[Any, ...], path: Path) -> Path:
    names = [f"in{i}" for i in range(len(inputs))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, str(path), input_names=names, output_names=["out"], opset_version=17,
                          dynamo=False, dynamic_axes={n: {0: "batch"} for n in names} | {"out": {0: "batch"}})
    return path


def _quantize(src: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = src.with_suffix(".quant.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8)
    return out


class _Positional(torch.nn.Module):  # type: ignore[misc]
    """The module called with positional tensors only (its other arguments at their defaults)."""

    def __init__(self, m: Any) -> None:
        super().__init__()
        self.m = m

    def forward(self, *args: Any) -> Any:
        return self.m(*args)


def _hf(cfg_cls: str, model_cls: str, **cfg: Any) -> Any:
    config = getattr(transformers, cfg_cls)(num_hidden_layers=2, intermediate_size=128, vocab_size=128, **cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return add_noise(getattr(transformers, model_cls)(config))


def _hf_onnx(model: Any, path: Path) -> Path:
    ids = torch.randint(2, 100, (2, 8), generator=torch.Generator().manual_seed(0))
    return _export(LastHiddenState(model).eval(), (ids, torch.ones_like(ids)), path)


def _blocks(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    d = mhainspect.inspect(str(path)).to_dict()
    return d["model"], d["blocks"]


def _params(mod: Any, *subs: str) -> int:
    return sum(p.numel() for s in subs for p in mod.get_submodule(s).parameters(recurse=False))


# ------------------------------------------------------------------ nn.MultiheadAttention, query is not key


@pytest.fixture(scope="module")
def decoder_layer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, Path]:
    torch.manual_seed(0)
    m = add_noise(torch.nn.TransformerDecoderLayer(32, 4, 64, 0.0, batch_first=True))
    src = _export(_Positional(m).eval(), (torch.randn(2, 6, 32), torch.randn(2, 5, 32)), tmp_path_factory.mktemp("dec") / "dec.onnx")
    return m, src, _quantize(src)


@pytest.mark.parametrize("which", ["float", "quantized"])
def test_cross_attention_slices_of_packed_in_proj(decoder_layer: tuple[Any, Path, Path], which: str) -> None:
    m, src, quant = decoder_layer
    _, blocks = _blocks(src if which == "float" else quant)
    truth = sum(p.numel() for p in m.multihead_attn.parameters())
    assert truth == 4224
    by_kind = {b["kind"]: b for b in blocks}
    assert set(by_kind) == {"self", "cross"}
    cross = by_kind["cross"]
    assert (cross["num_heads"], cross["num_kv_heads"], cross["d_k"], cross["d_model"]) == (4, 4, 8, 32)
    # Q from the tgt slice [0:E], K and V from the memory slice [E:3E] split in two by the graph.
    assert cross["params"] == {"q": 1056, "k": 1056, "v": 1056, "o": 1056, "total": truth, "bias": 128, "extra": 0}
    assert by_kind["self"]["params"]["total"] == truth


# ------------------------------------------------------------------ DeBERTa: shapes past GatherElements


@pytest.fixture(scope="module")
def deberta_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Path]]:
    out = tmp_path_factory.mktemp("deberta")
    rel = dict(hidden_size=64, num_attention_heads=4, relative_attention=True, pos_att_type=["p2c", "c2p"],
               max_relative_positions=16)
    v2 = _hf("DebertaV2Config", "DebertaV2Model", position_buckets=8, share_att_key=True, **rel)
    v1 = _hf("DebertaConfig", "DebertaModel", **rel)
    return {"v2": (v2, _hf_onnx(v2, out / "v2.onnx")), "v1": (v1, _hf_onnx(v1, out / "v1.onnx"))}


@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_deberta_v2_every_layer_has_its_heads(deberta_files: dict[str, tuple[Any, Path]]) -> None:
    m, path = deberta_files["v2"]
    _, blocks = _blocks(path)
    assert len(blocks) == 2
    for i, b in enumerate(blocks):
        att = m.encoder.layer[i].attention
        truth = _params(att, "self.query_proj", "self.key_proj", "self.value_proj", "output.dense")
        assert (b["num_heads"], b["num_kv_heads"], b["d_k"], b["d_v"], b["d_model"]) == (4, 4, 16, 16, 64), b["name"]
        assert b["params"]["total"] == truth == 16640
        assert b["unknown_reason"] is None
        # An encoder: the relative-position bucket's comparison (q - kv < c, an index into the
        # position table) is no causal or sliding-window mask.
        assert (b["kv_cache_bytes_per_token"], b["sliding_window"]) == (None, None), b["kv_cache_reason"]


def test_deberta_v1_packed_in_proj_and_its_q_v_biases(deberta_files: dict[str, tuple[Any, Path]]) -> None:
    """Layer 1 of DeBERTa (v1) used to count the whole packed in_proj as Q, heads unknown; and the
    q_bias / v_bias added after the split of the bias-free in_proj went uncounted in every layer."""
    m, path = deberta_files["v1"]
    _, blocks = _blocks(path)
    assert len(blocks) == 2
    for i, b in enumerate(blocks):
        att = m.encoder.layer[i].attention
        third = att.self.in_proj.weight.numel() // 3
        assert (b["num_heads"], b["d_k"]) == (4, 16), b["name"]
        assert (b["params"]["q"], b["params"]["k"], b["params"]["v"]) == (
            third + att.self.q_bias.numel(), third, third + att.self.v_bias.numel()) == (4160, 4096, 4160), b["name"]
        assert b["params"]["total"] == _params(att, "self", "self.in_proj", "output.dense") == 16576


# ------------------------------------------------------------------ ALBERT after quantize_dynamic


def test_albert_quantized_shared_layer_is_one_block(tmp_path: Path) -> None:
    m = _hf("AlbertConfig", "AlbertModel", hidden_size=64, embedding_size=32, num_attention_heads=4)
    src = _hf_onnx(m, tmp_path / "albert.onnx")
    quant = _quantize(src)
    att = next(mod for qn, mod in m.named_modules() if re.search(r"albert_layers\.\d+\.attention$", qn))
    truth = _params(att, "query", "key", "value", "dense")
    for path in (src, quant):
        model, blocks = _blocks(path)
        assert len(blocks) == 1, [b["name"] for b in blocks]
        (b,) = blocks
        assert b["applications"] == 2
        assert (b["num_heads"], b["d_k"]) == (4, 16)
        assert b["params"]["total"] == truth == 16640
        # The quantizer left one application on the float copy: the weight still counts once.
        assert model["total_params"] == _blocks(src)[0]["total_params"] == sum(
            p.numel() for n, p in m.named_parameters() if not n.startswith("pooler."))  # no pooler in the export


@pytest.mark.parametrize("front", ["module", "folder"])
def test_deberta_v1_q_v_biases_beside_packed_in_proj(deberta_files: dict[str, tuple[Any, Path]], front: str,
                                                     tmp_path: Path) -> None:
    """Without a graph: q_bias / v_bias stored beside the bias-free packed in_proj join Q and V."""
    m, _ = deberta_files["v1"]
    if front == "folder":
        m.save_pretrained(str(tmp_path))
    d = mhainspect.inspect(m if front == "module" else str(tmp_path)).to_dict()
    assert len(d["blocks"]) == 2
    for i, b in enumerate(d["blocks"]):
        att = m.encoder.layer[i].attention
        by_role = {p["role"]: p for p in b["projections"]}
        assert by_role["q"]["bias"].endswith(f"layer.{i}.attention.self.q_bias")
        assert by_role["v"]["bias"].endswith(f"layer.{i}.attention.self.v_bias")
        assert (b["params"]["q"], b["params"]["k"], b["params"]["v"]) == (4160, 4096, 4160), b["name"]
        assert b["params"]["total"] == _params(att, "self", "self.in_proj", "output.dense") == 16576


# ------------------------------------------------------------------ packed multi-query weight, no config


def test_packed_mqa_checkpoint_without_config_is_not_split_in_thirds(tmp_path: Path) -> None:
    """GPTBigCode multi_query c_attn [(h + 2)·d, E] = [96, 64]: a third is not what O reads (64), so
    equal thirds would be a confident wrong split; without head counts the O projection's input width
    gives Q (stated as evidence), K and V the rest, and the heads stay unknown."""
    from safetensors.torch import save_file

    m = add_noise(transformers.GPTBigCodeModel(transformers.GPTBigCodeConfig(
        n_embd=64, n_head=4, n_layer=2, multi_query=True, vocab_size=128)))
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, str(tmp_path / "model.safetensors"))
    d = mhainspect.inspect(str(tmp_path / "model.safetensors")).to_dict()
    b = d["blocks"][0]
    assert b["num_heads"] is None
    assert (b["params"]["q"], b["params"]["k"], b["params"]["v"]) == (4160, 1040, 1040)  # not 2,080 each
    assert any(e["field"] == "qkv_split" and "O" in e["detail"] for e in b["evidence"])
    assert b["params"]["total"] == sum(p.numel() for p in m.h[0].attn.parameters())


# ------------------------------------------------------------------ a static-shape export's stored mask


@pytest.mark.parametrize(("mask_shape", "causal", "caches"),
                         [((1, 1, 6, 6), False, False), ((1, 1, 6, 6), True, True), ((1, 4, 6, 6), False, False)])
def test_stored_mask_on_the_scores_is_not_read_as_no_mask(tmp_path: Path, mask_shape: tuple[int, ...], causal: bool,
                                                          caches: bool) -> None:
    """dynamo with static shapes folds a causal mask into a constant [1, 1, q, k] added to the scores:
    a small one is read (size.py; a mask too large to read is unknown, tests/test_size_causality.py):
    0 / -inf above the diagonal is causal, all zeros hides nothing. A tensor with a head axis
    that hides nothing is a position bias: still an encoder."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from tests import attention_graphs as ag

    g = ag.Nodes(inits=ag.Weights("attn", 32).tensors() + ag.shape_consts(4, 8))
    out = ag.mha_nodes(g, "attn", "x", "attn", 4, 8)
    i, softmax = next((i, n) for i, n in enumerate(g.nodes) if n.op_type == "Softmax")
    values = np.zeros(mask_shape, dtype=np.float32)
    if causal:
        values += np.triu(np.full(mask_shape[-2:], np.finfo(np.float32).min, dtype=np.float32), 1)
    g.inits.append(numpy_helper.from_array(values, "folded_mask"))
    g.nodes.insert(i, onnx.helper.make_node("Add", [softmax.input[0], "folded_mask"], ["masked"], name="mask_add"))
    softmax.input[0] = "masked"
    path = tmp_path / "m.onnx"
    onnx.save(ag.model(g.nodes, g.inits, [ag.value("x", 1, 6, 32)], [ag.value(out, 1, 6, 32)]), str(path))
    (b,) = mhainspect.inspect(str(path)).to_dict()["blocks"]
    assert b["num_heads"] == 4
    if caches:
        assert b["kv_cache_bytes_per_token"] == 4 * (8 + 8) * 4, b["kv_cache_reason"]
        detail = next(e["detail"] for e in b["evidence"] if e["field"] == "kv_cache_bytes_per_token")
        assert "constant 'folded_mask'" in detail
    else:
        assert b["kv_cache_status"] == "none", b["kv_cache_reason"]
