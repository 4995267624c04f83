"""Ollama-compatible routes: ``/api/chat``, ``/api/generate``, ``/api/tags``, ``/api/show``, ``/api/ps``,
``/api/version``.

A thin translator like the OpenAI and Anthropic routes: a chat (or templated generate) request
becomes a ``ChatJob`` (:mod:`tether.proxy.ollama_convert`) and enters the same turn pipeline, so
the same guardrails apply (the server's preset, or ``"tether": {"preset": ...}`` in the body). A
``raw`` generate skips the template and the turn stages, as ``/v1/completions`` does.

Replies stream as NDJSON (one JSON object a line, ``application/x-ndjson``), Ollama's default;
``"stream": false`` gets one object. Each tool call leaves whole, arguments as an object. Errors
before the first event keep their HTTP status; after it, an ``{"error": ...}`` line ends the stream.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from tether.aio import prime
from tether.calls import ToolCall
from tether.errors import InvalidRequestError, TetherError
from tether.guardrails.presets import PRESETS
from tether.proxy.ollama_convert import (
    OLLAMA_VERSION,
    Clock,
    OllamaChatRequest,
    OllamaGenerateRequest,
    OllamaShowRequest,
    final_fields,
    job_from_ollama_chat,
    job_from_ollama_generate,
    model_entry,
    model_info,
    ollama_error,
    ollama_tool_call,
    timestamp,
)
from tether.proxy.sse import EventStreamResponse, event_stream
from tether.proxy.state import AppState
from tether.proxy.wire import app_state, check_model, interventions_field, session_of
from tether.turns.events import TextOut, TurnEvent, collect

__all__ = ["router"]


class _JsonBody(APIRoute):
    """Reads every request body as JSON, whatever its content type, as Ollama does: its documented
    ``curl … -d '{…}'`` sends ``application/x-www-form-urlencoded``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            headers = [(k, v) for k, v in request.scope["headers"] if k != b"content-type"]
            scope = {**request.scope, "headers": [*headers, (b"content-type", b"application/json")]}
            return await handler(Request(scope, request.receive))

        return route


router = APIRouter(prefix="/api", route_class=_JsonBody)

NDJSON = "application/x-ndjson"
NEVER = "9999-12-31T23:59:59Z"  # /api/ps: the served model is never unloaded

# One part of a reply in the route's shape: (text, calls already in Ollama's shape) -> fields.
Part = Callable[[str, list[dict[str, Any]]], dict[str, Any]]


