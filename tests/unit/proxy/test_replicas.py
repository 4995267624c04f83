"""Two tether replicas (uvicorn on two loopback ports, scripted engines) on one Redis enforce one workflow.

One client conversation alternates between the replicas; it must come out exactly as it does on a
single replica with the in-memory store: the out-of-order call made on replica B after step 1 on
replica A is blocked and regenerated the same way. Sessions made on one replica are visible on,
deleted through and expire on the other; Redis going away is a 503 in each protocol's error shape.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.redis_server import redis_server
from tests.support.scripted import scripted_app
from tests.support.socket_server import serving
from tether.engine.scripted import ScriptedEngine
from tether.errors import ConfigError

TTL_S = 3.0
SHIP = {
    "name": "ship",
    "tools": ["read_file", "run_tests", "submit"],
    "steps": ["read_file", "run_tests"],
    "ordered": True,
    "terminal": "submit",
}
NOTES_YAML = "name: notes\ntools: [write_note, finish]\nsteps: [write_note]\nterminal: finish\n"


def tool(name: str, **props: str) -> dict[str, Any]:
    properties = {k: {"type": v} for k, v in props.items()}
    schema = {"type": "object", "properties": properties, "required": list(props)}
    return {"type": "function", "function": {"name": name, "parameters": schema}}


TOOLS = [tool("read_file", path="string"), tool("run_tests"), tool("submit", summary="string")]


def call(name: str, **args: str) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": args}]})


def impatient_model(prompt: str) -> str:
    """Reads one file, then tries to submit at once; after a refusal calls the step it was told to.
    A function of the prompt alone, so every replica's engine answers the same turn the same way."""
    if "Not executed" in prompt:
        return call("run_tests")
    if "Result of run_tests" in prompt or "Result of read_file" in prompt:
        return call("submit", summary="done")
    return call("read_file", path="a.txt")


def replica(url: str, tmp_path: Path, store: str) -> Any:
    workflow = tmp_path / "notes.yaml"
    workflow.write_text(NOTES_YAML, encoding="utf-8")
    return scripted_app(
        ScriptedEngine([impatient_model]),
        session_store=store,
        session_ttl_s=TTL_S,
        workflows=(str(workflow),),
    )


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with redis_server(tmp_path / "redis") as url:
        yield url


