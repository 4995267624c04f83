"""Dates and times as text writes them: "March 14th, 2025", "14/03/2025", "2025-03-14", "1:45 pm".

Shared by the checks of said values (:mod:`tether.selection.grounded`), the reshaping of values to
the shape a tool asks for (:mod:`tether.guardrails.shapes`) and layer 0's grounding, where a date
parameter's value begins where the text writes a date (:mod:`tether.grammar.grounding`). The
patterns read lowercased text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, timedelta
from typing import Any

from tether.coercion import schema_types
from tether.schema_kinds import wanted_shape

__all__ = [
    "DAY",
    "MONTH",
    "MONTHS",
    "asked_day",
    "date_spans",
    "date_time_params",
    "meant_day",
    "only_dates",
    "time_spans",
    "written_dates",
    "written_month_days",
    "written_times",
]

_MONTH_NAMES = (
    "jan january;feb february;mar march;apr april;may;jun june;jul july;aug august;sep sept september"
)
MONTHS = {
    m: i + 1
    for i, names in enumerate(f"{_MONTH_NAMES};oct october;nov november;dec december".split(";"))
    for m in names.split()
}
MONTH = r"(" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"  # a month's name, one group
DAY = r"(\d{1,2})(?:st|nd|rd|th)?"  # a day of the month, one group
_DATE_FORMS = (
    (re.compile(r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)"), "ymd"),  # also 2021-04-15T13:45
    (re.compile(r"\b(\d{1,2})[-/.](\d{1,2})[-/.](\d{4})\b"), "mdy"),
    (re.compile(rf"\b{MONTH}\s*{DAY},?\s*(\d{{4}})\b"), "Mdy"),
    (re.compile(rf"\b{DAY}\s+(?:of\s+)?{MONTH},?\s*(\d{{4}})\b"), "dMy"),
    (re.compile(rf"\b(\d{{4}}),?\s+{MONTH}\s+{DAY}\b"), "yMd"),
)


def _ymd(form: str, m: re.Match[str]) -> tuple[int, int, int]:
    """(year, month, day) of a match of the date form ``form`` (its groups' letters, in order)."""
    parts = dict(zip(form, m.groups(), strict=True))
    month = MONTHS[parts["M"]] if "M" in parts else int(parts["m"])
    return int(parts["y"]), month, int(parts["d"])


def written_dates(text: str) -> set[tuple[int, int, int]]:
    """Every (year, month, day) ``text`` writes, in the usual forms (month/day read both ways where
    digits alone cannot tell them apart)."""
    out: set[tuple[int, int, int]] = set()
    for pattern, form in _DATE_FORMS:
        for m in pattern.finditer(text):
            year, month, day = _ymd(form, m)
            out.add((year, month, day))
            if form == "mdy":
                out.add((year, day, month))
    return out


# A time of day: "1:45 pm", "10 AM", "13:45" (not "1.5" or a bare number); ISO's "T13:45" too.
_TIME = re.compile(
    r"(?<![\d:])(\d{1,2})(?::(\d{2}))?(?::\d{2})?\s*([ap])\.?m\b|(?<![\d:])(\d{1,2}):(\d{2})(?!\d)"
)


def _without_dates(text: str) -> str:
    """``text`` with every date it writes blanked out."""
    for pattern, _ in _DATE_FORMS:
        text = pattern.sub(" ", text)
    return text


def only_dates(text: str) -> bool:
    """Whether ``text`` writes a date and nothing else but times of day ("2023-10-03", "March 3,
    2025 at 1 pm"): such a value is said as a date or not at all, never by its words alone."""
    rest = _without_dates(text)
    if rest == text:
        return False
    return not re.search(r"[^\W\d_]{2,}", re.sub(r"\bat\b", " ", _TIME.sub(" ", rest)))


def written_times(text: str) -> set[tuple[int, int]]:
    """Every (hour, minute) ``text`` writes as a time of day, 12-hour times read as 24-hour ones."""
    out: set[tuple[int, int]] = set()
    for m in _TIME.finditer(text):
        if m.group(3):
            hour, minute = int(m.group(1)) % 12 + (12 if m.group(3) == "p" else 0), int(m.group(2) or 0)
        else:
            hour, minute = int(m.group(4)), int(m.group(5))
        if hour < 24 and minute < 60:
            out.add((hour, minute))
    return out


def _spans(pattern_texts: list[re.Pattern[str]], text: str) -> list[tuple[int, int]]:
    """Byte ranges, in ``text`` encoded as UTF-8, of what the patterns find in it lowercased."""
    low = text.lower()
    found = sorted({(m.start(), m.end()) for p in pattern_texts for m in p.finditer(low)})
    if text.isascii():
        return found
    return [(len(text[:a].encode()), len(text[:b].encode())) for a, b in found]


def date_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` writes a date, as byte ranges of its UTF-8 encoding."""
    return _spans([p for p, _ in _DATE_FORMS], text)


def time_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` writes a time of day, as byte ranges of its UTF-8 encoding."""
    return _spans([_TIME], text)


def date_time_params(props: Mapping[str, Any], kinds: Mapping[str, str | None]) -> dict[str, str]:
    """The string parameters that take a date ("date") or a time of day ("time"), by their schema."""
    out: dict[str, str] = {}
    for key, spec in props.items():
        if kinds.get(key) != "string" or not isinstance(spec, Mapping) or "string" not in schema_types(spec):
            continue
        shape = wanted_shape(spec)
        if shape in ("date", "date-time", "date-time-z", "us-date"):
            out[key] = "date"
        elif shape in ("time", "time-s"):
            out[key] = "time"
    return out


# "Today is 2023.10.1", "today's date: March 3, 2025", "the current date is 2025-03-14".
_TODAY = re.compile(r"\b(?:today(?:'s\s+date)?|the\s+date\s+today|(?:the\s+)?current\s+date)\s*(?:is|:|=)\s*")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_COUNTS = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
_RELATIVE = re.compile(
    r"\b(day\s+after\s+tomorrow|day\s+before\s+yesterday|tomorrow|yesterday|today|tonight)\b"
    r"|\bin\s+(\d{1,3}|a|one|two|three|four|five|six|seven)\s+days?\b"
    r"|\b(\d{1,3}|a|one|two|three|four|five|six|seven)\s+days?\s+ago\b"
    rf"|\b(?:next|(?:this\s+)?(?:up)?coming)\s+({'|'.join(_WEEKDAYS)}|week)\b"
)
_MONTH_DAY = re.compile(rf"\b{MONTH}\s*{DAY}\b|\b{DAY}\s+(?:of\s+)?{MONTH}")
_OFFSETS = {"day after tomorrow": 2, "day before yesterday": -2, "tomorrow": 1, "yesterday": -1}


def written_month_days(text: str) -> set[tuple[int, int]]:
    """Every (month, day) ``text`` writes without a year ("on the 12th of March", "May 5th")."""
    out: set[tuple[int, int]] = set()
    for m in _MONTH_DAY.finditer(_without_dates(text)):  # a month and day inside a whole date is that date's
        month, day = (m[1], m[2]) if m[1] else (m[4], m[3])
        if 1 <= int(day) <= 31:
            out.add((MONTHS[month], int(day)))
    return out


_WEEKDAY_FIRST = re.compile(r"(mon|tue|wed|thu|fri|sat|sun)[a-z]*\.?,?\s+")


def _date_at(text: str) -> tuple[date, int, int] | None:
    """The date ``text`` begins with (a weekday before it allowed: "Sat Dec 06 2026"), where it ends,
    and its weekday (0 for Monday): the one written, where one is."""
    lead = _WEEKDAY_FIRST.match(text)
    skip = lead.end() if lead else 0
    for pattern, form in _DATE_FORMS:
        m = pattern.match(text, skip)
        if m is None:
            continue
        try:
            day = date(*_ymd(form, m))
        except ValueError:
            return None
        weekday = [w[:3] for w in _WEEKDAYS].index(lead[1]) if lead else day.weekday()
        return day, m.end(), weekday
    return None


def meant_day(text: str) -> date | None:
    """The day ``text`` means by its one relative day ("tomorrow", "in 3 days", "next Friday") counted
    from the date it states as today ("today is 2023.10.1"); None unless it states today's date, says
    exactly one relative day other than "today" and writes no other date or month and day."""
    low = " ".join(text.lower().split())
    m = _TODAY.search(low)
    found = _date_at(low[m.end() :]) if m else None
    if m is None or found is None:
        return None
    # "next Wednesday" counts from the weekday the user names with today's date, even one the
    # calendar disagrees with ("Monday April 25th 2023", a Tuesday): the user counts from it
    today, size, weekday_now = found
    rest = f"{low[: m.start()]} {low[m.end() + size :]}"
    phrases = list(_RELATIVE.finditer(rest))
    if len(phrases) != 1 or written_dates(rest):
        return None
    word, ahead, ago, weekday = phrases[0].groups()
    if _MONTH_DAY.search(rest) or word in ("today", "tonight"):
        return None  # "on March 5" is another day; "today" is the one stated
    if word is not None:
        return today + timedelta(days=_OFFSETS[" ".join(word.split())])
    if ahead is not None or ago is not None:
        count = ahead or ago
        days = int(count) if count.isdigit() else _COUNTS[count]
        return today + timedelta(days=days if ahead is not None else -days)
    if weekday == "week":
        return today + timedelta(days=7)
    return today + timedelta(days=(_WEEKDAYS.index(weekday) - weekday_now - 1) % 7 + 1)


def asked_day(request: str, context: str = "", year: int | None = None) -> date | None:
    """The one day ``request`` asks about: its relative day counted from the today it (or, after it,
    ``context``) states (:func:`meant_day`); else, where it states no today, the one date it writes,
    or the one month and day it writes with no year, in ``year``. None when it names no day or
    several, or a day nobody can place ("on Wednesday" beside "today is ...")."""
    day = meant_day(request) or (meant_day(f"{context}\n{request}") if context else None)
    low = " ".join(request.lower().split())
    if day is not None or _TODAY.search(low):
        return day
    dates, month_days = written_dates(low), written_month_days(low)
    try:
        if len(dates) == 1 and not month_days:
            return date(*dates.pop())
        if not dates and len(month_days) == 1 and year is not None:
            return date(year, *month_days.pop())
    except ValueError:  # "2023-02-30": no day at all
        return None
    return None
