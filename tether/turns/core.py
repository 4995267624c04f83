"""The innermost stage of the turn pipeline: one generation, from a ``ChatJob`` to turn events.

``ChatCore.prepare`` renders and tokenizes the prompt and checks the budget, so errors
surface before anything streams; ``ChatCore.run`` describes layer 0 as an ``OutputSpec``,
has the engine compile it, schedules the generation under it, streams text through the
stop matcher and the format's detector, and hands the parsed calls to the guard pipeline
once the slot is free again (its re-pick and repair need the engine).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

import structlog

from tether.aio import aclose_quietly, closing_stream
from tether.calls import ToolCall
from tether.chat import Message, Usage
from tether.engine.base import Decides, Done, SamplingParams, Token
from tether.engine.prompt import prompt_ids
from tether.engine.scheduler import Scheduler
from tether.engine.template import ChatTemplate
from tether.errors import ContextOverflowError, FixedPromptTooLargeError, InvalidRequestError
from tether.grammar.formats.base import ToolCallFormat, ToolSpec
from tether.grammar.spec import OutputSpec, ReplySpec
from tether.grammar.steering import Decision
from tether.guardrails.interventions import GuardrailStats, Intervention
from tether.guardrails.pipeline import Regenerator, guard_steps, run_guard
from tether.guardrails.policy import unknown_tool_text
from tether.turns.content_tokens import ContentTokens
from tether.turns.events import ChatJob, FinishOut, FinishReason, TextOut, TurnEvent, joined, offered_tools
from tether.turns.history import safe_job
from tether.turns.routing import TextRouter
from tether.turns.structured_reply import closed_reply, unstructured_note
from tether.turns.tool_view import ToolView

__all__ = ["ChatCore", "CoreOptions", "GenerationTiming", "Prepared", "SpecFactory"]

log = structlog.get_logger(__name__)

# Layer 0 for one prepared job, engine-neutral (the engine compiles it), or None.
SpecFactory = Callable[["Prepared"], "OutputSpec | None"]
RegeneratorFactory = Callable[[ChatJob], Regenerator | None]
_REPEATED = Intervention("repetition_stopped", "the reply repeated itself: generation stopped")
# Told of each finished generation: seconds to its first token (queueing included), seconds from
# the first token to the last, and the tokens generated.
GenerationTiming = Callable[[float, float, int], None]


@dataclass(frozen=True)
class Prepared:
    """A job with its prompt built and budget checked; errors surface before streaming starts."""

    job: ChatJob
    fmt: ToolCallFormat
    tools: tuple[ToolSpec, ...]
    prompt_ids: tuple[int, ...]
    params: SamplingParams
    answer_only: bool = False  # a re-decided turn: only a text answer may come out


def _answering(decides: Decides | None) -> bool:
    """The call-or-answer decision chose a text answer."""
    decision = decides.decision if decides is not None else None
    return decision is not None and not decision.called


def decision_notes(decision: Decision | None) -> list[Intervention]:
    """The intervention to report when the relevance prior changed what the model alone would have done."""
    if decision is None or not decision.overridden:
        return []
    chosen = "call a tool" if decision.called else "answer in text"
    detail = (
        f"{chosen}: model log-odds of a call {decision.log_odds:+.2f}, relevance prior {decision.prior:+.2f}"
    )
    return [Intervention("decision_steered", detail, None, decision.log_odds, decision.prior)]


@dataclass(frozen=True)
class CoreOptions:
    """How a turn core is built besides its scheduler and format: the output cap when a request sets
    none; layer 0's spec per request; the guard's regenerator; the stats interventions are counted on;
    who is told of each generation's timing; how the prompt shows crowded tools."""

    default_max_tokens: int | None = None
    reply_spec: SpecFactory | None = None
    regenerator: RegeneratorFactory | None = None
    stats: GuardrailStats = field(default_factory=GuardrailStats)
    on_generation: GenerationTiming | None = None
    tool_view: ToolView | None = None


