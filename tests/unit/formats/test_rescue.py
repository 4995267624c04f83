"""Rescue parsing helpers: JSON-aware scanning, lenient decoding, call shapes (values as written)."""

from __future__ import annotations

from typing import Any

import pytest
from formats_support import SEARCH, TOOLS, WEATHER, offered
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.grammar.rescue import args_valid, calls_from_value, extract_json_calls, json_arm, pythonic_arm
from tether.guardrails import check_arguments
from tether.jsonscan import find_json_values, loads_lenient, scan_value_end, string_end

W = "get_weather"


# -- scanning ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "end"),
    [
        ('{"a": "}"} tail', 10),
        ('{"a": "\\"}"} tail', 12),
        ('{"a": {"b": [1, {"c": "]"}]}} x', 29),
        ("{'a': '}'} x", 10),
        ('{"a": "it\'s"} x', 13),
        ('{"a": "open', None),
        ('{"a": {"b": 1}', None),
    ],
)
def test_scan_value_end_respects_strings(text: str, end: int | None) -> None:
    assert scan_value_end(text) == end


def test_string_end_honours_escapes() -> None:
    assert string_end('ab\\"c" x', 0, '"') == 6
    assert string_end("ab\\\\", 0, '"') is None


# -- lenient decoding ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "repairs"),
    [
        ('{"a": 1}', {"a": 1}, ()),
        (
            "{'a': 'x', 'b': True, 'c': None}",
            {"a": "x", "b": True, "c": None},
            ("single_quotes", "python_literals"),
        ),
        ('{"a": [1, 2,], "b": 3,}', {"a": [1, 2], "b": 3}, ("trailing_commas",)),
        ('{city: "Paris"}', {"city": "Paris"}, ("unquoted_keys",)),
        ('{"a": "line\nbreak"}', {"a": "line\nbreak"}, ("control_characters_escaped",)),
        ("{'q': 'say \"hi\"'}", {"q": 'say "hi"'}, ("single_quotes",)),
        ("{'q': 'it\\'s'}", {"q": "it's"}, ("single_quotes",)),
    ],
)
def test_loads_lenient_repairs(text: str, value: Any, repairs: tuple[str, ...]) -> None:
    assert loads_lenient(text) == (value, repairs)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": "x", "b": "unfinished', {"a": "x", "b": "unfinished"}),
        ('{"a": 1, "b', {"a": 1}),
        ('{"a": 1, "b": ', {"a": 1}),
        ('{"a": [1, 2', {"a": [1, 2]}),
        ('{"a": {"b": true,', {"a": {"b": True}}),
    ],
)
def test_loads_lenient_closes_truncated_json_only_when_allowed(text: str, value: Any) -> None:
    with pytest.raises(ValueError):
        loads_lenient(text)
    got, repairs = loads_lenient(text, allow_truncated=True)
    assert got == value and "truncated_closed" in repairs


def test_loads_lenient_rejects_non_json() -> None:
    with pytest.raises(ValueError):
        loads_lenient("get_weather(city=Paris)")


def test_find_json_values_anywhere() -> None:
    text = 'Sure. [it\'s] {"a": 1} and ```json\n[{"b": "}"}]\n``` end'
    found = [(text[s.start : s.end], s.value) for s in find_json_values(text)]
    assert found == [('{"a": 1}', {"a": 1}), ('[{"b": "}"}]', [{"b": "}"}])]


# -- call shapes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "repair"),
    [
        ({"name": W, "arguments": {"city": "Oslo"}}, None),
        ({"tool": W, "args": {"city": "Oslo"}}, "name_key:tool"),
        ({"function": {"name": W, "arguments": {"city": "Oslo"}}}, "shape_function_wrapper"),
        (
            {"type": "function", "function": {"name": W, "arguments": '{"city": "Oslo"}'}},
            "arguments_string_decoded",
        ),
        ({"name": W, "parameters": {"city": "Oslo"}}, "arguments_key:parameters"),
        ({"name": W, "arguments": '{"city": "Oslo"}'}, "arguments_string_decoded"),
        ({"name": W, "arguments": "{'city': 'Oslo'}"}, "single_quotes"),
        ({"name": W, "city": "Oslo"}, "arguments_flattened"),
        ({"tool_calls": [{"name": W, "arguments": {"city": "Oslo"}}]}, None),
        ({"tool_call": {"name": W, "arguments": {"city": "Oslo"}}}, None),
        ({"function_call": {"name": W, "arguments": {"city": "Oslo"}}}, "wrapper:function_call"),
    ],
)
def test_call_shapes(value: Any, repair: str | None) -> None:
    (call,) = calls_from_value(value, TOOLS)
    assert (call.name, dict(call.arguments), offered(call)) == (W, {"city": "Oslo"}, True)
    if repair:
        assert repair in call.repairs
    else:
        assert call.repairs == ()


@pytest.mark.parametrize(
    "value",
    [
        {"name": "Bob", "age": 3},  # data, not a call
        {"city": "Oslo"},
        {"name": W, "arguments": "not json"},
        {"name": W, "arguments": [1, 2]},
        [1, 2, 3],
        "get_weather",
    ],
)
def test_not_call_shaped(value: Any) -> None:
    assert calls_from_value(value, TOOLS) == []


