"""Deciding and choosing: lexical relevance, the decision prior, enumerations."""

from __future__ import annotations

from typing import Any

import pytest

from tether.calls import ToolCall
from tether.chat import Message
from tether.grammar.formats.base import ToolSpec
from tether.selection.decision import DecisionModel, request_text, steering_for
from tether.selection.enumeration import enumerated_items
from tether.selection.relevance import content_words, rank_tools, stem, value_kinds, weight

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
    # After a tool result (an agent loop) the evidence is the next step's (tether.selection.next_step):
    # the one tool asked for has answered, so the task is done.
    made = Message("assistant", "", tool_calls=(ToolCall("get_weather", {"city": "Paris"}, "c1"),))
    loop = [*ask, made, Message("tool", "18 degrees", tool_call_id="c1")]
    assert (
        steering_for(loop, [WEATHER], model, decide=True, names=False).call_prior == -model.in_loop_done_prior
    )
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


def test_a_coding_agents_composed_values_never_count_against_a_call() -> None:
    from tether.selection.grounded import Grounding, grounded_share

    write = {"properties": {"filePath": {"type": "string"}, "content": {"type": "string"}}}
    bash = {"properties": {"command": {"type": "string"}, "note": {"type": "string"}}}
    source = Grounding.of("Create hello.txt saying hi, then run the tests")
    # The file's content and the command are the model's writing; the path it names is checked.
    assert grounded_share({"filePath": "hello.txt", "content": "print('hi')"}, write, source) == 1.0
    assert grounded_share({"filePath": "notes.md", "content": "hi"}, write, source) == 0.0
    assert grounded_share({"command": "pytest -q"}, bash, source) is None
    # Several lines are written, whatever the parameter is called; one invented line is not.
    assert grounded_share({"note": "line one\nline two"}, bash, source) is None
    assert grounded_share({"note": "Tokyo weather"}, bash, source) == 0.0


def test_the_enumerated_list_is_found_where_the_request_says_it() -> None:
    from tether.selection.enumeration import enumerated_list
    from tether.turns.layer0 import listed_range

    ask = "Get the weather in Paris, Berlin and Rome for 3 days"
    start, end = enumerated_list(ask) or (0, 0)
    assert "Paris, Berlin and Rome" in ask[start:end] and "days" not in ask[start:end]
    assert enumerated_list("What is the weather in Paris?") is None
    source = "System: be brief. Café notes\n" + ask  # a non-ASCII byte before the request
    lo, hi = listed_range(source, ask) or (0, 0)
    assert b"Paris, Berlin and Rome" in source.encode()[lo:hi]
    assert listed_range("something else entirely", ask) is None


def test_more_calls_are_asked_only_for_items_no_one_call_can_take() -> None:
    def tool(name: str, **props: dict[str, Any]) -> ToolSpec:
        return ToolSpec(name, name, {"type": "object", "properties": props})

    num = {"type": "number"}
    triangle = tool("triangle_area", a=num, b=num, c=num)
    factorial = tool("factorial", n={"type": "integer"})
    route = tool("route", start={"type": "string"}, stops={"type": "array", "items": {"type": "string"}})
    ask = [Message("user", "Compute it for 3, 4 and 5")]
    for tools, bias in (([triangle], 0.0), ([factorial], 3.0), ([route], 0.0), ([factorial, triangle], 0.0)):
        s = steering_for(ask, tools, DecisionModel(), decide=True, names=True, cap=True)
        assert (s.max_calls, s.short_list_bias) == (3, bias), [t.name for t in tools]
    one = steering_for(
        [Message("user", "Factorial of 5")], [factorial], DecisionModel(), decide=True, names=True, cap=True
    )
    assert (one.max_calls, one.short_list_bias) == (1, 0.0)


def test_a_switch_is_mentioned_when_its_telling_words_are() -> None:
    from tether.selection.relevance import mentioned_flags

    flag = {"type": "boolean"}
    tool = ToolSpec(
        "forecast",
        "a forecast",
        {
            "type": "object",
            "properties": {
                "include_precipitation": flag,
                "avoid_tolls": flag,
                "detailed": flag,
                "include": flag,  # no telling word: never mentioned
                "precipitation_unit": {"type": "string"},  # not a switch
            },
        },
    )
    said = "A detailed forecast including precipitation; we avoid tolls"
    assert mentioned_flags(said, [tool]) == {
        "forecast": frozenset({"include_precipitation", "avoid_tolls", "detailed"})
    }
    assert mentioned_flags("The forecast for tomorrow, and include everything", [tool]) == {}
    assert mentioned_flags("tolls are fine", [tool]) == {}  # "avoid" is not said


