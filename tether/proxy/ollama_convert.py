"""Translating Ollama's API to the core and back: request bodies, jobs, reply objects, errors.

Ollama's shapes differ from OpenAI's in a few ways that matter here: tool-call arguments are
objects, not JSON text; a tool result names its tool (``tool_name``) instead of a call id, so it
is paired with the earliest unanswered call of that name; sampling settings come in ``options``
(``num_predict`` is the token limit; -1 and -2 mean no limit of the client's own); ``format:
"json"`` is JSON mode. Errors are ``{"error": "..."}`` with the same statuses as the other
protocols; :class:`OllamaErrorMiddleware` reshapes those raised before a route runs.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from starlette.types import ASGIApp

from tether.calls import ToolCall, decode_arguments
from tether.chat import Message
from tether.engine.base import SamplingParams
from tether.errors import InvalidRequestError, TetherError
from tether.grammar.structured import ReplyFormat, reply_format
from tether.guardrails.presets import GuardConfig
from tether.proxy.middleware import ErrorShapeMiddleware
from tether.proxy.openai_schema import FunctionDef, TetherOptions
from tether.proxy.wire import Loose, RequestBody, guard_for, stop_strings, tool_specs
from tether.turns.events import ChatJob, FinishOut

__all__ = [
    "OLLAMA_VERSION",
    "Clock",
    "OllamaChatRequest",
    "OllamaErrorMiddleware",
    "OllamaGenerateRequest",
    "OllamaShowRequest",
    "final_fields",
    "job_from_ollama_chat",
    "job_from_ollama_generate",
    "model_entry",
    "model_info",
    "ollama_error",
    "ollama_tool_call",
    "sampling",
    "timestamp",
]

# The Ollama release whose API shapes these routes follow (clients gate features on it).
OLLAMA_VERSION = "0.12.0"
API_PREFIX = "/api"

Format = Literal["", "json"] | dict[str, Any] | None


class OllamaOptions(Loose):
    """The runtime ``options`` tether honours; load-time ones (``num_ctx``, ``num_gpu``…) belong to
    ``tether serve`` and are ignored, as Ollama ignores options a model does not use."""

    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=1)
    min_p: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = None
    num_predict: int | None = None
    stop: str | list[str] | None = None
    repeat_penalty: float | None = Field(default=None, gt=0)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)


class OllamaFunctionCall(Loose):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str | None = None


class OllamaToolCall(Loose):
    id: str | None = None
    function: OllamaFunctionCall


class OllamaMessage(Loose):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = ""
    images: list[str] | None = None
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None  # not Ollama's, but OpenAI-minded clients send it


class OllamaTool(Loose):
    type: str = "function"
    function: FunctionDef


class _Generation(RequestBody):
    model: str
    format: Format = None
    options: OllamaOptions | None = None
    stream: bool = True
    keep_alive: float | str | None = None
    think: bool | str | None = None
    tether: TetherOptions | None = None


class OllamaChatRequest(_Generation):
    """``POST /api/chat``; ``messages`` may be empty (Ollama then only loads the model)."""

    messages: list[OllamaMessage] = Field(default_factory=list)
    tools: list[OllamaTool] | None = None


class OllamaGenerateRequest(_Generation):
    """``POST /api/generate``: a prompt through the chat template, or as is with ``raw``."""

    prompt: str | None = None
    system: str | None = None
    suffix: str | None = None
    template: str | None = None
    context: list[int] | None = None
    images: list[str] | None = None
    raw: bool = False


class OllamaShowRequest(RequestBody):
    """``POST /api/show``; older clients send ``name``."""

    model: str | None = None
    name: str | None = None
    verbose: bool = False


def ollama_error(exc: TetherError) -> dict[str, str]:
    return {"error": exc.message}


class OllamaErrorMiddleware(ErrorShapeMiddleware):
    """Errors raised before an ``/api/…`` route runs (auth, body limit, validation), in Ollama's shape."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app, prefix=API_PREFIX, shape=lambda _status, message: {"error": message})


def timestamp(at: float | None = None) -> str:
    """RFC 3339 in UTC, as Ollama writes ``created_at``."""
    moment = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    return moment.isoformat().replace("+00:00", "Z")


