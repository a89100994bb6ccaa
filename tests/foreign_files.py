"""Minimal files of the formats mhainspect names but does not read (magic bytes, members,
structure), for tests/test_foreign_formats.py and tests/hostile_cases.py: nothing is downloaded."""

from __future__ import annotations

import json
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


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
    description = field(1, field(1, b"input"))
    # specificationVersion = 4, description, neuralNetwork (field 500)
    (d / name).write_bytes(varint(1 << 3) + varint(4) + field(2, description) + field(500, field(1, b"layer")))
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
    (folder / "saved_model.pb").write_bytes(varint(1 << 3) + varint(1) + field(2, b""))
    return folder


def saved_model_file(d: Path, name: str = "saved_model.pb") -> Path:
    (d / name).write_bytes(varint(1 << 3) + varint(1) + field(2, field(1, b"meta")))
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


# Files of formats mhainspect reads but broken (a Keras archive whose HDF5 file is zeros, an HDF5
# file with no Keras model): (builder, what the error line names).
BROKEN: dict[str, tuple[Callable[[Path], Path], str]] = {
    "keras": (keras, "Keras archive"),
    "hdf5": (hdf5, "HDF5"),
}

# (builder, what the line names, a word of the advice)
FOREIGN: dict[str, tuple[Callable[[Path], Path], str, str]] = {
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
