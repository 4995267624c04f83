"""The grounding stage's second chances: the narrowed re-ask and the variant merge (no model)."""

from __future__ import annotations

from tether.calls import ToolCall
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.values import merge_variant, regrounded_tool
from tether.selection.grounded import Grounding


def tool(name: str, description: str, optional: tuple[str, ...] = (), **props: dict[str, object]) -> ToolSpec:
    """A tool whose parameters are ``props``, all required but the ``optional`` ones."""
    required = [k for k in props if k not in optional]
    return ToolSpec(name, description, {"type": "object", "properties": props, "required": required})


STRING, INTEGER = {"type": "string"}, {"type": "integer"}
CAPITAL = tool("country_capital", "The capital city of a country", ("year",), country=STRING, year=INTEGER)
SCULPTURE = tool("sculpture_details", "Details of a sculpture", artist=STRING, title=STRING)


def test_the_re_ask_limits_the_unsaid_strings_to_the_request_and_fixes_the_rest() -> None:
    ask = "Find the size of the sculpture with title 'David' by Michelangelo."
    call = ToolCall("sculpture_details", {"artist": "Moses", "title": "David"})
    narrowed = regrounded_tool(call, SCULPTURE, ("artist",), ask, Grounding.of(ask), 0.3)
    assert narrowed is not None
    tool, errors = narrowed
    props = tool.parameters["properties"]
    assert props["title"] == {"const": "David"} and tool.parameters["required"] == ["artist", "title"]
    assert tool.parameters["additionalProperties"] is False  # nothing the call did not set is added
    # A value fills one parameter: spans sharing a word with "David" are not offered for the artist.
    assert "Michelangelo" in props["artist"]["enum"] and not any(
        "David" in s for s in props["artist"]["enum"]
    )
    assert [e.path for e in errors] == ["artist"] and "'Moses'" in errors[0].message


def _ask(call: ToolCall, tool: ToolSpec, unsaid: str, text: str, floor: float = 0.3) -> object:
    return regrounded_tool(call, tool, (unsaid,), text, Grounding.of(text), floor)


def test_no_re_ask_for_a_tool_that_does_not_fit_or_a_value_that_is_not_a_name() -> None:
    ask = "What is the capital of Brazil?"
    call = ToolCall("country_capital", {"country": "Bahia"})
    narrowed = regrounded_tool(call, CAPITAL, ("country",), ask, Grounding.of(ask), 0.3)
    assert narrowed is not None and narrowed[0].parameters["properties"] == {
        "country": {"type": "string", "enum": ["Brazil"]}
    }
    # Only spans that begin as the model's value began: "Peru" was no attempt at "Brazil".
    assert _ask(ToolCall("country_capital", {"country": "Peru"}), CAPITAL, "country", ask) is None
    assert _ask(call, CAPITAL, "country", "Who painted the Mona Lisa in Bologna?") is None  # does not fit
    assert _ask(call, CAPITAL, "country", "Who painted the Mona Lisa in Bologna?", 0.0) is not None
    numbered = ToolCall("country_capital", {"country": "Brazil", "year": 1990})
    assert _ask(numbered, CAPITAL, "year", ask) is None  # a number nobody said has no span
    assert _ask(call, CAPITAL, "country", "the of a", 0.0) is None  # nothing named
    # An optional value nobody said is left out of the re-ask, a said one is fixed.
    dated = ToolCall("country_capital", {"country": "Bahia", "year": 1990})
    narrowed = regrounded_tool(dated, CAPITAL, ("country",), ask, Grounding.of(ask), 0.3)
    assert narrowed is not None and list(narrowed[0].parameters["properties"]) == ["country"]
    said = "What was the capital of Brazil in 1990?"
    narrowed = regrounded_tool(dated, CAPITAL, ("country",), said, Grounding.of(said), 0.3)
    assert narrowed is not None and narrowed[0].parameters["properties"]["year"] == {"const": 1990}


BEATS = tool(
    "detect_beats_and_filter",
    "Detect the beats of an audio file and filter them by confidence",
    capture_percentage={"type": "integer", "description": "The least confidence, in percent"},
    confidence_window_size={"type": "number"},
)


def test_an_unsaid_number_is_asked_again_among_the_request_numbers_no_other_value_uses() -> None:
    ask = "Detect the beats and filter out beats with a confidence below 50%, using a 0.5-second window."
    call = ToolCall("detect_beats_and_filter", {"capture_percentage": 0, "confidence_window_size": 0.5})
    narrowed = regrounded_tool(call, BEATS, ("capture_percentage",), ask, Grounding.of(ask), 0.3)
    assert narrowed is not None
    tool, errors = narrowed
    props = tool.parameters["properties"]
    # 0.5 is the window's (and 50% read as a fraction): an integer parameter gets 50 alone.
    assert props["capture_percentage"] == {"type": "number", "enum": [50]}
    assert props["confidence_window_size"] == {"const": 0.5}
    assert errors[0].expected == "numbers of the request" and "'capture_percentage'" not in errors[0].message
    bare = "Detect the beats of my audio file."
    assert regrounded_tool(call, BEATS, ("capture_percentage",), bare, Grounding.of(bare), 0.3) is None
    # Digits with a leading zero ("05") are the number JSON writes, not a parse error.
    zero = "Detect the beats below 50% in track 05 of the album."
    narrowed = regrounded_tool(call, BEATS, ("capture_percentage",), zero, Grounding.of(zero), 0.3)
    assert narrowed is not None
    assert narrowed[0].parameters["properties"]["capture_percentage"]["enum"] == [50, 5]


