"""PyTorch front end: known modules, traced custom attention, checkpoints read without running code."""

from __future__ import annotations

import copy
import json
import math
import os
import pickle
import struct
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from jsonschema import Draft202012Validator  # noqa: E402

import mhainspect  # noqa: E402
from mhainspect.errors import InputError  # noqa: E402
from mhainspect.frontends.dispatch import classify, parse_factory_args  # noqa: E402
from mhainspect.render.json_render import report_to_dict  # noqa: E402
from mhainspect.results import AttentionBlock, Report  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]


def _quiet_transformers() -> Any:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return transformers


def layout(block: AttentionBlock) -> tuple[Any, ...]:
    p = block.params
    return (block.name, block.kind, block.num_heads, block.num_kv_heads, block.d_model, block.d_k, block.d_v,
            p.q, p.k, p.v, p.o, p.bias, p.total, p.extra)


# ----------------------------------------------------------------------------- nn.MultiheadAttention


@pytest.mark.parametrize("heads", [1, 2, 4, 8, 64])
def test_multihead_attention_count_does_not_depend_on_heads(heads: int) -> None:
    report = mhainspect.inspect(nn.MultiheadAttention(512, heads))
    assert report.model.total_params == 1_050_624
    assert report.model.attention_params == 1_050_624
    (block,) = report.blocks
    assert block.matcher == "module"
    assert (block.num_heads, block.num_kv_heads, block.d_model) == (heads, heads, 512)
    assert block.d_k == block.d_v == 512 // heads
    assert block.params.total == 1_050_624 and block.params.bias == 4 * 512
    # The verdict: at a fixed total width, any other head count holds the same parameters.
    assert block.what_if, "what-if counts expected"
    assert all(w.total_width_fixed == 1_050_624 for w in block.what_if)
    assert not [f for f in report.flags if f.code == "MHA001"]
    assert any(e.source == "module" and e.field == "num_heads" for e in block.evidence)


def test_multihead_attention_kdim_vdim_bias_kv_and_no_bias() -> None:
    e, kdim, vdim = 512, 256, 128
    report = mhainspect.inspect(nn.MultiheadAttention(e, 8, kdim=kdim, vdim=vdim, add_bias_kv=True))
    (block,) = report.blocks
    # E(E + kdim + vdim) + E² + 4E (biases) + 2E (bias_k/bias_v, K's and V's learned rows): calc's count.
    assert block.params.total == e * (e + kdim + vdim) + e * e + 4 * e + 2 * e
    assert (block.params.kv_rows, block.params.extra, block.params.bias) == (2 * e, 0, 6 * e)
    assert report.model.total_params == block.params.total == report.model.attention_params
    assert block.params.total == mhainspect.calc("pytorch", embed_dim=e, num_heads=8, kdim=kdim, vdim=vdim,
                                                 add_bias_kv=True).total
    assert [p.in_features for p in block.projections] == [e, kdim, vdim, e]
    assert (block.num_heads, block.d_k, block.d_v) == (8, 64, 64)

    no_bias = mhainspect.inspect(nn.MultiheadAttention(e, 8, bias=False)).blocks[0]
    assert no_bias.params.total == 4 * e * e and no_bias.params.bias == 0


@pytest.mark.parametrize("fmt", ["safetensors", "pt"])
def test_multihead_attention_bias_kv_from_a_checkpoint(fmt: str, tmp_path: Path) -> None:
    """The saved state dict of a model holding nn.MultiheadAttention(add_bias_kv=True): bias_k and
    bias_v count in the block (params.kv_rows), as from the module and its export."""
    class Holder(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(32, 4, add_bias_kv=True)

    torch.manual_seed(0)
    model = Holder()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)  # bias_k/bias_v start at zero-ish: noise on every parameter
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    path = tmp_path / f"mha.{fmt}"
    if fmt == "safetensors":
        from safetensors.torch import save_file

        save_file(state, str(path))
    else:
        torch.save(state, str(path))
    (b,) = mhainspect.inspect(str(path)).blocks
    assert b.params.total == sum(p.numel() for p in model.attn.parameters())
    assert (b.params.kv_rows, b.params.extra) == (2 * 32, 0)


# ----------------------------------------------------------------------------- Hugging Face modules


