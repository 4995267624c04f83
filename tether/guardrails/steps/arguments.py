"""Step 3, arguments: Draft 2020-12 validation with lossless recorded coercions, then a repair.

The tool's :class:`~tether.guardrails.arguments.ArgumentChecker` (compiled per tool by the caller,
or built here) validates the arguments (the call's ``raw`` text when decoding them needed a
repair), coercing losslessly (:mod:`tether.coercion`) and filling defaults as the preset says.
Errors left are asked of the model once more under the schema's grammar (``repair``); an answer
is used only when it validates. A call still invalid stays, with the ``invalid`` verdict.
"""

from __future__ import annotations

from tether.calls import ToolCall
from tether.guardrails.arguments import ArgumentChecker
from tether.guardrails.interventions import Intervention
from tether.guardrails.policy import invalid_arguments_text
from tether.guardrails.steps.context import (
    DECODE_REPAIRS,
    CallVerdict,
    FixArguments,
    GuardContext,
    StepRun,
)

__all__ = ["arguments"]


def arguments(call: ToolCall, ctx: GuardContext) -> StepRun:
    """Validate (coerce, default, repair) ``call``'s arguments against its tool's schema."""
    config = ctx.config
    if not config.validate:
        return call
    name = call.name
    tool = ctx.by_name[name]
    checker = ctx.checkers.get(name) or ArgumentChecker(
        tool.parameters, coerce=config.coerce, fill_defaults=config.fill_defaults
    )
    source = call.raw if DECODE_REPAIRS & set(call.repairs) else call.arguments
    check = checker.check(source)
    if check.coercions:
        ctx.notes.append(
            Intervention("args_coerced", "; ".join(check.coercions), name, source, check.arguments)
        )
    if check.defaults:
        ctx.notes.append(
            Intervention("args_defaulted", "; ".join(check.defaults), name, source, check.arguments)
        )
    if check.changed or check.ok:
        call = call.with_repairs(*(["args_coerced"] if check.coercions else []), arguments=check.arguments)
    errors = check.errors
    if errors and config.repair and ctx.can_regenerate:
        answer = yield from ctx.ask(FixArguments(ctx.history, tool, call, errors))
        fixed = answer.value if answer is not None else None
        if isinstance(fixed, dict) and checker.check(fixed).ok:
            detail = "regenerated under the schema grammar"
            ctx.notes.append(Intervention("args_repaired", detail, name, dict(call.arguments), fixed))
            call = call.with_repairs("args_repaired", arguments=fixed)
            errors = ()
    if errors:
        nudge = invalid_arguments_text(name, errors, schema=dict(tool.parameters))
        ctx.notes.append(Intervention("args_invalid", nudge, name, dict(call.arguments), None))
        ctx.verdict = CallVerdict("invalid", ctx.verdict.written_name, errors)
    return call
