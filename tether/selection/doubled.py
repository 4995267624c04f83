"""One value, one parameter: a name the request says once, written into two of a call's parameters.

"Find me a classical concert this weekend in Los Angeles" → ``concert_search(genre="Los Angeles",
location="Los Angeles")``: a small model that found one good span copies it into the next parameter
too. The request says it once, so it gives one parameter; the others hold a guess that happens to be
said. :func:`doubled_keys` names them. Of the parameters sharing the value, the one that fits it best
keeps it: an ``enum`` that lists it, a parameter whose words the value contains (``county`` for
"Santa Clara County"), one the request names just before the value ("player 'LeBron James'"), a
place parameter for a value after "in", "at", "from"…, a time parameter for a time of day (never a
date parameter); on a tie, the one written first. The rest
count as unsaid (:func:`tether.selection.grounded.check_call`): a required one is asked again among
the request's words right beside its own words (:func:`beside`: "classical" of "a classical concert"
for ``genre``, "Genre of the concert."), an optional one is left to the tool's default.

Only a value with letters that the conversation writes exactly once: a date, a number, or a name
said twice ("from Paris to Paris") may fill two parameters. A number written into a string
parameter as well as a number parameter (``act_name: "2013"`` beside ``year: 2013``) is the number
parameter's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tether.grammar.datetimes import written_dates, written_times
from tether.grammar.spans import is_written_number
from tether.schema_kinds import PLACE_PREPOSITIONS, extractive_kind, name_parts, names_a_place
from tether.selection.relevance import content_words, stem, weight

__all__ = ["beside", "doubled_keys"]

_WORD = re.compile(r"[^\W_]+")
_LETTER = re.compile(r"[^\W\d_]")
_BEFORE = 4  # the words before a value that may name its parameter ("stats for player 'LeBron James'")


def doubled_keys(arguments: Mapping[str, Any], parameters: Mapping[str, Any], text: str) -> dict[str, str]:
    """The call's extractive string parameters that hold a value another of its parameters keeps,
    mapped to that parameter (see the module doc). ``text``: the conversation, lowercased, its
    spacing collapsed (:attr:`tether.selection.grounded.Grounding.text`)."""
    props = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if not isinstance(props, Mapping):
        return {}
    sharing: dict[str, list[str]] = {}
    for key, value in arguments.items():
        if isinstance(value, str) and key in props:
            flat = " ".join(value.lower().split())
            if _LETTER.search(flat) and not written_dates(flat) and _said_once(flat, text):
                sharing.setdefault(flat, []).append(key)
    out: dict[str, str] = {}
    # A number written into a string parameter as well ("act_name": "2013" beside "year": 2013) is
    # the number parameter's: a string parameter wants words.
    numbers = {
        _written(v): k for k, v in arguments.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }
    for key, value in arguments.items():
        digits = value.strip() if isinstance(value, str) else ""
        if (
            is_written_number(digits)
            and _written(float(digits)) in numbers
            and extractive_kind(props.get(key), key)
        ):
            out[key] = numbers[_written(float(digits))]
    for flat, keys in sharing.items():
        if len(keys) < 2:
            continue
        keeper = max(keys, key=lambda k: (_fit(k, flat, props.get(k), text), -keys.index(k)))
        out |= {k: keeper for k in keys if k != keeper and extractive_kind(props.get(k), k) is not None}
    return out


def _written(number: float) -> str:
    return str(int(number)) if isinstance(number, float) and number.is_integer() else str(number)


def _said_once(flat: str, text: str) -> bool:
    return len(re.findall(r"(?<![^\W_])" + re.escape(flat) + r"(?![^\W_])", text)) == 1


def _fit(key: str, flat: str, schema: Any, text: str) -> int:
    """How well ``key`` fits the value ``flat`` (see the module doc)."""
    if isinstance(schema, Mapping) and flat in {str(e).lower() for e in schema.get("enum") or ()}:
        return 4
    parts = set(name_parts(key))
    words = {stem(w) for w in parts}
    at = re.search(r"(?<![^\W_])" + re.escape(flat), text)
    before = _WORD.findall(text[: at.start()])[-_BEFORE:] if at else []
    score = 2 * bool(words & {stem(w) for w in _WORD.findall(flat)})
    score += bool(words & {stem(w) for w in before})
    score += bool(names_a_place(key) and before and before[-1] in PLACE_PREPOSITIONS)
    if written_times(flat) and not written_dates(flat):  # a time of day: a time's, never a date's
        score += 2 if "time" in parts else -2 if "date" in parts else 0
    return score


_CUE = 1.0  # a word of the parameter's name or description this common ("the", "of") is no cue


def beside(spans: Sequence[str], text: str, key: str, description: str) -> list[str]:
    """The ``spans`` of ``text`` that stand right before or after a word of the parameter's name or
    description, without containing one: where the request says the value the parameter means. Of
    spans one inside another, the longest ("Criminal Law Amendment" of "the Criminal Law Amendment
    Act", not "Amendment")."""
    cues = {stem(w) for w in (*name_parts(key), *content_words(description)) if weight(w) >= _CUE}
    out = []
    for span in spans:
        if {stem(w) for w in _WORD.findall(span.lower())} & cues:
            continue
        for m in re.finditer(r"(?<![^\W_])" + re.escape(span) + r"(?![^\W_])", text, re.I):
            near = _WORD.findall(text[: m.start()])[-1:] + _WORD.findall(text[m.end() :])[:1]
            if {stem(w.lower()) for w in near} & cues:
                out.append(span)
                break
    return [s for s in out if not any(s != t and _inside(s, t) for t in out)]


def _inside(short: str, long: str) -> bool:
    return re.search(r"(?<![^\W_])" + re.escape(short) + r"(?![^\W_])", long, re.I) is not None
