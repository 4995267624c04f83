"""Is a call's content in the conversation? The check behind "a wrong guess is worse than no guess".

A call a small model makes for a request no tool fits has to invent its values: a quadratic's
coefficients nobody gave, a city nobody named. :func:`grounded_share` measures the share of a
call's *extractive* values (strings and numbers without ``enum``, ``const`` or ``default``,
:func:`tether.grammar.grounding.extractive_kind`) that the conversation contains:

* a string counts when it occurs in the conversation (case and spacing ignored), or when
  at least half of its words do (``"New York, NY"`` for "in New York"); a string of several
  lines, or one of a composed parameter (a file's content, a command:
  :func:`tether.grammar.grounding.composed`), is
  the model's own writing and says nothing either way;
* a number counts when the conversation states it, however written
  (:func:`tether.grammar.spans.number_spans`: ``1,000``, ``2 million``, ``5%`` for 0.05, "two",
  "a dozen").

Booleans, enums, defaults and values without a schema say nothing either way. The guard
pipeline abstains from a call whose share is below its threshold when the request allowed
a text answer (``tool_choice: auto``); layer 0's grounding makes copied values the likely
ones in the first place, so the check mostly catches the invented call.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.chat import Message
from tether.grammar.grounding import extractive_kind
from tether.grammar.spans import number_spans

__all__ = ["Grounding", "conversation_text", "grounded_share"]

_WORD = re.compile(r"[^\W_]+")


def conversation_text(messages: Sequence[Message]) -> str:
    """The text argument values may come from: what the client, the user and the tools said."""
    return "\n".join(m.content for m in messages if m.role in ("system", "user", "tool") and m.content)


@dataclass(frozen=True)
class Grounding:
    """The conversation's text, prepared once per request for many calls."""

    text: str
    words: frozenset[str]
    numbers: frozenset[float]

    @classmethod
    def of(cls, text: str) -> Grounding:
        flat = " ".join(text.lower().split())
        words = frozenset(_WORD.findall(flat))
        numbers = {float(n) for _, _, n in number_spans(flat.encode())}
        return cls(flat, words, frozenset(numbers))

    def has_string(self, value: str) -> bool:
        flat = " ".join(value.lower().split())
        if not flat or flat in self.text:
            return True
        words = _WORD.findall(flat)
        return bool(words) and 2 * sum(w in self.words for w in words) >= len(words)

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


def grounded_share(
    arguments: Mapping[str, Any], parameters: Mapping[str, Any], source: Grounding
) -> float | None:
    """The share of the call's extractive values that ``source`` contains; None when it has none."""
    props = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if not isinstance(props, Mapping):
        return None
    found = total = 0
    for key, value in arguments.items():
        for kind, v in _values(value, props.get(key), key):
            total += 1
            found += source.has_string(v) if kind == "string" else source.has_value(v)
    return found / total if total else None
