"""An ONNX graph of a hybrid decoder: softmax attention in one layer, a state-space mixer in another.
The graph's blocks are its softmax attention; the mixer layers are listed beside them (by the weights
only such a mixer has, or by the layer plan of a config.json beside the file where the exporter
renamed or folded those weights), so no KV figure stands for the whole of what decoding keeps."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

import mhainspect
from mhainspect.results import CacheStatus, MixerKind
from tests import attention_graphs as ag

D, HEADS, INNER, STATE, KERNEL = 32, 4, 64, 16, 4


def _hybrid(path: Path, mixer_names: bool, pads: tuple[int, int] = (KERNEL - 1, 0), kernel: int = KERNEL,
            decay: tuple[int, ...] = (INNER, STATE), exp: bool = True) -> Path:
    """Layer 0: a Mamba-like mixer (its A_log ``decay``, D and depthwise conv1d named as transformers
    names them, or anonymous as an exporter that folded them leaves them, A read by an Exp when
    ``exp``); layer 1: attention."""
    g = ag.Nodes()
    prefix = "model.layers.0.mamba." if mixer_names else "onnx::"
    a_log, conv, skip = (f"{prefix}A_log", f"{prefix}conv1d.weight", f"{prefix}D") if mixer_names else \
        ("onnx::Exp_17", "onnx::Conv_18", "onnx::Mul_19")
    g.inits += [ag.weight(a_log, *decay), ag.weight(conv, INNER, 1, kernel), ag.weight(skip, INNER),
                ag.weight("model.layers.0.mamba.in_proj.weight", D, INNER)]
    h = g.add("MatMul", ["x", "model.layers.0.mamba.in_proj.weight"], "/model/layers.0/mamba/in_proj/MatMul_out")
    t = g.add("Transpose", [h], "/model/layers.0/mamba/T_out", perm=[0, 2, 1])
    c = g.add("Conv", [t, conv], "/model/layers.0/mamba/conv1d/Conv_out", group=INNER, pads=list(pads))
    if exp:
        g.add("Exp", [a_log], "/model/layers.0/mamba/Exp_out")
    else:
        g.add("Neg", [a_log], "/model/layers.0/mamba/Exp_out")
    g.add("Mul", [c, skip], "/model/layers.0/mamba/state_out")
    w = ag.Weights("model.layers.1.self_attn", D)
    g.inits += w.tensors() + ag.shape_consts(HEADS, D // HEADS)
    out = ag.mha_nodes(g, "/model/layers.1/self_attn", "x", w.prefix, HEADS, D // HEADS)
    m = ag.model(g.nodes, g.inits, [ag.value("x", "batch", "seq", D)],
                 [ag.value(out, "batch", "seq", D), ag.value("/model/layers.0/mamba/state_out", "batch", INNER, "seq"),
                  ag.value("/model/layers.0/mamba/Exp_out", INNER, STATE)])
    path.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(path / "model.onnx"))
    return path / "model.onnx"


def test_mixer_weights_size_a_mamba_layer(tmp_path: Path) -> None:
    """Named mixer weights and no config: the shapes give transformers' state. conv1d.weight
    [64, 1, 4] -> 64 × 4 = 256 (float32, the parameters' dtype); A_log [64, 16] -> 64 × 16 = 1,024
    (float32) -> 1,280 × 4 = 5,120 bytes, as the Jamba config below gives."""
    report = mhainspect.inspect(str(_hybrid(tmp_path / "named", mixer_names=True)), context=100)
    assert [b.name for b in report.blocks] and all("layers.1" in b.name for b in report.blocks)
    (mixer,) = report.model.mixers
    assert mixer.kind is MixerKind.STATE_SPACE and mixer.layers == (0,) and mixer.state_bytes_per_layer == 5120
    assert "A_log [64, 16] -> 64 × 16" in mixer.state_source
    kv = report.model.kv_cache
    assert kv is not None and kv.state_bytes_per_sequence == 5120


def test_a_decay_per_head_leaves_the_state_unsized(tmp_path: Path) -> None:
    """A_log per head (Mamba-2, Gated DeltaNet: [8]) gives the heads, not the head size or d_state:
    the state is not sized, and the reason says what is known."""
    report = mhainspect.inspect(str(_hybrid(tmp_path / "heads", mixer_names=True, decay=(8,))), context=100)
    (mixer,) = report.model.mixers
    assert mixer.layers == (0,) and mixer.state_bytes_per_layer is None
    assert mixer.reason is not None and "A_log [8] gives the heads" in mixer.reason and "64 × 4" in mixer.reason
    kv = report.model.kv_cache
    assert kv is not None and kv.state_reason is not None and "cannot be sized" in kv.state_reason
    memory = report.model.memory
    assert memory is not None and memory.total_bytes is None


def _jamba_config_beside(path: Path) -> None:
    """A Jamba config.json beside ``path``: 2 layers, layer 0 Mamba (attn_layer_period 2, offset 1)."""
    (path.parent / "config.json").write_text(json.dumps({
        "model_type": "jamba", "num_hidden_layers": 2, "hidden_size": D, "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS, "attn_layer_period": 2, "attn_layer_offset": 1, "mamba_expand": 2,
        "mamba_d_state": STATE, "mamba_d_conv": KERNEL}))

def test_a_config_beside_gives_the_layers_and_their_state(tmp_path: Path) -> None:
    """Weights an exporter renamed tell nothing; the Jamba config beside the file does: layer 0 Mamba
    (attn_layer_period 2, offset 1). transformers' state: conv 64 × 4 = 256 (float32, the
    parameters' dtype) + recurrent 64 × 16 = 1,024 (float32) -> 1,280 × 4 = 5,120 bytes."""
    path = _hybrid(tmp_path / "renamed", mixer_names=False)
    _jamba_config_beside(path)
    report = mhainspect.inspect(str(path), context=100)
    (mixer,) = report.model.mixers
    assert mixer.kind is MixerKind.STATE_SPACE and mixer.layers == (0,)
    assert mixer.state_bytes_per_layer == 5120
    kv = report.model.kv_cache
    assert kv is not None and kv.state_bytes_per_sequence == 5120


def test_a_causal_depthwise_convolution_tells_without_names(tmp_path: Path) -> None:
    """Every mixer parameter folded or renamed (as the TorchScript exporter leaves Jamba's) and no
    config: the layer's short causal depthwise convolution (weight [C, 1, k], group C, k - 1 inputs
    of left padding) lists it, and the tensor of its module the graph exponentiates is its decay A:
    conv 64 × 4 + state 64 × 16, 5,120 bytes, the source naming the file's tensors, not conv1d."""
    report = mhainspect.inspect(str(_hybrid(tmp_path / "anon", mixer_names=False)), context=100)
    (mixer,) = report.model.mixers
    assert mixer.kind is MixerKind.STATE_SPACE and mixer.layers == (0,) and mixer.state_bytes_per_layer == 5120
    assert "onnx::Conv_18 [64, 1, 4]" in mixer.source and "onnx::Exp_17 [64, 16]" in mixer.source
    assert "conv1d" not in mixer.source + mixer.state_source


def test_a_convolution_alone_is_no_known_mixer(tmp_path: Path) -> None:
    """Anonymous weights and no decay the graph exponentiates: the convolution's state is known, not
    whether a recurrent state is kept beside it. The layer is of a kind not known here: the KV figure
    (the attention layer here caches nothing: no mask, no cache tensor) is unknown, never "none",
    and names the layer it leaves out."""
    report = mhainspect.inspect(str(_hybrid(tmp_path / "conv", mixer_names=False, exp=False)), context=100)
    (mixer,) = report.model.mixers
    assert mixer.kind is MixerKind.UNKNOWN and mixer.layers == (0,) and mixer.state_bytes_per_layer is None
    assert "onnx::Conv_18 [64, 1, 4]" in mixer.source
    kv = report.model.kv_cache
    assert kv is not None and kv.status is CacheStatus.UNKNOWN
    assert kv.not_counted is not None and "layer 0" in kv.not_counted


def test_a_convolution_padded_on_both_sides_is_no_mixer(tmp_path: Path) -> None:
    """A depthwise convolution padded by half its kernel on each side (ConvBERT, a Conformer) sees the
    future: no recurrent mixer, nothing listed."""
    report = mhainspect.inspect(str(_hybrid(tmp_path / "sym", mixer_names=False, pads=(4, 4), kernel=9)), context=100)
    assert report.model.mixers == ()


def test_a_torchscript_export_of_jamba(tmp_path: Path) -> None:
    """transformers' Jamba (layer 0 Mamba, layer 1 attention, random weights plus noise) exported by
    the TorchScript exporter, which folds A_log, D and the conv weight into anonymous constants: one
    block (layer 1, 4/2 heads), the Mamba layer listed by its causal convolution and its state as
    transformers' cache holds it (conv [C, k] + SSM [inner, d_state], float32, read from the
    module's own parameters) from the convolution's kernel and the decay the graph exponentiates,
    with or without the config beside."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tests.random_weights import add_noise, export_last_hidden_state

    config = transformers.JambaConfig(vocab_size=64, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                      num_hidden_layers=2, attn_layer_period=2, attn_layer_offset=1, num_experts=1,
                                      mamba_d_state=4, mamba_expand=2, intermediate_size=64, use_mamba_kernels=False)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = add_noise(transformers.JambaModel(config)).eval()
    ids = torch.randint(2, 60, (2, 8), generator=torch.Generator().manual_seed(0))
    path = tmp_path / "jamba" / "model.onnx"
    path.parent.mkdir()
    export_last_hidden_state(model, ids, path)
    names = {i.name for i in onnx.load(str(path)).graph.initializer}
    assert not any(n.endswith(("A_log", "conv1d.weight")) for n in names)  # what makes the case
    report = mhainspect.inspect(str(path), context=100)
    assert [(b.num_heads, b.num_kv_heads) for b in report.blocks] == [(4, 2)] and "layers.1" in report.blocks[0].name
    mamba = model.layers[0].mamba
    channels, _, kernel = mamba.conv1d.weight.shape
    truth = 4 * (channels * kernel + mamba.A_log.numel())
    (mixer,) = report.model.mixers
    assert mixer.kind is MixerKind.STATE_SPACE and mixer.layers == (0,) and mixer.state_bytes_per_layer == truth
    assert "a causal depthwise convolution, weight onnx::Conv_" in mixer.source and "conv1d" not in mixer.source
    config.save_pretrained(path.parent)
    report = mhainspect.inspect(str(path), context=100)
    (mixer,) = report.model.mixers
    assert mixer.kind is MixerKind.STATE_SPACE and mixer.layers == (0,) and mixer.state_bytes_per_layer == truth


def _decoder_step(path: Path, conv_dtype: int = onnx.TensorProto.FLOAT, ssm: tuple[int, ...] = (8, 8, STATE),
                  static_kv: bool = False) -> Path:
    """A decoder step as onnx-community's hybrid exports write it: layer 0 a mixer whose parameters
    are anonymous (no name, no config tells), fed its state by the graph inputs past_conv.0
    [batch, 64, 4] and past_ssm.0 [batch, *ssm] and handing it on as present_conv.0 / present_ssm.0;
    layer 1 attention with a K/V cache past_key_values.1.key/value (a past-length axis, or every axis
    fixed as a static-cache export writes it)."""
    from onnx import helper

    g = ag.Nodes()
    g.inits += [ag.weight("onnx::MatMul_3", D, INNER), ag.weight("onnx::Mul_4", *ssm)]
    h = g.add("MatMul", ["x", "onnx::MatMul_3"], "/model/layers.0/mixer/MatMul_out")
    t = g.add("Transpose", [h], "/model/layers.0/mixer/T_out", perm=[0, 2, 1])
    cat = g.add("Concat", ["past_conv.0", t], "/model/layers.0/mixer/Concat_out", axis=2)
    g.add("Identity", [cat], "present_conv.0")
    g.add("Mul", ["past_ssm.0", "onnx::Mul_4"], "present_ssm.0")
    w = ag.Weights("model.layers.1.self_attn", D)
    g.inits += w.tensors() + ag.shape_consts(HEADS, D // HEADS)
    out = ag.mha_nodes(g, "/model/layers.1/self_attn", "x", w.prefix, HEADS, D // HEADS)
    past = 16 if static_kv else "past_sequence_length"
    kv = [ag.value(f"past_key_values.1.{r}", "batch", HEADS, past, D // HEADS) for r in ("key", "value")]
    inputs = [ag.value("x", "batch", "seq", D), helper.make_tensor_value_info("past_conv.0", conv_dtype,
                                                                               ["batch", INNER, KERNEL]),
              ag.value("past_ssm.0", "batch", *ssm), *kv]
    outputs = [ag.value(out, "batch", "seq", D), helper.make_tensor_value_info("present_conv.0", conv_dtype,
                                                                               ["batch", INNER, "total"]),
               ag.value("present_ssm.0", "batch", *ssm)]
    m = ag.model(g.nodes, g.inits, inputs, outputs)
    path.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(path / "model.onnx"))
    return path / "model.onnx"


def test_the_graphs_state_inputs_size_the_state(tmp_path: Path) -> None:
    """No mixer name, no causal convolution, no config: the graph's own state inputs say layer 0 keeps
    conv 64 × 4 = 256 + ssm 8 × 8 × 16 = 1,024 elements, float32: 5,120 bytes a sequence. The K/V
    inputs of layer 1 (a past-length axis) are no state."""
    report = mhainspect.inspect(str(_decoder_step(tmp_path / "step")), context=100)
    (mixer,) = report.model.mixers
    assert mixer.kind is MixerKind.STATE_SPACE and mixer.layers == (0,)
    assert mixer.state_bytes_per_layer == 5120 and mixer.dtype == "float32"
    assert "past_conv.N [batch, 64, 4] float32" in mixer.state_source
    kv = report.model.kv_cache
    assert kv is not None and kv.state_bytes_per_sequence == 5120 and not kv.lower_bound
    assert [b.name for b in report.blocks] == ["model.layers.1.self_attn"]
    memory = report.model.memory
    assert memory is not None and memory.state_bytes == 5120


def test_state_tensors_in_two_dtypes(tmp_path: Path) -> None:
    """A float16 convolution state beside a float32 recurrent one: 256 × 2 + 1,024 × 4 = 4,608 bytes."""
    report = mhainspect.inspect(str(_decoder_step(tmp_path / "mixed", conv_dtype=onnx.TensorProto.FLOAT16)),
                                context=100)
    (mixer,) = report.model.mixers
    assert mixer.state_bytes_per_layer == 4608 and mixer.dtype == "mixed"


def test_a_static_kv_cache_is_no_state(tmp_path: Path) -> None:
    """past_key_values.1.key with every axis fixed (a static cache) is K/V, not a mixer's state: only
    layer 0 is a mixer."""
    report = mhainspect.inspect(str(_decoder_step(tmp_path / "static", static_kv=True)), context=100)
    assert [m.layers for m in report.model.mixers] == [(0,)]


def test_the_graphs_state_outranks_a_config(tmp_path: Path) -> None:
    """A Jamba config beside the file gives layer 0 conv 64 × 4 + state 64 × 16 = 1,280 elements; the
    graph's own tensors hold conv 256 + ssm 64 × 8 = 512: those are taken, and the disagreement said."""
    path = _decoder_step(tmp_path / "cfg", ssm=(INNER, 8))
    _jamba_config_beside(path)
    report = mhainspect.inspect(str(path), context=100)
    (mixer,) = report.model.mixers
    assert mixer.kind is MixerKind.STATE_SPACE and mixer.layers == (0,)
    assert mixer.state_bytes_per_layer == (256 + 512) * 4
    assert "gives 1,280 elements" in mixer.state_source and "config.json" in mixer.source


def _split_mixer(path: Path, parts: tuple[tuple[int, int], ...], decay: int) -> Path:
    """A mixer whose anonymous causal convolution runs over three streams at once, its output split
    in three and each part reshaped per head ([batch, seq, count, width], the batch and sequence
    sizes read from the input's shape as exporters write them): ``parts`` (count, width) in order;
    its decay, per head, read by an Exp."""
    from onnx import helper

    g = ag.Nodes()
    channels = sum(c * w for c, w in parts)
    g.inits += [ag.weight("onnx::MatMul_5", D, channels), ag.weight("onnx::Conv_6", channels, 1, KERNEL),
                ag.weight("onnx::Exp_7", decay), ag.ints("onnx::Split_8", [c * w for c, w in parts])]
    h = g.add("MatMul", ["x", "onnx::MatMul_5"], "/model/layers.0/mixer/in_proj/MatMul_out")
    t = g.add("Transpose", [h], "/model/layers.0/mixer/T_out", perm=[0, 2, 1])
    c = g.add("Conv", [t, "onnx::Conv_6"], "/model/layers.0/mixer/Conv_out", group=channels, pads=[KERNEL - 1, 0])
    back = g.add("Transpose", [c], "/model/layers.0/mixer/T2_out", perm=[0, 2, 1])
    g.nodes.append(helper.make_node("Split", [back, "onnx::Split_8"], [f"/model/layers.0/mixer/Split_out{i}"
                                                                         for i in range(3)],
                                    name="/model/layers.0/mixer/Split", axis=-1))
    shape = g.add("Shape", ["x"], "/model/layers.0/mixer/Shape_out")
    g.inits += [ag.ints("idx01", [0, 1])]
    lead = g.add("Gather", [shape, "idx01"], "/model/layers.0/mixer/Gather_out", axis=0)
    outs = [g.add("Exp", ["onnx::Exp_7"], "/model/layers.0/mixer/Exp_out")]
    for i, (count, width) in enumerate(parts):
        g.inits += [ag.ints(f"tail{i}", [count, width])]
        target = g.add("Concat", [lead, f"tail{i}"], f"/model/layers.0/mixer/Concat{i}_out", axis=0)
        outs.append(g.add("Reshape", [f"/model/layers.0/mixer/Split_out{i}", target],
                          f"/model/layers.0/mixer/Reshape{i}_out"))
    m = ag.model(g.nodes, g.inits, [ag.value("x", "batch", "seq", D)],
                 [ag.value(o, "batch", "seq", 0, 0) if "Reshape" in o else ag.value(o, decay) for o in outs])
    path.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(path / "model.onnx"))
    return path / "model.onnx"


