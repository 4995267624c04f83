"""Reading and rewriting OpenAI chat completions, as plain dicts or ``openai`` SDK objects.

The guardrails only look at the first choice's message (``content``,
``tool_calls``, ``finish_reason``). A rewritten response keeps its type: a dict
stays a dict, an SDK ``ChatCompletion`` is rebuilt with ``model_validate``. The
interventions go under ``"tether": {"interventions": [...]}``, the key the proxy
itself uses, so on an SDK object they read as ``response.tether["interventions"]``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import EllipsisType
from typing import Any, TypeVar

from pydantic import BaseModel

from tether.calls import ToolCall
from tether.errors import InvalidRequestError

__all__ = [
    "ResponseView",
    "as_dict",
    "interventions_of",
    "rebuild",
    "view_response",
]

R = TypeVar("R")


@dataclass(frozen=True)
class ResponseView:
    """The parts of a chat completion the guardrails read."""

    content: str | None
    calls: tuple[ToolCall, ...]
    finish_reason: str | None
    has_choice: bool = True


def as_dict(response: Any) -> dict[str, Any]:
    """A deep plain-dict copy of a chat completion (dict or pydantic/SDK object)."""
    if isinstance(response, Mapping):
        return copy.deepcopy(dict(response))
    if isinstance(response, BaseModel):  # the openai SDK's objects
        return response.model_dump(mode="json")
    raise InvalidRequestError(f"not a chat completion: {type(response).__name__}")


def _content_text(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return str(content)


def _message(data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    choices = data.get("choices") or []
    if not choices or not isinstance(choices[0], Mapping):
        return None
    message = choices[0].get("message")
    return message if isinstance(message, Mapping) else {}


def view_response(response: Any) -> ResponseView:
    """The first choice's content, tool calls and finish reason."""
    data = response if isinstance(response, Mapping) else as_dict(response)
    message = _message(data)
    if message is None:
        return ResponseView(None, (), None, has_choice=False)
    calls = [ToolCall.from_openai(c) for c in message.get("tool_calls") or () if isinstance(c, Mapping)]
    reason = data["choices"][0].get("finish_reason")
    return ResponseView(_content_text(message.get("content")), tuple(calls), reason)


def rebuild(
    response: R,
    *,
    content: str | EllipsisType | None = ...,
    tool_calls: Sequence[Mapping[str, Any]] | EllipsisType | None = ...,
    finish_reason: str | EllipsisType = ...,
    interventions: Sequence[Mapping[str, Any]] = (),
) -> R:
    """``response`` with the first choice's message changed where an argument is given
    (``tool_calls=None`` removes them) and ``interventions`` appended under ``tether``."""
    data = as_dict(response)
    choices = data.get("choices") or []
    if choices:
        message = choices[0].setdefault("message", {"role": "assistant"})
        if not isinstance(content, EllipsisType):
            message["content"] = content
        if tool_calls is None:
            message.pop("tool_calls", None)
        elif not isinstance(tool_calls, EllipsisType):
            message["tool_calls"] = [dict(c) for c in tool_calls]
        if not isinstance(finish_reason, EllipsisType):
            choices[0]["finish_reason"] = finish_reason
    found = data.get("tether")
    extra: dict[str, Any] = found if isinstance(found, dict) else {}
    earlier = list(extra.get("interventions") or [])
    data["tether"] = {**extra, "interventions": [*earlier, *(dict(i) for i in interventions)]}
    if isinstance(response, Mapping):
        return data  # type: ignore[return-value]
    if not isinstance(response, BaseModel):
        raise InvalidRequestError(f"cannot rebuild a {type(response).__name__}")
    rebuilt: R = type(response).model_validate(data)
    return rebuilt


def interventions_of(response: Any) -> list[dict[str, Any]]:
    """The interventions recorded on a response (``[]`` when there are none)."""
    data = response if isinstance(response, Mapping) else as_dict(response)
    extra = data.get("tether")
    found = extra.get("interventions") if isinstance(extra, Mapping) else None
    return [dict(i) for i in found or ()]
