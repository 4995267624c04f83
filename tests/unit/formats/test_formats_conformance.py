"""The conformance suite every tool-call format runs, streaming and non-streaming.

For each format: real examples from the family's chat template / docs parse to the
expected calls; every random token split streams exactly the non-streaming parse;
rendered calls parse back; the declaration the grammar reads (``begin``,
``name_slot``, ``args_encoding``) matches what ``render_calls`` writes; prose
without calls passes through untouched.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from formats_support import (
    GET_TIME,
    SEARCH,
    SET_ALARM,
    TOOLS,
    WEATHER,
    assert_split_invariant,
    call_summary,
    collect,
    offered,
    random_pieces,
    run_stream,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.calls import ToolCall
from tether.grammar.detector import StreamDetector, TextDelta
from tether.grammar.formats import available_formats, get_format
from tether.grammar.formats.base import InlineNameSlot, JsonNameSlot

FORMATS = [n for n in available_formats() if n in {
    "hermes", "qwen3_coder", "mistral", "mistral_v3", "llama3_json", "llama_function", "pythonic",
    "phi4", "gemma", "deepseek_v3", "deepseek_v31", "glm45", "generic",
}]  # fmt: skip

W = "get_weather"
# (text, expected content, expected calls) — shapes as each family's template / docs write them
GOLDEN: dict[str, list[tuple[str, str, list[tuple[str, dict[str, Any]]]]]] = {
    "hermes": [
        (
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "San Francisco, CA, USA"}}\n</tool_call>',
            "",
            [(W, {"city": "San Francisco, CA, USA"})],
        ),
        (
            "<think>\nThe user wants two cities.\n</think>\n\n"
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "days": 2}}\n</tool_call>',
            "<think>\nThe user wants two cities.\n</think>",
            [(W, {"city": "Paris"}), (W, {"city": "Rome", "days": 2})],
        ),
        ("The weather in Paris is sunny.", "The weather in Paris is sunny.", []),
    ],
    "qwen3_coder": [
        (
            "I'll check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
            "I'll check.",
            [(W, {"city": "Paris", "days": 3})],
        ),
        (
            "<tool_call>\n<function=set_alarm>\n<parameter=hour>\n7\n</parameter>\n<parameter=enabled>\ntrue\n"
            '</parameter>\n<parameter=tags>\n["work", "daily"]\n</parameter>\n</function>\n</tool_call>',
            "",
            [("set_alarm", {"hour": 7, "enabled": True, "tags": ["work", "daily"]})],
        ),
    ],
    "mistral": [
        (
            '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 1}',
            "",
            [(W, {"city": "Paris", "days": 1})],
        ),
        (
            '[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}',
            "",
            [(W, {"city": "Paris"}), ("get_time", {})],
        ),
    ],
    "mistral_v3": [
        (
            '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}]',
            "",
            [(W, {"city": "Paris"})],
        ),
        (
            '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
            '{"name": "search", "arguments": {"query": "Paris events"}}]',
            "",
            [(W, {"city": "Paris"}), ("search", {"query": "Paris events"})],
        ),
    ],
    "llama3_json": [
        ('{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [(W, {"city": "Paris"})]),
        (
            '<|python_tag|>{"name": "search", "parameters": {"query": "tether"}}',
            "",
            [("search", {"query": "tether"})],
        ),
        (
            '<|python_tag|>brave_search.call(query="Menlo Park weather")',
            "",
            [("brave_search", {"query": "Menlo Park weather"})],
        ),
    ],
    "llama_function": [
        ('<function=get_weather>{"city": "Paris"}</function>', "", [(W, {"city": "Paris"})]),
        (
            'Let me look.<function=search>{"query": "a } b", "limit": 3}</function>',
            "Let me look.",
            [("search", {"query": "a } b", "limit": 3})],
        ),
    ],
    "pythonic": [
        (
            '[get_weather(city="San Francisco"), get_time()]',
            "",
            [(W, {"city": "San Francisco"}), ("get_time", {})],
        ),
        (
            "<|tool_call_start|>[set_alarm(hour=7, enabled=true, tags=['a', 'b'])]<|tool_call_end|>Alarm set.",
            "Alarm set.",
            [("set_alarm", {"hour": 7, "enabled": True, "tags": ["a", "b"]})],
        ),
    ],
    "phi4": [
        (
            '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|/tool_call|>',
            "",
            [(W, {"city": "Paris"})],
        ),
        (
            '<|tool_call|>[{"name": "search", "arguments": {"query": "granite"}}]',
            "",
            [("search", {"query": "granite"})],
        ),
    ],
    "gemma": [
        (
            "<start_function_call>call:get_weather{city:<escape>Tokyo, JP<escape>,days:2}<end_function_call>",
            "",
            [(W, {"city": "Tokyo, JP", "days": 2})],
        ),
        (
            "<start_function_call>call:set_alarm{enabled:false,hour:6,tags:[<escape>x<escape>]}<end_function_call>",
            "",
            [("set_alarm", {"enabled": False, "hour": 6, "tags": ["x"]})],
        ),
    ],
    "deepseek_v3": [
        (
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
            '{"city": "Paris"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n'
            "```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "",
            [(W, {"city": "Paris"}), ("get_time", {})],
        ),
    ],
    "deepseek_v31": [
        (
            '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}'
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "",
            [(W, {"city": "Paris"})],
        ),
    ],
    "glm45": [
        (
            "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n"
            "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
            "",
            [(W, {"city": "Beijing", "days": 2})],
        ),
        (
            "Checking.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Beijing</arg_value></tool_call>",
            "Checking.",
            [(W, {"city": "Beijing"})],
        ),
    ],
    "generic": [
        (
            '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}',
            "",
            [(W, {"city": "Paris"})],
        ),
        ('{"response": "Hello! How can I help you?"}', "Hello! How can I help you?", []),
        ('{"tool_call": {"name": "get_time", "arguments": {}}}', "", [("get_time", {})]),
    ],
}

TRICKY = 'He said "hi" {ok} } [x]\nnext line, ünïcode'
ROUND_TRIP_CALLS = (
    ToolCall(W, {"city": "Paris", "days": 3}),
    ToolCall("get_time", {}),
    ToolCall("search", {"query": TRICKY, "limit": 5}),
    ToolCall("set_alarm", {"hour": 7, "enabled": False, "ratio": 0.5, "tags": ["a", "b"]}),
)
PROSE = [
    "Hello! How can I help you today?",
    "Use <b>bold</b>, a < b > c, and [links](http://x) with {braces} and `code`.",
    "Line one\n\n  Line two with trailing spaces   \n",
    "The <tool and <function words, [TOOL and <|tool are not markers.",
]


def test_every_builtin_format_is_covered() -> None:
    assert sorted(FORMATS) == sorted(GOLDEN)


@pytest.mark.parametrize(
    ("name", "case"), [(n, i) for n in GOLDEN for i in range(len(GOLDEN[n]))], ids=lambda v: str(v)
)
def test_golden_examples_parse(name: str, case: int) -> None:
    text, content, calls = GOLDEN[name][case]
    fmt = get_format(name)
    result = assert_split_invariant(fmt, TOOLS, text, seed=case, splits=60)
    assert result.content == content
    assert call_summary(result) == calls


@pytest.mark.parametrize("name", FORMATS)
def test_rendered_calls_parse_back(name: str) -> None:
    fmt = get_format(name)
    content = "" if fmt.text_envelope else "Let me check."
    text = fmt.render_calls(content, ROUND_TRIP_CALLS)
    result = assert_split_invariant(fmt, TOOLS, text)
    assert result.content == content
    assert [(c.name, dict(c.arguments)) for c in result.calls] == [
        (c.name, dict(c.arguments)) for c in ROUND_TRIP_CALLS
    ]
    assert all(offered(c) for c in result.calls)


@pytest.mark.parametrize("name", FORMATS)
def test_declaration_matches_rendering(name: str) -> None:
    """``begin`` / ``name_slot`` / ``args_encoding`` are what the grammar forces: they must
    describe exactly what the family writes."""
    fmt = get_format(name)
    call = ToolCall(W, {"city": "Paris", "days": 3})
    text = fmt.render_calls("", [call])
    begin = next((b for b in fmt.begin if text.startswith(b)), "" if fmt.arm_at_start else None)
    assert begin is not None, f"{text!r} does not start with a begin marker"
    rest = text[len(begin) :]
    slot = fmt.name_slot
    if fmt.whole_reply is not None:
        assert isinstance(slot, JsonNameSlot)
        assert rest.startswith(f'{{"{slot.keys[0]}": "{W}", "arguments": ')
        return
    if isinstance(slot, JsonNameSlot):
        opener = "[" if slot.list_wrapped else ""
        body = rest.lstrip()
        assert body.startswith(f'{opener}{{"{slot.keys[0]}": "{W}", {json.dumps(slot.args_key)}: ')
        value, _ = json.JSONDecoder().raw_decode(body)
        obj = value[0] if slot.list_wrapped else value
        assert obj[slot.args_key] == call.arguments
        return
    assert isinstance(slot, InlineNameSlot)
    term = next((t for t in slot.terminators if rest.startswith(slot.prefix + W + t)), None)
    assert term is not None, f"{rest!r} is not prefix + name + terminator"
    if fmt.args_encoding == "json":
        args, _ = json.JSONDecoder().raw_decode(rest[len(slot.prefix + W + term) :].lstrip())
        assert args == call.arguments


@pytest.mark.parametrize("name", FORMATS)
def test_render_tools_and_results(name: str) -> None:
    fmt = get_format(name)
    block = fmt.render_tools(TOOLS)
    assert all(t.name in block for t in TOOLS)
    assert fmt.description and fmt.name == name
    role, text = fmt.render_tool_result(W, '{"temp": 21}')
    assert role in {"user", "tool", "ipython", "observation"}
    assert "21" in text


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("text", PROSE)
def test_prose_passes_through(name: str, text: str) -> None:
    result = assert_split_invariant(get_format(name), TOOLS, text)
    assert result == type(result)(content=text)


@pytest.mark.parametrize("name", [n for n in FORMATS if not get_format(n).text_envelope])
def test_prose_streams_before_the_end(name: str) -> None:
    """Prose is emitted as it arrives, not at close(); after a call it keeps streaming.
    (The generic envelope's streaming is covered in test_stream_detector.)"""
    fmt = get_format(name)
    events = run_stream(fmt, TOOLS, ["Hello there, ", "how are you"])
    assert collect(events).content == "Hello there, how are you"
    text = fmt.render_calls("", [ToolCall(W, {"city": "Paris"})])
    detector = StreamDetector(fmt, TOOLS)
    detector.feed(text)
    detector.feed("\n")
    early = detector.feed("Sunny in Paris")
    if fmt.end:
        assert early and all(isinstance(e, TextDelta) for e in early)
    assert collect(early + detector.close()).content.endswith("Sunny in Paris")


_ALPHABET = st.sampled_from(
    [
        *(
            "a",
            " ",
            "\n",
            "{",
            "}",
            "[",
            "]",
            '"',
            "'",
            "<",
            ">",
            "|",
            ":",
            ",",
            "`",
            "name",
            "city",
            "get_weather",
        ),
        *(
            "<tool_call>",
            "</tool_call>",
            "[TOOL_CALLS]",
            "<|python_tag|>",
            "<function=",
            "</function>",
            "[ARGS]",
        ),
        *(
            "<|tool_call|>",
            "<start_function_call>",
            "<escape>",
            "<arg_key>",
            '{"response": "',
            '{"tool_calls": [',
        ),
        *("<|tool_call_start|>", "<｜tool▁calls▁begin｜>", "\\", "\\u00e9", "=", "(", ")"),
    ]
)


@pytest.mark.parametrize("name", FORMATS)
@settings(max_examples=60, deadline=None)
@given(parts=st.lists(_ALPHABET, max_size=40), seed=st.integers(0, 2**16))
def test_fuzz_split_invariance(name: str, parts: list[str], seed: int) -> None:
    """Arbitrary marker soup: never an exception, any split streams the same message, and
    a message in which no call was found comes back verbatim (never lose text)."""
    fmt = get_format(name)
    text = "".join(parts)
    expected = fmt.parse(text, TOOLS)
    rng = random.Random(seed)
    for _ in range(3):
        assert collect(run_stream(fmt, TOOLS, random_pieces(text, rng, 5))) == expected
    if not expected.calls and not fmt.text_envelope:
        assert expected.content == text


def test_offered_tools_are_only_a_subset() -> None:
    """Calls to tools that were not offered are kept as written (the guard resolves or refuses them)."""
    fmt = get_format("hermes")
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    narrow = [SEARCH, GET_TIME, SET_ALARM]
    result = fmt.parse(text, narrow)
    assert [(c.name, offered(c, narrow)) for c in result.calls] == [(W, False)]
    assert offered(fmt.parse(text, [WEATHER]).calls[0], [WEATHER])


def test_generic_prompt_shows_nothing_a_model_can_copy_as_a_value() -> None:
    """The system prompt a 135M model must follow: short, the tools with their schemas, and no
    example or placeholder value it could copy into an answer or an argument."""
    fmt = get_format("generic")
    prompt = fmt.render_tools([WEATHER, SEARCH])
    assert len(prompt) < 1200
    for copied in ("YOUR ANSWER", "example", "TOOL_NAME", "Hello! How can I help"):
        assert copied.casefold() not in prompt.casefold()
    assert '{"tool_calls": [{"name": <tool>, "arguments": <object>}]}' in prompt
    assert '{"response": <text>}' in prompt
    # The arguments' shape first (shown only the schema, the model copies it as its arguments), then the schema.
    weather = prompt[prompt.index(f"{W}: {WEATHER.description}") :].split("\n\n", 1)[0].splitlines()
    assert weather[1] == 'Arguments: {"city": string, "days": integer, "unit": "celsius" | "fahrenheit"}'
    assert json.loads(weather[2].removeprefix("Schema: ")) == dict(WEATHER.parameters)
    assert weather[3:] == ["Required: city", "- city: City name"]
