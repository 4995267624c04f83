"""Incremental stop-string matching over streamed text, and the degenerate-repetition stop.

Text that could still be the start of a stop string is held back; everything
else is released at once, so streaming latency is not hurt by stop strings.

A small model under greedy decoding can fall into a loop ("6-point 6-point 6-point ...")
that only the context's end stops: minutes of decode for nothing. :class:`RepetitionStop`
ends a generation whose recent text is one short unit repeated many times over.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["RepetitionStop", "StopMatcher"]


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


class RepetitionStop:
    """Feed text deltas; ``looping`` turns true once the last ``span`` characters are one unit of
    at most ``max_unit`` characters repeated (checked every ``every`` characters, in O(span))."""

    def __init__(self, span: int = 400, max_unit: int = 48, every: int = 32) -> None:
        self.span, self.max_unit, self.every = span, max_unit, every
        self._tail = ""
        self._since = 0
        self.looping = False

    def feed(self, text: str) -> bool:
        if self.looping:
            return True
        self._tail = (self._tail + text)[-self.span :]
        self._since += len(text)
        if self._since >= self.every and len(self._tail) == self.span:
            self._since = 0
            self.looping = any(self._periodic(p) for p in range(1, self.max_unit + 1))
        return self.looping

    def _periodic(self, period: int) -> bool:
        tail = self._tail
        return tail[period:] == tail[:-period]
