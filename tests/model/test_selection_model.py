"""Deciding, choosing and filling on the bundled model: the issue's cases as a new user meets them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.asgi import asgi_client
from tether.config import ServerConfig
from tether.engine.llama_cpp import LlamaCppEngine

MODEL = "smollm2-135m-instruct"


def tool(name: str, description: str, **props: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": props, "required": list(props)}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


GET_TIME = tool("get_time", "Current time in a time zone", tz={"type": "string"})
AREA = tool(
    "calculate_triangle_area",
    "Calculate the area of a triangle given its base and height.",
    base={"type": "integer"},
    height={"type": "integer"},
)
WEATHER = tool("get_weather", "Current weather for a city", city={"type": "string"})


@pytest.fixture
async def client(smollm: LlamaCppEngine) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(smollm, ServerConfig(), timeout=300) as c:
        yield c


async def ask(
    client: httpx.AsyncClient, text: str, tools: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "tools": tools, "temperature": 0}
    r = await client.post("/v1/chat/completions", json={"max_tokens": 160, **body, **extra})
    assert r.status_code == 200, r.text
    return dict(r.json())


def kinds(reply: dict[str, Any]) -> list[str]:
    return [i["kind"] for i in reply.get("tether", {}).get("interventions", [])]


async def test_goodbye_gets_a_sensible_text_answer(client: httpx.AsyncClient) -> None:
    # Under strict: the decision is not in the default preset (full calls get_time here).
    for preset in ("strict",):
        r = await ask(client, "Thanks, that is all. Bye!", [GET_TIME, WEATHER], tether={"preset": preset})
        message = r["choices"][0]["message"]
        assert not message.get("tool_calls"), (preset, message)
        content = message["content"] or ""
        assert len(content.split()) >= 2, (preset, content)
        for copied in ("YOUR ANSWER", "example", "TOOL_NAME", "<text>"):
            assert copied.casefold() not in content.casefold(), (preset, content)
        # Asked without the tool block: no talk of the format (inside the JSON envelope it answered
        # "The user asked for a JSON object with a list of tools ...").
        for leaked in ("json", "tool", '"response"'):
            assert leaked not in content.casefold(), (preset, content)


async def test_named_tool_choice_copies_nothing_from_the_prompt(client: httpx.AsyncClient) -> None:
    choice = {"type": "function", "function": {"name": "get_time"}}
    text = "What time is it in Europe/Paris?"
    r = await ask(client, text, [GET_TIME, WEATHER], tool_choice=choice)
    assert "example" not in json.dumps(r["choices"][0]["message"]).casefold()
    r = await ask(client, text, [GET_TIME, WEATHER], tool_choice=choice, tether={"preset": "strict"})
    (call,) = r["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_time"
    assert json.loads(call["function"]["arguments"]) == {"tz": "Europe/Paris"}


async def test_strict_fills_values_from_the_request_and_picks_the_fitting_tool(
    client: httpx.AsyncClient,
) -> None:
    r = await ask(
        client,
        "Find the area of a triangle with a base of 10 units and height of 5 units.",
        [WEATHER, AREA, GET_TIME],
        tether={"preset": "strict"},
    )
    # The first call is the fitting tool with the request's values. (The request's "10 units and height of
    # 5 units" reads as two enumerated items, so a second call is allowed and the model makes one.)
    call = r["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "calculate_triangle_area"
    assert json.loads(call["function"]["arguments"]) == {"base": 10, "height": 5}


async def test_strict_never_returns_an_empty_reply(client: httpx.AsyncClient) -> None:
    """Requests no offered tool fits: a text answer or a call, never nothing."""
    for text in ("Tell me a joke about cats.", "What is the capital of France?", "How are you today?"):
        r = await ask(client, text, [AREA], tether={"preset": "strict"})
        message = r["choices"][0]["message"]
        assert message.get("tool_calls") or (message["content"] or "").strip(), (text, r)
