"""Zip archives read safely: the member list (bounded) and one member's bytes (bounded).

PyTorch's archives (torch.save, torch.jit.save, torch.export.save) and Keras' are zip files. A
reader asks for the member list and for the few small members it needs (a pickle, a JSON graph,
a code file); tensor data is never read. A member is read only when it is stored or deflated and
its size is within the caller's cap, and a deflated member is inflated with that cap: a size the
archive declares is a promise checked while inflating, so a zip bomb costs the cap, not memory.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from mhainspect.errors import InputError, read_error
from mhainspect.ir.limits import MAX_ARCHIVE_MEMBERS

if TYPE_CHECKING:
    from mhainspect.sources.blob import Blob, SparseView

ZIP_MAGIC = b"PK\x03\x04"
STORED, DEFLATED = zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED
_EMPTY_ZIP_MAGIC = b"PK\x05\x06"  # an archive without members starts with its end record
_EOCD = b"PK\x05\x06"
_EOCD_SIZE = 22
_MAX_COMMENT = 0xFFFF
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_LOCATOR_SIZE = 20
_ZIP64_EOCD = b"PK\x06\x06"
_FIRST_TAIL = 1024  # PyTorch writes no archive comment: the end record is in the last bytes


def is_zip(head: bytes) -> bool:
    return head.startswith(ZIP_MAGIC) or head.startswith(_EMPTY_ZIP_MAGIC)


@dataclass(frozen=True)
class Member:
    name: str
    size: int  # declared (inflated) size
    packed: int  # size in the archive
    method: int  # STORED, DEFLATED, ...
    offset: int  # of its local header

    @property
    def stored(self) -> bool:
        return self.method == STORED


class ZipArchive:
    """The member list of a zip file, read once; members read on demand (see read). The file is
    ``path`` on disk, or ``blob`` (a local or remote file, read by ranges) named ``path``."""

    def __init__(self, path: Path | str, blob: Blob | None = None) -> None:
        self.path = path
        self.blob = blob
        self._view: SparseView | None = None  # a blob's spans, fetched once for every read
        try:
            self.file_size = Path(path).stat().st_size if blob is None else blob.size()
            with self._open() as fh:
                _check_member_count(path, fh, self.file_size)
                with zipfile.ZipFile(fh) as archive:
                    infos = archive.infolist()
        except OSError as exc:
            raise read_error(path, exc) from None
        except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, ValueError, EOFError,
                struct.error) as exc:  # zipfile's words for a directory it cannot parse (UnicodeDecodeError too)
            raise InputError(f"{path}: broken zip archive ({_first_line(exc)})") from None
        self.members: dict[str, Member] = {}
        for info in infos:
            self.members.setdefault(info.filename, Member(info.filename, info.file_size, info.compress_size,
                                                          info.compress_type, info.header_offset))

    def _open(self) -> IO[bytes]:
        """The archive as a seekable file: opened by path on disk, else through its blob."""
        if self.blob is None:
            return open(self.path, "rb")
        from mhainspect.sources.blob import BlobFile

        if self._view is None:
            from mhainspect.sources.blob import SparseView

            self._view = SparseView(self.blob, self.file_size)
            tail = self.blob.tail(min(self.file_size, _FIRST_TAIL))  # the end record, and a short directory
            self._view.seed(self.file_size - len(tail), tail)
        return BlobFile(self._view)  # type: ignore[return-value]

    def names(self) -> list[str]:
        return list(self.members)

    def get(self, name: str) -> Member | None:
        return self.members.get(name)

    def read(self, name: str, cap: int, what: str) -> bytes:
        """Member ``name``'s bytes, at most ``cap`` of them (InputError past that, or when the
        member is missing, compressed other than by deflate, or broken)."""
        member = self.members.get(name)
        if member is None:
            raise InputError(f"{self.path}: {what} missing (no member {name!r})")
        if member.size > cap:
            raise InputError(f"{self.path}: refused: {what} ({name!r}) declares {member.size:,} bytes (at most "
                             f"{cap:,} are read)")
        if member.method not in (STORED, DEFLATED):
            raise InputError(f"{self.path}: refused: {what} ({name!r}) is compressed with method {member.method}")
        if member.offset + member.packed > self.file_size:
            raise InputError(f"{self.path}: truncated archive: {what} ({name!r}) ends past the end of the file")
        try:
            with self._open() as fh:
                fh.seek(member.offset)
                local = fh.read(30)
                if len(local) < 30 or local[:4] != ZIP_MAGIC:
                    raise InputError(f"{self.path}: broken zip archive: no local header for {name!r}")
                name_len, extra_len = struct.unpack("<HH", local[26:30])
                fh.seek(member.offset + 30 + name_len + extra_len)
                raw = fh.read(member.packed)
        except OSError as exc:
            raise read_error(self.path, exc) from None
        if len(raw) < member.packed:
            raise InputError(f"{self.path}: truncated archive: {what} ({name!r}) is cut short")
        if member.stored:
            data = raw
        else:
            inflater = zlib.decompressobj(-15)
            try:
                data = inflater.decompress(raw, cap + 1)
            except zlib.error as exc:
                raise InputError(f"{self.path}: broken zip archive: {what} ({name!r}) does not inflate "
                                 f"({exc})") from None
            if len(data) > cap:
                raise InputError(f"{self.path}: refused: {what} ({name!r}) inflates past {cap:,} bytes (a zip bomb)")
        if len(data) != member.size:
            raise InputError(f"{self.path}: broken zip archive: {what} ({name!r}) holds {len(data):,} bytes, "
                             f"its header says {member.size:,}")
        return data


def _check_member_count(path: Path | str, fh: IO[bytes], size: int) -> None:
    """Refuse an archive whose end record (or zip64 end record) declares more than
    MAX_ARCHIVE_MEMBERS members, before zipfile builds an object for each of them."""
    data = b""
    for tail in (min(size, _FIRST_TAIL), min(size, _EOCD_SIZE + _MAX_COMMENT)):  # the longest comment only if need be
        fh.seek(size - tail)
        data = fh.read(tail)
        if data.rfind(_EOCD) >= 0:
            break
    at = data.rfind(_EOCD)
    if at < 0 or at + _EOCD_SIZE > len(data):
        return  # zipfile says what is wrong
    (entries,) = struct.unpack("<H", data[at + 10:at + 12])
    locator = at - _ZIP64_LOCATOR_SIZE
    if entries == 0xFFFF and locator >= 0 and data[locator:locator + 4] == _ZIP64_LOCATOR:
        (record,) = struct.unpack("<Q", data[locator + 8:locator + 16])
        if record + 40 <= size:
            fh.seek(record)
            head = fh.read(40)
            if head[:4] == _ZIP64_EOCD:
                (entries,) = struct.unpack("<Q", head[32:40])
    if entries > MAX_ARCHIVE_MEMBERS:
        raise InputError(f"{path}: refused: the archive declares {entries:,} members (at most "
                         f"{MAX_ARCHIVE_MEMBERS:,})")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
