"""Every model file tells itself apart by its content: formats this tool does not read get one line
naming the format and the converter to use (exit 2), whatever their suffix; PyTorch's archives go
to their readers. Each file is built minimally here (magic bytes, members, structure)."""

from __future__ import annotations

import json
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mhainspect.cli.app import app
from mhainspect.errors import InputError
from mhainspect.frontends import formats
from mhainspect.frontends.dispatch import classify
from mhainspect.pipeline import audit

ERROR_PREFIX = "mhainspect: error:"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def keras(d: Path, name: str = "model.keras") -> Path:
    with zipfile.ZipFile(d / name, "w") as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.6.0"}))
        z.writestr("config.json", json.dumps({"class_name": "Functional", "config": {}}))
        z.writestr("model.weights.h5", b"\x89HDF\r\n\x1a\n" + bytes(64))
    return d / name


def hdf5(d: Path, name: str = "model.h5") -> Path:
    (d / name).write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(504))
    return d / name


def tflite(d: Path, name: str = "model.tflite") -> Path:
    (d / name).write_bytes(struct.pack("<I", 28) + b"TFL3" + bytes(120))
    return d / name


def executorch(d: Path, name: str = "model.pte") -> Path:
    (d / name).write_bytes(struct.pack("<I", 24) + b"ET12" + bytes(120))
    return d / name


def coreml(d: Path, name: str = "model.mlmodel") -> Path:
    description = _field(1, _field(1, b"input"))
    # specificationVersion = 4, description, neuralNetwork (field 500)
    (d / name).write_bytes(_varint(1 << 3) + _varint(4) + _field(2, description) + _field(500, _field(1, b"layer")))
    return d / name


def coreml_package(d: Path, name: str = "model.mlpackage") -> Path:
    pkg = d / name
    (pkg / "Data" / "com.apple.CoreML").mkdir(parents=True)
    coreml(pkg / "Data" / "com.apple.CoreML", "model.mlmodel")
    (pkg / "Manifest.json").write_text(json.dumps({"fileFormatVersion": "1.0.0", "itemInfoEntries": {}}))
    return pkg


def saved_model(d: Path, name: str = "saved") -> Path:
    folder = d / name
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(_varint(1 << 3) + _varint(1) + _field(2, b""))
    return folder


def saved_model_file(d: Path, name: str = "saved_model.pb") -> Path:
    (d / name).write_bytes(_varint(1 << 3) + _varint(1) + _field(2, _field(1, b"meta")))
    return d / name


_IR = b'<?xml version="1.0"?>\n<net name="model" version="11">\n<layers></layers>\n</net>\n'


def openvino_xml(d: Path, name: str = "model.xml") -> Path:
    (d / name).write_bytes(_IR)
    (d / name).with_suffix(".bin").write_bytes(bytes(256))
    return d / name


def openvino_bin(d: Path, name: str = "model.bin") -> Path:
    (d / name).write_bytes(struct.pack("<4f", 0.5, -1.0, 2.0, 0.25) * 16)
    (d / name).with_suffix(".xml").write_bytes(_IR)
    return d / name


def tensorrt(d: Path, name: str = "model.engine") -> Path:
    (d / name).write_bytes(b"ftrt" + bytes(200))
    return d / name


def tensorrt_wrapped(d: Path, name: str = "yolo.engine") -> Path:
    meta = json.dumps({"task": "detect", "imgsz": [640, 640]}).encode()
    (d / name).write_bytes(struct.pack("<I", len(meta)) + meta + b"ftrt" + bytes(200))
    return d / name


def ctranslate2(d: Path, name: str = "model.bin") -> Path:
    spec = b"TransformerDecoderModelSpec\0"
    (d / name).write_bytes(struct.pack("<IH", 6, len(spec)) + spec + struct.pack("<I", 8) + bytes(64))
    return d / name


def lfs_pointer(d: Path, name: str = "model.safetensors") -> Path:
    (d / name).write_text("version https://git-lfs.github.com/spec/v1\noid sha256:" + "ab" * 32 + "\nsize 4971456\n")
    return d / name


def aotinductor(d: Path, name: str = "compiled.pt2") -> Path:
    with zipfile.ZipFile(d / name, "w") as z:
        z.writestr("package/archive_format", "pt2")
        z.writestr("package/data/aotinductor/model/model.so", b"\x7fELF" + bytes(64))
    return d / name


