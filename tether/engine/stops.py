"""Incremental stop-string matching over streamed text, and the degenerate-repetition stop.

Text that could still be the start of a stop string is held back; everything
else is released at once, so streaming latency is not hurt by stop strings.
:class:`StopMatcher` is the one matcher: the turn applies a request's ``stop`` with it, and an
engine applies the stops of its model with it (:func:`stop_at`: a model whose chat template is
tether's fallback and whose end-of-turn marker is plain text, see
:func:`tether.engine.template.fallback_stops`), before a token leaves the engine.

A small model under greedy decoding can fall into a loop ("6-point 6-point 6-point ...")
that only the context's end stops: minutes of decode for nothing. :class:`RepetitionStop`
ends a generation whose recent text is one short unit repeated many times over.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import replace

from tether.engine.base import Done, GenerationEvent, Token

__all__ = ["RepetitionStop", "StopMatcher", "stop_at"]


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


def stop_at(
    events: Iterable[GenerationEvent],
    stops: Sequence[str],
    *,
    prompt_tokens: int,
    evaluated: int | Callable[[], int],
) -> Iterator[GenerationEvent]:
    """A generation's events ending at the first of ``stops``: the stop and what follows never leave.

    Tokens that may still open a stop are held back (whole tokens: a token is released once all of
    its text is); on a match the token the stop starts in leaves with only its text before the stop,
    the rest of the generation is closed, and the ``Done`` says ``stop``. Without a match the
    events pass unchanged (the held tokens leave before the ``Done``)."""
    matcher = StopMatcher(stops)
    held: deque[Token] = deque()
    free = 0  # released characters no held token has taken yet
    produced = 0
    source = iter(events)
    try:
        for event in source:
            if not isinstance(event, Token):
                matcher.flush()
                yield from held
                yield event
                return
            produced += event.id >= 0
            held.append(event)
            free += len(matcher.feed(event.text))
            while held and len(held[0].text) <= free:
                token = held.popleft()
                free -= len(token.text)
                yield token
            if matcher.matched is not None:
                if held and free:
                    yield replace(held[0], text=held[0].text[:free])
                count = evaluated() if callable(evaluated) else evaluated
                yield Done("stop", prompt_tokens, count, produced)
                return
    finally:
        if isinstance(source, Generator):
            source.close()


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
