"""``wrap()`` with the real ``openai`` SDK against tether's own app over a scripted engine.

``preset="bare"`` (layer 0 off, no server-side guard) lets the raw wrong names
the scripted engine writes reach the client, as they would from another backend.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx2
import pytest
from guardrails_support import TOOLS, scripted_app, sync_http
from openai import AsyncOpenAI, OpenAI
from openai.types.chat import ChatCompletion

from tether.engine.scripted import ScriptedEngine
from tether.guardrails import GuardrailStats, wrap

MODEL = "scripted"
ASK = [{"role": "user", "content": "read a.txt"}]


def generic_call(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": arguments}]})


def kinds(response: ChatCompletion) -> list[str]:
    return [i["kind"] for i in response.tether["interventions"]]


AsyncFactory = Callable[..., tuple[AsyncOpenAI, ScriptedEngine]]


@pytest.fixture
async def async_client() -> AsyncIterator[AsyncFactory]:
    opened: list[AsyncOpenAI] = []

    def factory(replies: Sequence[str], **config: Any) -> tuple[AsyncOpenAI, ScriptedEngine]:
        app, engine = scripted_app(replies, **{"constrain": "off", "preset": "bare", **config})
        http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://test/v1")
        client = AsyncOpenAI(api_key="test", base_url="http://test/v1", http_client=http, max_retries=0)
        opened.append(client)
        return client, engine

    yield factory
    for client in opened:
        await client.close()


async def test_alias_and_coercion_in_one_call(async_client: AsyncFactory) -> None:
    client, engine = async_client([generic_call("Read", {"path": "a.txt", "limit": "5"})])
    response = await wrap(client).chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS)
    assert isinstance(response, ChatCompletion)
    (tool_call,) = response.choices[0].message.tool_calls or []
    assert tool_call.function.name == "read_file"
    assert json.loads(tool_call.function.arguments) == {"path": "a.txt", "limit": 5}
    assert tool_call.id.startswith("call_") and response.choices[0].finish_reason == "tool_calls"
    assert kinds(response) == ["name_resolved", "args_coerced"]
    assert len(engine.prompts) == 1


async def test_forge_regression_text_reply_costs_one_call(async_client: AsyncFactory) -> None:
    client, engine = async_client([json.dumps({"response": "thanks, bye"})])
    response = await wrap(client, max_retries=3).chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="auto"
    )
    assert response.choices[0].message.content == "thanks, bye"
    assert response.choices[0].finish_reason == "stop" and not response.choices[0].message.tool_calls
    assert kinds(response) == [] and len(engine.prompts) == 1


async def test_unknown_tool_is_retried_with_the_error_turn(async_client: AsyncFactory) -> None:
    client, engine = async_client(
        [generic_call("frobnicate", {"path": "a.txt"}), generic_call("read_file", {"path": "a.txt"})]
    )
    stats = GuardrailStats()
    response = await wrap(client, stats=stats).chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS)
    (tool_call,) = response.choices[0].message.tool_calls or []
    assert tool_call.function.name == "read_file"
    assert kinds(response) == ["name_unresolved", "retry"]
    assert len(engine.prompts) == 2
    assert "Error: unknown tool 'frobnicate'. Available tools: read_file, write_file." in engine.prompts[1]
    assert stats.actions == {"retry": 1, "execute": 1}


async def test_retries_are_bounded_and_the_failure_is_reported(async_client: AsyncFactory) -> None:
    client, engine = async_client([generic_call("frobnicate", {})])
    response = await wrap(client, max_retries=1).chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS
    )
    assert len(engine.prompts) == 2
    assert kinds(response) == ["name_unresolved", "retry", "name_unresolved", "failed"]
    (tool_call,) = response.choices[0].message.tool_calls or []
    assert tool_call.function.name == "frobnicate"  # never a guessed name


async def test_unknown_tool_as_text(async_client: AsyncFactory) -> None:
    client, engine = async_client([generic_call("frobnicate", {})])
    response = await wrap(client, unknown_tool="text").chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS
    )
    message = response.choices[0].message
    assert message.content == "Error: unknown tool 'frobnicate'. Available tools: read_file, write_file."
    assert not message.tool_calls and len(engine.prompts) == 1


async def test_calls_without_tools_and_streams_pass_through(async_client: AsyncFactory) -> None:
    client, engine = async_client(["plain words"])
    wrapped = wrap(client)
    plain = await wrapped.chat.completions.create(model=MODEL, messages=ASK)
    assert plain.choices[0].message.content == "plain words"
    assert set(plain.tether) == {"layers"}  # the server's own field only: no interventions
    stream = await wrapped.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "plain words" and len(engine.prompts) == 2


async def test_the_original_client_is_untouched(async_client: AsyncFactory) -> None:
    client, _ = async_client([generic_call("Read", {"path": "a.txt"})])
    wrap(client)
    response = await client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS)
    (tool_call,) = response.choices[0].message.tool_calls or []
    assert tool_call.function.name == "Read" and set(response.tether) == {"layers"}  # no interventions


def test_sync_client_required_tool_is_retried() -> None:
    replies = [
        json.dumps({"response": "sure, reading"}),
        generic_call("write-file", {"path": "b", "content": "x"}),
    ]
    app, engine = scripted_app(replies, constrain="off", preset="bare")
    with sync_http(app) as http:
        client = OpenAI(api_key="test", base_url="http://test/v1", http_client=http, max_retries=0)
        response = wrap(client).chat.completions.create(
            model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required"
        )
    (tool_call,) = response.choices[0].message.tool_calls or []
    assert tool_call.function.name == "write_file"
    assert kinds(response) == ["retry", "name_resolved"]
    assert len(engine.prompts) == 2 and "This step requires a tool call." in engine.prompts[1]
