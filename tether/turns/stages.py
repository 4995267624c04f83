"""The stages of the turn pipeline, each an async generator around the next one.

A stage is called with the turn and the rest of the pipeline (``next``), and yields
turn events. The app factory composes them once (:class:`TurnPipeline`); both protocols
enter the same pipeline:

* ``SessionStage`` — workflow sessions (:mod:`tether.workflows.stage`: the workflows
  package sits above this one, so it brings its own stage);
* :class:`ServerToolsStage` — tools the server runs itself (sandboxed); it keeps generating
  until the model answers or calls a client tool;
* :class:`CompactionStage` — fits every generation's prompt into the window;
* the core (:class:`tether.turns.core.ChatCore`) — one generation, guarded.

Before the first stage, the client's history is made safe to render
(:func:`tether.turns.history.safe_job`: broken calls repaired or summarised, results paired).

Every stage sums the usage of every generation it ran into its ``FinishOut``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog

from tether.aio import closing_stream
from tether.calls import ToolCall
from tether.chat import Message, Usage
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.interventions import Intervention
from tether.sandbox import ToolBox, ToolSource
from tether.turns.compaction import compact_job
from tether.turns.core import ChatCore
from tether.turns.events import ChatJob, FinishOut, FinishReason, TextOut, TurnEvent
from tether.turns.history import safe_job

__all__ = [
    "CompactionStage",
    "Held",
    "Next",
    "ServerToolsStage",
    "Stage",
    "Turn",
    "TurnPipeline",
    "hold_calls",
]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Turn:
    """One request on its way through the pipeline: the job and, for workflow sessions, the session id
    and the workflow that may start it (``X-Tether-Workflow``)."""

    job: ChatJob
    session: str | None = None
    workflow: str | None = None


Next = Callable[[Turn], AsyncIterator[TurnEvent]]
Stage = Callable[[Turn, Next], AsyncIterator[TurnEvent]]


class TurnPipeline:
    """``stages`` (outermost first) around the core; ``start(turn)`` is where every protocol enters."""

    def __init__(self, core: ChatCore, stages: Sequence[Stage] = ()) -> None:
        self.core = core
        self.stages = tuple(stages)

    async def _generate(self, turn: Turn) -> AsyncIterator[TurnEvent]:
        # Rendering and tokenizing may block (a remote engine tokenizes over HTTP): keep the loop free.
        prepared = await asyncio.to_thread(self.core.prepare, turn.job)
        async with closing_stream(self.core.run(prepared)) as events:
            async for event in events:
                yield event

    def start(self, turn: Turn) -> AsyncIterator[TurnEvent]:
        run: Next = self._generate
        for stage in reversed(self.stages):
            run = _bind(stage, run)
        turn = replace(turn, job=safe_job(turn.job))  # every protocol's history, once
        return _with_layers(run(turn), self.core.info.layers)


async def _with_layers(events: AsyncIterator[TurnEvent], layers: tuple[str, ...]) -> AsyncIterator[TurnEvent]:
    """``events`` with the backend's layers on the ``FinishOut`` (every reply states what guarded it)."""
    async with closing_stream(events) as stream:
        async for ev in stream:
            yield replace(ev, layers=layers) if isinstance(ev, FinishOut) else ev


def _bind(stage: Stage, rest: Next) -> Next:
    return lambda turn: stage(turn, rest)


class CompactionStage:
    """Compacts each generation's conversation to the window (``tether serve --compaction``)."""

    def __init__(self, core: ChatCore) -> None:
        self.core = core

    def __call__(self, turn: Turn, rest: Next) -> AsyncIterator[TurnEvent]:
        job, _ = compact_job(self.core, turn.job)
        return rest(replace(turn, job=job))


@dataclass(frozen=True)
class Held:
    """The end of one inner run: its calls, held back until the stage decides, and its finish."""

    calls: tuple[ToolCall, ...]
    finish: FinishOut


