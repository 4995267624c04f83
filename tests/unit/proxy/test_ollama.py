"""The Ollama API on a real socket, driven by the official ``ollama`` client, over a scripted engine.

Each test serves the app with uvicorn on a loopback port: chat with tools (calls in Ollama's
shape, arguments as objects), tool results by ``tool_name``, NDJSON streaming, generate
(templated and raw), the model listings, guardrail presets, errors in ``{"error": ...}`` shape
before and during a stream, and a hang-up freeing the slot.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

import httpx
import ollama
import pytest

from tests.support.engines import FaultyEngine, SlowEngine
from tests.support.scripted import WEATHER_CALL, scripted_app, weather_round_trip
from tests.support.socket_server import serving, wait_for
from tether.engine.scripted import ScriptedEngine
from tether.proxy.ollama_convert import OllamaOptions, model_info, sampling

MODEL = "scripted"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@contextmanager
def server(engine: ScriptedEngine, **config: Any) -> Iterator[tuple[ollama.Client, str]]:
    with (
        serving(scripted_app(engine, **config)) as base,
        closing(ollama.Client(host=base, timeout=30)) as client,
    ):
        yield client, base


def test_chat_with_tools_gets_a_call_in_ollama_shape() -> None:
    engine = ScriptedEngine([WEATHER_CALL])
    with server(engine) as (client, base):
        reply = client.chat(model=MODEL, messages=ASK, tools=[WEATHER])
        raw = httpx.post(
            f"{base}/api/chat", json={"model": MODEL, "messages": ASK, "tools": [WEATHER], "stream": False}
        )
    assert reply.done and reply.done_reason == "stop" and reply.message.role == "assistant"
    (call,) = reply.message.tool_calls or []
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
    assert reply.prompt_eval_count and reply.prompt_eval_count > 0 and reply.eval_count == len(WEATHER_CALL)
    assert reply.total_duration and reply.total_duration >= (reply.eval_duration or 0) > 0
    wire = raw.json()["message"]["tool_calls"][0]
    assert wire["function"]["arguments"] == {"city": "Paris"}  # an object, not JSON text
    assert wire["id"].startswith("call_") and wire["function"]["index"] == 0
    assert "get_weather" in engine.prompts[0]


def test_tool_result_by_tool_name_continues_the_conversation() -> None:
    engine = ScriptedEngine([weather_round_trip])
    with server(engine) as (client, _):
        first = client.chat(model=MODEL, messages=ASK, tools=[WEATHER])
        result = {"role": "tool", "content": "Sunny, 24 C", "tool_name": "get_weather"}
        second = client.chat(model=f"{MODEL}:latest", messages=[*ASK, first.message, result], tools=[WEATHER])
    assert second.message.content == "Sunny in Paris." and not second.message.tool_calls
    assert "Result of get_weather:\nSunny, 24 C" in engine.prompts[-1]
    assert '"city": "Paris"' in engine.prompts[-1]  # the assistant's call, replayed from its object


def test_streamed_chat_is_ndjson_and_adds_up() -> None:
    text = "Streaming over NDJSON works."
    with server(ScriptedEngine([text])) as (client, base):
        parts = list(client.chat(model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True))
        with httpx.stream("POST", f"{base}/api/chat", json={"model": MODEL, "messages": ASK}) as r:
            media = r.headers["content-type"]
            lines = [json.loads(line) for line in r.iter_lines() if line]
    assert media.startswith("application/x-ndjson")  # streaming is the default without "stream"
    assert len(parts) > 5 and all(not p.done for p in parts[:-1])
    assert "".join(p.message.content or "" for p in parts) == text
    last = parts[-1]
    assert last.done and last.done_reason == "stop" and last.eval_count == len(text)
    assert lines[-1]["done"] is True and "".join(x["message"]["content"] for x in lines) == text


def test_streamed_tool_call_arrives_whole() -> None:
    with server(ScriptedEngine([WEATHER_CALL])) as (client, _):
        parts = list(client.chat(model=MODEL, messages=ASK, tools=[WEATHER], stream=True))
    calls = [c for p in parts for c in p.message.tool_calls or ()]
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert parts[-1].done and parts[-1].done_reason == "stop"


def test_generate_uses_the_template_and_raw_skips_it() -> None:
    engine = ScriptedEngine(["A short poem."])
    with server(engine) as (client, _):
        whole = client.generate(model=MODEL, prompt="Write a poem", system="Be brief.")
        streamed = list(client.generate(model=MODEL, prompt="Write a poem", stream=True))
        raw = client.generate(model=MODEL, prompt="Once upon a time", raw=True, options={"num_predict": 4})
        loaded = client.generate(model=MODEL)
    assert whole.response == "A short poem." and whole.done and whole.done_reason == "stop"
    assert "<|im_start|>system\nBe brief.<|im_end|>" in engine.prompts[0]
    assert "<|im_start|>user\nWrite a poem<|im_end|>" in engine.prompts[0]
    assert "".join(p.response or "" for p in streamed) == "A short poem." and streamed[-1].done
    assert engine.prompts[2] == "Once upon a time"  # no template
    assert raw.response == "A sh" and raw.done_reason == "length" and raw.eval_count == 4
    assert loaded.done and loaded.done_reason == "load" and loaded.response == ""


def test_a_body_is_json_whatever_its_content_type() -> None:
    """Ollama's documented ``curl … -d '{…}'`` sends a form content type."""
    body = b'{"model": "scripted", "prompt": "hi", "stream": false}'
    form = {"content-type": "application/x-www-form-urlencoded"}
    with server(ScriptedEngine(["Hello."])) as (_, base):
        r = httpx.post(f"{base}/api/generate", content=body, headers=form)
    assert r.status_code == 200 and r.json()["response"] == "Hello."


