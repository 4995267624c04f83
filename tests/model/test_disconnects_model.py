"""Hang-ups on the bundled model over a real socket: both protocols, plain and streamed, sessions.

The first request asks for a long reply and hangs up; the next one must be answered without
waiting for it to finish (within 5 s: on a loaded CI machine a 4-token reply after a hang-up has
taken 1.3 s), and ``/health`` must show the slot free and the request cancelled, not completed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.socket_server import serving, wait_for
from tether.config import ServerConfig
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.scheduler import Scheduler
from tether.proxy.app import create_app

MODEL = "smollm2-135m-instruct"
STORY = [{"role": "user", "content": "Write a very long story about a lighthouse keeper."}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "save_story",
            "description": "Save a story.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        },
    }
]


@pytest.fixture
def base(smollm: LlamaCppEngine, tmp_path: Path) -> Iterator[str]:
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(
        "name: story\ntools:\n  - name: save_story\n    parameters: {type: object, properties: {text: {type: string}}}\n"
        "  - name: finish\n    parameters: {type: object, properties: {}}\n"
        "steps: [save_story]\nterminal: finish\n",
        encoding="utf-8",
    )
    app = create_app(ServerConfig(workflows=(str(workflow),)), Scheduler([smollm]))
    with serving(app) as url:
        yield url


def next_answer_without_waiting(base: str, hung_up: float) -> None:
    r = httpx.post(
        f"{base}/v1/chat/completions",
        json={"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    assert time.monotonic() - hung_up < 5.0, time.monotonic() - hung_up


def read_then_hang_up(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> float:
    """Stream, read 400 bytes (as ``curl … | head -c 400``), hang up; the moment of the hang-up."""
    with httpx.Client(timeout=30) as client, client.stream("POST", url, json=body, headers=headers) as r:
        assert r.status_code == 200
        got = 0
        for chunk in r.iter_bytes():
            got += len(chunk)
            if got >= 400:
                break
    return time.monotonic()


def test_openai_stream_hang_up(base: str) -> None:
    body = {"model": MODEL, "max_tokens": 2000, "stream": True, "messages": STORY}
    hung_up = read_then_hang_up(f"{base}/v1/chat/completions", body)
    next_answer_without_waiting(base, hung_up)
    snap = wait_for(base, lambda s: s["busy_slots"] == 0)
    assert snap["cancelled"] == 1 and snap["completed"] == 2


def test_openai_plain_request_hang_up(base: str) -> None:
    body = {"model": MODEL, "max_tokens": 2000, "messages": STORY}
    with pytest.raises(httpx.ReadTimeout), httpx.Client(timeout=httpx.Timeout(10, read=0.5)) as client:
        client.post(f"{base}/v1/chat/completions", json=body)
    next_answer_without_waiting(base, time.monotonic())
    assert wait_for(base, lambda s: s["busy_slots"] == 0)["cancelled"] == 1


def test_anthropic_stream_hang_up(base: str) -> None:
    body = {"model": MODEL, "max_tokens": 2000, "stream": True, "messages": STORY}
    hung_up = read_then_hang_up(f"{base}/v1/messages", body)
    next_answer_without_waiting(base, hung_up)
    assert wait_for(base, lambda s: s["busy_slots"] == 0)["cancelled"] == 1


def test_session_stream_hang_up_mid_tool_call(base: str) -> None:
    """A forced tool call with a long argument, in a workflow session: hang up while it is written."""
    body = {
        "model": MODEL,
        "max_tokens": 2000,
        "stream": True,
        "messages": STORY,
        "tools": TOOLS,
        "tool_choice": "required",
    }
    headers = {"X-Tether-Session": "s1", "X-Tether-Workflow": "story"}
    with (
        pytest.raises(httpx.ReadTimeout),
        httpx.Client(timeout=httpx.Timeout(10, read=1.0)) as client,
        client.stream("POST", f"{base}/v1/chat/completions", json=body, headers=headers) as r,
    ):
        for _ in r.iter_bytes():
            pass
    next_answer_without_waiting(base, time.monotonic())
    assert wait_for(base, lambda s: s["busy_slots"] == 0)["cancelled"] == 1


def test_fault_in_the_constraint_on_the_real_model_is_contained(
    smollm: LlamaCppEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Layer 0 breaks mid-call on the real engine: the stream ends with an error, the server stays up."""
    from tests.support.engines import break_layer0

    break_layer0(monkeypatch, smollm, at=6, real=True)
    app = create_app(ServerConfig(), Scheduler([smollm]))
    body = {"model": MODEL, "max_tokens": 200, "messages": STORY, "tools": TOOLS, "tool_choice": "required"}
    with serving(app) as url:
        r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 500 and r.json()["error"]["code"] == "engine_error"
        wait_for(url, lambda s: s["busy_slots"] == 0)
        next_answer_without_waiting(url, time.monotonic())
