"""A structured reply closes inside its token budget, as briefly as its schema lets it."""

from __future__ import annotations

import json

import pytest
from jsonschema import validate

from tests.unit.grammar.test_constraint import drive, make_vocab
from tether.grammar.closing import closing_bytes, closing_suffix
from tether.grammar.constraint import ToolConstraint
from tether.grammar.masks import MaskCache
from tether.grammar.plan import json_plan
from tether.grammar.regex import RegexCompiler
from tether.grammar.spec import JsonSpec

CITY = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "population": {"type": "integer"},
    },
    "required": ["name", "tags", "population"],
    "additionalProperties": False,
}


def test_the_shortest_way_out_of_a_value() -> None:
    vocab = make_vocab()
    auto = json_plan(CITY, RegexCompiler(vocab)).automaton
    state = auto.start()
    for b in b'{"name": "Lisb':
        state = auto.step(state, b)
    way = closing_bytes(auto, state)
    assert way is not None
    assert json.loads(b'{"name": "Lisb' + way) == {"name": "Lisb", "tags": [], "population": 0}
    assert closing_bytes(auto, auto.step(auto.start(), ord("{"))) is not None


@pytest.mark.parametrize("budget", [45, 60, 100])  # the shortest value is 41 bytes
def test_a_runaway_string_closes_within_the_budget(budget: int) -> None:
    vocab = make_vocab()
    plan = json_plan(CITY, RegexCompiler(vocab))
    c = ToolConstraint(plan, vocab, MaskCache(plan.automaton, vocab), prompt_len=3, budget=budget)
    # The "model" wants a name that never ends.
    out, used = drive(vocab, c, '{"name": "' + "Lisbon and more " * 40, steps=budget)
    assert len(used) <= budget
    validate(json.loads(out), CITY)


def test_without_a_budget_nothing_closes_early() -> None:
    vocab = make_vocab()
    plan = json_plan(CITY, RegexCompiler(vocab))
    c = ToolConstraint(plan, vocab, MaskCache(plan.automaton, vocab), prompt_len=3)
    out, _ = drive(vocab, c, '{"name": "' + "x" * 60, steps=40)
    with pytest.raises(ValueError):
        json.loads(out)


def test_the_spec_carries_the_budget() -> None:
    assert JsonSpec(CITY, budget=12).budget == 12 and JsonSpec(CITY).budget is None


def test_a_value_cut_short_gets_its_shortest_close() -> None:
    cut = '{"name": "Lisbon is a city that is a city that'
    suffix = closing_suffix(cut, CITY)
    assert suffix is not None
    assert json.loads(cut + suffix) == {
        "name": "Lisbon is a city that is a city that",
        "tags": [],
        "population": 0,
    }
    assert closing_suffix('{"a": [1, {"b": "x', None) == '"}]}'
    assert closing_suffix("Sure! Here is", CITY) is None  # no beginning of the value: nothing to close


def test_a_cut_value_closes_in_its_schemas_own_property_order() -> None:
    # Properties out of alphabetical order (a pydantic model's field order): the value is written in
    # the schema's order, so the close must follow it, not a sorted copy.
    city = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "country": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["name", "country", "population"],
    }
    cut = '{ "name":"Lisbon" ,"country":"Portugal" ,"population":30000'
    suffix = closing_suffix(cut, city)
    assert suffix is not None
    assert json.loads(cut + suffix) == {"name": "Lisbon", "country": "Portugal", "population": 30000}
