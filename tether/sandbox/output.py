"""Bounded capture of a child's output stream.

``BoundedCapture`` keeps the first and the last part of a stream (the start
says what ran, the end usually says why it failed) and counts, but drops, the
middle. Memory stays O(limit) however much the child writes; ``drain`` reads a
pipe incrementally and never buffers more than one chunk beyond the limit.
"""

from __future__ import annotations

import asyncio

__all__ = ["BoundedCapture", "drain"]

_CHUNK = 64 * 1024


class BoundedCapture:
    """Head + tail of a byte stream, at most ``limit`` bytes kept."""

    def __init__(self, limit: int) -> None:
        if limit < 2:
            raise ValueError("limit must be at least 2 bytes")
        self._head_limit = limit // 2
        self._tail_limit = limit - self._head_limit
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        """Append ``data``; bytes beyond the head fill a sliding tail window."""
        self.total += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            excess = len(self._tail) - self._tail_limit
            if excess > 0:
                del self._tail[:excess]

    @property
    def truncated(self) -> bool:
        """True when some bytes were dropped."""
        return self.total > len(self._head) + len(self._tail)

    @property
    def dropped(self) -> int:
        """How many bytes were dropped from the middle."""
        return self.total - len(self._head) - len(self._tail)

    def text(self) -> str:
        """The kept bytes as text (invalid UTF-8 replaced), with a marker where bytes were dropped."""
        head = self._head.decode("utf-8", errors="replace")
        tail = self._tail.decode("utf-8", errors="replace")
        if not self.truncated:
            return head + tail
        marker = f"\n[... output truncated by tether: {self.dropped} bytes omitted ...]\n"
        return head + marker + tail


async def drain(reader: asyncio.StreamReader | None, capture: BoundedCapture) -> None:
    """Read ``reader`` to EOF in fixed chunks into ``capture``."""
    if reader is None:
        return
    while True:
        chunk = await reader.read(_CHUNK)
        if not chunk:
            return
        capture.feed(chunk)
