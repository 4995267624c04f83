"""Numbers in the unit their parameter names: "50mH" for an inductance in henries is 0.05.

A request writes a quantity with a metric prefix ("a capacitance of 100µF and an inductance of
50mH"); the tool's description says which unit it takes ("The inductance (L) in henries (H)"); a
small model copies the digits, 50. :func:`in_named_units` converts a number the request writes with a
prefixed unit symbol into the unit the parameter's description names, by its name ("henries",
"farads", "meters") or its symbol in parentheses ("(H)"). Only the SI symbols below and the common
prefixes; a description that names a prefixed unit ("in centimeters", "in kilograms") is the model's
number already, and so is a number written with no unit or with the named unit itself, a number
the request writes twice ("a 5 H and a 5 mH inductor"), a rate ("90 km/h"), and an integer
parameter's value that the conversion would make fractional.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tether.coercion import schema_types
from tether.grammar.spans import written_numbers
from tether.selection.grounded import is_number

__all__ = ["in_named_units"]

_PREFIX = {
    "p": 1e-12,
    "n": 1e-9,
    "µ": 1e-6,
    "μ": 1e-6,
    "u": 1e-6,
    "m": 1e-3,
    "c": 1e-2,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
}
# symbol -> the words that name the unit in a description
_UNITS = {
    "F": ("farad",),
    "H": ("henry", "henrie"),  # "henries"
    "Hz": ("hertz",),
    "m": ("meter", "metre"),
    "g": ("gram",),
    "s": ("second",),
    "W": ("watt",),
    "V": ("volt",),
    "A": ("ampere",),
    "J": ("joule",),
    "Pa": ("pascal",),
    "L": ("liter", "litre"),
    "N": ("newton",),
    "Ω": ("ohm",),
}
_WRITTEN = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?)\s?("
    + "|".join(_PREFIX)
    + r")("
    + "|".join(sorted(_UNITS, key=len, reverse=True))
    + r")\b(?![/^²³])"  # "90 km/h" is a speed, "5 cm²" an area
)


def in_named_units(
    arguments: Mapping[str, Any], props: Mapping[str, Any], request: str
) -> dict[str, float | int]:
    """The number arguments the request writes with a prefixed unit, converted to the unit their
    parameter's description names (see the module doc)."""
    written = [
        (float(m[1]), _PREFIX[m[2]], m[3]) for m in _WRITTEN.finditer(request) if (m[2], m[3]) != ("p", "m")
    ]
    said = [abs(n) for n in written_numbers(request)]
    out: dict[str, float | int] = {}
    for key, value in arguments.items():
        spec = props.get(key)
        if not is_number(value) or not isinstance(spec, Mapping):
            continue
        description = str(spec.get("description") or "")
        hits = {(f, u) for n, f, u in written if n == float(value) and _names(description, u)}
        if len(hits) != 1 or said.count(float(value)) != 1:
            continue  # "a 5 H and a 5 mH inductor": which 5 is this?
        ((factor, _),) = hits
        new = float(f"{float(value) * factor:.12g}")
        if "number" in schema_types(spec) or "integer" not in schema_types(spec):
            out[key] = new
        elif new.is_integer():
            out[key] = int(new)
    return out


def _names(description: str, symbol: str) -> bool:
    """Whether ``description`` names the unit itself, not a prefixed one ("in meters", not "in
    centimeters"), by a word or its symbol in parentheses."""
    words = "|".join(_UNITS[symbol])
    return re.search(rf"\b(?:{words})s?\b", description, re.I) is not None or f"({symbol})" in description