def test_a_garbled_date_time_is_asked_again_among_the_said_ones_written_alike() -> None:
    event = tool(
        "reschedule_event",
        "Move an event to a new date and time",
        event_identifier=STRING,
        new_datetime=STRING,
    )
    ask = "Reschedule the event 'med123' to the 15th of April 2021 at 1:45 pm, UTC."
    call = ToolCall(
        "reschedule_event", {"event_identifier": "med123", "new_datetime": "2021-04-15T15:45:00Z"}
    )
    narrowed = regrounded_tool(call, event, ("new_datetime",), ask, Grounding.of(ask), 0.3)
    assert narrowed is not None
    assert narrowed[0].parameters["properties"]["new_datetime"]["enum"] == ["2021-04-15T13:45:00Z"]
    dated = ToolCall("reschedule_event", {"event_identifier": "med123", "new_datetime": "2021-04-16"})
    narrowed = regrounded_tool(dated, event, ("new_datetime",), ask, Grounding.of(ask), 0.3)
    assert narrowed is not None and narrowed[0].parameters["properties"]["new_datetime"]["enum"] == [
        "2021-04-15"
    ]
    undated = "Reschedule the event 'med123' to later."
    assert regrounded_tool(call, event, ("new_datetime",), undated, Grounding.of(undated), 0.3) is None


def test_a_variant_merges_into_the_earlier_call_without_the_disputed_values() -> None:
    tool = ToolSpec(
        "dividends",
        "Dividend history of a company",
        {
            "type": "object",
            "properties": {"company": {"type": "string"}, "frequency": {"type": "string"}},
            "required": ["company"],
        },
    )
    ask = "Dividends of Apple Inc"
    spoken = Grounding.of(ask)
    earlier = [ToolCall("dividends", {"company": "Apple Inc", "frequency": "quarterly"})]
    merged = merge_variant(
        ToolCall("dividends", {"company": "Apple Inc", "frequency": "annually"}), earlier, tool, spoken, ask
    )
    assert merged is not None
    at, kept, detail = merged
    assert at == 0 and dict(kept.arguments) == {"company": "Apple Inc"} and "frequency" in detail
    assert "variant_merged" in kept.repairs
    other = ToolCall("dividends", {"company": "Microsoft"})
    assert merge_variant(other, earlier, tool, Grounding.of("Apple Inc and Microsoft"), ask) is None


def test_the_narrowed_tool_compiles_for_a_remote_engine_too() -> None:
    from tether.grammar.remote import compile_gbnf
    from tether.grammar.remote.structural_tag import compile_vllm
    from tether.grammar.spec import JsonSpec

    ask = "Find the size of the sculpture with title 'David' by Michelangelo."
    call = ToolCall("sculpture_details", {"artist": "Moses", "title": "David"})
    narrowed = regrounded_tool(call, SCULPTURE, ("artist",), ask, Grounding.of(ask), 0.3)
    assert narrowed is not None
    grammar = compile_gbnf(JsonSpec.of_tool(narrowed[0]))
    assert (
        grammar is not None and '"\\"Michelangelo\\""' in grammar.grammar and "Moses" not in grammar.grammar
    )
    assert compile_vllm(JsonSpec.of_tool(narrowed[0])) is not None


def test_a_file_parameter_is_asked_again_with_the_files_the_request_names() -> None:
    # opencode's read tool fits "Which version…" poorly in words, and the model began "read": the file
    # the request names is its value all the same.
    read = tool("read", "Read a file or directory from the local filesystem.", filePath=STRING)
    ask = "Which version number is written in VERSION.txt?"
    narrowed = _ask(ToolCall("read", {"filePath": "read"}), read, "filePath", ask)
    assert narrowed is not None
    assert narrowed[0].parameters["properties"] == {"filePath": {"type": "string", "enum": ["VERSION.txt"]}}
    assert _ask(ToolCall("read", {"filePath": "read"}), read, "filePath", "Which version is this?") is None


SCHEDULE = tool("sports_team_get_schedule", "The schedule of a team", team_name=STRING, league=STRING)
POKER = tool(
    "poker_probability_full_house",
    "The probability of a full house",
    deck_size={"type": "integer", "description": "The size of the deck. Default is 52."},
    hand_size={"type": "integer", "description": "The size of the hand. Default is 5."},
)


def test_a_value_the_model_began_late_is_asked_again_among_the_spans_it_ends() -> None:
    ask = "Give me the schedule of Manchester United in Premier League."
    call = ToolCall("sports_team_get_schedule", {"team_name": "Manchester United", "league": "League"})
    narrowed = _ask(call, SCHEDULE, "league", ask)
    assert narrowed is not None
    enum = narrowed[0].parameters["properties"]["league"]["enum"]  # type: ignore[attr-defined]
    # "League" alone is the parameter's name echoed: never offered again.
    assert "Premier League" in enum and "League" not in enum


def test_an_unsaid_number_may_be_the_default_its_description_states() -> None:
    ask = "What is the probability of getting a full house in poker?"
    call = ToolCall("poker_probability_full_house", {"deck_size": 5, "hand_size": 5})
    narrowed = _ask(call, POKER, "deck_size", ask)
    assert narrowed is not None
    assert narrowed[0].parameters["properties"]["deck_size"]["enum"] == [52]  # type: ignore[attr-defined]
    undescribed = tool("deal", "Deal a hand", deck_size=INTEGER)
    assert _ask(ToolCall("deal", {"deck_size": 5}), undescribed, "deck_size", ask) is None