@pytest.mark.parametrize("heads", [4, 12])
@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_roberta_meta_device_tied_weights_once(heads: int) -> None:
    transformers = _quiet_transformers()
    with torch.device("meta"):
        model = transformers.RobertaForMaskedLM(transformers.RobertaConfig(vocab_size=30522,
                                                                           num_attention_heads=heads))
    assert model.lm_head.decoder.weight is model.roberta.embeddings.word_embeddings.weight
    report = mhainspect.inspect(model)
    assert report.model.total_params == 109_514_298
    assert len(report.blocks) == 12
    assert {b.num_heads for b in report.blocks} == {heads}
    assert {(b.d_model, b.d_k, b.d_v, b.params.total) for b in report.blocks} == {(768, 768 // heads, 768 // heads,
                                                                                   4 * (768 * 768 + 768))}
    assert report.blocks[0].name == "roberta.encoder.layer.0.attention"
    assert report.model.num_nodes == 0, "known modules need no tracing"


def _small_hf(kind: str) -> Any:
    transformers = _quiet_transformers()
    torch.manual_seed(0)
    if kind == "bert":
        cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, max_position_embeddings=16, return_dict=False,
                                      attn_implementation="eager")
        return transformers.BertModel(cfg).eval()
    cfg = transformers.T5Config(vocab_size=100, d_model=32, num_layers=2, num_heads=4, d_kv=16, d_ff=64,
                                return_dict=False, attn_implementation="eager", use_cache=False)
    return transformers.T5EncoderModel(cfg).eval()


@pytest.mark.parametrize("kind", ["bert", "t5"])
def test_three_doors_agree(kind: str, tmp_path: Path, schema_validator: Draft202012Validator) -> None:
    """The module, its ONNX export and its safetensors checkpoint + config.json give the same blocks."""
    model = _small_hf(kind)
    model.save_pretrained(tmp_path / "ckpt")
    onnx_path = tmp_path / "model.onnx"
    ids = torch.zeros(2, 8, dtype=torch.long)
    original = model.forward
    model.forward = lambda input_ids: original(input_ids=input_ids)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (ids,), str(onnx_path), dynamo=False, input_names=["input_ids"],
                              dynamic_axes={"input_ids": {0: "batch", 1: "seq"}})
    finally:
        model.forward = original

    from_module = mhainspect.inspect(model)
    from_onnx = mhainspect.inspect(onnx_path)
    from_folder = mhainspect.inspect(tmp_path / "ckpt")
    from_file = mhainspect.inspect(tmp_path / "ckpt" / "model.safetensors")  # config.json beside it
    expected = [layout(b) for b in from_module.blocks]
    assert len(expected) == 2 and all(b.num_heads == 4 for b in from_module.blocks)
    assert [layout(b) for b in from_onnx.blocks] == expected
    assert [layout(b) for b in from_folder.blocks] == expected
    assert [layout(b) for b in from_file.blocks] == expected
    assert from_module.model.attention_params == from_onnx.model.attention_params == from_folder.model.attention_params
    assert from_folder.model.total_params == from_module.model.total_params
    assert (from_module.model.format, from_onnx.model.format, from_folder.model.format) == ("torch", "onnx",
                                                                                          "huggingface")
    codes = sorted(f.code for f in from_module.flags if f.code != "MHA003")
    assert sorted(f.code for f in from_folder.flags if f.code != "MHA003") == codes
    for report in (from_module, from_folder):
        assert not list(schema_validator.iter_errors(report_to_dict(report)))
    assert any(e.source == "config" for e in from_folder.blocks[0].evidence)


def test_tracing_a_known_model_does_not_double_count() -> None:
    model = _small_hf("bert")
    plain = mhainspect.inspect(model)
    traced = mhainspect.inspect(model, {"input_ids": torch.zeros(2, 8, dtype=torch.long)})
    assert traced.model.num_nodes > 0, "example inputs given: the model is traced"
    assert [layout(b) for b in traced.blocks] == [layout(b) for b in plain.blocks]
    assert traced.model.attention_params == plain.model.attention_params


# ----------------------------------------------------------------------------- traced custom attention


def _clones(module: nn.Module, n: int) -> nn.ModuleList:
    return nn.ModuleList([copy.deepcopy(module) for _ in range(n)])


