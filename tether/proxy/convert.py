"""Translating OpenAI request bodies into the core's ``ChatJob``."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from tether.chat import Message, ToolCallRecord
from tether.engine.base import SamplingParams
from tether.errors import InvalidRequestError
from tether.grammar.formats.base import ToolSpec
from tether.proxy.core import ChatJob, ToolChoice, new_call_id
from tether.proxy.guard import PRESETS, GuardConfig
from tether.proxy.openai_schema import ChatCompletionRequest, ChatMessageIn

__all__ = ["job_from_openai", "text_of"]


def text_of(content: str | list[dict[str, Any]] | None, *, where: str) -> str:
    """Flatten OpenAI content parts to text; refuse parts this server cannot read."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for i, part in enumerate(content):
        kind = part.get("type")
        if kind in ("text", "input_text"):
            parts.append(str(part.get("text", "")))
        else:
            raise InvalidRequestError(
                f"content part type {kind!r} is not supported by this text-only model",
                param=f"{where}[{i}].type",
            )
    return "".join(parts)


def _message(msg: ChatMessageIn, index: int) -> Message:
    where = f"messages[{index}].content"
    role = {"developer": "system", "function": "tool"}.get(msg.role, msg.role)
    content = text_of(msg.content, where=where)
    calls: list[ToolCallRecord] = []
    for call in msg.tool_calls or ():
        args = call.function.arguments
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        calls.append(
            ToolCallRecord(id=call.id or new_call_id(), name=call.function.name, arguments=text or "{}")
        )
    return Message(
        role=role,  # type: ignore[arg-type]
        content=content,
        tool_calls=tuple(calls),
        tool_call_id=msg.tool_call_id,
        name=msg.name,
    )


def _tool_specs(req: ChatCompletionRequest) -> tuple[ToolSpec, ...]:
    specs: list[ToolSpec] = []
    seen: set[str] = set()
    for i, tool in enumerate(req.tools or ()):
        fn = tool.function
        if fn.name in seen:
            raise InvalidRequestError(f"duplicate tool name {fn.name!r}", param=f"tools[{i}].function.name")
        seen.add(fn.name)
        params = dict(fn.parameters or {"type": "object", "properties": {}})
        params.pop("$schema", None)
        specs.append(ToolSpec(name=fn.name, description=fn.description or "", parameters=params))
    return tuple(specs)


def job_from_openai(
    req: ChatCompletionRequest,
    *,
    default_temperature: float,
    default_guard: GuardConfig,
) -> ChatJob:
    messages = tuple(_message(m, i) for i, m in enumerate(req.messages))
    tools = _tool_specs(req)
    choice: ToolChoice
    if req.tool_choice is None:
        choice = "auto"
    elif isinstance(req.tool_choice, str):
        choice = req.tool_choice
    else:
        choice = req.tool_choice.function.name
    if choice == "required" and not tools:
        raise InvalidRequestError("tool_choice 'required' needs at least one tool", param="tool_choice")
    stop: tuple[str, ...]
    if req.stop is None:
        stop = ()
    elif isinstance(req.stop, str):
        stop = (req.stop,)
    else:
        stop = tuple(req.stop)
    rf = req.response_format
    if rf is not None and rf.type == "json_schema":
        raise InvalidRequestError(
            "response_format json_schema is not supported yet; use json_object", param="response_format.type"
        )
    temperature = default_temperature if req.temperature is None else req.temperature
    params = SamplingParams(
        temperature=temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        seed=req.seed,
    )
    guard = default_guard
    if req.tether is not None:
        if req.tether.preset is not None:
            guard = PRESETS[req.tether.preset]
        if req.tether.constrain is not None:
            guard = replace(guard, constrain=req.tether.constrain)
    return ChatJob(
        messages=messages,
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=req.parallel_tool_calls,
        params=params,
        max_tokens_requested=req.max_completion_tokens or req.max_tokens,
        stop=stop,
        guard=guard,
        json_mode=rf is not None and rf.type == "json_object",
    )