def test_optional_enum_values_the_request_names_are_found() -> None:
    from tether.selection.relevance import mentioned_choices

    params = {
        "type": "object",
        "properties": {
            "location": {"type": "string"},
            "department": {"type": "string", "enum": ["General Medicine", "Emergency", "Pediatrics"]},
            "size": {"type": "string", "enum": ["small", "medium", "large"]},
            "categories": {
                "type": "array",
                "items": {"type": "string", "enum": ["Organic", "Fruits", "Vegetables"]},
            },
            "scope": {"type": "string", "enum": ["all", "some"]},  # "all" is too common to say anything
            "unit": {"type": "string", "enum": ["km", "miles"]},  # required: the model's to write
        },
        "required": ["location", "unit"],
    }
    said = "Find a small hospital with a pediatrics department and vegetables and organic fruits, all in km"
    assert mentioned_choices(said, params) == {
        "department": "Pediatrics",
        "size": "small",
        "categories": ["Vegetables", "Organic", "Fruits"],  # in the order said
    }
    # Two sizes named: no single value to take; a general medicine ward names the two-word value.
    assert mentioned_choices("small or large, general medicine", params) == {"department": "General Medicine"}
    assert mentioned_choices("a hospital nearby", params) == {}
    unit = {"type": "object", "properties": {"unit": {"type": "string", "enum": ["meter", "feet"]}}}
    assert mentioned_choices("its height in feet", {**unit, "required": ["unit"]}) == {}
    assert mentioned_choices("its height in feet", {**unit, "required": ["unit"]}, required=True) == {
        "unit": "feet"
    }
    # A code in capitals names the word it begins ("euros" is EUR); lower-case or short ones do not.
    money = {"type": "object", "properties": {"currency": {"type": "string", "enum": ["USD", "EUR", "GBP"]}}}
    assert mentioned_choices("Move 250.75 euros to savings", money) == {"currency": "EUR"}
    assert mentioned_choices("Move 250.75 to savings", money) == {}
    short = {"type": "object", "properties": {"state": {"type": "string", "enum": ["CA", "NY"]}}}
    assert mentioned_choices("can you check", short) == {}
    # Choices quoted in a description count as an enum of them; one quoted value is only an example.
    quoted = {
        "type": "object",
        "properties": {
            "mode": {"type": "string", "description": "Mode of analysis, e.g. 'static' or 'dynamic'."},
            "city": {"type": "string", "description": "A city, e.g. 'Denver'."},
        },
    }
    assert mentioned_choices("A dynamic analysis of the building in Denver", quoted) == {"mode": "dynamic"}


def test_strings_are_found_from_a_word_start_by_stems_and_as_dates() -> None:
    from tether.selection.grounded import Grounding

    said = Grounding.of("Schedule the team lunch on March 14th, 2025 for the pandas case; also 10/05/2024")
    assert said.has_string("Team Lunch") and said.has_string("panda")  # case, stems
    assert said.has_string("lunch on Mar")  # a prefix of the text from a word start
    assert not said.has_string("CA") and not said.has_string("unch")  # inside a word
    assert said.has_string("2025-03-14") and said.has_string("14 March 2025")  # one date, other writings
    assert said.has_string("2024-10-05") and said.has_string("2024-05-10")  # 10/05: either reading
    assert not said.has_string("2025-03-15")


def test_identifiers_echoes_and_times_of_day_must_be_said_in_full() -> None:
    from tether.selection.grounded import Grounding, check_call, echoes

    said = Grounding.of("His profile? Move it to the 15th of April 2021 at 1:45 pm. What is your name?")
    assert not said.has_string("his_id") and said.has_string("his profile")  # one token: every part
    assert said.has_string("2021-04-15T13:45:00Z") and said.has_string("2021-04-15")
    assert not said.has_string("2021-04-15T15:45:00Z")  # the date said, another time of day
    assert echoes("name", "introduce_person", "name") and echoes("get_response", "get_response", "q")
    assert echoes("Strings", "concat_strings", "items") and not echoes("Ann", "introduce_person", "name")
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    assert check_call({"name": "name"}, schema, said, "introduce_person").unsaid == ("name",)


