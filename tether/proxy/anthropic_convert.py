"""Translating between Anthropic's Messages API and the core: requests, stop reasons, usage, errors.

The routes in :mod:`tether.proxy.anthropic_routes` stay thin: a ``MessagesRequest``
becomes a ``ChatJob`` here, and a ``FinishOut`` becomes ``stop_reason`` and
``usage``. Errors keep the statuses of the OpenAI path and take Anthropic's shape,
``{"type": "error", "error": {"type": ..., "message": ...}}``; ``AnthropicErrorMiddleware``
reshapes the errors raised before a route runs (auth, body limit, validation).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from starlette.types import ASGIApp

from tether.calls import ToolCall
from tether.chat import Message, Usage
from tether.engine.base import SamplingParams
from tether.errors import ContextOverflowError, InvalidRequestError, TetherError
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.presets import GuardConfig
from tether.proxy.anthropic_schema import AnthropicMessageIn, CountTokensRequest, MessagesRequest
from tether.proxy.middleware import ErrorShapeMiddleware
from tether.proxy.wire import flatten_text, guard_for, stop_strings, tool_specs
from tether.turns.events import ChatJob, FinishOut, ToolChoice

__all__ = [
    "ERROR_TYPES",
    "AnthropicErrorMiddleware",
    "anthropic_error",
    "error_type",
    "job_from_anthropic",
    "stop_fields",
    "tool_use_id",
    "usage_body",
]

# Anthropic's error types by HTTP status; anything else at or above 500 is an ``api_error``.
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
MESSAGES_PATH = "/v1/messages"


def error_type(status: int) -> str:
    """Anthropic's ``error.type`` for an HTTP status."""
    return ERROR_TYPES.get(status, "invalid_request_error" if 400 <= status < 500 else "api_error")


def anthropic_error(exc: TetherError) -> dict[str, Any]:
    """The error body in Anthropic's shape. A context overflow uses Anthropic's own wording
    (``prompt is too long: N tokens > M maximum``), which Claude Code reads to compact."""
    message = exc.message
    if isinstance(exc, ContextOverflowError):
        message = f"prompt is too long: {exc.prompt_tokens} tokens > {exc.n_ctx} maximum. {exc.message}"
    return _error_body(exc.status, message)


def tool_use_id(call_id: str) -> str:
    """Anthropic-style ids (``toolu_…``) for the core's ``call_…`` ids."""
    return "toolu_" + call_id.removeprefix("call_")


def usage_body(u: Usage) -> dict[str, int]:
    """Anthropic usage: ``input_tokens`` excludes the reused prefix, reported as cache reads."""
    return {
        "input_tokens": u.window_prompt_tokens - u.window_cached_tokens,
        "output_tokens": u.completion_tokens,
        "cache_read_input_tokens": u.window_cached_tokens,
        "cache_creation_input_tokens": 0,
    }


def stop_fields(finish: FinishOut) -> tuple[str, str | None]:
    """``(stop_reason, stop_sequence)`` for the core's finish."""
    if finish.finish_reason == "tool_calls":
        return "tool_use", None
    if finish.finish_reason == "length":
        return "max_tokens", None
    if finish.matched_stop is not None:
        return "stop_sequence", finish.matched_stop
    return "end_turn", None


def _text_blocks(content: str | list[dict[str, Any]] | None, *, where: str) -> str:
    """Text of a string or of a list of ``text`` blocks; other block types are refused."""
    return flatten_text(content, where=where, kinds=("text",), join="\n\n")


def _tool_result(block: dict[str, Any], names: dict[str, str], where: str) -> Message:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequestError("tool_result needs a tool_use_id", param=f"{where}.tool_use_id")
    text = _text_blocks(block.get("content"), where=f"{where}.content")
    if block.get("is_error") and not text.lower().startswith("error"):
        text = f"Error: {text}"
    return Message("tool", text, tool_call_id=call_id, name=names.get(call_id))