def _refuse_thinking(req: _Generation) -> None:
    if req.think not in (None, False, ""):
        raise InvalidRequestError(
            f"{req.model!r} does not support thinking; leave think out or send false", param="think"
        )


def _refuse_images(images: list[str] | None, where: str) -> None:
    if images:
        raise InvalidRequestError("images are not supported by this text-only model", param=where)


def sampling(opts: OllamaOptions | None, default_temperature: float) -> SamplingParams:
    o = opts or OllamaOptions()
    base = SamplingParams()
    return SamplingParams(
        temperature=default_temperature if o.temperature is None else o.temperature,
        top_p=1.0 if o.top_p is None else o.top_p,
        top_k=base.top_k if o.top_k is None else o.top_k,
        min_p=base.min_p if o.min_p is None else o.min_p,
        repeat_penalty=base.repeat_penalty if o.repeat_penalty is None else o.repeat_penalty,
        seed=o.seed,
        presence_penalty=o.presence_penalty or 0.0,
        frequency_penalty=o.frequency_penalty or 0.0,
    )


def _max_tokens(opts: OllamaOptions | None) -> int | None:
    n = opts.num_predict if opts else None
    if n is None or n in (-1, -2):  # -1: until the model stops; -2: until the window is full
        return None
    if n < 1:
        raise InvalidRequestError(
            "options.num_predict must be a positive number of tokens, or -1 for no limit",
            param="options.num_predict",
        )
    return n


def _reply_format(fmt: Format) -> ReplyFormat | None:
    """``format``: ``"json"`` (any object) or a JSON Schema."""
    if isinstance(fmt, dict):
        return reply_format(fmt, param="format")
    return reply_format(None, param="format") if fmt == "json" else None


def _job(
    req: _Generation, messages: tuple[Message, ...], default_temperature: float, guard: GuardConfig
) -> ChatJob:
    options = req.tether
    return ChatJob(
        messages=messages,
        params=sampling(req.options, default_temperature),
        max_tokens_requested=_max_tokens(req.options),
        stop=stop_strings(req.options.stop if req.options else None),
        guard=guard_for(options.preset if options else None, options.constrain if options else None, guard),
        reply_format=_reply_format(req.format),
    )


@dataclass
class _Calls:
    """Calls of the latest assistant turn that no tool message has answered yet."""

    pending: list[ToolCall] = field(default_factory=list)

    def answer(self, msg: OllamaMessage, where: str) -> ToolCall:
        for i, call in enumerate(self.pending):
            if msg.tool_call_id is not None:
                hit = call.id == msg.tool_call_id
            else:
                hit = msg.tool_name is None or call.name == msg.tool_name
            if hit:
                return self.pending.pop(i)
        wanted = f"tool_name {msg.tool_name!r}" if msg.tool_name else "a tool result"
        raise InvalidRequestError(
            f"{wanted} answers no unanswered call of the assistant message before it", param=where
        )


def _messages(items: list[OllamaMessage]) -> tuple[Message, ...]:
    out: list[Message] = []
    calls = _Calls()
    for i, msg in enumerate(items):
        where = f"messages[{i}]"
        _refuse_images(msg.images, f"{where}.images")
        content = msg.content or ""
        if msg.role == "assistant":
            made: list[ToolCall] = []
            for j, sent in enumerate(msg.tool_calls or ()):
                fn = sent.function
                arguments, repairs = decode_arguments(fn.arguments)
                raw = fn.arguments if isinstance(fn.arguments, str) else ""
                # A stable id for calls Ollama sent without one: the prompt stays the same next turn.
                made.append(ToolCall(fn.name, arguments, sent.id or f"call_{i}_{j}", raw, repairs))
            calls.pending = list(made)
            out.append(Message("assistant", content, tool_calls=tuple(made)))
        elif msg.role == "tool":
            call = calls.answer(msg, where)
            out.append(Message("tool", content, tool_call_id=call.id, name=call.name))
        else:
            out.append(Message(msg.role, content))
    return tuple(out)


