"""Errors on ``/v1/messages``: Anthropic's shape, the OpenAI path's statuses, mid-stream ``event: error``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from tests.unit.proxy.test_anthropic import anthropic_events, msg
from tether.engine.base import Constraint, GenerationEvent, LogitsProcessor, SamplingParams
from tether.engine.scripted import ScriptedEngine


def assert_anthropic_error(r: Any, status: int, kind: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == kind
    message = body["error"]["message"]
    assert isinstance(message, str) and message
    return message


async def test_validation_and_malformed_json(scripted) -> None:
    client, _ = scripted()
    r = await client.post("/v1/messages", content=b"{oops", headers={"content-type": "application/json"})
    assert "not valid JSON" in assert_anthropic_error(r, 400, "invalid_request_error")
    r = await client.post(
        "/v1/messages", json={"model": "scripted", "messages": [{"role": "user", "content": "x"}]}
    )
    assert "max_tokens" in assert_anthropic_error(r, 400, "invalid_request_error")
    r = await client.post("/v1/messages", json=msg(temperature=1.5))
    assert "temperature" in assert_anthropic_error(r, 400, "invalid_request_error")


async def test_unknown_model_and_path(scripted) -> None:
    client, _ = scripted()
    r = await client.post("/v1/messages", json={**msg(), "model": "claude-sonnet-4-5"})
    assert "scripted" in assert_anthropic_error(r, 404, "not_found_error")
    r = await client.post("/v1/messages/batches", json=msg())
    assert_anthropic_error(r, 404, "not_found_error")


async def test_auth_by_x_api_key_or_bearer(scripted) -> None:
    client, _ = scripted(["ok"], api_key="s3cret")
    assert_anthropic_error(await client.post("/v1/messages", json=msg()), 401, "authentication_error")
    r = await client.post("/v1/messages", json=msg(), headers={"x-api-key": "wrong"})
    assert_anthropic_error(r, 401, "authentication_error")
    for headers in ({"x-api-key": "s3cret"}, {"Authorization": "Bearer s3cret"}):
        r = await client.post(
            "/v1/messages", json=msg(), headers={**headers, "anthropic-version": "2023-06-01"}
        )
        assert r.status_code == 200, r.text
    # The OpenAI path keeps OpenAI's shape.
    r = await client.post(
        "/v1/chat/completions", json={"model": "scripted", "messages": [{"role": "user", "content": "x"}]}
    )
    assert r.status_code == 401 and set(r.json()) == {"error"}


async def test_oversized_body(scripted) -> None:
    client, _ = scripted(max_body_bytes=1000)
    assert_anthropic_error(await client.post("/v1/messages", json=msg("x" * 5000)), 413, "request_too_large")


async def test_context_overflow_uses_anthropic_wording(scripted) -> None:
    client, _ = scripted(engines=[ScriptedEngine(["x"], n_ctx=200)])
    for stream in (False, True):
        r = await client.post("/v1/messages", json=msg("y" * 400, stream=stream))
        message = assert_anthropic_error(r, 400, "invalid_request_error")
        assert "prompt is too long:" in message and "> 200 maximum" in message
    # A large max_tokens is clamped, as on the OpenAI path, not an overflow.
    assert (await client.post("/v1/messages", json={**msg(), "max_tokens": 100_000})).status_code == 200


async def test_queue_full_is_429_even_when_streaming(scripted) -> None:
    engine = ScriptedEngine(["slow reply"], pause_after=1)
    client, _ = scripted(engines=[engine], queue_limit=0)
    first = asyncio.create_task(client.post("/v1/messages", json=msg()))
    await asyncio.to_thread(engine.paused.wait, 5)
    for stream in (False, True):
        r = await client.post("/v1/messages", json=msg(stream=stream))
        assert_anthropic_error(r, 429, "rate_limit_error")
        assert r.headers["retry-after"] == "1"
    engine.resume.set()
    assert (await first).status_code == 200


class BreaksMidway(ScriptedEngine):
    """Streams a few tokens, then fails like a crashed backend."""

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        *,
        constraint: Constraint | None = None,
        cancel: threading.Event | None = None,
        logits_processor: LogitsProcessor | None = None,
    ) -> Iterator[GenerationEvent]:
        for i, event in enumerate(
            super().generate(
                prompt, params, constraint=constraint, cancel=cancel, logits_processor=logits_processor
            )
        ):
            if i == 3:
                raise RuntimeError("GPU on fire")
            yield event


async def test_engine_failure_before_and_after_the_first_event(scripted) -> None:
    client, _ = scripted(engines=[BreaksMidway(["abcdefgh"])])
    assert_anthropic_error(await client.post("/v1/messages", json=msg()), 500, "api_error")
    r = await client.post("/v1/messages", json=msg(stream=True))
    assert r.status_code == 200
    events = anthropic_events(r.text)
    names = [n for n, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"] and names[-1] == "error"
    assert "message_stop" not in names
    assert events[-1][1]["error"]["type"] == "api_error" and "engine" in events[-1][1]["error"]["message"]
    assert (await client.get("/health")).status_code == 200
