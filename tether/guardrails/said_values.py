"""Values as the request says them: a from/to pair in its order, a command whole.

"In settings.txt, change the line color = red to color = blue": an edit tool's ``oldString`` is
``color = red`` and its ``newString`` ``color = blue``; a small model copies both and often swaps
them, and the edit then fails ("Could not find oldString"). The same holds for ``from_currency`` /
``to_currency`` ("100 USD to EUR") and a ``source`` / ``target``. English says the source first. A
pair is two string parameters whose names differ only by a role word (``old``/``new``, ``from``/``to``,
``source``/``target``); where both values are spans of the request and the target's comes first with
the source's after it, the two are swapped back; where both are the same (a change to itself, which
no tool does), the request's "X to Y" around the value gives the other, as many words long.

"Run the command python3 -c "print(6*7*1001)"": a ``command`` parameter (:func:`~tether.selection.clauses.takes_command`) whose
value is a part of a command the request gives to run (in backticks, or after "the command") gets
the whole command; the model copies the part it recognizes as code and the shell fails on the rest.
"What is the air quality index in London 2022/08/16?": ``location: "London 2022/08/16"`` beside
``date: "2022/08/16"``. A string value that runs on into another parameter's whole value (after a
space, or before it after "in", "at", "on", "for", "from" or "of") keeps only its own words.

"The average grade for these scores {'math':90, 'science':75}": a model that writes
``gradeDict: {"type": "object", "description": "A dictionary where…"}`` copied the parameter's schema,
not a value. An object parameter holding its schema echoed takes the one object the request writes.

Anything else is left as the model wrote it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tether.grammar.datetimes import written_dates
from tether.jsonscan import find_json_values
from tether.schema_kinds import asks_free_text, name_parts
from tether.selection.clauses import command_mentions, takes_command

__all__ = ["apart", "ordered_pairs", "whole_commands", "written_objects"]

_ROLES = {"old": "new", "from": "to", "source": "target", "src": "dst", "original": "replacement"}
_TARGETS = {"new", "to", "target", "dst", "replacement", "destination", "dest"}


def _pairs(keys: list[str]) -> list[tuple[str, str]]:
    """(source, target) parameters: names that differ only by a role word in the same place."""
    out: list[tuple[str, str]] = []
    for src in keys:
        a = name_parts(src)
        for i, w in enumerate(a):
            if w not in _ROLES:
                continue
            for dst in keys:
                b = name_parts(dst)
                same_rest = dst != src and len(b) == len(a) and b[:i] == a[:i] and b[i + 1 :] == a[i + 1 :]
                if same_rest and (b[i] == _ROLES[w] or (w == "source" and b[i] in _TARGETS)):
                    out.append((src, dst))
    return out


def whole_commands(
    arguments: Mapping[str, Any], properties: Mapping[str, Any], request: str
) -> dict[str, Any]:
    """The command parameters whose value is a strict part of one command the request gives, with it."""
    given = command_mentions(request)
    changed: dict[str, Any] = {}
    for key in properties:
        value = arguments.get(key)
        if not isinstance(key, str) or not isinstance(value, str) or not takes_command(key):
            continue
        whole = [c for c in given if value.strip() and value.strip() in c and value.strip() != c]
        if len(whole) == 1:
            changed[key] = whole[0]
    return changed


_LINK = re.compile(r"\s+(?:to|with|into|by)\s+", re.IGNORECASE)
_TOKEN = re.compile(r"\S+")
_CLAUSE_END = re.compile(r"[.,;:!?](?:\s|$)|\s+(?:and|then|but)\s+")


def _partnered(value: str, request: str) -> tuple[str, str] | None:
    """(source, target) for a change of ``value`` to itself: where the request writes ``value`` once,
    the words "to" / "with" / "into" link to it or from it, as many as it has; where it does not
    write it, the request's one such link with the rest of its clause after it and as many words
    before ("change the line color = red to color = blue")."""
    links = list(_LINK.finditer(request))
    if request.count(value) == 1:
        at = request.index(value)
        size = len(_TOKEN.findall(value))
        after = _LINK.match(request, at + len(value))
        if after is not None:
            return _around(request, after, size, before=False)
        before = [m for m in links if m.end() == at]
        return _around(request, before[0], size, before=True) if before else None
    if len(links) != 1:
        return None
    target = _CLAUSE_END.split(request[links[0].end() :], maxsplit=1)[0]
    size = len(_TOKEN.findall(target))
    return _around(request, links[0], size, before=True) if size else None


def _around(request: str, link: re.Match[str], size: int, *, before: bool) -> tuple[str, str] | None:
    """The ``size`` words on each side of ``link``; None where a side has fewer."""
    left = _TOKEN.findall(request[: link.start()])[-size:]
    right = _TOKEN.findall(request[link.end() :])[:size]
    if len(left) != size or len(right) != size:
        return None
    return " ".join(left), " ".join(right).rstrip(".,;:!?")


def ordered_pairs(
    arguments: Mapping[str, Any], properties: Mapping[str, Any], request: str
) -> dict[str, Any]:
    """The swapped values of each pair written in the reverse of the request's order (empty: none)."""
    changed: dict[str, Any] = {}
    lowered = request.lower()
    for src, dst in _pairs([k for k in properties if isinstance(k, str)]):
        old, new = arguments.get(src), arguments.get(dst)
        if not isinstance(old, str) or not isinstance(new, str) or not old.strip() or not new.strip():
            continue
        if old == new:  # a change to itself: the request's "X to Y" around the value says both
            pair = _partnered(old, request)
            if pair is not None:
                changed[src], changed[dst] = pair
            continue
        at_old, at_new = lowered.find(old.lower()), lowered.find(new.lower())
        if old.lower() in new.lower() or new.lower() in old.lower() or at_old < 0 or at_new < 0:
            continue
        # The target's span first, the source's after it and apart from it: written the other way round.
        if at_new + len(new) <= at_old and lowered.count(old.lower()) == 1 == lowered.count(new.lower()):
            changed[src], changed[dst] = new, old
    return changed


