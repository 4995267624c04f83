"""Pieces several format modules share: the JSON-payload format base and render helpers.

``JsonPayloadFormat`` implements the detector hooks for every family whose call is
a JSON value between markers (hermes, phi4, llama3_json, mistral v3, generic…):
strip the markers, find JSON calls anywhere in the body, and optionally accept a
bare or fenced JSON call at the very start of a message (``rescue_at_start``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tether.calls import ToolCall
from tether.grammar.formats.base import JsonNameSlot, ParseResult, ToolCallFormat, ToolSpec
from tether.grammar.rescue import (
    armed_region_end,
    extract_json_calls,
    json_arm,
    marker_json_end,
    skip_marker,
)

__all__ = ["JsonPayloadFormat", "dumps", "join_content", "split_region", "tool_dicts"]


def dumps(value: Any) -> str:
    """Compact-but-readable JSON as models are trained on (``", "`` and ``": "`` separators)."""
    return json.dumps(value, ensure_ascii=False)


def tool_dicts(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """``{"name", "description", "parameters"}`` per tool."""
    return [{"name": t.name, "description": t.description, "parameters": dict(t.parameters)} for t in tools]


def join_content(content: str, rendered: str) -> str:
    """Assistant text: prose, then the rendered calls."""
    return f"{content}\n{rendered}" if content else rendered


def split_region(fmt: ToolCallFormat, region: str) -> tuple[str, bool]:
    """The region without its begin marker and a trailing end marker; and whether it had markers."""
    skip = skip_marker(region, fmt.begin)
    body = region[skip:]
    for end in fmt.end:
        if body.endswith(end):
            body = body[: -len(end)]
            break
    return body, skip > 0


class JsonPayloadFormat(ToolCallFormat):
    """A format whose calls are JSON objects between markers."""

    #: also take a bare or fenced JSON call at the very start of the message (offered names only
    #: unless the object has an explicit arguments key)
    rescue_at_start: bool = True
    #: characters that may separate consecutive JSON calls after a marker without end marker
    separators: str = ""

    @property
    def canonical_args(self) -> str:
        """The arguments key the family's own template writes (others are recorded as repairs)."""
        slot = self.name_slot
        return slot.args_key if isinstance(slot, JsonNameSlot) else "arguments"

    def arm(self, head: str) -> bool | None:
        return json_arm(head) if self.arm_at_start or self.rescue_at_start else False

    def region_end(self, region: str, final: bool) -> int | None:
        if not final and any(len(b) > len(region) and b.startswith(region) for b in self.begin):
            return None  # which branch applies is not known yet
        skip = skip_marker(region, self.begin)
        if not skip:
            return armed_region_end(region, final, self.separators)
        if self.end:
            return super().region_end(region, final)
        return marker_json_end(region, skip, final, self.separators)

    def parse_region(self, region: str, tools: Sequence[ToolSpec]) -> ParseResult | None:
        body, marked = split_region(self, region)
        found = extract_json_calls(body, tools, markerless=not marked, canonical_args=self.canonical_args)
        if found is None and marked:
            return self.parse_fallback(body, tools)
        return found

    def parse_fallback(self, body: str, tools: Sequence[ToolSpec]) -> ParseResult | None:
        """Second chance for a marked region without JSON calls (another family's syntax)."""
        return None

    def call_object(self, call: ToolCall) -> Mapping[str, Any]:
        return {"name": call.name, self.canonical_args: dict(call.arguments)}
