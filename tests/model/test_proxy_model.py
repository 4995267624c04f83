"""The proxy over the real model: streamed text equals non-streamed, tool calls come back as tool_calls."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.conftest import sse_events
from tests.support.asgi import asgi_client
from tether.config import ServerConfig
from tether.engine.llama_cpp import LlamaCppEngine

MODEL = "smollm2-135m-instruct"


@pytest.fixture
async def client(smollm: LlamaCppEngine) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(smollm, ServerConfig(constrain="strict"), timeout=120) as c:
        yield c


async def test_stream_equals_non_stream(client: httpx.AsyncClient) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me about the sea."}],
        "temperature": 0,
        "max_tokens": 40,
    }
    full = (await client.post("/v1/chat/completions", json=body)).json()
    events = sse_events((await client.post("/v1/chat/completions", json={**body, "stream": True})).text)
    streamed = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
    assert streamed == full["choices"][0]["message"]["content"]
    assert full["usage"]["completion_tokens"] > 5


async def test_simple_prompt_gives_tool_calls(client: httpx.AsyncClient) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_time",
                "description": "Current time in a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "What time is it in Tokyo?"}],
        "tools": tools,
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 60,
    }
    r = (await client.post("/v1/chat/completions", json=body)).json()
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls", r
    call = choice["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_time"
    assert isinstance(json.loads(call["function"]["arguments"])["city"], str)


async def test_repeated_prefix_reports_cached_tokens(client: httpx.AsyncClient) -> None:
    system = {"role": "system", "content": "You answer in one short sentence. " * 30}
    a = {
        "model": MODEL,
        "messages": [system, {"role": "user", "content": "Hi"}],
        "temperature": 0,
        "max_tokens": 5,
    }
    b = {
        "model": MODEL,
        "messages": [system, {"role": "user", "content": "Hello"}],
        "temperature": 0,
        "max_tokens": 5,
    }
    await client.post("/v1/chat/completions", json=a)
    usage = (await client.post("/v1/chat/completions", json=b)).json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] > usage["prompt_tokens"] * 0.8
