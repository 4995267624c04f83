"""``--backend-kind openai``: tether's post-hoc guard over a real OpenAI-compatible server.

The server behind is tether itself over a scripted engine (tests/support/chat_backend.py), passing
its engine's output through unguarded; the front tether forwards each job to its
``/v1/chat/completions`` and guards what comes back. Everything runs on real sockets.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.conftest import sse_events
from tests.support.chat_backend import LIST_DIR, back_server, call, front_server
from tests.support.scripted import READ_FILE
from tether.engine.scripted import ScriptedEngine

MODEL = "scripted"
POST_HOC = ["repick", "repair", "streaming"]  # no layer0_* entry: the guard after the reply only


def chat(base: str, **extra: Any) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "show me a.py"}], **extra}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)


def kinds(reply: dict[str, Any]) -> list[str]:
    return [i["kind"] for i in reply.get("tether", {}).get("interventions", [])]


def test_text_streams_through_with_the_backends_own_usage() -> None:
    engine = ScriptedEngine(["Hello from the server behind."])
    with back_server(engine) as (back, recorded), front_server(back) as front:
        r = chat(front, stream=True, stream_options={"include_usage": True})
        card = httpx.get(f"{front}/v1/models", timeout=10).json()["data"][0]
    assert r.status_code == 200, r.text
    events = sse_events(r.text)
    deltas = [e["choices"][0]["delta"].get("content") for e in events[:-1] if e["choices"]]
    deltas = [d for d in deltas if d]
    assert "".join(deltas) == "Hello from the server behind." and len(deltas) > 1  # streamed, not one blob
    (final,) = [e for e in events[:-1] if e["choices"] and e["choices"][0]["finish_reason"]]
    assert final["choices"][0]["finish_reason"] == "stop" and final["tether"] == {"layers": POST_HOC}
    # The server's token count (the scripted tokenizer: one per byte), not tether's estimate.
    assert events[-2]["usage"]["prompt_tokens"] == len(engine.prompts[-1].encode())
    (sent,) = recorded.bodies
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["messages"] == [{"role": "user", "content": "show me a.py"}] and "tools" not in sent
    assert card["id"] == MODEL
    assert card["tether"]["backend"] == "openai" and card["tether"]["layers"] == POST_HOC
    assert card["tether"]["n_ctx"] == engine.info.n_ctx  # read from the server's own model card


def test_a_wrong_name_is_resolved_by_the_guard_in_front() -> None:
    engine = ScriptedEngine([call("Read", {"path": "a.py"})])
    with back_server(engine) as (back, recorded), front_server(back) as front:
        r = chat(front, tools=[READ_FILE, LIST_DIR]).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert tc["function"]["name"] == "read_file" and json.loads(tc["function"]["arguments"]) == {
        "path": "a.py"
    }
    assert r["choices"][0]["finish_reason"] == "tool_calls" and kinds(r) == ["name_resolved"]
    assert r["tether"]["layers"] == POST_HOC
    (sent,) = recorded.bodies  # the alias table needed no second request
    assert [t["function"]["name"] for t in sent["tools"]] == ["read_file", "list_dir"]
    assert sent["tool_choice"] == "auto"


def test_invalid_arguments_are_repaired_by_a_request_naming_the_tool() -> None:
    engine = ScriptedEngine([call("read_file", {"limit": 5}), call("read_file", {"path": "a.py"})])
    with back_server(engine) as (back, recorded), front_server(back) as front:
        r = chat(front, tools=[READ_FILE, LIST_DIR]).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert json.loads(tc["function"]["arguments"]) == {"path": "a.py"} and "args_repaired" in kinds(r)
    _, repair = recorded.bodies
    assert repair["tool_choice"] == {"type": "function", "function": {"name": "read_file"}}
    assert [t["function"]["name"] for t in repair["tools"]] == ["read_file"] and repair["temperature"] == 0
    shown, result = repair["messages"][-2:]
    assert shown["tool_calls"][0]["function"]["name"] == "read_file"
    assert result["role"] == "tool" and "path" in result["content"]
    # The reply's usage reports the larger of the two prompts, each by the server's own count.
    assert r["usage"]["prompt_tokens"] == max(len(p.encode()) for p in engine.prompts)


def test_an_unknown_name_is_repicked_by_a_request_requiring_a_call() -> None:
    engine = ScriptedEngine([call("frobnicate", {"path": "a.py"}), call("read_file", {"path": "a.py"})])
    with back_server(engine) as (back, recorded), front_server(back) as front:
        r = chat(front, tools=[READ_FILE, LIST_DIR]).json()
    (tc,) = r["choices"][0]["message"]["tool_calls"]
    assert tc["function"]["name"] == "read_file" and "repick" in kinds(r)
    _, repick = recorded.bodies
    assert repick["tool_choice"] == "required"
    assert [t["function"]["name"] for t in repick["tools"]] == ["read_file", "list_dir"]


def test_a_name_the_repick_cannot_find_becomes_text_never_a_call() -> None:
    engine = ScriptedEngine([call("frobnicate", {"path": "a.py"}), "I do not know."])
    with back_server(engine) as (back, _), front_server(back) as front:
        r = chat(front, tools=[READ_FILE]).json()
    message = r["choices"][0]["message"]
    assert "tool_calls" not in message and "frobnicate" in message["content"]
    assert {"repick", "name_unresolved"} <= set(kinds(r))


def test_a_call_written_as_text_is_rescued_in_the_models_format() -> None:
    """The server behind parsed no call (its model wrote Hermes markup as prose); tether, told the
    model's format, finds it in the text."""
    text = 'Reading it.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    engine = ScriptedEngine([text])
    with back_server(engine) as (back, _), front_server(back, tool_format="hermes") as front:
        r = chat(front, tools=[READ_FILE]).json()
        streamed = sse_events(chat(front, tools=[READ_FILE], stream=True).text)
    message = r["choices"][0]["message"]
    assert message["content"] == "Reading it." and message["tool_calls"][0]["function"]["name"] == "read_file"
    deltas = "".join(e["choices"][0]["delta"].get("content") or "" for e in streamed[:-1] if e["choices"])
    assert "<tool_call>" not in deltas  # the markup never reaches the client as text


def test_a_text_answer_is_redecided_when_every_call_is_dropped() -> None:
    """Strict preset on a fresh ask: a call whose values nobody said is abstained from, and the turn
    is asked again for text (tool_choice none), as with an embedded engine."""
    engine = ScriptedEngine([call("read_file", {"path": "zzz_invented.py"}), "Which file do you mean?"])
    with back_server(engine) as (back, recorded), front_server(back, preset="strict") as front:
        r = chat(front, tools=[READ_FILE]).json()
    assert r["choices"][0]["message"]["content"] == "Which file do you mean?"
    assert {"call_abstained", "answer_redecided"} <= set(kinds(r))
    assert recorded.bodies[1]["tool_choice"] == "none"


def test_plain_completions_are_refused_with_a_clear_400() -> None:
    with back_server(ScriptedEngine()) as (back, _), front_server(back) as front:
        r = httpx.post(f"{front}/v1/completions", json={"model": MODEL, "prompt": "Once"}, timeout=10)
    assert r.status_code == 400 and "chat requests only" in r.json()["error"]["message"]
