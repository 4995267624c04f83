"""Faults stay contained: a fault at any seam ends that one response with a proper error (real socket).

Faults are injected in the engine, the layer-0 constraint, a format parser and the guard.
A stream then carries an error event (OpenAI: a ``data:`` error object, then ``[DONE]``;
Anthropic: ``event: error``); a plain request gets the error JSON. Either way the slot is
free afterwards and the next request is answered. A request that waits past the queue
timeout gets 503 with ``Retry-After``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import tether.turns.core
from tests.support.engines import FaultyEngine, SlowEngine, break_layer0
from tests.support.socket_server import serving, wait_for
from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.grammar.formats.hermes import HermesFormat
from tether.grammar.spec import ReplySpec
from tether.proxy.app import create_app
from tether.turns.core import Prepared

MODEL = "scripted"
CALL = json.dumps({"tool_calls": [{"name": "get_time", "arguments": {"tz": "UTC"}}]})
# Hermes: prose streams first, then the marked call, so a fault in parsing or guarding comes mid-stream.
HERMES_CALL = (
    'Let me check the time.\n<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>'
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
        },
    }
]


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "what time is it?"}], **extra}


def sse(base: str, path: str, body: dict[str, Any]) -> list[str]:
    with httpx.Client(timeout=10) as client, client.stream("POST", f"{base}{path}", json=body) as r:
        assert r.status_code == 200
        return [line for line in r.iter_lines() if line]


def hermes_app(**kwargs: Any) -> Any:
    return create_app(
        ServerConfig(tool_format="hermes"), Scheduler([ScriptedEngine([HERMES_CALL])]), **kwargs
    )


def healthy_after(base: str) -> None:
    wait_for(base, lambda s: s["busy_slots"] == 0 and s["queue_depth"] == 0)
    r = httpx.post(f"{base}/v1/chat/completions", json=chat(max_tokens=3), timeout=5)
    assert r.status_code == 200, r.text
    assert httpx.get(f"{base}/health", timeout=5).json()["status"] == "ok"


def openai_stream_error(lines: list[str]) -> dict[str, Any]:
    assert lines[-1] == "data: [DONE]"
    errors = [json.loads(line[6:]) for line in lines if line.startswith("data: {") and '"error"' in line]
    assert len(errors) == 1, lines
    return dict(errors[0]["error"])


@pytest.fixture
def engine_fault() -> Iterator[str]:
    engine = FaultyEngine(["Hello there, this is a reply."], fail_after=3, faults=3)
    with serving(create_app(ServerConfig(), Scheduler([engine]))) as base:
        yield base


def test_engine_fault_mid_stream_gives_an_error_event(engine_fault: str) -> None:
    lines = sse(engine_fault, "/v1/chat/completions", chat(stream=True))
    assert any('"content": "H' in line for line in lines)  # text left before the fault
    err = openai_stream_error(lines)
    assert err["code"] == "engine_error" and err["type"] == "server_error"
    assert "injected engine fault" in err["message"]


def test_engine_fault_plain_and_anthropic(engine_fault: str) -> None:
    r = httpx.post(f"{engine_fault}/v1/chat/completions", json=chat(), timeout=10)
    assert r.status_code == 500 and r.json()["error"]["code"] == "engine_error"
    lines = sse(engine_fault, "/v1/messages", {**chat(stream=True), "max_tokens": 50})
    assert "event: error" in lines
    data = json.loads(lines[lines.index("event: error") + 1][6:])
    assert data["type"] == "error" and data["error"]["type"] == "api_error"
    healthy_after(engine_fault)


def test_constraint_fault_is_contained(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = ScriptedEngine([HERMES_CALL])
    break_layer0(monkeypatch, engine, at=30)  # inside the call, after the prose has streamed
    app = create_app(ServerConfig(tool_format="hermes"), Scheduler([engine]))
    with serving(app) as base:
        lines = sse(base, "/v1/chat/completions", chat(stream=True, tools=TOOLS))
        assert any('"content": "L' in line for line in lines)
        err = openai_stream_error(lines)
        assert err["code"] == "engine_error" and "injected constraint fault" in err["message"]
        healthy_after(base)


def test_fault_before_the_first_event_keeps_its_status(monkeypatch: pytest.MonkeyPatch) -> None:
    """The generic format streams nothing before the call is complete: the fault comes first, and a
    streaming client gets the 500 error JSON instead of an event stream."""
    engine = ScriptedEngine([CALL])
    break_layer0(monkeypatch, engine, at=1)

    def every_reply(prepared: Prepared) -> ReplySpec:  # layer 0 on every reply, tools or not
        return ReplySpec(prepared.fmt, prepared.tools, "names")

    app = create_app(ServerConfig(), Scheduler([engine]), reply_spec=every_reply)
    with serving(app) as base:
        r = httpx.post(f"{base}/v1/chat/completions", json=chat(stream=True, tools=TOOLS), timeout=10)
        assert r.status_code == 500 and r.json()["error"]["code"] == "engine_error"
        a = httpx.post(f"{base}/v1/messages", json={**chat(stream=True), "max_tokens": 9}, timeout=10)
        assert a.status_code == 500 and a.json()["error"]["type"] == "api_error"
        wait_for(base, lambda s: s["busy_slots"] == 0)


def test_parser_fault_is_contained(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: HermesFormat, region: str, tools: Any) -> None:
        raise KeyError("injected parser fault")

    monkeypatch.setattr(HermesFormat, "parse_region", broken)
    with serving(hermes_app()) as base:
        lines = sse(base, "/v1/chat/completions", chat(stream=True, tools=TOOLS))
        assert any('"content": "L' in line for line in lines)
        err = openai_stream_error(lines)
        assert err["code"] == "internal_error" and "injected" not in err["message"]
        r = httpx.post(f"{base}/v1/chat/completions", json=chat(tools=TOOLS), timeout=10)
        assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"
        healthy_after(base)


def test_guard_fault_is_contained(monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("injected guard fault")

    monkeypatch.setattr(tether.turns.core, "run_guard", broken)
    with serving(hermes_app()) as base:
        lines = sse(base, "/v1/chat/completions", chat(stream=True, tools=TOOLS))
        assert any('"content": "L' in line for line in lines)
        assert openai_stream_error(lines)["code"] == "internal_error"
        tools = [{"name": "get_time", "input_schema": TOOLS[0]["function"]["parameters"]}]
        lines = sse(base, "/v1/messages", {**chat(stream=True, tools=tools), "max_tokens": 500})
        assert "event: error" in lines
        healthy_after(base)


def test_queue_timeout_gives_503_with_retry_after() -> None:
    engine = SlowEngine(["x" * 200, "ok"], delay=0.01)
    app = create_app(ServerConfig(), Scheduler([engine], queue_timeout_s=0.3))
    with serving(app) as base, httpx.Client(timeout=10) as first_client:
        with first_client.stream("POST", f"{base}/v1/chat/completions", json=chat(stream=True)) as first:
            wait_for(base, lambda s: s["busy_slots"] == 1)
            r = httpx.post(f"{base}/v1/chat/completions", json=chat(), timeout=10)
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.json()["error"]["code"] == "queue_timeout"
            a = httpx.post(f"{base}/v1/messages", json={**chat(), "max_tokens": 5}, timeout=10)
            assert a.status_code == 503 and a.headers["retry-after"] == "1"
            assert a.json()["error"]["type"] == "overloaded_error"
            first.read()
        snap = wait_for(base, lambda s: s["busy_slots"] == 0)
        assert snap["timed_out"] == 2
