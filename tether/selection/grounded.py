"""Is a call's content in the conversation? The check behind "a wrong guess is worse than no guess".

A call a small model makes for a request no tool fits has to invent its values: a quadratic's
coefficients nobody gave, a city nobody named. :func:`grounded_share` measures the share of a
call's *extractive* values (strings and numbers without ``enum``, ``const`` or ``default``,
:func:`tether.schema_kinds.extractive_kind`) that the conversation contains:

* a string counts when the conversation says it from the start of a word (case and spacing
  ignored; a value of up to three letters as a whole word, so ``"CA"`` is not found in "case"),
  when at least half of its words do, by their stems (``"New York, NY"`` for "in New York",
  ``"panda"`` for "pandas"), or when it is a date the conversation gives in any usual writing
  (``"2025-03-14"`` for "March 14th, 2025", for "March 14th" with no year, and for "tomorrow" where
  the conversation states today's date); a string of several lines, or one of a composed
  parameter (a file's content, a command: :func:`tether.schema_kinds.composed`), is the
  model's own writing and says nothing either way;
* a number counts when the conversation states it, however written
  (:func:`tether.grammar.spans.number_spans`: ``1,000``, ``2 million``, ``5%`` for 0.05, "two",
  "a dozen");
* an identifier or an address written as one token (``his_id``, ``ann@ann.com``) counts only when
  every part of it is said, and the value of an identifier parameter (``user_id``, ``orderId``) only
  when the text writes it whole (``his_profile`` for "his profile?" is composed, not copied), and a value made only of the tool's or the parameter's own name words
  (``"name"`` for ``name``, ``["concat", "strings"]`` for ``concat_strings``) is the schema echoed,
  never counted as said; a date-time counts when its date is said and so is its time of day
  (``"1:45 pm"`` for ``T13:45``);
* a name the conversation writes once is said for one parameter: written into two, the one that
  fits it worse is reported (``doubled``, :mod:`tether.selection.doubled`), to be asked again;
* the values inside objects (and arrays of them) count like top-level ones;
* a top-level value that its parameter's description gives as the default ("The size of the deck.
  Default is 52.", :func:`tether.schema_kinds.described_default`) counts as said: the tool says it.

Booleans, enums, defaults and values without a schema say nothing either way. The guard
pipeline abstains from a call whose share is below its threshold, or (``strict``) one with a
*required* value the conversation lacks, when the request allowed a text answer (``tool_choice:
auto``): a call that needs what nobody said is a guess, and the model asks or answers instead.
Layer 0's grounding makes copied values the likely ones in the first place, so the check mostly
catches the invented call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.chat import Message
from tether.grammar.datetimes import meant_day, only_dates, written_dates, written_month_days, written_times
from tether.grammar.spans import number_spans
from tether.schema_kinds import (
    described_default,
    extractive_kind,
    identifier_words,
    name_parts,
    names_a_file,
    names_a_url,
    reads_as_url,
)
from tether.selection.clauses import file_mentions
from tether.selection.doubled import doubled_keys
from tether.selection.relevance import listed_choices, stem, weight

__all__ = [
    "CallGrounding",
    "Grounding",
    "check_call",
    "conversation_text",
    "echoes",
    "grounded_share",
    "is_number",
    "request_spans",
    "said",
    "unsaid_optional",
    "variant_keys",
]

_WORD = re.compile(r"[^\W_]+")


def conversation_text(messages: Sequence[Message]) -> str:
    """The text argument values may come from: what the client, the user and the tools said."""
    return "\n".join(m.content for m in messages if m.role in ("system", "user", "tool") and m.content)


@dataclass(frozen=True)
class Grounding:
    """The conversation's text, prepared once per request for many calls."""

    text: str
    stems: frozenset[str]
    numbers: frozenset[float]
    dates: frozenset[tuple[int, int, int]]
    times: frozenset[tuple[int, int]] = frozenset()
    month_days: frozenset[tuple[int, int]] = frozenset()

    @classmethod
    def of(cls, text: str) -> Grounding:
        flat = " ".join(text.lower().split())
        stems = frozenset(stem(w) for w in _WORD.findall(flat))
        numbers = {float(n) for _, _, n in number_spans(flat.encode())}
        dates = written_dates(flat)
        if (day := meant_day(flat)) is not None:  # "tomorrow", where the text states today's date
            dates.add((day.year, day.month, day.day))
        return cls(
            flat,
            stems,
            frozenset(numbers),
            frozenset(dates),
            frozenset(written_times(flat)),
            frozenset(written_month_days(flat)),
        )

    def writes(self, value: str) -> bool:
        """Whether the text writes ``value`` itself, from the start of a word (case and spacing
        ignored; a value of up to three letters as a whole word)."""
        flat = " ".join(value.lower().split())
        end = r"(?![^\W_])" if len(flat) <= 3 else ""
        return not flat or bool(re.search(r"(?<![^\W_])" + re.escape(flat) + end, self.text))

    def has_string(self, value: str) -> bool:
        flat = " ".join(value.lower().split())
        if self.writes(flat):
            return True
        days = written_dates(flat)
        if days & self.dates or any((m, d) in self.month_days for _, m, d in days):
            # A date-time is said with its time of day; midnight is what a bare date means.
            return not (written_times(flat) - {(0, 0)} - self.times)
        if days and only_dates(flat):  # "2023-10-03" is not said by "2023" and "10"
            return False
        words = _WORD.findall(flat)
        if " " not in flat and re.search(r"[_@]", flat):  # an identifier, an address: all of it
            return bool(words) and all(stem(w) in self.stems for w in words)
        return bool(words) and 2 * sum(stem(w) in self.stems for w in words) >= len(words)

    def has_value(self, value: float) -> bool:
        """A number, or, beyond float range (a 400-digit integer), its digits as written."""
        try:
            return self.has_number(float(value))
        except OverflowError:
            return str(value) in self.text.replace(",", "")

    def has_number(self, value: float) -> bool:
        return any(abs(value - n) <= 1e-9 * max(1.0, abs(n)) for n in self.numbers) or any(
            abs(value * 100 - n) <= 1e-6 * max(1.0, abs(n)) for n in self.numbers
        )


