"""The Anthropic Messages route on the wire, against a scripted engine: shapes, event order, tools, stops."""

from __future__ import annotations

import json
from typing import Any

from tether.engine.scripted import ScriptedEngine
from tether.guardrails.presets import PRESETS
from tether.proxy.anthropic_convert import job_from_anthropic
from tether.proxy.anthropic_schema import MessagesRequest
from tether.turns.events import ChatJob

MODEL = "scripted"
WEATHER = {
    "name": "get_weather",
    "description": "Weather forecast",
    "input_schema": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
}
CALL = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]}'
TWO_CALLS = (
    '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},'
    ' {"name": "get_weather", "arguments": {"city": "Rome"}}]}'
)


def msg(content: Any = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 200, "messages": [{"role": "user", "content": content}], **extra}


def anthropic_events(body: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) pairs; asserts every ``event:`` line names the type its data carries."""
    out: list[tuple[str, dict[str, Any]]] = []
    for block in body.strip().split("\n\n"):
        lines = block.splitlines()
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        name, data = lines[0][7:], json.loads(lines[1][6:])
        assert data["type"] == name
        out.append((name, data))
    return out


def streamed_text(events: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(
        d["delta"]["text"] for n, d in events if n == "content_block_delta" and "text" in d["delta"]
    )


async def test_text_reply_shape(scripted) -> None:
    client, _ = scripted(["Hello there!"])
    r = await client.post("/v1/messages", json=msg(), headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 200
    body = r.json()
    assert body["id"].startswith("msg_") and body["type"] == "message" and body["role"] == "assistant"
    assert body["model"] == MODEL
    assert body["content"] == [{"type": "text", "text": "Hello there!"}]
    assert body["stop_reason"] == "end_turn" and body["stop_sequence"] is None
    usage = body["usage"]
    assert usage["output_tokens"] == len(b"Hello there!")
    assert usage["input_tokens"] > 0 and usage["cache_read_input_tokens"] == 0


async def test_stream_event_order_and_text(scripted) -> None:
    client, _ = scripted(["Stream me ✓ please"])
    full = (await client.post("/v1/messages", json=msg())).json()
    r = await client.post("/v1/messages?beta=true", json=msg(stream=True))
    assert r.headers["content-type"].startswith("text/event-stream")
    events = anthropic_events(r.text)
    names = [n for n, _ in events]
    deltas = names.count("content_block_delta")
    assert deltas > 3
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["id"].startswith("msg_")
    assert events[1][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    assert streamed_text(events) == full["content"][0]["text"]
    final = events[-2][1]
    assert final["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert final["usage"]["output_tokens"] == full["usage"]["output_tokens"]


async def test_tool_use_non_streaming(scripted) -> None:
    client, engines = scripted([CALL])
    body = (await client.post("/v1/messages", json=msg("weather?", tools=[WEATHER]))).json()
    assert body["stop_reason"] == "tool_use"
    (block,) = body["content"]
    assert block["type"] == "tool_use" and block["id"].startswith("toolu_")
    assert block["name"] == "get_weather" and block["input"] == {"city": "Paris", "days": 2}
    assert "get_weather" in engines[0].prompts[-1] and "$schema" not in engines[0].prompts[-1]


async def test_tool_use_streaming_sends_real_json_fragments(scripted) -> None:
    client, _ = scripted([CALL])
    events = anthropic_events(
        (await client.post("/v1/messages", json=msg(tools=[WEATHER], stream=True))).text
    )
    names = [n for n, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    block = events[1][1]["content_block"]
    assert block["type"] == "tool_use" and block["id"].startswith("toolu_") and block["name"] == "get_weather"
    assert block["input"] == {}
    fragments = [d["delta"]["partial_json"] for n, d in events if n == "content_block_delta"]
    assert all(d["delta"]["type"] == "input_json_delta" for n, d in events if n == "content_block_delta")
    assert fragments and fragments[0] != "{}"
    assert json.loads("".join(fragments)) == {"city": "Paris", "days": 2}
    assert not any("text" in d.get("delta", {}) for _, d in events)
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


async def test_long_arguments_come_in_a_few_fragments(scripted) -> None:
    text = "x" * 1500
    client, _ = scripted([json.dumps({"tool_calls": [{"name": "get_weather", "arguments": {"city": text}}]})])
    body = {**msg(tools=[WEATHER], stream=True), "max_tokens": 4000}
    events = anthropic_events((await client.post("/v1/messages", json=body)).text)
    fragments = [d["delta"]["partial_json"] for n, d in events if n == "content_block_delta"]
    assert 2 <= len(fragments) <= 8
    assert json.loads("".join(fragments)) == {"city": text}


async def test_text_then_tool_use_are_two_blocks(scripted) -> None:
    reply = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    client, _ = scripted([reply], tool_format="hermes")
    body = (await client.post("/v1/messages", json=msg(tools=[WEATHER]))).json()
    assert [b["type"] for b in body["content"]] == ["text", "tool_use"]
    assert body["content"][0]["text"].strip() == "Let me check."
    events = anthropic_events(
        (await client.post("/v1/messages", json=msg(tools=[WEATHER], stream=True))).text
    )
    starts = [d for n, d in events if n == "content_block_start"]
    stops = [d["index"] for n, d in events if n == "content_block_stop"]
    assert [(s["index"], s["content_block"]["type"]) for s in starts] == [(0, "text"), (1, "tool_use")]
    assert stops == [0, 1]
    assert streamed_text(events).strip() == "Let me check."


async def test_parallel_calls_and_disable_parallel_tool_use(scripted) -> None:
    client, _ = scripted([TWO_CALLS])
    body = (await client.post("/v1/messages", json=msg(tools=[WEATHER]))).json()
    assert [b["input"]["city"] for b in body["content"]] == ["Paris", "Rome"]
    assert len({b["id"] for b in body["content"]}) == 2
    choice = {"type": "auto", "disable_parallel_tool_use": True}
    body = (await client.post("/v1/messages", json=msg(tools=[WEATHER], tool_choice=choice))).json()
    assert [b["input"]["city"] for b in body["content"]] == ["Paris"]


async def test_tool_results_reach_the_prompt(scripted) -> None:
    client, engines = scripted(['{"response": "It is sunny."}'])
    messages = [
        {"role": "user", "content": "weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "x"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21C"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "station offline"}],
                    "is_error": True,
                },
                {"type": "text", "text": "And tomorrow?", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]
    body = {"model": MODEL, "max_tokens": 50, "messages": messages, "tools": [WEATHER]}
    r = await client.post("/v1/messages", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["content"] == [{"type": "text", "text": "It is sunny."}]
    prompt = engines[0].prompts[-1]
    assert "Result of get_weather:\nsunny, 21C" in prompt
    assert "Result of get_weather:\nError: station offline" in prompt
    assert prompt.index("station offline") < prompt.index("And tomorrow?")
    assert '"city": "Rome"' in prompt and "hmm" not in prompt


async def test_system_as_string_and_blocks(scripted) -> None:
    client, engines = scripted(["ok"])
    await client.post("/v1/messages", json=msg(system="You are terse."))
    assert "<|im_start|>system\nYou are terse.<|im_end|>" in engines[0].prompts[-1]
    blocks = [
        {"type": "text", "text": "Part one."},
        {"type": "text", "text": "Part two.", "cache_control": {}},
    ]
    await client.post("/v1/messages", json=msg(system=blocks))
    assert "Part one.\n\nPart two." in engines[0].prompts[-1]


async def test_tool_choice_variants(scripted) -> None:
    client, engines = scripted(["plain answer"])
    body = (await client.post("/v1/messages", json=msg(tools=[WEATHER], tool_choice={"type": "none"}))).json()
    assert body["content"] == [{"type": "text", "text": "plain answer"}]
    assert "get_weather" not in engines[0].prompts[-1]
    r = await client.post(
        "/v1/messages", json=msg(tools=[WEATHER], tool_choice={"type": "tool", "name": "nope"})
    )
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = await client.post("/v1/messages", json=msg(tool_choice={"type": "any"}))
    assert r.status_code == 400 and "at least one tool" in r.json()["error"]["message"]


async def test_named_tool_choice_is_enforced_by_the_constraint(scripted) -> None:
    """The script calls ``set_weather``; naming ``get_weather`` offers only it, and layer 0 rewrites the name."""
    setter = {**WEATHER, "name": "set_weather"}
    client, _ = scripted([CALL.replace("get_weather", "set_weather")], constrain="names")
    body = (await client.post("/v1/messages", json=msg(tools=[WEATHER, setter]))).json()
    assert body["content"][0]["name"] == "set_weather"
    choice = {"type": "tool", "name": "get_weather"}
    body = (await client.post("/v1/messages", json=msg(tools=[WEATHER, setter], tool_choice=choice))).json()
    assert body["stop_reason"] == "tool_use"
    assert [(b["name"], b["input"]) for b in body["content"]] == [
        ("get_weather", {"city": "Paris", "days": 2})
    ]


def test_job_mapping_of_choices_sampling_and_extension() -> None:
    def job(**extra: Any) -> ChatJob:
        req = MessagesRequest.model_validate(msg(tools=[WEATHER], **extra))
        return job_from_anthropic(req, default_temperature=0.7, default_guard=PRESETS["full"])

    assert (job().tool_choice, job().parallel_tool_calls) == ("auto", True)
    assert job(tool_choice={"type": "any"}).tool_choice == "required"
    assert job(tool_choice={"type": "none"}).tool_choice == "none"
    named = job(tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})
    assert (named.tool_choice, named.parallel_tool_calls) == ("get_weather", False)
    plain = job()
    assert plain.params.temperature == 0.7 and plain.max_tokens_requested == 200
    assert plain.guard == PRESETS["full"] and plain.tools[0].parameters.get("$schema") is None
    tuned = job(
        temperature=0.1, top_k=5, stop_sequences=["END"], tether={"preset": "bare", "constrain": "strict"}
    )
    assert tuned.params.temperature == 0.1 and tuned.params.top_k == 5 and tuned.stop == ("END",)
    assert tuned.guard.constrain == "strict" and tuned.guard.rescue is False


async def test_stop_sequences(scripted) -> None:
    client, _ = scripted(["one two STOP three"])
    body = (await client.post("/v1/messages", json=msg(stop_sequences=["STOP", "NEVER"]))).json()
    assert body["content"] == [{"type": "text", "text": "one two "}]
    assert body["stop_reason"] == "stop_sequence" and body["stop_sequence"] == "STOP"
    events = anthropic_events(
        (await client.post("/v1/messages", json=msg(stop_sequences=["STOP"], stream=True))).text
    )
    assert streamed_text(events) == "one two "
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "STOP"}


async def test_max_tokens_stop_reason(scripted) -> None:
    client, _ = scripted(["a long reply that will be cut"])
    body = (await client.post("/v1/messages", json={**msg(), "max_tokens": 4})).json()
    assert body["content"] == [{"type": "text", "text": "a lo"}]
    assert body["stop_reason"] == "max_tokens"


async def test_usage_reports_reused_prefix_as_cache_reads(scripted) -> None:
    client, _ = scripted(["same"])
    counted = (
        await client.post("/v1/messages/count_tokens", json={"model": MODEL, "messages": msg()["messages"]})
    ).json()["input_tokens"]
    first = (await client.post("/v1/messages", json=msg())).json()["usage"]
    second = (await client.post("/v1/messages", json=msg())).json()["usage"]
    assert first["input_tokens"] == counted and first["cache_read_input_tokens"] == 0
    assert second["cache_read_input_tokens"] > 0
    assert second["input_tokens"] + second["cache_read_input_tokens"] == counted
    assert second["cache_creation_input_tokens"] == 0


async def test_count_tokens_counts_tools_and_past_the_window(scripted) -> None:
    client, _ = scripted(engines=[ScriptedEngine(["x"], n_ctx=300)])
    base = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    plain = (await client.post("/v1/messages/count_tokens", json=base)).json()["input_tokens"]
    with_tools = (await client.post("/v1/messages/count_tokens", json={**base, "tools": [WEATHER]})).json()
    assert with_tools["input_tokens"] > plain
    huge = {"model": MODEL, "messages": [{"role": "user", "content": "y" * 1000}]}
    r = await client.post("/v1/messages/count_tokens", json=huge)
    assert r.status_code == 200 and r.json()["input_tokens"] > 1000


async def test_unsupported_blocks_and_server_tools_are_refused(scripted) -> None:
    client, _ = scripted()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
    r = await client.post("/v1/messages", json=msg([image]))
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error" and "image" in r.json()["error"]["message"]
    server_tool = {"type": "web_search_20250305", "name": "web_search"}
    r = await client.post("/v1/messages", json=msg(tools=[server_tool]))
    assert r.status_code == 400 and "server tool" in r.json()["error"]["message"]
    tool_use_in_user_turn = [{"type": "tool_use", "id": "t", "name": "get_weather", "input": {}}]
    assert (await client.post("/v1/messages", json=msg(tool_use_in_user_turn))).status_code == 400
