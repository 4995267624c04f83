"""A tether server over a scripted engine, for driving real clients: ``python -m tests.clients.scripted_server``.

The engine answers from the prompt, in the generic tool format tether uses for
templates without tool support:

* no tools offered (title or summary requests): ``--plain`` text;
* the last user turn is a tool result (``Result of NAME:``): ``{"response": FINAL}``;
* otherwise: one call ``{"tool_calls": [{"name": TOOL, "arguments": ARGS}]}``;
* with ``--reply-file``: that file's text for every request (aider: no tools).

Every request and response is appended to ``--log`` as one JSON line
(``path``, ``headers``, ``body``, ``status``, ``response``), so the tests can check
what each client sent and received.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.proxy.app import create_app

__all__ = ["Recorder", "build_app", "main", "reply_policy"]

KEPT_HEADERS = ("user-agent", "content-type", "authorization", "x-api-key", "anthropic-version")


def reply_policy(tool: str, arguments: dict[str, Any], final: str, plain: str) -> Callable[[str], str]:
    """The scripted reply for a prompt (see the module docstring)."""

    def reply(prompt: str) -> str:
        if "You can call these tools:" not in prompt:
            return plain
        last_user = prompt.rsplit("<|im_start|>user\n", 1)[-1]
        if last_user.startswith("Result of "):
            return json.dumps({"response": final})
        return json.dumps({"tool_calls": [{"name": tool, "arguments": arguments}]})

    return reply


class Recorder:
    """ASGI middleware appending each request with its response to a JSON-lines file."""

    def __init__(self, app: ASGIApp, path: Path) -> None:
        self.app = app
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = bytearray()
        out = bytearray()
        status = {"code": 0}

        async def recv() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
            return message

        async def snd(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            elif message["type"] == "http.response.body":
                out.extend(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, recv, snd)
        finally:
            headers = {
                k.decode(): v.decode() for k, v in scope.get("headers") or [] if k.decode() in KEPT_HEADERS
            }
            try:
                parsed: Any = json.loads(body) if body else None
            except ValueError:
                parsed = body.decode(errors="replace")
            entry = {
                "method": scope.get("method"),
                "path": scope.get("path"),
                "query": scope.get("query_string", b"").decode(),
                "headers": headers,
                "body": parsed,
                "status": status["code"],
                "response": out.decode(errors="replace"),
            }
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry) + "\n")


def build_app(args: argparse.Namespace) -> ASGIApp:
    if args.reply_file:
        text = Path(args.reply_file).read_text(encoding="utf-8")
        reply: Callable[[str], str] = lambda _prompt: text  # noqa: E731
    else:
        reply = reply_policy(args.tool, json.loads(args.arguments), args.final, args.plain)
    # Bytes are tokens here, so the window is large enough for any client's system prompt.
    engine = ScriptedEngine([reply], n_ctx=args.ctx, model_id=args.model)
    config = ServerConfig(port=args.port, constrain="names", default_max_tokens=args.max_tokens)
    return Recorder(create_app(config, Scheduler([engine])), Path(args.log))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--tool", default="write")
    parser.add_argument("--arguments", default="{}")
    parser.add_argument("--final", default="Done.")
    parser.add_argument("--plain", default="Scripted title")
    parser.add_argument("--reply-file")
    parser.add_argument("--ctx", type=int, default=2_000_000)
    parser.add_argument("--max-tokens", type=int, default=200_000)
    args = parser.parse_args()
    uvicorn.run(build_app(args), host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
