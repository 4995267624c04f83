"""Format-specific rescue cases and regressions for bugs seen in peer proxies.

Forge's ``<function=NAME>{json}</function>`` handling emptied the arguments, and
its brace counting stopped at a ``}`` inside a string value. Both must hold here
for every format that carries JSON arguments.
"""

from __future__ import annotations

import pytest
from formats_support import TOOLS, WEATHER, assert_split_invariant, call_summary, offered

from tether.grammar.formats import get_format
from tether.guardrails import check_arguments

W = "get_weather"
CONTENT = 'fn main() { println!("}"); }\n// "quoted" } and {'


@pytest.mark.parametrize(
    "text",
    [
        '<function=write_file>{"path": "main.rs", "content": "fn main() { println!(\\"}\\"); }\\n// \\"quoted\\" } and {"}</function>',
        '<function=write_file>{"path": "main.rs", "content": "fn main() { println!(\\"}\\"); }\\n// \\"quoted\\" } and {"}',
    ],
)
def test_forge_function_tag_arguments_are_not_emptied(text: str) -> None:
    result = assert_split_invariant(get_format("llama_function"), TOOLS, text, splits=80)
    assert call_summary(result) == [("write_file", {"path": "main.rs", "content": CONTENT})]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        (
            "hermes",
            '<tool_call>{"name": "write_file", "arguments": {"path": "main.rs", "content": "fn main() { println!(\\"}\\"); }\\n// \\"quoted\\" } and {"}}</tool_call>',
        ),
        (
            "phi4",
            '<|tool_call|>[{"name": "write_file", "arguments": {"path": "main.rs", "content": "fn main() { println!(\\"}\\"); }\\n// \\"quoted\\" } and {"}}]<|/tool_call|>',
        ),
        (
            "mistral",
            '[TOOL_CALLS]write_file[ARGS]{"path": "main.rs", "content": "fn main() { println!(\\"}\\"); }\\n// \\"quoted\\" } and {"}',
        ),
        (
            "mistral_v3",
            '[TOOL_CALLS][{"name": "write_file", "arguments": {"path": "main.rs", "content": "fn main() { println!(\\"}\\"); }\\n// \\"quoted\\" } and {"}}]',
        ),
        (
            "llama3_json",
            '{"name": "write_file", "parameters": {"path": "main.rs", "content": "fn main() { println!(\\"}\\"); }\\n// \\"quoted\\" } and {"}}',
        ),
        (
            "deepseek_v31",
            '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write_file<｜tool▁sep｜>{"path": "main.rs", "content": "fn main() { println!(\\"}\\"); }\\n// \\"quoted\\" } and {"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        ),
        (
            "generic",
            '{"tool_calls": [{"name": "write_file", "arguments": {"path": "main.rs", "content": "fn main() { println!(\\"}\\"); }\\n// \\"quoted\\" } and {"}}]}',
        ),
        (
            "pythonic",
            '[write_file(path="main.rs", content="fn main() { println!(\\"}\\"); }\\n// \\"quoted\\" } and {")]',
        ),
        (
            "gemma",
            '<start_function_call>call:write_file{path:<escape>main.rs<escape>,content:<escape>fn main() { println!("}"); }\n// "quoted" } and {<escape>}<end_function_call>',
        ),
        (
            "qwen3_coder",
            '<tool_call>\n<function=write_file>\n<parameter=path>\nmain.rs\n</parameter>\n<parameter=content>\nfn main() { println!("}"); }\n// "quoted" } and {\n</parameter>\n</function>\n</tool_call>',
        ),
        (
            "glm45",
            '<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>main.rs</arg_value>\n<arg_key>content</arg_key>\n<arg_value>fn main() { println!("}"); }\n// "quoted" } and {</arg_value>\n</tool_call>',
        ),
    ],
)
def test_braces_and_quotes_inside_values_for_every_format(name: str, text: str) -> None:
    result = assert_split_invariant(get_format(name), TOOLS, text, splits=60)
    assert call_summary(result) == [("write_file", {"path": "main.rs", "content": CONTENT})]
    assert result.content == ""


def test_qwen3_coder_values_coerced_by_schema_types() -> None:
    text = (
        "<tool_call>\n<function=set_alarm>\n<parameter=hour>\n07\n</parameter>\n<parameter=enabled>\nFalse\n"
        "</parameter>\n<parameter=ratio>\n0.25\n</parameter>\n<parameter=options>\n{'snooze': 5}\n</parameter>\n"
        "<parameter=tags>\n[]\n</parameter>\n</function>\n</tool_call>"
    )
    result = assert_split_invariant(get_format("qwen3_coder"), TOOLS, text)
    assert call_summary(result) == [
        ("set_alarm", {"hour": 7, "enabled": False, "ratio": 0.25, "options": {"snooze": 5}, "tags": []})
    ]


def test_qwen3_coder_missing_closing_tags() -> None:
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n<parameter=days>\n2\n</function>\n</tool_call>"
    result = assert_split_invariant(get_format("qwen3_coder"), TOOLS, text)
    assert call_summary(result) == [(W, {"city": "Oslo", "days": 2})]
    assert "missing_end_tag" in result.calls[0].repairs


def test_qwen3_coder_truncated_reply_kept_only_if_valid() -> None:
    fmt = get_format("qwen3_coder")
    ok = fmt.parse("<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo", TOOLS)
    assert call_summary(ok) == [(W, {"city": "Oslo"})] and "truncated_closed" in ok.calls[0].repairs
    bad = "<tool_call>\n<function=get_weather>\n<parameter=days>\n2"
    assert fmt.parse(bad, TOOLS).calls == ()
    assert fmt.parse(bad, TOOLS).content == bad


