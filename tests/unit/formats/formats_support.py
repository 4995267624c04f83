"""Shared helpers for the tool-call format tests: offered tools, streaming under random splits."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from tether.calls import ToolCall
from tether.grammar.detector import StreamDetector, StreamEvent, TextDelta, ToolCallDone
from tether.grammar.formats.base import ParseResult, ToolCallFormat, ToolSpec

WEATHER = ToolSpec(
    "get_weather",
    "Get the current weather for a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "days": {"type": "integer"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
    },
)
SEARCH = ToolSpec(
    "search",
    "Search the web.",
    {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
    },
)
GET_TIME = ToolSpec("get_time", "Current time.")
WRITE_FILE = ToolSpec(
    "write_file",
    "Write a file.",
    {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
)
SET_ALARM = ToolSpec(
    "set_alarm",
    "Set an alarm.",
    {
        "type": "object",
        "properties": {
            "hour": {"type": "integer"},
            "enabled": {"type": "boolean"},
            "ratio": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "options": {"type": "object"},
        },
        "required": ["hour"],
    },
)
TOOLS: tuple[ToolSpec, ...] = (WEATHER, SEARCH, GET_TIME, WRITE_FILE, SET_ALARM)


def run_stream(fmt: ToolCallFormat, tools: Sequence[ToolSpec], pieces: Sequence[str]) -> list[StreamEvent]:
    detector = StreamDetector(fmt, tools)
    events: list[StreamEvent] = []
    for piece in pieces:
        events.extend(detector.feed(piece))
    events.extend(detector.close())
    return events


def collect(events: Sequence[StreamEvent]) -> ParseResult:
    """The message the events describe (checks call indices count from 0)."""
    calls = [e for e in events if isinstance(e, ToolCallDone)]
    assert [e.index for e in calls] == list(range(len(calls)))
    content = "".join(e.text for e in events if isinstance(e, TextDelta))
    return ParseResult(content=content, calls=tuple(e.call for e in calls))


def random_pieces(text: str, rng: random.Random, max_len: int = 8) -> list[str]:
    """``text`` cut at random points into token-sized pieces (1..max_len characters)."""
    pieces = []
    i = 0
    while i < len(text):
        j = i + rng.randint(1, max_len)
        pieces.append(text[i:j])
        i = j
    return pieces


def assert_split_invariant(
    fmt: ToolCallFormat, tools: Sequence[ToolSpec], text: str, *, seed: int = 0, splits: int = 40
) -> ParseResult:
    """Every random split (and one character at a time) streams exactly ``fmt.parse(text)``."""
    expected = fmt.parse(text, tools)
    rng = random.Random(seed)
    variants = [list(text), [text]] + [
        random_pieces(text, rng, rng.choice((2, 4, 8, 16))) for _ in range(splits)
    ]
    for pieces in variants:
        got = collect(run_stream(fmt, tools, pieces))
        assert got == expected, f"split {pieces!r}"
    return expected


def call_summary(result: ParseResult) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, dict(c.arguments)) for c in result.calls]


def expect_calls(result: ParseResult, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    assert call_summary(result) == [(n, dict(a)) for n, a in calls]


def offered(call: ToolCall, tools: Sequence[ToolSpec] = TOOLS) -> bool:
    """Whether ``call`` names one of ``tools`` (parsers keep names that are not offered, for the guard)."""
    return any(t.name == call.name for t in tools)
