"""Serving an app on a real loopback socket (uvicorn in a thread), as clients meet it.

Connection behaviour — disconnects, streaming, timeouts, concurrency — is tested through
this, never through an in-process transport, which hides what a closed socket does.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import httpx
import uvicorn

__all__ = ["ask_with_tools", "free_port", "serving", "wait_for"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(app: Any, *, lifespan: Literal["auto", "on", "off"] = "off", **config: Any) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` with ``app`` served by uvicorn until the block exits."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan=lifespan, **config)
    )
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)


def wait_for(base: str, predicate: Any, *, timeout: float = 5.0) -> dict[str, Any]:
    """Poll ``/health`` until ``predicate(scheduler snapshot)`` holds; the snapshot, or AssertionError."""
    deadline = time.monotonic() + timeout
    snap: dict[str, Any] = {}
    while time.monotonic() < deadline:
        snap = httpx.get(f"{base}/health", timeout=5).json()["scheduler"]
        if predicate(snap):
            return snap
        time.sleep(0.02)
    raise AssertionError(f"/health never satisfied the condition: {snap}")


def ask_with_tools(
    base: str, question: str, tools: list[dict[str, Any]], max_tokens: int = 128
) -> dict[str, Any]:
    """One greedy user question with ``tools`` offered, POSTed to ``base``'s chat completions; the
    200 reply's JSON."""
    body = {
        "model": "smollm2-135m-instruct",
        "messages": [{"role": "user", "content": question}],
        "tools": tools,
        "temperature": 0,
        "max_tokens": max_tokens,
    }
    r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return dict(r.json())