def _attention(query: Any, key: Any, value: Any, mask: Any = None, dropout: Any = None) -> Any:
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    """The Annotated Transformer's attention, as published."""

    def __init__(self, h: int, d_model: int, dropout: float = 0.1) -> None:
        super().__init__()
        assert d_model % h == 0
        self.d_k = d_model // h
        self.h = h
        self.linears = _clones(nn.Linear(d_model, d_model), 4)
        self.attn = None
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query: Any, key: Any, value: Any, mask: Any = None) -> Any:
        if mask is not None:
            mask = mask.unsqueeze(1)
        nbatches = query.size(0)
        query, key, value = [
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value))
        ]
        x, self.attn = _attention(query, key, value, mask=mask, dropout=self.dropout)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        del query
        del key
        del value
        return self.linears[-1](x)


@pytest.mark.parametrize("heads", [8, 1])
def test_annotated_transformer_found_by_tracing(heads: int) -> None:
    with torch.device("meta"):
        model = MultiHeadedAttention(heads, 512)
        x = torch.empty(2, 8, 512)
    report = mhainspect.inspect(model, example_inputs=(x, x, x))
    (block,) = report.blocks
    assert block.matcher == "decomposed"
    assert block.name == "MultiHeadedAttention"
    assert (block.num_heads, block.num_kv_heads, block.d_model, block.d_k, block.d_v) == (heads, heads, 512,
                                                                                         512 // heads, 512 // heads)
    assert block.params.total == report.model.total_params == 1_050_624
    assert block.kind == "self"
    assert block.scale == pytest.approx(1 / math.sqrt(512 // heads))
    # h and d_k come out of the view(nbatches, -1, h, d_k): batch and sequence stay symbols.
    reshapes = [e.detail for e in block.evidence if e.source == "reshape"]
    assert len(reshapes) == 3 and all(d.endswith(f", {heads}, {512 // heads}]") for d in reshapes)
    assert [p.weight for p in block.projections] == [f"linears.{i}.weight" for i in range(4)]


class _GroupedQueryAttention(nn.Module):
    """GQA the way reference code writes it: K/V heads widened with repeat_interleave (Meta's Llama) or repeat."""

    def __init__(self, d_model: int, heads: int, kv_heads: int, widen: str) -> None:
        super().__init__()
        self.h, self.kv, self.hd, self.widen = heads, kv_heads, d_model // heads, widen
        self.q = nn.Linear(d_model, heads * self.hd, bias=False)
        self.k = nn.Linear(d_model, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(d_model, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(heads * self.hd, d_model, bias=False)

    def forward(self, x: Any) -> Any:
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.h, self.hd).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv, self.hd).transpose(1, 2)
        rep = self.h // self.kv
        if self.widen == "repeat_interleave":
            k, v = torch.repeat_interleave(k, rep, dim=1), v.repeat_interleave(rep, dim=1)
        else:
            k, v = k.repeat(1, rep, 1, 1), v.repeat(1, rep, 1, 1)
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.hd), dim=-1)
        return self.o((p @ v).transpose(1, 2).reshape(b, s, -1))


@pytest.mark.parametrize("widen", ["repeat_interleave", "repeat"])
def test_grouped_query_attention_widened_in_module_code(widen: str) -> None:
    model = _GroupedQueryAttention(64, 8, 2, widen)
    report = mhainspect.inspect(model, (torch.zeros(2, 5, 64),))
    (block,) = report.blocks
    assert (block.num_heads, block.num_kv_heads, block.d_k, block.d_model) == (8, 2, 8, 64)
    assert block.params.total == report.model.total_params == sum(p.numel() for p in model.parameters()) == 10_240


def test_annotated_transformer_with_mask_and_without_inputs() -> None:
    """Nested in a model with a mask input; and, without example inputs, traced on made-up ones."""
    model = MultiHeadedAttention(4, 64)
    x, mask = torch.zeros(2, 8, 64), torch.ones(2, 1, 8)
    (block,) = mhainspect.inspect(model, (x, x, x, mask)).blocks
    assert (block.num_heads, block.d_k) == (4, 16)
    auto = mhainspect.inspect(model)
    assert [(b.num_heads, b.d_k) for b in auto.blocks] == [(4, 16)]
    assert any("made-up inputs" in w for w in auto.warnings)


class _PackedSDPA(nn.Module):
    def __init__(self, d: int = 64, h: int = 4) -> None:
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: Any) -> Any:
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.out(o.transpose(1, 2).reshape(b, n, d))


