"""Incremental stop-string matching over streamed text.

Text that could still be the start of a stop string is held back; everything
else is released at once, so streaming latency is not hurt by stop strings.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["StopMatcher"]


class StopMatcher:
    """Feed text deltas; get back what is safe to emit and whether a stop string matched."""

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._held = ""
        self.matched: str | None = None

    def feed(self, text: str) -> str:
        """Returns the text that can be emitted now. After a match, returns the text before it."""
        if self.matched is not None:
            return ""
        if not self._stops:
            return text
        buf = self._held + text
        first: tuple[int, str] | None = None
        for stop in self._stops:
            at = buf.find(stop)
            if at != -1 and (first is None or at < first[0]):
                first = (at, stop)
        if first is not None:
            self.matched = first[1]
            self._held = ""
            return buf[: first[0]]
        keep = self._partial_suffix(buf)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        """At the end of generation: release whatever was held back."""
        out, self._held = self._held, ""
        return out if self.matched is None else ""

    def _partial_suffix(self, buf: str) -> int:
        # Longest suffix of buf that is a proper prefix of some stop string.
        best = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(buf)), best, -1):
                if buf.endswith(stop[:n]):
                    best = n
                    break
        return best
