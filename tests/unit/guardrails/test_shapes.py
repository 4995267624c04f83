"""Values in the shape their parameter asks for: dates and US state codes, only where unambiguous."""

from __future__ import annotations

import pytest

from tether.calls import ToolCall
from tether.chat import Message
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.pipeline import guard_steps, run_guard_sync
from tether.guardrails.presets import PRESETS
from tether.guardrails.shapes import reshape, wanted_shape

ISO = {"type": "string", "description": "The date, in the format YYYY-MM-DD."}
US = {"type": "string", "description": "Date as MM/DD/YYYY"}
STATE = {"type": "string", "description": "The two-letter state abbreviation, e.g. 'CA'."}


@pytest.mark.parametrize(
    ("spec", "shape"),
    [
        (ISO, "date"),
        ({"type": "string", "format": "date"}, "date"),
        (US, "us-date"),
        (STATE, "state-code"),
        ({"type": "string", "description": "Timestamp YYYY-MM-DDTHH:MM:SS"}, "date-time"),
        ({"type": "string", "description": "The state of the order"}, None),
        ({"type": "string", "description": "The city"}, None),
        ({"type": "string", "description": "Departure time, in 24-hour format 'HH:MM'."}, "time"),
        ({"type": "string", "description": "Start, as HH:MM:SS"}, "time-s"),
        ({"type": "string", "description": "The country. Use ISO 3166-1 alpha-2 codes."}, "country-code"),
    ],
)
def test_the_shape_comes_from_the_schema_or_the_description(spec: dict[str, str], shape: str | None) -> None:
    assert wanted_shape(spec) == shape


@pytest.mark.parametrize(
    ("value", "shape", "out"),
    [
        ("April 25, 2023", "date", "2023-04-25"),
        ("25th of April 2023", "date", "2023-04-25"),
        ("March 8th, 2023", "date", "2023-03-08"),
        ("Sept. 3 2024", "date", "2024-09-03"),
        ("2023/4/5", "date", "2023-04-05"),
        ("04/25/2023", "date", "2023-04-25"),
        ("25/04/2023", "date", "2023-04-25"),
        ("2023-04-25", "date", None),  # in shape already
        ("05/04/2023", "date", None),  # May 4th or 5 April: left alone
        ("February 30, 2023", "date", None),  # not a date
        ("next Friday", "date", None),
        ("April 25, 2023", "us-date", "04/25/2023"),
        ("10:00 AM", "time", "10:00"),
        ("2 pm", "time-s", "14:00:00"),
        ("14:30", "time", None),  # in shape already
        ("noon", "time", None),
        ("UK", "country-code", "GB"),
        ("Japan", "country-code", "JP"),
        ("JP", "country-code", None),
        ("Narnia", "country-code", None),
        ("California", "state-code", "CA"),
        ("new york", "state-code", "NY"),
        ("CA", "state-code", None),
        ("Narnia", "state-code", None),
        (42, "date", None),
    ],
)
def test_a_value_is_reshaped_only_when_it_reads_unambiguously(
    value: object, shape: str, out: str | None
) -> None:
    assert reshape(value, shape) == out


def test_the_guard_reshapes_and_notes_it_under_strict_only() -> None:
    tool = ToolSpec("get_weather", "", {"type": "object", "properties": {"date": ISO, "state": STATE}})
    ask = (Message("user", "Weather in Fresno, California on April 25, 2023?"),)
    call = ToolCall("get_weather", {"date": "April 25, 2023", "state": "California"})
    strict = run_guard_sync(guard_steps([call], [tool], PRESETS["strict"], ask))
    assert dict(strict.calls[0].arguments) == {"date": "2023-04-25", "state": "CA"}
    assert [n.kind for n in strict.interventions] == ["args_reshaped"]
    full = run_guard_sync(guard_steps([call], [tool], PRESETS["full"], ask))
    assert dict(full.calls[0].arguments) == {"date": "April 25, 2023", "state": "California"}


@pytest.mark.parametrize(
    ("description", "value", "out"),
    [
        ("The city, in the format of 'City, State', such as 'Berkeley, CA'.", "Pittsburgh", "Pittsburgh, PA"),
        ("City name, e.g. 'New York, NY'", "New York", "New York, NY"),
        ("City name, e.g. 'New York, NY'", "san jose", "san jose, CA"),
        ("City name, e.g. 'New York, NY'", "Springfield", None),  # many Springfields: left alone
        ("City name, e.g. 'New York, NY'", "Pittsburgh, PA", None),  # in shape already
        ("City name, e.g. 'New York, NY'", "Atlantis", None),
        ("The location, in the format of 'City, Country'.", "Rio de Janeiro", "Rio de Janeiro, Brazil"),
        ("The city to search", "Pittsburgh", None),  # no shape asked
    ],
)
def test_a_place_gets_the_qualifier_its_parameter_asks_for(
    description: str, value: str, out: str | None
) -> None:
    shape = wanted_shape({"type": "string", "description": description})
    assert (reshape(value, shape) if shape else None) == out