def test_a_scans_state_from_the_split_of_its_convolution(tmp_path: Path) -> None:
    """Mamba-2 (x: 4 heads × 32, B and C: 2 groups × 8 each) and Gated DeltaNet (q and k: 2 key heads
    × 16 each, v: 4 value heads × 8), every parameter anonymous, no config: the pair alike gives the
    state's per-head width, the third part its rows. Mamba-2: conv 160 × 4 = 640 + state 128 × 8 =
    1,024 -> 6,656 bytes; Gated DeltaNet: conv 96 × 4 = 384 + state 32 × 16 = 512 -> 3,584 bytes."""
    for name, parts, decay, expected in (("mamba2", ((4, 32), (2, 8), (2, 8)), 4, 6656),
                                         ("deltanet", ((2, 16), (2, 16), (4, 8)), 4, 3584)):
        report = mhainspect.inspect(str(_split_mixer(tmp_path / name, parts, decay)), context=100)
        (mixer,) = report.model.mixers
        assert mixer.layers == (0,) and mixer.state_bytes_per_layer == expected, (name, mixer.reason)
        assert "splits the convolution's output in three" in mixer.state_source


def test_a_split_without_a_pair_sizes_nothing(tmp_path: Path) -> None:
    """Three parts of three widths: no pair says which is the state's rows: not sized, said so."""
    report = mhainspect.inspect(str(_split_mixer(tmp_path / "odd", ((4, 32), (2, 8), (1, 8)), 4)), context=100)
    (mixer,) = report.model.mixers
    assert mixer.state_bytes_per_layer is None and mixer.reason is not None and "gives the heads" in mixer.reason


