"""The workflow-session stage of the turn pipeline (``X-Tether-Session``).

:class:`SessionStage` observes the request's history once, steers, checks the reply's
calls, regenerates once with the blocked turn in context, else falls back to text. It is a
stage like those in :mod:`tether.turns.stages`, but lives here: the workflows package sits
above the turns package, so the turn pipeline never imports it; the app factory
(:mod:`tether.proxy.app`) composes it with the others.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

from tether.aio import closing_stream
from tether.chat import Usage
from tether.errors import ContextOverflowError
from tether.guardrails.interventions import Intervention
from tether.turns.events import FinishOut, FinishReason, TextOut, TurnEvent
from tether.turns.stages import Held, Next, Turn, hold_calls
from tether.workflows.enforcement import Enforcement
from tether.workflows.sessions import SessionStore

__all__ = ["SessionStage"]


class SessionStage:
    """Step enforcement for workflow sessions (``X-Tether-Session``); other turns pass through."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store

    async def __call__(self, turn: Turn, rest: Next) -> AsyncIterator[TurnEvent]:
        if turn.session is None:
            async with closing_stream(rest(turn)) as events:
                async for ev in events:
                    yield ev
            return
        # Once per request; the first thing the turn does, so an unknown session is still a 404.
        session = await self.store.observe(turn.session, turn.job.messages, workflow=turn.workflow)
        job, steered = self.store.steer(session, turn.job)
        notes: list[Intervention] = [steered] if steered else []
        usage = Usage()
        sent_text = False
        current = job
        last: tuple[Enforcement, FinishOut] | None = None
        for attempt in (0, 1):
            text: list[str] = []
            held: Held | None = None
            try:
                async with closing_stream(hold_calls(rest(replace(turn, job=current)))) as replies:
                    async for out in replies:
                        if isinstance(out, TextOut):
                            text.append(out.text)
                            if attempt == 0 or not sent_text:
                                yield out
                        else:
                            held = out
            except ContextOverflowError:
                if attempt == 0:
                    raise
                break  # the retry context does not fit: keep the first reply's verdict
            assert held is not None
            calls, finish = held.calls, held.finish
            sent_text = sent_text or bool(text)
            usage = usage + finish.usage
            notes.extend(finish.interventions)
            verdict = await self.store.check(session, calls)
            notes.extend(verdict.interventions())
            last = (verdict, finish)
            if verdict.ok or attempt == 1 or not self.store.may_regenerate(session):
                break
            choice = (
                verdict.next_tool if any(t.name == verdict.next_tool for t in job.tools) else job.tool_choice
            )
            current = replace(
                job,
                messages=(*job.messages, *verdict.retry_messages("".join(text))),
                tool_choice=choice or "auto",
            )
            notes.append(Intervention("workflow_regenerated", f"regenerating with tool_choice {choice!r}"))
        assert last is not None
        verdict, finish = last
        for call in verdict.allowed_calls:
            yield call
        reason: FinishReason = "tool_calls" if verdict.allowed_calls else finish.finish_reason
        if not verdict.ok and not verdict.allowed_calls:
            yield TextOut(("\n" if sent_text else "") + verdict.fallback_text())
            notes.append(Intervention("workflow_fallback_text", "every call was blocked"))
            reason = "stop"
        yield FinishOut(reason, usage, tuple(notes), matched_stop=finish.matched_stop)
