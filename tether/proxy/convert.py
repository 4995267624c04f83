"""Translating OpenAI request bodies into the core's ``ChatJob``."""

from __future__ import annotations

from typing import Any

from tether.calls import ToolCall, decode_arguments, new_call_id
from tether.chat import Message
from tether.engine.base import SamplingParams
from tether.errors import InvalidRequestError
from tether.grammar.structured import ReplyFormat, reply_format
from tether.guardrails.presets import GuardConfig
from tether.proxy.openai_schema import ChatCompletionRequest, ChatMessageIn, ResponseFormat
from tether.proxy.wire import MAX_LOGIT_BIAS, flatten_text, guard_for, stop_strings, tool_specs
from tether.turns.events import ChatJob, ToolChoice

__all__ = ["job_from_openai", "text_of"]


def text_of(content: str | list[dict[str, Any]] | None, *, where: str) -> str:
    """Flatten OpenAI content parts to text; refuse parts this server cannot read."""
    return flatten_text(content, where=where, kinds=("text", "input_text"), join="")


def _message(msg: ChatMessageIn, index: int) -> Message:
    where = f"messages[{index}].content"
    role = {"developer": "system", "function": "tool"}.get(msg.role, msg.role)
    content = text_of(msg.content, where=where)
    calls: list[ToolCall] = []
    for call in msg.tool_calls or ():
        args = call.function.arguments
        arguments, repairs = decode_arguments(args)
        raw = args if isinstance(args, str) else ""
        calls.append(ToolCall(call.function.name, arguments, call.id or new_call_id(), raw, repairs))
    return Message(
        role=role,  # type: ignore[arg-type]
        content=content,
        tool_calls=tuple(calls),
        tool_call_id=msg.tool_call_id,
        name=msg.name,
    )


def _logit_bias(bias: dict[str, float] | None, n_vocab: int) -> tuple[tuple[int, float], ...]:
    if not bias:
        return ()
    if len(bias) > MAX_LOGIT_BIAS:
        raise InvalidRequestError(f"logit_bias may hold at most {MAX_LOGIT_BIAS} tokens", param="logit_bias")
    out: list[tuple[int, float]] = []
    for key, value in bias.items():
        if not key.isdigit() or int(key) >= n_vocab:
            raise InvalidRequestError(
                f"logit_bias keys are token ids from 0 to {n_vocab - 1}, not {key!r}", param="logit_bias"
            )
        if not -100 <= value <= 100:
            raise InvalidRequestError(
                f"logit_bias values must be between -100 and 100, not {value}", param=f"logit_bias.{key}"
            )
        out.append((int(key), float(value)))
    return tuple(out)


def _reply_format(rf: ResponseFormat | None) -> ReplyFormat | None:
    """``response_format``: ``json_object`` (any object) or ``json_schema`` (``json_schema.schema``)."""
    if rf is None or rf.type == "text":
        return None
    if rf.type == "json_object":
        return reply_format(None, param="response_format")
    declared = rf.json_schema or {}
    name = declared.get("name")
    return reply_format(
        declared.get("schema"),
        param="response_format.json_schema.schema",
        name=name if isinstance(name, str) and name else "response",
    )


def job_from_openai(
    req: ChatCompletionRequest,
    *,
    default_temperature: float,
    default_guard: GuardConfig,
    n_vocab: int,
) -> ChatJob:
    messages = tuple(_message(m, i) for i, m in enumerate(req.messages))
    tools = tool_specs(
        (t.function.name, t.function.description, t.function.parameters, f"tools[{i}].function.parameters")
        for i, t in enumerate(req.tools or ())
    )
    choice: ToolChoice
    if req.tool_choice is None:
        choice = "auto"
    elif isinstance(req.tool_choice, str):
        choice = req.tool_choice
    else:
        choice = req.tool_choice.function.name
    if choice == "required" and not tools:
        raise InvalidRequestError("tool_choice 'required' needs at least one tool", param="tool_choice")
    if req.top_logprobs is not None and not req.logprobs:
        raise InvalidRequestError(
            "top_logprobs needs logprobs: true (set logprobs to true to get log-probabilities)",
            param="top_logprobs",
        )
    temperature = default_temperature if req.temperature is None else req.temperature
    params = SamplingParams(
        temperature=temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        seed=req.seed,
        logit_bias=_logit_bias(req.logit_bias, n_vocab),
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        logprobs=(req.top_logprobs or 0) if req.logprobs else None,
    )
    options = req.tether
    guard = guard_for(
        options.preset if options else None, options.constrain if options else None, default_guard
    )
    return ChatJob(
        messages=messages,
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=req.parallel_tool_calls,
        params=params,
        max_tokens_requested=req.max_completion_tokens or req.max_tokens,
        stop=stop_strings(req.stop),
        guard=guard,
        reply_format=_reply_format(req.response_format),
    )
