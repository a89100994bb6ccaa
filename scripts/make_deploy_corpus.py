#!/usr/bin/env python3
"""Build the deployment conformance corpus: files made by the real deployment toolchains.

Small random-weight Hugging Face models (built from their config classes, small noise added to every
parameter so no bias is all-zero and dropped by an exporter) are saved with ``save_pretrained`` and
then passed through the tools people deploy with:

* optimum-onnx (``optimum.exporters.onnx.main_export``): without past, with past, a merged decoder
  (``optimum.onnx.merge_decoders`` of the two), and ``optimize="O2"`` (ORT transformer optimizer);
* onnxruntime-genai's model builder (fp32 and int4, CPU) from the local folder;
* ``onnxruntime.quantization``: ``quantize_dynamic``, ``quantize_static`` (QDQ, random calibration
  data), ``MatMulNBitsQuantizer`` 4-bit in QOperator and QDQ form;
* fp16 conversion (onnxconverter-common) and onnxslim.

The truth of every file is read from the torch modules (heads, kv heads, d_k, d_v, d_model and the
q/k/v/o/bias/total parameters of each attention module's own projection weights), restricted to the
blocks the file holds (an encoder file holds the encoder's blocks; a decoder-with-past file holds the
cross-attention's Q and O projections only, its K/V come in as past inputs; a block fused into
com.microsoft Attention holds the op's packed Q|K|V bias whole, zeros where the module has no bias).
Each block's ``file_notes`` say where the file differs from the module. Controls hold no attention.

This script runs in its own virtual environment (optimum-onnx pins an older transformers than the
main one): ``.venv-deploy/bin/python scripts/make_deploy_corpus.py OUTDIR [-j 2] [-k SUBSTR]``.
It writes ``OUTDIR/<toolchain>/<model>/<variant>/*.onnx`` and ``OUTDIR/truth.json``. Every step runs
in its own subprocess under a timeout; a failing step is recorded in truth.json as skipped with its
reason, and the rest goes on.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import copy
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SEED = 0
VOCAB = 128
NOISE = 0.02
STEP_TIMEOUT = 600
RESULT_MARK = "@@deploy-step@@ "

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# --------------------------------------------------------------------------------------
# Models: config, builder, truth reader
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    name: str
    config_cls: str
    model_cls: str
    config: dict[str, Any]
    truth: str  # name of a truth reader in TRUTH
    task: str  # optimum task without "-with-past"
    seq2seq: bool = False
    notes: str = ""


_LAYERS = 2

MODELS: dict[str, ModelSpec] = {m.name: m for m in (
    ModelSpec("bert", "BertConfig", "BertModel",
              dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4, num_hidden_layers=_LAYERS,
                   intermediate_size=128, max_position_embeddings=64), "bert", "feature-extraction",
              notes="BERT: 4 heads x 16, biases on q/k/v/o"),
    ModelSpec("gpt2", "GPT2Config", "GPT2LMHeadModel",
              dict(vocab_size=VOCAB, n_embd=64, n_head=4, n_layer=_LAYERS, n_positions=64, bos_token_id=1,
                   eos_token_id=2), "gpt2", "text-generation",
              notes="GPT-2: fused c_attn Conv1D [E, 3E], 4 heads x 16"),
    ModelSpec("llama", "LlamaConfig", "LlamaForCausalLM",
              dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=8, num_key_value_heads=2, head_dim=8,
                   num_hidden_layers=_LAYERS, intermediate_size=128, max_position_embeddings=64, bos_token_id=1,
                   eos_token_id=2, pad_token_id=0), "decoder", "text-generation",
              notes="Llama: GQA 8 query / 2 KV heads x 8"),
    ModelSpec("qwen2", "Qwen2Config", "Qwen2ForCausalLM",
              dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                   num_hidden_layers=_LAYERS, intermediate_size=128, max_position_embeddings=64, bos_token_id=1,
                   eos_token_id=2, tie_word_embeddings=False), "decoder", "text-generation",
              notes="Qwen2: GQA 4/2 heads x 16, q/k/v biases, o without"),
    ModelSpec("phi3", "Phi3Config", "Phi3ForCausalLM",
              dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                   num_hidden_layers=_LAYERS, intermediate_size=128, max_position_embeddings=64,
                   original_max_position_embeddings=64, bos_token_id=1, eos_token_id=2, pad_token_id=0),
              "phi3", "text-generation",
              notes="Phi-3: fused qkv_proj with 4 query / 2 KV heads x 16"),
    ModelSpec("gemma", "GemmaConfig", "GemmaForCausalLM",
              dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                   num_hidden_layers=_LAYERS, intermediate_size=128, max_position_embeddings=64, bos_token_id=1,
                   eos_token_id=2, pad_token_id=0), "decoder", "text-generation",
              notes="Gemma: multi-query (1 KV head), head_dim 32 != hidden/heads"),
    ModelSpec("t5", "T5Config", "T5ForConditionalGeneration",
              dict(vocab_size=VOCAB, d_model=64, num_heads=4, d_kv=8, d_ff=128, num_layers=_LAYERS,
                   num_decoder_layers=_LAYERS, relative_attention_num_buckets=8, decoder_start_token_id=0,
                   pad_token_id=0, eos_token_id=1), "t5", "text2text-generation", seq2seq=True,
              notes="T5: 4 heads x d_kv 8 (h*d_kv = 32 != d_model 64), no biases, unscaled"),
    ModelSpec("whisper", "WhisperConfig", "WhisperForConditionalGeneration",
              dict(vocab_size=VOCAB, d_model=64, encoder_attention_heads=4, decoder_attention_heads=4,
                   encoder_layers=_LAYERS, decoder_layers=_LAYERS, encoder_ffn_dim=128, decoder_ffn_dim=128,
                   num_mel_bins=80, max_source_positions=1500, max_target_positions=64, pad_token_id=0,
                   bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, begin_suppress_tokens=None,
                   suppress_tokens=None), "whisper", "automatic-speech-recognition", seq2seq=True,
              notes="Whisper-shaped: encoder self, decoder self + cross, k_proj without bias"),
    ModelSpec("vit", "ViTConfig", "ViTModel",
              dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=_LAYERS, intermediate_size=128,
                   image_size=32, patch_size=8, num_channels=3), "vit", "feature-extraction",
              notes="ViT: 4 heads x 16, qkv biases"),
    ModelSpec("resnet", "ResNetConfig", "ResNetModel",
              dict(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic"),
              "control", "feature-extraction", notes="control: ResNet, no attention"),
)}


def _n(t: Any) -> int:
    return 0 if t is None else int(t.numel())


def _lin(lin: Any) -> tuple[int, int]:
    b = getattr(lin, "bias", None)
    return _n(lin.weight) + _n(b), _n(b)


def _block(name: str, kind: str, part: str, h: int, kv: int, d_model: int, dk: int, dv: int,
           q: tuple[int, int], k: tuple[int, int], v: tuple[int, int], o: tuple[int, int]) -> dict[str, Any]:
    assert h % kv == 0, (h, kv)
    return {"name_hint": name, "kind": kind, "part": part, "num_heads": h, "num_kv_heads": kv, "d_model": d_model,
            "d_k": dk, "d_v": dv, "q": q[0], "k": k[0], "v": v[0], "o": o[0],
            "bias": q[1] + k[1] + v[1] + o[1], "total": q[0] + k[0] + v[0] + o[0],
            "q_bias": q[1], "k_bias": k[1], "v_bias": v[1], "o_bias": o[1], "file_notes": []}


def _qualname(root: Any, mod: Any) -> str:
    for n, m in root.named_modules():
        if m is mod:
            return n
    raise KeyError(mod)


def _rows(lin: Any, start: int, stop: int) -> tuple[int, int]:
    w, b = lin.weight, lin.bias
    nb = _n(b[start:stop]) if b is not None else 0
    return _n(w[start:stop]) + nb, nb


def truth_bert(model: Any) -> list[dict[str, Any]]:
    out = []
    cfg = model.config
    for layer in model.encoder.layer:
        sa, so = layer.attention.self, layer.attention.output.dense
        h, dh = sa.num_attention_heads, sa.attention_head_size
        assert sa.query.weight.shape[0] == h * dh
        out.append(_block(_qualname(model, layer.attention), "self", "encoder", h, h, cfg.hidden_size, dh, dh,
                          _lin(sa.query), _lin(sa.key), _lin(sa.value), _lin(so)))
    return out


def truth_vit(model: Any) -> list[dict[str, Any]]:
    out = []
    cfg = model.config
    for layer in model.encoder.layer:
        sa, so = layer.attention.attention, layer.attention.output.dense
        h, dh = sa.num_attention_heads, sa.attention_head_size
        out.append(_block(_qualname(model, layer.attention), "self", "encoder", h, h, cfg.hidden_size, dh, dh,
                          _lin(sa.query), _lin(sa.key), _lin(sa.value), _lin(so)))
    return out


def truth_gpt2(model: Any) -> list[dict[str, Any]]:
    out = []
    for blk in model.transformer.h:
        a = blk.attn
        h, dh, e = a.num_heads, a.head_dim, a.embed_dim
        w, b = a.c_attn.weight, a.c_attn.bias  # Conv1D: [in, 3*out]
        assert tuple(w.shape) == (e, 3 * e)
        roles = [(_n(w[:, i * e:(i + 1) * e]) + _n(b[i * e:(i + 1) * e]), _n(b[i * e:(i + 1) * e])) for i in range(3)]
        out.append(_block(_qualname(model, a), "self", "decoder", h, h, e, dh, dh, roles[0], roles[1], roles[2],
                          _lin(a.c_proj)))
    return out


def truth_decoder(model: Any) -> list[dict[str, Any]]:
    cfg = model.config
    out = []
    for layer in model.model.layers:
        a = layer.self_attn
        dh = a.head_dim
        h, kv = a.q_proj.weight.shape[0] // dh, a.k_proj.weight.shape[0] // dh
        assert h == cfg.num_attention_heads and kv == cfg.num_key_value_heads
        out.append(_block(_qualname(model, a), "self", "decoder", h, kv, cfg.hidden_size, dh, dh, _lin(a.q_proj),
                          _lin(a.k_proj), _lin(a.v_proj), _lin(a.o_proj)))
    return out


def truth_phi3(model: Any) -> list[dict[str, Any]]:
    cfg = model.config
    out = []
    for layer in model.model.layers:
        a = layer.self_attn
        h, kv, dh = cfg.num_attention_heads, cfg.num_key_value_heads, a.head_dim
        f = a.qkv_proj
        assert f.weight.shape[0] == (h + 2 * kv) * dh
        q, k, v = _rows(f, 0, h * dh), _rows(f, h * dh, (h + kv) * dh), _rows(f, (h + kv) * dh, (h + 2 * kv) * dh)
        out.append(_block(_qualname(model, a), "self", "decoder", h, kv, cfg.hidden_size, dh, dh, q, k, v,
                          _lin(a.o_proj)))
    return out


def _t5(model: Any, a: Any, kind: str, part: str) -> dict[str, Any]:
    h, dkv = a.n_heads, a.key_value_proj_dim
    return _block(_qualname(model, a), kind, part, h, h, a.d_model, dkv, dkv, _lin(a.q), _lin(a.k), _lin(a.v),
                  _lin(a.o))


def truth_t5(model: Any) -> list[dict[str, Any]]:
    out = [_t5(model, b.layer[0].SelfAttention, "self", "encoder") for b in model.encoder.block]
    for b in model.decoder.block:
        out.append(_t5(model, b.layer[0].SelfAttention, "self", "decoder"))
        out.append(_t5(model, b.layer[1].EncDecAttention, "cross", "decoder"))
    return out


def _whisper(model: Any, a: Any, kind: str, part: str) -> dict[str, Any]:
    h, dh = a.num_heads, a.head_dim
    return _block(_qualname(model, a), kind, part, h, h, a.embed_dim, dh, dh, _lin(a.q_proj), _lin(a.k_proj),
                  _lin(a.v_proj), _lin(a.out_proj))


def truth_whisper(model: Any) -> list[dict[str, Any]]:
    out = [_whisper(model, layer.self_attn, "self", "encoder") for layer in model.model.encoder.layers]
    for layer in model.model.decoder.layers:
        out.append(_whisper(model, layer.self_attn, "self", "decoder"))
        out.append(_whisper(model, layer.encoder_attn, "cross", "decoder"))
    return out


TRUTH: dict[str, Callable[[Any], list[dict[str, Any]]]] = {
    "bert": truth_bert, "vit": truth_vit, "gpt2": truth_gpt2, "decoder": truth_decoder, "phi3": truth_phi3,
    "t5": truth_t5, "whisper": truth_whisper, "control": lambda model: [],
}


def blocks_for(truth: list[dict[str, Any]], part: str) -> list[dict[str, Any]]:
    """The blocks a file holds.

    part: "all"; "encoder"; "decoder" (decoder self + cross, every projection); "decoder-past" (a
    decoder that takes the cross-attention K/V as past inputs: its cross blocks hold Q and O only).
    """
    truth = copy.deepcopy(truth)  # per file: its notes and adjustments are its own
    if part == "all":
        return truth
    if part == "encoder":
        return [b for b in truth if b["part"] == "encoder"]
    out = []
    for b in truth:
        if b["part"] != "decoder":
            continue
        if part == "decoder-past" and b["kind"] == "cross":
            # K/V of cross-attention were computed once from the encoder output: not in this file.
            b.update(k=0, v=0, bias=b["q_bias"] + b["o_bias"], total=b["q"] + b["o"], k_bias=0, v_bias=0,
                     file_notes=["cross-attention K/V arrive as past inputs: their projections are not in this file"])
        out.append(b)
    return out


# com.microsoft ops taking one packed [q | k | v] bias: op -> its input position.
PACKED_BIAS_OPS = {"Attention": 2, "QAttention": 2, "MultiHeadAttention": 3}


def hold_packed_biases(path: Path, blocks: list[dict[str, Any]]) -> None:
    """What the file holds when onnxruntime's optimizer fused a block into com.microsoft Attention
    (or MultiHeadAttention with its bias input, as use_multi_head_attention writes self- and
    cross-attention).

    The op takes one packed Q|K|V bias: a role whose module has no bias (Whisper's k_proj) gets a
    slice of zeros in the file. Those are parameters of the file (the tool reads no tensor values),
    so the truth counts them. Applied to the blocks of one kind when the fused ops of one type and
    the file's blocks of that kind pair one to one; the block notes say so.
    """
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    fused: dict[str, int] = {}
    for n in graph.node:
        pos = PACKED_BIAS_OPS.get(n.op_type) if n.domain == "com.microsoft" else None
        if pos is not None and len(n.input) > pos and n.input[pos]:
            fused[n.op_type] = fused.get(n.op_type, 0) + 1
    done: set[str] = set()
    for op, count in fused.items():
        # Attention fuses self-attention; MultiHeadAttention self- and/or cross-attention.
        for kinds in ({"self", "cross"}, {"cross"}, {"self"}) if op == "MultiHeadAttention" else ({"self"},):
            chosen = [b for b in blocks if b["kind"] in kinds]
            if kinds & done or len(chosen) != count:
                continue
            done |= kinds
            for b in chosen:
                _hold_packed_bias(b, op)
            break


def _hold_packed_bias(b: dict[str, Any], op: str) -> None:
    widths = {"q": b["num_heads"] * b["d_k"], "k": b["num_kv_heads"] * b["d_k"], "v": b["num_kv_heads"] * b["d_v"]}
    for role, width in widths.items():
        if b[f"{role}_bias"] == 0 and b[role] > 0:
            b[role] += width
            b[f"{role}_bias"] = width
            b["bias"] += width
            b["total"] += width
            b["file_notes"].append(f"{role} bias: {width} zeros in the fused {op}'s packed bias")


# --------------------------------------------------------------------------------------
# Step: save the random-weight models (one process, seeds fixed)
# --------------------------------------------------------------------------------------


def _tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<pad>", "<s>", "</s>", "<unk>"] + [f"t{i}" for i in range(4, VOCAB)])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")
    fast.save_pretrained(folder)


def save_models(work: Path, names: list[str]) -> dict[str, Any]:
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    out: dict[str, Any] = {}
    for name in names:
        spec = MODELS[name]
        folder = work / "hf" / name
        try:
            torch.manual_seed(SEED)
            config = getattr(transformers, spec.config_cls)(**spec.config)
            model = getattr(transformers, spec.model_cls)(config).eval()
            g = torch.Generator().manual_seed(SEED + 1)
            with torch.no_grad():  # exporters drop all-zero biases: no parameter may stay zero
                for p in model.parameters():
                    p.add_(torch.randn(p.shape, generator=g) * NOISE)
            blocks = TRUTH[spec.truth](model)
            if folder.exists():
                shutil.rmtree(folder)
            model.save_pretrained(folder)
            if spec.truth not in ("vit", "control"):  # text models: exporters and the builder want one
                _tokenizer(folder)
            if name == "whisper":
                from transformers import WhisperFeatureExtractor

                WhisperFeatureExtractor(feature_size=80).save_pretrained(folder)
            out[name] = {"blocks": blocks, "folder": str(folder), "error": None,
                         "params": sum(p.numel() for p in model.parameters())}
        except Exception as exc:  # recorded, the other models go on
            out[name] = {"blocks": [], "folder": str(folder), "error": _reason(exc)}
    return out


def _reason(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:400]


# --------------------------------------------------------------------------------------
# Steps: each makes files, returns [(relative path, part)] or raises
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    toolchain: str
    model: str
    variant: str
    tool: str  # what was run, for a reader
    needs: tuple[str, ...] = ()  # step ids this one reads from
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.toolchain}/{self.model}/{self.variant}"


def _optimum_parts(folder: Path) -> list[tuple[str, str]]:
    """(file, part) for every ONNX file optimum wrote: which of the model's blocks it holds."""
    files: list[tuple[str, str]] = []
    for f in sorted(folder.glob("*.onnx")):
        stem = f.stem
        if stem.startswith("encoder"):
            part = "encoder"
        elif stem.startswith("decoder_with_past"):
            part = "decoder-past"
        elif stem.startswith("decoder"):
            part = "decoder"
        else:
            part = "all"
        files.append((f.name, part))
    return files


def run_optimum(step: Step, out: Path, work: Path) -> list[tuple[str, str]]:
    from optimum.exporters.onnx import main_export

    spec = MODELS[step.model]
    dest = out / step.id
    if dest.exists():
        shutil.rmtree(dest)
    task = spec.task + ("-with-past" if step.extra.get("past") else "")
    kwargs: dict[str, Any] = {}
    if step.extra.get("optimize"):
        kwargs["optimize"] = step.extra["optimize"]
    main_export(str(work / "hf" / step.model), output=str(dest), task=task, opset=step.extra.get("opset"),
                do_validation=False, no_post_process=bool(step.extra.get("no_post_process")),
                local_files_only=True, **kwargs)
    return [(f"{step.id}/{name}", part) for name, part in _optimum_parts(dest)]


def run_merge(step: Step, out: Path, work: Path) -> list[tuple[str, str]]:
    from optimum.onnx import merge_decoders

    past = out / step.needs[0]
    dest = out / step.id
    dest.mkdir(parents=True, exist_ok=True)
    spec = MODELS[step.model]
    if spec.seq2seq:
        no_past_file, past_file, part = past / "decoder_model.onnx", past / "decoder_with_past_model.onnx", "decoder"
    else:
        # optimum 2 writes one decoder-only model taking past inputs; the no-past half of a merged
        # decoder is the legacy "decoder_model": no past inputs, present outputs.
        no_past_file, past_file, part = _decoder_with_present(step.model, work / "decoder-present" / step.model, work), \
            past / "model.onnx", "all"
    merge_decoders(no_past_file, past_file, save_path=dest / "decoder_model_merged.onnx", strict=False)
    return [(f"{step.id}/decoder_model_merged.onnx", part)]


def _decoder_with_present(model: str, dest: Path, work: Path) -> Path:
    from optimum.exporters.onnx import main_export
    from optimum.exporters.tasks import TasksManager
    from transformers import AutoConfig

    folder = work / "hf" / model
    config = AutoConfig.from_pretrained(folder)
    task = MODELS[model].task + "-with-past"
    ctor = TasksManager.get_exporter_config_constructor("onnx", model_type=config.model_type, task=task,
                                                        library_name="transformers")
    onnx_config = ctor(config, use_past=True, use_past_in_inputs=False)
    main_export(str(folder), output=str(dest), task=task, do_validation=False, local_files_only=True,
                custom_onnx_configs={"model": onnx_config})
    return dest / "model.onnx"


def _calibration_inputs(path: Path, count: int = 4) -> list[dict[str, Any]]:
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(SEED)
    feeds = []
    for _ in range(count):
        feed: dict[str, Any] = {}
        for i in sess.get_inputs():
            shape = [d if isinstance(d, int) else (1 if n == 0 else 8) for n, d in enumerate(i.shape)]
            if "pixel" in i.name:
                shape = [1, 3, 32, 32]
            if "input_features" in i.name:
                shape = [1, 80, 3000]
            if i.type == "tensor(int64)":
                if "position" in i.name:
                    feed[i.name] = np.arange(shape[-1], dtype=np.int64).reshape([1] * (len(shape) - 1) + [-1])
                    feed[i.name] = np.broadcast_to(feed[i.name], shape).copy()
                elif "mask" in i.name or "token_type" in i.name:
                    feed[i.name] = (np.ones if "mask" in i.name else np.zeros)(shape, dtype=np.int64)
                else:
                    feed[i.name] = rng.integers(4, VOCAB, size=shape, dtype=np.int64)
            else:
                feed[i.name] = rng.standard_normal(shape).astype(np.float32)
        feeds.append(feed)
    return feeds


def _with_symbolic_shapes(src: Path, folder: Path) -> Path:
    """onnxruntime's symbolic shape inference, the pre-processing its quantizers need on graphs with
    com.microsoft ops (ONNX shape inference leaves their outputs untyped)."""
    import onnx
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    folder.mkdir(parents=True, exist_ok=True)
    model = SymbolicShapeInference.infer_shapes(onnx.load(str(src)), auto_merge=True, guess_output_rank=True)
    onnx.save(model, str(folder / src.name))
    return folder / src.name


def _source_files(step: Step, out: Path) -> list[tuple[Path, str]]:
    """The (file, part) pairs of the step this one derives from (truth.json of that step)."""
    return [(out / rel, part) for rel, part in step.extra["sources"]]


def run_derived(step: Step, out: Path, work: Path) -> list[tuple[str, str]]:
    import onnx

    dest = out / step.id
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    made = []
    for src, part in _source_files(step, out):
        target = dest / src.name
        how, _, base = step.variant.partition("@")
        if base == "O2" and how != "matmulnbits-qoperator":
            src = _with_symbolic_shapes(src, work / "shapes" / step.id)
        if how == "dynamic-int8":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantize_dynamic(str(src), str(target), weight_type=QuantType.QInt8)
        elif how in ("static-qdq-int8", "static-qoperator-int8"):
            from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

            class Reader(CalibrationDataReader):
                def __init__(self, feeds: list[dict[str, Any]]) -> None:
                    self.it = iter(feeds)

                def get_next(self) -> dict[str, Any] | None:
                    return next(self.it, None)

            qoperator = how == "static-qoperator-int8"  # QLinearMatMul / QLinearAdd / QLinearSoftmax ...
            quantize_static(str(src), str(target), Reader(_calibration_inputs(src)),
                            quant_format=QuantFormat.QOperator if qoperator else QuantFormat.QDQ,
                            activation_type=QuantType.QUInt8 if qoperator else QuantType.QInt8,
                            weight_type=QuantType.QInt8, per_channel=qoperator)
        elif how in ("matmulnbits-qoperator", "matmulnbits-qdq"):
            from onnxruntime.quantization import QuantFormat
            from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

            fmt = QuantFormat.QOperator if how == "matmulnbits-qoperator" else QuantFormat.QDQ
            q = MatMulNBitsQuantizer(onnx.load(str(src)), bits=4, block_size=32, is_symmetric=True, quant_format=fmt)
            q.process()
            onnx.save(q.model.model, str(target))
        elif how == "ort-optimizer-mha":
            from onnxruntime.transformers.fusion_options import FusionOptions
            from onnxruntime.transformers.optimizer import optimize_model

            cfg = MODELS[step.model].config
            model_type = ORT_MODEL_TYPES[step.model]
            options = FusionOptions(model_type)
            options.use_multi_head_attention = True  # MultiHeadAttention with the Q/K/V biases as its input
            heads = cfg.get("num_attention_heads") or cfg.get("num_heads") or cfg["encoder_attention_heads"]
            optimize_model(str(src), model_type=model_type, num_heads=heads,
                           hidden_size=cfg.get("hidden_size") or cfg["d_model"], opt_level=1,
                           optimization_options=options).save_model_to_file(str(target))
        elif how == "fp16":
            from onnxconverter_common import float16

            m = float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
            onnx.save(m, str(target))
        elif how == "onnxslim":
            import onnxslim

            m = onnxslim.slim(onnx.load(str(src)))
            onnx.save(m, str(target))
        else:
            raise ValueError(how)
        made.append((str(target.relative_to(out)), part))
    return made


def run_genai(step: Step, out: Path, work: Path) -> list[tuple[str, str]]:
    from onnxruntime_genai.models import builder

    dest = out / step.id
    if dest.exists():
        shutil.rmtree(dest)
    precision, _, form = step.variant.partition("-")
    options = ["hf_token=false"] + (["int4_block_size=32"] if precision == "int4" else [])
    if form == "qdq":  # DequantizeLinear + MatMul instead of MatMulNBits
        options.append("use_qdq=true")
    builder.create_model(None, str(work / "hf" / step.model), str(dest), precision, "cpu",
                         str(work / "genai-cache" / step.model / step.variant),
                         **builder.parse_extra_options(options, "cpu"))
    if not (dest / "model.onnx").exists():
        raise RuntimeError("the builder wrote no model.onnx")
    for junk in dest.glob("*"):  # keep the graph and its weights only
        if junk.suffix not in (".onnx", ".data") and not junk.name.endswith(".onnx.data"):
            junk.unlink() if junk.is_file() else shutil.rmtree(junk)
    return [(f"{step.id}/model.onnx", "all")]


def run_control(step: Step, out: Path, work: Path) -> list[tuple[str, str]]:
    """An MLP ending in a softmax (no attention), exported by torch.onnx."""
    import torch

    torch.manual_seed(SEED)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64),
                                torch.nn.Softmax(-1)).eval()
    dest = out / step.id
    dest.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(model, (torch.randn(2, 8, 64),), str(dest / "model.onnx"), input_names=["x"],
                      dynamic_axes={"x": {0: "batch", 1: "seq"}}, opset_version=17, dynamo=False)
    return [(f"{step.id}/model.onnx", "all")]


