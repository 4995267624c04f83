"""The unit a request asks its answer in: "the distance in miles" fills a tool's ``unit`` parameter.

A small model leaves an optional ``unit`` out (the tool's default, often kilometres or Celsius,
then answers in the wrong one) or writes the default it read in the description. When the request
says "in <unit>" (``in miles``, ``in fahrenheit``, ``in kg``) and the tool has a free-text string
parameter named for a unit (``unit``, ``units``, ``temperature_unit``; one, and not a conversion's
``from_unit`` or ``to_unit``), that parameter takes the unit as the request writes it. A parameter with choices (``enum``, or quoted in its description) is
left to :func:`tether.selection.relevance.mentioned_choices`, which matches choices word for word.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tether.schema_kinds import name_parts
from tether.selection.relevance import listed_choices

__all__ = ["mentioned_units"]

_UNITS = (
    "kilometers|kilometres|km|miles|mi|meters|metres|feet|ft|inches|yards|centimeters|cm|millimeters|mm"
    "|nautical miles|celsius|fahrenheit|kelvin|kilograms|kg|grams|pounds|lbs|ounces|tons|tonnes"
    "|liters|litres|gallons|milliliters|ml|mph|kph|km/h|knots|acres|hectares|square feet|square meters"
    "|joules|calories|kwh|metric|imperial"
)
_IN_UNIT = re.compile(rf"\bin\s+(?:degrees\s+)?({_UNITS})(?![\w/])", re.I)
_UNIT_WORDS = frozenset({"unit", "units"})
# A conversion's units ("from_unit", "to_unit") are two: which one "in miles" means is not for us.
_DIRECTED = frozenset({"from", "to", "source", "target", "input", "output", "base"})


def mentioned_units(text: str, parameters: Mapping[str, Any]) -> dict[str, str]:
    """The unit parameters of ``parameters`` with the one unit ``text`` asks for (see the module doc);
    empty when it asks for none, or for two."""
    said = {m.group(1).lower() for m in _IN_UNIT.finditer(text)}
    if len(said) != 1:
        return {}
    (unit,) = said
    props: Mapping[str, Any] = parameters.get("properties") or {}
    units = [k for k in props if set(name_parts(k)) & _UNIT_WORDS]
    if len(units) != 1 or set(name_parts(units[0])) & _DIRECTED:
        return {}
    spec = props[units[0]]
    plain = isinstance(spec, Mapping) and spec.get("type") == "string" and "enum" not in spec
    return {units[0]: unit} if plain and listed_choices(spec) is None else {}
