"""The grounding stage's second chances: a fitting call asked again within the request's words, and
variants of one call merged.

Both serve "a wrong guess is worse than no guess" without throwing a right call away:

* a call of a tool that fits the request, abstained from only because the model made up a required
  string ("Bahia" for "the capital of Brazil"), is asked for once more with each such string limited
  to the request's own words (:func:`tether.selection.grounded.request_spans`, less those another of
  its values already uses) and every other value kept as it was (:func:`regrounded_tool`);
* a later call of the same reply that only reorders an earlier call's values, or differs from it only
  in optional values nobody said, is the model hedging, not a second request: it is merged into the
  earlier call, which drops the disputed values so the tool's default decides (:func:`merge_variant`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from tether.calls import ToolCall
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.arguments import FieldError
from tether.schema_kinds import extractive_kind
from tether.selection.grounded import Grounding, request_spans, said, variant_keys
from tether.selection.relevance import content_words, mentioned_flags, rank_tools, stem

__all__ = ["merge_variant", "regrounded_tool"]

_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def regrounded_tool(
    call: ToolCall,
    tool: ToolSpec,
    unsaid: Sequence[str],
    request: str,
    spoken: Grounding,
    min_relevance: float,
) -> tuple[ToolSpec, tuple[FieldError, ...]] | None:
    """``tool`` narrowed for asking ``call`` again: each ``unsaid`` string limited to the request's
    spans that begin as the model's value began, every other said value fixed as given, optional
    values nobody said left out, nothing added; with the errors that say why. None when the tool fits
    the request less than ``min_relevance``, an unsaid value is not a plain string, or no span begins
    like it."""
    props = tool.parameters.get("properties") or {}
    strings = all(
        isinstance(call.arguments.get(k), str) and extractive_kind(props.get(k), k) == "string"
        for k in unsaid
    )
    if not unsaid or not strings:
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
    # Chinese): only spans that begin as its value began are offered. A value that begins like no
    # span was no attempt at one.
    choices = {k: [s for s in spans if s[:1].lower() == str(call.arguments[k])[:1].lower()] for k in unsaid}
    if not all(choices.values()):
        return None
    if max((r.score for r in rank_tools(request, [tool])), default=0.0) < min_relevance:
        return None
    required = set(tool.parameters.get("required") or ())
    narrowed = {
        k: ({"type": "string", "enum": choices[k]} if k in unsaid else {"const": v})
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
            f"the conversation does not say {call.arguments[k]!r}; copy the words of the request that give"
            f" the {k}{_described(props.get(k))}",
            "words of the request",
            {"type": "string"},
        )
        for k in unsaid
    )
    return ToolSpec(tool.name, tool.description, parameters), errors


def _described(schema: object) -> str:
    text = schema.get("description") if isinstance(schema, dict) else None
    return f" ({text.strip().rstrip('.')})" if isinstance(text, str) and text.strip() else ""


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
