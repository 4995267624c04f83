"""An MCP tool result as the text a small model reads in its tool message.

Text blocks pass through; an image, audio or a binary resource is one line that says what it was
(a 135M model cannot look at it, and its base64 would fill the context); a text resource is its text;
``structuredContent`` is compact JSON where no text block carries it already; ``isError`` makes it
an error result. Past ``limit`` characters the text is cut, with the note compaction writes.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any

import mcp_types as types

from tether.sandbox.toolbox import ToolResult

__all__ = ["shaped_result"]


def shaped_result(result: types.CallToolResult, *, limit: int) -> ToolResult:
    """``result`` as one tool message of at most ``limit`` characters (and the cut's note)."""
    parts = [_block(block) for block in result.content]
    text = "\n".join(p for p in parts if p)
    structured = result.structured_content
    if structured is not None and not any(isinstance(b, types.TextContent) for b in result.content):
        shown = json.dumps(structured, ensure_ascii=False, separators=(",", ":"), default=str)
        text = f"{text}\n{shown}" if text else shown
    if not text:
        text = "(the tool returned nothing)" if not result.is_error else "(the tool failed and said nothing)"
    if len(text) > limit:
        text = f"{text[:limit]}\n[truncated {len(text) - limit} chars]"
    return ToolResult(text, is_error=bool(result.is_error))


def _block(block: Any) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return f"[{kind}: {block.mime_type}, {_size(_decoded_len(block.data))}]"
    if isinstance(block, types.ResourceLink):
        described = f" - {block.description}" if block.description else ""
        return f"[resource: {block.uri} ({block.name}){described}]"
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        if isinstance(res, types.TextResourceContents):
            return res.text
        mime = f", {res.mime_type}" if res.mime_type else ""
        return f"[resource: {res.uri}{mime}, {_size(_decoded_len(res.blob))}]"
    return "[a content block of a kind tether does not show]"


def _decoded_len(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _size(n: int) -> str:
    units: Sequence[tuple[int, str]] = ((1 << 20, "MB"), (1 << 10, "KB"))
    for scale, unit in units:
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
