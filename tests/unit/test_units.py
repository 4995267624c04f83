"""The unit a request asks its answer in fills the tool's unit parameter (no model)."""

from __future__ import annotations

from tether.calls import ToolCall
from tether.chat import Message
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.pipeline import guard_steps, run_guard_sync
from tether.guardrails.presets import PRESETS
from tether.selection.units import mentioned_units

STRING = {"type": "string"}


def test_the_unit_the_request_asks_for_fills_the_tools_unit() -> None:
    distance = {
        "type": "object",
        "properties": {
            "body1": STRING,
            "body2": STRING,
            "unit": {"type": "string", "description": "Default is 'km'."},
        },
        "required": ["body1", "body2"],
    }
    assert mentioned_units("What's the distance in miles from the Earth to the Moon?", distance) == {
        "unit": "miles"
    }
    assert mentioned_units("The weather in Paris in degrees Fahrenheit", distance) == {"unit": "fahrenheit"}
    assert mentioned_units("The distance from the Earth to the Moon", distance) == {}
    assert mentioned_units("in miles, or in km?", distance) == {}  # two units asked: which one?
    convert = {"type": "object", "properties": {"from_unit": STRING, "to_unit": STRING}}
    assert mentioned_units("5 km in miles", convert) == {}
    chosen = {"type": "object", "properties": {"unit": {"type": "string", "enum": ["km", "mi"]}}}
    assert mentioned_units("in miles", chosen) == {}  # choices are matched word for word elsewhere
    tool = ToolSpec("calculate_distance", "Distance between two celestial bodies", distance)
    ask = (Message("user", "What's the distance in miles from the Earth to the Moon?"),)
    for written in ({"body1": "Earth", "body2": "Moon"}, {"body1": "Earth", "body2": "Moon", "unit": "km"}):
        call = ToolCall("calculate_distance", written)
        guarded = run_guard_sync(guard_steps([call], [tool], PRESETS["strict"], ask, may_answer=True))
        assert guarded.calls[0].arguments["unit"] == "miles"
        assert "args_filled" in [n.kind for n in guarded.interventions]