def test_values_inside_objects_count_toward_the_share_but_not_as_unsaid() -> None:
    from tether.selection.grounded import Grounding, check_call

    box = {"type": "object", "properties": {"lane": {"type": "string"}, "width": {"type": "number"}}}
    schema = {
        "type": "object",
        "properties": {"lane": box, "boxes": {"type": "array", "items": box}},
        "required": ["lane"],
    }
    said = Grounding.of("Compute the headway of this image")
    found = check_call({"lane": {"lane": "regular", "width": 1}, "boxes": [{"width": 2}]}, schema, said)
    assert (found.found, found.total, found.unsaid) == (0, 3, ())
    said = Grounding.of("The left lane is 3.5 wide")
    assert check_call({"lane": {"lane": "left", "width": 3.5}}, schema, said).share == 1.0


def test_optional_values_nobody_said_that_override_the_default_are_found() -> None:
    from tether.selection.grounded import Grounding, unsaid_optional

    schema = {
        "type": "object",
        "properties": {
            "host": {"type": "string"},
            "username": {"type": "string", "default": "postgres"},
            "port": {"type": "integer", "default": 5432},
            "email": {"type": "string"},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "content": {"type": "string"},
        },
        "required": ["host"],
    }
    said = Grounding.of("Add the server at 192.168.0.5 for Adriel, tagged prod")
    call = {
        "host": "10.0.0.1",  # required: the abstention's business, not this
        "username": "admin",
        "port": 5432,  # the default: nothing to override
        "email": "Adriel@Adriel.com",
        "mode": "b",  # an enum: a choice, not a span
        "tags": ["prod", "eu"],
        "content": "a file the model writes",
    }
    assert unsaid_optional(call, schema, said, "add_server") == ("username", "email", "tags")
    assert unsaid_optional({"host": "x", "tags": ["prod"]}, schema, said) == ()
    # A choice is dropped only with a default to fall back on, and when the request does not name it.
    choices = {
        "type": "object",
        "properties": {
            "show_type": {"type": "string", "enum": ["regular", "imax", "dontcare"], "default": "dontcare"},
            "format": {"type": "string", "enum": ["2d", "3d"]},
            "has_garage": {"type": "boolean", "default": False},
            "in_unit_laundry": {"type": "boolean", "default": False},
        },
    }
    said = Grounding.of("A rental with in-unit laundry, an IMAX screen nearby")
    guess = {"show_type": "regular", "format": "3d", "has_garage": True, "in_unit_laundry": True}
    assert unsaid_optional(guess, choices, said, flags=frozenset({"in_unit_laundry"})) == (
        "show_type",
        "has_garage",
    )
    assert (
        unsaid_optional({**guess, "show_type": "imax"}, choices, said, flags=frozenset())[0] == "has_garage"
    )
    # A string whose description quotes its choices is a choice too: "24 hour format" keeps "24h".
    quoted = {
        "type": "object",
        "properties": {"display_format": {"type": "string", "description": "'12h' or '24h'"}},
    }
    assert (
        unsaid_optional({"display_format": "24h"}, quoted, Grounding.of("London time, 24 hour format")) == ()
    )


def test_a_required_value_nobody_said_is_reported() -> None:
    from tether.selection.grounded import Grounding, check_call

    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "season": {"type": "string"},
            "limit": {"type": "integer"},
            "unit": {"type": "string", "enum": ["c", "f"]},
        },
        "required": ["city", "season", "unit"],
    }
    said = Grounding.of("The top scorer of Manchester United")
    found = check_call(
        {"city": "Manchester United", "season": "2020-2021", "limit": 5, "unit": "c"}, schema, said
    )
    assert (found.found, found.total, found.unsaid) == (1, 3, ("season",))  # limit is optional; unit an enum
    assert check_call({"city": "Manchester", "unit": "f"}, schema, said).unsaid == ()


