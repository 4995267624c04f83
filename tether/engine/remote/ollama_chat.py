"""Ollama as a backend (``--backend-kind ollama``): ``POST {url}/api/chat``, streamed as NDJSON.

For a model whose template handles tools (``/api/show`` lists the ``tools`` capability) tether
sends ``tools`` and Ollama parses the calls: they come back as objects with ``arguments`` already
decoded and no ``id`` (tether gives each its own). Ollama has no ``tool_choice``; a required or
named choice is not enforced there, only checked by the guard. For a model without tool support
tether folds the tools into the prompt in the generic format, and ``format`` carries that format's
whole reply as a JSON Schema (:func:`~tether.grammar.remote.structural_tag.compile_ollama`), so
names, and in strict mode arguments, are constrained. The guard's re-pick and repair are replies
under ``format`` too: the offered names as an enum, the tool's arguments schema.

The window: ``model_info.<arch>.context_length`` from ``/api/show``, capped at ``--ctx``, and sent
as ``options.num_ctx`` with every request (Ollama's own default is smaller than most models' and it
would silently cut prompts longer than that).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from tether.calls import ToolCall
from tether.chat import Message, Usage
from tether.engine.remote.chat import (
    ChatBackend,
    ChatEnd,
    ChatPiece,
    ChatRequest,
    backend_info,
    mid_stream_error,
    pick_model,
)
from tether.engine.remote.constraint import RemoteConstraint
from tether.engine.remote.http import connecting
from tether.errors import BackendUnavailableError
from tether.grammar.formats import detect_format
from tether.grammar.remote.structural_tag import compile_ollama
from tether.grammar.spec import OutputSpec

__all__ = ["NATIVE_LAYERS", "SCHEMA_LAYERS", "OllamaChatBackend", "connect_ollama", "ollama_messages"]

NATIVE_LAYERS = ("repick", "repair", "streaming")  # Ollama parses the calls: the post-hoc guard only
SCHEMA_LAYERS = ("layer0_names", "layer0_strict", "repick", "repair", "streaming")  # `format` holds the reply


def _context_length(show: dict[str, Any]) -> int | None:
    info = show.get("model_info") or {}
    for key, value in info.items() if isinstance(info, dict) else ():
        if key.endswith(".context_length") and isinstance(value, int) and value > 0:
            return value
    return None


def connect_ollama(
    url: str, *, model: str | None, n_ctx: int, api_key: str | None = None, timeout_s: float = 600.0
) -> OllamaChatBackend:
    """The Ollama server at ``url`` for ``model`` (or the one model it has)."""
    with connecting(url, api_key=api_key, timeout_s=timeout_s) as client:
        tags = client.get_json("/api/tags")
        listed = [m for m in tags.get("models") or () if isinstance(m, dict)]
        name = pick_model(url, [str(m.get("model") or m.get("name")) for m in listed], model)
        show = client.post_json("/api/show", {"model": name})
    template = str(show.get("template") or "")
    capabilities = show.get("capabilities")
    # Older servers list no capabilities: a template that reads .Tools handles them.
    native = "tools" in capabilities if isinstance(capabilities, list) else ".Tools" in template
    trained = _context_length(show)
    window = min(trained, n_ctx) if trained else n_ctx
    info = backend_info("ollama", url, name, window, NATIVE_LAYERS if native else SCHEMA_LAYERS)
    return OllamaChatBackend(
        url,
        info,
        native_tools=native,
        tool_format=detect_format(template) if native else "generic",
        api_key=api_key,
        timeout_s=timeout_s,
    )


def ollama_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages in Ollama's shape: arguments as objects, a tool result naming its tool (``tool_name``)."""
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for message in messages:
        item: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.tool_calls:
            names.update({c.id: c.name for c in message.tool_calls})
            item["tool_calls"] = [
                {"function": {"name": c.name, "arguments": dict(c.arguments)}} for c in message.tool_calls
            ]
        if message.role == "tool":
            name = message.name or names.get(message.tool_call_id or "")
            if name:
                item["tool_name"] = name
        out.append(item)
    return out


class OllamaChatBackend(ChatBackend):
    """``/api/chat`` of an Ollama server."""

    kind = "ollama"
    path = "/api/chat"
    schema_replies = True

    def body(self, request: ChatRequest) -> dict[str, Any]:
        params = request.params
        options: dict[str, Any] = {
            "num_ctx": self.info.n_ctx,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k,
            "repeat_penalty": params.repeat_penalty,
            "presence_penalty": params.presence_penalty,
            "frequency_penalty": params.frequency_penalty,
        }
        if params.seed is not None:
            options["seed"] = params.seed
        if request.max_tokens is not None:
            options["num_predict"] = request.max_tokens
        body: dict[str, Any] = {
            "model": self.model,
            "messages": ollama_messages(request.messages),
            "stream": True,
            "options": options,
        }
        if request.tools:
            body["tools"] = [t.to_openai() for t in request.tools]
        if isinstance(request.reply, RemoteConstraint) and request.reply.fields:
            body.update(request.reply.fields)
        elif request.reply_format is not None:
            schema = request.reply_format.schema
            body["format"] = "json" if schema is None else dict(schema)
        return body

    def compile(self, spec: OutputSpec) -> dict[str, Any]:
        schema = compile_ollama(spec)
        return {"format": schema} if schema is not None else {}

    async def pieces(self, lines: AsyncIterator[str]) -> AsyncIterator[ChatPiece]:
        where = self.url + self.path
        async for line in lines:
            if not line.strip():
                continue
            try:
                chunk = json.loads(line)
            except ValueError:
                raise BackendUnavailableError(
                    f"{where} streamed a line that is not JSON: {line[:200]}"
                ) from None
            if not isinstance(chunk, dict):
                continue
            if "error" in chunk:
                raise mid_stream_error(where, line)
            message = chunk.get("message") or {}
            if isinstance(message.get("content"), str) and message["content"]:
                yield message["content"]
            for call in message.get("tool_calls") or ():
                if isinstance(call, dict):
                    yield ToolCall.from_openai(call)
            if chunk.get("done"):
                usage = None
                if isinstance(chunk.get("eval_count"), int):
                    prompt = int(chunk.get("prompt_eval_count") or 0)
                    usage = Usage(prompt, int(chunk["eval_count"]), prompt)
                yield ChatEnd("length" if chunk.get("done_reason") == "length" else "stop", usage)
                return
        raise BackendUnavailableError(f"{where}: the stream ended before the reply did")
