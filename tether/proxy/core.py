"""The protocol-neutral chat core: prompt in, text deltas and tool calls out.

The OpenAI and Anthropic adapters only translate requests into a ``ChatJob``
and ``CoreEvent``s into their wire shapes. Everything that decides what the
model sees and what the client gets happens here, once.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import structlog

from tether.aio import aclose_quietly
from tether.chat import Message
from tether.config import ConstrainMode
from tether.engine.base import Done, LogitsProcessor, SamplingParams, Token
from tether.engine.processors import chain, sampling_processors
from tether.engine.prompt import build_prompt
from tether.engine.scheduler import Scheduler
from tether.engine.stops import StopMatcher
from tether.engine.template import ChatTemplate
from tether.errors import ContextOverflowError, FixedPromptTooLargeError, InvalidRequestError
from tether.grammar.detector import StreamDetector, TextDelta, ToolCallDone
from tether.grammar.formats.base import ParsedCall, ToolCallFormat, ToolSpec
from tether.guardrails import Intervention
from tether.proxy.guard import CallGuard, GuardConfig

__all__ = [
    "CallOut",
    "ChatCore",
    "ChatJob",
    "CoreEvent",
    "FinishOut",
    "Prepared",
    "TextOut",
    "ToolChoice",
    "Usage",
    "new_call_id",
    "prime",
]

log = structlog.get_logger(__name__)

ToolChoice = Literal["auto", "none", "required"] | str  # a str other than these names one function
ConstraintFactory = Callable[["Prepared"], LogitsProcessor | None]


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


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
    json_mode: bool = False
    priority: int = 0

    @property
    def constrain(self) -> ConstrainMode:
        return self.guard.constrain


@dataclass(frozen=True)
class Prepared:
    """A job with its prompt built and budget checked; errors surface before streaming starts."""

    job: ChatJob
    fmt: ToolCallFormat
    tools: tuple[ToolSpec, ...]
    prompt_ids: tuple[int, ...]
    params: SamplingParams


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    prompt_tokens_evaluated: int

    @property
    def cached_tokens(self) -> int:
        return self.prompt_tokens - self.prompt_tokens_evaluated


@dataclass(frozen=True)
class TextOut:
    text: str


@dataclass(frozen=True)
class CallOut:
    index: int
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class FinishOut:
    finish_reason: Literal["stop", "length", "tool_calls", "cancelled"]
    usage: Usage
    interventions: tuple[dict[str, Any], ...] = ()
    matched_stop: str | None = None


CoreEvent = TextOut | CallOut | FinishOut


class ChatCore:
    """Builds prompts, schedules generation and turns tokens into core events."""

    def __init__(
        self,
        scheduler: Scheduler,
        fmt: ToolCallFormat,
        *,
        default_max_tokens: int | None = None,
        constraint_factory: ConstraintFactory | None = None,
        guard: CallGuard | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.engine = scheduler.engines[0]
        info = self.engine.info
        self.info = info
        self.template = ChatTemplate(info.chat_template, bos_token=info.bos_token, eos_token=info.eos_token)
        self.fmt = fmt
        self.default_max_tokens = default_max_tokens
        self.constraint_factory = constraint_factory
        self.guard = guard

    def _offered(self, job: ChatJob) -> tuple[ToolSpec, ...]:
        if job.tool_choice == "none" or not job.tools:
            return ()
        if job.tool_choice not in ("auto", "required"):
            chosen = tuple(t for t in job.tools if t.name == job.tool_choice)
            if not chosen:
                names = ", ".join(t.name for t in job.tools)
                raise InvalidRequestError(
                    f"tool_choice names function {job.tool_choice!r}, which is not in tools ({names})",
                    param="tool_choice",
                )
            return chosen
        return job.tools

    def _prompt_ids(self, job: ChatJob, tools: tuple[ToolSpec, ...]) -> tuple[int, ...]:
        messages = _with_json_instruction(job.messages) if job.json_mode else job.messages
        return tuple(
            self.engine.tokenize(build_prompt(self.template, self.fmt, messages, tools), special=True)
        )

    def count_tokens(self, job: ChatJob) -> int:
        """Prompt tokens of ``job`` as the model would see them (tools included), even past the window."""
        return len(self._prompt_ids(job, self._offered(job)))

    def prepare(self, job: ChatJob) -> Prepared:
        """Render and tokenize; raise ``ContextOverflowError`` only when the prompt itself does not fit."""
        tools = self._offered(job)
        messages = job.messages
        if job.json_mode:
            messages = _with_json_instruction(messages)
        text = build_prompt(self.template, self.fmt, messages, tools)
        ids = tuple(self.engine.tokenize(text, special=True))
        if len(ids) >= self.info.n_ctx:
            fixed = [m for m in messages if m.role == "system"]
            fixed_ids = self.engine.tokenize(
                build_prompt(self.template, self.fmt, fixed, tools), special=True
            )
            if len(fixed_ids) >= self.info.n_ctx:
                raise FixedPromptTooLargeError(len(fixed_ids), self.info.n_ctx)
        return self._budget(job, tools, ids)

    def prepare_raw(self, job: ChatJob, prompt: str) -> Prepared:
        """A plain-text completion: no template, no tools."""
        return self._budget(job, (), tuple(self.engine.tokenize(prompt, special=True)))

    def _budget(self, job: ChatJob, tools: tuple[ToolSpec, ...], ids: tuple[int, ...]) -> Prepared:
        n_ctx = self.info.n_ctx
        if len(ids) >= n_ctx:
            raise ContextOverflowError(len(ids), n_ctx)
        room = n_ctx - len(ids)
        # No max_tokens means "up to the window", as OpenAI and llama-server do (aider raises on "length").
        wanted = job.max_tokens_requested or self.default_max_tokens or room
        params = replace(job.params, max_tokens=max(1, min(wanted, room)))
        return Prepared(job=job, fmt=self.fmt, tools=tools, prompt_ids=ids, params=params)

    async def run(self, prepared: Prepared) -> AsyncIterator[CoreEvent]:
        """Stream core events; closing the iterator cancels the generation."""
        job = prepared.job
        constraint = self.constraint_factory(prepared) if self.constraint_factory else None
        own = sampling_processors(prepared.params, len(prepared.prompt_ids))
        processor = chain([*own, constraint])  # the constraint last: no bias re-opens a masked token
        stops = StopMatcher(job.stop)
        detector = StreamDetector(prepared.fmt, prepared.tools) if prepared.tools else None
        calls: list[ParsedCall] = []
        started = time.monotonic()
        done: Done | None = None

        sent_text = False

        def route(text: str) -> list[CoreEvent]:
            nonlocal sent_text
            if not text:
                return []
            events: list[CoreEvent] = (
                [TextOut(text)] if detector is None else _text_events(detector.feed(text), calls)
            )
            sent_text = sent_text or bool(events)
            return events

        gen = self.scheduler.generate(
            prepared.prompt_ids, prepared.params, logits_processor=processor, priority=job.priority
        )
        try:
            async for event in gen:
                if isinstance(event, Token):
                    for out in route(stops.feed(event.text)):
                        yield out
                    if stops.matched is not None:
                        break
                else:
                    done = event
        finally:
            await aclose_quietly(gen)
        for out in route(stops.flush()):
            yield out
        if detector is not None:
            for out in _text_events(detector.close(), calls):
                sent_text = True
                yield out
        # Calls leave after the generation has released its slot: the guard may need the engine again.
        outs, notes, extra = await self._checked_calls(prepared, calls)
        if extra:
            yield TextOut(("\n" if sent_text else "") + extra)
        for out in outs:
            yield out
        completion = done.completion_tokens if done else 0
        evaluated = done.prompt_tokens_evaluated if done else len(prepared.prompt_ids)
        usage = Usage(len(prepared.prompt_ids), completion, evaluated)
        reason: Literal["stop", "length", "tool_calls", "cancelled"]
        if outs:
            reason = "tool_calls"
        elif stops.matched is not None or done is None:
            reason = "stop"
        else:
            reason = done.finish_reason
        log.info(
            "generation_finished",
            prompt_tokens=usage.prompt_tokens,
            evaluated=usage.prompt_tokens_evaluated,
            completion_tokens=completion,
            finish_reason=reason,
            tool_calls=len(outs),
            interventions=len(notes),
            seconds=round(time.monotonic() - started, 3),
        )
        yield FinishOut(reason, usage, tuple(n.to_dict() for n in notes), matched_stop=stops.matched)

    async def _checked_calls(
        self, prepared: Prepared, calls: list[ParsedCall]
    ) -> tuple[list[CallOut], tuple[Intervention, ...], str]:
        if not calls:
            return [], (), ""
        job = prepared.job
        if self.guard is None:
            fixed = [(c.name, dict(c.arguments)) for c in calls]
            notes: tuple[Intervention, ...] = ()
            extra = ""
        else:
            outcome = await self.guard.fix(
                job.guard,
                job.messages,
                prepared.tools,
                calls,
                priority=job.priority,
                placeholders=prepared.fmt.placeholders,
                required=job.tool_choice != "auto",
            )
            fixed = [(c.name, c.arguments) for c in outcome.calls]
            notes, extra = outcome.interventions, outcome.text
        if not job.parallel_tool_calls:
            fixed = fixed[:1]
        outs = [
            CallOut(index=i, id=new_call_id(), name=name, arguments=json.dumps(args, ensure_ascii=False))
            for i, (name, args) in enumerate(fixed)
        ]
        return outs, notes, extra


async def prime(events: AsyncIterator[CoreEvent]) -> AsyncIterator[CoreEvent]:
    """Pull the first event now, so errors that happen before it (a full queue: 429) keep their status.

    Returns a stream that yields that event and then the rest.
    """
    first = await anext(events)

    async def replay() -> AsyncIterator[CoreEvent]:
        try:
            yield first
            async for ev in events:
                yield ev
        finally:
            await aclose_quietly(events)

    return replay()


def _text_events(events: Sequence[object], calls: list[ParsedCall]) -> list[CoreEvent]:
    """Text deltas leave at once; parsed calls are collected for the guard."""
    out: list[CoreEvent] = []
    for ev in events:
        if isinstance(ev, TextDelta):
            if ev.text:
                out.append(TextOut(ev.text))
        elif isinstance(ev, ToolCallDone):
            calls.append(ev.call)
    return out


def _with_json_instruction(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    note = "Reply with one valid JSON object and nothing else."
    if messages and messages[0].role == "system":
        first = messages[0]
        return (Message("system", f"{first.content}\n\n{note}".strip()), *messages[1:])
    return (Message("system", note), *messages)