RUNNERS: dict[str, Callable[[Step, Path, Path], list[tuple[str, str]]]] = {
    "optimum": run_optimum, "optimum-merge": run_merge, "genai": run_genai, "control": run_control,
}


# --------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------

OPTIMUM_MODELS = ("bert", "gpt2", "llama", "qwen2", "phi3", "gemma", "t5", "whisper", "vit", "resnet")
PAST_MODELS = ("gpt2", "llama", "t5", "whisper")
O2_MODELS = ("bert", "gpt2", "llama", "t5", "whisper", "vit")
ORT_MODEL_TYPES = {"bert": "bert", "whisper": "bart", "t5": "t5", "gpt2": "gpt2", "vit": "vit"}  # optimizer model_type
GENAI_MODELS = ("llama", "qwen2", "phi3", "gemma")
# derived variant -> (toolchain, inputs): an input is a model (its optimum no-past export), or
# "model:VARIANT" (its optimum with-past or O2 export: quantizing an ORT-optimized graph gives QAttention),
# or the torch-exported control "mlp-softmax".
DERIVED: dict[str, tuple[str, tuple[str, ...]]] = {
    "dynamic-int8": ("ort-quantization", ("bert", "gpt2", "llama", "qwen2", "phi3", "t5", "whisper", "vit",
                                          "llama:with-past", "bert:O2", "gpt2:O2", "resnet", "mlp-softmax")),
    "static-qdq-int8": ("ort-quantization", ("bert", "gpt2", "llama", "phi3", "t5", "whisper", "vit", "bert:O2",
                                             "resnet", "mlp-softmax")),
    "static-qoperator-int8": ("ort-quantization", ("bert", "gpt2", "llama", "t5", "whisper", "vit", "whisper:O2")),
    "ort-optimizer-mha": ("ort-transformers-optimizer", ("bert", "whisper", "whisper:with-past")),
    "matmulnbits-qoperator": ("ort-quantization", ("bert", "gpt2", "llama", "phi3", "t5", "vit", "llama:with-past",
                                                   "bert:O2", "mlp-softmax")),
    "matmulnbits-qdq": ("ort-quantization", ("bert", "gpt2", "llama", "phi3", "mlp-softmax")),
    "fp16": ("onnxconverter-common", ("bert", "gpt2", "llama", "t5", "whisper", "vit", "resnet", "mlp-softmax")),
    "onnxslim": ("onnxslim", ("bert", "gpt2", "llama", "t5", "whisper", "vit", "mlp-softmax")),
}