class _Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 64)
        self.custom = MultiHeadedAttention(4, 64)
        self.packed = _PackedSDPA()
        self.mha = nn.MultiheadAttention(64, 8, batch_first=True)

    def forward(self, ids: Any) -> Any:
        x = self.emb(ids)
        x = x + self.custom(x, x, x)
        x = x + self.packed(x)
        return self.mha(x, x, x)[0]


def test_known_modules_first_tracing_for_the_rest() -> None:
    report = mhainspect.inspect(_Mixed())
    by_name = {b.name: b for b in report.blocks}
    assert set(by_name) == {"mha", "custom", "packed"}
    assert by_name["mha"].matcher == "module"
    assert by_name["custom"].matcher == "decomposed" and by_name["packed"].matcher == "fused:Attention"
    assert [(by_name[n].num_heads, by_name[n].d_k) for n in ("mha", "custom", "packed")] == [(8, 8), (4, 16), (4, 16)]
    assert report.model.attention_params == 3 * (4 * 64 * 64 + 4 * 64)
    assert report.model.total_params == 100 * 64 + 3 * (4 * 64 * 64 + 4 * 64)
    # Never traced: the custom block goes unseen; the packed one is found by its names, heads unknown.
    never = mhainspect.inspect(_Mixed(), trace=False)
    assert [(b.name, b.num_heads) for b in never.blocks] == [("mha", 8), ("packed", None)]
    assert [f.code for f in never.flags if f.block == "packed"] == ["MHA004"]


def test_torch_fx_fallback() -> None:
    from mhainspect.frontends.torch.fx import trace_module
    from mhainspect.pipeline import audit_graph

    graph = trace_module(_PackedSDPA(), (torch.zeros(2, 8, 64),), method="fx")
    (block,) = audit_graph(graph).blocks
    assert (block.num_heads, block.d_k, block.params.total) == (4, 16, 4 * 64 * 64 + 4 * 64)


# ----------------------------------------------------------------------------- checkpoints


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("container", ["torch_save", "raw_pickle"])
def test_malicious_pickle_refused_and_never_runs(container: str, tmp_path: Path) -> None:
    marker = tmp_path / "payload_ran"
    path = tmp_path / "model.pt"
    payload = {"w": torch.zeros(2), "x": _Evil(marker)}
    if container == "torch_save":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload))
    assert not marker.exists()
    with pytest.raises(InputError, match="refused"):
        mhainspect.inspect(path)
    assert not marker.exists()
    if container == "torch_save":
        proc = _cli(str(path))
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    else:
        result = _run_in_process(str(path))
        code, out, err = result.exit_code, result.stdout, result.stderr
    assert code == 2 and out == ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("mhainspect: error:") and "refused" in lines[0]
    assert not marker.exists()


def test_state_dict_without_config(tmp_path: Path) -> None:
    mha = nn.MultiheadAttention(64, 8)
    path = tmp_path / "mha.pth"
    torch.save({"state_dict": mha.state_dict(), "epoch": 3}, path)
    report = mhainspect.inspect(path)
    (block,) = report.blocks
    assert report.model.format == "pytorch" and report.model.total_params == 4 * (64 * 64 + 64)
    assert block.num_heads is None and block.d_model == 64 and block.params.total == 4 * (64 * 64 + 64)
    assert [f.code for f in report.flags] == ["MHA004"]
    assert "config" in (block.unknown_reason or "")


def test_safetensors_header_only_keras_kernels(tmp_path: Path) -> None:
    """3-D kernels give the heads; data offsets beyond the file prove tensor bytes are never read."""
    shapes = {"mha.query.kernel": [32, 4, 16], "mha.query.bias": [4, 16], "mha.key.kernel": [32, 4, 16],
              "mha.key.bias": [4, 16], "mha.value.kernel": [32, 4, 16], "mha.value.bias": [4, 16],
              "mha.attention_output.kernel": [4, 16, 32], "mha.attention_output.bias": [32]}
    header: dict[str, Any] = {}
    offset = 0
    for name, shape in shapes.items():
        n = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path = tmp_path / "keras.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)  # header only: no tensor bytes at all
    report = mhainspect.inspect(path)
    (block,) = report.blocks
    assert (block.num_heads, block.d_model, block.d_k, block.d_v) == (4, 32, 16, 16)
    assert block.params.total == report.model.total_params == 8416
    assert [f.code for f in report.flags] == ["MHA001"]

    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(InputError, match="header length"):
        mhainspect.inspect(bad)


