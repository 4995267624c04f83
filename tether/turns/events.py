"""What enters the turn pipeline and what comes out of it: ``ChatJob`` in, turn events out.

Both protocols translate their request into a ``ChatJob`` and read the same event
stream back: ``TextOut`` deltas as they are decoded (with the tokens they carry when the job's
``params.logprobs`` asks for log-probabilities), each finished ``ToolCall`` once
the guard has checked it, and one ``FinishOut`` with the usage of every generation the
server ran for the reply. ``collect`` is the one fold of that stream into a ``Reply``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

from tether.aio import closing_stream
from tether.calls import ToolCall
from tether.chat import Message, Usage
from tether.engine.base import SamplingParams, Token
from tether.grammar.formats.base import ToolSpec
from tether.grammar.structured import ReplyFormat
from tether.guardrails.interventions import Intervention
from tether.guardrails.presets import GuardConfig

__all__ = [
    "ChatJob",
    "FinishOut",
    "FinishReason",
    "Reply",
    "TextOut",
    "ToolChoice",
    "TurnEvent",
    "collect",
    "joined",
    "offered_tools",
]

ToolChoice = Literal["auto", "none", "required"] | str  # a str other than these names one function
FinishReason = Literal["stop", "length", "tool_calls", "cancelled"]


@dataclass(frozen=True)
class ChatJob:
    """A normalized chat request."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool = True
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens_requested: int | None = None
    stop: tuple[str, ...] = ()
    guard: GuardConfig = field(default_factory=GuardConfig)
    # A structured reply: the text answer is one JSON value of this format (None: free text).
    reply_format: ReplyFormat | None = None
    priority: int = 0
    # The call-or-answer decision is made: a call (a text answer that invented a tool's result, decided again).
    call_decided: bool = False


def offered_tools(job: ChatJob) -> tuple[ToolSpec, ...]:
    """The tools ``job`` lets the model call (``none``: none; a name: that one, if it is in ``tools``)."""
    if job.tool_choice == "none" or not job.tools:
        return ()
    if job.tool_choice in ("auto", "required"):
        return job.tools
    return tuple(t for t in job.tools if t.name == job.tool_choice)


@dataclass(frozen=True)
class TextOut:
    """Content. ``tokens``: the model's tokens (each with its ``logprob``) whose text this delta
    carries, only when log-probabilities were asked for; text tether writes itself has none."""

    text: str
    tokens: tuple[Token, ...] = ()


@dataclass(frozen=True)
class FinishOut:
    """How the turn ended. ``layers``: which of tether's layers the backend gets (``EngineInfo.layers``),
    set where a turn leaves the pipeline, for the response's ``tether`` extension."""

    finish_reason: FinishReason
    usage: Usage
    interventions: tuple[Intervention, ...] = ()
    matched_stop: str | None = None
    layers: tuple[str, ...] = ()


TurnEvent = TextOut | ToolCall | FinishOut


def joined(deltas: list[TextOut]) -> list[TextOut]:
    """Consecutive content deltas as one (those that carry tokens stay apart)."""
    if len(deltas) < 2 or any(d.tokens for d in deltas):
        return deltas
    return [TextOut("".join(d.text for d in deltas))]


@dataclass(frozen=True)
class Reply:
    """A whole turn: its text, its calls and how it finished."""

    text: str
    calls: tuple[ToolCall, ...]
    finish: FinishOut
    tokens: tuple[Token, ...] = ()  # the content's tokens with their logprobs, when asked for


async def collect(events: AsyncIterator[TurnEvent]) -> Reply:
    """Fold a turn's events into a ``Reply`` (closing the stream, also when cancelled)."""
    text: list[str] = []
    tokens: list[Token] = []
    calls: list[ToolCall] = []
    finish: FinishOut | None = None
    async with closing_stream(events) as stream:
        async for ev in stream:
            if isinstance(ev, TextOut):
                text.append(ev.text)
                tokens.extend(ev.tokens)
            elif isinstance(ev, ToolCall):
                calls.append(ev)
            else:
                finish = ev
    if finish is None:
        raise RuntimeError("the turn ended without a FinishOut event")
    return Reply("".join(text), tuple(calls), finish, tuple(tokens))
