"""Pydantic models for the OpenAI-compatible request bodies.

Unknown fields are ignored (clients send many); anything tether cannot honour
is refused with a 400 naming the field, never silently dropped.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tether.engine.logprobs import MAX_TOP_LOGPROBS
from tether.proxy.wire import Loose, NamedTool, RequestBody

__all__ = [
    "ChatCompletionRequest",
    "CompletionRequest",
    "FunctionDef",
    "ToolDef",
]


class FunctionDef(NamedTool):
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(Loose):
    type: Literal["function"] = "function"
    function: FunctionDef


class FunctionCallIn(Loose):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCallIn(Loose):
    id: str | None = None
    type: str = "function"
    function: FunctionCallIn


class ChatMessageIn(Loose):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class NamedFunction(Loose):
    name: str


class NamedToolChoice(Loose):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(Loose):
    include_usage: bool = False


class ResponseFormat(Loose):
    type: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: dict[str, Any] | None = None


class TetherOptions(BaseModel):
    """The ``tether`` extension field: per-request overrides (tether's own namespace: a misspelt
    key is an error, not silently ignored)."""

    model_config = ConfigDict(extra="forbid")

    constrain: Literal["off", "names", "strict"] | None = None
    preset: Literal["bare", "names", "resolve", "rescue", "full", "strict"] | None = None


class ChatCompletionRequest(RequestBody):
    model: str
    messages: list[ChatMessageIn] = Field(min_length=1)
    tools: list[ToolDef] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=1)
    response_format: ResponseFormat | None = None
    logit_bias: dict[str, float] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    tether: TetherOptions | None = None


class CompletionRequest(RequestBody):
    model: str
    prompt: str | list[str]
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    max_tokens: int | None = Field(default=16, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=1)
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)  # the legacy shape: a count
