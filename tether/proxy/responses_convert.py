"""Translating OpenAI's Responses API to the core and back: request bodies, jobs, output items.

``input`` is a string (one user turn) or a list of items: messages (``user``, ``system``,
``developer``, ``assistant``; text parts only), ``function_call`` and ``function_call_output``;
``reasoning`` items are skipped (earlier reasoning is not replayed). ``instructions`` become the
system turn and are not carried over to a follow-up, as in OpenAI's API; ``previous_response_id``
prepends the stored conversation (:mod:`tether.proxy.responses_store`). Function tools use the
Responses API's flat shape (``{"type": "function", "name", "parameters"}``); any other tool type
is refused with a 400 naming it, as is everything else this server cannot honour.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

from pydantic import Field

from tether.calls import ToolCall, decode_arguments
from tether.chat import Message, Usage
from tether.engine.base import SamplingParams
from tether.errors import InvalidRequestError
from tether.grammar.structured import reply_format
from tether.guardrails.presets import GuardConfig
from tether.proxy.openai_schema import TetherOptions
from tether.proxy.wire import Loose, RequestBody, flatten_text, guard_for, tool_specs
from tether.turns.events import ChatJob, FinishOut, ToolChoice

__all__ = [
    "ResponsesRequest",
    "function_call_item",
    "job_from_responses",
    "message_item",
    "new_item_id",
    "response_body",
]

TEXT_PARTS = ("input_text", "output_text", "text")


class ResponsesTool(Loose):
    """A tool in the Responses API's flat shape; only ``function`` tools are run by clients here."""

    type: str
    name: str | None = Field(default=None, min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class TextFormat(Loose):
    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextConfig(Loose):
    format: TextFormat | None = None


class ResponsesRequest(RequestBody):
    """``POST /v1/responses``."""

    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[ResponsesTool] | None = None
    tool_choice: Literal["auto", "none", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    previous_response_id: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    stream: bool = False
    store: bool | None = None
    background: bool | None = None
    text: TextConfig | None = None
    metadata: dict[str, str] | None = None
    tether: TetherOptions | None = None


def new_item_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def _text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
        raise InvalidRequestError("content must be a string or a list of parts", param=where)
    return flatten_text(content, where=where, kinds=TEXT_PARTS, join="")


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(f"{item.get('type')} items need a {key}", param=f"{where}.{key}")
    return value


def _items(items: Sequence[dict[str, Any]], history: tuple[Message, ...]) -> list[Message]:
    """The core messages for ``input`` items; ``history`` names the calls made before them."""
    names = {c.id: c.name for m in history for c in m.tool_calls}
    out: list[Message] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise InvalidRequestError(f"message role {role!r} is not supported", param=f"{where}.role")
            text = _text(item.get("content"), f"{where}.content")
            out.append(Message("system" if role == "developer" else role, text))
        elif kind == "function_call":
            name, call_id = _string(item, "name", where), _string(item, "call_id", where)
            args = item.get("arguments")
            arguments, repairs = decode_arguments(args if isinstance(args, str | dict) else None)
            call = ToolCall(name, arguments, call_id, args if isinstance(args, str) else "", repairs)
            names[call_id] = name
            if out and out[-1].role == "assistant":  # one assistant turn: its text, then its calls
                out[-1] = replace(out[-1], tool_calls=(*out[-1].tool_calls, call))
            else:
                out.append(Message("assistant", "", tool_calls=(call,)))
        elif kind == "function_call_output":
            call_id = _string(item, "call_id", where)
            text = _text(item.get("output"), f"{where}.output")
            out.append(Message("tool", text, tool_call_id=call_id, name=names.get(call_id)))
        elif kind == "reasoning":
            continue
        else:
            raise InvalidRequestError(
                f"input item type {kind!r} is not supported; send message, function_call and "
                "function_call_output items",
                param=f"{where}.type",
            )
    return out


def _tool_choice(req: ResponsesRequest, has_tools: bool) -> ToolChoice:
    tc = req.tool_choice
    choice: ToolChoice
    if tc is None or isinstance(tc, str):
        choice = tc or "auto"
    elif tc.get("type") == "function" and isinstance(tc.get("name"), str) and tc["name"]:
        choice = tc["name"]
    else:
        raise InvalidRequestError(
            'tool_choice must be "auto", "none", "required" or {"type": "function", "name": ...}',
            param="tool_choice",
        )
    if choice == "required" and not has_tools:
        raise InvalidRequestError("tool_choice 'required' needs at least one tool", param="tool_choice")
    return choice


def job_from_responses(
    req: ResponsesRequest,
    history: tuple[Message, ...],
    *,
    default_temperature: float,
    default_guard: GuardConfig,
) -> tuple[ChatJob, tuple[Message, ...]]:
    """The job for ``req`` after ``history`` (a previous response's conversation), and the
    conversation without the instructions, which is what a follow-up continues."""
    if req.background:
        raise InvalidRequestError("background responses are not supported", param="background")
    fmt = req.text.format if req.text and req.text.format else None
    items = [{"role": "user", "content": req.input}] if isinstance(req.input, str) else req.input
    conversation = (*history, *_items(items, history))
    if not conversation:
        raise InvalidRequestError("input holds no message", param="input")
    for i, tool in enumerate(req.tools or ()):
        if tool.type != "function" or not tool.name:
            raise InvalidRequestError(
                f"tool type {tool.type!r} is not supported; declare function tools with a name",
                param=f"tools[{i}]",
            )
    tools = tool_specs(
        (t.name or "", t.description, t.parameters, f"tools[{i}].parameters")
        for i, t in enumerate(req.tools or ())
    )
    system = (Message("system", req.instructions),) if req.instructions else ()
    options = req.tether
    job = ChatJob(
        messages=(*system, *conversation),
        tools=tools,
        tool_choice=_tool_choice(req, bool(tools)),
        parallel_tool_calls=req.parallel_tool_calls is not False,
        params=SamplingParams(
            temperature=default_temperature if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
        ),
        max_tokens_requested=req.max_output_tokens,
        guard=guard_for(
            options.preset if options else None, options.constrain if options else None, default_guard
        ),
        reply_format=None
        if fmt is None or fmt.type == "text"
        else reply_format(
            fmt.schema_ if fmt.type == "json_schema" else None,
            param="text.format.schema",
            name=fmt.name or "response",
        ),
    )
    return job, conversation


def message_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    """An assistant message item; ``text`` None while it is still empty (streaming)."""
    content = (
        [] if text is None else [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    )
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def function_call_item(call: ToolCall, status: str, *, arguments: str | None = None) -> dict[str, Any]:
    return {
        "id": "fc_" + call.id.removeprefix("call_"),
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments_json() if arguments is None else arguments,
        "status": status,
    }


def _usage(u: Usage) -> dict[str, Any]:
    return {
        "input_tokens": u.window_prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.window_cached_tokens, "cache_write_tokens": 0},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.window_prompt_tokens + u.completion_tokens,
    }


def response_body(
    response_id: str,
    req: ResponsesRequest,
    created: float,
    output: list[dict[str, Any]],
    finish: FinishOut | None = None,
) -> dict[str, Any]:
    """The Response object: ``in_progress`` without a ``finish``; ``incomplete`` when it ran out of tokens."""
    status = "in_progress" if finish is None else "completed"
    incomplete = None
    if finish is not None and finish.finish_reason == "length":
        status, incomplete = "incomplete", {"reason": "max_output_tokens"}
    fmt = req.text.format.type if req.text and req.text.format else "text"
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(created),
        "completed_at": int(time.time()) if finish is not None else None,
        "status": status,
        "error": None,
        "incomplete_details": incomplete,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "model": req.model,
        "output": output,
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "previous_response_id": req.previous_response_id,
        "store": req.store is not False,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "text": {"format": {"type": fmt}},
        "tool_choice": req.tool_choice or "auto",
        "tools": [t.model_dump(exclude_none=True) for t in req.tools or ()],
        "truncation": "disabled",
        "metadata": req.metadata or {},
        "usage": _usage(finish.usage) if finish is not None else None,
    }
