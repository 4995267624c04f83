"""Step 1, the rescue gate: a call that parsing had to repair is refused as text when rescue is off.

Repairs made while decoding wire arguments (:data:`~.context.DECODE_REPAIRS`) are not parse
repairs: the arguments step reads the call's ``raw`` text for them instead.
"""

from __future__ import annotations

from tether.calls import ToolCall
from tether.guardrails.interventions import Intervention
from tether.guardrails.steps.context import DECODE_REPAIRS, GuardContext, never_asks

__all__ = ["rescue_gate"]


@never_asks
def rescue_gate(call: ToolCall, ctx: GuardContext) -> ToolCall | None:
    """Drop a repaired call (its text kept for the reply) without ``rescue``; note it as rescued with."""
    parse_repairs = [r for r in call.repairs if r not in DECODE_REPAIRS]
    if parse_repairs and not ctx.config.rescue:
        ctx.notes.append(
            Intervention("rescue_disabled", f"call needed {', '.join(parse_repairs)}", call.name)
        )
        ctx.refused.append(call.raw)
        return None
    if parse_repairs:
        ctx.notes.append(Intervention("rescued", ", ".join(parse_repairs), call.name, call.raw or None))
    return call
