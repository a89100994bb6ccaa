"""The calc side: every convention's formula against the real layer's parameter count.

Torch, transformers and Keras tests skip when those packages are missing, so the module also
runs without torch. MATLAB cannot be run here: its figures come from the documented shapes of
selfAttentionLayer's learnables and the user report they reproduce.
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

import pytest

from mhainspect import conventions as cv
from mhainspect.conventions import Calculation, calculate, compare, what_if
from mhainspect.render.calc_render import calc_json, calc_text, compare_json, compare_text, what_if_json, what_if_text


def _numel(module: Any) -> int:
    return int(sum(p.numel() for p in module.parameters()))


def _consistent(c: Calculation) -> None:
    projections = [t for t in c.terms if not t.extra]
    assert c.total == c.weights + c.biases == sum(t.value for t in projections)
    assert c.weights == sum(t.value for t in projections if not t.is_bias)
    assert c.extra == sum(t.value for t in c.terms if t.extra)


# --------------------------------------------------------------------------- PyTorch


@pytest.mark.parametrize("heads", [1, 2, 4, 8, 64])
def test_pytorch_512_is_1050624_for_every_head_count(heads: int) -> None:
    c = cv.pytorch(512, heads)
    assert c.total == 1_050_624
    assert c.d_k == c.d_v == 512 // heads
    assert c.q_width == 512
    assert not c.scales_with_heads
    _consistent(c)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"embed_dim": 512, "num_heads": 8},
        {"embed_dim": 512, "num_heads": 1},
        {"embed_dim": 64, "num_heads": 4, "kdim": 32, "vdim": 16},
        {"embed_dim": 64, "num_heads": 4, "kdim": 64, "vdim": 48},
        {"embed_dim": 96, "num_heads": 12, "bias": False},
        {"embed_dim": 96, "num_heads": 3, "add_bias_kv": True},
        {"embed_dim": 40, "num_heads": 5, "kdim": 7, "vdim": 9, "bias": False, "add_bias_kv": True},
    ],
)
def test_pytorch_matches_nn_multiheadattention(kwargs: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    layer = torch.nn.MultiheadAttention(**kwargs)
    c = cv.pytorch(**kwargs)
    assert c.total == _numel(layer)
    biases = sum(
        p.numel()
        for n, p in layer.named_parameters()
        if "bias" in n  # bias_k, bias_v too
    )
    assert c.biases == biases
    _consistent(c)


def test_pytorch_rejects_indivisible_heads_like_the_layer() -> None:
    with pytest.raises(ValueError, match="embed_dim must be divisible by num_heads"):
        cv.pytorch(512, 3)
    torch = pytest.importorskip("torch")
    with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
        torch.nn.MultiheadAttention(512, 3)


# --------------------------------------------------------------------------- Keras


def _keras() -> Any:
    pytest.importorskip("torch")
    if not os.environ.get("KERAS_BACKEND"):
        os.environ["KERAS_BACKEND"] = "torch"
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        pytest.skip("keras is loaded with another backend")
    return keras


@pytest.mark.parametrize(
    ("layer_kwargs", "query", "value", "key"),
    [
        ({"num_heads": 8, "key_dim": 64}, 512, None, None),
        ({"num_heads": 2, "key_dim": 64}, 512, None, None),
        ({"num_heads": 4, "key_dim": 16, "value_dim": 8, "output_shape": 20}, 30, 12, 7),
        ({"num_heads": 3, "key_dim": 5, "use_bias": False}, 11, 13, None),  # key defaults to value
        ({"num_heads": 6, "key_dim": 4, "value_dim": 9, "use_bias": False}, 10, None, None),
    ],
)
def test_keras_matches_multiheadattention(
    layer_kwargs: dict[str, Any], query: int, value: int | None, key: int | None
) -> None:
    keras = _keras()
    layer = keras.layers.MultiHeadAttention(**layer_kwargs)
    value_shape = (None, 5, value if value is not None else query)
    key_shape = None if key is None else (None, 5, key)
    layer.build((None, 3, query), value_shape, key_shape)
    c = cv.keras(query_dim=query, value_input_dim=value, key_input_dim=key, **layer_kwargs)
    assert c.total == layer.count_params()
    _consistent(c)


def test_keras_call_once_matches() -> None:
    keras = _keras()
    import numpy as np

    layer = keras.layers.MultiHeadAttention(num_heads=8, key_dim=64)
    x = np.zeros((1, 3, 512), dtype="float32")
    layer(x, x)
    assert layer.count_params() == cv.keras(8, 64, query_dim=512).total == 1_050_624


def test_keras_grows_linearly_with_heads() -> None:
    totals = [cv.keras(h, 64, query_dim=512).total for h in range(1, 9)]
    steps = {b - a for a, b in itertools.pairwise(totals)}
    k, Dq = 64, 512
    assert steps == {k * (Dq + Dq) + k * (Dq + Dq) + 3 * k}  # per-head weights + Q/K/V biases
    assert totals[0] == steps.pop() + Dq  # plus the output bias, shared by all heads
    assert cv.keras(8, 64, query_dim=512).scales_with_heads


# --------------------------------------------------------------------------- MATLAB


def test_matlab_reproduces_user_report() -> None:
    a = cv.matlab(4, 784, 3136)
    b = cv.matlab(8, 392, 3136)
    assert (a.weights, b.weights) == (9_834_496, 4_917_248)
    assert (a.total, b.total) == (9_839_984, 4_921_560)
    assert (a.d_k, b.d_k) == (196, 49)
    _consistent(a)
    _consistent(b)


def test_matlab_shapes_and_head_independence() -> None:
    c = cv.matlab(2, 6, 10, NumValueChannels=4, OutputSize=3)
    shapes = {
        "QueryWeights": 6 * 10,
        "KeyWeights": 6 * 10,
        "ValueWeights": 4 * 10,
        "OutputWeights": 3 * 4,
        "QueryBias": 6,
        "KeyBias": 6,
        "ValueBias": 4,
        "OutputBias": 3,
    }
    assert {t.tensor: t.value for t in c.terms} == shapes
    assert c.total == sum(shapes.values())
    same = {cv.matlab(h, 3136, 3136).total for h in (1, 2, 4, 8, 16)}
    assert len(same) == 1 and not cv.matlab(4, 3136, 3136).scales_with_heads


def test_matlab_divisibility() -> None:
    with pytest.raises(ValueError, match="NumKeyChannels must be divisible by NumHeads"):
        cv.matlab(3, 784, 3136)
    with pytest.raises(ValueError, match="NumValueChannels must be divisible by NumHeads"):
        cv.matlab(4, 784, 3136, NumValueChannels=6)


# --------------------------------------------------------------------------- HF Llama / T5


@pytest.mark.parametrize(
    "cfg",
    [
        {"hidden_size": 64, "num_attention_heads": 4},
        {"hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2},
        {"hidden_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16},
        {"hidden_size": 48, "num_attention_heads": 4, "num_key_value_heads": 1, "attention_bias": True},
        {"hidden_size": 32, "num_attention_heads": 2, "head_dim": 24, "attention_bias": True},
    ],
)
def test_hf_matches_llama_attention(cfg: dict[str, Any]) -> None:
    pytest.importorskip("torch")
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    layer = llama.LlamaAttention(LlamaConfig(**cfg), layer_idx=0)
    c = cv.hf(**cfg)
    assert c.total == _numel(layer)
    assert c.biases == sum(p.numel() for n, p in layer.named_parameters() if n.endswith("bias"))
    assert c.d_k == layer.head_dim
    _consistent(c)


def test_hf_scaling_depends_on_head_dim() -> None:
    fixed = [cv.hf(4096, h, head_dim=128).total for h in (8, 16, 32)]
    assert fixed[0] < fixed[1] < fixed[2] and cv.hf(4096, 32, head_dim=128).scales_with_heads
    derived = {cv.hf(4096, h).total for h in (8, 16, 32, 64)}
    assert derived == {4 * 4096 * 4096} and not cv.hf(4096, 32).scales_with_heads
    # derived head_dim with fixed kv heads: more query heads -> narrower K/V
    gqa = cv.hf(4096, 32, num_key_value_heads=8)
    assert gqa.scales_with_heads and gqa.v_width == 8 * 128
    with pytest.raises(ValueError, match="divisible by num_key_value_heads"):
        cv.hf(4096, 12, num_key_value_heads=8)


@pytest.mark.parametrize(
    ("cfg", "relative"),
    [
        ({"d_model": 32, "num_heads": 6, "d_kv": 8}, True),
        ({"d_model": 32, "num_heads": 4, "d_kv": 8}, False),
        ({"d_model": 24, "num_heads": 2, "d_kv": 16, "relative_attention_num_buckets": 8}, True),
    ],
)
def test_t5_matches_t5_attention(cfg: dict[str, Any], relative: bool) -> None:
    pytest.importorskip("torch")
    t5m = pytest.importorskip("transformers.models.t5.modeling_t5")
    from transformers import T5Config

    layer = t5m.T5Attention(T5Config(**cfg), has_relative_attention_bias=relative)
    c = cv.t5(has_relative_attention_bias=relative, **cfg)
    projections = sum(p.numel() for n, p in layer.named_parameters() if not n.startswith("relative"))
    assert c.total == projections and c.biases == 0
    assert c.total + c.extra == _numel(layer)
    assert (c.extra > 0) == relative
    _consistent(c)


def test_t5_scales_with_heads() -> None:
    assert cv.t5(512, 16, 64).total == 2 * cv.t5(512, 8, 64).total
    assert cv.t5(512, 8, 64).scales_with_heads


# --------------------------------------------------------------------------- calculate / parsing


def test_calculate_parses_strings_and_spellings() -> None:
    c = calculate("pytorch", {"embed_dim": "512", "num_heads": "8", "bias": "no"})
    assert c.total == 1_048_576 and dict(c.arguments)["kdim"] == 512
    m = calculate("matlab", {"numHeads": "4", "numKeyChannels": "784", "InputSize": "3136"})
    assert m.weights == 9_834_496
    q = calculate("matlab", {"NumHeads": "8", "NumQueryChannels": "392", "input-size": "3136"})
    assert q.weights == 4_917_248
    k = calculate(
        "keras",
        {
            "num_heads": "8",
            "key_dim": "64",
            "query_dim": "512",
            "value_dim": "None",
            "use_bias": "TRUE",
            "dropout": "0.1",
        },
    )
    assert k.total == 1_050_624 and any("dropout=0.1" in n for n in k.notes)
    assert calculate("t5", {"d_model": 512, "num_heads": 8, "d_kv": 64}).total == 4 * 512 * 512


@pytest.mark.parametrize(
    ("convention", "args", "match"),
    [
        (
            "pytorch",
            {"embed_dim": "512", "heads": "8"},
            (
                r"unknown argument 'heads'.*valid: "
                r"embed_dim, num_heads"
            ),
        ),
        ("keras", {"num_heads": "8"}, r"missing required arguments key_dim, query_dim.*valid:"),
        ("pytorch", {"embed_dim": "x", "num_heads": "8"}, "embed_dim must be a positive integer"),
        ("pytorch", {"embed_dim": "0", "num_heads": "8"}, "embed_dim must be a positive integer"),
        ("pytorch", {"embed_dim": "512", "num_heads": "8", "bias": "maybe"}, "bias must be"),
        ("pytorch", {"embed_dim": "512", "num_heads": "3"}, "divisible"),
        ("nope", {}, "unknown convention 'nope'; choose one of: pytorch, keras, matlab, hf, t5"),
        ("matlab", {"NumHeads": "4", "numheads": "4"}, "given twice"),
    ],
)
def test_calculate_errors_are_one_line(convention: str, args: dict[str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        calculate(convention, args)
    assert "\n" not in str(info.value)


def test_registry() -> None:
    assert list(cv.CONVENTIONS) == ["pytorch", "keras", "matlab", "hf", "t5"]
    assert cv.CONVENTIONS["pytorch"] is cv.pytorch


# --------------------------------------------------------------------------- what_if / compare


def test_what_if_keeps_other_arguments() -> None:
    rows = dict(what_if("pytorch", {"embed_dim": "512", "num_heads": "8"}, [1, 3, 64]))
    assert isinstance(rows[3], str) and "divisible" in rows[3]
    assert {r.total for r in rows.values() if isinstance(r, Calculation)} == {1_050_624}
    k = dict(what_if("keras", {"num_heads": "8", "key_dim": "64", "query_dim": "512"}, [4, 8]))
    assert isinstance(k[4], Calculation) and isinstance(k[8], Calculation)
    assert k[8].total - k[4].total == 4 * (64 * 1024 * 2 + 3 * 64)
    m = dict(what_if("matlab", {"numHeads": "4", "NumKeyChannels": "784", "InputSize": "3136"}, [8, 16]))
    assert all(isinstance(r, Calculation) and r.total == 9_839_984 for r in m.values())
    for conv, args in [
        ("pytorch", {"embed_dim": "512", "num_heads": "8"}),
        ("keras", {"num_heads": "8", "key_dim": "64", "query_dim": "512"}),
        ("hf", {"hidden_size": "512", "num_attention_heads": "8"}),
        ("hf", {"hidden_size": "512", "num_attention_heads": "8", "head_dim": "64"}),
        ("t5", {"d_model": "512", "num_heads": "8", "d_kv": "64"}),
    ]:
        totals = {r.total for _, r in what_if(conv, args, [2, 4, 8]) if isinstance(r, Calculation)}
        assert (len(totals) > 1) == calculate(conv, args).scales_with_heads, (conv, args)


def test_compare_standard_layout_agrees() -> None:
    rows = dict(compare({"embed_dim": "512", "num_heads": "8"}))
    assert list(rows) == ["pytorch", "keras", "matlab", "hf", "t5"]
    totals = {name: r.total for name, r in rows.items() if isinstance(r, Calculation)}
    assert totals == {"pytorch": 1_050_624, "keras": 1_050_624, "matlab": 1_050_624, "hf": 1_048_576, "t5": 1_048_576}
    assert all(isinstance(r, Calculation) and r.d_k == 64 for r in rows.values())


def test_compare_reports_what_a_convention_cannot_take() -> None:
    rows = dict(compare({"hidden_size": "512", "num_heads": "8", "key_dim": "128"}))
    assert isinstance(rows["pytorch"], str) and "64" in rows["pytorch"]
    keras_row, matlab_row = rows["keras"], rows["matlab"]
    assert isinstance(keras_row, Calculation) and keras_row.q_width == 1024
    assert isinstance(matlab_row, Calculation) and dict(matlab_row.arguments)["NumKeyChannels"] == 1024
    gqa = dict(compare({"d_model": "512", "NumHeads": "8", "num_key_value_heads": "2"}))
    assert isinstance(gqa["hf"], Calculation) and gqa["hf"].v_width == 128
    assert all(isinstance(gqa[c], str) for c in ("pytorch", "keras", "matlab", "t5"))
    with pytest.raises(ValueError, match="conflicting values for the model width"):
        compare({"embed_dim": "512", "hidden_size": "768", "num_heads": "8"})
    with pytest.raises(ValueError, match="compare needs the head count"):
        compare({"embed_dim": "512"})
    with pytest.raises(ValueError, match="unknown argument 'foo' for compare; valid: "):
        compare({"embed_dim": "512", "num_heads": "8", "foo": "1"})


# --------------------------------------------------------------------------- rendering


def test_calc_json_shape() -> None:
    data = calc_json(cv.t5(512, 8, 64, has_relative_attention_bias=True))
    assert set(data) == {
        "convention",
        "arguments",
        "terms",
        "params",
        "num_heads",
        "d_k",
        "d_v",
        "q_width",
        "v_width",
        "d_model",
        "output_dim",
        "scales_with_heads",
        "explanation",
        "notes",
    }
    assert data["params"] == {"total": 4 * 512 * 512, "weights": 4 * 512 * 512, "biases": 0, "extra": 32 * 8}
    assert {"name", "formula", "value", "is_bias"} <= set(data["terms"][0])
    assert data["arguments"]["d_kv"] == 64
    json.dumps(data)
    json.dumps(compare_json(compare({"embed_dim": "512", "num_heads": "8", "kdim": "256"})))
    json.dumps(what_if_json(what_if("hf", {"hidden_size": "64", "num_attention_heads": "4"}, [2, 3])))


def test_text_renderers() -> None:
    text = calc_text(cv.pytorch(512, 8))
    assert "1,050,624" in text and "d_k 64" in text
    assert "The head count does not change this count (other arguments fixed)." in text  # said by default
    assert "embed_dim × embed_dim" in text and "head_dim = embed_dim" in text
    assert "9,834,496" in calc_text(cv.matlab(4, 784, 3136))
    table = compare_text(compare({"embed_dim": "512", "num_heads": "8", "key_dim": "128"}))
    assert "Not applicable" in table and "pytorch" in table and "2,100,736" in table
    wi = what_if_text("pytorch", what_if("pytorch", {"embed_dim": "512", "num_heads": "8"}, [1, 8, 64]))
    assert "does not change" in wi
