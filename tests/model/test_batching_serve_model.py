"""The batched engine behind the proxy, over a real socket: concurrent streams, hang-ups, cached
prefixes, and the scheduler's priorities and preemption on batched slots."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.scripted import WEATHER_TOOL
from tests.support.socket_server import serving, wait_for
from tether.config import ServerConfig
from tether.engine.base import Done, SamplingParams, Token
from tether.engine.batch import BatchedLlama
from tether.engine.scheduler import Scheduler
from tether.proxy.app import create_app

MODEL = "smollm2-135m-instruct"
STORY = [{"role": "user", "content": "Write a very long story about a lighthouse keeper."}]
SYSTEM = "You are the release assistant of a small team. Answer briefly and precisely. " * 30


@pytest.fixture
def model(batched: BatchedLlama) -> BatchedLlama:
    return batched


@pytest.fixture
def base(model: BatchedLlama) -> Iterator[str]:
    app = create_app(ServerConfig(slots=8, n_ctx=2048), Scheduler(model.slots()))
    with serving(app) as url:
        yield url


async def _stream(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], hang_up_after: int | None
) -> str:
    """Read a streamed reply to its end (its last data line), or hang up after some bytes."""
    last = ""
    got = 0
    async with client.stream("POST", url, json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            got += len(line)
            if line.startswith("data: "):
                last = line
            if hang_up_after is not None and got >= hang_up_after:
                return "hung up"
    return last


def test_concurrent_streams_with_one_hang_up(base: str) -> None:
    """Four streams share the batch; one hangs up mid-stream. The others finish, the next request is
    answered at once, and every slot is free again."""

    async def main() -> list[str]:
        async with httpx.AsyncClient(timeout=120) as client:
            url = f"{base}/v1/chat/completions"
            bodies = [
                {
                    "model": MODEL,
                    "max_tokens": 60 if i else 2000,
                    "stream": True,
                    "temperature": 0,
                    "messages": STORY,
                }
                for i in range(4)
            ]
            return await asyncio.gather(
                *[_stream(client, url, b, 400 if i == 0 else None) for i, b in enumerate(bodies)]
            )

    results = asyncio.run(main())
    assert results[0] == "hung up"
    assert all(r == "data: [DONE]" for r in results[1:]), results
    started = time.monotonic()
    r = httpx.post(
        f"{base}/v1/chat/completions",
        json={"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )
    assert r.status_code == 200 and time.monotonic() - started < 1.0
    snap = wait_for(base, lambda s: s["busy_slots"] == 0)
    assert snap["cancelled"] == 1 and snap["completed"] == 5


def test_agents_sharing_a_system_prompt_report_cached_tokens(base: str) -> None:
    """The second agent's prompt shares the first one's system prompt (and tools): its cells are copied
    or kept, and ``usage.prompt_tokens_details.cached_tokens`` says how many."""
    usage = []
    for question in ("Is the build green?", "Who reviews the changelog?"):
        r = httpx.post(
            f"{base}/v1/chat/completions",
            json={
                "model": MODEL,
                "max_tokens": 8,
                "temperature": 0,
                "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
            },
            timeout=60,
        )
        assert r.status_code == 200, r.text
        usage.append(r.json()["usage"])
    assert usage[1]["prompt_tokens"] > 400
    assert usage[1]["prompt_tokens_details"]["cached_tokens"] >= usage[1]["prompt_tokens"] - 20, usage


def test_priorities_and_preemption_on_batched_slots(model: BatchedLlama) -> None:
    """One slot, preemption on: a high-priority request stops a running low-priority one at a token
    boundary, runs first, and the low one resumes where it paused (its budget counted across both)."""
    scheduler = Scheduler(model.slots()[:1], preempt=True)
    story = model.tokenize("<|im_start|>user\nWrite a long story.<|im_end|>\n<|im_start|>assistant\n")
    quick = model.tokenize("<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n")
    order: list[str] = []

    async def run(name: str, ids: list[int], max_tokens: int, priority: int, delay: float) -> Done:
        await asyncio.sleep(delay)
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
        done: Done | None = None
        count = 0
        async for event in scheduler.generate(ids, params, priority=priority):
            if isinstance(event, Token) and event.id >= 0:
                count += 1
            elif isinstance(event, Done):
                done = event
        order.append(name)
        assert done is not None
        assert count == done.completion_tokens
        return done

    async def main() -> tuple[Done, Done]:
        return await asyncio.gather(run("low", story, 120, 10, 0.0), run("high", quick, 6, 0, 0.3))

    low, high = asyncio.run(main())
    assert order == ["high", "low"]
    assert scheduler.stats.preempted == 1 and scheduler.stats.resumed == 1
    assert low.completion_tokens == 120 and low.finish_reason == "length"
    assert high.completion_tokens <= 6


def _streamed(url: str, body: dict[str, Any]) -> tuple[str, str, int]:
    """A streamed reply's text, its tool calls' names and arguments, and how many chunks carried them."""
    text, calls, chunks = [], [], 0
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            delta = json.loads(line[6:])["choices"][0]["delta"]
            if delta.get("content"):
                text.append(delta["content"])
                chunks += 1
            for call in delta.get("tool_calls") or ():
                calls.append(call["function"].get("name") or "")
                calls.append(call["function"].get("arguments") or "")
    return "".join(text), "".join(calls), chunks


def test_a_stream_window_sends_the_same_reply_in_fewer_chunks(model: BatchedLlama) -> None:
    """Greedy replies are the same with tokens gathered 30 ms into one event (prose, prose with a tool
    offered, a strict tool call under the grammar); the prose arrives in fewer chunks."""
    prose = {"model": MODEL, "max_tokens": 48, "temperature": 0, "messages": STORY}
    call = {
        "model": MODEL,
        "max_tokens": 48,
        "temperature": 0,
        "tools": [WEATHER_TOOL],
        "tool_choice": "required",
        "messages": [{"role": "user", "content": "What is the weather in Oslo?"}],
    }
    armed = {**prose, "tools": [WEATHER_TOOL]}  # the decision and the answer check in play
    replies = []
    for window in (0.0, 0.03):
        app = create_app(ServerConfig(n_ctx=2048), Scheduler(model.slots()[:1], stream_window_s=window))
        with serving(app) as url:
            replies.append([_streamed(url, body) for body in (prose, armed, call)])
    (each, each_armed, each_call), (gathered, gathered_armed, gathered_call) = replies
    assert gathered[:2] == each[:2] and len(each[0]) > 100
    assert gathered_armed[:2] == each_armed[:2] and len(each_armed[0]) > 100
    assert gathered_call[:2] == each_call[:2] and each_call[1].startswith("get_weather")
    assert gathered[2] < each[2] * 0.7
