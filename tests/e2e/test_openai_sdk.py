"""The official openai SDK against ``tether serve`` on the bundled model, on llama.cpp and on MLX."""

from __future__ import annotations

import json
from typing import Any

from openai import OpenAI

from tests.support.scripted import WEATHER_TOOL

MODEL = "smollm2-135m-instruct"
TOOLS = [WEATHER_TOOL]


def test_models(server: str) -> None:
    client = OpenAI(base_url=server, api_key="unused")
    assert MODEL in [m.id for m in client.models.list().data]


def test_streaming_equals_non_streaming(server: str) -> None:
    client = OpenAI(base_url=server, api_key="unused")
    messages = [{"role": "user", "content": "Name a fruit."}]
    full = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=30)
    text = full.choices[0].message.content
    assert text
    stream = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        temperature=0,
        max_tokens=30,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts: list[str] = []
    usage = None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        if chunk.usage:
            usage = chunk.usage
    assert "".join(parts) == text
    assert usage is not None and usage.completion_tokens == full.usage.completion_tokens


def test_tool_call_round_trip(server: str) -> None:
    client = OpenAI(base_url=server, api_key="unused")
    messages: list[dict[str, object]] = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(
        model=MODEL, messages=messages, tools=TOOLS, tool_choice="required", temperature=0, max_tokens=80
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert isinstance(args.get("city"), str)
    messages.append({"role": "assistant", "content": "", "tool_calls": [call.model_dump()]})
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"})
    second = client.chat.completions.create(
        model=MODEL, messages=messages, tools=TOOLS, temperature=0, max_tokens=80
    )
    final = second.choices[0]
    assert final.finish_reason in ("stop", "tool_calls")
    if final.finish_reason == "stop":
        assert final.message.content
    else:
        assert final.message.tool_calls and final.message.tool_calls[0].function.name == "get_weather"


def test_streamed_tool_call_has_id_and_name_first(server: str) -> None:
    client = OpenAI(base_url=server, api_key="unused")
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Weather in Rome?"}],
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0,
        max_tokens=80,
        stream=True,
    )
    deltas = [
        d
        for c in stream
        if c.choices and c.choices[0].delta.tool_calls
        for d in c.choices[0].delta.tool_calls
    ]
    assert deltas
    by_index: dict[int, list[Any]] = {}
    for d in deltas:
        by_index.setdefault(d.index, []).append(d)
    for parts in by_index.values():
        first = parts[0]
        assert first.id and first.id.startswith("call_") and first.function.name == "get_weather"
        json.loads("".join(p.function.arguments or "" for p in parts))


def test_guardrails_wrap_around_the_running_proxy(server: str) -> None:
    """``tether.wrap`` on the official client, against the real server (bare preset: the client guards)."""
    import tether

    client = tether.wrap(OpenAI(base_url=server, api_key="unused"))
    response = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the weather in Oslo?"}],
        tools=TOOLS,
        tool_choice="required",
        temperature=0,
        max_tokens=80,
        extra_body={"tether": {"preset": "strict"}},
    )
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert all(c.function.name == "get_weather" for c in choice.message.tool_calls or [])
    json.loads(choice.message.tool_calls[0].function.arguments)
