"""The shared streaming detector: what is emitted when, hold-back, envelopes, whitespace."""

from __future__ import annotations

import pytest
from formats_support import TOOLS, assert_split_invariant, collect, run_stream

from tether.grammar.detector import StreamDetector, TextDelta, ToolCallDone
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec

HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def texts(events: list[object]) -> list[str]:
    return [e.text for e in events if isinstance(e, TextDelta)]


def test_prose_is_emitted_immediately_and_only_a_marker_prefix_is_held() -> None:
    d = StreamDetector(get_format("hermes"), TOOLS)
    assert texts(d.feed("Hello wor")) == ["Hello wor"]
    assert texts(d.feed("ld <to")) == ["ld"]  # " <to" could still become "<tool_call>"
    assert texts(d.feed("day")) == [" <today"]
    assert texts(d.feed(" <tool_cal")) == []
    assert texts(d.feed("l>{")) == []  # inside a call region now
    events = d.feed('"name": "get_time", "arguments": {}}</tool_call> Done')
    assert [type(e) for e in events] == [ToolCallDone, TextDelta]
    assert events[0] == ToolCallDone(0, events[0].call) and events[0].call.name == "get_time"
    assert texts(events) == [" Done"]
    assert d.close() == []


def test_unfinished_marker_prefix_is_flushed_at_close() -> None:
    d = StreamDetector(get_format("hermes"), TOOLS)
    assert texts(d.feed("a <tool_ca")) == ["a"]
    assert texts(d.close()) == [" <tool_ca"]


def test_call_indices_count_calls_in_the_message() -> None:
    fmt = get_format("hermes")
    events = run_stream(fmt, TOOLS, [HERMES_CALL, "\n", HERMES_CALL, "text", HERMES_CALL])
    assert [e.index for e in events if isinstance(e, ToolCallDone)] == [0, 1, 2]


def test_feed_after_close_is_an_error() -> None:
    d = StreamDetector(get_format("hermes"), TOOLS)
    d.close()
    assert d.close() == []
    with pytest.raises(RuntimeError):
        d.feed("x")


@pytest.mark.parametrize(
    ("text", "content"),
    [
        (f"Let me check.\n\n{HERMES_CALL}", "Let me check."),
        (f"\n{HERMES_CALL}\n", ""),
        (f"{HERMES_CALL}\n\nIt is sunny.\n", "It is sunny.\n"),
        (f"Checking.\n{HERMES_CALL}\n{HERMES_CALL}\nSunny.", "Checking.\nSunny."),
        (f"A{HERMES_CALL}B", "AB"),
        ("  leading and trailing  \n", "  leading and trailing  \n"),
    ],
)
def test_whitespace_next_to_calls_is_not_content(text: str, content: str) -> None:
    assert assert_split_invariant(get_format("hermes"), TOOLS, text).content == content


def test_unparseable_region_is_kept_verbatim() -> None:
    text = "Look: <tool_call>not a call at all</tool_call> ok"
    result = assert_split_invariant(get_format("hermes"), TOOLS, text)
    assert result.content == text and result.calls == ()


def test_next_begin_marker_ends_a_region_without_end_marker() -> None:
    call = '{"name": "get_time", "arguments": {}}'
    text = f"<tool_call>{call}\n<tool_call>{call}</tool_call>"
    result = assert_split_invariant(get_format("hermes"), TOOLS, text)
    assert [c.name for c in result.calls] == ["get_time", "get_time"]


def test_arm_at_start_holds_only_until_decidable() -> None:
    d = StreamDetector(get_format("pythonic"), TOOLS)
    assert d.feed("  [") == []
    assert d.feed("get_weath") == []
    assert d.feed('er(city="Oslo")') == []
    events = d.feed("]")
    assert [type(e) for e in events] == [ToolCallDone]
    d = StreamDetector(get_format("pythonic"), TOOLS)
    assert d.feed("[") == []
    assert texts(d.feed("1] see the notes")) == ["[1] see the notes"]
    d = StreamDetector(get_format("llama3_json"), TOOLS)
    assert texts(d.feed("{x")) == ["{x"]  # "{" then not a key: prose


