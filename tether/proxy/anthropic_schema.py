"""Pydantic models for Anthropic Messages API request bodies (``/v1/messages``, ``count_tokens``).

Unknown fields are ignored (clients send ``metadata``, ``thinking``, ``cache_control``
and more); content blocks stay plain dicts here and are read, or refused with a
400 naming the block, by :mod:`tether.proxy.anthropic_convert`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tether.proxy.openai_schema import TetherOptions
from tether.proxy.wire import Loose, NamedTool, RequestBody

__all__ = [
    "AnthropicMessageIn",
    "AnthropicTool",
    "AnthropicToolChoice",
    "CountTokensRequest",
    "MessagesRequest",
]


class AnthropicMessageIn(Loose):
    """One turn: ``content`` is a string or a list of content blocks (``text``, ``tool_use``, …)."""

    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class AnthropicTool(NamedTool):
    """A client tool. Server tools (``type`` such as ``web_search_20250305``) are refused later."""

    input_schema: dict[str, Any] | None = None
    type: str | None = None


class AnthropicToolChoice(Loose):
    type: Literal["auto", "any", "none", "tool"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class CountTokensRequest(RequestBody):
    """The body of ``/v1/messages/count_tokens``: a messages request without sampling settings."""

    model: str
    messages: list[AnthropicMessageIn] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: AnthropicToolChoice | None = None
    tether: TetherOptions | None = None


class MessagesRequest(CountTokensRequest):
    """The body of ``/v1/messages``; ``max_tokens`` is required, as in Anthropic's API."""

    max_tokens: int = Field(ge=1)
    stream: bool = False
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=1)
