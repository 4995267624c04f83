"""Layer 2 of the guardrails: the constrained re-pick interface.

When layer 1 (:func:`tether.guardrails.names.resolve_name`) cannot map a written
name to an offered tool, a :class:`Repicker` may ask the model again for the name
only, under a grammar that admits nothing but the offered names (the proxy builds
it from the engine's constraint machinery). The guardrails treat its answer as
untrusted: a name that is not offered is ignored, and None means "no re-pick", in
which case the unknown-tool outcome applies.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from tether.chat import Message, ToolCallRecord
from tether.grammar.formats.base import ToolSpec

__all__ = ["Repicker", "messages_from_openai"]


@runtime_checkable
class Repicker(Protocol):
    """Re-picks a tool name with the engine's grammar restricted to ``offered``."""

    async def repick(
        self, messages: Sequence[Message], offered: Sequence[ToolSpec], bad_name: str
    ) -> str | None:
        """An offered tool name for the call the model wrote as ``bad_name``, or None.

        ``messages`` is the conversation up to (not including) the bad assistant turn.
        """
        ...


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return str(content)


def messages_from_openai(messages: Sequence[Message | Mapping[str, Any]]) -> tuple[Message, ...]:
    """OpenAI chat message dicts (or ready ``Message`` s) as protocol-neutral ``Message`` s."""
    out: list[Message] = []
    for msg in messages:
        if isinstance(msg, Message):
            out.append(msg)
            continue
        role = {"developer": "system", "function": "tool"}.get(str(msg.get("role")), str(msg.get("role")))
        calls = []
        for call in msg.get("tool_calls") or ():
            fn = call.get("function") or {}
            args = fn.get("arguments")
            calls.append(
                ToolCallRecord(
                    id=str(call.get("id") or ""),
                    name=str(fn.get("name") or ""),
                    arguments=args if isinstance(args, str) else _json(args),
                )
            )
        out.append(
            Message(
                role=role,  # type: ignore[arg-type]
                content=_text(msg.get("content")),
                tool_calls=tuple(calls),
                tool_call_id=msg.get("tool_call_id"),
                name=msg.get("name"),
            )
        )
    return tuple(out)


def _json(value: Any) -> str:
    return "{}" if value is None else json.dumps(value, ensure_ascii=False)