def test_a_torchscript_export_of_mamba2(tmp_path: Path) -> None:
    """transformers' Mamba-2 (2 layers, 4 heads × 32, 2 groups × d_state 8; random weights plus noise)
    through the TorchScript exporter, which folds A_log and the conv weight into anonymous constants,
    no config: each layer's state as transformers' cache holds it (conv [C, k] + SSM [heads, head_dim,
    d_state], float32), from the convolution's kernel and the split of its output."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tests.random_weights import add_noise, export_last_hidden_state

    config = transformers.AutoConfig.for_model("mamba2", hidden_size=64, num_hidden_layers=2, vocab_size=128,
                                               state_size=8, num_heads=4, head_dim=32, n_groups=2, expand=2)
    torch.manual_seed(0)
    model = add_noise(transformers.AutoModel.from_config(config)).eval()
    ids = torch.randint(2, 60, (1, 8), generator=torch.Generator().manual_seed(0))
    path = tmp_path / "mamba2" / "model.onnx"
    path.parent.mkdir()
    export_last_hidden_state(model, ids, path)
    assert not any(i.name.endswith(("A_log", "conv1d.weight")) for i in onnx.load(str(path)).graph.initializer)
    mixer = model.layers[0].mixer
    channels, _, kernel = mixer.conv1d.weight.shape
    truth = 4 * (channels * kernel + mixer.num_heads * mixer.head_dim * mixer.ssm_state_size)
    report = mhainspect.inspect(str(path), context=100)
    assert sorted(i for m in report.model.mixers for i in m.layers) == [0, 1]
    assert {m.state_bytes_per_layer for m in report.model.mixers} == {truth}
    kv = report.model.kv_cache
    assert kv is not None and kv.state_bytes_per_sequence == 2 * truth


@pytest.mark.parametrize(("name", "state"), [("past_conv.0", True), ("present_ssm.3", True),
                                             ("cache_params.conv_states.1", True), ("ssm_state", True),
                                             ("past_state.2", True), ("conv1d_3", False), ("ssm", False),
                                             ("past_hidden", False), ("past_key_values.0.conv", False)])
def test_a_state_is_named_as_carried(name: str, state: bool) -> None:
    """A mixer's state is named as carried from step to step (past/present/cache or state[s]), not
    by a state word alone: dynamo names a graph output after the op that makes it (a Conv1d's
    output conv1d_3 [batch, 32, 7] of a static export is no convolution state)."""
    from mhainspect.matchers.cache import state_tensor

    assert (state_tensor(name, ("batch", 32, 7), "float32") is not None) is state
