"""Numbers where the request's words put them: two of a call's numbers swapped back, and a number
copied into a second call given the one the request labels alike.

"Paint for a wall of 30 feet by 12 feet, with a brand that covers 400 square feet per gallon" →
``calculate_paint_needed(coverage_rate=12, length=30, height=400)``: the model found the request's
three numbers and dealt two of them to the wrong parameters. The request labels its numbers: "covers
400" is the coverage, "for 10 years" the years. A number parameter labelled with exactly one number
(a word of its name that no other number parameter's name has, within the three words before the
number or right after it) that holds
another, while a second number parameter holds the labelled one, gets it back, and the second takes
its value in exchange. Only values the call already has trade places: nothing is added. An indexed
parameter (``mass1``, ``mass2``) is never labelled, and a reply of several calls is left alone (the
request's labels are spread over its calls).

Across a reply's calls of one tool (:func:`unused_numbers`): "invested $5000 … 5 years ago … another
investment he made 3 years ago where he invested $8000" → ``period_in_years: 3`` in both calls. A
number the request says once, held at one parameter by two calls, belongs to one of them; when
the request has exactly one number no call holds that is labelled like it (the same word right
after it: "5 years", "3 years"), the call whose other values stand nearer that number takes it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tether.coercion import schema_types
from tether.grammar.spans import number_spans
from tether.schema_kinds import name_parts
from tether.selection.grounded import is_number
from tether.selection.relevance import same_word, weight

__all__ = ["labelled_swaps", "unused_numbers"]

_WORD = re.compile(r"[^\W\d_]+")
_BEFORE = 3  # words before a number that may label it ("covers 400", "a radius of 5")
_LABEL_WEIGHT = 1.0  # a name word this common ("of", "to") labels nothing


def labelled_swaps(arguments: Mapping[str, Any], props: Mapping[str, Any], request: str) -> dict[str, Any]:
    """The pairs of number parameters whose values the request's labels swap (see the module doc)."""
    # an indexed parameter (``mass1``, ``mass2``) shares its words with its siblings: no label is its own
    numeric = [
        k for k, v in arguments.items() if is_number(v) and _numeric(props.get(k)) and not re.search(r"\d", k)
    ]
    if len(numeric) < 2:
        return {}
    words = _distinct_words([k for k in props if _numeric(props.get(k))])
    near = _neighbours(request)
    labels = {k: v for k in numeric if (v := _labelled(words[k], near)) is not None}
    out: dict[str, Any] = {}
    for key, wanted in labels.items():
        if key in out or float(arguments[key]) in wanted:
            continue
        mine = float(arguments[key])
        holders = [
            k
            for k in numeric
            if k not in out and k != key and float(arguments[k]) in wanted and mine in labels.get(k, {mine})
        ]  # the holder gives the labelled number up unless the request labels it with that number
        if len(holders) == 1:
            out[key], out[holders[0]] = arguments[holders[0]], arguments[key]
    return out


def _numeric(schema: object) -> bool:
    types = schema_types(schema) if isinstance(schema, Mapping) else ()
    return "integer" in types or "number" in types


def _distinct_words(keys: list[str]) -> dict[str, list[str]]:
    """Each parameter's label words: its name's words that no other of ``keys`` has ("final" of
    ``final_temperature`` beside ``initial_temperature``)."""
    words = {k: [w for w in name_parts(k) if len(w) >= 3 and weight(w) >= _LABEL_WEIGHT] for k in keys}
    return {k: [w for w in ws if not any(w in words[o] for o in keys if o != k)] for k, ws in words.items()}


def _neighbours(request: str) -> list[tuple[int, float, list[str]]]:
    """Each number ``request`` writes (its readings: "5%" is 5 and 0.05), where, and the words that
    may label it: up to three since the previous number, and the one right after it."""
    text = request.encode()
    spans = number_spans(text)
    out = []
    for a, b, written in spans:
        start = max((e for _, e, _ in spans if e <= a), default=0)
        before = _WORD.findall(text[start:a].decode(errors="ignore"))[-_BEFORE:]
        after = _WORD.findall(text[b:].decode(errors="ignore"))[:1]
        if (number := _float(written)) is not None:
            out.append((a, number, [w.lower() for w in (*before, *after)]))
    return out