def _turn(msg: AnthropicMessageIn, index: int, names: dict[str, str]) -> list[Message]:
    """One Anthropic turn as core messages: tool results become ``tool`` messages, in order."""
    where = f"messages[{index}].content"
    if isinstance(msg.content, str):
        return [Message(msg.role, msg.content)]
    out: list[Message] = []
    text: list[str] = []
    calls: list[ToolCall] = []

    def flush_text() -> None:
        if text:
            out.append(Message("user", "\n\n".join(text)))
            text.clear()

    for i, block in enumerate(msg.content):
        kind = block.get("type")
        if kind == "text":
            text.append(str(block.get("text", "")))
        elif kind in ("thinking", "redacted_thinking") and msg.role == "assistant":
            continue  # earlier reasoning is not replayed to the model
        elif kind == "tool_use" and msg.role == "assistant":
            name, call_id = str(block.get("name", "")), str(block.get("id", ""))
            if not name or not call_id:
                raise InvalidRequestError("tool_use needs an id and a name", param=f"{where}[{i}]")
            names[call_id] = name
            arguments = block.get("input")
            calls.append(ToolCall(name, dict(arguments) if isinstance(arguments, dict) else {}, call_id))
        elif kind == "tool_result" and msg.role == "user":
            flush_text()
            out.append(_tool_result(block, names, f"{where}[{i}]"))
        else:
            raise InvalidRequestError(
                f"content block type {kind!r} is not supported in a {msg.role} turn by this text-only model",
                param=f"{where}[{i}].type",
            )
    if msg.role == "assistant":
        return [Message("assistant", "\n\n".join(text), tool_calls=tuple(calls))]
    flush_text()
    return out


def _tool_specs(req: CountTokensRequest) -> tuple[ToolSpec, ...]:
    for i, tool in enumerate(req.tools or ()):
        if tool.type not in (None, "custom"):
            raise InvalidRequestError(
                f"tool type {tool.type!r} is a server tool, which this server does not run; "
                "declare a client tool with name, description and input_schema",
                param=f"tools[{i}].type",
            )
    return tool_specs(
        (t.name, t.description, t.input_schema, f"tools[{i}].input_schema")
        for i, t in enumerate(req.tools or ())
    )


def _tool_choice(req: CountTokensRequest, tools: tuple[ToolSpec, ...]) -> tuple[ToolChoice, bool]:
    tc = req.tool_choice
    if tc is None:
        return "auto", True
    parallel = not tc.disable_parallel_tool_use
    if tc.type in ("any", "tool") and not tools:
        raise InvalidRequestError(f"tool_choice {tc.type!r} needs at least one tool", param="tool_choice")
    if tc.type == "any":
        return "required", parallel
    if tc.type == "tool":
        if not tc.name:
            raise InvalidRequestError("tool_choice 'tool' needs a name", param="tool_choice.name")
        return tc.name, parallel
    return tc.type, parallel


def job_from_anthropic(
    req: CountTokensRequest,
    *,
    default_temperature: float,
    default_guard: GuardConfig,
) -> ChatJob:
    """A ``ChatJob`` for a messages (or count_tokens) request."""
    messages: list[Message] = []
    system = _text_blocks(req.system, where="system")
    if system:
        messages.append(Message("system", system))
    names: dict[str, str] = {}
    for i, msg in enumerate(req.messages):
        messages.extend(_turn(msg, i, names))
    tools = _tool_specs(req)
    choice, parallel = _tool_choice(req, tools)
    options = req.tether
    guard = guard_for(
        options.preset if options else None, options.constrain if options else None, default_guard
    )
    job = ChatJob(
        messages=tuple(messages), tools=tools, tool_choice=choice, parallel_tool_calls=parallel, guard=guard
    )
    if not isinstance(req, MessagesRequest):
        return job
    params = SamplingParams(
        temperature=default_temperature if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=SamplingParams.top_k if req.top_k is None else req.top_k,
    )
    return replace(
        job, params=params, max_tokens_requested=req.max_tokens, stop=stop_strings(req.stop_sequences)
    )


class AnthropicErrorMiddleware(ErrorShapeMiddleware):
    """Errors raised before a ``/v1/messages`` route runs (auth, body limit, validation), in Anthropic's shape."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app, prefix=MESSAGES_PATH, shape=_error_body)


def _error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}
