"""Anthropic-compatible routes: ``POST /v1/messages`` (streaming and not) and ``/v1/messages/count_tokens``.

A thin adapter over the same ``ChatCore`` as the OpenAI routes: the request becomes
a ``ChatJob`` (see :mod:`tether.proxy.anthropic_convert`), and the core's events
become Anthropic content blocks. A streamed reply follows Anthropic's event order:
``message_start``, then per block ``content_block_start`` (the first followed by a
``ping``), ``content_block_delta``…, ``content_block_stop``, then ``message_delta``
(stop reason, usage) and ``message_stop``. A tool call is sent once it is complete,
its arguments as ``input_json_delta`` fragments that concatenate to the final JSON.

Errors raised before the first event (bad request, unknown model, context
overflow, full queue) keep their HTTP status; errors after it arrive as an
``event: error`` in the stream, as Anthropic sends them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from tether.aio import prime
from tether.calls import ToolCall
from tether.errors import TetherError
from tether.proxy.anthropic_convert import (
    AnthropicErrorMiddleware,
    anthropic_error,
    job_from_anthropic,
    stop_fields,
    tool_use_id,
    usage_body,
)
from tether.proxy.anthropic_schema import CountTokensRequest, MessagesRequest
from tether.proxy.sse import EventStreamResponse, event_stream
from tether.proxy.wire import app_state, check_model, interventions_field, session_of
from tether.turns.events import TextOut, TurnEvent, collect

__all__ = ["AnthropicErrorMiddleware", "router"]

router = APIRouter(prefix="/v1")

# Long arguments (file contents) leave in a few fragments of at most this many characters.
FRAGMENT_CHARS = 512


def _error_response(exc: TetherError) -> JSONResponse:
    return JSONResponse(anthropic_error(exc), status_code=exc.status, headers=exc.headers())


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _fragments(arguments: str) -> list[str]:
    return [arguments[i : i + FRAGMENT_CHARS] for i in range(0, len(arguments), FRAGMENT_CHARS)] or ["{}"]


@router.post("/messages", response_model=None)
async def messages(body: MessagesRequest, request: Request) -> JSONResponse | EventStreamResponse:
    """Anthropic Messages API; ``anthropic-version``/``anthropic-beta`` headers and query strings are accepted."""
    state = app_state(request)
    msg_id = "msg_" + request.state.request_id
    try:
        check_model(state, body.model)
        job = job_from_anthropic(
            body, default_temperature=state.config.default_temperature, default_guard=state.default_guard
        )
        events = state.start(job, session_of(request))
        if not body.stream:
            return JSONResponse(await _collect(events, msg_id, body.model))
        input_tokens = state.core.count_tokens(job)  # before the generation starts: nothing to close
        # Pull the first event before answering, so a full queue is still a 429 (which SDKs retry).
        events = await prime(events)
    except TetherError as exc:
        return _error_response(exc)
    start_usage = {
        "input_tokens": input_tokens,
        "output_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    return EventStreamResponse(_stream(events, msg_id, body.model, start_usage), source=events)


@router.post("/messages/count_tokens", response_model=None)
async def count_tokens(body: CountTokensRequest, request: Request) -> JSONResponse:
    """Prompt tokens of a request, as the model would see it (tools included); counts past the window too."""
    state = app_state(request)
    try:
        check_model(state, body.model)
        job = job_from_anthropic(
            body, default_temperature=state.config.default_temperature, default_guard=state.default_guard
        )
        n = state.core.count_tokens(job)
    except TetherError as exc:
        return _error_response(exc)
    return JSONResponse({"input_tokens": n})


def _message(msg_id: str, model: str, content: list[dict[str, Any]], usage: dict[str, int]) -> dict[str, Any]:
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }


async def _collect(events: AsyncIterator[TurnEvent], msg_id: str, model: str) -> dict[str, Any]:
    reply = await collect(events)
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    content += [_tool_use(call) for call in reply.calls]
    body = _message(msg_id, model, content, usage_body(reply.finish.usage))
    body["stop_reason"], body["stop_sequence"] = stop_fields(reply.finish)
    body.update(interventions_field(reply.finish))
    return body


def _tool_use(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": dict(call.arguments)}


class _Blocks:
    """Numbers content blocks and keeps at most one open, emitting start/stop events around them."""

    def __init__(self) -> None:
        self.index = -1
        self.open: str | None = None
        self.pinged = False

    def start(self, block: dict[str, Any]) -> list[bytes]:
        out = self.stop()
        self.index += 1
        self.open = str(block["type"])
        out.append(
            _event(
                "content_block_start",
                {"type": "content_block_start", "index": self.index, "content_block": block},
            )
        )
        if not self.pinged:
            self.pinged = True
            out.append(_event("ping", {"type": "ping"}))
        return out

    def delta(self, delta: dict[str, Any]) -> bytes:
        return _event(
            "content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta}
        )

    def stop(self) -> list[bytes]:
        if self.open is None:
            return []
        self.open = None
        return [_event("content_block_stop", {"type": "content_block_stop", "index": self.index})]


def _stream(
    events: AsyncIterator[TurnEvent], msg_id: str, model: str, start_usage: dict[str, int]
) -> AsyncIterator[bytes]:
    blocks = _Blocks()
    start = {"type": "message_start", "message": _message(msg_id, model, [], start_usage)}
    return event_stream(
        events,
        lambda ev: _translate(ev, blocks),
        lambda exc: _event("error", anthropic_error(exc)),
        prologue=[_event("message_start", start)],
    )


def _translate(ev: TurnEvent, blocks: _Blocks) -> list[bytes]:
    if isinstance(ev, TextOut):
        out = blocks.start({"type": "text", "text": ""}) if blocks.open != "text" else []
        out.append(blocks.delta({"type": "text_delta", "text": ev.text}))
        return out
    if isinstance(ev, ToolCall):
        out = blocks.start({"type": "tool_use", "id": tool_use_id(ev.id), "name": ev.name, "input": {}})
        out += [
            blocks.delta({"type": "input_json_delta", "partial_json": p})
            for p in _fragments(ev.arguments_json())
        ]
        return out + blocks.stop()
    out = blocks.stop()
    reason, sequence = stop_fields(ev)
    delta: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": sequence},
        "usage": usage_body(ev.usage),
    }
    delta.update(interventions_field(ev))
    out.append(_event("message_delta", delta))
    out.append(_event("message_stop", {"type": "message_stop"}))
    return out
