"""Structured replies: the schema subset, its errors, the finished-reply check, and the automaton."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field

from tests.support.schemas import reply_schemas
from tether.errors import InvalidRequestError
from tether.grammar.automata import Automaton, State
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.plan import build_plan, value_automaton
from tether.grammar.regex import RegexCompiler
from tether.grammar.structured import (
    MAX_GRAMMAR_CHARS,
    ReplyFormat,
    UnsupportedSchemaError,
    check_reply,
    reply_format,
)
from tether.grammar.vocab import TokenVocab


class City(BaseModel):
    name: str
    country: str
    population: int
    nicknames: list[str] = Field(default_factory=list)
    capital: bool | None = None


class Trip(BaseModel):
    origin: City
    stops: list[City]


ZOD = {  # as zod-to-json-schema writes z.object({city: z.string(), unit: z.enum(["c", "f"])})
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
    "$schema": "http://json-schema.org/draft-07/schema#",
}


@pytest.mark.parametrize("schema", [City.model_json_schema(), Trip.model_json_schema(), ZOD])
def test_pydantic_and_zod_schemas_are_taken_whole(schema: dict[str, Any]) -> None:
    fmt = reply_format(schema, param="response_format")
    assert fmt.schema == schema


@pytest.mark.parametrize("schema", [None, {}, {"type": "object"}, {"type": "object", "title": "Any"}])
def test_an_open_object_is_any_object(schema: dict[str, Any] | None) -> None:
    assert reply_format(schema, param="format").schema is None


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        (
            {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}},
            "minimum at /properties/n",
        ),
        ({"type": "object", "patternProperties": {"^a": {}}}, "patternProperties at /"),
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems at /"),
        ({"properties": {"ip": {"type": "string", "format": "ipv4"}}}, "format 'ipv4' at /properties/ip"),
        ({"anyOf": [{"type": "string"}, {"not": {"type": "null"}}]}, "not at /anyOf/1"),
        (
            {"$defs": {"A": {"type": "number", "multipleOf": 2}}, "$ref": "#/$defs/A"},
            "multipleOf at /$defs/A",
        ),
        ({"allOf": [{"type": "string"}]}, "allOf at /"),
        ({"properties": {"a/b": {"if": {}}}}, "if at /properties/a~1b"),
    ],
)
def test_a_keyword_the_sampler_cannot_enforce_is_named_with_its_pointer(schema: Any, named: str) -> None:
    with pytest.raises(UnsupportedSchemaError, match="is not supported") as caught:
        reply_format(schema, param="response_format.json_schema.schema")
    assert named in caught.value.message
    assert caught.value.param == "response_format.json_schema.schema" and caught.value.status == 400


def test_an_invalid_schema_is_a_400_with_where() -> None:
    with pytest.raises(InvalidRequestError, match="invalid JSON Schema at /properties/a") as caught:
        reply_format({"properties": {"a": {"type": "dict"}}}, param="format")
    assert not isinstance(caught.value, UnsupportedSchemaError)
    with pytest.raises(InvalidRequestError, match="must be a JSON object"):
        reply_format([1], param="format")


def test_a_schema_too_large_to_compile_is_refused_with_the_limit() -> None:
    words = [f"word{i:05d}" for i in range(MAX_GRAMMAR_CHARS // 8)]
    with pytest.raises(UnsupportedSchemaError, match=f"the limit is {MAX_GRAMMAR_CHARS}"):
        reply_format({"type": "string", "enum": words}, param="format")


def test_the_finished_reply_is_checked() -> None:
    fmt = reply_format(City.model_json_schema(), param="x")
    assert check_reply('{"name": "Lisbon", "country": "Portugal", "population": 545923}', fmt) is None
    assert "population" in (check_reply('{"name": "Lisbon", "country": "Portugal"}', fmt) or "")
    assert "not JSON" in (check_reply('{"name": "Lis', fmt) or "")
    assert check_reply("[1]", ReplyFormat(None)) == "the reply is not a JSON object"
    assert "JSON Schema" in fmt.instruction() and '"population"' in fmt.instruction()


def _walk(auto: Automaton, rng: random.Random, limit: int = 400) -> bytes | None:
    """A random path through ``auto`` to a final state, leaning towards closing: a reply it allows."""
    state: State = auto.start()
    out = bytearray()
    for _ in range(limit):
        if auto.is_final(state) and rng.random() < 0.5:
            return bytes(out)
        steps = [(b, nxt) for b in range(32, 127) if (nxt := auto.step(state, b)) is not None]
        if not steps:
            return bytes(out) if auto.is_final(state) else None
        closing = [s for s in steps if chr(s[0]) in '"]},']
        b, state = rng.choice(closing if closing and rng.random() < 0.4 else steps)
        out.append(b)
    return None


# One token per byte: the automaton seen byte by byte.
_REGEXES = RegexCompiler(TokenVocab.from_pieces([bytes([b]) for b in range(256)], frozenset(), frozenset()))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(reply_schemas())
def test_whatever_the_automaton_allows_holds_the_schema(schema: dict[str, Any]) -> None:
    auto = value_automaton(reply_format(schema, param="x").schema, _REGEXES)
    rng = random.Random(json.dumps(schema, sort_keys=True))
    checker = Draft202012Validator(schema)
    for _ in range(5):
        text = _walk(auto, rng)
        if text is not None:
            assert not list(checker.iter_errors(json.loads(text))), (schema, text)


def test_beside_tools_the_grammar_is_a_call_or_the_value() -> None:
    regexes = _REGEXES
    tool = ToolSpec("get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}}})
    answer = value_automaton(City.model_json_schema(), regexes)

    def allows(fmt_name: str, text: str) -> bool:
        plan = build_plan(get_format(fmt_name), [tool], "strict", regexes, answer=answer)
        assert plan.from_start
        state: State | None = plan.automaton.start()
        for b in text.encode():
            state = plan.automaton.step(state, b) if state is not None else None
        return state is not None

    city = '{"name": "Lisbon", "country": "Portugal", "population": 545923}'
    assert allows("generic", '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}')
    assert allows("generic", '{"response": ' + city + "}")  # in the envelope
    assert not allows("generic", city)
    assert not allows("generic", '{"response": "It is sunny."}')
    assert allows("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}')
    assert allows("hermes", city)
    assert not allows("hermes", "It is sunny.")
