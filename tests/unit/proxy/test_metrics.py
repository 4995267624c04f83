"""``GET /metrics``: scraped after real requests (scripted engine) and parsed with prometheus_client's
own parser; every number is checked against what the responses and ``/health`` said."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import make_client, sse_events
from tests.support.engines import SlowEngine
from tests.support.scripted import READ_FILE, lookup_tools
from tests.support.socket_server import serving, wait_for
from tether.config import ServerConfig
from tether.engine.base import SamplingParams
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.proxy.app import create_app

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

TOOLS = [READ_FILE]


def call(name: str, args: dict[str, Any]) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": args}]})


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


async def scrape(client: httpx.AsyncClient, **headers: str) -> Samples:
    r = await client.get("/metrics", headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return parse(r.text)


async def test_metrics_agree_with_the_responses_and_health() -> None:
    client, (engine,) = make_client(
        [call("Read", {"path": "a.txt", "limit": "5"}), "Hello there", "Hi from messages", "plain text"],
        preset="full",
    )
    async with client:
        tool_reply = (
            await client.post(
                "/v1/chat/completions",
                json={
                    "model": "scripted",
                    "messages": [{"role": "user", "content": "show a.txt"}],
                    "tools": TOOLS,
                    "tether": {"constrain": "off"},
                },
            )
        ).json()
        streamed = await client.post(
            "/v1/chat/completions",
            json={
                "model": "scripted",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
        stream_usage = sse_events(streamed.text)[-2]["usage"]
        message = (
            await client.post(
                "/v1/messages",
                json={"model": "scripted", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
            )
        ).json()
        completion = (await client.post("/v1/completions", json={"model": "scripted", "prompt": "x"})).json()
        assert (
            await client.post(
                "/v1/chat/completions",
                json={"model": "nope", "messages": [{"role": "user", "content": "hi"}]},
            )
        ).status_code == 404
        assert (await client.get("/no/such/path")).status_code == 404
        bad_json = await client.post(
            "/v1/chat/completions", content=b"{", headers={"content-type": "application/json"}
        )
        assert bad_json.status_code == 400
        health = (await client.get("/health")).json()
        samples = await scrape(client)

    openai_usages = [tool_reply["usage"], stream_usage]
    chat = "/v1/chat/completions"
    assert total(samples, "tether_completion_tokens_total", route=chat) == sum(
        u["completion_tokens"] for u in openai_usages
    )
    assert total(samples, "tether_prompt_tokens_total", route=chat) == sum(
        u["prompt_tokens"] for u in openai_usages
    )
    assert total(samples, "tether_cached_prompt_tokens_total", route=chat) == sum(
        u["prompt_tokens_details"]["cached_tokens"] for u in openai_usages
    )
    mu = message["usage"]
    assert total(samples, "tether_completion_tokens_total", route="/v1/messages") == mu["output_tokens"]
    assert total(samples, "tether_prompt_tokens_total", route="/v1/messages") == (
        mu["input_tokens"] + mu["cache_read_input_tokens"]
    )
    assert (
        total(samples, "tether_cached_prompt_tokens_total", route="/v1/messages")
        == (mu["cache_read_input_tokens"])
    )
    assert (
        total(samples, "tether_completion_tokens_total", route="/v1/completions")
        == (completion["usage"]["completion_tokens"])
    )
    assert (
        total(samples, "tether_completion_tokens_total")
        == sum(u["completion_tokens"] for u in openai_usages)
        + mu["output_tokens"]
        + completion["usage"]["completion_tokens"]
    )

    requests = {
        (dict(ls)["route"], dict(ls)["status"]): v
        for (n, ls), v in samples.items()
        if n == "tether_http_requests_total"
    }
    assert requests == {
        (chat, "200"): 2,
        ("/v1/messages", "200"): 1,
        ("/v1/completions", "200"): 1,
        (chat, "404"): 1,  # unknown model
        ("unmatched", "404"): 1,  # an unknown path is not a label value of its own
        (chat, "400"): 1,
        ("/health", "200"): 1,
    }
    assert total(samples, "tether_turns_total", route=chat, outcome="tool_calls") == 1
    assert total(samples, "tether_turns_total", route=chat, outcome="stop") == 1

    # One histogram observation per generation the engine ran (the guard regenerated nothing).
    assert len(engine.prompts) == 4
    assert total(samples, "tether_time_to_first_token_seconds_count") == 4
    assert total(samples, "tether_time_to_first_token_seconds_sum") > 0
    assert total(samples, "tether_time_per_output_token_seconds_count") == 4

    assert health["interventions"] == {"name_resolved": 1, "args_coerced": 1}
    kinds = {dict(ls)["kind"]: v for (n, ls), v in samples.items() if n == "tether_guard_interventions_total"}
    assert {k: v for k, v in kinds.items() if v} == health["interventions"]
    assert kinds["repick"] == 0  # every kind is exposed, zero included

    sched = health["scheduler"]
    assert total(samples, "tether_slots") == 1
    assert total(samples, "tether_busy_slots") == 0
    assert total(samples, "tether_queue_depth") == 0
    assert total(samples, "tether_turns_in_flight") == 0
    assert total(samples, "tether_generations_started_total") == sched["started"] == 4


async def test_each_app_has_its_own_registry() -> None:
    busy, _ = make_client(["one reply"])
    idle, _ = make_client(["never asked"])
    async with busy, idle:
        r = await busy.post(
            "/v1/chat/completions",
            json={"model": "scripted", "messages": [{"role": "user", "content": "hi"}]},
        )
        tokens = r.json()["usage"]["completion_tokens"]
        assert total(await scrape(busy), "tether_completion_tokens_total") == tokens > 0
        assert total(await scrape(idle), "tether_completion_tokens_total") == 0


async def test_metrics_need_the_api_key_and_count_refusals() -> None:
    client, _ = make_client(api_key="sekrit")
    async with client:
        assert (await client.get("/metrics")).status_code == 401
        assert (await client.get("/metrics?key=sekrit")).status_code == 401  # ?key= is for /ui only
        assert (await client.get("/health")).status_code == 200
        samples = await scrape(client, authorization="Bearer sekrit")
    assert total(samples, "tether_http_requests_total", route="/metrics", status="401") == 2
    assert total(samples, "tether_http_requests_total", route="/health", status="200") == 1


def test_live_gauges_and_cancellations_through_a_socket() -> None:
    """Busy slots, queue depth and turns in flight are read at scrape time; a client that hangs up
    shows as a cancelled generation and a cancelled turn."""
    long = " ".join(f"word{i}" for i in range(300))
    engine = SlowEngine([long, "short"], delay=0.01)
    app = create_app(ServerConfig(), Scheduler([engine]))
    body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
    with serving(app) as base, httpx.Client(base_url=base, timeout=10) as http:
        with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as stream:
            lines = stream.iter_lines()
            assert next(lines).startswith("data: ")
            queued = threading.Thread(target=lambda: http.post("/v1/chat/completions", json=body))
            queued.start()
            wait_for(base, lambda s: s["queue_depth"] == 1)
            live = parse(http.get("/metrics").text)
            assert total(live, "tether_busy_slots") == 1
            assert total(live, "tether_queue_depth") == 1
            assert total(live, "tether_turns_in_flight") == 2
        queued.join(10)
        snap = wait_for(base, lambda s: s["busy_slots"] == 0 and s["cancelled"] == 1)
        after = parse(http.get("/metrics").text)
    assert total(after, "tether_generations_cancelled_total") == snap["cancelled"] == 1
    assert total(after, "tether_turns_total", outcome="cancelled") == 1
    assert total(after, "tether_turns_total", outcome="stop") == 1
    assert total(after, "tether_busy_slots") == total(after, "tether_queue_depth") == 0
    assert total(after, "tether_turns_in_flight") == 0


async def test_preemptions_are_read_from_the_scheduler() -> None:
    engine = ScriptedEngine(["low priority reply"], pause_after=2)
    scheduler = Scheduler([engine], preempt=True)
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(ServerConfig(), scheduler)), base_url="http://t"
    )

    async def run(prompt: bytes, priority: int) -> None:
        params = SamplingParams(max_tokens=40)
        async for _ in scheduler.generate(list(prompt), params, priority=priority):
            pass

    low = asyncio.create_task(run(b"low", 5))
    assert await asyncio.to_thread(engine.paused.wait, 5)
    high = asyncio.create_task(run(b"high", 0))
    while scheduler.queue_depth < 1:
        await asyncio.sleep(0.005)
    engine.resume.set()
    await asyncio.gather(low, high)
    async with client:
        samples = await scrape(client)
    assert scheduler.snapshot()["preempted"] == 1
    assert total(samples, "tether_generations_preempted_total") == 1


async def test_server_tool_runs_by_tool_and_outcome() -> None:
    stage = lookup_tools()
    engine = ScriptedEngine(
        [call("lookup", {"key": "zz"}), call("lookup", {"key": "a"}), '{"response": "alpha"}']
    )
    app = create_app(ServerConfig(preset="full"), Scheduler([engine]), server_tools=stage)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        r = await client.post(
            "/v1/chat/completions",
            json={"model": "scripted", "messages": [{"role": "user", "content": "a?"}]},
        )
        assert r.json()["choices"][0]["message"]["content"] == "alpha"
        samples = await scrape(client)
    assert total(samples, "tether_server_tool_runs_total", tool="lookup", outcome="error") == 1
    assert total(samples, "tether_server_tool_runs_total", tool="lookup", outcome="ok") == 1


async def test_every_cache_is_reported_beside_its_limit_and_stays_within_it() -> None:
    """Six distinct tool sets through a store of 3 responses and 2 sessions: each cache's entries
    never pass its capacity, and the process figures a soak run watches are there."""
    replies = [call("read_file", {"path": f"{i}.txt"}) for i in range(6)]
    client, _ = make_client(replies, responses_store=3, max_sessions=2)
    async with client:
        for i in range(6):
            tool = {**READ_FILE, "function": {**READ_FILE["function"], "description": f"Variant {i}."}}
            workflow = {
                "name": f"w{i}",
                "tools": ["read_file", "done"],
                "steps": ["read_file"],
                "terminal": "done",
            }
            made = await client.post(
                "/v1/tether/sessions", json={"workflow": workflow, "session_id": f"s{i}"}
            )
            assert made.status_code == 201, made.text
            r = await client.post(
                "/v1/responses",
                headers={"X-Tether-Session": f"s{i}"},
                json={"model": "scripted", "input": "show a file", "tools": [_flat(tool)]},
            )
            assert r.status_code == 200, r.text
        samples = await scrape(client)
    entries = {dict(ls)["cache"]: v for (n, ls), v in samples.items() if n == "tether_cache_entries"}
    capacity = {dict(ls)["cache"]: v for (n, ls), v in samples.items() if n == "tether_cache_capacity"}
    assert entries.keys() == capacity.keys()
    assert {"responses", "sessions", "dashboard_turns", "schema_checks", "constraint_plans"} <= entries.keys()
    assert (entries["responses"], capacity["responses"]) == (3, 3)
    assert (entries["sessions"], capacity["sessions"]) == (2, 2)
    assert all(entries[name] <= capacity[name] for name in entries), entries
    assert total(samples, "tether_asyncio_tasks") >= 1  # the scrape's own task at least
    assert total(samples, "tether_threads") >= 1
    assert total(samples, "process_resident_memory_bytes") > 0
    assert total(samples, "process_open_fds") > 0


def _flat(tool: dict[str, Any]) -> dict[str, Any]:
    """A chat-completions tool in the Responses API's flat shape."""
    return {"type": "function", **tool["function"]}


async def test_log_lines_the_disk_refused_show_in_health_and_metrics() -> None:
    from tether.logging import LogSink

    sink = LogSink()
    app = create_app(ServerConfig(), Scheduler([ScriptedEngine(["hi"])]), log_sink=sink)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        assert "log" not in (await client.get("/health")).json()  # nothing refused: nothing to say
        sink.dropped, sink.last_error = 2, "OSError: [Errno 28] No space left on device"
        health = (await client.get("/health")).json()
        samples = await scrape(client)
    assert health["status"] == "ok" and health["log"]["dropped"] == 2
    assert total(samples, "tether_log_lines_dropped_total") == 2