# (builder, what the line names, a word of the advice)
FOREIGN: dict[str, tuple[Callable[[Path], Path], str, str]] = {
    "keras": (keras, "Keras archive", "tf2onnx"),
    "hdf5": (hdf5, "HDF5", "tf2onnx"),
    "tflite": (tflite, "TensorFlow Lite", "tf2onnx"),
    "executorch": (executorch, "ExecuTorch", "torch.export"),
    "coreml": (coreml, "Core ML", "onnxmltools"),
    "coreml_package": (coreml_package, "Core ML", "onnxmltools"),
    "saved_model": (saved_model, "SavedModel", "tf2onnx"),
    "saved_model_file": (saved_model_file, "SavedModel", "tf2onnx"),
    "openvino_xml": (openvino_xml, "OpenVINO", "ONNX"),
    "openvino_bin": (openvino_bin, "OpenVINO", "ONNX"),
    "tensorrt": (tensorrt, "TensorRT", "ONNX"),
    "tensorrt_wrapped": (tensorrt_wrapped, "TensorRT", "ONNX"),
    "ctranslate2": (ctranslate2, "CTranslate2", "Hugging Face"),
    "lfs_pointer": (lfs_pointer, "Git LFS pointer", "git lfs pull"),
    "aotinductor": (aotinductor, "AOTInductor", "torch.export"),
}


def _one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith(ERROR_PREFIX), lines[0]
    return lines[0]


@pytest.mark.parametrize("case", list(FOREIGN))
def test_foreign_format_named_in_one_line(case: str, tmp_path: Path) -> None:
    build, what, advice = FOREIGN[case]
    path = build(tmp_path)
    result = CliRunner().invoke(app, ["inspect", str(path), "--format", "json"])
    assert result.exit_code == 2, result.stdout
    line = _one_line(result.stderr)
    assert what in line and advice in line and "does not read this format" in line, line
    assert "ONNX model (protobuf" not in line and "zip bomb" not in line
    assert result.stdout == ""


@pytest.mark.parametrize("case", [c for c in FOREIGN if c not in ("coreml_package", "saved_model", "openvino_bin",
                                                                  "saved_model_file")])
@pytest.mark.parametrize("suffix", [".onnx", ".pt", ".bin", ""])
def test_content_not_suffix_decides(case: str, suffix: str, tmp_path: Path) -> None:
    build, what, _ = FOREIGN[case]
    built = build(tmp_path)
    renamed = built.rename(tmp_path / f"renamed{suffix}")
    with pytest.raises(InputError, match=what):
        audit(renamed)


def test_a_zip_no_format_of_ours_is_named_as_such(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "stuff.pt", "w") as z:
        z.writestr("readme.txt", "hello")
    with pytest.raises(InputError, match="a zip archive that is no PyTorch archive"):
        audit(tmp_path / "stuff.pt")


def _torch_zip(d: Path, name: str, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(d / name, "w") as z:
        for member, data in members.items():
            z.writestr(member, data)
    return d / name


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".bin", ".onnx", ".pt2", ""])
def test_pytorch_archives_go_to_their_reader_by_content(suffix: str, tmp_path: Path) -> None:
    script = _torch_zip(tmp_path, f"s{suffix}", {"m/data.pkl": b"\x80\x02}q\x00.", "m/constants.pkl": b"\x80\x02).",
                                                 "m/code/__torch__.py": b"class M(Module):\n  pass\n"})
    export = _torch_zip(tmp_path, f"e{suffix}", {"m/archive_format": b"pt2", "m/models/model.json": b"{}"})
    old_export = _torch_zip(tmp_path, f"o{suffix}", {"serialized_exported_program.json": b"{}"})
    saved = _torch_zip(tmp_path, f"c{suffix}", {"m/data.pkl": b"\x80\x02}q\x00.", "m/version": b"3\n"})
    pickle = tmp_path / f"p{suffix}"
    pickle.write_bytes(b"\x80\x02}q\x00.")
    assert classify(str(script)).kind == "torchscript"
    assert classify(str(export)).kind == "torch_export"
    assert classify(str(old_export)).kind == "torch_export"
    assert classify(str(saved)).kind == "checkpoint"
    assert classify(str(pickle)).kind == "checkpoint"


def test_safetensors_under_another_suffix_is_read_as_safetensors(tmp_path: Path) -> None:
    header = json.dumps({"q.weight": {"dtype": "F32", "shape": [8, 8], "data_offsets": [0, 256]}}).encode()
    path = tmp_path / "weights.bin"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(256))
    assert classify(str(path)).kind == "checkpoint"
    assert audit(path).model.total_params == 64


def test_identify_needs_only_the_head(tmp_path: Path) -> None:
    """An ONNX-looking protobuf (field 1 varint, graph field 7) is left to the suffix."""
    path = tmp_path / "m.onnx"
    path.write_bytes(_varint(1 << 3) + _varint(8) + _field(7, _field(1, b"node")))
    assert formats.identify(path) is None
