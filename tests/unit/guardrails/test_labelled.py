"""Numbers where the request's words put them (no model)."""

from __future__ import annotations

from tether.calls import ToolCall
from tether.chat import Message
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.labelled import labelled_swaps, unused_numbers
from tether.guardrails.pipeline import guard_steps, run_guard_sync
from tether.guardrails.presets import PRESETS

INTEGER, NUMBER = {"type": "integer"}, {"type": "number"}
PAINT = {"coverage_rate": INTEGER, "length": INTEGER, "height": INTEGER}
WALL = "Paint for a wall of 30 feet by 12 feet, with a brand that covers 400 square feet per gallon."
VALUE = {"payment_per_year": INTEGER, "interest_rate": NUMBER, "years": INTEGER}
PAYING = (
    "The present value of an investment paying $1000 per year, with an interest rate of 5%, for 10 years."
)


def test_two_numbers_dealt_to_each_others_parameters_trade_back() -> None:
    assert labelled_swaps({"coverage_rate": 12, "length": 30, "height": 400}, PAINT, WALL) == {
        "coverage_rate": 400,
        "height": 12,
    }
    swapped = {"payment_per_year": 10, "interest_rate": 0.05, "years": 1000}
    assert labelled_swaps(swapped, VALUE, PAYING) == {"years": 10, "payment_per_year": 1000}
    # "5%" is 5 and 0.05: either reading is the labelled number.
    assert labelled_swaps({"payment_per_year": 1000, "interest_rate": 10, "years": 5}, VALUE, PAYING) == {
        "interest_rate": 5,
        "years": 10,
    }


def test_numbers_in_place_or_unlabelled_are_left_alone() -> None:
    assert labelled_swaps({"coverage_rate": 400, "length": 30, "height": 12}, PAINT, WALL) == {}
    assert labelled_swaps({"coverage_rate": 12, "length": 30, "height": 400}, PAINT, "30, 12 and 400") == {}
    # Nothing is added: a labelled number no parameter holds stays out.
    assert labelled_swaps({"coverage_rate": 12, "length": 30, "height": 7}, PAINT, WALL) == {}
    # A word that labels two numbers labels neither ("year" of "per year" and "10 years"); the other
    # parameter's label still says where its number goes.
    props = {"amount_per_year": INTEGER, "years": INTEGER}
    said = "1000 per year for 10 years"
    assert labelled_swaps({"amount_per_year": 10, "years": 1000}, props, said) == {
        "years": 10,
        "amount_per_year": 1000,
    }
    assert (
        labelled_swaps(
            {"amount_per_year": 10, "years": 1000}, {"amount_per_year": INTEGER, "total": INTEGER}, said
        )
        == {}
    )


def test_the_guard_trades_them_back_on_a_fresh_ask_under_strict() -> None:
    tool = ToolSpec("calculate_paint_needed", "", {"type": "object", "properties": PAINT})
    call = ToolCall("calculate_paint_needed", {"coverage_rate": 12, "length": 30, "height": 400})
    guarded = run_guard_sync(guard_steps([call], [tool], PRESETS["strict"], (Message("user", WALL),)))
    assert dict(guarded.calls[0].arguments) == {"coverage_rate": 400, "length": 30, "height": 12}
    assert [n.kind for n in guarded.interventions] == ["args_reshaped"]


def test_indexed_parameters_and_replies_of_several_calls_are_left_alone() -> None:
    gases = {"mass1": INTEGER, "temperature1": INTEGER, "mass2": INTEGER, "temperature2": INTEGER}
    mixed = "Mix 20 kg at 30 degrees with 15 kg at 60 degrees: the temperature of the mixture"
    assert (
        labelled_swaps({"mass1": 20, "temperature1": 30, "mass2": 15, "temperature2": 60}, gases, mixed) == {}
    )
    tool = ToolSpec("calculate_paint_needed", "", {"type": "object", "properties": PAINT})
    call = ToolCall("calculate_paint_needed", {"coverage_rate": 12, "length": 30, "height": 400})
    other = ToolCall("calculate_paint_needed", {"coverage_rate": 400, "length": 30, "height": 30})
    guarded = run_guard_sync(guard_steps([call, other], [tool], PRESETS["strict"], (Message("user", WALL),)))
    assert dict(guarded.calls[0].arguments) == dict(call.arguments)
    # A word two parameters share labels neither: "temperature" of initial_ and final_temperature.
    heat = {"initial_temperature": INTEGER, "final_temperature": INTEGER, "initial_pressure": INTEGER}
    asked = "Air at a temperature of 25°C heated to 100°C"
    args = {"initial_temperature": 25, "final_temperature": 100, "initial_pressure": 25}
    assert labelled_swaps(args, heat, asked) == {}


CAGR = (
    "John invested $5000 in a mutual fund 5 years ago. Today, the value of his investment has grown to "
    "$7000. He wants to compare this with another investment he made 3 years ago where he invested $8000 "
    "and now it's worth $12000."
)


def test_a_number_copied_into_a_second_call_gives_way_to_the_unused_one_labelled_alike() -> None:
    """3 years for both investments: the first, nearer "5 years", takes 5; a call list with no
    unused number labelled alike, or one where the copy is said twice, is left alone."""
    first = {"initial_value": 5000, "final_value": 7000, "period_in_years": 3}
    second = {"initial_value": 8000, "final_value": 12000, "period_in_years": 3}
    assert unused_numbers([first, second], CAGR) == {(0, "period_in_years"): 5}
    assert unused_numbers([{**first, "period_in_years": 5}, second], CAGR) == {}
    assert unused_numbers([first, second], CAGR.replace("5 years ago", "five decades back")) == {}
    twice = "Rates of 3 years: $5000 grown to $7000 in 3 years, and $8000 to $12000 in 3 years."
    assert unused_numbers([first, second], twice) == {}
    numbered = "Train 'dataset1' to depth 10, then 'dataset2' to depth 10 as well."
    assert unused_numbers([{"dataset": "dataset1", "depth": 10}, {"dataset": "dataset2", "depth": 10}], numbered) == {}


def test_an_unused_number_in_a_sentence_about_no_call_or_past_a_floats_range_stays_unused() -> None:
    dogs = "My trip lasts 10 days. Calculate the food for a 4 kg dog and a 6 kg dog, each for 7 days."
    calls = [{"weight": 4, "days": 7}, {"weight": 6, "days": 7}]
    assert unused_numbers(calls, dogs) == {}
    huge = "Rates of " + "9" * 400 + " years: 5 years ago and 3 years ago."
    assert unused_numbers([{"years": 3}, {"years": 3}], huge) == {}
    assert labelled_swaps({"coverage_rate": 12, "height": 400}, PAINT, "9" * 400 + WALL) is not None
