"""Any history a client sends back — broken calls, stray results, lost and reused ids — is answered,
never a server error: on the OpenAI and the Anthropic routes, under ``bare`` and ``strict``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.proxy.app import create_app

READ = {"name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
NAMES = st.sampled_from(["read_file", "Read", "read file", "frobnicate", "", "mcp__fs__read_file"])
IDS = st.sampled_from(["c1", "c2", "c3", "zz"])
ARGUMENTS = st.one_of(
    st.sampled_from(['{"path": "a.txt"}', '{"path": ', "[1, 2]", "{'path': 'a'}", "", "null", "42", "{}"]),
    st.text(max_size=20),
)
TEXT = st.text(max_size=30)


def _call(name: str, id: str | None, arguments: str) -> dict[str, Any]:
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return call if id is None else {**call, "id": id}


OPENAI_MESSAGE = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, TEXT),
    st.builds(lambda t: {"role": "assistant", "content": t}, TEXT),
    st.builds(
        lambda calls: {"role": "assistant", "content": None, "tool_calls": calls},
        st.lists(st.builds(_call, NAMES, st.none() | IDS, ARGUMENTS), min_size=1, max_size=3),
    ),
    st.builds(
        lambda id, t: {"role": "tool", "content": t, **({} if id is None else {"tool_call_id": id})},
        st.none() | IDS,
        TEXT,
    ),
)

ANTHROPIC_ASSISTANT = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "text", "text": t or "."}, TEXT),
        st.builds(
            lambda id, name, path: {
                "type": "tool_use",
                "id": id,
                "name": name or "x",
                "input": {"path": path},
            },
            IDS,
            NAMES,
            TEXT,
        ),
    ),
    min_size=1,
    max_size=3,
)
ANTHROPIC_USER = st.one_of(
    TEXT.map(lambda t: t or "."),
    st.lists(
        st.builds(
            lambda id, t, err: {"type": "tool_result", "tool_use_id": id, "content": t, "is_error": err},
            IDS,
            TEXT,
            st.booleans(),
        ),
        min_size=1,
        max_size=3,
    ),
)


def _anthropic(turns: list[tuple[Any, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "Show a.txt"}]
    for assistant, user in turns:
        out += [{"role": "assistant", "content": assistant}, {"role": "user", "content": user}]
    return out


def _post(route: str, body: dict[str, Any]) -> httpx.Response:
    async def go() -> httpx.Response:
        engine = ScriptedEngine(
            [json.dumps({"tool_calls": [{"name": "read_file", "arguments": {"path": "a"}}]})]
        )
        app = create_app(ServerConfig(), Scheduler([engine]))
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post(route, json=body)

    return asyncio.run(go())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPENAI_MESSAGE, max_size=6), st.sampled_from(["bare", "strict"]))
def test_any_openai_history_is_answered(history: list[dict[str, Any]], preset: str) -> None:
    messages = [{"role": "user", "content": "Show a.txt"}, *history]
    body = {
        "model": "scripted",
        "messages": messages,
        "tools": [{"type": "function", "function": READ}],
        "tether": {"preset": preset},
    }
    r = _post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["role"] == "assistant"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(ANTHROPIC_ASSISTANT, ANTHROPIC_USER), max_size=3), st.sampled_from(["bare", "strict"])
)
def test_any_anthropic_history_is_answered(turns: list[tuple[Any, Any]], preset: str) -> None:
    body = {
        "model": "scripted",
        "max_tokens": 64,
        "messages": _anthropic(turns),
        "tools": [{"name": READ["name"], "input_schema": READ["parameters"]}],
        "tether": {"preset": preset},
    }
    r = _post("/v1/messages", body)
    assert r.status_code == 200, r.text
    assert r.json()["type"] == "message"
