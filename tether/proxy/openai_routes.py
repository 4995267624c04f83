"""OpenAI-compatible routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from tether.aio import aclose_quietly, closing_stream
from tether.engine.base import SamplingParams
from tether.errors import ModelNotFoundError
from tether.proxy.convert import job_from_openai
from tether.proxy.core import CallOut, ChatJob, CoreEvent, FinishOut, TextOut, Usage, prime
from tether.proxy.guard import PRESETS
from tether.proxy.openai_schema import ChatCompletionRequest, CompletionRequest
from tether.proxy.sessions import SESSION_HEADER, WORKFLOW_HEADER, store_of
from tether.proxy.sse import EventStreamResponse, contain
from tether.proxy.state import AppState
from tether.proxy.wire import stop_strings

__all__ = ["router"]

router = APIRouter(prefix="/v1")


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.tether
    return state


def _check_model(state: AppState, model: str) -> None:
    if model not in state.model_names:
        served = ", ".join(state.model_names)
        raise ModelNotFoundError(f"model {model!r} is not served here; available: {served}", param="model")


def _usage(u: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


def _sse(data: dict[str, Any] | str) -> bytes:
    body = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {body}\n\n".encode()


@router.get("/models")
async def list_models(request: Request) -> dict[str, Any]:
    state = _state(request)
    return {"object": "list", "data": [state.model_card(name) for name in state.model_names]}


@router.post("/chat/completions", response_model=None)
async def chat_completions(
    body: ChatCompletionRequest, request: Request
) -> JSONResponse | EventStreamResponse:
    state = _state(request)
    _check_model(state, body.model)
    job = job_from_openai(
        body,
        default_temperature=state.config.default_temperature,
        default_guard=state.default_guard,
        n_vocab=state.core.info.n_vocab,
    )
    session = request.headers.get(SESSION_HEADER)
    if session is not None:
        store_of(request).resolve(session, request.headers.get(WORKFLOW_HEADER))  # 404/400 before streaming
    events = state.start(job, session)
    rid = "chatcmpl-" + request.state.request_id
    created = int(time.time())
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return EventStreamResponse(_stream_chat(await prime(events), rid, created, body.model, include_usage))
    return JSONResponse(await _collect_chat(events, rid, created, body.model))


async def _collect_chat(
    events: AsyncIterator[CoreEvent], rid: str, created: int, model: str
) -> dict[str, Any]:
    text: list[str] = []
    calls: list[CallOut] = []
    finish: FinishOut | None = None
    async with closing_stream(events) as stream:
        async for ev in stream:
            if isinstance(ev, TextOut):
                text.append(ev.text)
            elif isinstance(ev, CallOut):
                calls.append(ev)
            else:
                finish = ev
    assert finish is not None
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or (None if calls else "")}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
    body: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish.finish_reason, "logprobs": None}
        ],
        "usage": _usage(finish.usage),
    }
    if finish.interventions:
        body["tether"] = {"interventions": list(finish.interventions)}
    return body


async def _stream_chat(
    events: AsyncIterator[CoreEvent], rid: str, created: int, model: str, include_usage: bool
) -> AsyncIterator[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    yield _sse(chunk({"role": "assistant", "content": ""}))
    try:
        async for ev in events:
            if isinstance(ev, TextOut):
                yield _sse(chunk({"content": ev.text}))
            elif isinstance(ev, CallOut):
                # One delta per call carrying id, type, name and the final arguments: clients that stop
                # reading once the arguments parse (opencode) never see a placeholder.
                call = {
                    "index": ev.index,
                    "id": ev.id,
                    "type": "function",
                    "function": {"name": ev.name, "arguments": ev.arguments},
                }
                yield _sse(chunk({"tool_calls": [call]}))
            else:
                final = chunk({}, ev.finish_reason)
                if ev.interventions:
                    final["tether"] = {"interventions": list(ev.interventions)}
                yield _sse(final)
                if include_usage:
                    usage_chunk = chunk({})
                    usage_chunk["choices"] = []
                    usage_chunk["usage"] = _usage(ev.usage)
                    yield _sse(usage_chunk)
    except Exception as exc:
        yield _sse(contain(exc).to_openai())
    finally:
        await aclose_quietly(events)
    yield _sse("[DONE]")


@router.post("/completions", response_model=None)
async def completions(body: CompletionRequest, request: Request) -> JSONResponse | EventStreamResponse:
    state = _state(request)
    _check_model(state, body.model)
    prompt = body.prompt if isinstance(body.prompt, str) else "".join(body.prompt)
    job = ChatJob(
        messages=(),
        params=SamplingParams(
            temperature=state.config.default_temperature if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            seed=body.seed,
        ),
        max_tokens_requested=body.max_tokens,
        stop=stop_strings(body.stop),
        guard=PRESETS["bare"],
    )
    prepared = state.core.prepare_raw(job, prompt)
    rid = "cmpl-" + request.state.request_id
    created = int(time.time())
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        events = await prime(state.core.run(prepared))
        return EventStreamResponse(_stream_completion(events, rid, created, body.model, include_usage))
    parts: list[str] = []
    finish: FinishOut | None = None
    async with closing_stream(state.core.run(prepared)) as stream:
        async for ev in stream:
            if isinstance(ev, TextOut):
                parts.append(ev.text)
            elif isinstance(ev, FinishOut):
                finish = ev
    assert finish is not None
    text = (prompt if body.echo else "") + "".join(parts)
    return JSONResponse(
        {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": body.model,
            "choices": [{"index": 0, "text": text, "finish_reason": finish.finish_reason, "logprobs": None}],
            "usage": _usage(finish.usage),
        }
    )


async def _stream_completion(
    events: AsyncIterator[CoreEvent], rid: str, created: int, model: str, include_usage: bool
) -> AsyncIterator[bytes]:
    def chunk(text: str, finish: str | None = None) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
        }

    try:
        async for ev in events:
            if isinstance(ev, TextOut):
                yield _sse(chunk(ev.text))
            elif isinstance(ev, FinishOut):
                yield _sse(chunk("", ev.finish_reason))
                if include_usage:
                    last = chunk("")
                    last["choices"] = []
                    last["usage"] = _usage(ev.usage)
                    yield _sse(last)
    except Exception as exc:
        yield _sse(contain(exc).to_openai())
    finally:
        await aclose_quietly(events)
    yield _sse("[DONE]")