def _chat_part(text: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return {"message": message}


def _generate_part(text: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {"response": text}


def _line(data: dict[str, Any]) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode() + b"\n"


def _head(model: str) -> dict[str, Any]:
    return {"model": model, "created_at": timestamp()}


def _error_response(exc: TetherError) -> JSONResponse:
    return JSONResponse(ollama_error(exc), status_code=exc.status, headers=exc.headers())


def _check(state: AppState, name: str) -> None:
    """Ollama clients add ``:latest`` to a name without a tag; both spellings are served."""
    if name not in state.model_names and name.endswith(":latest"):
        name = name.removesuffix(":latest")
    check_model(state, name)


def _loaded(model: str, part: Part) -> JSONResponse:
    """Ollama's answer to a request with nothing to generate: the model is loaded."""
    return JSONResponse({**_head(model), **part("", []), "done": True, "done_reason": "load"})


@router.post("/chat", response_model=None)
async def chat(body: OllamaChatRequest, request: Request) -> JSONResponse | EventStreamResponse:
    def begin(state: AppState) -> AsyncIterator[TurnEvent] | None:
        job = job_from_ollama_chat(
            body, default_temperature=state.config.default_temperature, default_guard=state.default_guard
        )
        return state.start(job, session_of(request)) if job.messages else None

    return await _answer(request, body.model, body.stream, _chat_part, begin)


@router.post("/generate", response_model=None)
async def generate(body: OllamaGenerateRequest, request: Request) -> JSONResponse | EventStreamResponse:
    def begin(state: AppState) -> AsyncIterator[TurnEvent] | None:
        job = job_from_ollama_generate(
            body, default_temperature=state.config.default_temperature, default_guard=state.default_guard
        )
        if not body.prompt:
            return None
        if body.raw:
            raw = replace(job, messages=(), guard=PRESETS["bare"])
            return state.recorder.track(state.core.run(state.core.prepare_raw(raw, body.prompt)), raw)
        return state.start(job, session_of(request))

    return await _answer(request, body.model, body.stream, _generate_part, begin)


async def _answer(
    request: Request,
    model: str,
    stream: bool,
    part: Part,
    begin: Callable[[AppState], AsyncIterator[TurnEvent] | None],
) -> JSONResponse | EventStreamResponse:
    """What both generating routes do around ``begin`` (the route's job and its events; None when
    there is nothing to generate, so the answer is that the model is loaded)."""
    state = app_state(request)
    clock = Clock()
    try:
        _check(state, model)
        events = begin(state)
        if events is None:
            return _loaded(model, part)
        # The first event before answering: a full queue is still a 429, an overflow a 400.
        events = await prime(events)
    except TetherError as exc:
        return _error_response(exc)
    clock.mark_first()
    return await _reply(events, model, stream, clock, part)


async def _reply(
    events: AsyncIterator[TurnEvent], model: str, stream: bool, clock: Clock, part: Part
) -> JSONResponse | EventStreamResponse:
    if stream:
        return EventStreamResponse(_stream(events, model, clock, part), source=events, media_type=NDJSON)
    reply = await collect(events)
    calls = [ollama_tool_call(c, i) for i, c in enumerate(reply.calls)]
    body = {**_head(model), **part(reply.text, calls), **final_fields(reply.finish, clock)}
    body.update(interventions_field(reply.finish))
    return JSONResponse(body)


def _stream(events: AsyncIterator[TurnEvent], model: str, clock: Clock, part: Part) -> AsyncIterator[bytes]:
    index = itertools.count()

    def translate(ev: TurnEvent) -> list[bytes]:
        if isinstance(ev, TextOut):
            return [_line({**_head(model), **part(ev.text, []), "done": False})]
        if isinstance(ev, ToolCall):
            return [_line({**_head(model), **part("", [ollama_tool_call(ev, next(index))]), "done": False})]
        final = {**_head(model), **part("", []), **final_fields(ev, clock)}
        final.update(interventions_field(ev))
        return [_line(final)]

    return event_stream(events, translate, lambda exc: _line(ollama_error(exc)))


def _entry(state: AppState, name: str) -> dict[str, Any]:
    info = state.core.info
    return model_entry(name, info.path, info.metadata, state.started)


@router.get("/tags")
async def tags(request: Request) -> dict[str, Any]:
    state = app_state(request)
    return {"models": [_entry(state, name) for name in state.model_names]}


@router.get("/ps")
async def ps(request: Request) -> dict[str, Any]:
    state = app_state(request)
    running = {**_entry(state, state.model_id), "expires_at": NEVER, "size_vram": 0}
    return {"models": [{**running, "context_length": state.core.info.n_ctx}]}


@router.post("/show", response_model=None)
async def show(body: OllamaShowRequest, request: Request) -> JSONResponse:
    state = app_state(request)
    name = body.model or body.name
    try:
        if not name:
            raise InvalidRequestError("model is required", param="model")
        _check(state, name)
    except TetherError as exc:
        return _error_response(exc)
    info = state.core.info
    entry = _entry(state, name)
    return JSONResponse(
        {
            "modelfile": f"# served by tether\nFROM {info.path or info.model_id}\n",
            "parameters": f"num_ctx {info.n_ctx}",
            "template": info.chat_template or "",
            "license": "",
            "details": entry["details"],
            "model_info": model_info(info.metadata, info.n_ctx),
            "capabilities": ["completion", "tools"],
            "modified_at": entry["modified_at"],
        }
    )


@router.get("/version")
async def version() -> dict[str, str]:
    return {"version": OLLAMA_VERSION}
