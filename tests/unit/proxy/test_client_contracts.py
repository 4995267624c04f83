"""What real clients need from the OpenAI route, as deterministic tests over a scripted engine.

Each contract was read from the client's own code and checked against its traffic
(tests/clients/ drives the real programs): opencode 1.18 (``@ai-sdk/openai-compatible``),
Continue CLI 1.5 (``cn``), aider 0.86, and the official ``openai`` SDK.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai
import pytest

from tests.conftest import sse_events
from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.proxy.app import create_app

MODEL = "scripted"
WRITE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {"content": {"type": "string"}, "filePath": {"type": "string"}},
    "required": ["content", "filePath"],
}
OPENCODE_TOOLS = [
    {"type": "function", "function": {"name": n, "description": f"{n} tool", "parameters": WRITE_SCHEMA}}
    for n in ("bash", "edit", "read", "write")
]
WRITE_ARGS = {"content": 'print("hi")\n', "filePath": "/tmp/p/hello.py"}
WRITE_CALL = json.dumps({"tool_calls": [{"name": "write", "arguments": WRITE_ARGS}]})
TWO_WRITES = json.dumps(
    {
        "tool_calls": [
            {"name": "write", "arguments": WRITE_ARGS},
            {"name": "write", "arguments": {**WRITE_ARGS, "filePath": "/tmp/p/b.py"}},
        ]
    }
)

# opencode 1.18.33's context-overflow patterns (any match makes it compact the session and retry).
OPENCODE_OVERFLOW = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"prompt is too long",
        r"request_too_large",
        r"input is too long for requested model",
        r"exceeds the context window",
        r"exceeds (?:the )?(?:model'?s )?maximum context length(?: of [\d,]+ tokens?|\s*\([\d,]+\))",
        r"input token count.*exceeds the maximum",
        r"tokens in request more than max tokens allowed",
        r"maximum prompt length is \d+",
        r"reduce the length of the messages",
        r"maximum context length is \d+ tokens",
        r"exceeds the limit of \d+",
        r"exceeds the available context size",
        r"greater than the context length",
        r"exceeded model token limit",
        r"context[_ ]length[_ ]exceeded",
        r"request entity too large",
        r"context length is only \d+ tokens",
        r"input length.*exceeds.*context length",
        r"too many tokens",
        r"token limit exceeded",
    )
]


def opencode_request(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """The shape opencode sends: always streaming, usage asked for, tools with ``$schema``, ``auto``."""
    return {
        "model": MODEL,
        "messages": messages,
        "tools": OPENCODE_TOOLS,
        "tool_choice": "auto",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 4096,
        **extra,
    }


def tool_deltas(events: list[Any]) -> list[dict[str, Any]]:
    return [d for c in events[:-1] if c["choices"] for d in c["choices"][0]["delta"].get("tool_calls") or ()]


def ai_sdk_tool_calls(events: list[Any]) -> dict[int, dict[str, Any]]:
    """``@ai-sdk/openai-compatible``'s accumulation: the first delta of an index must carry ``id`` and
    ``function.name`` (else it throws); once the arguments parse as JSON the call is final and any
    later delta for that index is ignored."""
    calls: dict[int, dict[str, Any]] = {}
    for d in tool_deltas(events):
        fn = d.get("function") or {}
        call = calls.get(d["index"])
        if call is None:
            assert d.get("type") in (None, "function")
            assert isinstance(d.get("id"), str) and d["id"], f"Expected 'id' to be a string: {d}"
            assert isinstance(fn.get("name"), str) and fn["name"], f"Expected 'function.name': {d}"
            call = calls[d["index"]] = {"id": d["id"], "name": fn["name"], "arguments": "", "final": False}
        elif call["final"]:
            continue
        call["arguments"] += fn.get("arguments") or ""
        try:
            json.loads(call["arguments"])
            call["final"] = True
        except ValueError:
            pass
    return calls


def cn_tool_calls(events: list[Any]) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Continue CLI's ``processToolCallDelta``: calls keyed by id; a delta without ``id`` joins the call
    its ``index`` was first seen with, and is dropped (logged only) when there is none."""
    index_to_id: dict[int, str] = {}
    calls: dict[str, dict[str, Any]] = {}
    dropped: list[dict[str, Any]] = []
    for d in tool_deltas(events):
        call_id = d.get("id") or index_to_id.get(d.get("index", -1))
        if d.get("id") and "index" in d:
            index_to_id[d["index"]] = d["id"]
        if not call_id:
            dropped.append(d)
            continue
        call = calls.setdefault(call_id, {"name": "", "arguments": ""})
        fn = d.get("function") or {}
        call["name"] = fn.get("name") or call["name"]
        call["arguments"] += fn.get("arguments") or ""
    return calls, dropped


