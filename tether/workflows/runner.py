"""``WorkflowRunner``: drive a model through a workflow until a terminal tool succeeds.

Each turn: compact the history to the context budget, ask the model (``ModelClient``)
with a ``tool_choice`` chosen by the steering mode, apply ``tether.guardrails`` (names,
arguments, required tool calls, bounded escalating retries), then check every call
against the ``WorkflowState``: a premature terminal call or a missing prerequisite is
**not executed**; the model reads a tool-role error naming exactly what is missing
(three escalating tiers, bounded by ``Budgets.max_violations``). Allowed calls run
through a ``tether.sandbox.ToolBox``; failures come back as tool results and count
against ``max_consecutive_tool_errors``. Progress lives in the state, not in the
messages, so compaction cannot erase it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import structlog

from tether.calls import ToolCall
from tether.chat import Message
from tether.errors import TetherError
from tether.guardrails import Guardrails
from tether.sandbox import ToolBox
from tether.turns.compaction import CompactionPolicy, TokenCounter, compact
from tether.turns.events import ToolChoice
from tether.workflows import events
from tether.workflows.client import CountsTokens, ModelClient
from tether.workflows.events import EventCallback, RunEvent, RunResult, RunStatus, emit
from tether.workflows.spec import Workflow
from tether.workflows.state import WorkflowState, violation_text
from tether.workflows.tools import PythonHandler, workflow_toolbox

__all__ = ["Steer", "WorkflowRunner", "progress_note"]

log = structlog.get_logger(__name__)

Steer = Literal["off", "required", "next_step"]
T = TypeVar("T")


def progress_note(state: WorkflowState) -> str:
    """One line of progress for elision markers and logs."""
    done = [s.label() for s, ok in zip(state.workflow.steps, state.steps_done, strict=True) if ok]
    pending = [s.label() for s in state.pending_steps()]
    return (
        f"Progress kept by tether: done: {', '.join(done) or 'nothing yet'}; "
        f"still required: {', '.join(pending) or 'nothing'}; finish with: {', '.join(state.workflow.terminal)}."
    )


def _as_message(data: Mapping[str, Any]) -> Message:
    if data.get("role") == "assistant":
        message = Message.from_openai(data)
        return Message("assistant", message.content, message.tool_calls)
    return Message(data["role"], str(data.get("content") or ""), tool_call_id=data.get("tool_call_id"))


class _Cancelled(Exception):
    pass


class WorkflowRunner:
    """Runs one workflow with one model client; ``run()`` may be called several times.

    ``handlers``: trusted Python callables by tool name; ``toolbox``: sandbox tools for the
    rest. ``steer``: ``"required"`` (default; a blocked call's missing tool is then named),
    ``"next_step"`` (name the next pending step's tool) or ``"off"`` (``auto``).
    ``count_tokens``/``context_tokens`` default to the client's own (``CoreClient``: the
    engine tokenizer and n_ctx); ``reserve_tokens`` is kept free for the reply.
    """

    def __init__(
        self,
        workflow: Workflow,
        client: ModelClient,
        *,
        handlers: Mapping[str, PythonHandler] | None = None,
        toolbox: ToolBox | None = None,
        on_event: EventCallback | None = None,
        steer: Steer = "required",
        count_tokens: TokenCounter | None = None,
        context_tokens: int | None = None,
        reserve_tokens: int = 512,
        compaction: CompactionPolicy | None = None,
    ) -> None:
        self.workflow = workflow
        self.client = client
        self.box, self.specs = workflow_toolbox(workflow, handlers=handlers, toolbox=toolbox)
        self.on_event = on_event
        self.steer: Steer = steer
        self.guard = Guardrails(self.specs, max_retries=workflow.budgets.max_retries_per_step)
        counts = client if isinstance(client, CountsTokens) else None
        if count_tokens is None and counts is not None:
            specs = self.specs
            count_tokens = lambda msgs: counts.count_tokens(msgs, specs)  # noqa: E731
        self.count_tokens = count_tokens
        n_ctx = context_tokens if context_tokens is not None else counts.n_ctx if counts is not None else None
        self.budget = None if n_ctx is None else max(int(n_ctx) - reserve_tokens, 1)
        self.compaction = compaction
        self._cancel = asyncio.Event()

    def cancel(self) -> None:
        """Stop the current run at the next step; an in-flight model call is closed at once."""
        self._cancel.set()

    async def _until_cancel(self, work: Awaitable[T]) -> T:
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self._cancel.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise _Cancelled
        return task.result()

    def _choice(self, state: WorkflowState, hint: str | None) -> ToolChoice:
        if self.steer == "off":
            return "auto"
        if hint is not None:
            return hint
        if self.steer == "next_step":
            step = state.next_step()
            if step is not None:
                return step.tool
            if len(self.workflow.terminal) == 1:
                return self.workflow.terminal[0]
        return "required"

    def initial_messages(self, task: str | None) -> list[Message]:
        wf = self.workflow
        out: list[Message] = []
        system = wf.system.strip()
        if system:
            out.append(Message("system", system))
        prompt = (task if task is not None else wf.task).strip()
        if not prompt:
            raise ValueError(f"workflow {wf.name!r} has no task; pass run(task=...)")
        out.append(Message("user", prompt))
        return out

    async def run(self, task: str | None = None, *, messages: Sequence[Message] | None = None) -> RunResult:
        """Run until a terminal tool succeeds, a budget runs out or ``cancel()`` is called."""
        self._cancel.clear()
        history = list(messages) if messages is not None else self.initial_messages(task)
        run = _Run(self, WorkflowState(self.workflow), history)
        try:
            result = await run.loop()
        except _Cancelled:
            result = run.result("cancelled", "cancelled")
        await self._emit(events.Finished(result))
        log.info(
            "workflow_finished",
            workflow=self.workflow.name,
            status=result.status,
            reason=result.reason,
            iterations=result.iterations,
        )
        return result

    async def _emit(self, event: RunEvent) -> None:
        await emit(self.on_event, event)


class _Run:
    """The mutable state of one ``WorkflowRunner.run`` call."""

    def __init__(self, runner: WorkflowRunner, state: WorkflowState, history: list[Message]) -> None:
        self.r = runner
        self.state = state
        self.history = history
        self.budgets = runner.workflow.budgets
        self.iterations = 0
        self.step_retries = 0
        self.tool_errors = 0
        self.hint: str | None = None
        self.terminal: ToolCall | None = None
        self.interventions: list[events.InterventionEvent] = []

    def result(self, status: RunStatus, reason: str) -> RunResult:
        return RunResult(
            status=status,
            reason=reason,
            workflow=self.r.workflow.name,
            iterations=self.iterations,
            messages=tuple(self.history),
            state=self.state.snapshot(),
            terminal_call=self.terminal,
            terminal_result=self.state.terminal_result,
            interventions=tuple(self.interventions),
        )

    async def note(self, kind: str, detail: str, tool: str | None = None) -> None:
        event = events.InterventionEvent(self.iterations, kind, detail, tool)
        self.interventions.append(event)
        await self.r._emit(event)

    async def _compact(self) -> int | None:
        """Fit the history to the budget (always, when a token counter is known); prompt tokens."""
        r = self.r
        if r.count_tokens is None or r.budget is None:
            return None
        before = len(self.history)
        done = compact(
            self.history, r.budget, r.count_tokens, policy=r.compaction, note=progress_note(self.state)
        )
        if done.changed:
            self.history = list(done.messages)
            log.info("workflow_compacted", messages_before=before, messages=len(self.history))
            await r._emit(events.Compacted(self.iterations, done.tokens_before, done.tokens, done.tiers))
        return done.tokens

    async def loop(self) -> RunResult:
        r = self.r
        while True:
            if r._cancel.is_set():
                raise _Cancelled
            if self.iterations >= self.budgets.max_iterations:
                return self.result("failed", "iteration_limit")
            tokens = await self._compact()
            prompt = list(self.history)
            choice = r._choice(self.state, self.hint)
            self.iterations += 1
            await r._emit(events.ModelCalled(self.iterations, choice, len(prompt), tokens))
            try:
                reply = await r._until_cancel(r.client.complete(prompt, r.specs, choice))
            except TetherError as exc:
                log.warning("workflow_model_failed", workflow=r.workflow.name, error=exc.message[:200])
                return self.result("failed", f"model_error: {exc.message}")
            await r._emit(events.ModelReplied(self.iterations, reply))
            outcome = await self.turn(reply, choice)
            if outcome is not None:
                return outcome

    async def turn(self, reply: Message, choice: ToolChoice) -> RunResult | None:
        """Check and act on one assistant message; a ``RunResult`` ends the run."""
        r = self.r
        response = {"choices": [{"message": reply.to_openai(), "finish_reason": "stop"}]}
        decision = r.guard.check(response, tool_choice=choice, require_tool=True, attempt=self.step_retries)
        for iv in decision.interventions:
            await self.note(f"guardrail_{iv.kind}", iv.detail, iv.tool)
        if decision.action == "fail":
            return self.result("failed", f"retries_exhausted: {decision.reason}")
        if decision.action == "answer":  # only with unknown_tool="text", which the runner never sets
            return self.result("failed", f"text_answer: {decision.reason}")
        if decision.action == "retry":
            self.step_retries += 1
            self.history.extend(_as_message(m) for m in decision.retry_messages)
            return None
        calls = decision.tool_calls
        self.history.append(Message("assistant", decision.content or "", calls))
        blocked = 0
        for record in calls:
            args = dict(record.arguments)
            if self.state.finished:
                content = "Not executed: the workflow already finished."
                self.history.append(Message("tool", content, tool_call_id=record.id, name=record.name))
                continue
            violation = self.state.check(record.name, args)
            if violation is not None:
                blocked += 1
                tier = self.state.escalate(violation)
                text = violation_text(violation, tier)
                self.history.append(Message("tool", text, tool_call_id=record.id, name=record.name))
                self.hint = violation.next_tool if r.steer != "off" else None
                log.info(
                    "workflow_call_blocked", workflow=r.workflow.name, reason=violation.reason(), tier=tier
                )
                await self.note(violation.kind, violation.reason(), record.name)
                continue
            if r._cancel.is_set():
                raise _Cancelled
            result = await r.box.call(record.name, args)
            ok = not result.is_error
            steps = self.state.record(record.name, args, ok, result.content)
            self.history.append(Message("tool", result.content, tool_call_id=record.id, name=record.name))
            await r._emit(
                events.ToolResultEvent(
                    self.iterations,
                    record,
                    result.content,
                    result.is_error,
                    steps[0].label() if steps else None,
                )
            )
            if ok:
                self.tool_errors = 0
                self.step_retries = 0
                self.hint = None
                if self.state.finished:
                    self.terminal = record
            else:
                self.tool_errors += 1
        if self.state.finished:
            return self.result("completed", "terminal_succeeded")
        if blocked:
            self.step_retries += 1
            if self.state.violations > self.budgets.max_violations:
                return self.result("failed", "violation_limit")
            if self.step_retries > self.budgets.max_retries_per_step:
                return self.result("failed", "retries_exhausted: blocked_calls")
        if self.tool_errors > self.budgets.max_consecutive_tool_errors:
            return self.result("failed", "tool_error_limit")
        return None
