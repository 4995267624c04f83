"""The grounding stage's second chances: a fitting call asked again within the request's words, and
variants of one call merged.

Both serve "a wrong guess is worse than no guess" without throwing a right call away:

* a call of a tool that fits the request, abstained from only because the model made up a required
  string ("Bahia" for "the capital of Brazil") or number (0 for "below 50%"), is asked for once more
  with each such string limited to the request's own words
  (:func:`tether.selection.grounded.request_spans`) and each number to the request's numbers, less
  those another of its values already uses, and every other value kept as it was
  (:func:`regrounded_tool`);
* a later call of the same reply that only reorders an earlier call's values, or differs from it only
  in optional values nobody said, is the model hedging, not a second request: it is merged into the
  earlier call, which drops the disputed values so the tool's default decides (:func:`merge_variant`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from tether.calls import ToolCall
from tether.coercion import schema_types
from tether.grammar.formats.base import ToolSpec
from tether.grammar.spans import number_spans
from tether.guardrails.arguments import FieldError
from tether.schema_kinds import described_default, extractive_kind, names_a_file
from tether.selection.clauses import file_mentions
from tether.selection.doubled import beside
from tether.selection.grounded import Grounding, echoes, is_number, request_spans, said, variant_keys
from tether.selection.relevance import content_words, mentioned_flags, rank_tools, stem

__all__ = ["merge_variant", "regrounded_tool"]

_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def _begun_alike(spans: Sequence[str], value: str) -> list[str]:
    """The spans that begin as ``value`` begins, or that end with it as whole words."""
    tail = " " + " ".join(value.lower().split())
    return [
        s for s in spans if s[:1].lower() == value[:1].lower() or (tail != " " and s.lower().endswith(tail))
    ]


def regrounded_tool(
    call: ToolCall,
    tool: ToolSpec,
    unsaid: Sequence[str],
    request: str,
    spoken: Grounding,
    min_relevance: float,
    doubled: Mapping[str, str] | None = None,
) -> tuple[ToolSpec, tuple[FieldError, ...]] | None:
    """``tool`` narrowed for asking ``call`` again: each ``unsaid`` string limited to the request's
    spans that begin as the model's value began or end with it (a file parameter to the files the
    request names), each unsaid number to the request's numbers no other value uses, either one
    also to the default its description states; every other said value fixed as given, optional
    values nobody said left out, nothing added; with the errors that say why. A value that another
    parameter keeps (``doubled``: parameter → keeper) was no attempt at this one: the spans beside
    the parameter's own words are offered (:func:`tether.selection.doubled.beside`). None when the
    tool fits the request less than ``min_relevance`` (unless only dates and files the request names
    are asked again), an unsaid value is not a plain string or number, or nothing is left to offer."""
    props = tool.parameters.get("properties") or {}
    found = {k: _plain_kind(call.arguments.get(k), props.get(k), k) for k in unsaid}
    kinds = {k: v for k, v in found.items() if v is not None}
    if not unsaid or len(kinds) < len(found):
        return None
    # A value fills one parameter: spans sharing a word with the call's other values are not offered.
    # The tool's own name words ("concert" of concert_search) describe the request, not a value.
    taken = {w for k, v in call.arguments.items() if k not in unsaid for w in _words(json.dumps(v))}
    taken |= {stem(w) for w in content_words(tool.name)}
    spans = [
        s
        for s in request_spans(request)
        if not {stem(w) for w in _words(s)} & taken and not _words(s) & taken
    ]
    # The model began the value it meant and lost its way ("Bahia" for Brazil, "Cinacadae" for
    # Chinese): only spans that begin as its value began are offered, or that end with it ("League"
    # of "Premier League": the model began the name late). Any other value was no attempt at one.
    # A span made of the schema's own words ("League" for league) is the name echoed, not a value.
    doubled = doubled or {}
    choices: dict[str, list[Any]] = {
        k: [
            s
            for s in (
                beside(spans, request, k, _description(props.get(k)))
                if k in doubled
                else _begun_alike(spans, str(call.arguments[k]))
            )
            if not echoes(s, tool.name, k)
        ]
        for k in unsaid
    }
    # A file parameter takes a file the request names, however the model began ("read" for the
    # VERSION.txt of "Which version is written in VERSION.txt?"): a name is copied, never composed.
    named_files = file_mentions(request)
    filed = {k for k in unsaid if kinds[k] == "string" and names_a_file(k) and named_files}
    for k in filed:
        choices[k] = named_files
    dated = set()
    for k in unsaid:  # a date (and time) nobody said: the ones the conversation says, written alike
        if (dates := _said_dates(call.arguments[k], spoken)) is not None:
            choices[k] = dates
            dated.add(k)
    # A number is any the request states that no other value of the call already uses.
    used = {float(v) for k, v in call.arguments.items() if k not in unsaid and is_number(v)}
    numbers = [json.loads(n) for _, _, n in number_spans(request.encode())]
    for k in unsaid:
        if kinds[k] == "number":
            integral = "integer" in schema_types(props.get(k))
            fit = (n for n in numbers if float(n) not in used and (not integral or float(n).is_integer()))
            choices[k] = list(dict.fromkeys(int(n) if integral else n for n in fit))
    for k in unsaid:  # the default the description states is the tool's own value ("Default is 52.")
        default = _default_value(props.get(k), kinds[k])
        if default is not None and k not in dated | filed and default not in choices[k]:
            choices[k].append(default)
    if not all(choices.values()):
        return None
    # A date the conversation states, or a file the request names, is its own: only words and numbers
    # need a tool that fits.
    fits = (
        dated | filed == set(unsaid)
        or max((r.score for r in rank_tools(request, [tool])), default=0.0) >= min_relevance
    )
    if not fits:
        return None
    required = set(tool.parameters.get("required") or ())
    narrowed = {
        k: ({"type": kinds[k], "enum": choices[k]} if k in unsaid else {"const": v})
        for k, v in call.arguments.items()
        if k in unsaid or k in required or said(v, spoken) or extractive_kind(props.get(k), k) is None
    }
    # Exactly these parameters: the re-ask changes values, it adds nothing.
    parameters = {
        "type": "object",
        "properties": narrowed,
        "required": list(narrowed),
        "additionalProperties": False,
    }
    errors = tuple(
        FieldError(
            k,
            (
                f"{call.arguments[k]!r} is the {doubled[k]}"
                if k in doubled
                else f"the conversation does not say {call.arguments[k]!r}"
            )
            + f"; copy the {_WHAT[kinds[k]]} of the request that give the {k}{_described(props.get(k))}",
            _WHAT[kinds[k]] + " of the request",
            {"type": kinds[k]},
        )
        for k in unsaid
    )
    return replace(tool, parameters=parameters), errors


_WHAT = {"string": "words", "number": "numbers"}


_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}(?:([T ])\d{2}:\d{2}(:\d{2})?(\.\d+)?(Z|[+-]\d{2}:?\d{2})?)?$")


def _said_dates(value: object, spoken: Grounding) -> list[str] | None:
    """When ``value`` is an ISO date or date-time: the conversation's dates (with its times of day)
    written the same way; None for any other value."""
    m = _ISO.match(value) if isinstance(value, str) else None
    if m is None:
        return None
    sep, seconds, _, zone = m.groups()
    times = sorted(spoken.times) or [(0, 0)]
    out = []
    for y, mo, d in sorted(spoken.dates):
        day = f"{y:04d}-{mo:02d}-{d:02d}"
        if sep is None:
            out.append(day)
            continue
        out += [f"{day}{sep}{h:02d}:{mi:02d}{':00' if seconds else ''}{zone or ''}" for h, mi in times]
    return out


def _default_value(schema: object, kind: str) -> Any:
    """The default ``schema``'s description states, as a value of ``kind``; None when it states none."""
    default = described_default(schema)
    if default is None or kind == "string":
        return default
    try:
        number = float(default)
    except ValueError:
        return None
    integral = isinstance(schema, Mapping) and "integer" in schema_types(schema)
    return int(number) if integral and number.is_integer() else None if integral else number