def test_arm_at_start_only_at_the_start() -> None:
    text = 'Sure: {"name": "get_weather", "parameters": {"city": "Oslo"}}'
    result = assert_split_invariant(get_format("llama3_json"), TOOLS, text)
    assert result.calls == () and result.content == text


# -- generic: the {"response": "..."} envelope --------------------------------------


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ('{"response": "Hello!"}', "Hello!"),
        ('{ "response" : "spaced"}\n', "spaced"),
        ('{\n  "response": "multi\\nline"\n}', "multi\nline"),
        ('{"response": "quote \\" and \\\\ back\\/slash"}', 'quote " and \\ back/slash'),
        ('{"response": "caf\\u00e9 \\ud83d\\ude00 \\t tab"}', "café 😀 \t tab"),
        ('{"response": "lone \\ud83d surrogate"}', "lone \ufffd surrogate"),
        ('{"response": "bad \\x escape"}', "bad \\x escape"),
        ('{"response": "cut off mid-way', "cut off mid-way"),
        ('{"response": "cut in escape \\u00', "cut in escape \\u00"),
        ('{"response": "trailing"} and more', "trailing and more"),
        ('{"response": "comma", }', "comma"),
        ('{"response": ""}', ""),
        (
            "Just plain prose, the model ignored the instruction.",
            "Just plain prose, the model ignored the instruction.",
        ),
        ("{not json at all", "{not json at all"),
        ('```json\n{"response": "fenced"}\n```', "fenced"),
        ("{'response': 'single quotes'}", "single quotes"),
    ],
)
def test_generic_envelope(text: str, content: str) -> None:
    result = assert_split_invariant(get_format("generic"), TOOLS, text, splits=80)
    assert result.content == content
    assert result.calls == ()


def test_generic_envelope_streams_decoded_text_as_it_arrives() -> None:
    d = StreamDetector(get_format("generic"), TOOLS)
    assert d.feed('{"resp') == []
    assert texts(d.feed('onse": "Hel')) == ["Hel"]
    assert texts(d.feed("lo")) == ["lo"]
    assert texts(d.feed("\\")) == []  # an escape split across feeds
    assert texts(d.feed("n")) == []  # trailing whitespace: held until more text or the string ends
    assert texts(d.feed('"')) == ["\n"]
    assert texts(d.feed("}")) == []
    assert d.close() == []


def test_generic_tool_calls_and_text_in_one_object() -> None:
    text = '{"response": "Checking.", "tool_calls": [{"name": "get_time", "arguments": {}}]}'
    result = assert_split_invariant(get_format("generic"), TOOLS, text)
    assert result.content == "Checking."
    assert [c.name for c in result.calls] == ["get_time"]


def test_events_match_parse_for_every_prefix_closed() -> None:
    """A reply cut off at any point (max_tokens) is still handled like parse() of that prefix."""
    fmt = get_format("hermes")
    text = f"Hi.\n{HERMES_CALL}\nBye."
    for cut in range(len(text) + 1):
        prefix = text[:cut]
        assert collect(run_stream(fmt, TOOLS, [prefix])) == fmt.parse(prefix, TOOLS)


@pytest.mark.parametrize("value", ['{"name": "Lisbon", "tags": {"a": [1, 2]}}', "[1, 2]", "42", "null"])
def test_a_structured_answer_in_the_envelope_streams_as_the_value(value: str) -> None:
    """``{"response": <a JSON value>}``: the value is the content, piece by piece, without the envelope."""
    text = '{"response": ' + value + " }"
    tool = ToolSpec("get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}}})
    detector = StreamDetector(get_format("generic"), (tool,))
    events = [e for ch in text for e in detector.feed(ch)] + detector.close()
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == value
    assert not any(isinstance(e, ToolCallDone) for e in events)