@pytest.fixture
def two_replicas(redis_url: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    with ExitStack() as stack:
        a = stack.enter_context(serving(replica("a", tmp_path, redis_url), lifespan="on"))
        b = stack.enter_context(serving(replica("b", tmp_path, redis_url), lifespan="on"))
        yield a, b


USER = {"role": "user", "content": "Ship a.txt"}


def ask(http: httpx.Client, base: str, session: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One chat request of the session: the reply's calls as sent (``raw``), and its calls and
    interventions in a comparable form."""
    r = http.post(
        f"{base}/v1/chat/completions",
        headers={"X-Tether-Session": session},
        json={"model": "scripted", "messages": messages, "tools": TOOLS},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    calls = body["choices"][0]["message"].get("tool_calls") or []
    notes = body.get("tether", {}).get("interventions", [])
    return {
        "raw": calls,
        "calls": [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls],
        "interventions": [(n["kind"], n["detail"]) for n in notes],
    }


def ran(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The client ran ``calls``: the assistant turn and its tool results."""
    turn: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
    return [turn, *({"role": "tool", "tool_call_id": c["id"], "content": "fine"} for c in calls)]


def converse(http: httpx.Client, bases: list[str], session: str) -> list[dict[str, Any]]:
    """The client's agent loop, request i going to ``bases[i % len(bases)]``, until ``submit`` goes
    through; then the session's state as that last replica reports it."""
    messages: list[dict[str, Any]] = [USER]
    outcomes: list[dict[str, Any]] = []
    for i in range(4):
        base = bases[i % len(bases)]
        out = ask(http, base, session, messages)
        outcomes.append({"calls": out["calls"], "interventions": out["interventions"]})
        if any(name == "submit" for name, _ in out["calls"]):
            outcomes.append(http.get(f"{base}/v1/tether/sessions/{session}").json()["state"])
            return outcomes
        messages += ran(out["raw"])
    raise AssertionError(f"submit never went through: {outcomes}")


def trimmed(http: httpx.Client, first: str, second: str, session: str) -> list[Any]:
    """Step 1 (read_file) done through ``first``; then the client drops that turn from its history
    and sends only step 2's result (run_tests) to ``second``. Only the session knows step 1 is done,
    and in an ordered workflow step 2 counts only after it."""
    read = ask(http, first, session, [USER])
    assert read["calls"] == [("read_file", {"path": "a.txt"})]
    ask(http, first, session, [USER, *ran(read["raw"])])  # step 1's result is observed on `first`
    tests = [{"id": "call_t", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]
    final = ask(http, second, session, [USER, *ran(tests)])
    return [final["calls"], final["interventions"]]


def test_one_session_alternating_between_replicas_is_enforced_as_on_one(
    two_replicas: tuple[str, str], tmp_path: Path
) -> None:
    a, b = two_replicas
    with httpx.Client(timeout=30) as http:
        made = http.post(f"{a}/v1/tether/sessions", json={"workflow": SHIP, "session_id": "s1"})
        assert made.status_code == 201, made.text
        seen_on_b = http.get(f"{b}/v1/tether/sessions/s1").json()
        assert seen_on_b["workflow"] == "ship" and seen_on_b["state"]["pending"] == ["read_file", "run_tests"]
        across = converse(http, [a, b], "s1")  # A, B, A
        assert http.post(f"{b}/v1/tether/sessions", json={"workflow": SHIP, "session_id": "s2"}).is_success
        across_trimmed = trimmed(http, a, b, "s2")

        with serving(replica("solo", tmp_path, "memory"), lifespan="on") as solo:
            for sid in ("s1", "s2"):
                made = http.post(f"{solo}/v1/tether/sessions", json={"workflow": SHIP, "session_id": sid})
                assert made.status_code == 201
            alone = converse(http, [solo], "s1")
            alone_trimmed = trimmed(http, solo, solo, "s2")
    assert across == alone and across_trimmed == alone_trimmed
    assert [o["calls"] for o in across[:-1]] == [
        [("read_file", {"path": "a.txt"})],
        [("run_tests", {})],  # B blocked submit (run_tests pending) and regenerated
        [("submit", {"summary": "done"})],
    ]
    blocked = ("workflow_blocked", "terminal tool called early: submit(summary='done') needs run_tests")
    assert blocked in across[1]["interventions"]
    assert across[0]["interventions"] == [] and across[2]["interventions"] == []
    # Each call id counted once and the one violation kept, whichever replica saw them.
    assert across[-1]["pending"] == [] and across[-1]["calls"] == 2 and across[-1]["violations"] == 1
    # B let submit through: Redis told it step 1 was done on A (else "needs read_file, run_tests").
    assert across_trimmed == [[("submit", {"summary": "done"})], []]


def test_sessions_are_shared_deleted_and_expire_across_replicas(two_replicas: tuple[str, str]) -> None:
    a, b = two_replicas
    with httpx.Client(timeout=30) as http:
        # Lazily started on B from a registered workflow (X-Tether-Workflow), visible on A.
        lazy = {"X-Tether-Session": "lazy", "X-Tether-Workflow": "notes"}
        body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}
        assert http.post(f"{b}/v1/chat/completions", headers=lazy, json=body).status_code == 200
        assert http.get(f"{a}/v1/tether/sessions/lazy").json()["workflow"] == "notes"

        assert http.delete(f"{b}/v1/tether/sessions/lazy").json() == {"session_id": "lazy", "deleted": True}
        gone = http.get(f"{a}/v1/tether/sessions/lazy")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "session_not_found"
        unknown = http.post(f"{a}/v1/chat/completions", headers={"X-Tether-Session": "lazy"}, json=body)
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "session_not_found"

        assert http.post(f"{a}/v1/tether/sessions", json={"workflow": SHIP, "session_id": "t"}).is_success
        expires = http.get(f"{b}/v1/tether/sessions/t").json()["expires_in_s"]
        assert 0 < expires <= TTL_S
        time.sleep(TTL_S + 0.5)
        assert http.get(f"{b}/v1/tether/sessions/t").status_code == 404
        assert http.get(f"{a}/v1/tether/sessions/t").status_code == 404


async def test_redis_going_away_is_a_503_in_each_protocols_shape(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis") as url:
        app = replica("a", tmp_path, url)
    headers = {"X-Tether-Session": "s1", "X-Tether-Workflow": "notes"}
    messages = [{"role": "user", "content": "hi"}]
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
            openai = await http.post(
                "/v1/chat/completions", headers=headers, json={"model": "scripted", "messages": messages}
            )
            assert openai.status_code == 503 and openai.headers["retry-after"] == "1"
            error = openai.json()["error"]
            assert error["code"] == "session_store_unavailable" and error["type"] == "server_error"
            assert "session store (redis://127.0.0.1:" in error["message"]
            streamed = await http.post(
                "/v1/chat/completions",
                headers=headers,
                json={"model": "scripted", "messages": messages, "stream": True},
            )
            assert streamed.status_code == 503
            anthropic = await http.post(
                "/v1/messages",
                headers=headers,
                json={"model": "scripted", "max_tokens": 50, "messages": messages},
            )
            assert anthropic.status_code == 503
            assert anthropic.json()["type"] == "error"
            assert anthropic.json()["error"]["type"] == "overloaded_error"
            made = await http.post("/v1/tether/sessions", json={"workflow": "notes"})
            assert made.status_code == 503
    finally:
        await app.state.tether.sessions.close()


def test_a_replica_will_not_start_without_its_redis(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis") as url:
        pass  # started and stopped: nothing answers on that port now
    with pytest.raises(ConfigError, match="Redis does not answer"):
        replica("a", tmp_path, url)