DERIVED_TOOLS = {
    "dynamic-int8": "onnxruntime.quantization.quantize_dynamic(weight_type=QInt8)",
    "static-qdq-int8": "onnxruntime.quantization.quantize_static(QDQ, QInt8, 4 random calibration inputs)",
    "static-qoperator-int8": "onnxruntime.quantization.quantize_static(QOperator, QUInt8 activations, per-channel QInt8 "
                             "weights, 4 random calibration inputs)",
    "ort-optimizer-mha": "onnxruntime.transformers.optimizer.optimize_model(opt_level=1, use_multi_head_attention)",
    "matmulnbits-qoperator": "MatMulNBitsQuantizer(bits=4, block_size=32, symmetric, QOperator)",
    "matmulnbits-qdq": "MatMulNBitsQuantizer(bits=4, block_size=32, symmetric, QDQ)",
    "fp16": "onnxconverter_common.float16.convert_float_to_float16(keep_io_types=True)",
    "onnxslim": "onnxslim.slim",
}


def _derived_input(name: str) -> tuple[str, str, str]:
    """(model, variant suffix, step id of the input) for a DERIVED input name."""
    if name == "mlp-softmax":
        return name, "", "torch-onnx/mlp-softmax/control"
    model, _, base = name.partition(":")
    return model, f"@{base}" if base else "", f"optimum/{model}/{base or 'no-past'}"


