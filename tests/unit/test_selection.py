"""Deciding and choosing: lexical relevance, the decision prior, enumerations."""

from __future__ import annotations

import pytest

from tether.chat import Message
from tether.grammar.formats.base import ToolSpec
from tether.selection.decision import DecisionModel, request_text, steering_for
from tether.selection.enumeration import enumerated_items
from tether.selection.relevance import content_words, rank_tools, stem, weight

WEATHER = ToolSpec(
    "get_weather",
    "Get the current weather forecast for a city.",
    {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}},
)
AREA = ToolSpec(
    "calculate_triangle_area",
    "Calculate the area of a triangle from its base and height.",
    {"type": "object", "properties": {"base": {"type": "number"}, "height": {"type": "number"}}},
)


def test_words_split_identifiers_and_skip_numbers() -> None:
    assert content_words("getWeather for city_name 42 in Paris") == [
        "get",
        "weather",
        "for",
        "city",
        "name",
        "in",
        "paris",
    ]
    assert (
        stem("roots") == stem("root")
        and stem("calculating") == stem("calculate")
        and stem("cities") == "city"
    )
    assert weight("the") < 1 < weight("weather") < weight("quadratic")


def test_the_tool_the_request_talks_about_ranks_first() -> None:
    weather, area = rank_tools("What is the weather in Paris today?", [WEATHER, AREA])
    assert weather.score > 0.5 and area.score < 0.1
    weather, area = rank_tools("Find the area of a triangle with base 3 and height 4", [WEATHER, AREA])
    assert area.score > 0.5 > weather.score
    (nothing,) = rank_tools("Tell me a joke about penguins.", [WEATHER])
    assert nothing.score == 0.0


def test_decision_prior_pushes_toward_calling_only_when_a_tool_fits() -> None:
    model = DecisionModel()
    ask = [Message("user", "What is the weather in Paris today?")]
    joke = [Message("user", "Tell me a joke about penguins.")]
    fits = steering_for(ask, [WEATHER], model, decide=True, names=False)
    none = steering_for(joke, [WEATHER], model, decide=True, names=False)
    assert fits.decide and fits.call_prior > 0 > none.call_prior
    assert fits.name_prior == {}  # one tool: nothing to choose
    # After a tool result (an agent loop) the request's words do not say whether the task is done.
    loop = [*ask, Message("assistant", ""), Message("tool", "18 degrees", tool_call_id="c1")]
    assert steering_for(loop, [WEATHER], model, decide=True, names=False).call_prior == 0.0
    assert request_text(loop) == "What is the weather in Paris today?"


def test_name_prior_ranks_the_offered_tools() -> None:
    steering = steering_for(
        [Message("user", "triangle area for base 3, height 4")],
        [WEATHER, AREA],
        DecisionModel(),
        decide=False,
        names=True,
    )
    assert steering.name_prior["calculate_triangle_area"] > steering.name_prior["get_weather"]
    assert not steering.decide and steering.max_calls is None


def test_the_call_cap_counts_a_fresh_asks_items_only() -> None:
    ask = [Message("user", "the weather in Paris, London and Berlin")]
    assert steering_for(ask, [WEATHER], DecisionModel(), decide=True, names=False).max_calls is None
    capped = steering_for(ask, [WEATHER], DecisionModel(), decide=True, names=False, cap=True)
    assert capped.max_calls == 3
    loop = [*ask, Message("assistant", ""), Message("tool", "18 degrees", tool_call_id="c1")]
    assert (
        steering_for(loop, [WEATHER], DecisionModel(), decide=True, names=False, cap=True).max_calls is None
    )


@pytest.mark.parametrize(
    ("text", "items"),
    [
        ("What is the weather in Paris?", 1),
        ("What is the weather in Paris and London?", 2),
        ("Compute the factorial of 5, 3, 4 and 2.", 4),
        ("Generate four different DNA sequences.", 4),
        ("First add 2 and 3, then multiply by 4, finally subtract 1.", 3),
    ],
)
def test_enumerated_items(text: str, items: int) -> None:
    assert enumerated_items(text) == items


def test_grounded_share_counts_the_values_the_conversation_holds() -> None:
    from tether.selection.grounded import Grounding, conversation_text, grounded_share

    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "rate": {"type": "number"},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "names": {"type": "array", "items": {"type": "string"}},
            "verbose": {"type": "boolean"},
        },
    }
    said = conversation_text(
        [
            Message("system", "You are helpful."),
            Message("user", "Forecast for New York for two weeks, 1,000 rows at 5% for Ann and Bo"),
            Message("assistant", "Invented by the model: Tokyo"),
        ]
    )
    source = Grounding.of(said)
    assert grounded_share({"city": "new  york"}, schema, source) == 1.0  # case and spacing ignored
    assert grounded_share({"city": "New York, NY"}, schema, source) == 1.0  # most of its words
    assert grounded_share({"city": "Tokyo"}, schema, source) == 0.0  # only the assistant said it
    assert grounded_share({"days": 2, "rate": 0.05}, schema, source) == 1.0  # "two", "5%"
    assert grounded_share({"days": 1000, "rate": 7.5}, schema, source) == 0.5  # "1,000"; 7.5 nowhere
    assert grounded_share({"names": ["Ann", "Bo", "Cy"]}, schema, source) == 2 / 3
    # Enums, booleans and unknown keys say nothing either way; nor does a huge integer crash it.
    assert grounded_share({"unit": "f", "verbose": True, "other": "x"}, schema, source) is None
    assert grounded_share({"days": 10**400}, schema, source) == 0.0
