"""An int8 copy of a tied model counts the tied embedding once.

The TorchScript exporter stores a tied embedding twice (the table the lookup reads and a transposed
copy for the output projection); onnxruntime's quantize_dynamic then quantizes the copy (MatMulInteger)
and, by default, the table too (a quantized Gather), each with its own scale and zero point. Neither
is byte-equal to the other: each dequantizes, within half of its step, to the same values, which is
what makes it one parameter. Truth: the torch module's parameters."""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path
from typing import Any

import pytest

from mhainspect.pipeline import audit

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
quantization = pytest.importorskip("onnxruntime.quantization")
transformers.logging.set_verbosity_error()

from tests.random_weights import add_noise  # noqa: E402


class _Logits(torch.nn.Module):  # type: ignore[misc]
    def __init__(self, model: Any) -> None:
        super().__init__()
        self.m = model

    def forward(self, ids: Any, mask: Any) -> Any:
        return self.m(input_ids=ids, attention_mask=mask, use_cache=False).logits


def _export(tied: bool, path: Path) -> Any:
    config = transformers.GPT2Config(vocab_size=512, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                                     tie_word_embeddings=tied, attn_implementation="eager")
    torch.manual_seed(0)
    model = add_noise(transformers.GPT2LMHeadModel(config)).eval()
    assert (model.lm_head.weight is model.transformer.wte.weight) == tied
    ids = torch.randint(0, 512, (1, 8), generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(_Logits(model), (ids, torch.ones_like(ids)), str(path), dynamo=False, opset_version=17)
    return model


def _quantize(src: Path, dst: Path, **kw: Any) -> Path:
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        quantization.quantize_dynamic(str(src), str(dst), **kw)
    return dst


@pytest.mark.parametrize("kw", [
    {"weight_type": "QInt8"},
    {"weight_type": "QUInt8"},
    {"weight_type": "QInt8", "per_channel": True},
    {"weight_type": "QInt8", "op_types_to_quantize": ["MatMul"]},  # the table stays float: a quantized copy of it
], ids=["int8", "uint8", "int8-per-channel", "matmul-only"])
def test_tied_embedding_counts_once_in_an_int8_copy(kw: dict[str, Any], tmp_path: Path) -> None:
    model = _export(True, tmp_path / "fp32.onnx")
    kw = {**kw, "weight_type": getattr(quantization.QuantType, kw["weight_type"])}
    path = _quantize(tmp_path / "fp32.onnx", tmp_path / "int8.onnx", **kw)
    report = audit(path)
    truth = sum(p.numel() for p in model.parameters())
    assert report.model.total_params == truth
    assert audit(tmp_path / "fp32.onnx").model.total_params == truth
    note = next(w for w in report.warnings if "copies of parameters" in w)
    assert "quantized" in note and "transposed" in note
    # The copy's bytes are still stored: overhead, not parameters.
    assert report.model.weight_bytes is not None and report.model.weight_bytes_overhead >= 512 * 64


def test_untied_output_projection_is_its_own_parameter(tmp_path: Path) -> None:
    """A control: an lm_head of its own (different values, same transposed shape) is no copy."""
    model = _export(False, tmp_path / "fp32.onnx")
    path = _quantize(tmp_path / "fp32.onnx", tmp_path / "int8.onnx", weight_type=quantization.QuantType.QInt8)
    report = audit(path)
    assert report.model.total_params == sum(p.numel() for p in model.parameters())
    assert not any("quantized =" in w for w in report.warnings)


def test_remote_int8_copy_is_decided_as_locally(tmp_path: Path) -> None:
    """One ONNX reader for a local file and a served one: the int8 copy of the tied embedding is
    decided by the same values, read by ranges from the server (the quantized candidates and their
    scales and zero points as a local file's reader reads them), so the reports are equal."""
    from remote_servers import FileServer
    from test_remote import report_json

    _export(True, tmp_path / "fp32.onnx")
    folder = tmp_path / "served"
    folder.mkdir()
    path = _quantize(tmp_path / "fp32.onnx", folder / "int8.onnx", weight_type=quantization.QuantType.QInt8)
    local = report_json(path, base=str(folder))
    with FileServer(folder) as server:
        remote = report_json(server.url("int8.onnx"), base=server.url(""))
    assert remote == local
    assert "quantized" in local and "transposed" in local