async def test_opencode_tool_call_is_final_at_its_first_parse(scripted) -> None:
    client, engines = scripted([TWO_WRITES])
    r = await client.post(
        "/v1/chat/completions", json=opencode_request([{"role": "user", "content": "write"}])
    )
    events = sse_events(r.text)
    calls = ai_sdk_tool_calls(events)
    assert sorted(calls) == [0, 1]
    assert all(c["final"] and c["name"] == "write" for c in calls.values())
    assert json.loads(calls[0]["arguments"]) == WRITE_ARGS
    assert json.loads(calls[1]["arguments"])["filePath"] == "/tmp/p/b.py"
    assert calls[0]["id"] != calls[1]["id"]
    # No placeholder ever: every arguments fragment we send is already the complete object.
    assert all(json.loads(d["function"]["arguments"]) for d in tool_deltas(events))
    assert "$schema" not in engines[0].prompts[-1]


async def test_opencode_usage_chunk_follows_the_finish_chunk(scripted) -> None:
    client, _ = scripted([WRITE_CALL])
    events = sse_events(
        (
            await client.post(
                "/v1/chat/completions", json=opencode_request([{"role": "user", "content": "w"}])
            )
        ).text
    )
    assert events[-1] == "[DONE]"
    usage_chunk, finish_chunk = events[-2], events[-3]
    assert finish_chunk["choices"][0]["finish_reason"] == "tool_calls"
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["prompt_tokens"] > 0 and usage_chunk["usage"]["completion_tokens"] > 0


async def test_opencode_follow_up_turn_with_empty_content(scripted) -> None:
    client, engines = scripted(['{"response": "Wrote hello.py."}'])
    call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "write", "arguments": json.dumps(WRITE_ARGS)},
    }
    messages = [
        {"role": "system", "content": "You are opencode."},
        {"role": "user", "content": "write hello.py"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_abc", "content": "Wrote file successfully."},
    ]
    events = sse_events((await client.post("/v1/chat/completions", json=opencode_request(messages))).text)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in events[:-1] if c["choices"])
    assert text == "Wrote hello.py."
    prompt = engines[0].prompts[-1]
    assert '"name": "write"' in prompt and "Result of write:\nWrote file successfully." in prompt
    assert '{"response": ""}' not in prompt  # the empty content did not become an empty answer


async def test_overflow_wording_only_for_real_overflow(scripted) -> None:
    def overflow_like(message: str) -> bool:
        return any(p.search(message) for p in OPENCODE_OVERFLOW)

    small, _ = scripted(engines=[ScriptedEngine(["x"], n_ctx=300)])
    too_long = [{"role": "user", "content": "y" * 400}]
    r = await small.post("/v1/chat/completions", json=opencode_request(too_long, tools=None))
    assert r.status_code == 400 and overflow_like(r.json()["error"]["message"])
    # When opencode's own system prompt and tools cannot fit, compaction cannot help: the refusal must
    # not match its overflow patterns, or it compacts and retries forever.
    r = await small.post("/v1/chat/completions", json=opencode_request([{"role": "user", "content": "hi"}]))
    assert r.status_code == 400 and not overflow_like(r.json()["error"]["message"])
    assert r.json()["error"]["code"] == "system_prompt_too_large"
    # A huge max_tokens (opencode sends the model's output limit) is clamped, never an overflow.
    fits = opencode_request([{"role": "user", "content": "hi"}], tools=None, max_tokens=10**6)
    assert (await small.post("/v1/chat/completions", json=fits)).status_code == 200

    messages: list[str] = []
    client, _ = scripted(max_body_bytes=2000)
    for body in (
        {"model": "nope", "messages": [{"role": "user", "content": "x"}]},
        {"model": MODEL, "messages": []},
        {"model": MODEL, "messages": [{"role": "user", "content": "x" * 5000}]},
    ):
        r = await client.post("/v1/chat/completions", json=body)
        assert r.status_code in (400, 404, 413)
        messages.append(r.json()["error"]["message"])
    busy = ScriptedEngine(["slow"], pause_after=1)
    queue, _ = scripted(engines=[busy], queue_limit=0)
    first = asyncio.create_task(
        queue.post(
            "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
        )
    )
    await asyncio.to_thread(busy.paused.wait, 5)
    r = await queue.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
    )
    assert r.status_code == 429
    messages.append(r.json()["error"]["message"])
    busy.resume.set()
    await first
    assert not [m for m in messages if overflow_like(m)]


async def test_continue_cli_first_delta_of_each_index_carries_the_id(scripted) -> None:
    client, engines = scripted([TWO_WRITES])
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "write"}],
        "tools": OPENCODE_TOOLS,  # cn sends tools without any tool_choice
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events = sse_events((await client.post("/v1/chat/completions", json=body)).text)
    calls, dropped = cn_tool_calls(events)
    assert dropped == []
    assert [c["name"] for c in calls.values()] == ["write", "write"]
    assert [json.loads(c["arguments"])["filePath"] for c in calls.values()] == [
        "/tmp/p/hello.py",
        "/tmp/p/b.py",
    ]
    first_per_index: dict[int, dict[str, Any]] = {}
    for d in tool_deltas(events):
        first_per_index.setdefault(d["index"], d)
    assert all(d.get("id") for d in first_per_index.values())
    assert "write" in engines[0].prompts[-1]  # no tool_choice means auto: the tools are offered


