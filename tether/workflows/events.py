"""What a workflow run reports: events for the caller's callback and the final ``RunResult``."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from tether.calls import ToolCall
from tether.chat import Message

__all__ = [
    "Compacted",
    "EventCallback",
    "Finished",
    "InterventionEvent",
    "ModelCalled",
    "ModelReplied",
    "RunEvent",
    "RunResult",
    "RunStatus",
    "ToolResultEvent",
    "emit",
]

log = structlog.get_logger(__name__)

RunStatus = Literal["completed", "failed", "cancelled"]


@dataclass(frozen=True)
class _IterationEvent:
    """What happened during one iteration of the run (``iteration``: the model calls made so far)."""

    iteration: int


@dataclass(frozen=True)
class ModelCalled(_IterationEvent):
    """A model call is about to start (``tool_choice`` as sent, ``prompt_tokens`` when counted)."""

    tool_choice: str
    messages: int
    prompt_tokens: int | None = None


@dataclass(frozen=True)
class ModelReplied(_IterationEvent):
    """The model's raw assistant message, before any check."""

    message: Message


@dataclass(frozen=True)
class InterventionEvent(_IterationEvent):
    """Something tether did: a guardrail intervention or a blocked call (``kind`` names it)."""

    kind: str
    detail: str
    tool: str | None = None


@dataclass(frozen=True)
class ToolResultEvent(_IterationEvent):
    """A tool ran (or failed); ``content`` is what the model will read."""

    call: ToolCall
    content: str
    is_error: bool
    completed_step: str | None = None


@dataclass(frozen=True)
class Compacted(_IterationEvent):
    """The history was compacted before a model call."""

    tokens_before: int
    tokens: int
    tiers: tuple[str, ...]


@dataclass(frozen=True)
class RunResult:
    """How a run ended. ``reason``: ``terminal_succeeded``, a budget (``iteration_limit``,
    ``retries_exhausted``, ``tool_error_limit``, ``violation_limit``), ``model_error: ...`` or
    ``cancelled``. ``state``: the workflow state snapshot; ``messages``: the final history."""

    status: RunStatus
    reason: str
    workflow: str
    iterations: int
    messages: tuple[Message, ...]
    state: Mapping[str, Any] = field(default_factory=dict)
    terminal_call: ToolCall | None = None
    terminal_result: str | None = None
    interventions: tuple[InterventionEvent, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "completed"


@dataclass(frozen=True)
class Finished:
    """The run ended."""

    result: RunResult


RunEvent = ModelCalled | ModelReplied | InterventionEvent | ToolResultEvent | Compacted | Finished
EventCallback = Callable[[RunEvent], Awaitable[None] | None]


async def emit(callback: EventCallback | None, event: RunEvent) -> None:
    """Deliver ``event``; a failing callback is logged, never allowed to break the run."""
    if callback is None:
        return
    try:
        out = callback(event)
        if inspect.isawaitable(out):
            await out
    except Exception as exc:
        log.warning("workflow_event_callback_failed", run_event=type(event).__name__, error=repr(exc)[:200])
