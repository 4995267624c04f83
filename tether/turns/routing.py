"""One generation's text on its way out: stop strings, the format's detector, the repetition stop.

Both cores (:class:`~tether.turns.core.ChatCore` over token engines and
:class:`~tether.turns.chat_core.ChatBackendCore` over chat backends) pass each generated piece to a
:class:`TextRouter`: the stop matcher holds back what may open a stop string; with tools offered,
the format's :class:`~tether.grammar.detector.StreamDetector` keeps calls and their markup out of the
content and parses the calls (on a chat backend, those the model wrote as text: the rescue); the
content that comes out feeds the repetition stop (only prose: a call's arguments may legitimately
repeat, file content). ``claim`` attaches to each content delta the tokens it carries (for
``logprobs``; see :class:`~tether.turns.content_tokens.ContentTokens`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from tether.calls import ToolCall
from tether.engine.base import Token
from tether.engine.stops import RepetitionStop, StopMatcher
from tether.grammar.detector import StreamDetector, StreamEvent, TextDelta, ToolCallDone
from tether.grammar.formats.base import ToolCallFormat, ToolSpec
from tether.turns.events import FinishReason, TextOut

__all__ = ["Claim", "TextRouter"]

# The tokens a content delta carries, claimed in the order the deltas go out.
Claim = Callable[[str], tuple[Token, ...]]


class TextRouter:
    """Routes one generation's text. ``calls``: the calls parsed so far, in order (a caller adds the
    calls it got another way, so that one list keeps the order they came in); ``sent_text``: whether
    any content has gone out; ``text``: all of it, when ``keep`` (a structured reply, checked once
    it ends)."""

    def __init__(
        self,
        fmt: ToolCallFormat,
        tools: tuple[ToolSpec, ...],
        stop: Sequence[str],
        *,
        claim: Claim | None = None,
        keep: bool = False,
    ) -> None:
        self._stops = StopMatcher(stop)
        self._looping = RepetitionStop()
        self._detector = StreamDetector(fmt, tools) if tools else None
        self._claim = claim
        self.calls: list[ToolCall] = []
        self.sent_text = False
        self._keep = keep
        self.text = ""

    def feed(self, piece: str) -> list[TextOut]:
        """The content ``piece`` makes ready (some may be held back, to see whether a stop or a call opens)."""
        out = self._route(self._stops.feed(piece))
        for delta in out:
            self._looping.feed(delta.text)
        return out

    @property
    def stopped(self) -> bool:
        """A stop string matched or the text loops: the generation should end now."""
        return self._stops.matched is not None or self._looping.looping

    def close(self) -> list[TextOut]:
        """What was still held back at the end of the generation."""
        out = self._route(self._stops.flush())
        if self._detector is not None:
            out += self._out(self._take(self._detector.close()))
        return out

    @property
    def looped(self) -> bool:
        """The generation was cut for repeating itself."""
        return self._looping.looping

    @property
    def matched_stop(self) -> str | None:
        return self._stops.matched

    def reason(self, ended: FinishReason | None) -> FinishReason:
        """How the generation ended: a stop string, or cut short (``ended`` None), is ``stop``."""
        return "stop" if self._stops.matched is not None or ended is None else ended

    def _route(self, text: str) -> list[TextOut]:
        if not text:
            return []
        return self._out([text] if self._detector is None else self._take(self._detector.feed(text)))

    def _take(self, events: Iterable[StreamEvent]) -> list[str]:
        texts: list[str] = []
        for ev in events:
            if isinstance(ev, TextDelta) and ev.text:
                texts.append(ev.text)
            elif isinstance(ev, ToolCallDone):
                self.calls.append(ev.call)
        return texts

    def _out(self, texts: list[str]) -> list[TextOut]:
        self.sent_text = self.sent_text or bool(texts)
        if self._keep:
            self.text += "".join(texts)
        claim = self._claim
        return [TextOut(t) if claim is None else TextOut(t, claim(t)) for t in texts]