def test_sharded_folder_with_index(tmp_path: Path) -> None:
    transformers = _quiet_transformers()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=16, intermediate_size=64)
    model = transformers.LlamaForCausalLM(cfg)
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    report = mhainspect.inspect(tmp_path)
    module_report = mhainspect.inspect(model)
    assert [layout(b) for b in report.blocks] == [layout(b) for b in module_report.blocks]
    assert {(b.num_heads, b.num_kv_heads, b.d_k) for b in report.blocks} == {(4, 2, 16)}
    assert report.model.total_params == module_report.model.total_params
    assert {"MHA001", "MHA005"} <= {f.code for f in report.flags}


# ----------------------------------------------------------------------------- sources and CLI


def test_classify_and_factory_args(tmp_path: Path) -> None:
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    (tmp_path / "hf" / "model.safetensors").write_bytes(b"")
    assert classify(str(tmp_path / "hf")).kind == "checkpoint"
    assert classify("m.onnx").kind == "onnx"
    assert classify("w.safetensors").kind == "checkpoint" and classify("w.bin").kind == "checkpoint"
    assert classify("pkg.models:build").kind == "factory"
    assert classify("path/to/file.py:make").attr == "make"
    assert parse_factory_args(["h=8", "name=base", "dims=(1, 2)", "flag=True"]) == {
        "h": 8, "name": "base", "dims": (1, 2), "flag": True}
    with pytest.raises(InputError):
        parse_factory_args(["novalue"])


_FACTORY_HEADER = """import copy
import math
from typing import Any

import torch
from torch import nn

"""
_FACTORY = '''

def build(h=8, d_model=64):
    x = torch.zeros(2, 8, d_model)
    return MultiHeadedAttention(h, d_model), (x, x, x)

def mha(embed_dim=64, num_heads=8):
    return torch.nn.MultiheadAttention(embed_dim, num_heads)

def broken():
    raise RuntimeError("no weights here")
'''