def job_from_ollama_chat(
    req: OllamaChatRequest, *, default_temperature: float, default_guard: GuardConfig
) -> ChatJob:
    _refuse_thinking(req)
    messages = _messages(req.messages)
    for i, tool in enumerate(req.tools or ()):
        if tool.type != "function":
            raise InvalidRequestError(
                f"tool type {tool.type!r} is not supported; declare function tools", param=f"tools[{i}].type"
            )
    tools = tool_specs(
        (t.function.name, t.function.description, t.function.parameters, f"tools[{i}].function.parameters")
        for i, t in enumerate(req.tools or ())
    )
    return replace(_job(req, messages, default_temperature, default_guard), tools=tools)


def job_from_ollama_generate(
    req: OllamaGenerateRequest, *, default_temperature: float, default_guard: GuardConfig
) -> ChatJob:
    """The job for a templated prompt (``system`` then the prompt as a user turn); with ``raw`` the
    route hands ``prompt`` to the engine as is and uses only the job's sampling settings."""
    _refuse_thinking(req)
    _refuse_images(req.images, "images")
    for name in ("suffix", "template"):
        if getattr(req, name):
            raise InvalidRequestError(f"{name} is not supported by this server", param=name)
    if req.context:
        raise InvalidRequestError(
            "context (token ids of an earlier reply) is not supported; send the conversation to /api/chat",
            param="context",
        )
    messages = (Message("system", req.system),) if req.system and not req.raw else ()
    return _job(req, (*messages, Message("user", req.prompt or "")), default_temperature, default_guard)


def ollama_tool_call(call: ToolCall, index: int) -> dict[str, Any]:
    """A call in Ollama's shape: arguments as an object."""
    return {"id": call.id, "function": {"index": index, "name": call.name, "arguments": dict(call.arguments)}}


@dataclass
class Clock:
    """When a request started and when its first event came (nanoseconds), for Ollama's durations."""

    started: int = field(default_factory=time.perf_counter_ns)
    first: int | None = None

    def mark_first(self) -> None:
        self.first = time.perf_counter_ns()


def final_fields(finish: FinishOut, clock: Clock) -> dict[str, Any]:
    """The last object's ``done`` fields. ``prompt_eval_duration`` runs to the first output (prompt
    evaluation and the first token), ``eval_duration`` from there to the end."""
    now = time.perf_counter_ns()
    first = clock.first or now
    return {
        "done": True,
        "done_reason": "length" if finish.finish_reason == "length" else "stop",
        "total_duration": now - clock.started,
        "load_duration": 0,
        "prompt_eval_count": finish.usage.window_prompt_tokens,
        "prompt_eval_duration": first - clock.started,
        "eval_count": finish.usage.completion_tokens,
        "eval_duration": now - first,
    }


def _typed(value: str) -> Any:
    """GGUF metadata arrives as text; numbers go back to numbers (never NaN or infinity: not JSON)."""
    try:
        return int(value)
    except ValueError:
        pass
    try:
        number = float(value)
    except ValueError:
        return value
    return number if math.isfinite(number) else value


def model_entry(name: str, info_path: str, metadata: dict[str, str], started: float) -> dict[str, Any]:
    """One model as ``/api/tags`` lists it. ``digest`` names the model, it is not the file's hash."""
    path = Path(info_path) if info_path else None
    size = path.stat().st_size if path is not None and path.is_file() else 0
    family = metadata.get("general.architecture", "")
    return {
        "name": name,
        "model": name,
        "modified_at": timestamp(started),
        "size": size,
        "digest": hashlib.sha256(name.encode()).hexdigest(),
        "details": {
            "parent_model": "",
            "format": "mlx" if metadata.get("engine") == "mlx" else "gguf",
            "family": family,
            "families": [family] if family else [],
            "parameter_size": metadata.get("general.size_label", ""),
            "quantization_level": "",
        },
    }


def model_info(metadata: dict[str, str], n_ctx: int) -> dict[str, Any]:
    """``/api/show``'s ``model_info``: the ``general.*`` and architecture keys, and the served window."""
    arch = metadata.get("general.architecture", "")
    keep = {
        k: _typed(v)
        for k, v in metadata.items()
        if k.startswith("general.") or (arch and k.startswith(arch + "."))
    }
    if arch:
        keep[f"{arch}.context_length"] = n_ctx
    return keep
