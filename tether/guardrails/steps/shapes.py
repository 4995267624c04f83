"""Step 6, shapes: string values put in the shape their parameter asks for (:mod:`tether.guardrails.shapes`),
a from/to pair in the order the request says it and a command it gives whole
(:mod:`tether.guardrails.said_values`).

Runs after the arguments are checked: a date the user wrote as "April 25, 2023" goes to a
``YYYY-MM-DD`` parameter as ``2023-04-25`` (the day a request asks about, where the model wrote
another, is step 4's, :mod:`tether.guardrails.steps.dates`), "California" to a two-letter state
parameter as ``CA``;
"change color = red to color = blue" gives ``oldString`` the red line however the model paired them;
"London 2022/08/16" beside a date parameter's "2022/08/16" is "London"; an object parameter holding
its own schema echoed takes the one object the request writes; two numbers dealt to each other's
parameters trade back where the request labels them ("covers 400" for ``coverage_rate``,
:mod:`tether.guardrails.labelled`); of two calls holding a number said once, the one nearer the
request's one unused number labelled alike ("5 years ago", "3 years ago") takes that; a number the
request writes with a metric prefix goes in the unit the description names ("50mH" for an
inductance in henries is 0.05, :mod:`tether.guardrails.prefixed`); an array of ``enum`` items holds
only those a fresh ask names, where it names some (:mod:`tether.selection.named_items`).
Noted as ``args_reshaped``; a value already in shape, or one that does not read as the shape, is
left as the model wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.calls import ToolCall
from tether.guardrails.interventions import Intervention
from tether.guardrails.labelled import labelled_swaps, unused_numbers
from tether.guardrails.prefixed import in_named_units
from tether.guardrails.said_values import apart, ordered_pairs, whole_commands, written_objects
from tether.guardrails.shapes import reshape, said_year, wanted_shape
from tether.guardrails.steps.context import GuardContext, call_key, never_asks
from tether.selection.decision import request_text
from tether.selection.named_items import unnamed_items

__all__ = ["shapes"]


@never_asks
def shapes(call: ToolCall, ctx: GuardContext) -> ToolCall | None:
    """Reshape ``call``'s top-level string values where their parameters ask for a shape."""
    if not ctx.config.shape_values:
        return call
    props: Mapping[str, Any] = ctx.by_name[call.name].parameters.get("properties") or {}
    request = request_text(ctx.history)
    # One value, one parameter: "London 2022/08/16" beside a date of "2022/08/16" is "London".
    changed: dict[str, Any] = apart(call.arguments, props)
    arguments = {**call.arguments, **changed}
    wanted = {k: wanted_shape(v) for k, v in props.items() if isinstance(v, Mapping)}
    year = said_year(request)
    for key, value in arguments.items():
        shape = wanted.get(key)
        fixed = reshape(value, shape, year) if shape is not None else None
        if fixed is not None and fixed != call.arguments[key]:
            changed[key] = fixed
    changed |= ordered_pairs({**call.arguments, **changed}, props, request)
    changed |= whole_commands({**call.arguments, **changed}, props, request)
    changed |= written_objects(call.arguments, props, request)
    fresh = bool(ctx.history) and ctx.history[-1].role == "user"
    if fresh:  # an array of enum items cut to those the request names, where it names some
        changed |= unnamed_items(request, {**call.arguments, **changed}, ctx.by_name[call.name].parameters)
    if ctx.lone and fresh:  # one call for a fresh ask
        changed |= labelled_swaps({**call.arguments, **changed}, props, request)
    elif fresh:
        changed |= _spread({**call.arguments, **changed}, call.name, ctx, request)
    # after the numbers traded places: the unit is the one written beside the number a parameter holds
    changed |= in_named_units({**call.arguments, **changed}, props, request)
    if not changed:
        return call
    after = {**call.arguments, **changed}
    detail = ", ".join(f"{k}: {call.arguments[k]!r} -> {v!r}" for k, v in changed.items())
    ctx.notes.append(Intervention("args_reshaped", detail, call.name, dict(call.arguments), after))
    return call.with_repairs("args_reshaped", arguments=after)


def _spread(arguments: dict[str, Any], name: str, ctx: GuardContext, request: str) -> dict[str, Any]:
    """The request's unused number for this call, or for the earlier call of the tool that holds the
    same number (:func:`tether.guardrails.labelled.unused_numbers`; the earlier call is rewritten in
    place, as a merged variant is)."""
    at = [i for i, (c, _) in enumerate(ctx.checked) if c.name == name]
    moves = unused_numbers([*(ctx.checked[i][0].arguments for i in at), arguments], request)
    mine: dict[str, Any] = {}
    for (index, key), value in moves.items():
        if index == len(at):
            mine[key] = value
            continue
        earlier, verdict = ctx.checked[at[index]]
        fixed = earlier.with_repairs("args_reshaped", arguments={**earlier.arguments, key: value})
        detail = f"{key}: {earlier.arguments[key]!r} -> {value!r} (the number labelled alike no call held)"
        ctx.notes.append(
            Intervention("args_reshaped", detail, name, dict(earlier.arguments), dict(fixed.arguments))
        )
        ctx.seen[call_key(fixed)] = at[index]
        ctx.checked[at[index]] = (fixed, verdict)
    return mine
