"""A turn's event stream is closed the moment whoever consumes it stops, not later by the garbage
collector: a stream that holds an engine slot must let go of it at once."""

from __future__ import annotations

from collections.abc import AsyncIterator

from tether.aio import prime
from tether.chat import Message, Usage
from tether.sandbox import ToolBox
from tether.turns.events import ChatJob, FinishOut, TextOut, TurnEvent
from tether.turns.stages import ServerToolsStage, Turn


class Source:
    """A turn's events whose ``finally`` records that the stream was closed."""

    def __init__(self) -> None:
        self.closed = False

    async def events(self, turn: Turn | None = None) -> AsyncIterator[TurnEvent]:
        try:
            yield TextOut("one")
            yield TextOut("two")
            yield FinishOut("stop", Usage(), ())
        finally:
            self.closed = True


async def test_a_primed_stream_closed_before_it_is_read_closes_the_turn() -> None:
    source = Source()
    primed = await prime(source.events())
    assert not source.closed
    await primed.aclose()  # type: ignore[attr-defined]  # the response ended before its body started
    assert source.closed


async def test_a_primed_stream_yields_the_first_event_then_the_rest() -> None:
    source = Source()
    got = [ev async for ev in await prime(source.events())]
    assert [e.text for e in got if isinstance(e, TextOut)] == ["one", "two"] and source.closed


async def test_a_stage_closed_mid_reply_closes_the_run_inside_it() -> None:
    stage = ServerToolsStage(ToolBox())
    source = Source()
    outer = stage(Turn(ChatJob(messages=(Message("user", "hi"),))), source.events)
    assert await anext(outer) == TextOut("one")
    await outer.aclose()  # type: ignore[attr-defined]  # the client hung up while "one" was sent
    assert source.closed  # at once, not when a finalizer gets round to it
