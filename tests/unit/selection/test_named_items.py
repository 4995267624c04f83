"""An array of enum items cut to those the request names."""

from __future__ import annotations

from typing import Any

from tether.calls import ToolCall
from tether.chat import Message
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.pipeline import guard_steps, run_guard_sync
from tether.guardrails.presets import PRESETS
from tether.selection.named_items import unnamed_items


def _schema(**enums: list[str]) -> dict[str, Any]:
    props: dict[str, Any] = {k: {"type": "array", "items": {"type": "string", "enum": v}} for k, v in enums.items()}
    props["location"] = {"type": "string"}
    return {"type": "object", "properties": props, "required": ["location"]}


LIBRARY = _schema(preferences=["Pet-friendly", "Disabled Access", "24 hours", "Cafe"])


def test_the_items_a_request_names_stay_and_the_schemas_others_go() -> None:
    ask = "Find me a pet-friendly library with facilities for disabled people in New York City."
    args = {"location": "New York City", "preferences": ["Pet-friendly", "Disabled Access", "24 hours", "Cafe"]}
    assert unnamed_items(ask, args, LIBRARY) == {"preferences": ["Pet-friendly", "Disabled Access"]}
    diet = _schema(diet=["Gluten Free", "Dairy Free", "Vegan"])
    cookie = {"location": "x", "diet": ["Gluten Free", "Dairy Free", "Vegan"]}
    assert unnamed_items("A gluten-free cookie recipe", cookie, diet) == {"diet": ["Gluten Free"]}
    visits = _schema(visitor_type=["child", "adult", "senior"])
    both = {"location": "x", "visitor_type": ["child", "adult"]}
    assert unnamed_items("the cost per visit for children and adult", both, visits) == {}


def test_nothing_is_cut_when_nothing_or_everything_is_named_or_items_are_letters() -> None:
    args = {"location": "Boston", "preferences": ["Cafe", "24 hours"]}
    assert unnamed_items("A library in Boston", args, LIBRARY) == {}
    bases = _schema(preferences=["A", "T", "C", "G"])
    assert unnamed_items("a sequence with a preference for A", {"location": "x", "preferences": ["A", "T"]}, bases) == {}


def test_every_call_of_a_fresh_ask_is_cut_in_the_guard() -> None:
    tool = ToolSpec("find_library", "", LIBRARY)
    ask = (Message("user", "A pet-friendly library in Boston, and one in Chicago."),)
    calls = [
        ToolCall("find_library", {"location": "Boston", "preferences": ["Pet-friendly", "Cafe"]}),
        ToolCall("find_library", {"location": "Chicago", "preferences": ["Pet-friendly", "24 hours"]}),
    ]
    guarded = run_guard_sync(guard_steps(calls, [tool], PRESETS["strict"], ask))
    assert [c.arguments["preferences"] for c in guarded.calls] == [["Pet-friendly"], ["Pet-friendly"]]
    assert {n.kind for n in guarded.interventions} == {"args_reshaped"}
    wifi = ToolSpec("find_cafe", "", _schema(amenities=["Wi-Fi", "Parking", "Outdoor seating"]))
    asked = (Message("user", "A cafe in Boston with free wifi"),)
    cafes = [
        ToolCall("find_cafe", {"location": "Boston", "amenities": ["Wi-Fi", "Parking"]}),
        ToolCall("find_cafe", {"location": "Boston", "amenities": ["Wi-Fi", "Outdoor seating"]}),
    ]
    guarded = run_guard_sync(guard_steps(cafes, [wifi], PRESETS["strict"], asked))
    assert [c.arguments["amenities"] for c in guarded.calls] == [["Wi-Fi"]]  # cut, then one call
