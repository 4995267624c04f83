"""A stand-in for Ollama's documented HTTP API, NOT Ollama: ``/api/tags``, ``/api/show``, ``/api/chat``.

Every request body is validated against the ``ollama`` package's own pydantic types (with unknown
fields refused), and every answer is built from them, so what tether sends and reads is held to the
documented shapes. Replies are scripted; each chat request takes the next one and streams it as
NDJSON, as Ollama does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import ollama._types as ot
from pydantic import ConfigDict, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["OllamaStandIn", "check_chat_request", "reply"]

MODEL = "qwen-standin:latest"
STAMP = "2026-01-01T00:00:00Z"


class _StrictChat(ot.ChatRequest):
    model_config = ConfigDict(extra="forbid")


class _StrictMessage(ot.Message):
    model_config = ConfigDict(extra="forbid")


class _StrictOptions(ot.Options):
    model_config = ConfigDict(extra="forbid")


def check_chat_request(body: dict[str, Any]) -> None:
    """Raise ``ValidationError`` unless ``body`` is a chat request in the documented shape."""
    _StrictChat.model_validate(body)
    for message in body.get("messages") or ():
        _StrictMessage.model_validate(message)
    if body.get("options") is not None:
        _StrictOptions.model_validate(body["options"])
    for tool in body.get("tools") or ():
        ot.Tool.model_validate(tool)


def reply(
    *pieces: str,
    calls: Sequence[tuple[str, dict[str, Any]]] = (),
    reason: str = "stop",
    counts: tuple[int, int] | None = (42, 7),
) -> list[ot.ChatResponse]:
    """One streamed reply: content ``pieces``, then ``calls`` (arguments as objects), then ``done``."""
    out = [
        ot.ChatResponse(
            model=MODEL, created_at=STAMP, message=ot.Message(role="assistant", content=p), done=False
        )
        for p in pieces
    ]
    if calls:
        tool_calls = [
            ot.Message.ToolCall(function=ot.Message.ToolCall.Function(name=name, arguments=args))
            for name, args in calls
        ]
        message = ot.Message(role="assistant", content="", tool_calls=tool_calls)
        out.append(ot.ChatResponse(model=MODEL, created_at=STAMP, message=message, done=False))
    prompt, evals = counts if counts is not None else (None, None)
    out.append(
        ot.ChatResponse(
            model=MODEL,
            created_at=STAMP,
            message=ot.Message(role="assistant", content=""),
            done=True,
            done_reason=reason,
            prompt_eval_count=prompt,
            eval_count=evals,
        )
    )
    return out


class OllamaStandIn:
    """The app; ``requests`` holds every chat request body it was sent, in order."""

    def __init__(
        self,
        replies: Sequence[list[ot.ChatResponse]],
        *,
        tools: bool = True,
        context_length: int = 32768,
        models: Sequence[str] = (MODEL,),
    ) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.capabilities = ["completion", "tools"] if tools else ["completion"]
        self.context_length = context_length
        self.models = list(models)
        self.app = Starlette(
            routes=[
                Route("/api/tags", self.tags, methods=["GET"]),
                Route("/api/show", self.show, methods=["POST"]),
                Route("/api/chat", self.chat, methods=["POST"]),
            ]
        )

    async def tags(self, _: Request) -> Response:
        listing = ot.ListResponse(models=[ot.ListResponse.Model(model=m) for m in self.models])
        return JSONResponse(listing.model_dump(mode="json", exclude_none=True))

    async def show(self, request: Request) -> Response:
        ot.ShowRequest.model_validate(await request.json())
        shown = ot.ShowResponse(
            template="{{ .Prompt }}",
            capabilities=self.capabilities,
            **{"model_info": {"qwen2.architecture": "qwen2", "qwen2.context_length": self.context_length}},
        )
        return JSONResponse(shown.model_dump(mode="json", exclude_none=True, by_alias=True))

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        try:
            check_chat_request(body)
        except ValidationError as exc:
            return JSONResponse({"error": f"invalid request: {exc}"}, status_code=400)
        self.requests.append(body)
        chunks = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

        async def lines() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield (chunk.model_dump_json(exclude_none=True) + "\n").encode()

        return StreamingResponse(lines(), media_type="application/x-ndjson")
