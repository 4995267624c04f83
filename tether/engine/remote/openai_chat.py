"""Any OpenAI-compatible chat endpoint as a backend (``--backend-kind openai``).

tether sends the job's messages, the offered tools and ``tool_choice`` to
``POST {url}/v1/chat/completions`` (streamed, ``stream_options.include_usage``); the server renders
the prompt and parses calls with its own template. Text deltas stream on; calls are assembled from
their ``delta.tool_calls`` fragments and handed over when the reply ends, with the usage the
server reported. Only standard request fields are sent (OpenAI itself refuses unknown ones), so
``top_k``, ``min_p`` and ``repeat_penalty`` stay with the server's defaults. Stop strings are
matched by tether, which closes the stream.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from tether.calls import ToolCall
from tether.chat import Usage
from tether.engine.remote.chat import (
    ChatBackend,
    ChatEnd,
    ChatPiece,
    ChatRequest,
    backend_info,
    mid_stream_error,
    pick_model,
)
from tether.engine.remote.http import connecting
from tether.errors import BackendUnavailableError

__all__ = ["LAYERS", "OpenAIChatBackend", "connect_openai"]

# What tether adds on a server that parses its own calls: the post-hoc guard, whose re-pick and
# repair are extra requests with a forced tool_choice; no layer 0 (docs/backends.md).
LAYERS = ("repick", "repair", "streaming")

# Where model cards state the served window: vLLM, several hosted APIs, tether itself.
_WINDOW_KEYS = ("max_model_len", "context_length", "context_window")


def _window(card: dict[str, Any]) -> int | None:
    for key in _WINDOW_KEYS:
        if isinstance(card.get(key), int) and card[key] > 0:
            return int(card[key])
    own = card.get("tether")
    if isinstance(own, dict) and isinstance(own.get("n_ctx"), int):
        return int(own["n_ctx"])
    return None


def connect_openai(
    url: str, *, model: str | None, n_ctx: int, api_key: str | None = None, timeout_s: float = 600.0
) -> OpenAIChatBackend:
    """The endpoint at ``url`` for ``model`` (or the one model it lists); ``n_ctx`` where its card
    states no window."""
    with connecting(url, api_key=api_key, timeout_s=timeout_s) as client:
        listing = client.get_json("/v1/models")
    cards = [c for c in listing.get("data") or () if isinstance(c, dict) and c.get("id")]
    name = pick_model(url, [str(c["id"]) for c in cards], model)
    card = next((c for c in cards if c["id"] == name), {})
    info = backend_info("openai", url, name, _window(card) or n_ctx, LAYERS)
    return OpenAIChatBackend(url, info, api_key=api_key, timeout_s=timeout_s)


def _usage(data: dict[str, Any]) -> Usage:
    prompt = int(data.get("prompt_tokens") or 0)
    details = data.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    return Usage(prompt, int(data.get("completion_tokens") or 0), max(0, prompt - cached))


class OpenAIChatBackend(ChatBackend):
    """``/v1/chat/completions`` of an OpenAI-compatible server."""

    kind = "openai"
    path = "/v1/chat/completions"
    schema_replies = False

    def body(self, request: ChatRequest) -> dict[str, Any]:
        params = request.params
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_openai() for m in request.messages],
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        if request.tools:
            body["tools"] = [t.to_openai() for t in request.tools]
            choice = request.tool_choice
            named = choice not in ("auto", "none", "required")
            body["tool_choice"] = {"type": "function", "function": {"name": choice}} if named else choice
            if not request.parallel_tool_calls:
                body["parallel_tool_calls"] = False
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        if params.seed is not None:
            body["seed"] = params.seed
        if params.presence_penalty:
            body["presence_penalty"] = params.presence_penalty
        if params.frequency_penalty:
            body["frequency_penalty"] = params.frequency_penalty
        fmt = request.reply_format
        if fmt is not None:  # passed through; the reply is checked against it when it ends
            body["response_format"] = (
                {"type": "json_object"}
                if fmt.schema is None
                else {"type": "json_schema", "json_schema": {"name": fmt.name, "schema": dict(fmt.schema)}}
            )
        return body

    async def pieces(self, lines: AsyncIterator[str]) -> AsyncIterator[ChatPiece]:
        where = self.url + self.path
        calls: dict[int, dict[str, str]] = {}  # index -> id, name, arguments, as the fragments add up
        reason: str | None = None
        usage: Usage | None = None
        ended = False
        async for line in lines:
            if not line or line.startswith(":"):
                continue
            kind, _, data = line.partition(":")
            data = data.strip()
            if data == "[DONE]":
                ended = True
                break
            try:
                chunk = json.loads(data)
            except ValueError:
                raise BackendUnavailableError(
                    f"{where} streamed a line that is not JSON: {line[:200]}"
                ) from None
            if kind == "error" or (isinstance(chunk, dict) and "error" in chunk):
                raise mid_stream_error(where, data)
            if not isinstance(chunk, dict):
                continue
            if isinstance(chunk.get("usage"), dict):
                usage = _usage(chunk["usage"])
            for choice in chunk.get("choices") or ():
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                if isinstance(delta.get("content"), str) and delta["content"]:
                    yield delta["content"]
                for fragment in delta.get("tool_calls") or ():
                    _add(calls, fragment)
                reason = choice.get("finish_reason") or reason
        if not ended and reason is None:
            raise BackendUnavailableError(f"{where}: the stream ended before the reply did")
        for index in sorted(calls):
            call = calls[index]
            yield ToolCall.from_openai(
                {"id": call["id"] or None, "function": {"name": call["name"], "arguments": call["arguments"]}}
            )
        yield ChatEnd("length" if reason == "length" else "stop", usage)


def _add(calls: dict[int, dict[str, str]], fragment: Any) -> None:
    """One ``delta.tool_calls`` entry into the call it continues (strings concatenate, as the SDK does)."""
    if not isinstance(fragment, dict):
        return
    call = calls.setdefault(int(fragment.get("index") or 0), {"id": "", "name": "", "arguments": ""})
    call["id"] = call["id"] or str(fragment.get("id") or "")
    function = fragment.get("function") or {}
    call["name"] += str(function.get("name") or "")
    arguments = function.get("arguments")
    if isinstance(arguments, dict):  # not OpenAI's shape, but some servers send an object
        arguments = json.dumps(arguments)
    call["arguments"] += str(arguments or "")
