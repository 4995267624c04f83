"""A structured reply at its end: checked, closed when it was cut short, repaired when a backend did
not enforce its schema.

A reply cut short (``max_tokens`` where no budget reached the sampler, or the repetition stop) gets
the shortest close its schema allows (:func:`closed_reply`); one that does not hold its schema is
noted (:func:`unstructured_note`).

An OpenAI-compatible backend gets ``response_format`` passed through, but not every server applies it,
and a small model then writes the JSON inside a fence, with prose around it, or with ``"5"`` where an
integer goes. :func:`repaired_reply` finds the JSON in the text, reads it leniently and coerces its values
with the one coercion rule set (:mod:`tether.guardrails.arguments`); what still fails the schema is
passed on as written, with the ``reply_invalid`` note the turn core adds.
"""

from __future__ import annotations

import json

from tether.grammar.closing import closing_suffix
from tether.grammar.structured import ReplyFormat, check_reply
from tether.guardrails.arguments import check_arguments
from tether.guardrails.interventions import Intervention
from tether.jsonscan import find_json_values
from tether.turns.events import ChatJob

__all__ = ["closed_reply", "repaired_reply", "unstructured_note"]


def repaired_reply(text: str, fmt: ReplyFormat) -> tuple[str, Intervention] | None:
    """``text`` made to hold ``fmt``, with the note that says how; None when it holds already or cannot
    be made to (a schema whose top level is not an object is only found, not coerced)."""
    problem = check_reply(text, fmt)
    if problem is None:
        return None
    found = [text[span.start : span.end] for span in find_json_values(text)]
    for candidate in (text, *found):
        if fmt.schema is None or fmt.schema.get("type", "object") == "object":
            result = check_arguments(candidate, fmt.schema or {"type": "object"})
            if not result.ok:
                continue
            fixed = json.dumps(result.arguments, ensure_ascii=False)
            how = [*result.coercions] or ["the JSON found in the reply"]
        else:
            fixed, how = candidate.strip(), ["the JSON found in the reply"]
        if check_reply(fixed, fmt) is None:
            detail = f"{problem}; repaired: {'; '.join(how)}"
            return fixed, Intervention("reply_repaired", detail)
    return None


def closed_reply(job: ChatJob, text: str) -> tuple[str, Intervention] | None:
    """What closes a structured reply cut short, with its note; None for any other reply."""
    fmt = job.reply_format
    suffix = closing_suffix(text, fmt.schema) if fmt is not None and text else None
    if suffix is None or fmt is None:
        return None
    return suffix, Intervention("reply_closed", f"the structured reply was cut short: closed with {suffix!r}")


def unstructured_note(job: ChatJob, text: str) -> Intervention | None:
    """The note for a structured reply that does not hold its schema (a backend that does not enforce
    it); None when it holds, or none was asked."""
    fmt = job.reply_format
    problem = check_reply(text, fmt) if fmt is not None else None
    return None if problem is None else Intervention("reply_invalid", problem)
