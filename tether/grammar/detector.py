"""The one streaming state machine that finds tool calls in model output, for every format.

``StreamDetector(fmt, tools)`` is fed the reply piece by piece and answers with
events: prose goes out at once as ``TextDelta``; only text that could still be the
start of one of the format's ``begin`` markers (found with a trie) is held back. A
call region is buffered until the format says it ended (``region_end``), the next
``begin`` marker, or the end of the stream, then handed to ``fmt.parse_region`` and
reported as ``ToolCallDone`` events. Prose after calls keeps streaming.

At the start of a message the detector also asks ``fmt.arm`` whether a markerless
call may begin there (pythonic lists, bare JSON), and for formats with a
``text_envelope`` (generic) it streams the decoded JSON string of a
``{"response": "..."}`` answer.

Whitespace next to calls is not content: the gap before a call is kept only as a
separator if prose follows the call, and whitespace after the last call is dropped.

``ToolCallFormat.parse`` runs this same machine over the whole text (:func:`scan`),
so for any split of a reply into pieces the events add up to exactly what
``fmt.parse(full_text)`` returns. Formats keep no streaming state of their own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from tether.calls import ToolCall
from tether.grammar.formats.base import JsonTextEnvelope, ParseResult, ToolCallFormat, ToolSpec
from tether.grammar.jsonpieces import STRING_STOP, Envelope, decode_escape

__all__ = ["StreamDetector", "StreamEvent", "TextDelta", "ToolCallDone", "scan"]


@dataclass(frozen=True)
class TextDelta:
    """Prose (content) to pass on to the client."""

    text: str


@dataclass(frozen=True)
class ToolCallDone:
    """A complete tool call; ``index`` counts the calls of this message from 0."""

    index: int
    call: ToolCall


StreamEvent = TextDelta | ToolCallDone


class _State(Enum):
    START = 0
    PROSE = 1
    REGION = 2
    ENVELOPE = 3
    AFTER_ENVELOPE = 4
    VALUE = 5  # a structured answer in the envelope: ``{"response": {...}}``


class _Node:
    __slots__ = ("children", "terminal")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.terminal = False


class _Trie:
    """The begin markers; finds the leftmost marker, or a marker prefix at the end of text."""

    def __init__(self, words: Sequence[str]) -> None:
        self.root = _Node()
        for word in words:
            node = self.root
            for ch in word:
                node = node.children.setdefault(ch, _Node())
            node.terminal = bool(word)
        firsts = "".join(sorted(self.root.children))
        self.first = re.compile("[" + re.escape(firsts) + "]") if firsts else None

    def _match_at(self, text: str, i: int, final: bool) -> int:
        """Marker length at ``i``; 0: none; -1: text ends inside a possible marker."""
        node = self.root
        best = 0
        j = i
        while j < len(text):
            nxt = node.children.get(text[j])
            if nxt is None:
                return best
            node = nxt
            j += 1
            if node.terminal:
                best = j - i
        return -1 if node.children and not final else best

    def find(self, text: str, final: bool) -> tuple[int, int]:
        """(position, length) of the leftmost marker (length > 0), of a held-back
        marker prefix (length -1), or (len(text), 0)."""
        if self.first is None:
            return len(text), 0
        for m in self.first.finditer(text):
            n = self._match_at(text, m.start(), final)
            if n:
                return m.start(), n
        return len(text), 0


class StreamDetector:
    """Incremental tool-call detection for one assistant message of format ``fmt``."""

    def __init__(self, fmt: ToolCallFormat, tools: Sequence[ToolSpec]) -> None:
        self._fmt = fmt
        self._tools = tuple(tools)
        self._trie = _Trie(fmt.begin)
        self._envelope = Envelope(fmt.text_envelope) if fmt.text_envelope else None
        # The envelope's prefix up to its string's quote: a JSON value in its place is the answer.
        self._value_envelope = (
            Envelope(JsonTextEnvelope(fmt.text_envelope.prefix.rstrip('"'))) if fmt.text_envelope else None
        )
        self._state = _State.START
        self._buf = ""
        self._skip = 0
        self._held_ws = ""
        self._after_block = False
        self._after_ws = ""
        self._emitted = False
        self._index = 0
        self._events: list[StreamEvent] = []
        self._closed = False
        self._reopened = ""  # text replaced by "{" to read the rest of an envelope object
        self._steps: dict[_State, Callable[[bool], bool]] = {
            _State.START: self._start,
            _State.PROSE: self._prose,
            _State.REGION: self._region,
            _State.ENVELOPE: self._string,
            _State.AFTER_ENVELOPE: self._after_string,
            _State.VALUE: self._value,
        }

    def feed(self, text: str) -> list[StreamEvent]:
        """Events that ``text`` (the next piece of the reply) makes certain."""
        if self._closed:
            raise RuntimeError("StreamDetector.feed() after close()")
        self._buf += text
        self._run(final=False)
        return self._take()

    def close(self) -> list[StreamEvent]:
        """The end of the reply: flush everything held back."""
        if not self._closed:
            self._run(final=True)
            if self._held_ws and not self._after_block:
                self._events.append(TextDelta(self._held_ws))
            self._held_ws = ""
            self._closed = True
        return self._take()

    def _take(self) -> list[StreamEvent]:
        events, self._events = self._events, []
        return events

    def _run(self, final: bool) -> None:
        while self._steps[self._state](final):
            pass

    # -- prose and whitespace --------------------------------------------------

    def _emit(self, text: str) -> None:
        if not text:
            return
        if self._after_block:
            stripped = text.lstrip()
            if not stripped:
                self._after_ws += text
                return
            gap = (self._after_ws + text[: len(text) - len(stripped)]) or self._held_ws
            self._after_block = False
            self._after_ws = self._held_ws = ""
            text = (gap if self._emitted else "") + stripped
        full = self._held_ws + text
        body = full.rstrip()
        if body:
            self._events.append(TextDelta(body))
            self._emitted = True
        self._held_ws = full[len(body) :]

    def _calls_done(self, calls: Sequence[ToolCall]) -> None:
        if self._after_block:
            self._held_ws = self._after_ws or self._held_ws
            self._after_ws = ""
        self._after_block = True
        for call in calls:
            self._events.append(ToolCallDone(self._index, call))
            self._index += 1

    # -- states ----------------------------------------------------------------

    def _start(self, final: bool) -> bool:
        head = self._buf.lstrip()
        if not head:
            if final:
                self._state = _State.PROSE
            return final
        if self._envelope is not None:
            matched = self._envelope.match(head)
            if matched is None and not final:
                return False
            if matched:
                self._buf = head[matched:]
                self._state = _State.ENVELOPE
                return True
            valued = self._valued(head)
            if valued is None and not final:
                return False
            if valued:
                self._buf = head[valued:]
                self._state = _State.VALUE
                return True
        decision = self._fmt.arm(head)
        if decision is None and not final:
            return False
        if decision is False:
            self._state = _State.PROSE
            return True
        self._held_ws = self._buf[: len(self._buf) - len(head)]
        self._buf = head
        self._enter_region(0)
        return True

    def _prose(self, final: bool) -> bool:
        pos, length = self._trie.find(self._buf, final)
        self._emit(self._buf[:pos])
        self._buf = self._buf[pos:]
        if length > 0:
            self._enter_region(length)
            return True
        return False

    def _enter_region(self, marker_len: int) -> None:
        self._state = _State.REGION
        self._skip = marker_len

    def _next_begin(self, buf: str) -> int | None:
        if not self._skip:  # an armed region (bare JSON, fence) ends only where the format says
            return None
        start = self._skip
        found = [i for b in self._fmt.begin if b and (i := buf.find(b, start)) >= 0]
        return min(found) if found else None

    def _region(self, final: bool) -> bool:
        buf = self._buf
        end = self._fmt.region_end(buf, final)
        nxt = self._next_begin(buf)
        if nxt is not None and (end is None or nxt < end):
            end = nxt
        if end is None:
            if not final:
                return False
            end = len(buf)
        region, self._buf = buf[:end], buf[end:]
        self._state = _State.PROSE
        result = self._fmt.parse_region(region, self._tools)
        reopened, self._reopened = self._reopened, ""
        if result is None:
            self._emit(reopened + region[1:] if reopened else region)
            return True
        content = result.content.strip()
        if content and result.calls and self._emitted and not self._held_ws and not self._after_block:
            self._held_ws = "\n"
        self._emit(content)
        if result.calls:
            self._calls_done(result.calls)
        return True

    def _string(self, final: bool) -> bool:
        buf = self._buf
        out: list[str] = []
        i = 0
        while (m := STRING_STOP.search(buf, i)) is not None:
            j = m.start()
            out.append(buf[i:j])
            if buf[j] == '"':
                self._emit("".join(out))
                if self._held_ws:
                    self._events.append(TextDelta(self._held_ws))
                    self._held_ws = ""
                self._after_block = True
                self._buf = buf[j + 1 :]
                self._state = _State.AFTER_ENVELOPE
                return True
            decoded = decode_escape(buf, j, final)
            if decoded is None:
                self._emit("".join(out))
                self._buf = buf[j:]
                return False
            out.append(decoded[0])
            i = decoded[1]
        out.append(buf[i:])
        self._emit("".join(out))
        self._buf = ""
        return False

    def _valued(self, head: str) -> int | None:
        """Length of an envelope prefix followed by a JSON value that is no string; 0: none; None:
        undecided."""
        assert self._value_envelope is not None
        n = self._value_envelope.match(head)
        if not n:
            return n
        rest = head[n:].lstrip()
        if not rest:
            return None
        return 0 if rest[0] == '"' else len(head) - len(rest)

    def _value(self, final: bool) -> bool:
        """The structured answer streams as it is written; the envelope's closing brace does not (the
        last character is held back: it may be that brace)."""
        body = self._buf.rstrip()
        if final:
            self._emit((body[:-1] if body.endswith("}") else body).rstrip())
            self._held_ws = ""  # the space before the envelope's brace is the envelope's
            self._buf = ""
            return False
        if len(body) > 1:
            self._emit(self._buf[: len(body) - 1])
            self._buf = self._buf[len(body) - 1 :]
        return False

    def _after_string(self, final: bool) -> bool:
        head = self._buf.lstrip()
        if not head:
            if final:
                self._buf = ""
            return False
        if head[0] == ",":  # more members: `, }` or `, "tool_calls": [...]}`
            rest = head[1:].lstrip()
            if not rest:
                if final:
                    self._buf = ""
                return False
            if rest[0] == '"':
                self._reopened = self._buf[: len(self._buf) - len(rest)]
                self._buf = "{" + rest
                self._enter_region(0)
                return True
            head = rest
        if head[0] == "}":
            self._buf = head[1:]
        self._state = _State.PROSE
        return True


def scan(fmt: ToolCallFormat, text: str, tools: Sequence[ToolSpec]) -> ParseResult:
    """Run the detector over a whole reply: the non-streaming parse of every format."""
    detector = StreamDetector(fmt, tools)
    events = detector.feed(text) + detector.close()
    content = "".join(e.text for e in events if isinstance(e, TextDelta))
    calls = tuple(e.call for e in events if isinstance(e, ToolCallDone))
    return ParseResult(content=content, calls=calls)