def plan() -> list[Step]:
    steps: list[Step] = [Step("torch-onnx", "mlp-softmax", "control", "torch.onnx.export(dynamo=False, opset 17)")]
    for m in OPTIMUM_MODELS:
        steps.append(Step("optimum", m, "no-past", f"main_export(task={MODELS[m].task})"))
    for m in PAST_MODELS:
        # no_post_process: seq2seq decoders stay two files (the merge is its own step below)
        steps.append(Step("optimum", m, "with-past", f"main_export(task={MODELS[m].task}-with-past)",
                          extra={"past": True, "no_post_process": True}))
        steps.append(Step("optimum-merge", m, "merged", "optimum.onnx.merge_decoders(no-past, with-past)",
                          needs=(f"optimum/{m}/with-past",)))
    for m in O2_MODELS:
        steps.append(Step("optimum", m, "O2", f"main_export(task={MODELS[m].task}, optimize=O2)",
                          extra={"optimize": "O2"}))
    for m in GENAI_MODELS:
        for p in ("fp32", "int4", "int4-qdq"):
            steps.append(Step("genai", m, p, f"onnxruntime_genai.models.builder -p {p.split('-')[0]} -e cpu"
                              + (" --extra_options use_qdq=true" if p.endswith("qdq") else "")))
    for variant, (toolchain, inputs) in DERIVED.items():
        for name in inputs:
            model, suffix, base = _derived_input(name)
            shapes = " after symbolic shape inference" if suffix == "@O2" and variant != "matmulnbits-qoperator" else ""
            steps.append(Step(toolchain, model, variant + suffix, f"{DERIVED_TOOLS[variant]} on {base}{shapes}",
                              needs=(base,)))
    return steps


