"""Parts that die mid-session: a replica killed with SIGKILL, Redis restarted under load, a slow-loris client.

Real processes on real sockets: each replica is ``tests.support.replica`` (tether's app and uvicorn,
a scripted engine), Redis is ``redis-server``. The workflow is ordered (read the file, run the tests,
then submit), and the client drops the read turn from its history before submitting, so only the
session knows step 1 was done: a submit that goes through proves the session survived.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.support.redis_server import redis_process
from tests.support.replica import replica_process
from tests.support.socket_server import free_port

TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}
    for name, props in [
        ("read_file", {"path": {"type": "string"}}),
        ("run_tests", {}),
        ("submit", {"summary": {"type": "string"}}),
    ]
]
USER = {"role": "user", "content": "Ship a.txt"}


def body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "scripted", "messages": messages, "tools": TOOLS, **extra}


def headers(session: str) -> dict[str, str]:
    return {"X-Tether-Session": session, "X-Tether-Workflow": "ship"}


def calls_of(reply: dict[str, Any]) -> list[dict[str, Any]]:
    return reply["choices"][0]["message"].get("tool_calls") or []


def ran(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The client ran ``calls``: the assistant turn and its results."""
    turn: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
    return [turn, *({"role": "tool", "tool_call_id": c["id"], "content": "fine"} for c in calls)]


def names(calls: list[dict[str, Any]]) -> list[str]:
    return [c["function"]["name"] for c in calls]


