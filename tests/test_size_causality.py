"""Causality and sliding windows from the graph and the config (the KV-cache decision of size.py).

Regressions from a QA run:
- a causal decoder exported by torch dynamo with static shapes carries its mask as a constant
  initializer: read, it is causal (and a band gives the window); not read, the answer is unknown,
  never "attends both ways";
- DeBERTa-v2's relative-position bucketing compares position differences (``Less``) to pick a
  bias index: that is no causal mask and no sliding window;
- a Hugging Face folder saved from a base class (``MistralModel``) is a decoder by its model_type.

Tiny models from configs with random weights, no download.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from mhainspect.api import inspect
from mhainspect.matchers.cache import _constant_mask
from mhainspect.results import CacheStatus, Report

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.random_weights import LastHiddenState, add_noise  # noqa: E402

SEQ = 8


def _model(cfg_name: str, model_name: str, **cfg: Any) -> Any:
    torch.manual_seed(0)
    config = getattr(transformers, cfg_name)(**cfg)
    config._attn_implementation = "eager"
    config.use_cache = False
    return add_noise(getattr(transformers, model_name)(config))


def _export(model: Any, path: Path, *, dynamo: bool) -> Path:
    ids = torch.randint(2, 100, (2, SEQ), generator=torch.Generator().manual_seed(0))
    args = (ids, torch.ones_like(ids))
    wrapped = LastHiddenState(model).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(wrapped, args, dynamo=True, opset_version=18).save(str(path))
        else:
            torch.onnx.export(wrapped, args, str(path), opset_version=17, dynamo=False,
                              input_names=["ids", "mask"], output_names=["out"],
                              dynamic_axes={"ids": {0: "batch"}, "mask": {0: "batch"}, "out": {0: "batch"}})
    return path


MISTRAL = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_hidden_layers=2,
               intermediate_size=128, vocab_size=128)
PER_TOKEN = 2 * 2 * (16 + 16) * 4  # 2 layers x 2 kv heads x (d_k + d_v) x float32


def _windows(report: Report) -> list[int | None]:
    return [b.sliding_window for b in report.blocks]


# ----------------------------------------------------------------------------- the constant mask's values


def _plane(queries: int, keys: int, visible: Any) -> list[float]:
    return [1.0 if visible(q, k) else 0.0 for q in range(queries) for k in range(keys)]


def test_constant_mask_patterns() -> None:
    causal = _plane(8, 8, lambda q, k: k <= q)
    assert _constant_mask(causal, (1, 1, 8, 8)) == ("causal", None)
    assert _constant_mask([1.0 - v for v in causal], (1, 1, 8, 8)) == ("causal", None)  # True = hidden
    additive = [0.0 if v else -3.4e38 for v in causal]
    assert _constant_mask(additive, (8, 8)) == ("causal", None)
    band = _plane(8, 8, lambda q, k: q - 4 < k <= q)
    assert _constant_mask(band, (1, 1, 8, 8)) == ("window", 4)
    assert _constant_mask(band * 2, (2, 1, 8, 8)) == ("window", 4)  # same plane per batch row
    assert _constant_mask(_plane(8, 8, lambda q, k: True), (1, 1, 8, 8)) == ("none", None)
    assert _constant_mask([0.0] * 64, (8, 8)) == ("none", None)  # an additive mask hiding nothing
    assert _constant_mask(_plane(8, 8, lambda q, k: k >= q), (8, 8))[0] == "none"  # sees later keys
    # a sliding window's lower bound alone (kv > q - 4): a window only beside a causal mask
    assert _constant_mask(_plane(8, 8, lambda q, k: k > q - 4), (1, 1, 8, 8)) == ("bound", 4)
    # Swin's shifted windows: 0 / -100 by window, every query sees a later key of its window
    windows = [0.0 if q // 4 == k // 4 else -100.0 for q in range(8) for k in range(8)]
    assert _constant_mask(windows, (1, 1, 8, 8))[0] == "none"
    bias = [float(q - k) / 7 for q in range(8) for k in range(8)]  # a relative-position bias
    assert _constant_mask(bias, (1, 1, 8, 8))[0] == "none"
    assert _constant_mask(causal + band, (2, 1, 8, 8))[0] == "other"  # planes differ
    with_past = _plane(4, 6, lambda q, k: k <= q + 2)  # 2 past keys
    assert _constant_mask(with_past, (1, 1, 4, 6)) == ("causal", None)
    dilated = _plane(6, 6, lambda q, k: k <= q and (q - k) % 2 == 0)  # causal, but not a band
    assert _constant_mask(dilated, (6, 6))[0] == "other"


# ----------------------------------------------------------------------------- exports


@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_dynamo_mistral_constant_mask_is_causal_with_window(tmp_path: Path) -> None:
    model = _model("MistralConfig", "MistralModel", sliding_window=4, **MISTRAL)
    path = _export(model, tmp_path / "mistral.dynamo.onnx", dynamo=True)
    report = inspect(str(path))
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == PER_TOKEN, kv
    assert _windows(report) == [4, 4]
    evidence = [e for b in report.blocks for e in b.evidence if e.field == "kv_cache_bytes_per_token"]
    assert evidence and all(e.source == "causal_mask" for e in evidence)
    assert all("sliding window 4 (the values of constant " in e.detail for e in evidence), evidence
    assert "decoded token by token" in (kv.reason or "")  # no past/present tensors, no config


def test_dynamo_mask_too_large_to_read_is_unknown(tmp_path: Path) -> None:
    """A mask of 40 x 40 (1600 elements, over the 1024 read) is not read: unknown with the reason,
    not an encoder."""
    global SEQ
    model = _model("MistralConfig", "MistralModel", sliding_window=None, **MISTRAL)
    old, SEQ = SEQ, 40
    try:
        path = _export(model, tmp_path / "mistral40.dynamo.onnx", dynamo=True)
    finally:
        SEQ = old
    report = inspect(str(path))
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token is None
    assert (kv.reason or "").startswith("unknown"), kv.reason
    assert "stored mask" in (kv.reason or "") and "not read" in (kv.reason or "")
    assert all(b.kv_cache_status is not CacheStatus.NONE for b in report.blocks)


def test_deberta_v2_relative_buckets_are_no_window(tmp_path: Path) -> None:
    model = _model("DebertaV2Config", "DebertaV2Model", hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                   intermediate_size=128, vocab_size=128, relative_attention=True, pos_att_type=["p2c", "c2p"],
                   max_relative_positions=16, position_buckets=8, share_att_key=True)
    path = _export(model, tmp_path / "deberta-v2.ts.onnx", dynamo=False)
    report = inspect(str(path))
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token is None
    assert _windows(report) == [None] * len(report.blocks)
    assert all(b.kv_cache_status is CacheStatus.NONE for b in report.blocks), \
        [b.kv_cache_reason for b in report.blocks]


def test_torchscript_mistral_still_causal_with_window(tmp_path: Path) -> None:
    """The position-comparison path (TorchScript) keeps its answer: causal, window 4."""
    model = _model("MistralConfig", "MistralModel", sliding_window=4, **MISTRAL)
    path = _export(model, tmp_path / "mistral.ts.onnx", dynamo=False)
    report = inspect(str(path))
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == PER_TOKEN
    assert _windows(report) == [4, 4]
    # no past/present tensors and no config: the figure says it is what decoding would cache
    assert "decoded token by token" in (kv.reason or "")


# ----------------------------------------------------------------------------- folders


@pytest.mark.parametrize("architecture", ["MistralModel", None])
def test_folder_of_base_class_is_a_decoder_by_model_type(tmp_path: Path, architecture: str | None) -> None:
    model = _model("MistralConfig", "MistralModel", sliding_window=4, **MISTRAL)
    folder = tmp_path / "mistral"
    model.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "mistral"
    if architecture is None:
        config.pop("architectures", None)
    else:
        assert config["architectures"] == [architecture]
    (folder / "config.json").write_text(json.dumps(config))
    report = inspect(str(folder))
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token == PER_TOKEN, kv
    assert _windows(report) == [4, 4]
    details = [e.detail for b in report.blocks for e in b.evidence if e.field == "kv_cache_bytes_per_token"]
    assert len(details) == 2 and all("model_type mistral" in d for d in details), details


def test_folder_encoder_model_type_is_not_made_a_decoder(tmp_path: Path) -> None:
    """model_type is a table of decoder-only families: an encoder (bert) saved from its base class
    stays undecided by the config (no causal architecture, no decoder model_type)."""
    model = _model("BertConfig", "BertModel", hidden_size=64, num_attention_heads=4, num_hidden_layers=1,
                   intermediate_size=128, vocab_size=128)
    folder = tmp_path / "bert"
    model.save_pretrained(folder)
    report = inspect(str(folder))
    kv = report.model.kv_cache
    assert kv is not None and kv.bytes_per_token is None


# ----------------------------------------------------------------------------- folded position indices


def _folded_mask_graph(path: Path, seq: int, *, causal: bool, bound: int | None) -> Path:
    """One attention over [1, seq, 16] whose scores take the mask a static-shape TorchScript export
    of a transformers decoder writes: the causal part compares two folded aranges (kv [1, 1, 1, seq]
    <= q [1, 1, seq, 1]), a sliding window's lower bound (kv > q - W) is a bool constant And-ed
    with it, and Where turns the result into 0 / -inf."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    import attention_graphs as ag

    g = ag.Nodes()
    g.inits += ag.Weights("attn", 16).tensors() + ag.shape_consts(2, 8)
    out = ag.mha_nodes(g, "attn", "x", "attn", 2, 8)
    q, k = np.arange(seq).reshape(1, 1, seq, 1), np.arange(seq).reshape(1, 1, 1, seq)
    parts = []
    if causal:
        g.inits += [numpy_helper.from_array(k.astype(np.int64), "kv_pos"), numpy_helper.from_array(q.astype(np.int64), "q_pos")]
        parts.append(g.add("LessOrEqual", ["kv_pos", "q_pos"], "mask/LessOrEqual_out"))
    if bound is not None:
        g.inits.append(numpy_helper.from_array(k > q - bound, "mask.window_bound"))
        parts.append("mask.window_bound")
    keep = parts[0] if len(parts) == 1 else g.add("And", parts, "mask/And_out")
    g.inits += [numpy_helper.from_array(np.array(0.0, np.float32), "mask.zero"),
                numpy_helper.from_array(np.array(-3.4e38, np.float32), "mask.min")]
    additive = g.add("Where", [keep, "mask.zero", "mask.min"], "mask/Where_out")
    softmax = next(n for n in g.nodes if n.op_type == "Softmax")
    scores = softmax.input[0]
    masked = helper.make_node("Add", [scores, additive], ["attn/scores/masked"], name="attn/scores/Add")
    softmax.input[0] = "attn/scores/masked"
    g.nodes.insert(g.nodes.index(softmax), masked)
    onnx.save(ag.model(g.nodes, g.inits, [ag.value("x", 1, seq, 16)], [ag.value(out, 1, seq, 16)]), str(path))
    return path