def _runner(step: Step) -> Callable[[Step, Path, Path], list[tuple[str, str]]]:
    if step.toolchain in RUNNERS:
        return RUNNERS[step.toolchain]
    if step.toolchain == "torch-onnx":
        return run_control
    return run_derived


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------


def worker(step_id: str, out: Path, work: Path, sources: list[list[str]]) -> None:
    """Run one step in this (sub)process; print one JSON line with the files it made."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    step = {s.id: s for s in plan()}[step_id]
    if sources:
        step = Step(step.toolchain, step.model, step.variant, step.tool, step.needs,
                    {**step.extra, "sources": sources})
    try:
        files = _runner(step)(step, out, work)
        result: dict[str, Any] = {"files": files, "error": None}
    except BaseException as exc:  # noqa: BLE001 - recorded, never aborts the corpus
        result = {"files": [], "error": _reason(exc), "trace": traceback.format_exc()[-2000:]}
    print(RESULT_MARK + json.dumps(result), flush=True)


def _spawn(step: Step, out: Path, work: Path, sources: list[list[str]]) -> dict[str, Any]:
    start = time.monotonic()
    cmd = [sys.executable, __file__, str(out), "--work", str(work), "--worker", step.id,
           "--sources", json.dumps(sources)]
    try:
        # one thread per step: the steps themselves run in parallel (-j)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=STEP_TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        return {"files": [], "error": f"timed out after {STEP_TIMEOUT} s", "seconds": STEP_TIMEOUT}
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK):])
    if result is None:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        result = {"files": [], "error": f"worker exit {proc.returncode}: {tail[:400]}"}
    result["seconds"] = round(time.monotonic() - start, 1)
    return result


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for pkg in ("torch", "transformers", "optimum", "optimum-onnx", "onnx", "onnxruntime", "onnxruntime-genai",
                "onnxslim", "onnxconverter-common", "onnx-ir"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def build(out: Path, work: Path, jobs: int, select: str | None) -> dict[str, Any]:
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    everything = {s.id: s for s in plan()}
    chosen = {sid for sid in everything if not select or select in sid}
    while True:  # a chosen step brings the steps it reads from
        more = {n for sid in chosen for n in everything[sid].needs} - chosen
        if not more:
            break
        chosen |= more
    steps = [s for s in plan() if s.id in chosen]
    wanted = sorted({s.model for s in steps if s.model in MODELS} |
                    {n.split("/")[1] for s in steps for n in s.needs if n.split("/")[1] in MODELS})
    models = save_models(work, wanted)
    results: dict[str, dict[str, Any]] = {}
    pending = {s.id: s for s in steps}

    def ready(s: Step) -> bool:
        return all(n in results or n not in {x.id for x in steps} for n in s.needs)

    with cf.ThreadPoolExecutor(max_workers=jobs) as pool:
        running: dict[cf.Future[dict[str, Any]], Step] = {}
        while pending or running:
            for sid, s in list(pending.items()):
                if len(running) >= jobs or not ready(s):
                    continue
                del pending[sid]
                missing = [n for n in s.needs if results.get(n, {}).get("error") or n not in results]
                if s.model in models and models[s.model]["error"]:
                    results[sid] = {"files": [], "error": f"model not built: {models[s.model]['error']}"}
                    continue
                if missing:
                    results[sid] = {"files": [], "error": f"input step failed: {', '.join(missing)}"}
                    continue
                sources = [f for n in s.needs for f in results[n]["files"]] if s.toolchain not in (
                    "optimum-merge",) else []
                running[pool.submit(_spawn, s, out, work, sources)] = s
            if not running:
                continue
            done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                s = running.pop(fut)
                results[s.id] = fut.result()
                status = "ok" if not results[s.id]["error"] else "SKIPPED: " + results[s.id]["error"][:160]
                print(f"[{time.monotonic() - t0:6.1f}s] {s.id}: {status}", flush=True)

    entries = []
    for s in steps:
        r = results.get(s.id, {"files": [], "error": "not run"})
        truth = models.get(s.model, {}).get("blocks", []) if s.model in MODELS else []
        base = {"toolchain": s.toolchain, "model": s.model, "variant": s.variant, "tool": s.tool,
                "step": s.id, "seconds": r.get("seconds")}
        if r["error"]:
            entries.append({**base, "file": None, "status": "skipped", "reason": r["error"], "control": None,
                            "blocks": []})
            continue
        for rel, part in r["files"]:
            blocks = blocks_for(truth, part)
            hold_packed_biases(out / rel, blocks)
            entries.append({**base, "file": rel, "part": part, "status": "ok", "reason": None,
                            "control": not blocks, "blocks": blocks})
    manifest = {"schema": 1, "seed": SEED, "noise": NOISE, "versions": _versions(),
                "seconds": round(time.monotonic() - t0, 1),
                "models": {k: {"error": v["error"], "notes": MODELS[k].notes, "params": v.get("params")}
                           for k, v in models.items()},
                "entries": entries}
    (out / "truth.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default OUT/.work)")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("-k", dest="select", default=None, help="only steps whose id contains this")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--sources", default="[]", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out = args.out.resolve()
    work = (args.work or out / ".work").resolve()
    if args.worker:
        worker(args.worker, out, work, json.loads(args.sources))
        return 0
    manifest = build(out, work, args.jobs, args.select)
    ok = sum(1 for e in manifest["entries"] if e["status"] == "ok")
    skipped = [e for e in manifest["entries"] if e["status"] != "ok"]
    print(f"{ok} files, {len(skipped)} skipped steps, {manifest['seconds']} s -> {out / 'truth.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
