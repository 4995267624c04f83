"""OpenAI-compatible routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``.

A thin translator: the request becomes a ``ChatJob`` (:mod:`tether.proxy.convert`), enters
the turn pipeline, and its events become chat-completion chunks or one completion body.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from tether.aio import prime
from tether.calls import ToolCall
from tether.chat import Usage
from tether.engine.base import SamplingParams
from tether.errors import InvalidRequestError
from tether.guardrails.presets import PRESETS
from tether.proxy.convert import job_from_openai
from tether.proxy.embeddings_routes import embedding_model_card
from tether.proxy.openai_logprobs import LegacyLogprobs, chat_logprobs
from tether.proxy.openai_schema import ChatCompletionRequest, CompletionRequest
from tether.proxy.sse import EventStreamResponse, event_stream
from tether.proxy.wire import app_state, check_model, interventions_field, session_of, stop_strings
from tether.turns.events import ChatJob, FinishOut, TextOut, TurnEvent, collect

__all__ = ["router"]

router = APIRouter(prefix="/v1")


def _usage(u: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": u.window_prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.window_prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.window_cached_tokens},
    }


@dataclass(frozen=True)
class _Reply:
    """What the body or every chunk of one reply repeats, and what its request asked to be added."""

    id: str
    created: int
    model: str
    include_usage: bool  # stream_options.include_usage: a last chunk with the usage
    logprobs: bool

    def envelope(self, kind: str, choice: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        }


def _reply_to(
    request: Request, body: ChatCompletionRequest | CompletionRequest, prefix: str, logprobs: bool
) -> _Reply:
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return _Reply(prefix + request.state.request_id, int(time.time()), body.model, include_usage, logprobs)


def _sse(data: dict[str, Any] | str) -> bytes:
    body = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {body}\n\n".encode()


@router.get("/models")
async def list_models(request: Request) -> dict[str, Any]:
    state = app_state(request)
    cards = [state.model_card(name) for name in state.model_names]
    if state.embedder is not None:  # after the chat model's names: clients that take the first get it
        cards.append(embedding_model_card(state.embedder, int(state.started)))
    return {"object": "list", "data": cards}


@router.post("/chat/completions", response_model=None)
async def chat_completions(
    body: ChatCompletionRequest, request: Request
) -> JSONResponse | EventStreamResponse:
    state = app_state(request)
    check_model(state, body.model)
    job = job_from_openai(
        body,
        default_temperature=state.config.default_temperature,
        default_guard=state.default_guard,
        n_vocab=state.core.info.n_vocab,
    )
    session = session_of(request)
    events = state.start(job, session)
    reply_to = _reply_to(request, body, "chatcmpl-", bool(body.logprobs))
    if body.stream:
        events = await prime(events)
        return EventStreamResponse(_stream_chat(events, reply_to), source=events)
    reply = await collect(events)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.text or (None if reply.calls else ""),
        "refusal": None,  # tether never refuses in the model's name (the SDK's parse reads it)
    }
    if reply.calls:
        message["tool_calls"] = [c.to_openai() for c in reply.calls]
    out = reply_to.envelope(
        "chat.completion",
        {
            "index": 0,
            "message": message,
            "finish_reason": reply.finish.finish_reason,
            "logprobs": chat_logprobs(reply.tokens) if reply_to.logprobs else None,
        },
    )
    out["usage"] = _usage(reply.finish.usage)
    out.update(interventions_field(reply.finish))
    return JSONResponse(out)


def _stream_chat(events: AsyncIterator[TurnEvent], reply: _Reply) -> AsyncIterator[bytes]:
    def chunk(
        delta: dict[str, Any], finish: str | None = None, lp: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": lp}
        return reply.envelope("chat.completion.chunk", choice)

    calls = itertools.count()

    def translate(ev: TurnEvent) -> list[bytes]:
        if isinstance(ev, TextOut):
            return [
                _sse(chunk({"content": ev.text}, lp=chat_logprobs(ev.tokens) if reply.logprobs else None))
            ]
        if isinstance(ev, ToolCall):
            # One delta per call carrying id, type, name and the final arguments: clients that stop
            # reading once the arguments parse (opencode) never see a placeholder.
            return [_sse(chunk({"tool_calls": [{"index": next(calls), **ev.to_openai()}]}))]
        final = chunk({}, ev.finish_reason)
        final.update(interventions_field(ev))
        return [_sse(final), *_usage_chunk(chunk({}), ev, reply.include_usage)]

    return event_stream(
        events,
        translate,
        lambda exc: _sse(exc.to_openai()),
        prologue=[_sse(chunk({"role": "assistant", "content": ""}))],
        epilogue=[_sse("[DONE]")],
    )


def _usage_chunk(base: dict[str, Any], finish: FinishOut, include_usage: bool) -> list[bytes]:
    """The last chunk ``stream_options.include_usage`` asks for: no choices, the usage."""
    if not include_usage:
        return []
    return [_sse({**base, "choices": [], "usage": _usage(finish.usage)})]


@router.post("/completions", response_model=None)
async def completions(body: CompletionRequest, request: Request) -> JSONResponse | EventStreamResponse:
    """Plain text completion: no chat template and no tools, so no turn stages either."""
    state = app_state(request)
    check_model(state, body.model)
    prompt = body.prompt if isinstance(body.prompt, str) else "".join(body.prompt)
    if body.echo and body.logprobs is not None:
        # OpenAI would score the prompt's tokens too; this server only has logits for what it generates.
        raise InvalidRequestError("logprobs with echo (prompt-token logprobs) is not supported", param="echo")
    job = ChatJob(
        messages=(),
        params=SamplingParams(
            temperature=state.config.default_temperature if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            seed=body.seed,
            logprobs=body.logprobs,
        ),
        max_tokens_requested=body.max_tokens,
        stop=stop_strings(body.stop),
        guard=PRESETS["bare"],
    )
    prepared = state.core.prepare_raw(job, prompt)
    reply_to = _reply_to(request, body, "cmpl-", body.logprobs is not None)
    if body.stream:
        events = await prime(state.recorder.track(state.core.run(prepared), job))
        return EventStreamResponse(_stream_completion(events, reply_to), source=events)
    reply = await collect(state.recorder.track(state.core.run(prepared), job))
    text = (prompt if body.echo else "") + reply.text
    logprobs = LegacyLogprobs().chunk(reply.tokens) if reply_to.logprobs else None
    out = reply_to.envelope(
        "text_completion",
        {"index": 0, "text": text, "finish_reason": reply.finish.finish_reason, "logprobs": logprobs},
    )
    out["usage"] = _usage(reply.finish.usage)
    return JSONResponse(out)


def _stream_completion(events: AsyncIterator[TurnEvent], reply: _Reply) -> AsyncIterator[bytes]:
    legacy = LegacyLogprobs()

    def chunk(text: str, finish: str | None = None, lp: dict[str, Any] | None = None) -> dict[str, Any]:
        return reply.envelope(
            "text_completion", {"index": 0, "text": text, "finish_reason": finish, "logprobs": lp}
        )

    def translate(ev: TurnEvent) -> list[bytes]:
        if isinstance(ev, TextOut):
            return [_sse(chunk(ev.text, lp=legacy.chunk(ev.tokens) if reply.logprobs else None))]
        if isinstance(ev, FinishOut):
            return [_sse(chunk("", ev.finish_reason)), *_usage_chunk(chunk(""), ev, reply.include_usage)]
        return []

    return event_stream(events, translate, lambda exc: _sse(exc.to_openai()), epilogue=[_sse("[DONE]")])