def test_listing_show_ps_and_version() -> None:
    with server(ScriptedEngine(), model_aliases=("helper",)) as (client, base):
        listed = client.list()
        shown = client.show(MODEL)
        running = client.ps()
        version = httpx.get(f"{base}/api/version").json()
    assert [m.model for m in listed.models] == [MODEL, "helper"]
    assert listed.models[0].details is not None and listed.models[0].details.format == "gguf"
    assert shown.capabilities == ["completion", "tools"] and shown.template and "im_start" in shown.template
    assert shown.modelinfo is not None and shown.parameters == "num_ctx 4096"
    (model,) = running.models
    assert model.model == MODEL and model.context_length == 4096 and model.expires_at is not None
    assert version["version"].count(".") == 2


def test_model_info_keeps_general_and_architecture_keys_as_json_values() -> None:
    meta = {
        "general.architecture": "llama",
        "general.name": "Infinity",  # text that float() would read as a number JSON cannot hold
        "llama.block_count": "30",
        "llama.rope.freq_base": "10000.0",
        "llama.context_length": "2048",
        "tokenizer.ggml.model": "gpt2",
    }
    info = model_info(meta, 8192)
    assert info == {
        "general.architecture": "llama",
        "general.name": "Infinity",
        "llama.block_count": 30,
        "llama.rope.freq_base": 10000.0,
        "llama.context_length": 8192,  # the served window, not the trained one
    }
    json.dumps(info, allow_nan=False)


def test_the_server_preset_applies_and_a_request_may_choose_another() -> None:
    call = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": "3"}}]}'
    with server(ScriptedEngine([call])) as (client, base):
        guarded = client.chat(model=MODEL, messages=ASK, tools=[WEATHER])
        body = {"model": MODEL, "messages": ASK, "tools": [WEATHER], "stream": False}
        bare = httpx.post(
            f"{base}/api/chat", json={**body, "tether": {"preset": "bare", "constrain": "off"}}
        ).json()
        full = httpx.post(f"{base}/api/chat", json=body).json()
    assert (guarded.message.tool_calls or [])[0].function.arguments == {"city": "Paris", "days": 3}
    assert any(i["kind"] == "args_coerced" for i in full["tether"]["interventions"]), full
    assert bare["message"]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris", "days": "3"}
    assert "interventions" not in bare["tether"]