class ChatCore:
    """Builds prompts, schedules generation and turns tokens into checked turn events."""

    def __init__(self, scheduler: Scheduler, fmt: ToolCallFormat, options: CoreOptions | None = None) -> None:
        options = options or CoreOptions()
        self.scheduler = scheduler
        self.engine = scheduler.engines[0]
        self.info = self.engine.info
        self.template = ChatTemplate(
            self.info.chat_template, bos_token=self.info.bos_token, eos_token=self.info.eos_token
        )
        self.fmt = fmt
        self.default_max_tokens = options.default_max_tokens
        self.reply_spec = options.reply_spec
        self.regenerator = options.regenerator
        self.stats = options.stats
        self.on_generation = options.on_generation
        self.tool_view = options.tool_view

    def _offered(self, job: ChatJob) -> tuple[ToolSpec, ...]:
        tools = offered_tools(job)
        if job.tool_choice not in ("auto", "none", "required") and job.tools and not tools:
            names = ", ".join(t.name for t in job.tools)
            raise InvalidRequestError(
                f"tool_choice names function {job.tool_choice!r}, which is not in tools ({names})",
                param="tool_choice",
            )
        return tools

    def _messages(self, job: ChatJob) -> tuple[Message, ...]:
        if job.reply_format is None:
            return job.messages
        note = job.reply_format.instruction(tools=bool(offered_tools(job)))
        messages = job.messages
        if messages and messages[0].role == "system":
            return (Message("system", f"{messages[0].content}\n\n{note}".strip()), *messages[1:])
        return (Message("system", note), *messages)

    def prompt_tokens(self, messages: tuple[Message, ...], tools: tuple[ToolSpec, ...]) -> list[int]:
        """The prompt the model sees for ``messages`` with ``tools`` offered, tokenized (the tools as the
        view shows them: all in full, or the ones that fit the request in full and the rest briefly)."""
        if self.tool_view is not None and tools:
            tools = self.tool_view.shown(messages, tools, self.info.n_ctx)
        return prompt_ids(self.engine, self.template, self.fmt, messages, tools)

    def prompt_length(self, messages: tuple[Message, ...], tools: tuple[ToolSpec, ...]) -> int:
        """Tokens of that prompt (what compaction and budgets count)."""
        return len(self.prompt_tokens(messages, tools))

    def count_tokens(self, job: ChatJob) -> int:
        """Prompt tokens of ``job`` as the model would see them (tools included), even past the window."""
        job = safe_job(job)  # as the pipeline renders it
        return self.prompt_length(self._messages(job), self._offered(job))

    def prepare(self, job: ChatJob) -> Prepared:
        """Render and tokenize; raise ``ContextOverflowError`` only when the prompt itself does not fit."""
        tools = self._offered(job)
        messages = self._messages(job)
        ids = tuple(self.prompt_tokens(messages, tools))
        if len(ids) >= self.info.n_ctx:
            fixed = tuple(m for m in messages if m.role == "system")
            fixed_len = len(self.prompt_tokens(fixed, tools))
            if fixed_len >= self.info.n_ctx:
                raise FixedPromptTooLargeError(fixed_len, self.info.n_ctx)
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

    async def run(self, prepared: Prepared) -> AsyncIterator[TurnEvent]:
        """Stream turn events; closing the iterator cancels the generation."""
        job = prepared.job
        spec = self.reply_spec(prepared) if self.reply_spec is not None else None
        constraint = (
            self.engine.compile(spec, prompt_len=len(prepared.prompt_ids)) if spec is not None else None
        )
        # What the call-or-answer decision did, read after the fact; a turn decided again had it made for it.
        forced = prepared.answer_only or job.call_decided
        decides = constraint if isinstance(constraint, Decides) and not forced else None
        steering = spec.steering if isinstance(spec, ReplySpec) else None
        if (
            decides is not None
            and steering is not None
            and steering.settled_answer
            and self._asks_plainly(job)
        ):
            # The prior alone decides for a text answer: no pass over the tool prompt to reach it.
            detail = (
                f"answer in text: relevance prior {steering.call_prior:+.2f}, beyond the model's log-odds"
            )
            note = Intervention("decision_steered", detail, None, None, steering.call_prior)
            self.stats.record(note)
            async for answered in self._answer_instead(prepared, Usage(), (note,)):
                yield answered
            return
        content = ContentTokens() if prepared.params.logprobs is not None else None  # for logprobs
        router = TextRouter(
            prepared.fmt,
            prepared.tools,
            job.stop,
            claim=content.claim if content is not None else None,
            keep=job.reply_format is not None,
        )
        generated = 0  # tokens seen: a generation cut short (stop string, loop) ends without Done
        started = time.monotonic()
        first_token: float | None = None
        done: Done | None = None
        answer_plainly = False  # the decision chose a text answer: ask it without the tools
        held: list[TextOut] = []

        gen = self.scheduler.generate(
            prepared.prompt_ids, prepared.params, constraint=constraint, priority=job.priority
        )
        try:
            async for event in gen:
                if isinstance(event, Token):
                    generated += 1
                    if content is not None:
                        content.feed(event)
                    if first_token is None:
                        first_token = time.monotonic()
                    held += router.feed(event.text)
                    if router.stopped or not event.batched or content is not None:
                        for out in joined(held):  # a batch's content goes out as one delta
                            yield out
                        held.clear()
                    if router.stopped:
                        break
                    if not router.sent_text and _answering(decides) and self._asks_plainly(job):
                        answer_plainly = True
                        break
                else:
                    done = event
        finally:
            await aclose_quietly(gen)
        for out in joined(held):
            yield out
        if self.on_generation is not None and first_token is not None:
            self.on_generation(first_token - started, time.monotonic() - first_token, generated)
        if answer_plainly:
            notes = tuple(decision_notes(decides.decision if decides is not None else None))
            for note in notes:
                self.stats.record(note)
            usage = Usage(len(prepared.prompt_ids), generated, len(prepared.prompt_ids), generations=1)
            async for answered in self._answer_instead(prepared, usage, notes):
                yield answered
            return
        for out in router.close():
            yield out
        usage = Usage(
            len(prepared.prompt_ids),
            done.completion_tokens if done else generated,
            done.prompt_tokens_evaluated if done else len(prepared.prompt_ids),
            generations=1,
        )
        # Calls leave after the generation has released its slot: the guard may need the engine again.
        finish = self._finish(
            prepared,
            router.calls,
            usage,
            text=router,
            notes=tuple(decision_notes(decides.decision if decides is not None else None)),
            ended=done.finish_reason if done is not None else None,
            started=started,
        )
        async with closing_stream(finish) as ending:
            async for last in ending:
                yield last

    async def _finish(
        self,
        prepared: Prepared,
        calls: list[ToolCall],
        usage: Usage,
        *,
        text: TextRouter,
        notes: tuple[Intervention, ...],
        ended: FinishReason | None,
        started: float,
    ) -> AsyncIterator[TurnEvent]:
        """The end of every generation, whichever core ran it: the guard over its calls, then their
        events, a re-decided text answer when nothing is left, and the ``FinishOut``.

        ``text``: the generation's text as it went out (whether any did, how it stopped);
        ``notes``: what happened during the generation; ``ended``: how it ended by itself (None: cut short)."""
        checked, extra, guard_notes, guard_usage = await self._guard(prepared, calls)
        sent_text, looped, reason = text.sent_text, text.looped, text.reason(ended)
        if looped:
            notes = (*notes, _REPEATED)
        for note in notes:
            self.stats.record(note)  # the guard's own notes are recorded by run_guard
        notes = (*notes, *guard_notes)
        if extra:
            yield TextOut(("\n" if sent_text else "") + extra)
        for call in checked:
            yield call
        usage = usage + guard_usage
        if not (checked or sent_text or extra) and self._redecides(prepared):
            # Nothing is left to say (every call dropped, or nothing parsed): ask for a text answer.
            note = Intervention("answer_redecided", "no call was left and no text: answered in text", None)
            self.stats.record(note)
            async for answered in self._answer_instead(prepared, usage, (*notes, note)):
                yield answered
            return
        closed = (
            closed_reply(prepared.job, text.text) if not checked and (looped or reason == "length") else None
        )
        if closed is not None:  # a structured reply cut short still parses: its shortest close
            yield TextOut(closed[0])
            self.stats.record(closed[1])
            notes = (*notes, closed[1])
            reason = "stop"
        elif checked:
            reason = "tool_calls"
        elif looped:
            reason = "length"  # cut short, as a token limit would have
        elif reason == "stop" and (invalid := unstructured_note(prepared.job, text.text)) is not None:
            self.stats.record(invalid)
            notes = (*notes, invalid)
        log.info(
            "generation_finished",
            prompt_tokens=usage.prompt_tokens,
            evaluated=usage.prompt_tokens_evaluated,
            completion_tokens=usage.completion_tokens,
            finish_reason=reason,
            tool_calls=len(checked),
            interventions=len(notes),
            seconds=round(time.monotonic() - started, 3),
        )
        yield FinishOut(reason, usage, notes, matched_stop=text.matched_stop)

    async def _answer_instead(
        self, prepared: Prepared, usage: Usage, notes: tuple[Intervention, ...]
    ) -> AsyncIterator[TurnEvent]:
        """The turn answered in text by a second generation; the first one's usage and notes lead."""
        async with closing_stream(self.run(self._answer_only(prepared))) as answers:
            async for answered in answers:
                if isinstance(answered, FinishOut):
                    answered = replace(
                        answered,
                        usage=usage + answered.usage,
                        interventions=(*notes, *answered.interventions),
                    )
                yield answered

    def _redecides(self, prepared: Prepared) -> bool:
        job = prepared.job
        return (
            bool(prepared.tools)
            and job.tool_choice == "auto"
            and job.guard.redecide
            and not prepared.answer_only
            and not job.call_decided  # the answer it was decided again from stands (AnswerCheckStage)
        )

    @staticmethod
    def _asks_plainly(job: ChatJob) -> bool:
        """A text answer to a conversation with no tool traffic yet is asked without the tools: the
        model then answers as the chat model it is, not inside the tool format's JSON envelope."""
        return bool(job.messages) and not any(m.tool_calls or m.role == "tool" for m in job.messages)

    def _answer_only(self, prepared: Prepared) -> Prepared:
        """The same turn, answered in text. Marker formats, and any format on a conversation with no
        tool traffic yet, are asked without the tools; otherwise a whole-reply format keeps its prompt
        (the tool results stay in the format's shape) and layer 0 forces the answer branch."""
        job = prepared.job
        if (
            prepared.fmt.whole_reply is not None
            and job.guard.constrain != "off"
            and not self._asks_plainly(job)
        ):
            return replace(prepared, answer_only=True)
        return replace(self._without_tools(prepared), answer_only=True)

    def _without_tools(self, prepared: Prepared) -> Prepared:
        """``prepared`` with no tools offered, its prompt rendered again."""
        ids = tuple(self.prompt_tokens(self._messages(prepared.job), ()))
        return self._budget(prepared.job, (), ids)

    async def _guard(
        self, prepared: Prepared, calls: list[ToolCall]
    ) -> tuple[list[ToolCall], str, tuple[Intervention, ...], Usage]:
        """The guard pipeline with the server's policy: unresolved names become text, never calls."""
        if not calls:
            return [], "", (), Usage()
        job = prepared.job
        regenerator = self.regenerator(job) if self.regenerator is not None else None
        steps = guard_steps(
            calls,
            prepared.tools,
            job.guard,
            job.messages,
            can_regenerate=regenerator is not None,
            # Abstaining is for a fresh ask: mid-task (after a tool result) the call was already decided.
            may_answer=job.tool_choice == "auto" and bool(job.messages) and job.messages[-1].role == "user",
        )
        result = await run_guard(steps, regenerator, self.stats)
        names = [t.name for t in prepared.tools]
        kept = [c for c, v in result.checked if v.resolved]
        text = [*result.refused_text]
        text += [
            unknown_tool_text(v.written_name, names, candidates=v.candidates)
            for _, v in result.checked
            if not v.resolved
        ]
        if not job.parallel_tool_calls:
            kept = kept[:1]
        return kept, "\n".join(text), result.interventions, result.usage
