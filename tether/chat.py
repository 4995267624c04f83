"""Protocol-neutral chat types shared by the OpenAI and Anthropic adapters, the runner and the evals."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tether.calls import ToolCall

__all__ = [
    "ELIDED_PREFIX",
    "FAILURE_PATTERN",
    "NUDGE_PREFIXES",
    "Message",
    "Role",
    "Usage",
    "elided_calls",
    "elision_marker",
    "is_request",
    "reads_as_failure",
]

Role = Literal["system", "user", "assistant", "tool"]


# How a tool result that failed usually begins: what the workflow engine counts as a failure by
# default, how Anthropic's ``is_error`` results reach the core ("Error: ..."), and how coding agents'
# tools word one ("Could not find oldString in the file", "File not found: …", Node's "ENOENT: …").
FAILURE_PATTERN = (
    r"(?i)^\s*(error|exception|traceback|failed|permission denied|could not|couldn't|cannot|unable to"
    r"|no such file|(?:file|directory|path) not found|e(?:noent|acces|perm|isdir|notdir|exist))\b"
)


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


# Openings of the user-role notes tether writes into a history, which are not what the user asked:
# the guard's nudges to call a tool (tether.guardrails.policy.tool_required_text) and the marker a
# compaction leaves where it elided messages (:func:`elision_marker`).
NUDGE_PREFIXES: tuple[str, ...] = (
    "This step requires a tool call.",
    "You replied with text, but this step must be a tool call.",
    "Last attempt: reply with only a tool call",
)
ELIDED_PREFIX = "[Earlier conversation elided"
_LISTED = re.compile(r"; tools called: ([^\]\n]*)\]")


def is_request(msg: Message) -> bool:
    """A user message that asks something: not empty, and not a note tether wrote (a nudge, an
    elision marker). The current request is the last one."""
    text = msg.content.lstrip()
    return msg.role == "user" and bool(text) and not text.startswith((*NUDGE_PREFIXES, ELIDED_PREFIX))


def elision_marker(removed: Sequence[Message], note: str = "") -> Message:
    """The user-role note that stands for ``removed`` messages: how many, and the tools they called
    (read back by :func:`elided_calls`); ``note`` follows on a line of its own."""
    tools = Counter(c.name for m in removed for c in m.tool_calls)
    listing = ", ".join(f"{n} x{k}" if k > 1 else n for n, k in sorted(tools.items()))
    text = f"{ELIDED_PREFIX}: {len(removed)} messages removed to fit the context window"
    text += f"; tools called: {listing}]" if listing else "]"
    return Message("user", f"{text}\n{note}" if note else text)


def elided_calls(msg: Message) -> Counter[str]:
    """The calls an elision marker says it removed, by tool name (empty for any other message)."""
    found = (
        _LISTED.search(msg.content) if msg.role == "user" and msg.content.startswith(ELIDED_PREFIX) else None
    )
    out: Counter[str] = Counter()
    for item in found.group(1).split(", ") if found else ():
        name, _, times = item.partition(" x")
        out[name] += int(times) if times.isdigit() else 1
    return out


@dataclass(frozen=True)
class Usage:
    """Tokens of one or more generations; ``+`` sums them (a reply counts every generation it ran).

    ``generations`` counts the model runs behind the numbers (the turn's own, plus any re-pick,
    repair, re-ask or re-decided answer); 0 where nothing ran. A client reads a reply's prompt
    tokens as how full its context is (opencode compacts its history past a share of the window),
    so the protocols report :attr:`window_prompt_tokens`, the largest prompt one generation held,
    never the sum, which can pass the window; metrics and evals count the sums."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_evaluated: int = 0
    generations: int = 0
    # (prompt, evaluated) of the generation with the largest prompt; None: this one generation's.
    window: tuple[int, int] | None = None

    @property
    def cached_tokens(self) -> int:
        return self.prompt_tokens - self.prompt_tokens_evaluated

    @property
    def _window(self) -> tuple[int, int]:
        return self.window or (self.prompt_tokens, self.prompt_tokens_evaluated)

    @property
    def window_prompt_tokens(self) -> int:
        """The largest prompt of the reply's generations: what the client's context holds."""
        return self._window[0]

    @property
    def window_cached_tokens(self) -> int:
        """Of :attr:`window_prompt_tokens`, the tokens a cached prefix gave."""
        prompt, evaluated = self._window
        return prompt - evaluated

    def __add__(self, other: Usage) -> Usage:
        if not (self.generations or self.prompt_tokens):
            return other
        if not (other.generations or other.prompt_tokens):
            return self
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.prompt_tokens_evaluated + other.prompt_tokens_evaluated,
            self.generations + other.generations,
            max(self._window, other._window),
        )