def _plain_kind(value: object, schema: object, name: str) -> str | None:
    """``"string"`` or ``"number"`` when ``value`` is one plain extractive value, else None."""
    kind = extractive_kind(schema, name)
    if kind == "string" and isinstance(value, str):
        return kind
    if kind == "number" and is_number(value):
        return kind
    return None


def _description(schema: object) -> str:
    text = schema.get("description") if isinstance(schema, dict) else None
    return text.strip() if isinstance(text, str) else ""


def _described(schema: object) -> str:
    text = _description(schema)
    return f" ({text.rstrip('.')})" if text else ""


def merge_variant(
    call: ToolCall, earlier: Sequence[ToolCall], tool: ToolSpec, spoken: Grounding, request: str
) -> tuple[int, ToolCall, str] | None:
    """When ``call`` is only a variant of one of the ``earlier`` calls of its reply
    (:func:`tether.selection.grounded.variant_keys`): that call's index, the call without the values
    the two disagree on, and what happened. None when ``call`` asks for something else."""
    flags = mentioned_flags(request, [tool]).get(tool.name, frozenset())
    for at, other in enumerate(earlier):
        if other.name != call.name:
            continue
        diff = variant_keys(other.arguments, call.arguments, tool.parameters, spoken, flags)
        if diff is None:
            continue
        if not diff:
            return at, other, f"call {len(earlier)} reorders the values of call {at}"
        kept = {k: v for k, v in other.arguments.items() if k not in diff}
        detail = f"call {len(earlier)} differs from call {at} only in {', '.join(diff)}, which nobody said"
        return at, other.with_repairs("variant_merged", arguments=kept), detail
    return None
