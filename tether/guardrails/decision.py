"""The result types of a guardrails check: :class:`CheckedCall` and :class:`Decision`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.guardrails.arguments import ArgCheck
from tether.guardrails.interventions import Intervention
from tether.guardrails.names import Resolution
from tether.guardrails.policy import Action
from tether.guardrails.response import RawCall

__all__ = ["CheckedCall", "Decision"]


@dataclass(frozen=True)
class CheckedCall:
    """One tool call after the guardrails: ``name`` is the resolved offered name (the written
    name when unresolved), ``id`` the model's original id (a new one for rescued calls)."""

    id: str
    name: str
    raw_name: str
    raw_arguments: str | Mapping[str, Any] | None
    resolution: Resolution
    check: ArgCheck | None = None
    rescued: bool = False
    repicked: bool = False

    @property
    def resolved(self) -> bool:
        return self.resolution.resolved or self.repicked

    @property
    def ok(self) -> bool:
        """Resolved to an offered tool with arguments that satisfy its schema."""
        return self.resolved and self.check is not None and self.check.ok

    @property
    def arguments(self) -> dict[str, Any] | None:
        """The decoded (and coerced) arguments; None when the name is unresolved."""
        return None if self.check is None else self.check.arguments

    def arguments_text(self) -> str:
        """The arguments as JSON text: the model's own text unless something was changed."""
        check = self.check
        readable = check is not None and not any(e.path == "" for e in check.errors)
        if check is not None and readable and (check.changed or not isinstance(self.raw_arguments, str)):
            return json.dumps(check.arguments, ensure_ascii=False)
        return RawCall(self.id, self.raw_name, self.raw_arguments).arguments_text()

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments_text()},
        }


@dataclass(frozen=True)
class Decision:
    """What to do with a checked response.

    ``tool_calls`` are the checked calls (resolved, coerced, original ids);
    ``retry_messages`` the messages to append before re-asking (``retry`` only);
    ``content`` the message text (prose left around rescued calls, or the unknown-tool
    error text when ``unknown_tool="text"``); ``reason`` is machine-readable.
    """

    action: Action
    reason: str
    content: str | None
    tool_calls: tuple[CheckedCall, ...] = ()
    retry_messages: tuple[dict[str, Any], ...] = ()
    interventions: tuple[Intervention, ...] = ()
    attempt: int = 0

    def tool_calls_openai(self) -> list[dict[str, Any]]:
        return [c.to_openai() for c in self.tool_calls]
