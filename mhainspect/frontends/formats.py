"""What a model file is, by its content (never by its suffix alone).

``identify(tree, path, blob)`` reads a file's first bytes through its blob (and, for a zip
archive, its member list) and says which reader takes it: a torch.export program, a TorchScript
archive, a torch.save zip or legacy pickle, a safetensors file, a GGUF file, a Keras archive or
HDF5 file. It is the one decision for a local file and a remote one (``dispatch.content_kind``).
Formats this tool does not read (TensorFlow Lite, ExecuTorch, Core ML, TensorFlow SavedModel,
OpenVINO IR, TensorRT engines, CTranslate2, Git LFS pointers) are named in one line with the
converter to use (``Foreign``): never "corrupt ONNX"; a folder that is such a model is named by its
listing (``identify_folder``). A file with no signature (ONNX has none) is left to its suffix.
Nothing is executed and no tensor data is read.
"""

from __future__ import annotations

import errno
import os
import struct
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from mhainspect.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Callable

    from mhainspect.frontends.zips import ZipArchive
    from mhainspect.sources.blob import Blob
    from mhainspect.sources.tree import Tree

HEAD_BYTES = 64
_LFS = b"version https://git-lfs.github.com/spec/v1"
_HDF5 = b"\x89HDF\r\n\x1a\n"
_PICKLE_PROTOCOL = b"\x80"
_GGUF = b"GGUF"
_TENSORRT = b"ftrt"
_XML_SNIFF_BYTES = 4096
_MAX_SPEC_NAME = 256


class Kind(StrEnum):
    """What a MODEL argument is, so which reader takes it (``dispatch.Source.kind``,
    ``dispatch.tree_result``): a file's reader, a folder's, or a factory. A str: a member is its
    word in messages."""

    ONNX = "onnx"
    CHECKPOINT = "checkpoint"  # safetensors, torch.save zip, legacy pickle
    GGUF = "gguf"
    TORCHSCRIPT = "torchscript"
    TORCH_EXPORT = "torch_export"
    KERAS = "keras"  # a .keras archive or an HDF5 file (a legacy Keras model, Keras weights)
    FOLDER = "folder"  # one Hugging Face model folder (kinds.folder_kind)
    KERAS_FOLDER = "keras_folder"  # an extracted Keras archive: config.json beside model.weights.h5
    FACTORY = "factory"  # a Python callable that builds an nn.Module (module:function, file.py:function)


@dataclass(frozen=True)
class Foreign:
    """A format this tool recognises but does not read: what it is, and how to get a file it reads."""

    what: str
    advice: str

    def message(self, path: object) -> str:
        return f"{path}: {self.what}; mhainspect does not read this format: {self.advice}"


_TF2ONNX = "convert it to ONNX with tf2onnx"
TFLITE = Foreign("a TensorFlow Lite model (flatbuffer 'TFL3')",
                 f"{_TF2ONNX} (python -m tf2onnx.convert --tflite FILE --output model.onnx)")
EXECUTORCH = Foreign("an ExecuTorch program (.pte flatbuffer, lowered for on-device runtimes)",
                     "audit the torch.export program (.pt2, torch.export.save) or the nn.Module it was lowered from")
AOTINDUCTOR = Foreign("an AOTInductor package (.pt2 holding compiled code, no graph)",
                      "audit the torch.export program (.pt2, torch.export.save) it was compiled from")
COREML = Foreign("a Core ML model", "audit the model it was converted from (export that to ONNX), or convert "
                 "a neural-network Core ML model with onnxmltools.convert_coreml")
SAVED_MODEL = Foreign("a TensorFlow SavedModel",
                      f"{_TF2ONNX} (python -m tf2onnx.convert --saved-model DIR --output model.onnx)")
OPENVINO = Foreign("an OpenVINO IR model (.xml graph + .bin weights)",
                   "audit the ONNX or PyTorch model it was converted from (OpenVINO writes no ONNX)")
TENSORRT = Foreign("a serialized TensorRT engine (built for one GPU model)",
                   "audit the ONNX model it was built from")
CTRANSLATE2 = Foreign("a CTranslate2 model (model.bin)",
                      "audit the Hugging Face checkpoint it was converted from")
LFS_POINTER = Foreign("a Git LFS pointer, not the model (its content was never downloaded)",
                      "fetch it with git lfs pull (or huggingface-cli download)")


