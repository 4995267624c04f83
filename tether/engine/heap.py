"""Freed memory goes back to the OS: a server that caches, evicts and serves for days must not creep.

Two glibc behaviours keep freed memory resident. The prefix cache keeps each long prompt's KV state
as one buffer of megabytes (12 MiB for 512 tokens of SmolLM2) and evicts the oldest at its byte
limit; glibc serves such a block with ``mmap`` until the first one is freed, then raises its
*dynamic* mmap threshold to that size, and later states become heap holes the next one may not fit
(~350 MiB resident for ~100 MiB live, ``tests/unit/engine/test_heap.py``). Fixing the threshold at
1 MiB (:func:`map_large_blocks`) keeps every large block mapped and unmapped.

Smaller blocks freed inside an arena stay resident until the arena's top is free, which under
steady traffic it rarely is: a soak on the bundled model gained ~0.9 MiB a minute this way while
what it held stayed flat, and ``malloc_trim`` gave back 30 MiB of it at once. :func:`trim_every`
returns such pages every ``TRIM_INTERVAL_S`` (30 s; docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import sys
from functools import cache
from typing import Any

__all__ = ["MMAP_THRESHOLD", "TRIM_INTERVAL_S", "map_large_blocks", "trim_every", "trim_heap"]

MMAP_THRESHOLD = 1 << 20
TRIM_INTERVAL_S = 30.0
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


@cache
def _glibc() -> Any | None:
    """The C library where it is glibc (``mallopt`` and ``malloc_trim`` both there); None elsewhere
    (not Linux, or musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not (hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.malloc_trim.restype = ctypes.c_int
    return libc


def map_large_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Have glibc ``mmap`` every allocation of ``threshold`` bytes or more (and unmap it on free);
    whether it applied (False off glibc)."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold))


def trim_heap() -> bool:
    """Give every arena's free pages back to the OS; whether any were (False off glibc).

    Each arena is locked while it is walked (a few milliseconds for a few hundred MiB)."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


async def trim_every(interval_s: float = TRIM_INTERVAL_S) -> None:
    """Trim the heap every ``interval_s`` seconds until cancelled (off the event loop; nothing off glibc)."""
    if _glibc() is None:
        return
    while True:
        await asyncio.sleep(interval_s)
        await asyncio.to_thread(trim_heap)
