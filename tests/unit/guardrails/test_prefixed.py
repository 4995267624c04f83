"""Numbers written with a metric prefix, in the unit their parameter names."""

from __future__ import annotations

from tether.guardrails.prefixed import in_named_units

LC = {
    "inductance": {"type": "number", "description": "The inductance (L) in henries (H)."},
    "capacitance": {"type": "number", "description": "The capacitance (C) in farads (F)."},
}


def test_a_prefixed_quantity_goes_in_the_unit_the_description_names() -> None:
    ask = "The resonant frequency of an LC circuit given capacitance of 100µF and inductance of 50mH."
    assert in_named_units({"inductance": 50, "capacitance": 100}, LC, ask) == {
        "inductance": 0.05,
        "capacitance": 0.0001,
    }
    assert in_named_units({"inductance": 0.05, "capacitance": 0.0001}, LC, ask) == {}
    far = {"distance": {"type": "number", "description": "Distance in meters."}}
    assert in_named_units({"distance": 5}, far, "How long to walk 5 km?") == {"distance": 5000.0}


def test_a_prefixed_unit_named_by_the_description_or_a_time_of_day_is_left_alone() -> None:
    bmi = {
        "weight": {"type": "integer", "description": "Weight of the person in kilograms."},
        "height": {"type": "integer", "description": "Height of the person in centimeters."},
    }
    assert in_named_units({"weight": 70, "height": 175}, bmi, "BMI for 70kg and 175cm tall") == {}
    clock = {"time": {"type": "number", "description": "Time in seconds."}}
    assert in_named_units({"time": 5}, clock, "the show at 5 pm, 5 min long") == {}


def test_a_number_written_twice_a_rate_or_a_longer_word_is_not_converted() -> None:
    coil = {"inductance": {"type": "number", "description": "The inductance in henries."}}
    twice = "The energy in a 5 H inductor and in a 5 mH inductor"
    assert in_named_units({"inductance": 5}, coil, twice) == {}
    line = {"voltage": {"type": "number", "description": "Voltage in kilovolts."}}
    assert in_named_units({"voltage": 10}, line, "a 10 kV line") == {}
    speed = {"speed": {"type": "number", "description": "Velocity in meters per second."}}
    assert in_named_units({"speed": 90}, speed, "a car at 90 km/h") == {}
    count = {"grams": {"type": "integer", "description": "Mass in grams."}}
    assert in_named_units({"grams": 2}, count, "2 kg of flour") == {"grams": 2000}
    assert in_named_units({"grams": 5}, count, "5 mg of salt") == {}


def test_numbers_traded_back_are_converted_in_the_guard() -> None:
    from tether.calls import ToolCall
    from tether.chat import Message
    from tether.grammar.formats.base import ToolSpec
    from tether.guardrails.pipeline import guard_steps, run_guard_sync
    from tether.guardrails.presets import PRESETS

    tool = ToolSpec("resonant_frequency", "", {"type": "object", "properties": LC})
    ask = (Message("user", "The resonant frequency given capacitance of 100µF and inductance of 50mH."),)
    swapped = ToolCall("resonant_frequency", {"inductance": 100, "capacitance": 50})
    guarded = run_guard_sync(guard_steps([swapped], [tool], PRESETS["strict"], ask))
    assert [dict(c.arguments) for c in guarded.calls] == [{"inductance": 0.05, "capacitance": 0.0001}]