def _labelled(words: list[str], near: list[tuple[int, float, list[str]]]) -> frozenset[float] | None:
    """The number labelled with one of ``words`` (of :func:`_neighbours`); None for none, or several."""
    if not words:
        return None
    found: dict[int, set[float]] = {}
    for at, value, neighbours in near:
        if any(same_word(w, label) for w in neighbours for label in words):
            found.setdefault(at, set()).add(value)
    return frozenset(next(iter(found.values()))) if len(found) == 1 else None


def unused_numbers(calls: Sequence[Mapping[str, Any]], request: str) -> dict[tuple[int, str], int | float]:
    """For the calls of one tool (in reply order), the values to set, by (call index, parameter): the
    request's unused, alike-labelled number for the call nearer to it (see the module doc)."""
    text = request.encode()
    numbers = _standalone(text)
    held = {float(v) for c in calls for v in c.values() if is_number(v)}
    unused = [(at, end, vs) for at, end, vs in numbers if not vs & held]
    out: dict[tuple[int, str], int | float] = {}
    last = len(calls) - 1
    for key, value in calls[last].items():
        if not is_number(value):
            continue
        said = [(at, end) for at, end, vs in numbers if float(value) in vs]
        others = [
            i for i in range(last) if is_number(calls[i].get(key)) and float(calls[i][key]) == float(value)
        ]
        if len(said) != 1 or len(others) != 1:
            continue
        label = _word_after(text, said[0][1])
        alike = [(at, vs) for at, end, vs in unused if label and _word_after(text, end) == label]
        if len(alike) != 1:
            continue
        at, readings = alike[0]
        if len(readings) != 1:
            continue  # "5%": 5 or 0.05, whichever the call's number is not
        pair = (others[0], last)
        near_new = min(pair, key=lambda i: _distance(calls[i], key, at, text, numbers))
        near_old = min(pair, key=lambda i: _distance(calls[i], key, said[0][0], text, numbers))
        if near_new != near_old and _same_sentence(text, at, calls[near_new], key, numbers):
            (new,) = readings
            out[(near_new, key)] = int(new) if new.is_integer() and isinstance(value, int) else new
    return out


def _float(written: bytes) -> float | None:
    """A number as JSON writes it, as a float; None past a float's range (a 400-digit number)."""
    try:
        return float(json.loads(written))
    except (OverflowError, ValueError):
        return None


def _same_sentence(
    text: bytes, at: int, call: Mapping[str, Any], key: str, numbers: list[tuple[int, int, frozenset[float]]]
) -> bool:
    """Whether ``call`` has another value in the sentence of position ``at`` ("My trip lasts 10
    days." is no sentence about the dogs' calls)."""
    starts = [0, *(m.end() for m in re.finditer(rb"[.?!](?:\s|$)", text))]
    start = max(p for p in starts if p <= at)
    end = min((p for p in starts if p > at), default=len(text))
    return any(start <= p < end for p in _places(call, key, text, numbers))


def _standalone(text: bytes) -> list[tuple[int, int, frozenset[float]]]:
    """The numbers ``text`` writes on their own (not inside a word: "dataset1"), each with its
    readings ("5%": 5 and 0.05)."""
    found: dict[int, tuple[int, set[float]]] = {}
    for a, b, written in number_spans(text):
        if a > 0 and re.match(rb"[A-Za-z_]", text[a - 1 : a]):
            continue
        if (number := _float(written)) is None:
            continue
        end, readings = found.setdefault(a, (b, set()))
        readings.add(number)
        found[a] = (max(end, b), readings)
    return [(a, b, frozenset(vs)) for a, (b, vs) in sorted(found.items())]


def _word_after(text: bytes, end: int) -> str | None:
    words = _WORD.findall(text[end : end + 24].decode(errors="ignore"))
    return words[0].lower() if words else None


def _distance(
    call: Mapping[str, Any], key: str, at: int, text: bytes, numbers: list[tuple[int, int, frozenset[float]]]
) -> int:
    """How far ``call``'s other values stand from position ``at`` of the request, at the nearest."""
    return min((abs(p - at) for p in _places(call, key, text, numbers)), default=len(text))


def _places(
    call: Mapping[str, Any], key: str, text: bytes, numbers: list[tuple[int, int, frozenset[float]]]
) -> list[int]:
    """Where the request writes ``call``'s values other than ``key``'s."""
    places = [
        a for a, _, vs in numbers for k, v in call.items() if k != key and is_number(v) and float(v) in vs
    ]
    places += [
        m.start()
        for k, v in call.items()
        if k != key and isinstance(v, str) and v.strip()
        for m in re.finditer(re.escape(v.strip().encode()), text, re.I)
    ]
    return places