def test_the_request_spans_are_its_named_things() -> None:
    from tether.selection.grounded import request_spans

    assert request_spans("What is the capital of Brazil?") == ("capital", "Brazil", "capital of Brazil")
    spans = request_spans("Find the size of the sculpture with title 'David' by Michelangelo.")
    assert spans[0] == "David" and "Michelangelo" in spans and "sculpture with title" in spans
    assert not any(s.startswith(("the ", "of ")) or s.endswith((" the", " of")) for s in spans)
    # Clauses bound a span; a number alone is a number, not a name; quoted text stays whole.
    spans = request_spans('Book 2 rooms in Paris, near "Gare du Nord"; 3 nights')
    assert "Gare du Nord" in spans and "Paris" in spans and "rooms in Paris" in spans
    assert "2" not in spans and not any("Paris near" in s for s in spans)
    assert len(request_spans(" ".join(f"word{i}" for i in range(100)), limit=10)) == 10
    # A sentence's first word is the request's verb unless it is rare enough to be a name.
    assert request_spans("Find a jazz concert. Brazil is big.")[:3] == ("jazz", "concert", "jazz concert")
    assert "Calculate" in request_spans("Calculate the area")


def test_a_value_is_said_by_its_kind() -> None:
    from tether.selection.grounded import Grounding, said

    spoken = Grounding.of("Dividends of Apple Inc for the last 5 years, in USD")
    assert said("Apple Inc", spoken) and said(5, spoken) and said(["Apple", "USD"], spoken)
    assert not said("quarterly", spoken) and not said(7, spoken) and not said(["Apple", "EUR"], spoken)
    assert not said(True, spoken) and not said(None, spoken) and not said([], spoken)
    assert said({"company": "Apple Inc"}, spoken) and not said({"freq": "annual"}, spoken)


def test_a_variant_only_reorders_or_changes_what_nobody_said() -> None:
    from tether.selection.grounded import Grounding, variant_keys

    schema = {
        "type": "object",
        "properties": {
            "company": {"type": "string"},
            "rival": {"type": "string"},
            "frequency": {"type": "string"},
            "traffic": {"type": "boolean"},
        },
        "required": ["company"],
    }
    spoken = Grounding.of("Court cases between Apple and Samsung, in quarterly reports")
    first = {"company": "Apple", "rival": "Samsung"}
    assert variant_keys(first, {"company": "Samsung", "rival": "Apple"}, schema, spoken) == ()
    hedged = {"company": "Apple", "frequency": "annually"}
    assert variant_keys({"company": "Apple", "frequency": "monthly"}, hedged, schema, spoken) == (
        "frequency",
    )
    assert variant_keys({"company": "Apple"}, hedged, schema, spoken) == ("frequency",)  # set in one only
    both = ({"company": "Apple", "traffic": True}, {"company": "Apple", "traffic": False})
    assert variant_keys(*both, schema, spoken) == ("traffic",)
    # What the request says makes a second call a second request, as does a required value.
    assert variant_keys(*both, schema, spoken, frozenset({"traffic"})) is None
    said_one = {"company": "Apple", "frequency": "quarterly"}
    assert variant_keys({"company": "Apple", "frequency": "monthly"}, said_one, schema, spoken) is None
    assert variant_keys(first, {"company": "Samsung", "rival": "Nokia"}, schema, spoken) is None
    assert variant_keys(first, dict(first), schema, spoken) is None  # identical: a duplicate, not a variant


def test_a_switch_the_request_turns_on_or_off_is_named_with_its_value() -> None:
    from tether.selection.relevance import mentioned_switches

    params = {
        "properties": {
            "has_garage": {"type": "boolean", "default": False},
            "in_unit_laundry": {"type": "boolean"},
            "has_laundry_service": {"type": "string", "enum": ["True", "False", "dontcare"]},
            "is_unisex": {"type": "boolean"},
            "city": {"type": "string"},
        }
    }
    ask = "A rental in San Francisco? No need for a garage, but I'd prefer it to have in-unit laundry."
    assert mentioned_switches(ask, params) == {"has_garage": False, "in_unit_laundry": True}
    assert mentioned_switches("It should have laundry service", params) == {"has_laundry_service": "True"}
    assert mentioned_switches("Find me a unisex salon in the city", params) == {"is_unisex": True}
    assert mentioned_switches("A salon, not in the city", params) == {}  # only on/off parameters


