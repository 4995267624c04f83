"""The scheduler never runs two generations on one slot, honours priorities and frees slots on cancel."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt
import pytest

from tether.engine.base import Constraint, Done, GenerationEvent, LogitsProcessor, SamplingParams, Token
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
        constraint: Constraint | None = None,
        cancel: threading.Event | None = None,
        logits_processor: LogitsProcessor | None = None,
    ) -> Iterator[GenerationEvent]:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.log.append(self.detokenize(prompt))
        try:
            yield from super().generate(
                prompt, params, constraint=constraint, cancel=cancel, logits_processor=logits_processor
            )
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


# -- preemption -------------------------------------------------------------------------


class Continuing(ScriptedEngine):
    """A deterministic stand-in for greedy decoding: the reply is a function of the prompt up to
    its first ``|``; a prompt that already holds part of the reply continues it. ``holds`` maps a
    job name to (blocked, go) events: its first generation stops after 3 tokens until ``go``."""

    def __init__(self, holds: dict[str, tuple[threading.Event, threading.Event]] | None = None) -> None:
        super().__init__(["unused"])
        self.holds = dict(holds or {})
        self.active = 0
        self.max_active = 0
        self.seen: list[str] = []

    @staticmethod
    def reply_for(base: str) -> str:
        name = base.rstrip("|")
        return f"<{name}> " + " ".join(f"{name}{i}" for i in range(6)) + " ünï"

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        *,
        constraint: Constraint | None = None,
        cancel: threading.Event | None = None,
        logits_processor: LogitsProcessor | None = None,
    ) -> Iterator[GenerationEvent]:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            raw = bytes(prompt)
            base, _, partial = raw.partition(b"|")
            name = base.decode()
            self.seen.append(raw.decode("utf-8", "replace"))
            full = self.reply_for(name).encode()
            assert full.startswith(partial), (full, partial)
            hold = self.holds.pop(name, None) if not partial else None
            produced = 0
            finish = "stop"
            ids = list(prompt)
            for i, byte in enumerate(full[len(partial) :]):
                if produced >= params.max_tokens:
                    finish = "length"
                    break
                if cancel is not None and cancel.is_set():
                    finish = "cancelled"
                    break
                if hold is not None and i == 3:
                    hold[0].set()
                    hold[1].wait(5)
                if logits_processor is not None:
                    logits_processor(np.asarray(ids, dtype=np.intc), np.zeros(257, dtype=np.single))
                produced += 1
                ids.append(byte)
                yield Token(byte, "")  # text is irrelevant here: the test joins ids
            yield Done(finish, len(prompt), len(prompt), produced)  # type: ignore[arg-type]
        finally:
            self.active -= 1


async def collect(
    sched: Scheduler, name: str, priority: int, order: list[str], processor: LogitsProcessor | None = None
) -> tuple[bytes, Done]:
    ids: list[int] = []
    done: Done | None = None
    prompt = list(f"{name}|".encode())
    gen = sched.generate(
        prompt, SamplingParams(max_tokens=200), logits_processor=processor, priority=priority
    )
    async for ev in gen:
        if isinstance(ev, Token):
            ids.append(ev.id)
        else:
            done = ev
    order.append(name)
    assert done is not None
    return bytes(ids), done


def expected(name: str) -> bytes:
    return Continuing.reply_for(name).encode()


async def test_preempted_generation_resumes_with_identical_output() -> None:
    blocked, go = threading.Event(), threading.Event()
    engine = Continuing({"low": (blocked, go)})
    sched = Scheduler([engine], queue_limit=8, preempt=True)
    order: list[str] = []
    seen: list[list[int]] = []

    def processor(ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        seen.append(ids.tolist())
        return logits

    low = asyncio.create_task(collect(sched, "low", 5, order, processor))
    await asyncio.to_thread(blocked.wait, 5)
    high = asyncio.create_task(collect(sched, "high", 0, order))
    while sched.queue_depth < 1:
        await asyncio.sleep(0.005)
    go.set()
    (low_text, low_done), (high_text, _) = await asyncio.gather(low, high)
    # The shared logits processor saw exactly the sequence an unpaused generation shows it.
    full = [*b"low|", *expected("low")]
    assert seen == [full[: len(b"low|") + k] for k in range(len(expected("low")))]
    assert order == ["high", "low"]
    assert low_text == expected("low") and high_text == expected("high")
    assert low_done.completion_tokens == len(expected("low"))
    assert low_done.prompt_tokens == len(b"low|") and low_done.finish_reason == "stop"
    # The resume prompt carried the tokens generated before the pause.
    assert engine.seen == ["low|", "high|", "low|<low"]
    snap = sched.snapshot()
    assert (snap["preempted"], snap["resumed"], snap["completed"], snap["cancelled"]) == (1, 1, 2, 0)


async def test_a_preempted_generation_is_not_timed_out_while_it_waits_to_resume() -> None:
    """The queue timeout is for requests that have not started: a preempted reply has already
    streamed, so waiting to resume longer than the timeout only pauses it."""
    low_blocked, low_go = threading.Event(), threading.Event()
    high_blocked, high_go = threading.Event(), threading.Event()
    engine = Continuing({"low": (low_blocked, low_go), "high": (high_blocked, high_go)})
    sched = Scheduler([engine], queue_limit=8, preempt=True, queue_timeout_s=0.05)
    order: list[str] = []
    low = asyncio.create_task(collect(sched, "low", 5, order))
    await asyncio.to_thread(low_blocked.wait, 5)
    high = asyncio.create_task(collect(sched, "high", 0, order))
    while sched.queue_depth < 1:
        await asyncio.sleep(0.005)
    low_go.set()  # low yields its slot to high, then waits to resume
    await asyncio.to_thread(high_blocked.wait, 5)
    await asyncio.sleep(0.2)  # four times the queue timeout
    high_go.set()
    (low_text, low_done), (high_text, _) = await asyncio.gather(low, high)
    assert low_text == expected("low") and low_done.finish_reason == "stop"
    assert high_text == expected("high")
    snap = sched.snapshot()
    assert (snap["preempted"], snap["resumed"], snap["timed_out"]) == (1, 1, 0)


async def test_preemption_is_off_by_default() -> None:
    blocked, go = threading.Event(), threading.Event()
    engine = Continuing({"low": (blocked, go)})
    sched = Scheduler([engine], queue_limit=8)
    order: list[str] = []
    low = asyncio.create_task(collect(sched, "low", 5, order))
    await asyncio.to_thread(blocked.wait, 5)
    high = asyncio.create_task(collect(sched, "high", 0, order))
    while sched.queue_depth < 1:
        await asyncio.sleep(0.005)
    go.set()
    await asyncio.gather(low, high)
    assert order == ["low", "high"]
    assert sched.snapshot()["preempted"] == 0


async def test_eight_runs_priorities_fifo_and_resume() -> None:
    """One slot, eight runs: the first (lowest priority) is preempted, later a running mid-priority
    run is preempted by a late urgent arrival; nothing is lost and every output is unchanged."""
    b_low, go_low = threading.Event(), threading.Event()
    b_mid, go_mid = threading.Event(), threading.Event()
    engine = Continuing({"low": (b_low, go_low), "m1": (b_mid, go_mid)})
    sched = Scheduler([engine], queue_limit=16, preempt=True)
    order: list[str] = []
    tasks = [asyncio.create_task(collect(sched, "low", 9, order))]
    await asyncio.to_thread(b_low.wait, 5)
    for name, prio in [("a1", 4), ("m1", 2), ("a2", 4), ("h1", 1), ("m2", 2), ("a3", 4)]:
        tasks.append(asyncio.create_task(collect(sched, name, prio, order)))
        await asyncio.sleep(0)  # arrival order is creation order
    while sched.queue_depth < 6:
        await asyncio.sleep(0.005)
    go_low.set()
    await asyncio.to_thread(b_mid.wait, 5)  # h1 ran; m1 now holds the slot and is paused
    tasks.append(asyncio.create_task(collect(sched, "urgent", 0, order)))
    while sched.queue_depth < 6:  # low, m2, a1, a2, a3 + urgent
        await asyncio.sleep(0.005)
    go_mid.set()
    results = await asyncio.gather(*tasks)
    names = ["low", "a1", "m1", "a2", "h1", "m2", "a3", "urgent"]
    assert [text for text, _ in results] == [expected(n) for n in names]
    assert order == ["h1", "urgent", "m1", "m2", "a1", "a2", "a3", "low"]
    snap = sched.snapshot()
    assert (snap["preempted"], snap["resumed"], snap["completed"]) == (2, 2, 8)
    assert engine.max_active == 1 and snap["busy_slots"] == 0 and snap["queue_depth"] == 0


async def test_preemption_across_slots_loses_nothing() -> None:
    engines = [Continuing(), Continuing()]
    sched = Scheduler(engines, queue_limit=32, preempt=True)
    order: list[str] = []
    prios = [7, 1, 5, 0, 6, 2, 3, 4]
    results = await asyncio.gather(*(collect(sched, f"r{i}", p, order) for i, p in enumerate(prios)))
    assert [t for t, _ in results] == [expected(f"r{i}") for i in range(8)]
    assert sorted(order) == sorted(f"r{i}" for i in range(8))
    assert all(e.max_active == 1 for e in engines)
    assert sched.snapshot()["busy_slots"] == 0


async def test_preempted_run_cancelled_while_requeued_frees_everything() -> None:
    blocked, go = threading.Event(), threading.Event()
    b2, go2 = threading.Event(), threading.Event()
    engine = Continuing({"low": (blocked, go), "high": (b2, go2)})
    sched = Scheduler([engine], queue_limit=8, preempt=True)
    order: list[str] = []
    low = asyncio.create_task(collect(sched, "low", 5, order))
    await asyncio.to_thread(blocked.wait, 5)
    high = asyncio.create_task(collect(sched, "high", 0, order))
    while sched.queue_depth < 1:
        await asyncio.sleep(0.005)
    go.set()
    await asyncio.to_thread(b2.wait, 5)  # high runs, low waits requeued
    assert sched.queue_depth == 1
    low.cancel()
    go2.set()
    assert (await high)[0] == expected("high")
    with pytest.raises(asyncio.CancelledError):
        await low
    snap = sched.snapshot()
    assert snap["queue_depth"] == 0 and snap["busy_slots"] == 0 and snap["cancelled"] == 1
    assert (await collect(sched, "again", 0, order))[0] == expected("again")