def identify(tree: Tree, path: str, blob: Blob) -> Kind | Foreign | None:
    """The reader the file ``path`` of ``tree`` goes to by its content (a Kind), a Foreign format, or
    None when the content names no format (an ONNX protobuf, or something unknown): the suffix
    decides then. The one decision for a file on this machine and a remote one: it reads ``blob``'s
    first bytes (the range its reader asks for first, held by ``HeadCached``), a zip archive's
    member list through the blob, and the few bytes a format without a magic at byte 0 needs.
    Raises InputError for a zip archive that is no format this tool knows, or a file that cannot
    be read."""
    head = blob.read(0, HEAD_BYTES)
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):  # a zip archive (zips.is_zip)
        from mhainspect.frontends.zips import ZipArchive  # imported for zips only: ONNX files skip it

        try:
            archive = ZipArchive(blob.name, blob)
        except InputError:
            return None  # a broken zip: the reader its suffix names says what is wrong
        return zip_kind(archive)
    for magic, found in _MAGIC:
        if head.startswith(magic):
            return found
    if _wrapped_tensorrt(blob, head):
        return TENSORRT
    if len(head) >= 8:
        ident = head[4:8]
        if ident == b"TFL3":
            return TFLITE
        if ident[:2] == b"ET" and ident[2:4].isdigit():
            return EXECUTORCH
    if is_safetensors(head, blob.size):
        return Kind.CHECKPOINT
    if _is_ctranslate2(head):
        return CTRANSLATE2
    if _is_openvino(tree, path, blob, head):
        return OPENVINO
    if path.rsplit("/", 1)[-1] == "saved_model.pb":
        return SAVED_MODEL
    if _is_coreml(blob, head):
        return COREML
    return None


# What a file's first bytes start with -> its reader or its format: the one magic table.
_MAGIC: tuple[tuple[bytes, Kind | Foreign], ...] = (
    (_GGUF, Kind.GGUF),
    (_PICKLE_PROTOCOL, Kind.CHECKPOINT),
    (_LFS, LFS_POINTER),
    (_HDF5, Kind.KERAS),  # the Keras reader names an HDF5 file that holds no Keras model
    (_TENSORRT, TENSORRT),
)


def identify_folder(tree: Tree, path: str) -> Foreign | None:
    """A folder of a tree that is one model of a format this tool does not read (a SavedModel, a
    Core ML package), by its listing; else None."""
    files = tree.listdir(path).files
    if "saved_model.pb" in files or "saved_model.pbtxt" in files:
        return SAVED_MODEL
    data = f"{path}/Data" if path else "Data"
    if "Manifest.json" in files and "com.apple.CoreML" in tree.listdir(data).folders:
        return COREML
    return None


def zip_kind(archive: ZipArchive) -> Kind | Foreign:
    """Which archive a zip is, by its members (``names_kind``)."""
    return names_kind(archive.names(), archive.path)


def names_kind(names: list[str], path: object) -> Kind | Foreign:
    """Which archive a zip of these member ``names`` is: a torch.export program (archive_format
    'pt2' with models/*.json, or the older serialized_exported_program.json), a TorchScript archive
    (code/ and constants.pkl), a torch.save zip (data.pkl), a Keras archive, an AOTInductor package."""
    rel = set(archive_members(names)[1])
    if "serialized_exported_program.json" in rel or any(n.startswith("models/") and n.endswith(".json")
                                                       for n in rel):
        return Kind.TORCH_EXPORT
    if "archive_format" in rel and any(n.startswith("data/aotinductor/") for n in rel):
        return AOTINDUCTOR
    if "constants.pkl" in rel and any(n.startswith("code/") for n in rel):
        return Kind.TORCHSCRIPT
    if "data.pkl" in rel:
        return Kind.CHECKPOINT
    if "config.json" in rel and "model.weights.h5" in rel:
        return Kind.KERAS
    raise InputError(f"{path}: a zip archive that is no PyTorch archive (torch.save, torch.jit.save, "
                     "torch.export.save) and no other model format mhainspect knows")


def archive_members(names: list[str]) -> tuple[str, list[str]]:
    """(the folder every member sits in, with its slash, or ""; the member names below it): PyTorch
    writes each archive below one folder named after the file."""
    tops = {n.split("/", 1)[0] for n in names}
    if len(tops) == 1 and all("/" in n for n in names):
        prefix = f"{next(iter(tops))}/"
        return prefix, [n[len(prefix):] for n in names]
    return "", list(names)


def is_safetensors(head: bytes, size: Callable[[], int]) -> bool:
    """An 8-byte little-endian header length that fits the file (``size()``: its length, asked only
    when the head can start one), then a JSON object: the one rule, for a local file and a remote one."""
    if len(head) < 10 or head[8:9] != b"{":
        return False
    return 2 <= int.from_bytes(head[:8], "little") <= size() - 8


def _is_ctranslate2(head: bytes) -> bool:
    """CTranslate2's model.bin: uint32 binary version, then the spec name (uint16 length with its
    NUL) such as 'TransformerSpec'."""
    if len(head) < 8:
        return False
    version, length = struct.unpack("<IH", head[:6])
    if not 2 <= version <= 64 or not 2 <= length <= min(_MAX_SPEC_NAME, len(head) - 6):
        return False
    name = head[6:6 + length]
    return name.endswith(b"\0") and name[:-1].isascii() and name[:-1].isalnum() and name[:-1].endswith(b"Spec")


