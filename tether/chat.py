"""Protocol-neutral chat types shared by the OpenAI and Anthropic adapters and the runner."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Message", "Role", "ToolCallRecord"]

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCallRecord:
    """A tool call as it travels in conversation history; ``arguments`` is a JSON object text."""

    id: str
    name: str
    arguments: str = "{}"

    def arguments_dict(self) -> dict[str, Any]:
        """The arguments as a dict; non-object or invalid JSON becomes ``{}`` wrapped raw."""
        try:
            value = json.loads(self.arguments) if self.arguments else {}
        except json.JSONDecodeError:
            return {"_raw": self.arguments}
        return value if isinstance(value, dict) else {"_value": value}


@dataclass(frozen=True)
class Message:
    """One chat turn. ``tool_call_id``/``name`` are set on ``tool`` results."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCallRecord, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def to_template(self) -> dict[str, Any]:
        """The dict a Hugging Face style chat template expects."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_dict()},
                }
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    @staticmethod
    def from_mapping(data: Mapping[str, Any]) -> Message:
        """Build from an already-validated mapping with text content."""
        calls = tuple(
            ToolCallRecord(id=str(c["id"]), name=str(c["name"]), arguments=str(c.get("arguments", "{}")))
            for c in data.get("tool_calls") or ()
        )
        return Message(
            role=data["role"],
            content=str(data.get("content") or ""),
            tool_calls=calls,
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
        )
