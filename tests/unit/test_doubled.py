"""One value, one parameter: a name said once and written into two parameters (no model)."""

from __future__ import annotations

from tether.calls import ToolCall
from tether.chat import Message
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.pipeline import FixArguments, Regenerated, Request, guard_steps, run_guard_sync
from tether.guardrails.presets import PRESETS
from tether.guardrails.values import regrounded_tool
from tether.selection.doubled import beside, doubled_keys
from tether.selection.grounded import Grounding, check_call, unsaid_optional

STRING = {"type": "string"}
CONCERT = {
    "type": "object",
    "properties": {
        "genre": {"type": "string", "description": "Genre of the concert."},
        "location": {"type": "string", "description": "City of the concert."},
        "date": STRING,
    },
    "required": ["genre", "location", "date"],
}
ASK = "Find me a classical concert this weekend in Los Angeles with cheap tickets."


def _flat(text: str) -> str:
    return Grounding.of(text).text


def test_the_parameter_that_fits_the_value_keeps_it() -> None:
    args = {"genre": "Los Angeles", "location": "Los Angeles", "date": "this weekend"}
    assert doubled_keys(args, CONCERT, _flat(ASK)) == {"genre": "location"}  # "in Los Angeles": a place
    player = {"type": "object", "properties": {"player_name": STRING, "team": STRING}}
    stats = "Get point and rebound stats for player 'LeBron James' from last basketball game"
    both = {"player_name": "LeBron James", "team": "LeBron James"}
    assert doubled_keys(both, player, _flat(stats)) == {"team": "player_name"}  # "player 'LeBron James'"
    county = {"type": "object", "properties": {"entity": STRING, "county": STRING}}
    named = {"entity": "Santa Clara County", "county": "Santa Clara County"}
    assert doubled_keys(named, county, _flat("Housing prices in Santa Clara County")) == {"entity": "county"}
    # An enum that lists the value keeps it; the enum itself is never a guess to drop.
    athlete = {
        "type": "object",
        "properties": {"team": STRING, "sport": {"type": "string", "enum": ["Golf"]}},
    }
    assert doubled_keys({"team": "Golf", "sport": "Golf"}, athlete, _flat("A golf player")) == {
        "team": "sport"
    }
    # Nothing to tell them apart: the one written first keeps it.
    pair = {"type": "object", "properties": {"a": STRING, "b": STRING}}
    assert doubled_keys({"b": "Xbox", "a": "Xbox"}, pair, _flat("games on Xbox")) == {"a": "b"}


def test_a_value_said_twice_a_date_or_a_number_may_fill_two_parameters() -> None:
    trip = {"type": "object", "properties": {"origin": STRING, "destination": STRING}}
    assert (
        doubled_keys({"origin": "Paris", "destination": "Paris"}, trip, _flat("From Paris back to Paris"))
        == {}
    )
    stay = {"type": "object", "properties": {"check_in": STRING, "check_out": STRING}}
    day = {"check_in": "2023-05-01", "check_out": "2023-05-01"}
    assert doubled_keys(day, stay, _flat("A day room on 2023-05-01")) == {}
    assert doubled_keys({"origin": "12", "destination": "12"}, trip, _flat("bus 12")) == {}


def test_a_doubled_value_is_reported_where_required_and_dropped_where_optional() -> None:
    args = {"genre": "Los Angeles", "location": "Los Angeles", "date": "this weekend"}
    found = check_call(args, CONCERT, Grounding.of(ASK), "concert_search")
    assert found.unsaid == () and found.doubled == (("genre", "location"),)
    assert (found.found, found.total) == (3, 3)  # said, if likely another parameter's
    optional = {**CONCERT, "required": ["location", "date"]}
    assert check_call(args, optional, Grounding.of(ASK)).unsaid == ()
    assert unsaid_optional(args, optional, Grounding.of(ASK)) == ("genre",)


