"""The day a request asks about, in a tool's one date parameter (the guard's dates step)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tether.calls import ToolCall
from tether.chat import Message
from tether.grammar.datetimes import asked_day, written_month_days
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.pipeline import guard_steps, run_guard_sync
from tether.guardrails.presets import PRESETS
from tether.guardrails.steps.dates import dates
from tether.selection.grounded import Grounding, said

ISO = {"type": "string", "description": "The date, in the format YYYY-MM-DD."}
CITY = {"type": "string", "description": "The city, e.g. 'Austin, TX'."}
WEATHER = ToolSpec(
    "get_weather",
    "The weather forecast for a city on a date.",
    {"type": "object", "properties": {"city": CITY, "date": ISO}, "required": ["city"]},
)


def _guard(text: str, call: ToolCall, tool: ToolSpec = WEATHER) -> dict[str, object]:
    ask = (Message("user", text),)
    guarded = run_guard_sync(guard_steps([call], [tool], PRESETS["strict"], ask, may_answer=True))
    return dict(guarded.calls[0].arguments) if guarded.calls else {}


@pytest.mark.parametrize(
    ("text", "year", "day"),
    [
        ("Forecast for Oslo on the 4th of July 2024?", None, "2024-07-04"),
        ("Today is Monday April 25th 2023. Rain on the upcoming Wednesday?", None, "2023-04-27"),
        ("today is 2025-03-14, anything this coming friday?", None, "2025-03-21"),
        ("Weather in Lyon on 12th of March", 2023, "2023-03-12"),
        ("Weather in Lyon on 12th of March", None, None),  # no year anywhere
        ("From 2024-05-01 to 2024-05-09 in Rome", None, None),  # two days
        ("Today is 2025-03-14. Lunch on Wednesday?", None, None),  # a day nobody can place
        ("Weather in Lyon please", 2023, None),
        ("On 02/03/2024 in Lyon", None, None),  # February 3rd or 2 March
    ],
)
def test_the_day_a_request_asks_about(text: str, year: int | None, day: str | None) -> None:
    found = asked_day(text, "", year)
    assert (found.isoformat() if found else None) == day


def test_a_month_and_day_written_without_a_year() -> None:
    assert written_month_days("on the 12th of march, or may 5th") == {(3, 12), (5, 5)}
    assert written_month_days("march 12th, 2023") == set()  # a whole date's


def test_a_date_is_said_by_its_month_and_day_or_as_the_stated_today_s_tomorrow() -> None:
    assert said("2023-03-12", Grounding.of("Weather in American Canyon on 12th of March"))
    assert not said("2023-03-13", Grounding.of("Weather in American Canyon on 12th of March"))
    assert said("2023-10-02", Grounding.of("Today is 2023-10-01. Rain tomorrow in Oslo?"))
    assert not said("2023-10-03", Grounding.of("Today is 2023-10-01. Rain tomorrow in Oslo?"))


def test_an_unsaid_date_becomes_the_one_the_request_writes_not_dropped() -> None:
    ask = "What's the weather on the 10th of March 2023 in Long Beach, CA?"
    got = _guard(ask, ToolCall("get_weather", {"city": "Long Beach, CA", "date": "2023-10-03"}))
    assert got == {"city": "Long Beach, CA", "date": "2023-03-10"}
    # without the step, the date nobody said is left out and the tool's default decides
    off = replace(PRESETS["strict"], shape_values=False)
    call = ToolCall("get_weather", {"city": "Long Beach, CA", "date": "2023-10-03"})
    guarded = run_guard_sync(guard_steps([call], [WEATHER], off, (Message("user", ask),), may_answer=True))
    assert dict(guarded.calls[0].arguments) == {"city": "Long Beach, CA"}


def test_a_weekday_counts_from_the_stated_today() -> None:
    ask = "Today is Monday April 25th 2023. Will it rain in Austin, TX the upcoming Wednesday?"
    got = _guard(ask, ToolCall("get_weather", {"city": "Austin, TX", "date": "2023-04-25"}))
    assert got == {"city": "Austin, TX", "date": "2023-04-27"}


def test_a_tool_with_two_dates_or_a_request_with_two_is_left_to_the_model() -> None:
    stay = ToolSpec(
        "book",
        "Book a room.",
        {"type": "object", "properties": {"city": CITY, "check_in": ISO, "check_out": ISO}},
    )
    ask = "Book a room in Austin, TX on the 4th of July 2024"
    call = ToolCall("book", {"city": "Austin, TX", "check_in": "2024-07-03", "check_out": "2024-07-05"})
    only = run_guard_sync(
        guard_steps([call], [stay], PRESETS["strict"], (Message("user", ask),), steps=(dates,))
    )
    assert dict(only.calls[0].arguments) == dict(call.arguments)
    two = "Weather in Austin, TX on 2024-07-04 or 2024-07-05?"
    assert (
        _guard(two, ToolCall("get_weather", {"city": "Austin, TX", "date": "2024-07-05"}))["date"]
        == "2024-07-05"
    )


def test_after_a_result_only_a_relative_day_is_placed() -> None:
    history = (
        Message("user", "Weather in Austin, TX on 2024-07-04?"),
        Message("assistant", "", tool_calls=(ToolCall("get_weather", {"city": "Austin, TX"}, "c1"),)),
        Message("tool", '{"next_storm": "2024-07-09"}', tool_call_id="c1"),
    )
    call = ToolCall("get_weather", {"city": "Austin, TX", "date": "2024-07-09"})
    guarded = run_guard_sync(guard_steps([call], [WEATHER], PRESETS["strict"], history))
    assert dict(guarded.calls[0].arguments)["date"] == "2024-07-09"


@pytest.mark.parametrize(
    ("value", "only"),
    [
        ("2023-10-03", True),
        ("2021-04-15t13:45", True),
        ("march 3, 2025 at 1 pm", True),
        ("03/10/2023", True),
        ("meeting on 2023-10-03", False),
        ("2023 report", False),
    ],
)
def test_a_value_that_is_only_a_date(value: str, only: bool) -> None:
    from tether.grammar.datetimes import only_dates

    assert only_dates(value) is only