@pytest.mark.parametrize(("causal", "bound", "expected"), [
    (True, None, (CacheStatus.IF_DECODED, None)),
    (True, 4, (CacheStatus.IF_DECODED, 4)),
    (False, 4, (CacheStatus.NONE, None)),  # a lower bound alone lets queries see later keys
], ids=["causal", "causal-window", "bound-alone"])
def test_folded_position_indices_are_a_causal_mask(causal: bool, bound: int | None,
                                                   expected: tuple[CacheStatus, int | None], tmp_path: Path) -> None:
    """A static-shape TorchScript export folds the position indices of transformers' causal mask to
    constants (no Range left) and the sliding overlay to a bool constant: read, a causal block with
    its window. Was: 'no causal mask reaches the scores' (an encoder, no cache) for both layers of a
    Gemma 3 text stack."""
    report = inspect(str(_folded_mask_graph(tmp_path / "m.onnx", SEQ, causal=causal, bound=bound)))
    (b,) = report.blocks
    assert (b.kv_cache_status, b.sliding_window) == expected, b.kv_cache_reason
    if causal:
        detail = next(e.detail for e in b.evidence if e.field == "kv_cache_bytes_per_token")
        assert "position comparison LessOrEqual" in detail
        assert bound is None or "sliding window 4 (the values of constant 'mask.window_bound'" in detail


def test_unread_position_indices_are_unknown(tmp_path: Path) -> None:
    """Position indices longer than the loader reads (over 64 integers): whether the comparison is
    causal is not visible, so the cache is unknown, never 'attends both ways'."""
    report = inspect(str(_folded_mask_graph(tmp_path / "m.onnx", 80, causal=True, bound=None)))
    (b,) = report.blocks
    assert b.kv_cache_status is CacheStatus.UNKNOWN, b.kv_cache_status
    assert "stored position indices whose values are not read" in (b.kv_cache_reason or "")