def test_the_re_ask_offers_the_words_beside_the_parameters_own() -> None:
    assert beside(
        ["classical", "Los Angeles", "cheap tickets", "classical concert"],
        ASK,
        "genre",
        "Genre of the concert.",
    ) == ["classical"]
    args = {"genre": "Los Angeles", "location": "Los Angeles", "date": "this weekend"}
    tool = ToolSpec("concert_search", "Find concerts by genre and city", CONCERT)
    narrowed = regrounded_tool(
        ToolCall("concert_search", args), tool, ("genre",), ASK, Grounding.of(ASK), 0.0, {"genre": "location"}
    )
    assert narrowed is not None
    asked, errors = narrowed
    assert asked.parameters["properties"]["genre"]["enum"] == ["classical"]
    assert asked.parameters["properties"]["location"] == {"const": "Los Angeles"}
    assert "'Los Angeles' is the location" in errors[0].message


def test_the_guard_leaves_an_optional_doubled_value_to_the_default() -> None:
    athlete = ToolSpec(
        "find_athlete",
        "Find the profile of an athlete",
        {"type": "object", "properties": {"name": STRING, "team": STRING}, "required": ["name"]},
    )
    ask = (Message("user", "Find me the detailed profile of basketball player Lebron James"),)
    call = ToolCall("find_athlete", {"name": "Lebron James", "team": "Lebron James"})
    guarded = run_guard_sync(guard_steps([call], [athlete], PRESETS["strict"], ask, may_answer=True))
    assert dict(guarded.calls[0].arguments) == {"name": "Lebron James"}
    assert [n.kind for n in guarded.interventions] == ["args_dropped"]


def test_a_number_in_a_string_parameter_beside_the_same_number_is_the_numbers() -> None:
    act = {"type": "object", "properties": {"act_name": STRING, "amendment_year": {"type": "integer"}}}
    text = _flat("Give me the details of Criminal Law Amendment Act of 2013.")
    assert doubled_keys({"act_name": "2013", "amendment_year": 2013}, act, text) == {
        "act_name": "amendment_year"
    }
    assert doubled_keys({"act_name": "Act 2013", "amendment_year": 2013}, act, text) == {}
    asked = beside(
        ["Amendment", "Criminal Law Amendment", "details", "Criminal Law"],
        text,
        "act_name",
        "The name of the act.",
    )
    assert asked == ["Criminal Law Amendment"]  # the longest of the spans beside "act"


def test_the_guard_asks_again_for_a_required_doubled_value_and_keeps_the_call_when_nothing_fits() -> None:
    tool = ToolSpec("concert_search", "Find concerts by genre and city", CONCERT)
    ask = (Message("user", ASK),)
    args = {"genre": "Los Angeles", "location": "Los Angeles", "date": "this weekend"}
    asked: list[FixArguments] = []

    def regenerate(request: Request) -> Regenerated:
        assert isinstance(request, FixArguments)
        asked.append(request)
        return Regenerated({**args, "genre": request.tool.parameters["properties"]["genre"]["enum"][0]})

    steps = guard_steps(
        [ToolCall("concert_search", args)],
        [tool],
        PRESETS["strict"],
        ask,
        can_regenerate=True,
        may_answer=True,
    )
    guarded = run_guard_sync(steps, regenerate)
    assert dict(guarded.calls[0].arguments) == {**args, "genre": "classical"}
    assert [n.kind for n in guarded.interventions] == ["args_grounded"] and len(asked) == 1
    # Nothing beside the parameter's words to offer: the call stands as the model wrote it.
    stats = "Get point and rebound stats for player 'LeBron James'"
    player = ToolSpec(
        "player_stats",
        "Stats of a player",
        {
            "type": "object",
            "properties": {"player_name": STRING, "team": STRING},
            "required": ["player_name", "team"],
        },
    )
    both = ToolCall("player_stats", {"player_name": "LeBron James", "team": "LeBron James"})
    steps = guard_steps(
        [both], [player], PRESETS["strict"], (Message("user", stats),), can_regenerate=True, may_answer=True
    )
    guarded = run_guard_sync(steps, regenerate)
    assert dict(guarded.calls[0].arguments) == dict(both.arguments) and len(asked) == 1


def test_a_time_of_day_is_the_time_parameters() -> None:
    trip = {"type": "object", "properties": {"date_of_journey": STRING, "journey_start_time": STRING}}
    text = _flat("Train tickets from Sacramento to Portland on April 22 at 10:00 AM")
    args = {"date_of_journey": "10:00 AM", "journey_start_time": "10:00 AM"}
    assert doubled_keys(args, trip, text) == {"date_of_journey": "journey_start_time"}
