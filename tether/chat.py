"""Protocol-neutral chat types shared by the OpenAI and Anthropic adapters, the runner and the evals."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tether.calls import ToolCall

__all__ = ["FAILURE_PATTERN", "Message", "Role", "Usage", "reads_as_failure"]

Role = Literal["system", "user", "assistant", "tool"]


# How a tool result that failed usually begins: what the workflow engine counts as a failure by
# default, and how Anthropic's ``is_error`` results reach the core ("Error: ...").
FAILURE_PATTERN = r"(?i)^\s*(error|exception|traceback|failed|permission denied)\b"


def reads_as_failure(content: str, pattern: str = FAILURE_PATTERN) -> bool:
    """Does a tool result's text read as a failure?"""
    return re.search(pattern, content) is not None


@dataclass(frozen=True)
class Message:
    """One chat turn. ``tool_call_id``/``name`` are set on ``tool`` results."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def to_template(self) -> dict[str, Any]:
        """The dict a Hugging Face style chat template expects."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": dict(c.arguments)}}
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    def to_openai(self) -> dict[str, Any]:
        """An OpenAI chat message dict (arguments as JSON text)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["content"] = self.content or None
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role == "tool":
            out["name"] = self.name
        return out

    @staticmethod
    def from_openai(data: Mapping[str, Any]) -> Message:
        """From an OpenAI chat message dict (content as text or text parts; arguments as text or objects)."""
        role = {"developer": "system", "function": "tool"}.get(str(data.get("role")), str(data.get("role")))
        content = data.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        calls = tuple(ToolCall.from_openai(c) for c in data.get("tool_calls") or ())
        return Message(
            role=role,  # type: ignore[arg-type]
            content=content if isinstance(content, str) else "",
            tool_calls=calls,
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
        )


@dataclass(frozen=True)
class Usage:
    """Tokens of one or more generations; ``+`` sums them (a reply counts every generation it ran).

    ``generations`` counts the model runs behind the numbers (the turn's own, plus any re-pick,
    repair, re-ask or re-decided answer); 0 where nothing ran."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_evaluated: int = 0
    generations: int = 0

    @property
    def cached_tokens(self) -> int:
        return self.prompt_tokens - self.prompt_tokens_evaluated

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.prompt_tokens_evaluated + other.prompt_tokens_evaluated,
            self.generations + other.generations,
        )
