"""Every model file tells itself apart by its content: formats this tool does not read get one line
naming the format and the converter to use (exit 2), whatever their suffix; PyTorch's archives go
to their readers. Each file is built minimally here (magic bytes, members, structure)."""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import pytest
from foreign_files import FOREIGN, field, varint
from typer.testing import CliRunner

from mhainspect.cli.app import app
from mhainspect.errors import InputError
from mhainspect.frontends import formats
from mhainspect.frontends.dispatch import classify
from mhainspect.pipeline import audit

ERROR_PREFIX = "mhainspect: error:"


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
    path.write_bytes(varint(1 << 3) + varint(8) + field(7, field(1, b"node")))
    assert formats.identify(path) is None
