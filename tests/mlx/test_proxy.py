"""The OpenAI proxy over the MLX engine, next to the same requests over llama.cpp."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.conftest import sse_events
from tether.config import ServerConfig
from tether.engine.base import Engine
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.scheduler import Scheduler
from tether.proxy.app import create_app

if TYPE_CHECKING:
    from tether.engine.mlx import MlxEngine

MODEL = "smollm2-135m-instruct"
TOOLS = [
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


@pytest.fixture(params=["mlx", "llama"])
async def client(
    request: pytest.FixtureRequest, mlx_engine: MlxEngine, llama_engine: LlamaCppEngine
) -> AsyncIterator[httpx.AsyncClient]:
    engine: Engine = mlx_engine if request.param == "mlx" else llama_engine
    app = create_app(ServerConfig(), Scheduler([engine]))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=300
    ) as c:
        yield c


async def test_streamed_text_equals_the_plain_reply(client: httpx.AsyncClient) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me about the sea."}],
        "temperature": 0,
        "max_tokens": 12,
    }
    full = (await client.post("/v1/chat/completions", json=body)).json()
    events = sse_events((await client.post("/v1/chat/completions", json={**body, "stream": True})).text)
    assert events[-1] == "[DONE]"
    streamed = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
    assert streamed == full["choices"][0]["message"]["content"] != ""
    assert full["usage"]["completion_tokens"] == 12 and full["choices"][0]["finish_reason"] == "length"
    # The same prompt again comes (all but its last token) from the engine's cache.
    again = (await client.post("/v1/chat/completions", json=body)).json()
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == again["usage"]["prompt_tokens"] - 1


async def test_required_tool_choice_gives_a_tool_call(client: httpx.AsyncClient) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "What time is it in Tokyo?"}],
        "tools": TOOLS,
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 40,
    }
    reply = (await client.post("/v1/chat/completions", json=body)).json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls", reply
    call = choice["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_time"
    assert isinstance(json.loads(call["function"]["arguments"])["city"], str)
