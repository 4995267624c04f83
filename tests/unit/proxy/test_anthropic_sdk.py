"""The official ``anthropic`` SDK against the scripted app: text, streams, tool round trips, errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import anthropic
import httpx2
import pytest

from tests.support.scripted import weather_round_trip
from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import Reply, ScriptedEngine
from tether.proxy.app import create_app

MODEL = "scripted"
WEATHER: Any = {
    "name": "get_weather",
    "description": "Weather forecast",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
SdkFactory = Callable[..., tuple[anthropic.AsyncAnthropic, ScriptedEngine]]


@pytest.fixture
async def sdk() -> AsyncIterator[SdkFactory]:
    opened: list[anthropic.AsyncAnthropic] = []

    def factory(
        replies: Sequence[Reply] = ("Hello!",), *, engine: ScriptedEngine | None = None, **config: Any
    ) -> tuple[anthropic.AsyncAnthropic, ScriptedEngine]:
        engine = engine or ScriptedEngine(replies)
        cfg = ServerConfig(**{"preset": "full", **config})
        app = create_app(cfg, Scheduler([engine], queue_limit=cfg.queue_limit))
        http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://tether.test")
        client = anthropic.AsyncAnthropic(
            base_url="http://tether.test", api_key=cfg.api_key or "unused", http_client=http, max_retries=0
        )
        opened.append(client)
        return client, engine

    yield factory
    for client in opened:
        await client.close()


async def test_text_message(sdk: SdkFactory) -> None:
    client, _ = sdk(["Hello from tether."])
    message = await client.messages.create(
        model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}], system="Be brief."
    )
    assert message.content[0].type == "text" and message.content[0].text == "Hello from tether."
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == len("Hello from tether.")


async def test_streamed_text_and_final_message(sdk: SdkFactory) -> None:
    client, _ = sdk(["Streaming works fine."])
    async with client.messages.stream(
        model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        pieces = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert len(pieces) > 3 and "".join(pieces) == "Streaming works fine."
    assert final.content[0].type == "text" and final.content[0].text == "Streaming works fine."
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == len("Streaming works fine.")


@pytest.mark.parametrize("streaming", [False, True])
async def test_tool_round_trip(sdk: SdkFactory, streaming: bool) -> None:
    client, engine = sdk([weather_round_trip])
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]

    async def ask() -> anthropic.types.Message:
        kwargs: Any = {"model": MODEL, "max_tokens": 200, "messages": messages, "tools": [WEATHER]}
        if not streaming:
            return await client.messages.create(**kwargs)
        async with client.messages.stream(**kwargs) as stream:
            return await stream.get_final_message()

    first = await ask()
    assert first.stop_reason == "tool_use"
    (call,) = [b for b in first.content if b.type == "tool_use"]
    assert call.name == "get_weather" and call.input == {"city": "Paris"} and call.id.startswith("toolu_")
    messages.append(
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]}
    )
    messages.append(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "21C, clear sky"}],
        }
    )
    second = await ask()
    assert second.stop_reason == "end_turn"
    assert second.content[0].type == "text" and second.content[0].text == "Sunny in Paris."
    assert "Result of get_weather:\n21C, clear sky" in engine.prompts[-1]


async def test_stop_sequence_and_count_tokens(sdk: SdkFactory) -> None:
    client, _ = sdk(["alpha beta END gamma"])
    message = await client.messages.create(
        model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}], stop_sequences=["END"]
    )
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "END"
    counted = await client.messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], tools=[WEATHER]
    )
    assert counted.input_tokens > 0


async def test_errors_map_to_sdk_exceptions(sdk: SdkFactory) -> None:
    client, _ = sdk(api_key="s3cret")
    with pytest.raises(anthropic.AuthenticationError):
        await client.with_options(api_key="wrong").messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    with pytest.raises(anthropic.NotFoundError) as not_found:
        await client.messages.create(
            model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert not_found.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    small, _ = sdk(engine=ScriptedEngine(["x"], n_ctx=200))
    with pytest.raises(anthropic.BadRequestError) as overflow:
        await small.messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "y" * 400}]
        )
    assert "prompt is too long" in str(overflow.value)
