"""``/v1/models``, ``/v1/completions``, ``/health`` and ``/docs``."""

from __future__ import annotations

from tests.conftest import sse_events


async def test_models_lists_served_model_with_metadata(scripted) -> None:
    client, _ = scripted(model_aliases=("my-alias",))
    body = (await client.get("/v1/models")).json()
    ids = [m["id"] for m in body["data"]]
    assert ids[:2] == ["scripted", "my-alias"]
    meta = body["data"][0]["tether"]
    assert meta["n_ctx"] == 4096 and meta["tool_format"] == "generic"
    r = await client.post(
        "/v1/chat/completions", json={"model": "my-alias", "messages": [{"role": "user", "content": "x"}]}
    )
    assert r.status_code == 200


async def test_completions_plain_and_streamed(scripted) -> None:
    client, engines = scripted(["world"])
    body = (
        await client.post("/v1/completions", json={"model": "scripted", "prompt": "hello ", "max_tokens": 10})
    ).json()
    assert body["object"] == "text_completion"
    assert body["choices"][0]["text"] == "world"
    assert engines[0].prompts[-1] == "hello "
    events = sse_events(
        (
            await client.post("/v1/completions", json={"model": "scripted", "prompt": "hi", "stream": True})
        ).text
    )
    assert "".join(e["choices"][0]["text"] for e in events[:-1] if e["choices"]) == "world"


async def test_health_and_docs(scripted) -> None:
    client, _ = scripted()
    health = (await client.get("/health")).json()
    assert health["status"] == "ok"
    assert health["scheduler"]["slots"] == 1
    assert (await client.get("/docs")).status_code == 200
    assert "/v1/chat/completions" in (await client.get("/openapi.json")).json()["paths"]
