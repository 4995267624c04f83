"""Large buffers go back to the OS when freed: a server that caches and evicts them must not creep.

The prefix cache keeps each long prompt's KV state as one buffer of megabytes (12 MiB for 512
tokens of SmolLM2) and evicts the oldest when its byte limit is reached. glibc serves a block that
large with ``mmap`` and unmaps it on free, until the first such free: then its *dynamic* mmap
threshold rises to that block's size, later blocks come from the heap, and a freed hole that the
next (slightly larger) state does not fit stays resident. Churning four such buffers among small
objects kept ~350 MiB resident for ~100 MiB live (``tests/unit/engine/test_heap.py``). Fixing the
threshold at 1 MiB turns the adjustment off, so every large block is mapped and unmapped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["MMAP_THRESHOLD", "map_large_blocks"]

MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def map_large_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Have glibc ``mmap`` every allocation of ``threshold`` bytes or more (and unmap it on free);
    whether it applied (False off Linux, or on a C library without ``mallopt``, such as musl)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return False
    try:
        mallopt = libc.mallopt
    except AttributeError:  # musl
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))
