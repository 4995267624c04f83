"""Is a call's content in the conversation? The check behind "a wrong guess is worse than no guess".

A call a small model makes for a request no tool fits has to invent its values: a quadratic's
coefficients nobody gave, a city nobody named. :func:`grounded_share` measures the share of a
call's *extractive* values (strings and numbers without ``enum``, ``const`` or ``default``,
:func:`tether.grammar.grounding.extractive_kind`) that the conversation contains:

* a string counts when the conversation says it from the start of a word (case and spacing
  ignored; a value of up to three letters as a whole word, so ``"CA"`` is not found in "case"),
  when at least half of its words do, by their stems (``"New York, NY"`` for "in New York",
  ``"panda"`` for "pandas"), or when it is a date the conversation gives in any usual writing
  (``"2025-03-14"`` for "March 14th, 2025"); a string of several lines, or one of a composed
  parameter (a file's content, a command: :func:`tether.grammar.grounding.composed`), is the
  model's own writing and says nothing either way;
* a number counts when the conversation states it, however written
  (:func:`tether.grammar.spans.number_spans`: ``1,000``, ``2 million``, ``5%`` for 0.05, "two",
  "a dozen").

Booleans, enums, defaults and values without a schema say nothing either way. The guard
pipeline abstains from a call whose share is below its threshold, or (``strict``) one with a
*required* value the conversation lacks, when the request allowed a text answer (``tool_choice:
auto``): a call that needs what nobody said is a guess, and the model asks or answers instead.
Layer 0's grounding makes copied values the likely ones in the first place, so the check mostly
catches the invented call.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.chat import Message
from tether.grammar.grounding import extractive_kind
from tether.grammar.spans import number_spans
from tether.selection.relevance import stem

__all__ = ["CallGrounding", "Grounding", "check_call", "conversation_text", "grounded_share"]

_WORD = re.compile(r"[^\W_]+")
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
    (re.compile(r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})\b"), "ymd"),
    (re.compile(r"\b(\d{1,2})[-/.](\d{1,2})[-/.](\d{4})\b"), "mdy"),
    (re.compile(rf"\b{_MONTH}\s*{_DAY},?\s*(\d{{4}})\b"), "Mdy"),
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s*(\d{{4}})\b"), "dMy"),
    (re.compile(rf"\b(\d{{4}}),?\s+{_MONTH}\s+{_DAY}\b"), "yMd"),
)


def _dates(text: str) -> set[tuple[int, int, int]]:
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

    @classmethod
    def of(cls, text: str) -> Grounding:
        flat = " ".join(text.lower().split())
        stems = frozenset(stem(w) for w in _WORD.findall(flat))
        numbers = {float(n) for _, _, n in number_spans(flat.encode())}
        return cls(flat, stems, frozenset(numbers), frozenset(_dates(flat)))

    def has_string(self, value: str) -> bool:
        flat = " ".join(value.lower().split())
        if not flat:
            return True
        end = r"(?![^\W_])" if len(flat) <= 3 else ""
        if re.search(r"(?<![^\W_])" + re.escape(flat) + end, self.text):
            return True
        if self.dates and _dates(flat) & self.dates:
            return True
        words = _WORD.findall(flat)
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


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _values(value: Any, schema: Any, name: str = "") -> Iterator[tuple[str, Any]]:
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
    elif kind == "number" and _is_number(value):
        yield kind, value


@dataclass(frozen=True)
class CallGrounding:
    """How much of one call the conversation said: ``found`` of ``total`` extractive values, and the
    required parameters with a value it lacks (``unsaid``)."""

    found: int = 0
    total: int = 0
    unsaid: tuple[str, ...] = ()

    @property
    def share(self) -> float | None:
        """The share of the call's extractive values the conversation holds; None when it has none."""
        return self.found / self.total if self.total else None


def check_call(
    arguments: Mapping[str, Any], parameters: Mapping[str, Any], source: Grounding
) -> CallGrounding:
    """Which of the call's extractive values ``source`` contains."""
    props = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if not isinstance(props, Mapping):
        return CallGrounding()
    required = set(parameters.get("required") or ())
    found = total = 0
    unsaid: list[str] = []
    for key, value in arguments.items():
        for kind, v in _values(value, props.get(key), key):
            ok = source.has_string(v) if kind == "string" else source.has_value(v)
            total += 1
            found += ok
            if not ok and key in required and key not in unsaid:
                unsaid.append(key)
    return CallGrounding(found, total, tuple(unsaid))


def grounded_share(
    arguments: Mapping[str, Any], parameters: Mapping[str, Any], source: Grounding
) -> float | None:
    """The share of the call's extractive values that ``source`` contains; None when it has none."""
    return check_call(arguments, parameters, source).share
