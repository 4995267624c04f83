"""Step 2, names: exact, then layer-1 normalization, then a layer-2 constrained re-pick.

A name that does not resolve is never dispatched: the call is settled as ``unresolved`` (with the
candidates of an ambiguous name), or as ``unchecked`` when the preset runs no name layer at all;
either way no later step runs for it. A resolved call carries its offered name from here on.
"""

from __future__ import annotations

from tether.calls import ToolCall
from tether.guardrails.interventions import Intervention
from tether.guardrails.names import resolve_name
from tether.guardrails.steps.context import CallVerdict, GuardContext, PickName, StepRun

__all__ = ["names"]


def names(call: ToolCall, ctx: GuardContext) -> StepRun:
    """Resolve ``call``'s name to an offered tool's, or settle it as written."""
    config = ctx.config
    written = call.name
    name: str | None = call.name if call.name in ctx.by_name else None
    candidates: tuple[str, ...] = ()
    if name is None and config.resolve:
        res = resolve_name(call.name, ctx.names, ctx.aliases)
        name, candidates = res.name, tuple(res.candidates)
        if name is not None:
            detail = f"{res.method} match: {written!r} -> {name!r}"
            ctx.notes.append(Intervention("name_resolved", detail, name, written, name))
            call = call.with_repairs("name_resolved", name=name)
    if name is None and config.repick and ctx.can_regenerate:
        answer = yield from ctx.ask(PickName(ctx.history, ctx.tools, call))
        picked = answer.value if answer is not None else None
        name = picked if isinstance(picked, str) and picked in ctx.by_name else None
        why = "constrained re-pick" if name else "re-pick found nothing offered"
        ctx.notes.append(Intervention("repick", why, name, written, name))
        if name is not None:
            call = call.with_repairs("repicked", name=name)
    if name is None:
        if not (config.resolve or config.repick):
            ctx.settle(CallVerdict("unchecked", written))  # no name layers: as written
            return call
        detail = f"no offered tool matches {written!r}"
        if candidates:
            detail += f"; ambiguous between {', '.join(candidates)}"
        ctx.notes.append(Intervention("name_unresolved", detail, None, written, list(candidates) or None))
        ctx.settle(CallVerdict("unresolved", written, candidates=candidates))
        return call
    ctx.verdict = CallVerdict("ok", written)
    return call
