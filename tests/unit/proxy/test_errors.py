"""Every refusal comes back in OpenAI's error shape with the right status."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence

from tether.engine.base import Constraint, GenerationEvent, LogitsProcessor, SamplingParams
from tether.engine.scripted import ScriptedEngine


def assert_openai_error(body: dict[str, object], code: str | None = None) -> dict[str, object]:
    assert set(body) == {"error"}
    err = body["error"]
    assert isinstance(err, dict)
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    if code is not None:
        assert err["code"] == code
    return err


async def test_malformed_json(scripted) -> None:
    client, _ = scripted()
    r = await client.post(
        "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert "not valid JSON" in assert_openai_error(r.json())["message"]


async def test_schema_violation_names_the_field(scripted) -> None:
    client, _ = scripted()
    r = await client.post("/v1/chat/completions", json={"model": "scripted", "messages": "hi"})
    assert r.status_code == 400
    assert assert_openai_error(r.json())["param"] == "messages"
    r = await client.post(
        "/v1/chat/completions",
        json={"model": "scripted", "messages": [{"role": "user", "content": "x"}], "temperature": 7},
    )
    assert r.status_code == 400
    assert assert_openai_error(r.json())["param"] == "temperature"


async def test_unknown_fields_ignored(scripted) -> None:
    client, _ = scripted(["fine"])
    r = await client.post(
        "/v1/chat/completions",
        json={
            "model": "scripted",
            "messages": [{"role": "user", "content": "x"}],
            "frobnicate": 3,
            "user": "u",
        },
    )
    assert r.status_code == 200


async def test_unknown_model(scripted) -> None:
    client, _ = scripted()
    r = await client.post(
        "/v1/chat/completions", json={"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}
    )
    assert r.status_code == 404
    err = assert_openai_error(r.json(), "model_not_found")
    assert "scripted" in str(err["message"])


async def test_oversized_body(scripted) -> None:
    client, _ = scripted(max_body_bytes=1000)
    big = {"model": "scripted", "messages": [{"role": "user", "content": "x" * 5000}]}
    r = await client.post("/v1/chat/completions", json=big)
    assert r.status_code == 413
    assert_openai_error(r.json(), "payload_too_large")


async def test_context_overflow_states_numbers(scripted) -> None:
    client, _ = scripted(engines=[ScriptedEngine(["x"], n_ctx=200)])
    r = await client.post(
        "/v1/chat/completions",
        json={"model": "scripted", "messages": [{"role": "user", "content": "y" * 400}]},
    )
    assert r.status_code == 400
    err = assert_openai_error(r.json(), "context_length_exceeded")
    assert "200" in str(err["message"]) and "context length exceeded" in str(err["message"])


async def test_large_max_tokens_is_clamped_not_an_overflow(scripted) -> None:
    client, _ = scripted(engines=[ScriptedEngine(["short"], n_ctx=300)])
    r = await client.post(
        "/v1/chat/completions",
        json={"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000},
    )
    assert r.status_code == 200


async def test_images_refused_clearly(scripted) -> None:
    client, _ = scripted()
    msg = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}
    r = await client.post("/v1/chat/completions", json={"model": "scripted", "messages": [msg]})
    assert r.status_code == 400
    assert assert_openai_error(r.json())["param"] == "messages[0].content[0].type"


async def test_queue_full_is_429_with_retry_after(scripted) -> None:
    engine = ScriptedEngine(["slow reply"], pause_after=1)
    client, _ = scripted(engines=[engine], queue_limit=0)
    body = {"model": "scripted", "messages": [{"role": "user", "content": "x"}]}
    first = asyncio.create_task(client.post("/v1/chat/completions", json=body))
    await asyncio.to_thread(engine.paused.wait, 5)
    r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 429
    assert r.headers["retry-after"] == "1"
    assert_openai_error(r.json(), "queue_full")
    engine.resume.set()
    assert (await first).status_code == 200


class FailingEngine(ScriptedEngine):
    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        *,
        constraint: Constraint | None = None,
        cancel: threading.Event | None = None,
        logits_processor: LogitsProcessor | None = None,
    ) -> Iterator[GenerationEvent]:
        raise RuntimeError("GPU on fire")
        yield  # pragma: no cover


async def test_engine_failure_is_500_and_server_survives(scripted) -> None:
    client, _ = scripted(engines=[FailingEngine()])
    body = {"model": "scripted", "messages": [{"role": "user", "content": "x"}]}
    r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 500
    assert_openai_error(r.json(), "engine_error")
    # Streaming too: the first event is pulled before the response starts, so the status is real.
    streamed = await client.post("/v1/chat/completions", json={**body, "stream": True})
    assert streamed.status_code == 500
    assert_openai_error(streamed.json(), "engine_error")
    assert (await client.get("/health")).status_code == 200


async def test_unknown_route_and_method(scripted) -> None:
    client, _ = scripted()
    r = await client.get("/v1/nope")
    assert r.status_code == 404
    assert_openai_error(r.json())
    r = await client.get("/v1/chat/completions")
    assert r.status_code == 405


async def test_auth_required_when_key_set(scripted) -> None:
    client, _ = scripted(["ok"], api_key="s3cret")
    body = {"model": "scripted", "messages": [{"role": "user", "content": "x"}]}
    r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 401
    assert_openai_error(r.json(), "invalid_api_key")
    r = await client.post("/v1/chat/completions", json=body, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    r = await client.post("/v1/chat/completions", json=body, headers={"Authorization": "Bearer s3cret"})
    assert r.status_code == 200
    assert (await client.get("/health")).status_code == 200


async def test_unfittable_system_prompt_is_not_worded_as_an_overflow(scripted) -> None:
    """Compaction cannot help when system + tools alone overflow: clients that compact on overflow
    wording (opencode) must get a different error instead of looping."""
    client, _ = scripted(engines=[ScriptedEngine(["x"], n_ctx=300)])
    body = {
        "model": "scripted",
        "messages": [{"role": "system", "content": "rule " * 100}, {"role": "user", "content": "hi"}],
    }
    r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    err = assert_openai_error(r.json(), "system_prompt_too_large")
    message = str(err["message"]).lower()
    assert "context length exceeded" not in message and "too long" not in message
    assert "300" in message


async def test_streaming_request_with_a_full_queue_is_still_429(scripted) -> None:
    engine = ScriptedEngine(["slow reply"], pause_after=1)
    client, _ = scripted(engines=[engine], queue_limit=0)
    body = {"model": "scripted", "messages": [{"role": "user", "content": "x"}]}
    first = asyncio.create_task(client.post("/v1/chat/completions", json=body))
    await asyncio.to_thread(engine.paused.wait, 5)
    r = await client.post("/v1/chat/completions", json={**body, "stream": True})
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    engine.resume.set()
    assert (await first).status_code == 200
