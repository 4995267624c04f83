"""The result of a guardrails check: a :class:`Decision` on one response."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.calls import ToolCall
from tether.guardrails.interventions import Intervention
from tether.guardrails.pipeline import CallVerdict
from tether.guardrails.policy import Action

__all__ = ["Decision"]


@dataclass(frozen=True)
class Decision:
    """What to do with a checked response.

    ``tool_calls`` are the checked calls (resolved names, coerced arguments, original ids),
    ``verdicts`` what the guard concluded about each (same order); ``retry_messages`` the
    messages to append before re-asking (``retry`` only); ``content`` the message text (prose
    left around rescued calls, or the unknown-tool error text when ``unknown_tool="text"``);
    ``reason`` is machine-readable.
    """

    action: Action
    reason: str
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    verdicts: tuple[CallVerdict, ...] = ()
    retry_messages: tuple[dict[str, Any], ...] = ()
    interventions: tuple[Intervention, ...] = ()
    attempt: int = 0

    def tool_calls_openai(self) -> list[dict[str, Any]]:
        return [c.to_openai() for c in self.tool_calls]
