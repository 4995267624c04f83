"""Step 4, dates: a tool's one date parameter holds the day the request asks about.

A small model writes a date the user never said for "on the 10th of March 2023" (``2023-10-03``),
keeps the stated today for "tomorrow", or counts "the upcoming Wednesday" wrong. Where the tool has
exactly one date parameter (``format: date`` or a description asking for ``YYYY-MM-DD`` or
``MM/DD/YYYY``) and the request asks about one day (:func:`tether.grammar.datetimes.asked_day`: a
relative day counted from the today the request or the client's system prompt states; on a fresh
ask, also the one date the request writes, or its one month and day in the year of the model's
date), the value becomes that day in the parameter's shape. It runs before grounding, which
would otherwise drop the optional date nobody said or abstain from the call for the required one.
Noted as ``args_reshaped``; a tool with two dates (a check-in and a check-out: which is
"tomorrow"?) is left to the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

from tether.calls import ToolCall
from tether.chat import Message
from tether.grammar.datetimes import asked_day, meant_day
from tether.guardrails.interventions import Intervention
from tether.guardrails.shapes import redated, reshape, wanted_shape
from tether.guardrails.steps.context import GuardContext, never_asks
from tether.selection.decision import request_text

__all__ = ["dates"]

_DATE_SHAPES = ("date", "us-date")


@never_asks
def dates(call: ToolCall, ctx: GuardContext) -> ToolCall | None:
    """Put the day the request asks about into ``call``'s one date parameter."""
    if not ctx.config.shape_values:
        return call
    props: Mapping[str, Any] = ctx.by_name[call.name].parameters.get("properties") or {}
    wanted = {
        k: s for k, v in props.items() if isinstance(v, Mapping) and (s := wanted_shape(v)) in _DATE_SHAPES
    }
    if len(wanted) != 1:
        return call
    [(key, shape)] = wanted.items()
    value = call.arguments.get(key)
    if not isinstance(value, str):
        return call
    request = request_text(ctx.history)
    fresh = bool(ctx.history) and ctx.history[-1].role == "user"
    if fresh:
        written = _as_date(value)
        day = asked_day(request, _system_text(ctx.history), written.year if written else None)
    else:  # after a tool's result the date may be the result's: only a relative day is placed
        day = meant_day(request) or meant_day(f"{_system_text(ctx.history)}\n{request}")
    fixed = redated(value, shape, day) if day is not None else None
    if fixed is None:
        return call
    after = {**call.arguments, key: fixed}
    detail = f"{key}: {value!r} -> {fixed!r} (the day the request asks about)"
    ctx.notes.append(Intervention("args_reshaped", detail, call.name, dict(call.arguments), after))
    return call.with_repairs("args_reshaped", arguments=after)


def _as_date(value: str) -> date | None:
    """The day ``value`` writes, in any usual writing."""
    try:
        return date.fromisoformat(reshape(value, "date") or value)
    except ValueError:
        return None


def _system_text(history: Sequence[Message]) -> str:
    return "\n".join(m.content for m in history if m.role == "system" and m.content)
