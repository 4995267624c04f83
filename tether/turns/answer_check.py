"""No invented results: a text answer that states what an offered tool exists to supply becomes a call.

A small model asked "is it raining in Lima?" with a weather tool offered may answer "no, it's not
raining in Lima" — a confident fake, the worst reply a tool-calling proxy can return. On a fresh
ask under ``tool_choice: auto`` with ``recheck_answers`` set, this stage holds a text reply back
until it ends; when both the request and the answer are about one offered tool (their embedding
similarity to the tool's sentence, :mod:`tether.selection.semantic`, at least ``recheck_answers``
each), the turn is run again with the decision made for a call (``ChatJob.call_decided``) and an
``answer_recalled`` intervention. The call still passes the guard: one whose values nobody said is
abstained from, and then the model answers in text again. A reply that calls, or that answers
about something no tool supplies, streams as it is (text held back only until the reply ends).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

from tether.aio import closing_stream
from tether.calls import ToolCall
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.interventions import GuardrailStats, Intervention
from tether.selection.decision import request_text
from tether.selection.semantic import SemanticRelevance, readable
from tether.turns.events import ChatJob, FinishOut, TextOut, TurnEvent, offered_tools
from tether.turns.stages import Next, Turn

__all__ = ["AnswerCheckStage", "invented_tool"]


def invented_tool(
    semantic: SemanticRelevance, request: str, answer: str, tools: Sequence[ToolSpec], threshold: float
) -> tuple[str, float] | None:
    """The offered tool that both ``request`` and ``answer`` are about (with the lower of their two
    similarities), or None."""
    if not answer.strip() or not readable(request) or not readable(answer):
        return None
    asked = semantic.scores(request, tools)
    said = semantic.scores(answer, tools)
    best = max(range(len(tools)), key=lambda i: min(asked[i], said[i]))
    score = min(asked[best], said[best])
    return (tools[best].name, score) if score >= threshold else None


def _applies(job: ChatJob) -> bool:
    return (
        job.guard.recheck_answers > 0
        and not job.call_decided
        and job.tool_choice == "auto"
        and bool(offered_tools(job))
        and bool(job.messages)
        and job.messages[-1].role == "user"
    )


class AnswerCheckStage:
    """Decides a text reply that invented a tool's result again as a call (see the module doc)."""

    def __init__(self, semantic: SemanticRelevance, stats: GuardrailStats | None = None) -> None:
        self.semantic = semantic
        self.stats = stats

    def __call__(self, turn: Turn, rest: Next) -> AsyncIterator[TurnEvent]:
        return self._checked(turn, rest) if _applies(turn.job) else rest(turn)

    async def _checked(self, turn: Turn, rest: Next) -> AsyncIterator[TurnEvent]:
        held: list[TextOut] | None = []  # None once the reply calls: then everything streams
        finish: FinishOut | None = None
        async with closing_stream(rest(turn)) as events:
            async for ev in events:
                if isinstance(ev, FinishOut):
                    finish = ev
                elif held is None:
                    yield ev
                elif isinstance(ev, ToolCall):
                    for text in held:
                        yield text
                    held = None
                    yield ev
                else:
                    held.append(ev)
        assert finish is not None
        if held:
            job = turn.job
            answer = "".join(t.text for t in held)
            found = invented_tool(
                self.semantic,
                request_text(job.messages),
                answer,
                offered_tools(job),
                job.guard.recheck_answers,
            )
            if found is not None:
                async for ev in self._recalled(turn, rest, finish, found):
                    yield ev
                return
            for text in held:
                yield text
        yield finish

    async def _recalled(
        self, turn: Turn, rest: Next, first: FinishOut, found: tuple[str, float]
    ) -> AsyncIterator[TurnEvent]:
        tool, score = found
        note = Intervention(
            "answer_recalled", f"the answer stated what {tool} supplies (similarity {score:.2f})", tool
        )
        if self.stats is not None:
            self.stats.record(note)
        again = replace(turn, job=replace(turn.job, call_decided=True))
        async with closing_stream(rest(again)) as events:
            async for ev in events:
                if isinstance(ev, FinishOut):
                    ev = replace(
                        ev,
                        usage=first.usage + ev.usage,
                        interventions=(*first.interventions, note, *ev.interventions),
                    )
                yield ev