def run_tests_call() -> list[dict[str, Any]]:
    return [{"id": "call_t", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]


def records_are_whole(url: str) -> None:
    """Every session record in Redis is one whole JSON document: nothing half-written."""
    client = redis.Redis.from_url(url)
    try:
        for key in client.scan_iter(match="tether:session:*"):
            json.loads(client.get(key) or b"{}")
    finally:
        client.close()


@pytest.fixture
def ports() -> Iterator[tuple[int, int]]:
    yield free_port(), free_port()


def test_a_replica_killed_mid_session_leaves_the_session_whole_on_the_other(
    tmp_path: Path, ports: tuple[int, int]
) -> None:
    """Step 1 is acknowledged through replica A; A is SIGKILLed while it streams the next reply; the
    client retries on B with its history trimmed, and B lets the submit through."""
    with (
        redis_process(tmp_path / "redis") as (url, _),
        replica_process(ports[0], workdir=tmp_path, session_store=url, delay=0.05) as a,
        replica_process(ports[1], workdir=tmp_path, session_store=url) as _b,
        httpx.Client(timeout=30) as http,
    ):
        base_a, base_b = (f"http://127.0.0.1:{p}" for p in ports)
        sid = "chaos-kill"
        read = http.post(f"{base_a}/v1/chat/completions", headers=headers(sid), json=body([USER]))
        assert names(calls_of(read.json())) == ["read_file"]
        history = [USER, *ran(calls_of(read.json()))]
        tests = http.post(f"{base_a}/v1/chat/completions", headers=headers(sid), json=body(history))
        assert names(calls_of(tests.json())) == ["run_tests"]  # acknowledged: step 1 is in the session

        trimmed = [USER, *ran(run_tests_call())]  # the client forgot the read; only the session knows it
        ended: list[str] = []

        def stream_on_a() -> None:
            try:
                with httpx.stream(
                    "POST",
                    f"{base_a}/v1/chat/completions",
                    headers=headers(sid),
                    json=body(trimmed, stream=True),
                    timeout=30,
                ) as r:
                    ended.extend(line for line in r.iter_lines() if line == "data: [DONE]")
                ended.append("closed")
            except httpx.HTTPError as exc:
                ended.append(type(exc).__name__)

        streaming = threading.Thread(target=stream_on_a)
        streaming.start()
        time.sleep(1.0)  # the call takes ~3 s to generate at 50 ms a token: A dies in the middle of it
        os.kill(a.pid, signal.SIGKILL)
        a.wait(10)
        streaming.join(30)
        broken = bool(ended) and ended[0] != "data: [DONE]"
        assert a.returncode == -signal.SIGKILL
        assert broken, f"the stream should break when its replica dies: {ended}"

        retry = http.post(f"{base_b}/v1/chat/completions", headers=headers(sid), json=body(trimmed))
        assert retry.status_code == 200, retry.text
        reply = retry.json()
        assert names(calls_of(reply)) == ["submit"], reply
        kinds = [n["kind"] for n in reply.get("tether", {}).get("interventions", [])]
        assert not [k for k in kinds if k.startswith("workflow_")], kinds
        state = http.get(f"{base_b}/v1/tether/sessions/{sid}").json()["state"]
        assert [s["done"] for s in state["steps"]] == [True, True], state
        records_are_whole(url)


def test_redis_restarted_under_load_loses_nothing_acknowledged(
    tmp_path: Path, ports: tuple[int, int]
) -> None:
    """Four clients keep sessions going while Redis is SIGKILLed and started again on its directory:
    every response is a 200 or a 503 with ``Retry-After``; afterwards every session that got an
    acknowledged step finishes with its history trimmed."""
    redis_dir = tmp_path / "redis"
    port = free_port()
    outcomes: list[tuple[int, bool]] = []
    acknowledged: dict[str, bool] = {}
    stop = threading.Event()

    def client(i: int, base: str) -> None:
        with httpx.Client(timeout=30) as http:
            n = 0
            while not stop.is_set():
                sid = f"load-{i}-{n}"
                r = http.post(f"{base}/v1/chat/completions", headers=headers(sid), json=body([USER]))
                outcomes.append((r.status_code, "retry-after" in r.headers))
                if r.status_code != 200:
                    continue
                history = [USER, *ran(calls_of(r.json()))]
                r = http.post(f"{base}/v1/chat/completions", headers=headers(sid), json=body(history))
                outcomes.append((r.status_code, "retry-after" in r.headers))
                if r.status_code == 200 and names(calls_of(r.json())) == ["run_tests"]:
                    acknowledged[sid] = True  # the read step was saved before this answer went out
                n += 1

    redis_cm = redis_process(redis_dir, port=port, persistent=True)
    url, redis_proc = redis_cm.__enter__()
    try:
        with (
            replica_process(ports[1], workdir=tmp_path, session_store=url) as _r,
            httpx.Client(timeout=30) as http,
        ):
            base = f"http://127.0.0.1:{ports[1]}"
            workers = [threading.Thread(target=client, args=(i, base)) for i in range(4)]
            for w in workers:
                w.start()
            time.sleep(1.5)
            before = len(acknowledged)
            redis_proc.kill()  # SIGKILL: no shutdown save; the AOF fsynced every acknowledged write
            redis_proc.wait(10)
            time.sleep(1.5)
            redis_cm.__exit__(None, None, None)
            redis_cm = redis_process(redis_dir, port=port, persistent=True)
            redis_cm.__enter__()
            time.sleep(1.5)
            stop.set()
            for w in workers:
                w.join(30)

            refused = [(s, ra) for s, ra in outcomes if s != 200]
            assert all(s == 503 and ra for s, ra in refused), refused
            assert refused, "some requests should have met Redis down"
            assert before > 0 and len(acknowledged) > before  # work went on after the restart
            for sid in list(acknowledged)[:12]:  # sessions from before, during and after the outage
                r = http.post(
                    f"{base}/v1/chat/completions",
                    headers=headers(sid),
                    json=body([USER, *ran(run_tests_call())]),
                )
                assert r.status_code == 200, r.text
                assert names(calls_of(r.json())) == ["submit"], (sid, r.json())
            records_are_whole(url)
    finally:
        redis_cm.__exit__(None, None, None)


def test_a_slow_loris_client_holds_no_slot(tmp_path: Path, ports: tuple[int, int]) -> None:
    """Twenty connections trickle their headers a byte at a time; a one-slot replica serves other
    clients meanwhile, and ``/health`` shows the slot free and nothing queued."""
    with replica_process(ports[0], workdir=tmp_path) as _, httpx.Client(timeout=10) as http:
        base = f"http://127.0.0.1:{ports[0]}"
        request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        lorises = [socket.create_connection(("127.0.0.1", ports[0])) for _ in range(20)]
        try:
            for step in range(12):  # about three seconds of trickling
                for s in lorises:
                    s.sendall(request[step : step + 1])
                time.sleep(0.25)
                say = {"model": "scripted", "messages": [{"role": "user", "content": "Say hello"}]}
                r = http.post(f"{base}/v1/chat/completions", json=say)
                assert r.status_code == 200, r.text
            snapshot = http.get(f"{base}/health").json()["scheduler"]
            assert snapshot["busy_slots"] == 0 and snapshot["queue_depth"] == 0, snapshot
        finally:
            for s in lorises:
                s.close()