async def hold_calls(events: AsyncIterator[TurnEvent]) -> AsyncIterator[TextOut | Held]:
    """One inner run's text as it comes, then its calls and finish as one :class:`Held`
    (for stages that decide about the calls before passing them on)."""
    calls: list[ToolCall] = []
    finish: FinishOut | None = None
    async with closing_stream(events) as stream:
        async for ev in stream:
            if isinstance(ev, TextOut):
                yield ev
            elif isinstance(ev, ToolCall):
                calls.append(ev)
            else:
                finish = ev
    assert finish is not None
    yield Held(tuple(calls), finish)


class ServerToolsStage:
    """Tools the proxy runs itself, through the sandbox, offered beside the client's own.

    When the model calls one, the proxy runs it, appends the call and its result and
    generates again, so a plain chat client still gets a final answer. Calls to the
    client's tools end the loop and go to the client (a client tool of the same name wins).
    """

    def __init__(self, toolbox: ToolBox, *, max_rounds: int = 8, sources: Sequence[ToolSource] = ()) -> None:
        self.toolbox = toolbox
        self.sources = tuple(sources)  # what adds tools while the server runs (MCP servers)
        self.max_rounds = max_rounds
        self.on_run: Callable[[str, bool], None] | None = None  # told of each run: tool, succeeded

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """The tools offered now (a source's list may change while the server runs)."""
        return tuple(t.tool_spec() for t in self.toolbox.offered())

    @property
    def names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.toolbox.offered())

    async def start(self) -> None:
        """Start the sources (at the server's start; one that fails logs why and retries)."""
        for source in self.sources:
            await source.start(self.toolbox)

    async def close(self) -> None:
        for source in self.sources:
            await source.close()

    def snapshot(self) -> dict[str, Any]:
        """Each source's state, by name (``/health``)."""
        return {name: state for source in self.sources for name, state in source.snapshot().items()}

    async def __call__(self, turn: Turn, rest: Next) -> AsyncIterator[TurnEvent]:
        job = turn.job
        if job.tool_choice == "none":
            async with closing_stream(rest(turn)) as events:
                async for ev in events:
                    yield ev
            return
        client = {t.name for t in job.tools}
        specs = self.specs
        mine_names = frozenset(s.name for s in specs) - client
        job = replace(job, tools=(*job.tools, *(s for s in specs if s.name in mine_names)))
        usage = Usage()
        notes: list[Intervention] = []
        for round_no in range(self.max_rounds):
            held: Held | None = None
            async with closing_stream(hold_calls(rest(replace(turn, job=job)))) as replies:
                async for out in replies:
                    if isinstance(out, TextOut):
                        yield out
                    else:
                        held = out
            assert held is not None
            calls, finish = held.calls, held.finish
            usage = usage + finish.usage
            notes.extend(finish.interventions)
            mine = [c for c in calls if c.name in mine_names]
            theirs = [c for c in calls if c.name not in mine_names]
            if not mine or theirs:
                if mine:
                    await self._execute(mine, notes)  # run them; the client's calls end the turn
                for call in theirs:
                    yield call
                reason: FinishReason = "tool_calls" if theirs else finish.finish_reason
                yield FinishOut(reason, usage, tuple(notes), finish.matched_stop)
                return
            results = await self._execute(mine, notes)
            history = (
                *job.messages,
                Message("assistant", "", tool_calls=tuple(mine)),
                *(
                    Message("tool", text, tool_call_id=c.id, name=c.name)
                    for c, text in zip(mine, results, strict=True)
                ),
            )
            log.info("server_tools_round", round=round_no, calls=[c.name for c in mine])
            # A required or named tool_choice was met by the calls just run; forcing it again would
            # loop until max_rounds without ever answering.
            job = replace(job, messages=history, tool_choice="auto")
        notes.append(Intervention("server_tools_limit", f"stopped after {self.max_rounds} rounds"))
        yield FinishOut("length", usage, tuple(notes))

    async def _execute(self, calls: Sequence[ToolCall], notes: list[Intervention]) -> list[str]:
        out: list[str] = []
        for call in calls:
            result = await self.toolbox.call(call.name, call.arguments)
            if self.on_run is not None:
                self.on_run(call.name, not result.is_error)
            out.append(result.content)
            detail = "error" if result.is_error else "ok"
            notes.append(
                Intervention("server_tool", detail, call.name, dict(call.arguments), result.content[:200])
            )
        return out