AIDER_EDIT = (
    'I will change the greeting.\n\nhello.py\n```python\n<<<<<<< SEARCH\nprint("old")\n=======\n'
    'print("new")\n>>>>>>> REPLACE\n```\n'
)


async def test_aider_edit_blocks_stream_verbatim(scripted) -> None:
    client, _ = scripted([AIDER_EDIT])
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "edit"}],
        "stream": True,
        "temperature": 0,
    }
    events = sse_events((await client.post("/v1/chat/completions", json=body)).text)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in events[:-1] if c["choices"])
    assert text == AIDER_EDIT
    assert events[-2]["choices"][0]["finish_reason"] == "stop"


async def test_aider_length_only_when_the_cap_is_really_reached(scripted) -> None:
    """aider raises on ``finish_reason: "length"`` and sends no max_tokens unless its model settings add
    one (``extra_params.max_tokens``, as docs/clients.md says). A reply within the cap ends in ``stop``."""
    long_edit = AIDER_EDIT.replace('print("new")', "\n".join(f"print({i})" for i in range(300)))
    assert ServerConfig().default_max_tokens is None  # no cap by default: up to the context window
    client, _ = scripted([long_edit, long_edit])
    base = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "edit"}],
        "stream": True,
        "temperature": 0,
    }
    for extra in ({"max_tokens": 8192}, {}):
        events = sse_events((await client.post("/v1/chat/completions", json={**base, **extra})).text)
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in events[:-1] if c["choices"])
        assert text == long_edit and events[-2]["choices"][0]["finish_reason"] == "stop"
    short, _ = scripted([AIDER_EDIT], default_max_tokens=len(AIDER_EDIT.encode()) + 1)
    events = sse_events((await short.post("/v1/chat/completions", json=base)).text)
    assert events[-2]["choices"][0]["finish_reason"] == "stop"
    capped, _ = scripted([AIDER_EDIT], default_max_tokens=20)
    events = sse_events((await capped.post("/v1/chat/completions", json=base)).text)
    assert events[-2]["choices"][0]["finish_reason"] == "length"


# --- the official openai SDK ---------------------------------------------------------------


@pytest.fixture
async def oai() -> AsyncIterator[Any]:
    opened: list[openai.AsyncOpenAI] = []

    def factory(replies: list[Any]) -> tuple[openai.AsyncOpenAI, ScriptedEngine]:
        engine = ScriptedEngine(replies)
        app = create_app(ServerConfig(preset="full"), Scheduler([engine]))
        http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://tether.test")
        client = openai.AsyncOpenAI(
            base_url="http://tether.test/v1", api_key="unused", http_client=http, max_retries=0
        )
        opened.append(client)
        return client, engine

    yield factory
    for client in opened:
        await client.close()


def sdk_round_trip_reply(prompt: str) -> str:
    if prompt.rsplit("<|im_start|>user\n", 1)[-1].startswith("Result of write:"):
        return '{"response": "Done: hello.py written."}'
    return WRITE_CALL


@pytest.mark.parametrize("streaming", [False, True])
async def test_openai_sdk_tool_round_trip(oai: Any, streaming: bool) -> None:
    client, engine = oai([sdk_round_trip_reply])
    messages: list[Any] = [{"role": "user", "content": "write hello.py"}]

    async def ask() -> tuple[str, list[Any], str]:
        kwargs: Any = {"model": MODEL, "messages": messages, "tools": OPENCODE_TOOLS}
        if not streaming:
            done = await client.chat.completions.create(**kwargs)
            msg = done.choices[0].message
            calls = [(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls or ()]
            return msg.content or "", calls, done.choices[0].finish_reason
        stream = await client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        )
        text, parts, finish, usage = "", {}, "", None
        async for chunk in stream:
            usage = chunk.usage or usage
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            text += delta.content or ""
            for d in delta.tool_calls or ():
                entry = parts.setdefault(d.index, [d.id, d.function.name, ""])
                entry[2] += d.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
        assert usage is not None and usage.completion_tokens > 0
        return text, [tuple(v) for v in parts.values()], finish

    text, calls, finish = await ask()
    assert finish == "tool_calls" and text == ""
    ((call_id, name, arguments),) = calls
    assert name == "write" and json.loads(arguments) == WRITE_ARGS and call_id.startswith("call_")
    tool_call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    messages.append({"role": "assistant", "content": "", "tool_calls": [tool_call]})
    messages.append({"role": "tool", "tool_call_id": call_id, "content": "Wrote file successfully."})
    text, calls, finish = await ask()
    assert (text, calls, finish) == ("Done: hello.py written.", [], "stop")
    assert "Result of write:\nWrote file successfully." in engine.prompts[-1]


async def test_openai_sdk_errors(oai: Any) -> None:
    client, _ = oai(["x"])
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as bad:
        await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], temperature=9
        )
    assert bad.value.param == "temperature"
