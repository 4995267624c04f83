"""Dates and times as text writes them: "March 14th, 2025", "14/03/2025", "2025-03-14", "1:45 pm".

Shared by the checks of said values (:mod:`tether.selection.grounded`), the reshaping of values to
the shape a tool asks for (:mod:`tether.guardrails.shapes`) and layer 0's grounding, where a date
parameter's value begins where the text writes a date (:mod:`tether.grammar.grounding`). The
patterns read lowercased text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tether.coercion import schema_types
from tether.schema_kinds import wanted_shape

__all__ = ["date_spans", "date_time_params", "time_spans", "written_dates", "written_times"]

_MONTH_NAMES = (
    "jan january;feb february;mar march;apr april;may;jun june;jul july;aug august;sep sept september"
)
_MONTHS = {
    m: i + 1
    for i, names in enumerate(f"{_MONTH_NAMES};oct october;nov november;dec december".split(";"))
    for m in names.split()
}
_MONTH = r"(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_DATE_FORMS = (
    (re.compile(r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)"), "ymd"),  # also 2021-04-15T13:45
    (re.compile(r"\b(\d{1,2})[-/.](\d{1,2})[-/.](\d{4})\b"), "mdy"),
    (re.compile(rf"\b{_MONTH}\s*{_DAY},?\s*(\d{{4}})\b"), "Mdy"),
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s*(\d{{4}})\b"), "dMy"),
    (re.compile(rf"\b(\d{{4}}),?\s+{_MONTH}\s+{_DAY}\b"), "yMd"),
)


def written_dates(text: str) -> set[tuple[int, int, int]]:
    """Every (year, month, day) ``text`` writes, in the usual forms (month/day read both ways where
    digits alone cannot tell them apart)."""
    out: set[tuple[int, int, int]] = set()
    for pattern, form in _DATE_FORMS:
        for m in pattern.finditer(text):
            parts = dict(zip(form, m.groups(), strict=True))
            month = _MONTHS[parts["M"]] if "M" in parts else int(parts["m"])
            year, day = int(parts["y"]), int(parts["d"])
            out.add((year, month, day))
            if form == "mdy":
                out.add((year, day, month))
    return out


# A time of day: "1:45 pm", "10 AM", "13:45" (not "1.5" or a bare number); ISO's "T13:45" too.
_TIME = re.compile(
    r"(?<![\d:])(\d{1,2})(?::(\d{2}))?(?::\d{2})?\s*([ap])\.?m\b|(?<![\d:])(\d{1,2}):(\d{2})(?!\d)"
)


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
