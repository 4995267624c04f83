"""Bad input gets a clear 400 in the protocol's own error shape, never a 500, on both protocols."""

from __future__ import annotations

import json
from typing import Any

import pytest

MODEL = "scripted"
GOOD_PARAMS = {"type": "object", "properties": {"q": {"type": "string"}}}


def openai(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}


def anthropic(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}], **extra}


def fn(name: str = "search", parameters: Any = GOOD_PARAMS) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def atool(name: str = "search", schema: Any = GOOD_PARAMS) -> dict[str, Any]:
    return {"name": name, "input_schema": schema}


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


async def post_raw(client: Any, path: str, raw: str) -> Any:
    return await client.post(path, content=raw.encode(), headers={"content-type": "application/json"})


def openai_400(r: Any, *, param: str | None = None, says: str = "") -> None:
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    if param is not None:
        assert err["param"] == param, err
    assert says.lower() in err["message"].lower(), err


def anthropic_400(r: Any, says: str = "") -> None:
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert says.lower() in body["error"]["message"].lower(), body


async def test_lone_surrogates_are_refused_on_both_protocols(scripted) -> None:
    client, engines = scripted(["ok"])
    raw = '{"model": "scripted", "messages": [{"role": "user", "content": "a\\ud800b"}]}'
    r = await post_raw(client, "/v1/chat/completions", raw)
    openai_400(r, says="surrogate")
    assert "messages[0].content" in r.json()["error"]["message"]
    raw = '{"model": "scripted", "max_tokens": 5, "messages": [{"role": "user", "content": "\\udfff"}]}'
    anthropic_400(await post_raw(client, "/v1/messages", raw), says="surrogate")
    raw = '{"model": "scripted", "prompt": "x\\ud83d"}'
    openai_400(await post_raw(client, "/v1/completions", raw), says="surrogate")
    # A correctly paired surrogate escape is ordinary text.
    raw = '{"model": "scripted", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}'
    assert (await post_raw(client, "/v1/chat/completions", raw)).status_code == 200
    assert len(engines[0].prompts) == 1


@pytest.mark.parametrize(
    ("parameters", "says"),
    [
        ({"type": "nonsense"}, "not a valid json schema"),
        ({"type": "object", "properties": {"q": {"type": 5}}}, "not a valid json schema"),
        ({"type": "object", "required": "q"}, "not a valid json schema"),
        ({"type": "string"}, "object schema"),
        (nested(40), "too large"),
    ],
)
async def test_invalid_tool_schemas_are_refused(scripted, parameters: Any, says: str) -> None:
    client, _ = scripted(["ok"])
    r = await client.post("/v1/chat/completions", json=openai(tools=[fn(parameters=parameters)]))
    openai_400(r, param="tools[0].function.parameters", says=says)
    r = await client.post("/v1/messages", json=anthropic(tools=[atool(schema=parameters)]))
    anthropic_400(r, says=says)


async def test_duplicate_and_too_many_tools(scripted) -> None:
    client, _ = scripted(["ok"])
    r = await client.post("/v1/chat/completions", json=openai(tools=[fn(), fn()]))
    openai_400(r, param="tools[1].function.name", says="duplicate")
    anthropic_400(
        await client.post("/v1/messages", json=anthropic(tools=[atool(), atool()])), says="duplicate"
    )
    many = [fn(f"t{i}") for i in range(129)]
    openai_400(
        await client.post("/v1/chat/completions", json=openai(tools=many)), param="tools", says="at most"
    )


async def test_a_tool_result_that_answers_no_call_is_shown_as_the_users_text(scripted) -> None:
    """Refused, a history the agent cannot fix is retried as it is, forever: it is answered instead
    (tether.turns.history), the stray result shown as text that says it answers no call."""
    client, engines = scripted(["ok"])
    orphan = [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "call_nowhere", "content": "42"},
    ]
    r = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": orphan})
    assert r.status_code == 200, r.text
    assert "(A tool result that answers no call made here:)\n42" in engines[0].prompts[-1]
    answered = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    ]
    r = await client.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": answered, "tools": [fn()]}
    )
    assert r.status_code == 200, r.text
    a_orphan = [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "42"}]},
    ]
    r = await client.post("/v1/messages", json={"model": MODEL, "max_tokens": 5, "messages": a_orphan})
    assert r.status_code == 200, r.text
    assert "answers no call made here" in engines[0].prompts[-1]


async def test_stop_strings_are_bounded(scripted) -> None:
    client, _ = scripted(["ok"])
    for stop, says in [(["x"] * 17, "at most 16"), (["y" * 257], "1 to 256"), ([""], "1 to 256")]:
        openai_400(await client.post("/v1/chat/completions", json=openai(stop=stop)), param="stop", says=says)
        anthropic_400(await client.post("/v1/messages", json=anthropic(stop_sequences=stop)), says=says)
    openai_400(await client.post("/v1/completions", json={"model": MODEL, "prompt": "a", "stop": [""]}))


async def test_logit_bias_is_checked_and_honoured(scripted) -> None:
    client, _ = scripted(["hello"])
    for bias, says in [
        ({"abc": 1}, "token ids"),
        ({"999999": 1}, "token ids"),
        ({"5": 101}, "between -100 and 100"),
        ({str(i): 1 for i in range(1025)}, "at most 1024"),
    ]:
        openai_400(await client.post("/v1/chat/completions", json=openai(logit_bias=bias)), says=says)
    # The scripted engine gives its next byte logit 10: +100 on "Z" (90) outweighs it every step.
    r = await client.post("/v1/chat/completions", json=openai(logit_bias={"90": 100}, max_tokens=3))
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ZZZ"


async def test_penalties_are_accepted_and_top_logprobs_needs_logprobs(scripted) -> None:
    client, _ = scripted(["aaaa"])
    r = await client.post("/v1/chat/completions", json=openai(frequency_penalty=2.0, presence_penalty=1.0))
    assert r.status_code == 200
    openai_400(await client.post("/v1/chat/completions", json=openai(frequency_penalty=3)))
    r = await client.post("/v1/chat/completions", json=openai(top_logprobs=3))
    openai_400(r, param="top_logprobs")  # more in tests/unit/proxy/test_logprobs.py


async def test_unknown_fields_are_ignored_but_tether_options_are_strict(scripted) -> None:
    client, _ = scripted(["ok"])
    r = await client.post("/v1/chat/completions", json=openai(user="u1", metadata={"a": 1}, store=False))
    assert r.status_code == 200
    r = await client.post("/v1/chat/completions", json=openai(tether={"presets": "strict"}))
    openai_400(r, says="extra")
    r = await client.post("/v1/messages", json=anthropic(tether={"presets": "strict"}))
    anthropic_400(r, says="extra")


async def test_server_answers_after_every_bad_request(scripted) -> None:
    client, _ = scripted(["fine"])
    bodies = [
        "{",
        "[]",
        '{"model": 5}',
        json.dumps(openai(messages=[])),
        json.dumps(openai(tools=[{"type": "function"}])),
        json.dumps(openai(n=3)),
        json.dumps(openai(temperature=-1)),
    ]
    for raw in bodies:
        r = await post_raw(client, "/v1/chat/completions", raw)
        assert r.status_code == 400, (raw, r.text)
        assert r.json()["error"]["type"] == "invalid_request_error"
    r = await client.post("/v1/chat/completions", json=openai())
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "fine"
