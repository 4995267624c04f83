"""The OpenAI chat route against a scripted engine: shapes, streaming, tool calls, finish reasons."""

from __future__ import annotations

import asyncio
import json

import httpx

from tests.conftest import sse_events
from tests.support.socket_server import serving
from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.proxy.app import create_app

MODEL = "scripted"


def chat(content: str = "hi", **extra: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}


async def test_non_streaming_text(scripted) -> None:
    client, _ = scripted(["Hello there!"])
    r = await client.post("/v1/chat/completions", json=chat())
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Hello there!", "refusal": None}
    assert body["choices"][0]["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["completion_tokens"] == len(b"Hello there!")
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_streamed_text_equals_non_streamed(scripted) -> None:
    client, _ = scripted(["Stream me, please. ✓ done"])
    full = (await client.post("/v1/chat/completions", json=chat())).json()["choices"][0]["message"]["content"]
    r = await client.post("/v1/chat/completions", json=chat(stream=True))
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == full
    assert len([c for c in chunks if c["choices"][0]["delta"].get("content")]) > 3
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_usage_chunk_only_when_asked(scripted) -> None:
    client, _ = scripted(["ok"])
    plain = sse_events((await client.post("/v1/chat/completions", json=chat(stream=True))).text)
    assert all("usage" not in c for c in plain[:-1])
    asked = sse_events(
        (
            await client.post(
                "/v1/chat/completions", json=chat(stream=True, stream_options={"include_usage": True})
            )
        ).text
    )
    last = asked[-2]
    assert last["choices"] == []
    assert last["usage"]["completion_tokens"] == 2


def test_first_delta_leaves_before_generation_ends() -> None:
    """By event order, over a real socket (the in-process ASGI transport buffers a whole response):
    the engine is paused mid-generation until the client has read a content delta."""
    engine = ScriptedEngine(["abcdefghij"], pause_after=3)
    app = create_app(ServerConfig(), Scheduler([engine]))
    with (
        serving(app) as base,
        httpx.Client(timeout=10) as http,
        http.stream("POST", f"{base}/v1/chat/completions", json=chat(stream=True)) as r,
    ):
        lines = r.iter_lines()
        for line in lines:
            if line.startswith("data: ") and '"content": "a' in line:
                break
        # The delta may arrive before the engine reaches its pause: it gets there, and still waits.
        assert engine.paused.wait(10) and not engine.released.is_set()
        engine.resume.set()
        rest = list(lines)
    assert any("[DONE]" in line for line in rest)


async def test_max_tokens_gives_length(scripted) -> None:
    client, _ = scripted(["a long reply that will be cut"])
    body = (await client.post("/v1/chat/completions", json=chat(max_tokens=4))).json()
    assert body["choices"][0]["message"]["content"] == "a lo"
    assert body["choices"][0]["finish_reason"] == "length"
    body = (await client.post("/v1/chat/completions", json=chat(max_completion_tokens=2))).json()
    assert body["choices"][0]["message"]["content"] == "a "


async def test_stop_strings_cut_and_hold_back(scripted) -> None:
    client, _ = scripted(["one two STOP three"])
    body = (await client.post("/v1/chat/completions", json=chat(stop=["STOP"]))).json()
    assert body["choices"][0]["message"]["content"] == "one two "
    assert body["choices"][0]["finish_reason"] == "stop"
    events = sse_events((await client.post("/v1/chat/completions", json=chat(stop="STOP", stream=True))).text)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in events[:-1])
    assert text == "one two "


GENERIC_CALL = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]}'
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather forecast",
            "parameters": {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]


async def test_tool_call_non_streaming(scripted) -> None:
    client, engines = scripted([GENERIC_CALL])
    body = (await client.post("/v1/chat/completions", json=chat("weather?", tools=TOOLS))).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["id"].startswith("call_")
    assert call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 2}
    # The tools reached the prompt through the format's system block.
    assert "get_weather" in engines[0].prompts[-1]


async def test_tool_call_streaming_first_delta_has_id_and_name(scripted) -> None:
    client, _ = scripted([GENERIC_CALL])
    events = sse_events(
        (await client.post("/v1/chat/completions", json=chat("weather?", tools=TOOLS, stream=True))).text
    )
    deltas = [c["choices"][0]["delta"] for c in events[:-1] if c["choices"]]
    call_deltas = [d["tool_calls"][0] for d in deltas if d.get("tool_calls")]
    assert call_deltas, deltas
    first = call_deltas[0]
    assert first["id"].startswith("call_") and first["type"] == "function"
    assert first["function"]["name"] == "get_weather"
    args = "".join(d["function"].get("arguments", "") for d in call_deltas)
    assert json.loads(args) == {"city": "Paris", "days": 2}
    # No prose leaked from the JSON envelope.
    assert not any(d.get("content") for d in deltas)
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"


async def test_tool_round_trip_history_is_rendered(scripted) -> None:
    client, engines = scripted(['{"response": "It is sunny in Paris."}'])
    messages = [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"},
    ]
    body = (
        await client.post("/v1/chat/completions", json={"model": MODEL, "messages": messages, "tools": TOOLS})
    ).json()
    assert body["choices"][0]["message"]["content"] == "It is sunny in Paris."
    assert body["choices"][0]["finish_reason"] == "stop"
    prompt = engines[0].prompts[-1]
    assert "sunny, 21C" in prompt and "Paris" in prompt


async def test_text_envelope_streams_decoded_text(scripted) -> None:
    client, _ = scripted(['{"response": "Line one\\nLine \\"two\\""}'])
    events = sse_events(
        (await client.post("/v1/chat/completions", json=chat("hi", tools=TOOLS, stream=True))).text
    )
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in events[:-1] if c["choices"])
    assert text == 'Line one\nLine "two"'


async def test_tool_choice_none_offers_no_tools(scripted) -> None:
    client, engines = scripted(["plain answer"])
    body = (await client.post("/v1/chat/completions", json=chat(tools=TOOLS, tool_choice="none"))).json()
    assert body["choices"][0]["message"]["content"] == "plain answer"
    assert "get_weather" not in engines[0].prompts[-1]


async def test_concurrent_requests_share_one_slot(scripted) -> None:
    client, _ = scripted(["same reply"])
    results = await asyncio.gather(*(client.post("/v1/chat/completions", json=chat()) for _ in range(5)))
    assert [r.status_code for r in results] == [200] * 5
    assert {r.json()["choices"][0]["message"]["content"] for r in results} == {"same reply"}