_JOINED = r"\s+(?:(?:in|at|on|for|from|of)\s+)?"
_LETTER = re.compile(r"[^\W\d_]")
_NAME_LIKE = re.compile(r"[\w .'&-]+")  # a name or a place, not code ("color =" of an edit)


def apart(arguments: Mapping[str, Any], props: Mapping[str, Any]) -> dict[str, str]:
    """The string values that hold another parameter's whole value as well, less it (see the
    module doc)."""
    strings = {
        k: v.strip() for k, v in arguments.items() if isinstance(v, str) and k in props and "\n" not in v
    }
    out: dict[str, str] = {}
    for key, value in strings.items():
        if asks_free_text(key):
            continue  # a query says the request in its own words, places and all
        for other, given in strings.items():
            if other == key or not given or len(given) >= len(value):
                continue
            end = re.fullmatch(rf"(.*?[^\s,;]){_JOINED}{re.escape(given)}", value, re.I)
            start = re.fullmatch(rf"{re.escape(given)}\s+(?:in|at|on|for|from|of)\s+(.+)", value, re.I)
            found = end or start
            rest = found.group(1).strip() if found else ""
            # a date the value writes is its own unless the other value writes it ("10th December 2022"
            # beside a "2022" is a date, not a name and a year)
            own_date = written_dates(value.lower()) - written_dates(given.lower())
            if _LETTER.search(rest) and _NAME_LIKE.fullmatch(rest) and not own_date:
                out[key] = rest
                break
    return out


# The words of a JSON Schema: an object made of these, with a "type", is a schema, not a value.
_SCHEMA_WORDS = frozenset(
    {"type", "description", "properties", "items", "enum", "default", "format", "required", "title"}
)


def written_objects(arguments: Mapping[str, Any], props: Mapping[str, Any], request: str) -> dict[str, Any]:
    """The object parameters holding their schema echoed, with the one object ``request`` writes (a
    JSON object or a Python dict literal); empty when it writes none or several."""
    echoed = [
        k
        for k, v in arguments.items()
        if isinstance(v, Mapping)
        and "type" in v
        and set(v) <= _SCHEMA_WORDS
        and not _declares(props.get(k), v)
    ]
    if not echoed:
        return {}
    written = [
        span.value for span in find_json_values(request) if isinstance(span.value, dict) and span.value
    ]
    return {k: written[0] for k in echoed} if len(written) == 1 else {}


def _declares(schema: object, value: Mapping[str, Any]) -> bool:
    """Whether the parameter's schema names the value's keys as its own properties (a tool that
    takes a schema, whose value is one)."""
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return isinstance(props, Mapping) and bool(set(value) & set(props))