def _write_factory(path: Path) -> None:
    """A user's file: the Annotated Transformer's attention (this module's copy) plus factories."""
    import inspect as pyinspect

    parts = [pyinspect.getsource(obj) for obj in (_clones, _attention, MultiHeadedAttention)]
    path.write_text(_FACTORY_HEADER + "\n\n".join(parts) + _FACTORY)


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MHAINSPECT_DEBUG", "FORCE_COLOR")}
    return subprocess.run([sys.executable, "-m", "mhainspect", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_cli_factory_spec(tmp_path: Path, schema_validator: Draft202012Validator) -> None:
    factory = tmp_path / "factory.py"
    _write_factory(factory)
    proc = _cli(f"{factory}:build", "--arg", "h=2", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    doc = json.loads(proc.stdout)
    assert not list(schema_validator.iter_errors(doc))
    assert [(b["num_heads"], b["d_k"]) for b in doc["blocks"]] == [(2, 32)]
    assert doc["model"]["format"] == "torch"

    result = _run_in_process(f"{factory}:mha", "--arg", "num_heads=16", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert [b["num_heads"] for b in json.loads(result.stdout)["blocks"]] == [16]

    for spec in (f"{factory}:broken", f"{factory}:missing", "no_such_pkg_xyz.models:build"):
        result = _run_in_process(spec)
        assert result.exit_code == 2 and result.stdout == ""
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("mhainspect: error:"), result.stderr


def _run_in_process(*args: str) -> Any:
    from typer.testing import CliRunner

    from mhainspect.cli.app import app

    result = CliRunner().invoke(app, ["inspect", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def test_without_torch(tmp_path: Path) -> None:
    """The ONNX path and a torch.save archive never import torch; a module factory without torch says how
    to install it."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "from mhainspect.cli.app import main\n"
            "main(sys.argv[1:])\n")
    onnx_model = REPO_ROOT / "sample_models" / "standard_mha.onnx"
    ok = subprocess.run([sys.executable, "-c", code, str(onnx_model)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    pt = tmp_path / "w.pt"
    import zipfile

    with zipfile.ZipFile(pt, "w") as archive:  # a torch.save archive's layout: read without torch
        archive.writestr("w/data.pkl", b"\x80\x02}q\x00.")
        archive.writestr("w/version", b"3\n")
    proc = subprocess.run([sys.executable, "-c", code, str(pt)], capture_output=True, text=True, timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    # The archive's records are read by the restricted unpickler: an empty dict is no state dict.
    assert proc.returncode == 2 and len(lines) == 1 and "no tensors found" in lines[0], proc.stderr
    for arg in ("some.module:factory",):  # a module factory needs torch itself
        proc = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "requires PyTorch, which is not installed" in lines[0]
        # The CPU build first (PyPI's default torch wheel is the CUDA build), then the extra.
        assert lines[0].endswith('pip install torch --index-url https://download.pytorch.org/whl/cpu && '
                                 'pip install "mhainspect[torch]"')
    probe = subprocess.run([sys.executable, "-c", "import sys, mhainspect; mhainspect.inspect; "
                            "from mhainspect import pipeline; from mhainspect.frontends import dispatch; print('torch' in sys.modules)"],
                           capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip() == "False"


def test_api_rejects_other_objects() -> None:
    with pytest.raises(InputError):
        mhainspect.inspect(42)
    report: Report = mhainspect.inspect(str(REPO_ROOT / "sample_models" / "standard_mha.onnx"))
    assert report.model.format == "onnx" and report.blocks


# ----------------------------------------------------------------------------- scale read off a module


def test_esm_prescaled_query_is_not_an_unusual_scale(tmp_path: Path) -> None:
    """ESM passes ``scaling = 1.0`` to its attention function and scales the query by
    head_size ** -0.5 in forward first: the scores are scaled by 1/sqrt(d_k), as its ONNX export shows
    (was: MHA003 from the module alone)."""
    transformers = _quiet_transformers()
    from mhainspect.frontends.onnx.loader import load_onnx
    from mhainspect.pipeline import audit_graph

    config = transformers.EsmConfig(vocab_size=33, hidden_size=32, num_attention_heads=4, num_hidden_layers=1,
                                    intermediate_size=64, position_embedding_type="rotary", pad_token_id=1,
                                    attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.EsmModel(config, add_pooling_layer=False).eval()
    module = mhainspect.inspect(model, trace=False)
    path = tmp_path / "esm.onnx"
    torch.onnx.export(model, (torch.randint(4, 30, (1, 8)),), str(path), input_names=["input_ids"], dynamo=False,
                      opset_version=17)
    exported = audit_graph(load_onnx(path))
    assert [f.code for f in module.flags] == [f.code for f in exported.flags] == []
    assert module.blocks[0].scale == pytest.approx(exported.blocks[0].scale) == pytest.approx(8 ** -0.5)


def test_a_scaling_attribute_composes_with_what_forward_does_to_the_query() -> None:
    """The attribute is the factor the attention function applies; a forward that divides the query
    first composes with it, and one whose factor is a run-time value leaves the scale unknown."""

    class Attention(nn.Module):
        def __init__(self, d: int = 16, h: int = 2) -> None:
            super().__init__()
            self.num_heads, self.head_dim, self.scaling = h, d // h, 1.0
            self.q_proj, self.k_proj = nn.Linear(d, d), nn.Linear(d, d)
            self.v_proj, self.o_proj = nn.Linear(d, d), nn.Linear(d, d)

        def forward(self, x: Any) -> Any:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
            q /= math.sqrt(self.head_dim)
            return self.o_proj(torch.softmax(q @ k.transpose(-1, -2) * self.scaling, -1) @ v)

    class RunTime(Attention):
        def forward(self, x: Any) -> Any:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
            q = q * x.shape[-1] ** -0.5
            return self.o_proj(torch.softmax(q @ k.transpose(-1, -2) * self.scaling, -1) @ v)

    class Plain(Attention):  # T5's case: scaling = 1.0 really is the scale
        def forward(self, x: Any) -> Any:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
            return self.o_proj(torch.softmax(q @ k.transpose(-1, -2) * self.scaling, -1) @ v)

    found = mhainspect.inspect(Attention(), trace=False).blocks[0]
    assert found.scale_known and found.scale == pytest.approx(8 ** -0.5)
    unknown = mhainspect.inspect(RunTime(), trace=False)
    assert not unknown.blocks[0].scale_known and "MHA003" not in [f.code for f in unknown.flags]
    plain = mhainspect.inspect(Plain(), trace=False)
    assert plain.blocks[0].scale == 1.0 and "MHA003" in [f.code for f in plain.flags]
