"""The innermost stage for a chat-API backend: the job goes out as a chat request, the guard runs here.

An OpenAI-compatible endpoint or Ollama (:mod:`tether.engine.remote.chat`) renders the prompt and
parses calls itself, so :class:`ChatBackendCore` forwards the job's messages and offered tools and
reads text and calls back. Everything after the reply is :class:`~tether.turns.core.ChatCore`'s own:
the same guard pipeline (names and aliases, re-pick, validation and coercion, repair, rescue of calls
written as text in the model's format, dedupe, the re-decided text answer) and the same finish.
The re-pick and repair are extra chat requests (:class:`ChatRegenerator`): a forced ``tool_choice``,
or on a backend that takes reply schemas (Ollama's ``format``) a reply under the names' enum or the
tool's arguments schema.

A model without tool support (an Ollama model whose template has none) gets the tools folded into
its messages in the format's shape, and layer 0 as the whole-reply schema where the backend takes
one. Each request holds a scheduler slot (``Scheduler.lease``) while its HTTP stream is open, so
queueing, 429s, the queue timeout and ``/health`` behave as with engines. Without token ids, prompt
sizes for the budget and compaction are estimated (:func:`~tether.engine.remote.chat.estimate_tokens`);
usage is the backend's own where it reports it.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import structlog

from tether.aio import closing_stream
from tether.calls import ToolCall
from tether.chat import Message, Usage
from tether.engine.base import SamplingParams
from tether.engine.prompt import fold_tools
from tether.engine.remote.chat import CHARS_PER_TOKEN, ChatBackend, ChatEnd, ChatRequest, estimate_tokens
from tether.engine.scheduler import Scheduler
from tether.errors import (
    ContextOverflowError,
    FixedPromptTooLargeError,
    InvalidRequestError,
    ShuttingDownError,
)
from tether.grammar.formats.base import ToolCallFormat, ToolSpec
from tether.grammar.spec import JsonSpec, NameChoiceSpec
from tether.guardrails.interventions import Intervention
from tether.guardrails.pipeline import PickName, Regenerated, Regenerator, Request
from tether.guardrails.wrap import ask_again
from tether.turns.core import ChatCore, CoreOptions, Prepared
from tether.turns.events import ChatJob, TextOut, TurnEvent
from tether.turns.routing import TextRouter
from tether.turns.structured_reply import repaired_reply

__all__ = ["ChatBackendCore", "ChatRegenerator"]

log = structlog.get_logger(__name__)


class ChatBackendCore(ChatCore):
    """``ChatCore`` over a chat backend: the request is the job itself; the guard and finish are shared."""

    def __init__(
        self,
        scheduler: Scheduler,
        fmt: ToolCallFormat,
        backend: ChatBackend,
        options: CoreOptions | None = None,
    ) -> None:
        # The backend renders the prompt itself: no tool view; the guard regenerates through the backend.
        options = replace(options or CoreOptions(), regenerator=self._regenerator, tool_view=None)
        super().__init__(scheduler, fmt, options)
        self.backend = backend

    def _regenerator(self, job: ChatJob) -> Regenerator:
        return ChatRegenerator(self, priority=job.priority)

    def prompt_length(self, messages: tuple[Message, ...], tools: tuple[ToolSpec, ...]) -> int:
        return estimate_tokens(messages, tools)

    def prepare(self, job: ChatJob) -> Prepared:
        """Check what the backend cannot do and the estimated budget; nothing is rendered here."""
        if job.params.logprobs is not None:
            raise InvalidRequestError(
                f"logprobs are not available through the {self.backend.kind} backend", param="logprobs"
            )
        tools = self._offered(job)
        n_ctx = self.info.n_ctx
        size = self.prompt_length(job.messages, tools)
        if size >= n_ctx:
            fixed = self.prompt_length(tuple(m for m in job.messages if m.role == "system"), tools)
            if fixed >= n_ctx:
                raise FixedPromptTooLargeError(fixed, n_ctx)
            raise ContextOverflowError(size, n_ctx)
        wanted = job.max_tokens_requested or self.default_max_tokens
        params = replace(job.params, max_tokens=max(1, min(wanted, n_ctx - size))) if wanted else job.params
        return Prepared(job=job, fmt=self.fmt, tools=tools, prompt_ids=(), params=params)

    def prepare_raw(self, job: ChatJob, prompt: str) -> Prepared:
        raise InvalidRequestError(
            f"plain-text completion needs a backend tether renders prompts for; the {self.backend.kind} "
            "backend takes chat requests only (use /v1/chat/completions)",
            param="prompt",
        )

    def _answer_only(self, prepared: Prepared) -> Prepared:
        if self.backend.native_tools:
            # The conversation keeps its tools (its tool turns refer to them); tool_choice none asks for text.
            return replace(prepared, answer_only=True)
        return super()._answer_only(prepared)

    def _without_tools(self, prepared: Prepared) -> Prepared:
        return replace(prepared, tools=())

    def conversation(
        self, messages: tuple[Message, ...], tools: tuple[ToolSpec, ...]
    ) -> tuple[tuple[Message, ...], tuple[ToolSpec, ...]]:
        """What the backend is sent: messages and tools as they are, or for a model without tool support
        the tools and past calls folded into the text in the format's own shape."""
        if self.backend.native_tools:
            return messages, tools
        folded = fold_tools(self.fmt, messages, tools)
        return tuple(Message(turn["role"], turn["content"]) for turn in folded), ()

    def _request(self, prepared: Prepared) -> ChatRequest:
        job = prepared.job
        messages, tools = self.conversation(job.messages, prepared.tools)
        reply = None
        spec = self.reply_spec(prepared) if not self.backend.native_tools and self.reply_spec else None
        if spec is not None:  # the whole-reply schema, where the backend takes one
            reply = self.engine.compile(spec, prompt_len=0)
        asked = job.max_tokens_requested or self.default_max_tokens
        return ChatRequest(
            messages,
            tools,
            "none" if prepared.answer_only else job.tool_choice,
            job.parallel_tool_calls,
            prepared.params,
            prepared.params.max_tokens if asked else None,
            job.reply_format,
            reply,
        )

    async def ask(self, request: ChatRequest, *, priority: int = 0) -> tuple[str, list[ToolCall], Usage]:
        """One whole request on a slot: its text, its calls and its usage (the guard's regenerations)."""
        text: list[str] = []
        calls: list[ToolCall] = []
        end: ChatEnd | None = None
        async with (
            self.scheduler.lease(priority=priority),
            closing_stream(self.backend.stream(request)) as pieces,
        ):
            async for piece in pieces:
                if isinstance(piece, str):
                    text.append(piece)
                elif isinstance(piece, ToolCall):
                    calls.append(piece)
                else:
                    end = piece
        reply = "".join(text)
        return reply, calls, self._usage(request, reply, calls, end)

    def _usage(self, request: ChatRequest, text: str, calls: list[ToolCall], end: ChatEnd | None) -> Usage:
        """The backend's count where it gave one, else the estimate (a prompt it did not count, too)."""
        prompt = estimate_tokens(request.messages, request.tools)
        if end is not None and end.usage is not None:
            used = end.usage
            return replace(used, prompt_tokens=used.prompt_tokens or prompt, generations=1)
        chars = len(text) + sum(len(c.name) + len(json.dumps(dict(c.arguments), default=str)) for c in calls)
        return Usage(prompt, -(-chars // CHARS_PER_TOKEN), prompt, generations=1)

    async def run(self, prepared: Prepared) -> AsyncIterator[TurnEvent]:
        """Stream turn events; closing the iterator closes the backend's stream."""
        job = prepared.job
        request = self._request(prepared)
        # Calls the model wrote as text are parsed here too (rescue), in order with the native ones.
        router = TextRouter(prepared.fmt, prepared.tools, job.stop, keep=job.reply_format is not None)
        calls = router.calls
        # A structured reply from a backend that may not enforce it leaves whole, checked and repaired.
        hold = job.reply_format is not None and not self.backend.schema_replies
        held: list[TextOut] = []
        text: list[str] = []
        started = time.monotonic()
        first: float | None = None
        end: ChatEnd | None = None
        async with (
            self.scheduler.lease(priority=job.priority) as lease,
            closing_stream(self.backend.stream(request)) as pieces,
        ):
            async for piece in pieces:
                if lease.cancel.is_set():
                    raise ShuttingDownError("the server is shutting down; generation cancelled")
                if isinstance(piece, ToolCall):
                    calls.append(piece)
                elif isinstance(piece, ChatEnd):
                    end = piece
                else:
                    first = first or time.monotonic()
                    text.append(piece)
                    for out in router.feed(piece):
                        if hold:
                            held.append(out)
                        else:
                            yield out
                    if router.stopped:
                        break  # leaving closes the stream: the backend stops
        tail = [*held, *router.close()]
        notes: tuple[Intervention, ...] = ()
        if hold and job.reply_format is not None and not calls:
            fixed = repaired_reply("".join(t.text for t in tail), job.reply_format)
            if fixed is not None:
                router.text, notes = fixed[0], (fixed[1],)
                tail = [TextOut(fixed[0])]
        for out in tail:
            yield out
        if prepared.answer_only and calls:
            log.info("answer_only_calls_dropped", calls=[c.name for c in calls])
            calls = []
        usage = self._usage(request, "".join(text), calls, end)
        if self.on_generation is not None and first is not None:
            self.on_generation(first - started, time.monotonic() - first, usage.completion_tokens)
        finish = self._finish(
            prepared,
            calls,
            usage,
            text=router,
            notes=notes,
            ended=end.finish_reason if end is not None else None,
            started=started,
        )
        async with closing_stream(finish) as ending:
            async for last in ending:
                yield last


class ChatRegenerator:
    """The guard's re-pick and repair as chat requests on the backend (each on a slot, greedy)."""

    def __init__(self, core: ChatBackendCore, *, priority: int = 0) -> None:
        self.core = core
        self.priority = priority

    async def regenerate(self, request: Request) -> Regenerated:
        asked = ask_again(request)
        greedy = SamplingParams(temperature=0.0)
        if self.core.backend.schema_replies:
            # No tool_choice there: the reply itself is held to the names, or to the tool's arguments.
            messages, _ = self.core.conversation(asked.messages, ())
            spec = (
                NameChoiceSpec(tuple(t.name for t in asked.tools))
                if asked.forced is None
                else JsonSpec.of_tool(asked.tools[0])
            )
            limit = 32 if isinstance(request, PickName) else 256  # a name; an arguments object
            reply = self.core.engine.compile(spec, prompt_len=0)
            chat = ChatRequest(messages, params=greedy, max_tokens=limit, reply=reply)
            text, _, usage = await self.core.ask(chat, priority=self.priority)
            try:
                value = json.loads(text)
            except ValueError:
                return Regenerated(None, usage)
            wanted = str if asked.forced is None else dict
            return Regenerated(value if isinstance(value, wanted) else None, usage)
        # A forced call: its name and its arguments, in whatever the server wraps them in.
        chat = ChatRequest(
            asked.messages, asked.tools, asked.forced or "required", params=greedy, max_tokens=256
        )
        _, calls, usage = await self.core.ask(chat, priority=self.priority)
        if not calls:
            return Regenerated(None, usage)
        first = calls[0]
        if asked.forced is None:
            return Regenerated(first.name, usage)
        return Regenerated(dict(first.arguments) if not first.repairs else None, usage)
