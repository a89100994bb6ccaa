"""Every model file tells itself apart by its content: formats this tool does not read get one line
naming the format and the converter to use (exit 2), whatever their suffix; PyTorch's archives go
to their readers. Each file is built minimally here (magic bytes, members, structure)."""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import pytest
from foreign_files import BROKEN, FOREIGN, field, varint
from typer.testing import CliRunner

from mhainspect.cli.app import app
from mhainspect.errors import InputError
from mhainspect.frontends import formats
from mhainspect.frontends.dispatch import classify
from mhainspect.pipeline import audit
from mhainspect.sources.blob import LocalBlob
from mhainspect.sources.transports.local import LocalTree

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
    """An ONNX-looking protobuf (field 1 varint, graph field 7) is left to the suffix, from its first
    bytes only: the Core ML test stops at ONNX's graph field, whatever the graph's length."""
    path = tmp_path / "m.onnx"
    path.write_bytes(varint(1 << 3) + varint(8) + field(7, field(1, b"node" * 10_000)))
    tree = LocalTree(tmp_path)
    spans: list[tuple[int, int]] = []

    class Counting(LocalBlob):
        def read(self, offset: int, length: int) -> bytes:
            spans.append((offset, length))
            return super().read(offset, length)

    assert formats.identify(tree, "m.onnx", Counting(path)) is None
    assert spans and all(offset < formats.HEAD_BYTES for offset, _ in spans), spans


@pytest.fixture
def hub_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean Hub environment (no token, an empty cache, the listings of earlier tests forgotten)."""
    from mhainspect.sources.transports import hub as hub_module

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    hub_module._LISTINGS.clear()
    return tmp_path


def _error(source: str | Path) -> str:
    with pytest.raises(InputError) as info:
        audit(source)
    return str(info.value)


def _zip_of_no_format(d: Path) -> Path:
    with zipfile.ZipFile(d / "stuff.pt", "w") as z:
        z.writestr("readme.txt", "hello")
    return d / "stuff.pt"


def _readme(d: Path) -> Path:
    (d / "README.md").write_text("# a model card, not a model\n")
    return d / "README.md"


ALIKE = {**{case: build for case, (build, _, _) in FOREIGN.items()}, "zip_of_no_format": _zip_of_no_format,
         "not_a_model": _readme, **{f"broken_{case}": build for case, (build, _) in BROKEN.items()}}


@pytest.mark.parametrize("case", list(ALIKE))
def test_a_remote_file_is_refused_as_the_local_one(case: str, hub_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One decision for local and remote arguments (dispatch.content_kind, kinds.folder_kind): a
    format this tool does not read, a zip of no format it knows, a file that is no model and a
    broken Keras file get the same line from a Hub repository as from the local folder, but for
    the path."""
    from remote_servers import Repo, hub

    folder = hub_env / "repo"
    folder.mkdir()
    built = ALIKE[case](folder)
    rel = built.relative_to(folder).as_posix()
    local = _error(built)
    with hub(hub_env / "hub", {"org/m": Repo(folder)}) as (api, _):
        monkeypatch.setenv("HF_ENDPOINT", api.endpoint)
        remote = _error(f"hf://org/m/{rel}")
    assert remote.replace(f"hf://org/m/{rel}", "<model>") == local.replace(str(built), "<model>")
