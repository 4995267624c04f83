"""ChatClient: the preset goes in the body for tether; client-side guardrails elsewhere."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from tether.evals.client import ChatClient, detect_server

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def _completion(message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    body = {
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 4}},
    }
    body.update(extra)
    return body


def _calls(name: str, args: str) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": args}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _server(replies: list[httpx.Response]) -> tuple[httpx.AsyncClient, list[dict[str, Any]]]:
    bodies: list[dict[str, Any]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "m1"}]})
        bodies.append(json.loads(request.content))
        return replies.pop(0)

    transport = httpx.MockTransport(handle)
    return httpx.AsyncClient(transport=transport, base_url="http://x/v1/"), bodies


def _ok(message: dict[str, Any], **extra: Any) -> httpx.Response:
    return httpx.Response(200, json=_completion(message, **extra))


async def test_tether_server_gets_the_preset_and_its_generation_count() -> None:
    notes = [{"kind": "repick"}, {"kind": "args_invalid"}, {"kind": "name_resolved"}]
    reply = _ok(_calls("get_weather", '{"city": "Paris"}'), tether={"interventions": notes, "generations": 3})
    http, bodies = _server([reply, _ok(_calls("get_weather", "{}"), tether={"interventions": notes})])
    client = ChatClient(http, "m1", "tether")
    full = await client.chat([{"role": "user", "content": "hi"}], TOOLS, "full", seed=3, max_tokens=9)
    assert (
        bodies[0]["tether"] == {"preset": "full"} and bodies[0]["seed"] == 3 and bodies[0]["max_tokens"] == 9
    )
    assert full.model_calls == 3 and full.retries == 2  # the server's count, not the notes'
    assert full.prompt_tokens == 10 and full.cached_tokens == 4
    names = await client.chat([{"role": "user", "content": "hi"}], TOOLS, "names")
    assert names.model_calls == 1 and names.retries == 0  # no count: the one run
    await http.aclose()


async def test_foreign_server_bare_is_plain() -> None:
    http, bodies = _server([_ok({"role": "assistant", "content": "hello"})])
    kind, model = await detect_server(http)
    assert (kind, model) == ("openai", "m1")
    reply = await ChatClient(http, model, kind).chat([{"role": "user", "content": "hi"}], TOOLS, "bare")
    assert "tether" not in bodies[0] and reply.text == "hello" and reply.model_calls == 1
    await http.aclose()


async def test_foreign_server_guarded_retries_client_side() -> None:
    bad = _ok(_calls("fetch_forecast", '{"city": "Paris"}'))
    good = _ok(_calls("get_weather", '{"city": "Paris"}'))
    http, bodies = _server([bad, good])
    reply = await ChatClient(http, "m1", "openai").chat([{"role": "user", "content": "hi"}], TOOLS, "full")
    assert reply.model_calls == 2 and reply.retries == 1
    assert reply.tool_calls[0]["function"]["name"] == "get_weather"
    assert reply.prompt_tokens == 20  # both attempts are paid for
    assert any(m.get("role") == "tool" and "unknown tool" in m["content"] for m in bodies[1]["messages"])
    assert {n["kind"] for n in reply.interventions} >= {"name_unresolved", "retry"}
    await http.aclose()


async def test_rescue_only_in_presets_that_rescue() -> None:
    text = {
        "role": "assistant",
        "content": '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}',
    }
    make: Callable[[], httpx.Response] = lambda: _ok(text)  # noqa: E731
    http, _ = _server([make(), make()])
    client = ChatClient(http, "m1", "openai")
    rescued = await client.chat([{"role": "user", "content": "hi"}], TOOLS, "full")
    assert rescued.tool_calls and rescued.tool_calls[0]["function"]["name"] == "get_weather"
    plain = await client.chat([{"role": "user", "content": "hi"}], TOOLS, "names")
    assert not plain.tool_calls
    await http.aclose()


async def test_busy_server_is_waited_for_and_errors_are_reported() -> None:
    busy = httpx.Response(429, headers={"retry-after": "0"}, json={"error": {"message": "busy"}})
    overflow = httpx.Response(400, json={"error": {"message": "too long", "code": "context_length_exceeded"}})
    http, bodies = _server([busy, _ok({"role": "assistant", "content": "ok"}), overflow])
    client = ChatClient(http, "m1", "tether")
    assert (await client.chat([{"role": "user", "content": "a"}], [], "bare")).text == "ok"
    assert len(bodies) == 2
    failed = await client.chat([{"role": "user", "content": "b"}], [], "bare")
    assert failed.error_code == "context_length_exceeded" and "too long" in failed.error
    await http.aclose()
