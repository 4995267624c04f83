"""tether in front of tether: a scripted tether is a real OpenAI-compatible server to test the
``openai`` backend kind against, on real sockets.

The back server runs preset ``bare`` with ``constrain: off``, so whatever the scripted engine
writes reaches the front unguarded; :class:`Recorded` keeps the body of every chat request the
front sends it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.support.scripted import scripted_app
from tests.support.socket_server import serving
from tether.config import ServerConfig
from tether.engine.scripted import ScriptedEngine
from tether.server import build_app

__all__ = ["LIST_DIR", "Recorded", "back_server", "call", "front_server"]

LIST_DIR = {
    "type": "function",
    "function": {
        "name": "list_dir",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}


def call(name: str, arguments: dict[str, Any]) -> str:
    """A scripted reply in the generic format: one call."""
    return json.dumps({"tool_calls": [{"name": name, "arguments": arguments}]})


class Recorded:
    """An app that keeps the JSON body of every ``POST /v1/chat/completions`` it is sent; the fields
    in ``ignore`` are then left out (a server that does not know them)."""

    def __init__(self, app: ASGIApp, ignore: tuple[str, ...] = ()) -> None:
        self.app = app
        self.ignore = ignore
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            await self.app(scope, receive, send)
            return
        parts: list[bytes] = []
        more = True
        while more:
            message = await receive()
            parts.append(message.get("body", b""))
            more = bool(message.get("more_body"))
        body = b"".join(parts)
        data = json.loads(body)
        self.bodies.append(data)
        if self.ignore:
            body = json.dumps({k: v for k, v in data.items() if k not in self.ignore}).encode()
        pending = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay() -> Message:
            return pending.pop() if pending else await receive()  # then the client's disconnect

        await self.app(scope, replay, send)


@contextmanager
def back_server(
    engine: ScriptedEngine, *, ignore: tuple[str, ...] = (), **config: Any
) -> Iterator[tuple[str, Recorded]]:
    """A scripted tether that passes its engine's output through: its URL and its recorder."""
    app = Recorded(scripted_app(engine, **{"preset": "bare", "constrain": "off", **config}), ignore)
    with serving(app) as url:
        yield url, app


@contextmanager
def front_server(back: str, **config: Any) -> Iterator[str]:
    """tether with ``--backend back --backend-kind openai``, assembled as ``tether serve`` does."""
    cfg = ServerConfig(**{"backend": back, "backend_kind": "openai", "preset": "full", **config})
    with serving(build_app(cfg)) as url:
        yield url
