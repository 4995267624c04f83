"""No invented results: a text answer that states what an offered tool exists to supply becomes a call.

A small model asked "is it raining in Lima?" with a weather tool offered may answer "no, it's not
raining in Lima" — a confident fake, the worst reply a tool-calling proxy can return. On a fresh
ask under ``tool_choice: auto`` with ``recheck_answers`` set, this stage holds a text reply back
(for how long: below); when both the request and the answer are about one offered tool (their embedding
similarity to the tool's sentence, :mod:`tether.selection.semantic`, at least ``recheck_answers``
each), the turn is run again with the decision made for a call (``ChatJob.call_decided``) and an
``answer_recalled`` intervention. So is an answer that opens by saying it cannot help ("I don't
have the ability to…") to a request about one offered tool (the request's similarity alone at least
``recheck_answers``): the model disowns what the tool does. The call still passes the guard: one
whose values nobody said is abstained from, and then the first answer stands (no third
generation). A reply that calls, or that follows a call the guard abstained from, streams as it
is. Text is held back only until its opening (300 characters) has been read clean, or to the end
of a shorter reply; a request about no offered tool (its similarity to each below
``recheck_answers``) can have no answer recalled, and its reply streams from the first token.
"""

from __future__ import annotations

import re
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

__all__ = ["AnswerCheckStage", "invented_tool", "refused_tool"]


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


# "I don't have the ability to…", "I'm unable to…", "as a chatbot…": the model says it cannot do
# what was asked. Read in the answer's opening only: a refusal leads.
_REFUSAL = re.compile(
    r"\bi\s+(?:do\s+not|don'?t)\s+have\s+(?:the\s+)?(?:ability|capabilit(?:y|ies)|access)"
    r"|\bi\s*(?:am|'m)\s+(?:not\s+able|unable)\b|\bi\s+(?:cannot|can'?t)\b"
    r"|\bas\s+an?\s+(?:ai|chatbot|language\s+model)\b",
    re.I,
)
_OPENING = 300


def refused_tool(
    semantic: SemanticRelevance, request: str, answer: str, tools: Sequence[ToolSpec], threshold: float
) -> tuple[str, float] | None:
    """The offered tool the ``request`` is about (its similarity at least ``threshold``) when the
    ``answer`` opens by saying it cannot help: a small model's "I don't have the ability to…" while
    a tool that can is offered. None otherwise."""
    opening = answer[:_OPENING].replace("\u2019", "'")
    if not _REFUSAL.search(opening) or not readable(request):
        return None
    asked = semantic.scores(request, tools)
    best = max(range(len(tools)), key=lambda i: asked[i])
    return (tools[best].name, asked[best]) if asked[best] >= threshold else None


def _joined(texts: Sequence[TextOut]) -> str:
    return "".join(t.text for t in texts)


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
        return self._checked(turn, rest) if self._may_recall(turn.job) else rest(turn)

    def _may_recall(self, job: ChatJob) -> bool:
        """Both recalls need the request about one offered tool: any other reply is never held."""
        if not _applies(job):
            return False
        request = request_text(job.messages)
        if not readable(request):
            return False
        return max(self.semantic.scores(request, offered_tools(job))) >= job.guard.recheck_answers

    async def _checked(self, turn: Turn, rest: Next) -> AsyncIterator[TurnEvent]:
        held: list[TextOut] | None = []  # None once released: then everything streams
        size = 0
        judged = False  # the opening is read once: a suspect one is held to the end, not re-read per token
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
                    size += len(ev.text)
                    # An invented reading or a refusal shows in the answer's opening: once that
                    # much is clean, the rest streams as it comes.
                    if not judged and size >= _OPENING:
                        judged = True
                        if self._found(turn.job, _joined(held)) is None:
                            for text in held:
                                yield text
                            held = None
        assert finish is not None
        # A text that follows a call the guard abstained from is the answer it chose: asking for the
        # call again would bring the same call back (greedy, same prompt) and abstain again.
        if held:
            abstained = any(n.kind == "call_abstained" for n in finish.interventions)
            found = None if abstained else self._found(turn.job, _joined(held))
            if found is not None:
                async for ev in self._recalled(turn, rest, finish, found, held):
                    yield ev
                return
            for text in held:
                yield text
        yield finish

    def _found(self, job: ChatJob, answer: str) -> tuple[str, float, str] | None:
        """The tool ``answer`` invented a result of or refused the work of, with its similarity."""
        request, tools, bar = request_text(job.messages), offered_tools(job), job.guard.recheck_answers
        if stated := invented_tool(self.semantic, request, answer, tools, bar):
            return (*stated, "stated what {} supplies")
        if refused := refused_tool(self.semantic, request, answer, tools, bar):
            return (*refused, "refused what {} does")
        return None

    async def _recalled(
        self,
        turn: Turn,
        rest: Next,
        first: FinishOut,
        found: tuple[str, float, str],
        answer: list[TextOut],
    ) -> AsyncIterator[TurnEvent]:
        tool, score, how = found
        note = Intervention(
            "answer_recalled", f"the answer {how.format(tool)} (similarity {score:.2f})", tool
        )
        if self.stats is not None:
            self.stats.record(note)
        again = replace(turn, job=replace(turn.job, call_decided=True))
        replied = False
        async with closing_stream(rest(again)) as events:
            async for ev in events:
                if isinstance(ev, FinishOut):
                    if not replied:  # the call was abstained from: the first answer stands
                        for text in answer:
                            yield text
                        ev = replace(ev, finish_reason=first.finish_reason, matched_stop=first.matched_stop)
                    ev = replace(
                        ev,
                        usage=first.usage + ev.usage,
                        interventions=(*first.interventions, note, *ev.interventions),
                    )
                else:
                    replied = True
                yield ev
