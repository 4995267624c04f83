"""A chat backend serves like an engine: hang-ups, a full queue, a backend that is down, sessions.

tether (``--backend-kind openai``) in front of a scripted tether on real sockets
(tests/support/chat_backend.py): a client that hangs up cancels the request upstream and frees
both servers' slots; a full queue is a 429 before anything is sent; a backend that went away is a
502 in each protocol's own error shape; workflow sessions still block and regenerate.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from tests.support.chat_backend import back_server, call, front_server
from tests.support.engines import SlowEngine
from tests.support.scripted import READ_FILE
from tests.support.socket_server import serving, wait_for
from tether.config import ServerConfig
from tether.engine.scripted import ScriptedEngine
from tether.server import build_app

MODEL = "scripted"
LONG = " ".join(f"word{i}" for i in range(300)) + " "


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "tell me a story"}], **extra}


def test_a_client_hang_up_cancels_the_request_upstream() -> None:
    engine = SlowEngine([LONG, "short answer"], delay=0.02)
    with back_server(engine) as (back, _), front_server(back) as front:
        with (
            httpx.Client(timeout=10) as client,
            client.stream("POST", f"{front}/v1/chat/completions", json=chat(stream=True)) as r,
        ):
            seen = 0
            for line in r.iter_lines():
                seen += line.startswith("data: ")
                if seen >= 5:
                    break  # hang up mid-story
        front_snap = wait_for(front, lambda s: s["busy_slots"] == 0 and s["cancelled"] == 1, timeout=5)
        # The front closed its stream to the back, which cancelled its own generation and freed its slot.
        back_snap = wait_for(back, lambda s: s["busy_slots"] == 0 and s["cancelled"] == 1, timeout=5)
        deadline = time.monotonic() + 5
        while engine.cancels < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert engine.cancels == 1 and engine.after_cancel <= 1
        after = httpx.post(f"{front}/v1/chat/completions", json=chat(), timeout=10)
    assert after.status_code == 200 and after.json()["choices"][0]["message"]["content"] == "short answer"
    assert front_snap["queue_depth"] == 0 and back_snap["completed"] == 1


def test_a_full_queue_is_a_429_before_anything_is_sent() -> None:
    engine = SlowEngine([LONG], delay=0.02)
    with (
        back_server(engine) as (back, recorded),
        front_server(back, slots=1, queue_limit=0) as front,
        httpx.Client(timeout=10) as client,
        client.stream("POST", f"{front}/v1/chat/completions", json=chat(stream=True)) as first,
    ):
        assert first.status_code == 200
        second = httpx.post(f"{front}/v1/chat/completions", json=chat(), timeout=10)
        health = httpx.get(f"{front}/health", timeout=5).json()
    assert second.status_code == 429 and second.headers["Retry-After"] == "1"
    assert second.json()["error"]["code"] == "queue_full"
    assert health["backend"] == "openai" and health["scheduler"]["busy_slots"] == 1
    assert health["scheduler"]["rejected"] == 1 and len(recorded.bodies) == 1


def test_a_backend_that_went_away_is_a_502_in_each_protocols_shape() -> None:
    with back_server(ScriptedEngine(["hi"])) as (back, _):
        app = build_app(ServerConfig(backend=back, backend_kind="openai"))  # connects while it is up
    with serving(app) as front:
        plain = httpx.post(f"{front}/v1/chat/completions", json=chat(), timeout=10)
        streamed = httpx.post(f"{front}/v1/chat/completions", json=chat(stream=True), timeout=10)
        anthropic = httpx.post(
            f"{front}/v1/messages",
            json={"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
            timeout=10,
        )
        ollama = httpx.post(
            f"{front}/api/chat",
            json={"model": MODEL, "stream": False, "messages": [{"role": "user", "content": "hi"}]},
            timeout=10,
        )
        snap = httpx.get(f"{front}/health", timeout=5).json()["scheduler"]
    for r in (plain, streamed):
        assert r.status_code == 502 and r.json()["error"]["code"] == "backend_unavailable", r.text
    assert anthropic.status_code == 502 and anthropic.json()["type"] == "error"
    assert ollama.status_code == 502 and "/v1/chat/completions" in ollama.json()["error"]
    assert snap["busy_slots"] == 0 and snap["started"] == 4


WORKFLOW = {"name": "report", "tools": ["read_file", "submit"], "steps": ["read_file"], "terminal": "submit"}
SUBMIT = {
    "type": "function",
    "function": {
        "name": "submit",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
}


def test_workflow_sessions_block_and_regenerate_in_front_of_a_chat_backend() -> None:
    engine = ScriptedEngine([call("submit", {"text": "done"}), call("read_file", {"path": "a.txt"})])
    with back_server(engine) as (back, recorded), front_server(back) as front:
        made = httpx.post(
            f"{front}/v1/tether/sessions", json={"workflow": WORKFLOW, "session_id": "s1"}, timeout=10
        )
        assert made.status_code == 201, made.text
        r = httpx.post(
            f"{front}/v1/chat/completions",
            headers={"X-Tether-Session": "s1"},
            json=chat(tools=[READ_FILE, SUBMIT]),
            timeout=30,
        ).json()
    calls = r["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["read_file"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"path": "a.txt"}
    assert any(i["kind"] == "workflow_regenerated" for i in r["tether"]["interventions"])
    first, retry = recorded.bodies  # the blocked turn went back to the server with the tool error
    assert len(retry["messages"]) > len(first["messages"])


CITY = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["name"],
}
FORM = {"type": "json_schema", "json_schema": {"name": "City", "schema": CITY}}


def _structured(reply: str, **chat_extra: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The front's reply, and the body the back got, for a back that ignores response_format."""
    engine = ScriptedEngine([reply])
    with (
        back_server(engine, ignore=("response_format",)) as (back, recorded),
        front_server(back) as front,
    ):
        body = chat(response_format=FORM, **chat_extra)
        if chat_extra.get("stream"):
            with httpx.stream("POST", f"{front}/v1/chat/completions", json=body, timeout=10) as r:
                lines = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")]
            content = "".join(
                c["choices"][0]["delta"].get("content") or "" for c in lines if c.get("choices")
            )
            tether = next(c["tether"] for c in reversed(lines) if c.get("tether"))
            out = {"choices": [{"message": {"content": content}}], "tether": tether}
        else:
            out = httpx.post(f"{front}/v1/chat/completions", json=body, timeout=10).json()
    return out, recorded.bodies[0]


