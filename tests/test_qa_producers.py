"""Regressions from a sweep of exporter options and hand-written attention no other test names
(TorchScript at old opsets, without constant folding, static shapes, model-local functions,
training mode; the dynamo exporter; Keras 3's own ONNX export), each built small with random
weights and checked against numbers read from the torch module:

- torch's ``repeat_interleave`` of the K/V heads (grouped-query attention written by hand) is
  exported as Unsqueeze -> Tile -> Reshape: the Tile grows a size-1 axis after the KV head axis,
  as repeat_kv's Expand does. It was read as a head axis multiplied from 1 (multi-query, MHA007
  against the weights' 2 KV heads).
- nn.MultiheadAttention(add_bias_kv=True) concatenates ``bias_k.repeat(1, bsz, 1)`` to K: the
  walk to a head repeat followed the Concat's last part into that Tile and read one KV head
  (MHA005 and MHA007 on a plain 4-head block), and the learned rows were lost from the block's
  extra (a Tile of a stored tensor is a value of the run). With static shapes the exporter folds
  add_zero_attn's zeros into a Constant: no parameter, so no extra either.
- A module torch.jit.trace'd before export has its buffers as named initializers (a plain module's
  are Constant nodes): nanoGPT's float causal-mask buffer, read only by ``== 0``, was counted as
  4,096 parameters. A float tensor read only by comparisons is a mask.
- Keras 3 exports MultiHeadAttention over several attention_axes with its softmax written out,
  exp(s - logsumexp(s)) (no Softmax op normalises two axes): no block at all. An Exp that
  normalises (minus ReduceLogSumExp, or divided by its ReduceSum) anchors a block as a Softmax.
- torch.onnx.export(dynamo=True, optimize=False) writes torch.split / chunk as SplitToSequence ->
  SequenceAt: GPT-2's c_attn parts and nn.MultiheadAttention's packed bias were lost (a block of O
  alone, kind cross; biases missing). Each part the constants give is the Slice it reads.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import mhainspect  # noqa: E402
from tests.random_weights import add_noise  # noqa: E402

D, HEADS, T = 32, 4, 8


def _export(model: Any, x: Any, path: Path, *, dynamic: bool = True, **options: Any) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["out"], dynamo=False,
                          **({"dynamic_axes": {"x": {0: "batch"}, "out": {0: "batch"}}} if dynamic else {}),
                          **({"opset_version": 17} | options))
    return mhainspect.inspect(str(path)).to_dict()


class _GroupedQuery(torch.nn.Module):  # type: ignore[misc]
    """Hand-written grouped-query attention; K/V heads repeated by repeat_interleave."""

    def __init__(self, kv: int) -> None:
        super().__init__()
        self.kv, self.dk = kv, D // HEADS
        self.q = torch.nn.Linear(D, D)
        self.k = torch.nn.Linear(D, kv * self.dk)
        self.v = torch.nn.Linear(D, kv * self.dk)
        self.o = torch.nn.Linear(D, D)

    def forward(self, x: Any) -> Any:
        b, t, _ = x.shape
        q = self.q(x).view(b, t, HEADS, self.dk).transpose(1, 2)
        k = self.k(x).view(b, t, self.kv, self.dk).transpose(1, 2).repeat_interleave(HEADS // self.kv, dim=1)
        v = self.v(x).view(b, t, self.kv, self.dk).transpose(1, 2).repeat_interleave(HEADS // self.kv, dim=1)
        a = (q @ k.transpose(-2, -1) * self.dk ** -0.5).softmax(-1)
        return self.o((a @ v).transpose(1, 2).reshape(b, t, D))


@pytest.mark.parametrize("kv", [1, 2])
def test_repeat_interleave_of_kv_heads(kv: int, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = add_noise(_GroupedQuery(kv))
    d = _export(model, torch.randn(2, T, D), tmp_path / "gqa.onnx")
    assert "Tile" in {n.op_type for n in __import__("onnx").load(str(tmp_path / "gqa.onnx")).graph.node}
    (b,) = d["blocks"]
    assert (b["num_heads"], b["num_kv_heads"], b["d_k"], b["d_model"]) == (HEADS, kv, D // HEADS, D)
    assert b["params"]["k"] == kv * (D // HEADS) * (D + 1)
    assert "MHA007" not in {f["code"] for f in d["flags"]}


class _SelfAttention(torch.nn.Module):  # type: ignore[misc]
    def __init__(self, **kw: Any) -> None:
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(D, HEADS, **kw)

    def forward(self, x: Any) -> Any:
        return self.mha(x, x, x, need_weights=False)[0]


@pytest.mark.parametrize(("kw", "dynamic"), [
    ({"add_bias_kv": True}, True),  # bias_k.repeat(1, bsz, 1): a Tile of the parameter
    ({"add_bias_kv": True}, False),
    ({"add_zero_attn": True, "batch_first": True}, False),  # zeros folded into a Constant node
    ({"add_bias_kv": True, "add_zero_attn": True, "bias": False, "batch_first": True}, False),
])
def test_multihead_attention_learned_and_zero_kv_rows(kw: dict[str, Any], dynamic: bool, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = add_noise(_SelfAttention(**kw))
    x = torch.randn(2, T, D) if kw.get("batch_first") else torch.randn(T, 2, D)
    d = _export(model, x, tmp_path / "mha.onnx", dynamic=dynamic)
    m = model.mha
    (b,) = d["blocks"]
    assert (b["num_heads"], b["num_kv_heads"], b["d_k"]) == (HEADS, HEADS, D // HEADS)
    assert not {"MHA005", "MHA007"} & {f["code"] for f in d["flags"]}
    learned = sum(p.numel() for p in (m.bias_k, m.bias_v) if p is not None)
    assert b["params"].get("kv_rows", 0) == learned and b["params"]["extra"] == 0
    assert b["params"]["total"] == sum(p.numel() for p in m.parameters())
    assert d["model"]["total_params"] == sum(p.numel() for p in model.parameters())


class _CausalBlock(torch.nn.Module):  # type: ignore[misc]
    """GPT-2's attention as nanoGPT writes it: a float tril buffer compared with 0 masks the scores."""

    def __init__(self) -> None:
        super().__init__()
        self.c_attn = torch.nn.Linear(D, 3 * D)
        self.c_proj = torch.nn.Linear(D, D)
        self.register_buffer("bias", torch.tril(torch.ones(64, 64)).view(1, 1, 64, 64), persistent=False)

    def forward(self, x: Any) -> Any:
        b, t, _ = x.shape
        q, k, v = (z.view(b, t, HEADS, D // HEADS).transpose(1, 2) for z in self.c_attn(x).split(D, dim=2))
        s = (q @ k.transpose(-2, -1)) * (D // HEADS) ** -0.5
        s = s.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        return self.c_proj((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, D))


def test_traced_module_mask_buffer_is_no_parameter(tmp_path: Path) -> None:
    """A torch.jit.trace'd module exports its buffers as initializers (a plain module's as Constant
    nodes): the causal mask, read only by a comparison, is no parameter."""
    import onnx

    torch.manual_seed(0)
    model = add_noise(_CausalBlock())
    x = torch.randn(2, T, D)
    d = _export(torch.jit.trace(model, (x,)), x, tmp_path / "traced.onnx")
    assert "bias" in {i.name for i in onnx.load(str(tmp_path / "traced.onnx")).graph.initializer}
    assert d["model"]["total_params"] == sum(p.numel() for p in model.parameters())
    assert d["model"]["weight_bytes_overhead"] >= 4 * 64 * 64  # stored, but not a parameter
    (b,) = d["blocks"]
    assert (b["num_heads"], b["d_k"], b["params"]["total"]) == (HEADS, D // HEADS, 4 * D * (D + 1))


class _WrittenSoftmax(torch.nn.Module):  # type: ignore[misc]
    """Attention whose softmax is written out: exp(s - logsumexp(s)) (what Keras 3 exports for
    MultiHeadAttention over several attention_axes), or exp(s - max(s)) / sum(...)."""

    def __init__(self, form: str) -> None:
        super().__init__()
        self.form = form
        self.q, self.k, self.v, self.o = (torch.nn.Linear(D, D) for _ in range(4))

    def forward(self, x: Any) -> Any:
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, HEADS, D // HEADS).transpose(1, 2) for p in (self.q, self.k, self.v))
        s = q @ k.transpose(-2, -1) * (D // HEADS) ** -0.5
        if self.form == "logsumexp":
            a = torch.exp(s - torch.logsumexp(s, dim=-1, keepdim=True))
        else:
            e = torch.exp(s - s.amax(-1, keepdim=True))
            a = e / e.sum(-1, keepdim=True)
        return self.o((a @ v).transpose(1, 2).reshape(b, t, D))


@pytest.mark.parametrize("form", ["logsumexp", "max-sum"])
def test_written_out_softmax_anchors_a_block(form: str, tmp_path: Path) -> None:
    import onnx

    torch.manual_seed(0)
    model = add_noise(_WrittenSoftmax(form))
    d = _export(model, torch.randn(2, T, D), tmp_path / "written.onnx")
    ops = {n.op_type for n in onnx.load(str(tmp_path / "written.onnx")).graph.node}
    assert "Softmax" not in ops and "Exp" in ops
    (b,) = d["blocks"]
    assert (b["num_heads"], b["num_kv_heads"], b["d_k"], b["d_v"], b["d_model"]) == (HEADS, HEADS, 8, 8, D)
    assert b["params"]["total"] == 4 * D * (D + 1) == d["model"]["total_params"]
    assert b["scale"] == pytest.approx((D // HEADS) ** -0.5)


def test_exp_outside_a_softmax_is_no_anchor(tmp_path: Path) -> None:
    """An Exp that normalises nothing (a softplus-like activation) adds no block and no near miss."""

    class _Mlp(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(D, D), torch.nn.Linear(D, D)

        def forward(self, x: Any) -> Any:
            return self.b(torch.exp(self.a(x)) - 1)

    d = _export(add_noise(_Mlp()), torch.randn(2, T, D), tmp_path / "mlp.onnx")
    assert d["blocks"] == [] and d["misses"] == []



def _sequence_split_graph(split: list[int]) -> Any:
    """GPT-2's c_attn as torch.onnx.export(dynamo=True, optimize=False) writes it: the packed
    projection split by SplitToSequence (a chunk size, or a list of sizes) and read by SequenceAt."""
    import numpy as np
    from onnx import helper

    from tests.attention_graphs import ints, model, value, weight

    e = helper.make_node
    nodes = [e("MatMul", ["x", "w_qkv"], ["mm"]), e("Add", ["mm", "b_qkv"], ["qkv"]),
             e("SplitToSequence", ["qkv", "split"], ["seq"], axis=2)]
    for i, role in enumerate("qkv"):
        nodes += [e("SequenceAt", ["seq", f"i{i}"], [f"{role}2"]),
                  e("Reshape", [f"{role}2", "heads"], [f"{role}3"]),
                  e("Transpose", [f"{role}3"], [f"{role}4"], perm=[0, 2, 1, 3] if role != "k" else [0, 2, 3, 1])]
    nodes += [e("MatMul", ["q4", "k4"], ["s"]), e("Mul", ["s", "scale"], ["s2"]), e("Softmax", ["s2"], ["p"], axis=-1),
              e("MatMul", ["p", "v4"], ["o"]), e("Transpose", ["o"], ["o2"], perm=[0, 2, 1, 3]),
              e("Reshape", ["o2", "merge"], ["o3"]), e("MatMul", ["o3", "w_o"], ["o4"]), e("Add", ["o4", "b_o"], ["y"])]
    sizes = np.array(split[0] if len(split) == 1 else split, dtype=np.int64)
    inits = [weight("w_qkv", D, 3 * D), weight("b_qkv", 3 * D), weight("w_o", D, D), weight("b_o", D),
             helper.make_tensor("split", onnx_int64(), sizes.shape, sizes.flatten().tolist()),
             ints("heads", [2, T, HEADS, D // HEADS]), ints("merge", [2, T, D]),
             helper.make_tensor("scale", 1, [], [(D // HEADS) ** -0.5])]
    inits += [helper.make_tensor(f"i{i}", onnx_int64(), [], [i]) for i in range(3)]
    return model(nodes, inits, [value("x", 2, T, D)], [value("y", 2, T, D)], opset=18)


def onnx_int64() -> int:
    from onnx import TensorProto

    return int(TensorProto.INT64)


@pytest.mark.parametrize("split", [[D], [D, D, D]])
def test_split_to_sequence_parts_are_slices(split: list[int], tmp_path: Path) -> None:
    """Each SequenceAt part is the Slice it reads (Q/K/V were lost: the block held O alone, kind cross)."""
    import onnx

    path = tmp_path / "seq.onnx"
    onnx.save(_sequence_split_graph(split), str(path))
    d = mhainspect.inspect(str(path)).to_dict()
    (b,) = d["blocks"]
    part = D * D + D
    assert (b["kind"], b["num_heads"], b["d_k"], b["d_model"]) == ("self", HEADS, D // HEADS, D)
    assert (b["params"]["q"], b["params"]["k"], b["params"]["v"], b["params"]["total"]) == (part, part, part, 4 * part)
    assert d["model"]["total_params"] == 4 * part


def test_split_to_sequence_without_sizes_is_not_divided(tmp_path: Path) -> None:
    """Sizes the graph does not state (uneven list) are taken as stated, never as thirds."""
    import onnx

    path = tmp_path / "uneven.onnx"
    onnx.save(_sequence_split_graph([D, D // 2, 3 * D // 2]), str(path))
    d = mhainspect.inspect(str(path)).to_dict()
    assert all(b["params"]["k"] != D * D + D for b in d["blocks"])  # K is 16 wide here, not a third
