"""Pure ASGI middleware: request ids and logging, API-key auth, request-body limit, disconnects,
and re-wrapping errors in another protocol's shape.

Pure ASGI (not ``BaseHTTPMiddleware``) so streaming responses and client
disconnects pass straight through.
"""

from __future__ import annotations

import hmac
import json
import secrets
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import anyio
import structlog
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.errors import AuthenticationError, PayloadTooLargeError, TetherError

__all__ = [
    "AuthMiddleware",
    "BodyLimitMiddleware",
    "DisconnectMiddleware",
    "ErrorShapeMiddleware",
    "JsonBodyMiddleware",
    "RequestContextMiddleware",
    "send_error",
]

log = structlog.get_logger("tether.access")

OPEN_PATHS = frozenset({"/health", "/docs", "/openapi.json", "/docs/oauth2-redirect"})
# The dashboard also takes the key as ``?key=``: a browser's EventSource cannot send headers.
QUERY_KEY_PREFIX = "/ui"


async def send_error(send: Send, exc: TetherError) -> None:
    body = json.dumps(exc.to_openai()).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in exc.headers().items()]
    await send({"type": "http.response.start", "status": exc.status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class _HttpMiddleware:
    """Passes every scope but ``http`` straight through; subclasses handle HTTP in ``http``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class RequestContextMiddleware(_HttpMiddleware):
    """Binds a request id to structlog's context and logs one line per request."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        rid = secrets.token_hex(8)
        scope.setdefault("state", {})["request_id"] = rid
        status = {"code": 0}
        started = time.monotonic()

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                message.setdefault("headers", []).append((b"x-request-id", rid.encode()))
            await send(message)

        with structlog.contextvars.bound_contextvars(request_id=rid):
            try:
                await self.app(scope, receive, send_wrapper)
            finally:
                log.info(
                    "http_request",
                    method=scope.get("method"),
                    path=scope.get("path"),
                    status=status["code"],
                    seconds=round(time.monotonic() - started, 4),
                )


class AuthMiddleware(_HttpMiddleware):
    """Bearer (or ``x-api-key``) check with a constant-time compare when a key is configured; the
    dashboard (``/ui``) also takes ``?key=``."""

    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        super().__init__(app)
        self.key = api_key.encode() if api_key else None

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.key is None or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        given = b""
        auth = headers.get(b"authorization", b"")
        if auth[:7].lower() == b"bearer ":
            given = auth[7:].strip()
        elif b"x-api-key" in headers:
            given = headers[b"x-api-key"].strip()
        path = str(scope.get("path", ""))
        if not given and (path == QUERY_KEY_PREFIX or path.startswith(QUERY_KEY_PREFIX + "/")):
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            given = query.get("key", [""])[0].encode()
        if not hmac.compare_digest(given, self.key):
            await send_error(
                send, AuthenticationError("invalid or missing API key: send 'Authorization: Bearer KEY'")
            )
            return
        await self.app(scope, receive, send)


class JsonBodyMiddleware(_HttpMiddleware):
    """Reads a request body as JSON whatever it says it is, as Ollama and llama-server do: ``curl -d``
    sends ``application/x-www-form-urlencoded``, and every tether route takes JSON. A body that is not
    JSON is then refused as that ("request body is not valid JSON"), not as a form."""

    _PLAIN = (b"", b"application/x-www-form-urlencoded", b"text/plain")

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = list(scope.get("headers") or [])
        kind = next((v for k, v in headers if k == b"content-type"), b"")
        if scope.get("method") in ("POST", "PUT") and kind.split(b";")[0].strip().lower() in self._PLAIN:
            headers = [(k, v) for k, v in headers if k != b"content-type"]
            scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self.app(scope, receive, send)


class BodyLimitMiddleware(_HttpMiddleware):
    """Refuses bodies over ``limit`` bytes with 413, by header and by counting what arrives."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        super().__init__(app)
        self.limit = limit

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        too_big = PayloadTooLargeError(f"request body exceeds {self.limit} bytes")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await send_error(send, too_big)
            return
        seen = {"n": 0, "started": False}

        async def limited_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                seen["n"] += len(message.get("body", b""))
                if seen["n"] > self.limit:
                    raise _BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["started"] = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not seen["started"]:
                await send_error(send, too_big)


class _BodyTooLarge(Exception):
    pass


class DisconnectMiddleware(_HttpMiddleware):
    """Cancels a request's work the moment its client goes away.

    The body is read first and replayed to the app, which then runs beside a watcher on
    the real ``receive``: an ``http.disconnect`` — the client hung up while queued, while
    the engine generates, mid-stream or while the guard regenerates — cancels the app's
    task, and the streams it holds close (see :mod:`tether.aio`), freeing the slot.
    A failed ``send`` to a closed connection counts the same.
    """

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        body: list[Message] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body.append(message)
            if not message.get("more_body"):
                break
        gone = anyio.Event()
        sent = {"all": False}

        async def replay() -> Message:
            if body:
                return body.pop(0)
            await gone.wait()
            return {"type": "http.disconnect"}

        async def guarded_send(message: Message) -> None:
            try:
                await send(message)
            except OSError:
                gone.set()
                raise
            if message["type"] == "http.response.body" and not message.get("more_body"):
                sent["all"] = True

        failure: Exception | None = None
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                if sent["all"]:
                    return  # the server closes after a complete response: not a hang-up
                gone.set()
                log.info("client_disconnected", path=scope.get("path"))
                group.cancel_scope.cancel()

            group.start_soon(watch)
            try:
                await self.app(scope, replay, guarded_send)
            except (OSError, ClientDisconnect) as exc:
                if not gone.is_set():
                    failure = exc
                else:
                    log.info("client_disconnected", path=scope.get("path"), while_sending=True)
            except Exception as exc:  # re-raised below as itself, not wrapped in an ExceptionGroup
                failure = exc
            finally:
                group.cancel_scope.cancel()
        if failure is not None:
            raise failure


class ErrorShapeMiddleware(_HttpMiddleware):
    """Re-wraps OpenAI-shaped JSON errors on the paths under ``prefix`` with ``shape(status, message)``.

    Errors raised before a route runs (auth, body limit, request validation, unknown paths,
    unexpected faults) are written by the shared handlers in OpenAI's shape; this keeps their
    status and message and changes only the envelope. Bodies in any other shape, and every
    non-error response (streams included), pass through untouched.
    """

    def __init__(self, app: ASGIApp, *, prefix: str, shape: Callable[[int, str], dict[str, Any]]) -> None:
        super().__init__(app)
        self.prefix = prefix
        self.shape = shape

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if not (path == self.prefix or path.startswith(self.prefix + "/")):
            await self.app(scope, receive, send)
            return
        held: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def reshaping_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                is_json = headers.get(b"content-type", b"").startswith(b"application/json")
                if message["status"] >= 400 and is_json:
                    held["start"] = message
                    return
            elif message["type"] == "http.response.body" and "start" in held:
                chunks.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                await self._send_reshaped(send, held["start"], b"".join(chunks))
                return
            await send(message)

        await self.app(scope, receive, reshaping_send)

    async def _send_reshaped(self, send: Send, start: Message, body: bytes) -> None:
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        # OpenAI's shape: one "error" object and nothing beside it (Anthropic's has a "type" too).
        if isinstance(data, dict) and isinstance(data.get("error"), dict) and "type" not in data:
            message = str(data["error"].get("message") or "error")
            body = json.dumps(self.shape(int(start["status"]), message)).encode()
        headers = [(k, v) for k, v in start.get("headers") or [] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})