def _wrapped_tensorrt(blob: Blob, head: bytes) -> bool:
    """A TensorRT plan behind a length-prefixed JSON header (as Ultralytics writes .engine files)."""
    if len(head) < 5 or head[4:5] != b"{":
        return False
    (n,) = struct.unpack("<I", head[:4])
    try:
        if n > 1 << 20 or 4 + n + 4 > blob.size():
            return False
        return blob.read(4 + n, 4) == _TENSORRT
    except InputError:
        return False


def _is_openvino(tree: Tree, path: str, blob: Blob, head: bytes) -> bool:
    """OpenVINO IR: an XML document whose root is <net>; or the .bin weights beside one (listed in
    the tree: a URL's folder, which lists nothing, is not asked for it)."""
    if head.lstrip().startswith(b"<"):
        text = blob.read(0, _XML_SNIFF_BYTES)
        return b"<net " in text or b"<net>" in text
    if path.lower().endswith(".bin"):
        xml = path[:-4] + ".xml"
        if tree.complete and xml in tree.files():
            try:
                text = tree.blob(xml).read(0, _XML_SNIFF_BYTES)
            except InputError:
                return False
            return b"<net " in text
    return False


def _is_coreml(blob: Blob, head: bytes) -> bool:
    """A protobuf whose top-level fields are Core ML's Model (specificationVersion, description,
    then a model type numbered 200 and up) and not ONNX's ModelProto (whose graph is field 7)."""
    if not head.startswith(b"\x08"):
        return False
    fields = _top_level_fields(blob, limit=16)
    return any(200 <= f < 1000 for f in fields) and 7 not in fields


def _top_level_fields(blob: Blob, limit: int) -> set[int]:
    """The field numbers of the first ``limit`` top-level fields of a protobuf file, skipping over
    the payload of each (a few small reads, whatever the file's size), up to ONNX's graph (field 7:
    no Core ML model then, and nothing past it is read)."""
    found: set[int] = set()
    try:
        size = blob.size()
        pos = 0
        while pos < size and len(found) < limit and 7 not in found:
            buf = blob.read(pos, 20)
            tag, used = _varint(buf, 0)
            if tag is None:
                break
            number, wire = tag >> 3, tag & 7
            found.add(number)
            if wire == 0:
                value, used = _varint(buf, used)
                if value is None:
                    break
                pos += used
            elif wire == 1:
                pos += used + 8
            elif wire == 5:
                pos += used + 4
            elif wire == 2:
                length, end = _varint(buf, used)
                if length is None:
                    break
                pos += end + length
            else:
                break
    except InputError:
        return found
    return found


def _varint(buf: bytes, at: int) -> tuple[int | None, int]:
    value, shift = 0, 0
    while at < len(buf) and shift < 64:
        b = buf[at]
        value |= (b & 0x7F) << shift
        at += 1
        if not b & 0x80:
            return value, at
        shift += 7
    return None, at


def check_symlink_loop(path: str | os.PathLike[str]) -> None:
    """InputError when ``path`` is a symlink loop (a -> b -> a), which would otherwise read as missing."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(f"{os.fspath(path)}: symlink loop (too many levels of symbolic links)") from None
    except ValueError:  # an embedded NUL: the loader reports it
        pass


# ModelProto's fields (onnx.proto: number -> wire type: 0 varint, 2 length-delimited), what a
# serialized ONNX model starts with in whatever order a writer put them.
_MODEL_PROTO_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}


def looks_like_onnx(head: bytes, size: int) -> bool:
    """Whether the first bytes of a file can start a binary ONNX ModelProto: every field the head
    holds (the first at least) is one of ModelProto's with its wire type, and no length runs past
    the file. A text file, an image or a PDF fails on its first byte, so it is refused before the
    ONNX reader (and onnx, ml_dtypes) is imported for it."""
    i, fields = 0, 0
    while i < len(head):
        tag, i = _varint(head, i)
        if tag is None:
            return fields > 0  # cut by the head's end
        if _MODEL_PROTO_FIELDS.get(tag >> 3) != tag & 7:
            return False
        fields += 1
        value, i = _varint(head, i)
        if value is None:
            return True
        if tag & 7 == 2:  # length-delimited: the length must fit in the file
            if i + value > size:
                return False
            i += value
    return fields > 0


def describe_head(head: bytes) -> str:
    """A few words on what a file's first bytes look like, for the refusal of a non-model file."""
    text = head.split(b"\n", 1)[0][:40]
    try:
        line = text.decode("utf-8")
    except UnicodeDecodeError:
        return f"it starts with bytes {head[:8].hex(' ')}"
    if line.isprintable() and line.strip():
        return f"it is text, starting '{line.strip()}'"
    return f"it starts with bytes {head[:8].hex(' ')}"