def test_options_reach_the_generation() -> None:
    with server(ScriptedEngine(["Hello there, friend."])) as (client, _):
        cut = client.chat(model=MODEL, messages=ASK, options={"stop": ["there"], "temperature": 0})
        short = client.chat(model=MODEL, messages=ASK, options={"num_predict": 3, "seed": 7})
    assert cut.message.content == "Hello " and cut.done_reason == "stop"
    assert short.message.content == "Hel" and short.done_reason == "length"
    params = sampling(OllamaOptions(temperature=0.2, top_p=0.5, top_k=7, seed=3, repeat_penalty=1.1), 0.8)
    assert (params.temperature, params.top_p, params.top_k, params.seed) == (0.2, 0.5, 7, 3)
    assert params.repeat_penalty == 1.1 and sampling(None, 0.8).temperature == 0.8


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"model": "nope", "messages": ASK}, 404, "not served here"),
        ({"model": MODEL, "messages": ASK, "options": {"num_predict": 0}}, 400, "num_predict"),
        (
            {
                "model": MODEL,
                "messages": ASK,
                "format": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}},
            },
            400,
            "minimum at /properties/n",
        ),
        ({"model": MODEL, "messages": ASK, "think": True}, 400, "thinking"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, 400, "images"),
        ({"model": MODEL, "messages": [*ASK, {"role": "tool", "content": "x"}]}, 400, "no unanswered call"),
        (
            {"model": MODEL, "messages": ASK, "tools": [{"type": "web", "function": {"name": "x"}}]},
            400,
            "web",
        ),
        ({"model": MODEL, "prompt": "x", "suffix": "y"}, 400, "suffix"),
        ({"model": MODEL, "prompt": "x", "context": [1, 2]}, 400, "/api/chat"),
        ({"messages": ASK}, 400, "model"),
    ],
)
def test_bad_requests_get_ollama_errors(body: dict[str, Any], status: int, words: str) -> None:
    path = "/api/generate" if "prompt" in body else "/api/chat"
    with server(ScriptedEngine()) as (client, base):
        r = httpx.post(f"{base}{path}", json=body)
        if path == "/api/chat" and "model" in body:
            with pytest.raises(ollama.ResponseError) as caught:
                client.chat(**body)
            assert caught.value.status_code == status and words in caught.value.error
    assert r.status_code == status
    assert set(r.json()) == {"error"} and words in r.json()["error"], r.text


def test_errors_raised_before_a_route_are_in_ollama_shape_too() -> None:
    key = {"authorization": "Bearer k", "content-type": "application/json"}
    with server(ScriptedEngine(), api_key="k") as (_, base):
        unauthorized = httpx.get(f"{base}/api/tags")
        not_json = httpx.post(f"{base}/api/chat", content=b"{nope", headers=key)
        unknown = httpx.post(f"{base}/api/pull", json={"model": MODEL}, headers=key)
        openai_side = httpx.post(f"{base}/v1/chat/completions", content=b"{nope", headers=key)
    assert unauthorized.status_code == 401 and "API key" in unauthorized.json()["error"]
    assert not_json.status_code == 400 and not_json.json() == {"error": "request body is not valid JSON"}
    assert unknown.status_code == 404 and isinstance(unknown.json()["error"], str)
    assert isinstance(openai_side.json()["error"], dict)  # other paths keep OpenAI's shape


def test_a_fault_mid_stream_ends_it_with_an_error_line() -> None:
    with server(FaultyEngine(["x" * 40], fail_after=5)) as (client, _):
        seen: list[str] = []
        with pytest.raises(ollama.ResponseError) as caught:
            for part in client.chat(model=MODEL, messages=ASK, stream=True):
                seen.append(part.message.content or "")
        after = client.chat(model=MODEL, messages=ASK)
    assert "".join(seen) == "xxxxx" and "engine failed" in caught.value.error
    assert after.message.content == "x" * 40  # the server stays up


def test_hanging_up_a_stream_frees_the_slot() -> None:
    engine = SlowEngine(delay=0.02)
    with server(engine) as (client, base):
        with httpx.stream("POST", f"{base}/api/chat", json={"model": MODEL, "messages": ASK}) as r:
            lines = [line for _, line in zip(range(3), r.iter_lines(), strict=False)]
        assert len(lines) == 3
        snap = wait_for(base, lambda s: s["busy_slots"] == 0 and s["cancelled"] >= 1, timeout=2)
        assert snap["queue_depth"] == 0 and engine.after_cancel <= 1
        assert client.chat(model=MODEL, messages=ASK, options={"num_predict": 2}).message.content == "xx"