def test_a_value_counts_as_the_word_of_its_kind() -> None:
    assert value_kinds("Read handbook.md, then src/app/main.py").split() == [
        "Read",
        "file",
        ",",
        "then",
        "file",
    ]
    assert value_kinds("Email alice@example.com or see https://x.org/a.txt").split() == [
        *("Email", "email", "or", "see", "url"),
    ]
    # Not files: abbreviations, versions, dates, units, a word run into the next after a dot.
    for text in ("Liverpool F.C. won", "v1.2.3", "on 09/09/2023", "at 30 km/h", "a long time.will you"):
        assert value_kinds(text) == text
    read = ToolSpec(
        "read_file", "Read a text file.", {"type": "object", "properties": {"path": {"type": "string"}}}
    )
    assert rank_tools("Read handbook.md", [read])[0].name == 1.0  # "read" and the file it names


def test_a_value_the_description_gives_as_its_default_counts_as_said() -> None:
    from tether.schema_kinds import described_default
    from tether.selection.grounded import Grounding, check_call

    assert described_default({"description": "The size of the deck. Default is 52."}) == "52"
    assert described_default({"description": "Unit of the result (default: 'c')."}) == "c"
    # Not a value: the clause goes on, or the schema has its own default.
    assert described_default({"description": "Default is the current time."}) is None
    assert described_default({"description": "Defaults to miles if not specified."}) is None
    assert described_default({"description": "Default is 5.", "default": 5}) is None
    schema = {
        "type": "object",
        "properties": {
            "deck_size": {"type": "integer", "description": "The size of the deck. Default is 52."},
            "hand_size": {"type": "integer", "description": "The size of the hand."},
        },
        "required": ["deck_size", "hand_size"],
    }
    said = Grounding.of("What is the probability of getting a full house in poker?")
    assert check_call({"deck_size": 52, "hand_size": 5}, schema, said).unsaid == ("hand_size",)
    assert check_call({"deck_size": 50, "hand_size": 5}, schema, said).unsaid == ("deck_size", "hand_size")


def test_an_identifier_is_said_only_as_the_text_writes_it() -> None:
    from tether.selection.grounded import Grounding, check_call

    schema = {"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}
    said = Grounding.of("Show me his profile? The account of ann_lee is fine too.")
    assert check_call({"user_id": "his_profile"}, schema, said).unsaid == ("user_id",)  # composed
    assert check_call({"user_id": "ann_lee"}, schema, said).unsaid == ()
    other = {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}
    assert check_call({"topic": "his_profile"}, other, said).unsaid == ()  # a name may join its words


def test_an_optional_value_outside_the_described_choices_gives_way_to_the_described_default() -> None:
    from tether.selection.grounded import Grounding, unsaid_optional

    params = {
        "type": "object",
        "properties": {
            "company": {"type": "string"},
            "data_type": {
                "type": "string",
                "description": "The type of price data (e.g., 'Open', 'Close', 'High', 'Low'). Default is 'Close'.",
            },
        },
        "required": ["company"],
    }
    said = Grounding.of("What's the price of Amazon stock for the last 3 days?")
    assert unsaid_optional({"company": "Amazon", "data_type": "price"}, params, said) == ("data_type",)
    assert unsaid_optional({"company": "Amazon", "data_type": "High"}, params, said) == ()


def test_a_url_parameter_holds_only_what_reads_as_a_url() -> None:
    """ "the queues for interface 'eth1' on node 'Node5'": ``url: "eth1"`` is said, but no URL."""
    from tether.selection.grounded import Grounding, check_call

    schema = {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}
    said = Grounding.of("Can you retrieve the list of queues for interface 'eth1' on node 'Node5'?")
    assert check_call({"url": "eth1"}, schema, said, "requests_get").unsaid == ("url",)
    fetch = Grounding.of("Fetch https://api.example.com/queues and the page at example.org/about")
    assert check_call({"url": "https://api.example.com/queues"}, schema, fetch, "requests_get").unsaid == ()
    assert check_call({"url": "example.org/about"}, schema, fetch, "requests_get").unsaid == ()
    endpoint = Grounding.of("Call the users/list endpoint, then page two at example.com?page=2")
    assert check_call({"url": "users/list"}, schema, endpoint, "requests_get").unsaid == ()
    assert check_call({"url": "example.com?page=2"}, schema, endpoint, "requests_get").unsaid == ()
