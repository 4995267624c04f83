"""Layer 0 compiled to GBNF for llama-server: which grammar each spec gets, and the request fields.

Whether llama.cpp accepts these grammars, and what the model writes under them, is checked on the
real server in tests/backends/test_llama_server.py.
"""

from __future__ import annotations

import re

import pytest

from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.remote import compile_gbnf
from tether.grammar.remote.gbnf_schema import GbnfBuilder, literal
from tether.grammar.spec import JsonSpec, NameChoiceSpec, ReplySpec

WEATHER = ToolSpec(
    "get_weather",
    "Weather for a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "days": {"type": "integer"},
        },
        "required": ["city"],
    },
)
TIME = ToolSpec("get_time", "The time.", {"type": "object", "properties": {}})
TOOLS = (WEATHER, TIME)


def _rules(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        name, _, body = line.partition(" ::= ")
        out[name] = body
    return out


def _referenced(text: str) -> set[str]:
    """Every rule name a body refers to (outside literals and character classes)."""
    names: set[str] = set()
    for body in _rules(text).values():
        bare = re.sub(r'"(?:[^"\\]|\\.)*"', " ", body)
        bare = re.sub(r"\[(?:[^\]\\]|\\.)*\]", " ", bare)
        bare = re.sub(r"\{\d+(,\d*)?\}", " ", bare)
        names |= set(re.findall(r"[a-z][a-z0-9-]*", bare))
    return names


def test_generic_format_holds_the_whole_reply_with_only_offered_names() -> None:
    grammar = compile_gbnf(ReplySpec(get_format("generic"), TOOLS, "names"))
    assert grammar is not None and grammar.triggers == ()  # not lazy: the reply is JSON from token one
    rules = _rules(grammar.grammar)
    assert rules["root"] == "calls | answer"
    assert '"get_weather"' in rules["call"] and '"get_time"' in rules["call"]
    assert rules["calls"].startswith(literal('{"tool_calls": ['))
    assert "{0,15}" in rules["calls"]  # parallel calls, capped as layer 0 caps them
    assert _referenced(grammar.grammar) <= set(rules)  # no undefined rule


def test_required_and_single_call_and_answer_only() -> None:
    fmt = get_format("generic")
    required = compile_gbnf(ReplySpec(fmt, TOOLS, "names", required=True, parallel=False))
    assert required is not None
    rules = _rules(required.grammar)
    assert rules["root"] == "calls" and "{0,15}" not in rules["calls"]
    answer = compile_gbnf(ReplySpec(fmt, TOOLS, "strict", answer_only=True))
    assert answer is not None and _rules(answer.grammar)["root"] == "answer"
    assert "call" not in _rules(answer.grammar)


def test_strict_mode_writes_each_tools_schema() -> None:
    grammar = compile_gbnf(ReplySpec(get_format("generic"), TOOLS, "strict"))
    assert grammar is not None
    rules = _rules(grammar.grammar)
    weather = rules["get-weather-object"]
    # Declared order; city required, unit and days optional behind commas; unit only "c" or "f".
    assert weather.index('"\\"city\\""') < weather.index('"\\"unit\\""') < weather.index('"\\"days\\""')
    assert '( ws "," ws "\\"unit\\"" ws ":" ws ("\\"c\\"" | "\\"f\\"") )?' in weather
    assert '"\\"days\\"" ws ":" ws integer' in weather
    # A tool without parameters takes exactly {} (as layer 0's strict mode).
    assert '"get_time" "\\", \\"arguments\\": " "{" ws "}"' in rules["call"]


def test_marker_format_is_lazy_on_its_begin_marker() -> None:
    grammar = compile_gbnf(ReplySpec(get_format("hermes"), TOOLS, "strict"))
    assert grammar is not None and grammar.triggers == ("<tool_call>",)
    fields = grammar.request_fields()
    assert fields["grammar_lazy"] is True
    assert fields["grammar_triggers"] == [{"type": 1, "value": "<tool_call>"}]
    assert fields["preserved_tokens"] == ["<tool_call>"]
    rules = _rules(grammar.grammar)
    assert rules["tool-call"].startswith('"<tool_call>" gap call')
    assert rules["tool-call"].endswith('"</tool_call>"')
    assert rules["root"] == "tool-call ( gap tool-call ){0,15}"
    # tool_choice required: the reply starts with the marker, no trigger to wait for.
    forced = compile_gbnf(ReplySpec(get_format("hermes"), TOOLS, "names", required=True))
    assert forced is not None and forced.triggers == () and "grammar_lazy" not in forced.request_fields()


def test_markerless_format_under_auto_gets_no_grammar() -> None:
    class Bare(type(get_format("pythonic"))):  # type: ignore[misc]
        begin = ()

    fmt = Bare()
    assert compile_gbnf(ReplySpec(fmt, TOOLS, "names")) is None  # nothing marks where a call starts
    forced = compile_gbnf(ReplySpec(fmt, TOOLS, "names", required=True))
    assert forced is not None and forced.triggers == ()


@pytest.mark.parametrize(
    "name", ["hermes", "mistral", "llama_function", "qwen3_coder", "generic", "pythonic"]
)
def test_every_format_compiles_to_a_closed_grammar(name: str) -> None:
    grammar = compile_gbnf(ReplySpec(get_format(name), TOOLS, "strict", required=True))
    assert grammar is not None
    rules = _rules(grammar.grammar)
    assert _referenced(grammar.grammar) <= set(rules), name
    assert "get_weather" in grammar.grammar and "get_time" in grammar.grammar


def test_name_choice_and_arguments() -> None:
    names = compile_gbnf(NameChoiceSpec(("read_file", "list_dir")))
    assert names is not None and _rules(names.grammar)["root"] == '"read_file" | "list_dir"'
    args = compile_gbnf(JsonSpec.of_tool(WEATHER))
    assert args is not None and _rules(args.grammar)["root"] == "get-weather-object"


def test_schema_keywords() -> None:
    g = GbnfBuilder()
    defs = {"Point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}
    point = g.schema({"$ref": "#/$defs/Point"}, "p", defs=defs)
    assert g.rules[point] == '"{" ws "\\"x\\"" ws ":" ws number ws "}"'
    assert g.schema({"type": ["string", "null"]}, "n", defs={}) == "(string | null)"
    assert g.schema({"const": 3}, "c", defs={}) == '"3"'
    assert (
        g.schema({"anyOf": [{"type": "integer"}, {"type": "boolean"}]}, "a", defs={}) == "(integer | boolean)"
    )
    bounded = g.schema(
        {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3}, "l", defs={}
    )
    assert g.rules[bounded] == '"[" ws string ( ws "," ws string ){0,2} ws "]"'
    short = g.schema({"type": "string", "minLength": 2, "maxLength": 5}, "s", defs={})
    assert g.rules[short] == '"\\"" char{2,5} "\\""'
    # Nothing known about a value: any JSON value; an unresolvable $ref likewise.
    assert g.schema({}, "x", defs={}) == "value"
    assert g.schema({"$ref": "#/$defs/Missing"}, "x", defs={}) == "value"


def test_all_optional_properties_allow_any_subset_in_order() -> None:
    g = GbnfBuilder()
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    body = g.rules[g.schema(schema, "o", defs={})]
    # Either a (then maybe b), or the rule for "from b on", which is b or nothing.
    assert body.startswith(
        '"{" ws ( "\\"a\\"" ws ":" ws integer ( ws "," ws "\\"b\\"" ws ":" ws integer )? | '
    )
    rest = body.split(" | ")[1].split(" )")[0]
    assert g.rules[rest] == '( "\\"b\\"" ws ":" ws integer )?'


def test_literals_escape_what_gbnf_needs() -> None:
    assert literal('a"b\\c\nd\te') == '"a\\"b\\\\c\\nd\\te"'
    assert literal("\x01") == '"\\x01"'
    assert literal("é→") == '"é→"'


CITY = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["name", "population"],
}


def test_a_structured_reply_is_its_schema_or_any_object() -> None:
    city = compile_gbnf(JsonSpec(CITY, "City"))
    assert city is not None and city.triggers == ()
    assert _referenced(city.grammar) <= set(_rules(city.grammar))
    assert '\\"population\\"' in city.grammar
    anything = compile_gbnf(JsonSpec(None))
    assert anything is not None and _rules(anything.grammar)["root"] == "object"


@pytest.mark.parametrize("name", ["generic", "hermes", "mistral", "llama3_json"])
def test_beside_tools_a_structured_answer_is_held_from_the_first_token(name: str) -> None:
    spec = ReplySpec(get_format(name), TOOLS, "strict", answer=JsonSpec(CITY, "City"))
    grammar = compile_gbnf(spec)
    assert grammar is not None and grammar.triggers == ()  # not lazy: a call or the value
    rules = _rules(grammar.grammar)
    assert _referenced(grammar.grammar) <= set(rules), name
    assert "get_weather" in grammar.grammar and '\\"population\\"' in grammar.grammar
    assert ("answer" in rules) == (name == "generic")  # in the envelope, where the format has one
    only = compile_gbnf(ReplySpec(get_format(name), TOOLS, "strict", answer_only=True, answer=JsonSpec(CITY)))
    assert only is not None and "get_weather" not in only.grammar