def test_arguments_null_and_missing() -> None:
    (a,) = calls_from_value({"name": "get_time", "arguments": None}, TOOLS)
    (b,) = calls_from_value({"name": "get_time"}, TOOLS)
    assert (dict(a.arguments), a.repairs) == ({}, ("arguments_null",))
    assert (dict(b.arguments), b.repairs) == ({}, ("arguments_missing",))
    assert calls_from_value({"name": "unknown_tool"}, TOOLS, markerless=True) == []
    (c,) = calls_from_value({"name": "unknown_tool"}, TOOLS)
    assert not offered(c)


def test_unknown_name_is_kept_for_the_guard() -> None:
    (call,) = calls_from_value({"name": "get_wether", "arguments": {"city": "Oslo"}}, TOOLS)
    assert (call.name, offered(call)) == ("get_wether", False)


def test_parsing_keeps_values_as_written_and_the_guard_coerces() -> None:
    """Parsers decode shapes only (``bare`` must stay bare); the one coercion rule set is the guard's."""
    (call,) = calls_from_value({"name": W, "arguments": {"city": 12345, "days": "3"}}, TOOLS)
    assert dict(call.arguments) == {"city": 12345, "days": "3"} and call.repairs == ()
    checked = check_arguments(call.arguments, WEATHER.parameters)
    assert checked.ok and checked.arguments == {"city": "12345", "days": 3}
    assert len(checked.coercions) == 2


# -- extraction from text ------------------------------------------------------------


def test_json_in_code_fence_with_prose_around() -> None:
    text = 'Sure!\n```json\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n```\nOne moment.'
    result = extract_json_calls(text, TOOLS)
    assert result is not None
    assert result.content == "Sure!\n\nOne moment."
    assert [c.name for c in result.calls] == [W]
    assert "code_fence" in result.calls[0].repairs


def test_braces_and_quotes_inside_strings() -> None:
    text = '{"name": "write_file", "arguments": {"path": "a.json", "content": "{\\"k\\": \\"}\\"}\\n}"}}'
    result = extract_json_calls(text, TOOLS)
    assert result is not None
    assert dict(result.calls[0].arguments) == {"path": "a.json", "content": '{"k": "}"}\n}'}


def test_several_calls_in_one_message() -> None:
    text = '{"name": "get_time", "arguments": {}}\n{"name": "search", "arguments": {"query": "x"}} trailing'
    result = extract_json_calls(text, TOOLS)
    assert result is not None
    assert [c.name for c in result.calls] == ["get_time", "search"]
    assert result.content == "trailing"


def test_truncated_call_kept_only_when_it_validates() -> None:
    ok = extract_json_calls('{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2', TOOLS)
    assert ok is not None and dict(ok.calls[0].arguments) == {"city": "Oslo", "days": 2}
    assert "truncated_closed" in ok.calls[0].repairs
    assert (
        extract_json_calls('{"name": "get_weather", "arguments": {"days": 2', TOOLS) is None
    )  # city required
    assert (
        extract_json_calls('{"name": "unknown", "arguments": {"a": 1', TOOLS) is None
    )  # nothing to check against


def test_python_literals_and_trailing_commas_in_calls() -> None:
    text = "{'name': 'set_alarm', 'arguments': {'hour': 7, 'enabled': True, 'options': None,},}"
    result = extract_json_calls(text, TOOLS)
    assert result is not None
    call = result.calls[0]
    assert dict(call.arguments) == {"hour": 7, "enabled": True, "options": None}
    assert {"single_quotes", "python_literals", "trailing_commas"} <= set(call.repairs)


# -- schema coercion for text values (XML-ish formats) -------------------------------


def test_args_valid() -> None:
    assert args_valid({"city": "Oslo"}, WEATHER)
    assert not args_valid({"days": 1}, WEATHER)
    assert not args_valid({"query": 1}, SEARCH)


# -- region arming -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "decision"),
    [
        ("{", None),
        ('{"', True),
        ("{ 'na", True),
        ("{x", False),
        ("[", None),
        ('[{"', True),
        ("[1", False),
        ("`", None),
        ("``", None),
        ("```", None),
        ("```json", None),
        ('```json\n{"', True),
        ("```python\nprint", False),
        ("`code`", False),
        ("Hello", False),
    ],
)
def test_json_arm(head: str, decision: bool | None) -> None:
    assert json_arm(head) is decision


@pytest.mark.parametrize(
    ("head", "decision"),
    [
        ("[", None),
        ("[get_w", None),
        ("[get_weather ", None),
        ("[get_weather(", True),
        ("[1]", False),
        ("[a b", False),
    ],
)
def test_pythonic_arm(head: str, decision: bool | None) -> None:
    assert pythonic_arm(head) is decision


_PIECES = st.sampled_from(
    ['{"a": ', "[", "]", "{", "}", '"', "'", "\\", '\\"', "x", " ", ",", "\\\\", '"}', "q"]
)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(_PIECES, max_size=40), cuts=st.lists(st.integers(0, 200), max_size=8))
def test_resumed_scan_equals_a_fresh_scan(parts: list[str], cuts: list[int]) -> None:
    """scan_value_end remembers where it stopped on a prefix; growing the text piece by
    piece (as the detector does) must give exactly what a fresh scan gives."""
    text = "{" + "".join(parts)
    for cut in sorted({*cuts, len(text)}):
        prefix = text[: min(cut, len(text))]
        if prefix:
            assert scan_value_end(prefix) == scan_value_end(prefix, resume=False)
