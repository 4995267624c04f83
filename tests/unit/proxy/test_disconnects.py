"""A client that hangs up frees its slot at once, at every point of a request (real socket, scripted engine).

Each test serves the app with uvicorn on a loopback port, hangs up the way clients do
(closing a stream after a few events, a read timeout on a plain request), then checks
``/health``: the slot is free, the request counted as cancelled, at most one token was
decoded after the cancel, and the next request is answered.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.engines import SlowEngine
from tests.support.socket_server import serving, wait_for
from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.proxy.app import create_app
from tether.sandbox import PermissionPolicy, ToolBox
from tether.turns.stages import ServerToolsStage
from tether.workflows.tools import python_tool

MODEL = "scripted"
LONG = " ".join(f"word{i}" for i in range(300)) + " "  # varied: a loop would be cut
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_note",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        },
    }
]


def chat(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}


def anthropic(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 1000, "messages": [{"role": "user", "content": text}], **extra}


def app_with(engine: SlowEngine, **config: Any) -> Any:
    cfg = ServerConfig(**{"preset": "full", **config})
    return create_app(cfg, Scheduler([engine], queue_limit=cfg.queue_limit))


def hang_up_stream(url: str, body: dict[str, Any], *, events: int = 3) -> list[str]:
    """Read ``events`` SSE data lines, then close the connection."""
    seen: list[str] = []
    with httpx.Client(timeout=10) as client, client.stream("POST", url, json=body) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: ") or line.startswith("event: "):
                seen.append(line)
            if len(seen) >= events:
                break
    return seen


def hang_up_plain(url: str, body: dict[str, Any], *, after: float = 0.3) -> None:
    with pytest.raises(httpx.ReadTimeout), httpx.Client(timeout=httpx.Timeout(10, read=after)) as client:
        client.post(url, json=body)


def assert_freed(base: str, engine: SlowEngine, cancelled: int = 1) -> dict[str, Any]:
    snap = wait_for(base, lambda s: s["busy_slots"] == 0 and s["cancelled"] >= cancelled, timeout=2)
    assert snap["queue_depth"] == 0
    assert engine.after_cancel <= 1
    return snap


def answered(base: str) -> str:
    started = time.monotonic()
    r = httpx.post(f"{base}/v1/chat/completions", json=chat(max_tokens=4), timeout=5)
    assert r.status_code == 200, r.text
    assert time.monotonic() - started < 1.0
    return str(r.json()["choices"][0]["message"]["content"])


def test_stream_closed_mid_prose_frees_the_slot() -> None:
    engine = SlowEngine([LONG])
    with serving(app_with(engine)) as base:
        seen = hang_up_stream(f"{base}/v1/chat/completions", chat(stream=True), events=5)
        assert any('"content": "w' in s or "word" in s for s in seen)
        snap = assert_freed(base, engine)
        assert snap["completed"] == 1 and engine.cancels == 1
        assert answered(base)


def test_plain_request_abandoned_mid_generation_frees_the_slot() -> None:
    engine = SlowEngine([LONG])
    with serving(app_with(engine)) as base:
        hang_up_plain(f"{base}/v1/chat/completions", chat())
        assert_freed(base, engine)
        assert answered(base)


def test_stream_closed_before_the_first_token() -> None:
    engine = SlowEngine([LONG], delay=0.05)
    with serving(app_with(engine)) as base:
        hang_up_stream(f"{base}/v1/chat/completions", chat(stream=True), events=1)  # the role chunk only
        assert_freed(base, engine)
        assert answered(base)


def test_waiting_request_that_hangs_up_leaves_the_queue_at_once() -> None:
    engine = SlowEngine([LONG, "short"], delay=0.005)  # ~10 s: runs on past the hang-up checks
    with serving(app_with(engine)) as base, httpx.Client(timeout=30) as first_client:
        with first_client.stream("POST", f"{base}/v1/chat/completions", json=chat(stream=True)) as first:
            wait_for(base, lambda s: s["busy_slots"] == 1)
            hang_up_plain(f"{base}/v1/chat/completions", chat(), after=0.3)
            snap = wait_for(base, lambda s: s["queue_depth"] == 0 and s["cancelled"] == 1, timeout=1)
            assert snap["busy_slots"] == 1  # the first request runs on, undisturbed
            text = "".join(
                json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                for line in first.iter_lines()
                if line.startswith("data: {") and '"choices": [{' in line
            )
        assert text == LONG.rstrip() or text == LONG
        wait_for(base, lambda s: s["busy_slots"] == 0)


def test_stream_closed_mid_tool_call_frees_the_slot() -> None:
    call = json.dumps({"tool_calls": [{"name": "write_note", "arguments": {"text": "a" * 600}}]})
    engine = SlowEngine([call])
    with serving(app_with(engine)) as base:
        hang_up_plain(f"{base}/v1/chat/completions", chat(stream=True, tools=TOOLS), after=0.5)
        assert_freed(base, engine)


def test_anthropic_stream_and_plain_requests_free_the_slot() -> None:
    engine = SlowEngine([LONG])
    with serving(app_with(engine)) as base:
        seen = hang_up_stream(f"{base}/v1/messages", anthropic(stream=True), events=8)
        assert any("content_block_delta" in s for s in seen)
        assert_freed(base, engine, cancelled=1)
        hang_up_plain(f"{base}/v1/messages", anthropic())
        assert_freed(base, engine, cancelled=2)
        assert answered(base)


def test_session_request_that_hangs_up_frees_the_slot(tmp_path: Path) -> None:
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(
        "name: notes\ntools:\n  - name: write_note\n    parameters: {type: object, properties: {text: {type: string}}}\n"
        "  - name: finish\n    parameters: {type: object, properties: {}}\n"
        "steps: [write_note]\nterminal: finish\n",
        encoding="utf-8",
    )
    engine = SlowEngine([LONG])
    with serving(app_with(engine, workflows=(str(workflow),))) as base:
        headers = {"X-Tether-Session": "s1", "X-Tether-Workflow": "notes"}
        with (
            httpx.Client(timeout=10) as client,
            client.stream(
                "POST", f"{base}/v1/chat/completions", json=chat(stream=True, tools=TOOLS), headers=headers
            ) as r,
        ):
            for n, _ in enumerate(r.iter_lines()):
                if n > 6:
                    break
        assert_freed(base, engine)
        assert answered(base)


def test_repick_generation_abandoned_frees_the_slot() -> None:
    """The main reply names a tool nobody offered; the client hangs up during the guard's re-pick."""
    bad = json.dumps({"tool_calls": [{"name": "zzz_unknown_tool", "arguments": {"text": "x"}}]})
    engine = SlowEngine([bad, "write_note" + " " * 200], delay=0.02)
    with serving(app_with(engine, constrain="off")) as base:
        hang_up_plain(f"{base}/v1/chat/completions", chat(tools=TOOLS), after=1.6)
        assert len(engine.prompts) == 2  # the hang-up came during the second (re-pick) generation
        assert_freed(base, engine)


def test_server_tool_run_abandoned_is_cancelled() -> None:
    started: list[float] = []
    finished: list[float] = []
    cancelled: list[float] = []

    async def slow(seconds: float) -> str:
        import asyncio

        started.append(time.monotonic())
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            cancelled.append(time.monotonic())
            raise
        finished.append(time.monotonic())
        return "done"

    tool = python_tool(
        "wait_a_while",
        slow,
        parameters={"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]},
    )
    tools = ServerToolsStage(ToolBox([tool], policy=PermissionPolicy.from_settings("plan")))
    call = json.dumps({"tool_calls": [{"name": "wait_a_while", "arguments": {"seconds": 30}}]})
    engine = SlowEngine([call, '{"response": "ok"}'], delay=0.001)
    app = create_app(ServerConfig(preset="full"), Scheduler([engine]), server_tools=tools)
    with serving(app) as base:
        hang_up_plain(f"{base}/v1/chat/completions", chat(), after=0.8)
        hung_up = time.monotonic()
        snap = wait_for(base, lambda s: s["busy_slots"] == 0)
        assert snap["completed"] == 1
        deadline = time.monotonic() + 2
        while not cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        assert started and cancelled and not finished
        assert cancelled[0] - hung_up < 1.0
        assert answered(base)