def is_number(value: Any) -> bool:
    """Whether ``value`` is a JSON number (a bool is not one)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _values(value: Any, schema: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    if isinstance(value, Mapping) and isinstance(props, Mapping):  # an object: its values, by their names
        for key, v in value.items():
            yield from _values(v, props.get(key), key)
        return
    items = schema.get("items") if isinstance(schema, Mapping) else None
    if isinstance(value, list) and isinstance(items, Mapping) and "properties" in items:
        for v in value:
            yield from _values(v, items, name)
        return
    kind = extractive_kind(schema, name)
    if kind is None:
        return
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema, Mapping) else None
        for v in value:
            yield from _values(v, items if items is not None else schema, name)
    elif kind == "string" and isinstance(value, str):
        if "\n" not in value:  # several lines are written, not named
            yield kind, value
    elif kind == "number" and is_number(value):
        yield kind, value


@dataclass(frozen=True)
class CallGrounding:
    """How much of one call the conversation said: ``found`` of ``total`` extractive values, the
    required parameters with a value it lacks (``unsaid``), and the parameters holding a value
    another one keeps (``doubled``: (parameter, keeper) pairs,
    :func:`tether.selection.doubled.doubled_keys`; said, but likely the other's)."""

    found: int = 0
    total: int = 0
    unsaid: tuple[str, ...] = ()
    doubled: tuple[tuple[str, str], ...] = ()

    @property
    def share(self) -> float | None:
        """The share of the call's extractive values the conversation holds; None when it has none."""
        return self.found / self.total if self.total else None


def _name_words(name: str) -> set[str]:
    """The stems of a schema name's words (``get_adriel_profile``, ``userId``)."""
    return {stem(w) for w in name_parts(name)}


def echoes(value: str, *names: str) -> bool:
    """Is ``value`` made only of the words of ``names`` (the tool's, the parameter's)? Then the model
    copied the schema, whatever the conversation says: ``"name"`` for ``name``."""
    words = {stem(w) for w in _WORD.findall(value.lower())}
    return bool(words) and words <= set().union(*(_name_words(n) for n in names))


def _file_after_tool(value: str, source: Grounding, tool: str, key: str) -> bool:
    """A file named after the tool ("Read.json" for Read) that the text does not write: it echoes the
    schema as much as "Read" would."""
    if not names_a_file(key) or file_mentions(value) != [value] or value.lower() in source.text:
        return False
    return echoes(value.rsplit("/", 1)[-1].rsplit(".", 1)[0], tool, key)


def _is_default(value: Any, default: str) -> bool:
    """Is ``value`` the default its parameter's description states? Then the tool said it."""
    if isinstance(value, str):
        return value.strip().lower() == default.lower()
    try:
        return is_number(value) and float(value) == float(default)
    except ValueError:
        return False


def _found(kind: str, value: Any, source: Grounding, tool: str, key: str) -> bool:
    if kind == "string" and _file_after_tool(value, source, tool, key):
        return False
    if kind == "string" and names_a_url(key) and not reads_as_url(value):
        return False  # "eth1" is no URL, however often the request says it
    if kind == "string" and identifier_words(key) is not None:
        return source.writes(value) and not echoes(value, tool, key)  # an id is copied, never composed
    if kind == "string":
        return source.has_string(value) and not echoes(value, tool, key)
    return source.has_value(value)


def check_call(
    arguments: Mapping[str, Any], parameters: Mapping[str, Any], source: Grounding, tool: str = ""
) -> CallGrounding:
    """Which of the call's extractive values ``source`` contains (``tool``: the called tool's name,
    whose words, like the parameter's, a value may not merely echo)."""
    props = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if not isinstance(props, Mapping):
        return CallGrounding()
    required = set(parameters.get("required") or ())
    found = total = 0
    unsaid: list[str] = []
    doubled = doubled_keys(arguments, parameters, source.text)
    for key, value in arguments.items():
        # A value nested in an object counts toward the share; only a top-level one is "unsaid".
        top = not isinstance(value, Mapping) and not (
            value and isinstance(value, list) and isinstance(value[0], Mapping)
        )
        default = described_default(props.get(key)) if top else None
        for kind, v in _values(value, props.get(key), key):
            ok = _found(kind, v, source, tool, key) or (default is not None and _is_default(v, default))
            total += 1
            found += ok
            if not ok and top and key in required and key not in unsaid:
                unsaid.append(key)
    return CallGrounding(found, total, tuple(unsaid), tuple(doubled.items()))


def unsaid_optional(
    arguments: Mapping[str, Any],
    parameters: Mapping[str, Any],
    source: Grounding,
    tool: str = "",
    flags: frozenset[str] = frozenset(),
    doubled: Mapping[str, str] | None = None,
) -> tuple[str, ...]:
    """The optional parameters whose values nobody said and that differ from the tool's own default:
    a guess that would override what the tool does by itself. A string or number counts when it is
    not said; a choice (an ``enum`` string, one whose description quotes its choices, a boolean) only
    when the schema has a default to fall back on and the request names neither the value nor, for a
    boolean, the flag's words (``flags``); a string outside the choices a description quotes also when
    the description states the default. An optional parameter holding a value another one keeps
    (:func:`tether.selection.doubled.doubled_keys`; ``doubled`` when the caller has them) counts too."""
    props = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if not isinstance(props, Mapping):
        return ()
    required = set(parameters.get("required") or ())
    out: list[str] = []
    if doubled is None:
        doubled = doubled_keys(arguments, parameters, source.text)
    for key, value in arguments.items():
        schema = props.get(key)
        if key in doubled and key not in required:
            out.append(key)
            continue
        if key in required or not isinstance(schema, Mapping) or value == schema.get("default"):
            continue
        choice = isinstance(value, bool) or (
            isinstance(value, str) and ("enum" in schema or listed_choices(schema))
        )
        if choice:  # only with a default to fall back on
            guessed = key not in flags if isinstance(value, bool) else not source.has_string(value)
            if guessed and "default" in schema:
                out.append(key)
            elif isinstance(value, str) and _unlisted(value, schema):
                out.append(key)  # "price" where the description lists Open/Close/High/Low, Close by default
            continue
        unset = {k: v for k, v in schema.items() if k != "default"}  # a default is no reason to keep it
        found = [_found(kind, v, source, tool, key) for kind, v in _values(value, unset, key)]
        if extractive_kind(unset, key) is not None and found and not all(found):
            out.append(key)
    return tuple(out)


def _unlisted(value: str, schema: Mapping[str, Any]) -> bool:
    """A value none of the choices a description quotes, where it states a default to fall back on."""
    listed = listed_choices(schema) if "enum" not in schema else None
    return (
        bool(listed)
        and value.lower() not in {c.lower() for c in listed or ()}
        and (described_default(schema) is not None)
    )


def grounded_share(
    arguments: Mapping[str, Any], parameters: Mapping[str, Any], source: Grounding
) -> float | None:
    """The share of the call's extractive values that ``source`` contains; None when it has none."""
    return check_call(arguments, parameters, source).share


# Where a sentence and a clause end: the words of a span never cross these.
_SENTENCE = re.compile(r"[!?\n]|\.(?=\s|$)")
_CLAUSE = re.compile(r"[,;:()\[\]{}]")
_QUOTE = re.compile(r"'([^'\n]{1,60})'|\"([^\"\n]{1,60})\"")
_EDGE = "'\".`"
_SPAN_EDGE = 1.0  # a span neither starts nor ends with a word this common ("the", "of", "what")
# A sentence's first word is capitalized whatever it is: it starts a span only when this rare
# ("Find", "Show" and "Book" are the request's verbs; "Calculate" and "Brazil" can be names).
_SENTENCE_EDGE = 2.0


def request_spans(text: str, *, max_words: int = 4, limit: int = 64) -> tuple[str, ...]:
    """The values a request names, for a string parameter the model filled with something nobody
    said: quoted text, then runs of up to ``max_words`` words within a clause that neither start nor
    end with a word as common as "the" or "of" (in order of appearance, at most ``limit``)."""
    found: dict[str, None] = {}
    for m in _QUOTE.finditer(text):
        found.setdefault((m.group(1) or m.group(2)).strip(), None)
    for sentence in _SENTENCE.split(text):
        for c, clause in enumerate(_CLAUSE.split(sentence)):
            words = [w for w in (w.strip(_EDGE) for w in clause.split()) if w]
            for size in range(1, max_words + 1):
                for i in range(len(words) - size + 1):
                    run = words[i : i + size]
                    first = _SENTENCE_EDGE if c == 0 and i == 0 else _SPAN_EDGE
                    if _says_little(run[0], first) or _says_little(run[-1], _SPAN_EDGE):
                        continue
                    found.setdefault(" ".join(run), None)
    spans = [s for s in found if s and not _number_only(s)]
    return tuple(spans[:limit])


def _says_little(word: str, least: float) -> bool:
    parts = _WORD.findall(word)
    return not parts or (len(parts) == 1 and not parts[0].isdigit() and weight(parts[0]) < least)


def _number_only(text: str) -> bool:
    return bool(re.fullmatch(r"[\d.,%$\s-]+", text))


def said(value: Any, source: Grounding) -> bool:
    """Does the conversation give ``value`` (any JSON value; a boolean never counts)?"""
    if isinstance(value, bool) or value is None:
        return False
    if is_number(value):
        return source.has_value(value)
    if isinstance(value, str):
        return source.has_string(value)
    if isinstance(value, list):
        return bool(value) and all(said(v, source) for v in value)
    if isinstance(value, Mapping):
        return bool(value) and all(said(v, source) for v in value.values())
    return False


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def variant_keys(
    earlier: Mapping[str, Any],
    later: Mapping[str, Any],
    parameters: Mapping[str, Any],
    source: Grounding,
    flags: frozenset[str] = frozenset(),
) -> tuple[str, ...] | None:
    """Is ``later`` (a call of the same tool as ``earlier``, in one reply) only a variant of it?

    It is when the two hold the same values in another order (``Apple, Samsung`` then ``Samsung,
    Apple``) or differ only in optional values nobody said, set in one and not the other or set to
    two values (``quarterly`` then ``annually``; a boolean counts as said when the request uses its
    words, ``flags``). Returns the parameters they differ in (empty for a reordering), or None when
    ``later`` asks for something else."""
    if not later:
        return None
    missing = object()
    diff = tuple(k for k in {**earlier, **later} if earlier.get(k, missing) != later.get(k, missing))
    if not diff:
        return None
    if set(earlier) == set(later) and sorted(map(_dumps, later.values())) == sorted(
        map(_dumps, earlier.values())
    ):
        return ()
    required = set(parameters.get("required") or ())

    def given(key: str, value: Any) -> bool:
        return key in flags if isinstance(value, bool) else said(value, source)

    values = [
        (k, v) for k in diff for v in (earlier.get(k, missing), later.get(k, missing)) if v is not missing
    ]
    if required & set(diff) or any(given(k, v) for k, v in values):
        return None
    return diff
