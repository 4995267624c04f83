"""Step 8, mentioned options: the lone call of a fresh ask gets the options the request names.

The ``enum`` arguments the user's last message names word for word and the model left out are
filled ("with pediatrics department" → ``department: "Pediatrics"``;
:func:`tether.selection.relevance.mentioned_choices`), and a single choice nobody named gives way
to the one the request names. An on/off parameter whose words the request uses gets the value it
says ("should have laundry service" → ``has_laundry_service: true``, "no need for a garage" →
``has_garage: false``; :func:`tether.selection.relevance.mentioned_switches`). A unit the request
asks for ("the distance in miles") fills the tool's free-text ``unit`` parameter
(:func:`tether.selection.units.mentioned_units`). Only for a reply of one call (however often the
model repeated it).

After a tool result (an agent loop) only the replacement applies, and what names the option is
the last user message with the tool results since: "The release moves to Friday" read from a file
turns ``day: "Monday"``, which nobody said, into ``"Friday"``.
"""

from __future__ import annotations

from tether.calls import ToolCall
from tether.chat import is_request
from tether.guardrails.interventions import Intervention
from tether.guardrails.steps.context import GuardContext, never_asks
from tether.selection.grounded import said
from tether.selection.relevance import mentioned_choices, mentioned_switches
from tether.selection.units import mentioned_units

__all__ = ["fill_mentioned", "mentioned"]


def fill_mentioned(call: ToolCall, ctx: GuardContext) -> ToolCall:
    """``call`` with the options the last user message names filled in (noted when any are)."""
    history = ctx.history
    if history[-1].role == "tool":
        return _replaced(call, ctx)
    asked, parameters = history[-1].content or "", ctx.by_name[call.name].parameters
    named = mentioned_choices(asked, parameters, required=True)
    # A named option fills what the model left out, and replaces a single choice nobody named.
    added = {k: v for k, v in named.items() if k not in call.arguments or _unsaid_choice(call, k, v, ctx)}
    # A switch the request turns on or off ("with laundry service", "no garage") says its value.
    added |= {
        k: v
        for k, v in mentioned_switches(asked, parameters).items()
        if k not in named and call.arguments.get(k) != v
    }
    # The unit the request asks for ("the distance in miles") where the model left it out or guessed.
    added |= {
        k: v
        for k, v in mentioned_units(asked, parameters).items()
        if k not in named and (k not in call.arguments or not said(call.arguments[k], ctx.spoken))
    }
    return _filled(call, added, "the request names", ctx)


def _replaced(call: ToolCall, ctx: GuardContext) -> ToolCall:
    """In a loop: a single choice nobody said gives way to the one the turn's words name."""
    history = ctx.history
    start = max((i for i, m in enumerate(history) if is_request(m)), default=0)
    words = "\n".join(m.content or "" for m in history[start:] if m.role in ("user", "tool"))
    named = mentioned_choices(words, ctx.by_name[call.name].parameters, required=True)
    changed = {k: v for k, v in named.items() if k in call.arguments and _unsaid_choice(call, k, v, ctx)}
    return _filled(call, changed, "the conversation names", ctx)


def _unsaid_choice(call: ToolCall, key: str, named: object, ctx: GuardContext) -> bool:
    """Whether ``call`` holds a single choice for ``key`` other than ``named`` that nobody said."""
    value = call.arguments[key]
    return not isinstance(named, list) and value != named and not said(value, ctx.spoken)


def _filled(call: ToolCall, values: dict[str, object], said_by: str, ctx: GuardContext) -> ToolCall:
    if not values:
        return call
    filled = {**call.arguments, **values}
    detail = f"{said_by} " + ", ".join(f"{k}={v!r}" for k, v in values.items())
    ctx.notes.append(Intervention("args_filled", detail, call.name, dict(call.arguments), filled))
    return call.with_repairs("args_filled", arguments=filled)


@never_asks
def mentioned(call: ToolCall, ctx: GuardContext) -> ToolCall | None:
    """Fill the mentioned options of the lone call of a reply to a user ask or a tool result."""
    history = ctx.history
    if ctx.config.fill_mentioned and ctx.lone and history and history[-1].role in ("user", "tool"):
        return fill_mentioned(call, ctx)
    return call
