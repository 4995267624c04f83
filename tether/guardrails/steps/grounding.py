"""Step 5, grounding: with a text answer allowed, no call whose values nobody said.

With ``tool_choice: auto`` on a fresh user ask (``may_answer``), a call whose extractive values the
conversation does not contain (less than ``abstain_below`` of them, or with ``abstain_unsaid`` any
required one; :mod:`tether.selection.grounded`) is abstained from: a wrong guess is worse than no
guess, and the reply becomes a text answer. A fitting tool's call whose unsaid values are strings
or numbers is first asked again with them limited to the request's words and numbers
(``reground_min``, :func:`tether.guardrails.values.regrounded_tool`); the answer is used when it
says them all. With ``drop_unsaid``, the optional values nobody said that would override the
tool's default are then left out of a call that stands (``args_dropped``); they count in its share
first: a call of mostly guesses is a guess, whichever of its values are optional.

A call abstained from for a value that another offered tool gives ("use find_orders to get it",
:mod:`tether.selection.sources`) becomes that tool's call instead, when the conversation says its
values (``call_redirected``): the step the request needs first.
"""

from __future__ import annotations

from tether.calls import ToolCall
from tether.guardrails.arguments import FieldError
from tether.guardrails.interventions import Intervention
from tether.guardrails.steps.context import FixArguments, GuardContext, StepRun
from tether.guardrails.values import regrounded_tool
from tether.selection.decision import request_text
from tether.selection.grounded import check_call, unsaid_optional
from tether.selection.relevance import mentioned_flags
from tether.selection.sources import narrowed_source, source_tool

__all__ = ["grounding"]


def grounding(call: ToolCall, ctx: GuardContext) -> StepRun:
    """Drop ``call`` when the conversation does not say its values (after one narrowed re-ask)."""
    config = ctx.config
    if not ctx.may_answer:
        return call
    name, spoken = call.name, ctx.spoken
    tool = ctx.by_name[name]
    required = set(tool.parameters.get("required") or ())
    found = check_call(call.arguments, tool.parameters, spoken, name)
    dropped: tuple[str, ...] = ()
    if config.drop_unsaid:
        flags = mentioned_flags(request_text(ctx.history), [tool]).get(name, frozenset())
        dropped = unsaid_optional(call.arguments, tool.parameters, spoken, name, flags, dict(found.doubled))
    kept = {k: v for k, v in call.arguments.items() if k not in dropped}
    if config.abstain_below > 0 or config.abstain_unsaid:
        # A required value said once and written into two parameters is asked again for the one
        # that fits it worse; the call stands as written when that finds nothing better.
        doubled = dict(found.doubled)
        again_for = found.unsaid + tuple(k for k in doubled if k in required and k not in found.unsaid)
        if again_for and config.reground_min > 0 and config.repair and ctx.can_regenerate:
            request = request_text(ctx.history)
            narrowed = regrounded_tool(call, tool, again_for, request, spoken, config.reground_min, doubled)
            if narrowed is None and found.unsaid and again_for != found.unsaid:  # the unsaid alone
                again_for = found.unsaid
                narrowed = regrounded_tool(
                    call, tool, again_for, request, spoken, config.reground_min, doubled
                )
            if narrowed is not None:
                answer = yield from ctx.ask(FixArguments(ctx.history, narrowed[0], call, narrowed[1]))
                fixed = answer.value if answer is not None else None
                again = check_call(fixed, tool.parameters, spoken, name) if isinstance(fixed, dict) else None
                if isinstance(fixed, dict) and again is not None and not again.unsaid:
                    detail = "asked again within the request's words for " + ", ".join(again_for)
                    ctx.notes.append(Intervention("args_grounded", detail, name, dict(call.arguments), fixed))
                    call = call.with_repairs("args_grounded", arguments=fixed)
                    found, dropped = again, ()  # the re-ask kept no optional value nobody said
        detail = ""
        if found.share is not None and found.share < config.abstain_below:
            detail = f"{found.share:.0%} of its values occur in the conversation"
        elif config.abstain_unsaid and found.unsaid:
            detail = f"the conversation does not say its {', '.join(found.unsaid)}"
        if detail and found.unsaid and config.repair and ctx.can_regenerate:
            first = yield from _source_first(call, found.unsaid, ctx)
            if first is not None:
                return first
        if detail:
            ctx.notes.append(Intervention("call_abstained", detail, name, dict(call.arguments), None))
            return None
    if dropped:
        detail = f"nobody said its {', '.join(dropped)}: the tool's default decides"
        ctx.notes.append(Intervention("args_dropped", detail, name, dict(call.arguments), kept))
        call = call.with_repairs("args_dropped", arguments=kept)
    return call


def _source_first(call: ToolCall, unsaid: tuple[str, ...], ctx: GuardContext) -> StepRun:
    """The call of the tool that gives ``call``'s unsaid values (:func:`source_tool`), when the
    conversation says all of its own values; None when there is none."""
    called = ctx.by_name[call.name]
    source = source_tool(called, unsaid, ctx.tools)
    if source is None:
        return None
    why = f"the conversation does not say {', '.join(unsaid)}: {source.name} gives it first"
    asked = narrowed_source(source, called, request_text(ctx.history))
    error = FieldError("", why, f"a call of {source.name}", dict(asked.parameters))
    answer = yield from ctx.ask(FixArguments(ctx.history, asked, ToolCall(source.name, {}), (error,)))
    args = answer.value if answer is not None else None
    if not isinstance(args, dict):
        return None
    found = check_call(args, source.parameters, ctx.spoken, source.name)
    if found.unsaid or (found.share is not None and found.share < ctx.config.abstain_below):
        return None
    ctx.notes.append(
        Intervention("call_redirected", why, call.name, dict(call.arguments), {source.name: args})
    )
    return ToolCall(source.name, args, call.id, repairs=(*call.repairs, "call_redirected"))
