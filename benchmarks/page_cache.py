"""Which pages of a file are in the page cache: the proof that an audit read no tensor data
(benchmarks/run.py on the 70B-shaped GGUF, tests/test_gguf.py on a small one). Linux only."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path


def page_residency(path: Path) -> bytes:
    """One byte per page of ``path``, low bit set where the page is in the page cache (mincore on
    a fresh shared mapping, which itself faults nothing in)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}: {os.strerror(ctypes.get_errno())}")
        try:
            vec = ctypes.create_string_buffer(-(-size // mmap.PAGESIZE))
            if libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}: {os.strerror(ctypes.get_errno())}")
            return vec.raw
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