def test_hermes_region_with_xml_inside() -> None:
    text = "<tool_call>\n<function=get_time>\n</function>\n</tool_call>"
    assert call_summary(get_format("hermes").parse(text, TOOLS)) == [("get_time", {})]


def test_hermes_bare_json_at_start_needs_an_offered_name_or_arguments_key() -> None:
    fmt = get_format("hermes")
    assert call_summary(fmt.parse('{"name": "get_weather", "city": "Oslo"}', TOOLS)) == [
        (W, {"city": "Oslo"})
    ]
    data = '{"name": "Bob", "age": 3}'
    assert fmt.parse(data, TOOLS).content == data


def test_mistral_v11_variants() -> None:
    fmt = get_format("mistral")
    loose = assert_split_invariant(fmt, TOOLS, '[TOOL_CALLS]get_weather{"city": "Oslo"}')
    assert call_summary(loose) == [(W, {"city": "Oslo"})] and "missing_args_marker" in loose.calls[0].repairs
    after = assert_split_invariant(fmt, TOOLS, "[TOOL_CALLS]get_time[ARGS]{}\n\nDone, it is noon.")
    assert after.content == "Done, it is noon."


def test_llama3_json_semicolon_separated_calls_and_builtin() -> None:
    fmt = get_format("llama3_json")
    text = '<|python_tag|>{"name": "get_time", "parameters": {}}; {"name": "search", "parameters": {"query": "x"}}'
    assert call_summary(assert_split_invariant(fmt, TOOLS, text)) == [
        ("get_time", {}),
        ("search", {"query": "x"}),
    ]


def test_pythonic_rescues() -> None:
    fmt = get_format("pythonic")
    cases = {
        "[get_weather(city='Oslo', days=None)]": [(W, {"city": "Oslo", "days": None})],
        "[set_alarm(hour=-5, ratio=.5, tags=('a',), options={'k': [1, 2.0]})]": [
            ("set_alarm", {"hour": -5, "ratio": 0.5, "tags": ["a"], "options": {"k": [1, 2.0]}})
        ],
        "[get_weather(city=Oslo)]": [(W, {"city": "Oslo"})],
        "[get_weather(city='Os": [(W, {"city": "Os"})],
        "```python\n[get_time()]\n```": [("get_time", {})],
        "<|tool_call_start|>get_time()<|tool_call_end|>": [("get_time", {})],
        '<|tool_call_start|>{"name": "get_time", "arguments": {}}<|tool_call_end|>': [("get_time", {})],
    }
    for text, calls in cases.items():
        assert call_summary(assert_split_invariant(fmt, TOOLS, text)) == calls, text
    unknown = fmt.parse("[lookup(x=1)]", TOOLS)
    assert [(c.name, offered(c)) for c in unknown.calls] == [("lookup", False)]
    assert fmt.parse("[Note(s)] and more", TOOLS).calls == ()  # positional + unknown: prose


def test_pythonic_never_evaluates() -> None:
    text = "[get_weather(city=__import__('os').system('true'))]"
    result = get_format("pythonic").parse(text, TOOLS)
    assert result.calls == () and result.content == text


def test_gemma_rescues() -> None:
    fmt = get_format("gemma")
    text = "<start_function_call>call:get_weather{city:Oslo,days:<escape>2<escape>}<end_function_call>"
    result = assert_split_invariant(fmt, TOOLS, text)
    assert call_summary(result) == [(W, {"city": "Oslo", "days": "2"})]  # as written; the guard coerces
    assert "unescaped_string" in result.calls[0].repairs
    assert check_arguments(result.calls[0].arguments, WEATHER.parameters).arguments == {
        "city": "Oslo",
        "days": 2,
    }
    cut = fmt.parse("<start_function_call>call:get_weather{city:<escape>Oslo<escape>", TOOLS)
    assert call_summary(cut) == [(W, {"city": "Oslo"})] and "truncated_closed" in cut.calls[0].repairs


def test_deepseek_variants_and_missing_tags() -> None:
    fmt = get_format("deepseek_v3")
    text = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '{"city": "Oslo"}<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    result = assert_split_invariant(fmt, TOOLS, text)
    assert call_summary(result) == [(W, {"city": "Oslo"}), ("get_time", {})]
    assert {"unfenced_json", "missing_end_tag"} <= set(result.calls[0].repairs)


def test_glm45_json_values_and_truncation() -> None:
    fmt = get_format("glm45")
    text = '<tool_call>set_alarm\n<arg_key>hour</arg_key>\n<arg_value>6</arg_value>\n<arg_key>tags</arg_key>\n<arg_value>["a"]</arg_value>\n</tool_call>'
    assert call_summary(assert_split_invariant(fmt, TOOLS, text)) == [
        ("set_alarm", {"hour": 6, "tags": ["a"]})
    ]
    cut = "<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>2"
    assert fmt.parse(cut, TOOLS).calls == ()  # city (required) never arrived


def test_generic_rescues() -> None:
    fmt = get_format("generic")
    cases = {
        '```json\n{"tool_calls": [{"name": "get_time", "arguments": {}}]}\n```': [("get_time", {})],
        '{"tool_calls":[{"name":"get_time","arguments":{}}]}': [("get_time", {})],
        '{"name": "get_weather", "arguments": {"city": "Oslo"}}': [(W, {"city": "Oslo"})],
        '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}': [(W, {"city": "Oslo"})],
    }
    for text, calls in cases.items():
        assert call_summary(assert_split_invariant(fmt, TOOLS, text)) == calls, text
    empty = fmt.parse('{"tool_calls": []}', TOOLS)
    assert empty.calls == () and empty.content == ""