def test_a_structured_reply_is_passed_on_and_what_comes_back_is_checked() -> None:
    reply, sent = _structured('{"town": "Lisbon"}')  # cannot be made to hold: flagged, not altered
    assert sent["response_format"] == FORM
    assert reply["choices"][0]["message"]["content"] == '{"town": "Lisbon"}'
    (note,) = reply["tether"]["interventions"]
    assert note["kind"] == "reply_invalid" and "'name' is a required property" in note["detail"]
    with back_server(ScriptedEngine(['{"name": "Lisbon"}'])) as (back, _), front_server(back) as front:
        held = httpx.post(f"{front}/v1/chat/completions", json=chat(response_format=FORM), timeout=10).json()
    assert json.loads(held["choices"][0]["message"]["content"]) == {"name": "Lisbon"}
    assert not held["tether"].get("interventions")


@pytest.mark.parametrize("stream", [False, True])
def test_a_structured_reply_the_backend_did_not_hold_is_repaired(stream: bool) -> None:
    written = 'Here it is:\n```json\n{"name": "Lisbon", "population": "545923"}\n```'
    reply, _ = _structured(written, stream=stream)
    assert json.loads(reply["choices"][0]["message"]["content"]) == {"name": "Lisbon", "population": 545923}
    (note,) = reply["tether"]["interventions"]
    assert note["kind"] == "reply_repaired"


def test_a_structured_reply_cut_at_max_tokens_is_closed_so_it_parses() -> None:
    whole = "Lisbon, the capital of Portugal, on the Tagus"
    reply, _ = _structured(json.dumps({"name": whole}), max_tokens=16)
    content = reply["choices"][0]["message"]["content"]
    name = json.loads(content)["name"]  # cut inside the string, closed as briefly as the schema allows
    assert name and whole.startswith(name) and name != whole
    assert [n["kind"] for n in reply["tether"]["interventions"]] == ["reply_closed"]
    assert reply["choices"][0]["finish_reason"] == "stop"
