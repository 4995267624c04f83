"""The scheduler never runs two generations on one slot, honours priorities and frees slots on cancel."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence

import pytest

from tether.engine.base import Done, GenerationEvent, LogitsProcessor, SamplingParams, Token
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.errors import QueueFullError


class Recording(ScriptedEngine):
    """Records overlapping use; any overlap on one instance is a scheduler bug."""

    def __init__(self, log: list[str], name: str) -> None:
        super().__init__(["abc"])
        self.active = 0
        self.max_active = 0
        self.log = log
        self.name = name

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        *,
        logits_processor: LogitsProcessor | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[GenerationEvent]:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.log.append(self.detokenize(prompt))
        try:
            yield from super().generate(prompt, params, logits_processor=logits_processor, cancel=cancel)
        finally:
            self.active -= 1


async def drain(sched: Scheduler, prompt: str, priority: int = 0) -> str:
    out = []
    async for ev in sched.generate(list(prompt.encode()), SamplingParams(max_tokens=8), priority=priority):
        if isinstance(ev, Token):
            out.append(ev.text)
    return "".join(out)


async def test_no_interleaving_and_no_loss() -> None:
    log: list[str] = []
    engines = [Recording(log, "a"), Recording(log, "b")]
    sched = Scheduler(engines, queue_limit=64)
    results = await asyncio.gather(*(drain(sched, f"p{i}") for i in range(12)))
    assert results == ["abc"] * 12
    assert sorted(log) == sorted(f"p{i}" for i in range(12))
    assert all(e.max_active == 1 for e in engines)
    assert sched.snapshot()["completed"] == 12


async def test_priorities_then_fifo() -> None:
    gate = ScriptedEngine(["x"], pause_after=0)
    sched = Scheduler([gate], queue_limit=10)
    first = asyncio.create_task(drain(sched, "first"))
    await asyncio.to_thread(gate.paused.wait, 5)
    order: list[str] = []

    async def job(name: str, prio: int) -> None:
        await drain(sched, name, prio)
        order.append(name)

    tasks = [asyncio.create_task(job(n, p)) for n, p in [("low1", 5), ("high", 0), ("low2", 5), ("mid", 2)]]
    await asyncio.sleep(0.05)
    assert sched.queue_depth == 4
    gate.resume.set()
    await asyncio.gather(first, *tasks)
    assert order == ["high", "mid", "low1", "low2"]


async def test_queue_limit() -> None:
    gate = ScriptedEngine(["x"], pause_after=0)
    sched = Scheduler([gate], queue_limit=1)
    first = asyncio.create_task(drain(sched, "a"))
    await asyncio.to_thread(gate.paused.wait, 5)
    second = asyncio.create_task(drain(sched, "b"))
    await asyncio.sleep(0.02)
    with pytest.raises(QueueFullError):
        await drain(sched, "c")
    gate.resume.set()
    await asyncio.gather(first, second)
    assert sched.snapshot()["rejected"] == 1


async def test_closing_early_cancels_and_frees_the_slot() -> None:
    engine = ScriptedEngine(["a long long reply"])
    sched = Scheduler([engine])
    gen = sched.generate(list(b"p"), SamplingParams(max_tokens=100))
    first = await gen.__anext__()
    assert isinstance(first, Token)
    await gen.aclose()
    assert sched.snapshot()["cancelled"] == 1
    assert await drain(sched, "again") == "a long l"


async def test_cancelled_waiter_does_not_leak_the_slot() -> None:
    gate = ScriptedEngine(["x"], pause_after=0)
    sched = Scheduler([gate], queue_limit=4)
    first = asyncio.create_task(drain(sched, "a"))
    await asyncio.to_thread(gate.paused.wait, 5)
    waiter = asyncio.create_task(drain(sched, "b"))
    await asyncio.sleep(0.02)
    waiter.cancel()
    gate.resume.set()
    await first
    assert await drain(sched, "c") == "x"
    assert isinstance(Done, type)
