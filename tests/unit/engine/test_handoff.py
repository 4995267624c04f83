"""The engine-thread handoff loses and reorders nothing, wakes the loop only when needed, and a stream
window gathers tokens into fewer events without changing the text."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import replace

import httpx

from tests.support.engines import SlowEngine
from tests.support.socket_server import serving
from tether.config import ServerConfig
from tether.engine.base import GenerationEvent, SamplingParams, Token
from tether.engine.batch.jobs import Job
from tether.engine.handoff import Mailbox
from tether.engine.scheduler import Scheduler
from tether.proxy.app import create_app
from tether.turns.events import TextOut, joined

END = object()


async def _collect(box: Mailbox) -> list[list[object]]:
    batches = []
    while True:
        batch = await box.take()
        batches.append(batch)
        if batch[-1] is END:
            return batches


async def test_every_item_arrives_once_in_order_under_races() -> None:
    box = Mailbox(asyncio.get_running_loop())

    def produce() -> None:
        for i in range(20_000):
            box.put(i)
            if i % 997 == 0:
                time.sleep(0.001)  # let the consumer catch up and wait again
        box.put(END)

    thread = threading.Thread(target=produce)
    thread.start()
    batches = await asyncio.wait_for(_collect(box), 30)
    thread.join()
    items = [x for b in batches for x in b]
    assert items == [*range(20_000), END]
    assert all(batches)  # take never returns an empty batch
    assert box.wakeups <= len(batches) + 1 < 20_000  # a busy consumer is not woken again


async def test_a_slow_consumer_costs_no_wakeups() -> None:
    box = Mailbox(asyncio.get_running_loop())
    box.put(1)
    box.put(2)
    box.put(3)
    assert box.wakeups == 1
    assert await box.take() == [1, 2, 3]
    box.put(4)  # taken everything: the next put wakes again
    assert box.wakeups == 2
    assert await box.take() == [4]


async def test_window_gathers_after_the_first_batch() -> None:
    box = Mailbox(asyncio.get_running_loop(), window=0.3)

    def produce() -> None:
        box.put("first")
        time.sleep(0.1)
        for i in range(5):
            box.put(i)
            time.sleep(0.004)
        box.put(END)

    thread = threading.Thread(target=produce)
    thread.start()
    batches = await asyncio.wait_for(_collect(box), 10)
    thread.join()
    assert batches[0] == ["first"]  # time to first token is never held
    assert batches[1][:5] == [0, 1, 2, 3, 4]  # one wake-up, then the window gathers the rest
    assert len(batches) <= 3


async def test_the_end_of_a_stream_cuts_the_window_short() -> None:
    box = Mailbox(asyncio.get_running_loop(), window=5.0)
    box.put("first")
    assert await box.take() == ["first"]

    def produce() -> None:
        time.sleep(0.05)  # the consumer waits for a wake-up
        box.put("token")
        time.sleep(0.05)  # the consumer is waiting out its window now
        box.put(END, flush=True)

    thread = threading.Thread(target=produce)
    started = time.monotonic()
    thread.start()
    assert await asyncio.wait_for(box.take(), 2) == ["token", END]
    thread.join()
    assert time.monotonic() - started < 1


async def _events(window: float) -> list[GenerationEvent]:
    sched = Scheduler([SlowEngine(["The quick brown fox jumps"], delay=0.003)], stream_window_s=window)
    return [ev async for ev in sched.generate([1, 2, 3], SamplingParams(max_tokens=64))]


async def test_a_stream_window_marks_the_tokens_handed_over_together() -> None:
    each = await _events(0.0)
    gathered = await _events(0.03)
    assert [e for e in each if isinstance(e, Token) and e.batched] == []
    assert [replace(e, batched=False) if isinstance(e, Token) else e for e in gathered] == each
    marks = [e.batched for e in gathered if isinstance(e, Token)]
    assert not marks[0] and not marks[-1]  # the first token alone, at once; the last ends its batch
    assert sum(marks) > 10  # most tokens came in batches


def _chunks(url: str) -> list[str]:
    body = {"model": "scripted", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line.startswith("data: {")]
    return [c for line in lines if (c := json.loads(line[6:])["choices"][0]["delta"].get("content"))]


def test_a_batch_goes_out_as_one_delta_over_a_socket() -> None:
    reply = "All the small things, " * 6
    streams = []
    for window in (0.0, 0.04):
        engine = SlowEngine([reply], delay=0.004)
        with serving(create_app(ServerConfig(), Scheduler([engine], stream_window_s=window))) as url:
            streams.append(_chunks(url))
    each, gathered = streams
    assert "".join(gathered) == "".join(each) == reply
    assert len(gathered) < len(each) / 3


def test_joined_deltas() -> None:
    assert joined([TextOut("a")]) == [TextOut("a")]
    assert joined([TextOut("a"), TextOut("b")]) == [TextOut("ab")]
    carrying = [TextOut("a", (Token(1, "a"),)), TextOut("b", (Token(2, "b"),))]
    assert joined(carrying) == carrying


def test_a_batched_engine_job_lets_tokens_gather_and_ends_at_once() -> None:
    job = Job(0, [1], SamplingParams(), None, None)

    def produce() -> None:
        job.out.put(7)
        time.sleep(0.05)  # the consumer took 7 and now waits out its window
        job.out.put(8)
        time.sleep(0.65)  # 8 went out at the window's end (0.5 s); the next window runs to 1 s
        job.out.put(9)
        job.end()  # the end wakes it at once, not after the window

    thread = threading.Thread(target=produce)
    started = time.monotonic()
    thread.start()
    got = [(t, time.monotonic() - started) for t in job.tokens(window=0.5)]
    thread.join()
    assert [t for t, _ in got] == [7, 8, 9]
    assert got[0][1] < 0.2  # the first token at once
    assert got[1][1] > 0.45  # 8 waited for the window, not taken as it came
    assert got[2][1] < 0.9  # 9 and the end at 0.7 s: the window after 8 was cut short