def test_a_date_time_parameter_gets_one_iso_date_and_time_of_day() -> None:
    iso_z = {"type": "string", "description": "The new date and time, ISO-8601 (YYYY-MM-DDTHH:MM:SSZ)."}
    assert wanted_shape(iso_z) == "date-time-z"
    assert wanted_shape({"type": "string", "format": "date-time"}) == "date-time"
    assert wanted_shape({"type": "string", "description": "Start, as YYYY-MM-DD HH:MM"}) == "date-time"
    assert reshape("15th of April 2021 at 1:45 pm, UTC", "date-time-z") == "2021-04-15T13:45:00Z"
    assert reshape("April 25, 2023 at 10 am UTC", "date-time") == "2023-04-25T10:00:00Z"  # said in UTC
    assert reshape("2023-04-25", "date-time") == "2023-04-25T00:00:00"
    assert reshape("2023-04-25T10:00:00", "date-time") is None  # in shape already
    assert reshape("05/04/2023 at 1 pm", "date-time") is None  # May 4th or 5 April
    assert reshape("April 25, 2023 from 1 pm to 3 pm", "date-time") is None  # two times: which?


def test_a_date_without_a_year_is_dated_in_the_one_year_the_request_states() -> None:
    from tether.guardrails.shapes import said_year

    ask = "I'm looking for a house to book from May 15th to May 22nd, 2023 for two adults."
    assert said_year(ask) == 2023
    assert said_year("From May 15th, 2023 to Jan 2nd, 2024") is None  # two years: which one?
    assert reshape("May 15th", "us-date", 2023) == "05/15/2023"
    assert reshape("22nd of May", "date", 2023) == "2023-05-22"
    assert reshape("May 15th", "us-date") is None  # no year said: left as written
    tool = ToolSpec("book_house", "", {"type": "object", "properties": {"check_in_date": US}})
    call = ToolCall("book_house", {"check_in_date": "May 15th"})
    guarded = run_guard_sync(guard_steps([call], [tool], PRESETS["strict"], (Message("user", ask),)))
    assert dict(guarded.calls[0].arguments) == {"check_in_date": "05/15/2023"}


def test_a_sentence_copied_into_a_place_gives_the_place_it_ends_with() -> None:
    sentence = "Search for therapist help my mental health issues in san jose"
    assert reshape(sentence, "city-state") == "san jose, CA"
    assert reshape("a trip to Rio de Janeiro", "city-country") == "Rio de Janeiro, Brazil"
    assert reshape("find a dentist in Springfield", "city-state") is None  # many Springfields
    assert reshape("the best place for sushi", "city-state") is None


@pytest.mark.parametrize(
    ("text", "day"),
    [
        ("What's the weather in New York tomorrow? today is 2023.10.1", "2023-10-02"),
        ("Today is March 3, 2025. Book it for next Friday.", "2025-03-07"),
        ("Today's date: Sat Dec 06 2026\nWhat happened 3 days ago?", "2026-12-03"),
        ("Book a table for tomorrow.", None),  # no today stated: nothing to count from
        ("Today is 2025-03-14. Lunch tomorrow, dinner on March 20.", None),  # another day named
        ("Today is 2025-03-14. From tomorrow until April 2, 2025.", None),
        ("Today is 2025-03-14. Anything on today or tomorrow?", None),  # two relative days
    ],
)
def test_a_relative_day_counts_from_the_date_stated_as_today(text: str, day: str | None) -> None:
    from tether.grammar.datetimes import meant_day

    found = meant_day(text)
    assert (found.isoformat() if found else None) == day


def test_the_guard_dates_tomorrow_from_the_stated_today_where_one_date_is_asked() -> None:
    ask = (Message("user", "What's the weather going to be like in New York tomorrow? today is 2023.10.1"),)
    weather = ToolSpec("get_weather", "", {"type": "object", "properties": {"city": STATE, "date": ISO}})
    call = ToolCall("get_weather", {"date": "2023-10-01"})
    guarded = run_guard_sync(guard_steps([call], [weather], PRESETS["strict"], ask))
    assert dict(guarded.calls[0].arguments) == {"date": "2023-10-02"}
    both = ToolSpec("book", "", {"type": "object", "properties": {"check_in": ISO, "check_out": ISO}})
    stay = ToolCall("book", {"check_in": "2023-10-01", "check_out": "2023-10-03"})
    guarded = run_guard_sync(guard_steps([stay], [both], PRESETS["strict"], ask))
    assert dict(guarded.calls[0].arguments) == dict(stay.arguments)  # which one is tomorrow?


def test_a_city_with_its_state_or_country_named_gets_the_state_code() -> None:
    assert reshape("Seattle, Washington", "city-state") == "Seattle, WA"
    assert reshape("Seattle, United States", "city-state") == "Seattle, WA"
    assert reshape("Austin, USA", "city-state") == "Austin, TX"
    assert reshape("Seattle, WA", "city-state") is None  # in shape already
    assert reshape("Paris, France", "city-state") is None  # not a US place
    assert reshape("Springfield, United States", "city-state") is None  # which one?
