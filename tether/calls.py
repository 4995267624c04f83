"""The one tool-call type: ``ToolCall``, from the parser through the guard to the wire.

Arguments are a decoded mapping everywhere inside tether; they become JSON text only
in the wire adapters (``arguments_json``). ``raw`` keeps what the model (or a client's
history) wrote, ``repairs`` everything that had to be done to read or fix it — parse
repairs (``code_fence``, ``arguments_string_decoded``) and guard changes
(``name_resolved``, ``repicked``, ``args_coerced``, ``args_repaired``), in order.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["ToolCall", "decode_arguments", "new_call_id"]


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def decode_arguments(value: str | Mapping[str, Any] | None) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Arguments as a client or a remote server sent them (JSON text or an object) → (mapping, repairs).

    Text that is not a JSON object is kept, not lost: ``{"_raw": text}`` (repair
    ``arguments_invalid``), so the model still sees what it wrote and the guard can flag it.
    """
    if value is None:
        return {}, ()
    if isinstance(value, Mapping):
        return dict(value), ()
    text = value.strip()
    if not text:
        return {}, ()
    try:
        decoded = json.loads(text)
    except ValueError:
        return {"_raw": value}, ("arguments_invalid",)
    if isinstance(decoded, dict):
        return decoded, ()
    return {"_value": decoded}, ("arguments_not_object",)


@dataclass(frozen=True)
class ToolCall:
    """One tool call. ``id`` is the model's (or the client's) own, or a new ``call_…`` id; it names
    the call and is not part of its value (two parses of one text give equal calls)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=new_call_id, compare=False)
    raw: str = ""
    repairs: tuple[str, ...] = ()

    def __hash__(self) -> int:
        return hash(
            (
                self.name,
                json.dumps(dict(self.arguments), sort_keys=True, default=repr),
                self.raw,
                self.repairs,
            )
        )

    def arguments_json(self) -> str:
        """The arguments as JSON text: the caller's own text when ``raw`` still says exactly this."""
        if self.raw and decode_arguments(self.raw)[0] == dict(self.arguments):
            return self.raw
        return json.dumps(dict(self.arguments), ensure_ascii=False)

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments_json()},
        }

    def with_repairs(self, *repairs: str, **changes: Any) -> ToolCall:
        """A copy with ``repairs`` appended (each once) and ``changes`` applied."""
        added = tuple(r for r in repairs if r not in self.repairs)
        return replace(self, repairs=(*self.repairs, *added), **changes)

    @classmethod
    def from_openai(cls, data: Mapping[str, Any], *, index: int = 0) -> ToolCall:
        """From an OpenAI ``tool_calls`` entry (arguments as JSON text or an object)."""
        fn = data.get("function") or {}
        raw_args = fn.get("arguments")
        if raw_args is not None and not isinstance(raw_args, str | Mapping):
            raw_args = json.dumps(raw_args)
        arguments, repairs = decode_arguments(raw_args)
        return cls(
            name=str(fn.get("name") or ""),
            arguments=arguments,
            id=str(data.get("id") or new_call_id()),
            raw=raw_args if isinstance(raw_args, str) else "",
            repairs=repairs,
        )
