"""OpenAI Responses API routes: ``POST /v1/responses`` (streaming and not), ``GET`` and ``DELETE
/v1/responses/{id}``.

A thin translator: the request (after the conversation its ``previous_response_id`` names)
becomes a ``ChatJob`` (:mod:`tether.proxy.responses_convert`), enters the same turn pipeline as
every protocol, and its events become output items: one ``message`` for the text, one
``function_call`` per call. A stream follows OpenAI's event order: ``response.created``,
``response.in_progress``, then per item ``response.output_item.added``, its deltas
(``response.output_text.delta`` inside a ``content_part``; one ``function_call_arguments.delta``
carrying a call's final arguments, then ``.done``) and ``response.output_item.done``, and last
``response.completed`` (``response.incomplete`` when out of tokens). Every event carries a
``sequence_number``. Errors before the first event keep their HTTP status; after it, an
``error`` event ends the stream. Finished responses are kept (``store``, default true) in the
bounded store on ``app.state.tether.responses``.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from tether.aio import prime
from tether.calls import ToolCall
from tether.chat import Message
from tether.errors import TetherError
from tether.proxy.responses_convert import (
    ResponsesRequest,
    function_call_item,
    job_from_responses,
    message_item,
    new_item_id,
    response_body,
)
from tether.proxy.responses_store import StoredResponse
from tether.proxy.sse import EventStreamResponse, event_stream
from tether.proxy.state import AppState
from tether.proxy.wire import app_state, check_model, interventions_field, session_of
from tether.turns.events import FinishOut, TextOut, TurnEvent, collect

__all__ = ["router"]

router = APIRouter(prefix="/v1")


class _Turn:
    """One response on its way out: what it needs to build its body and to be remembered."""

    def __init__(
        self, state: AppState, response_id: str, req: ResponsesRequest, conversation: tuple[Message, ...]
    ) -> None:
        self.state = state
        self.id = response_id
        self.req = req
        self.conversation = conversation
        self.created = time.time()

    def finish(
        self, output: list[dict[str, Any]], text: str, calls: list[ToolCall], ev: FinishOut
    ) -> dict[str, Any]:
        """The finished body; stored, with the conversation through this reply, unless ``store`` is false."""
        body = response_body(self.id, self.req, self.created, output, ev)
        body.update(interventions_field(ev))
        if self.req.store is not False:
            reply = Message("assistant", text, tool_calls=tuple(calls))
            self.state.responses.put(self.id, StoredResponse(body, (*self.conversation, reply)))
        return body


@router.post("/responses", response_model=None)
async def create_response(body: ResponsesRequest, request: Request) -> JSONResponse | EventStreamResponse:
    state = app_state(request)
    check_model(state, body.model)
    history: tuple[Message, ...] = ()
    if body.previous_response_id:
        history = state.responses.get(body.previous_response_id, param="previous_response_id").history
    job, conversation = job_from_responses(
        body, history, default_temperature=state.config.default_temperature, default_guard=state.default_guard
    )
    events = state.start(job, session_of(request))
    turn = _Turn(state, "resp_" + request.state.request_id, body, conversation)
    if body.stream:
        events = await prime(events)  # a full queue is still a 429, an overflow a 400
        out = _Stream(turn)
        return EventStreamResponse(
            event_stream(events, out.translate, out.error, prologue=out.prologue()), source=events
        )
    reply = await collect(events)
    output = [message_item(new_item_id("msg"), reply.text, "completed")] if reply.text else []
    output += [function_call_item(c, "completed") for c in reply.calls]
    return JSONResponse(turn.finish(output, reply.text, list(reply.calls), reply.finish))


@router.get("/responses/{response_id}")
async def get_response(response_id: str, request: Request) -> dict[str, Any]:
    return app_state(request).responses.get(response_id).body


@router.delete("/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> dict[str, Any]:
    app_state(request).responses.delete(response_id)
    return {"id": response_id, "object": "response", "deleted": True}


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


class _Stream:
    """Numbers events and output items, keeping at most one message item open."""

    def __init__(self, turn: _Turn) -> None:
        self.turn = turn
        self.seq = itertools.count()
        self.output: list[dict[str, Any]] = []  # finished items, by output_index
        self.open: str | None = None  # the open message item's id
        self.pieces: list[str] = []  # the open message's text
        self.text: list[str] = []  # every message's text, for the stored conversation
        self.calls: list[ToolCall] = []

    def event(self, kind: str, **data: Any) -> bytes:
        payload = {"type": kind, "sequence_number": next(self.seq), **data}
        return f"event: {kind}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()

    def prologue(self) -> list[bytes]:
        t = self.turn
        body = response_body(t.id, t.req, t.created, [])
        return [
            self.event("response.created", response=body),
            self.event("response.in_progress", response=body),
        ]

    def error(self, exc: TetherError) -> bytes:
        return self.event("error", code=exc.code, message=exc.message, param=exc.param)

    def translate(self, ev: TurnEvent) -> list[bytes]:
        if isinstance(ev, TextOut):
            return self._text(ev.text)
        if isinstance(ev, ToolCall):
            return self._call(ev)
        out = self._close()
        body = self.turn.finish(self.output, "".join(self.text), self.calls, ev)
        kind = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
        out.append(self.event(kind, response=body))
        return out

    def _text(self, text: str) -> list[bytes]:
        out: list[bytes] = []
        index = len(self.output)
        if self.open is None:
            self.open, self.pieces = new_item_id("msg"), []
            item = message_item(self.open, None, "in_progress")
            out.append(self.event("response.output_item.added", output_index=index, item=item))
            where = {"item_id": self.open, "output_index": index, "content_index": 0}
            out.append(self.event("response.content_part.added", **where, part=_part("")))
        self.pieces.append(text)
        self.text.append(text)
        where = {"item_id": self.open, "output_index": index, "content_index": 0}
        out.append(self.event("response.output_text.delta", **where, delta=text, logprobs=[]))
        return out

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        text, index = "".join(self.pieces), len(self.output)
        item = message_item(self.open, text, "completed")
        where = {"item_id": self.open, "output_index": index, "content_index": 0}
        out = [
            self.event("response.output_text.done", **where, text=text, logprobs=[]),
            self.event("response.content_part.done", **where, part=_part(text)),
            self.event("response.output_item.done", output_index=index, item=item),
        ]
        self.output.append(item)
        self.open = None
        return out

    def _call(self, call: ToolCall) -> list[bytes]:
        out = self._close()
        index = len(self.output)
        item = function_call_item(call, "completed")
        arguments = item["arguments"]
        where = {"item_id": item["id"], "output_index": index}
        out += [
            self.event(
                "response.output_item.added",
                output_index=index,
                item=function_call_item(call, "in_progress", arguments=""),
            ),
            # One delta with the final arguments: a client never sees placeholder JSON.
            self.event("response.function_call_arguments.delta", **where, delta=arguments),
            self.event("response.function_call_arguments.done", **where, arguments=arguments, name=call.name),
            self.event("response.output_item.done", output_index=index, item=item),
        ]
        self.output.append(item)
        self.calls.append(call)
        return out
