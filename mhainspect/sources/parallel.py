"""Reads in flight at once, bounded: shard headers, split GGUF parts, small tensors of one file."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

CONCURRENCY = 16  # reads in flight at once, and connections per host

T = TypeVar("T")
R = TypeVar("R")


def in_parallel(fn: Callable[[T], R], items: Sequence[T], remote: bool = True) -> list[R]:
    """``[fn(x) for x in items]``, run at most CONCURRENCY at a time when ``remote`` (each is a round
    trip), in order otherwise; the first failure in the items' order is raised, after all are done."""
    if not remote or len(items) < 2:
        return [fn(x) for x in items]

    with ThreadPoolExecutor(max_workers=min(CONCURRENCY, len(items))) as pool:
        futures = [pool.submit(fn, x) for x in items]
    return [f.result() for f in futures]
