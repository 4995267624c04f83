"""Turning a conversation and offered tools into prompt text for one model.

When the chat template understands tools they are passed to it as-is; otherwise (or
when the format says its prompt owns the tools, as the generic format does) the active
tool-call format renders the tool block into the system prompt and rewrites past tool
calls and tool results into turns the template can hold.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tether.chat import Message
from tether.engine.template import ChatTemplate
from tether.grammar.formats.base import ToolCallFormat, ToolSpec

__all__ = ["build_prompt"]


def build_prompt(
    template: ChatTemplate,
    fmt: ToolCallFormat,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
) -> str:
    """Prompt text ending with the assistant generation prefix."""
    if template.supports_tools and not fmt.prompt_owns_tools:
        return template.render(
            [m.to_template() for m in messages],
            tools=[t.to_openai() for t in tools] if tools else None,
        )
    return template.render(_fold_tools(fmt, messages, tools))


def _fold_tools(
    fmt: ToolCallFormat, messages: Sequence[Message], tools: Sequence[ToolSpec]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    names_by_id: dict[str, str] = {}
    block = fmt.render_tools(tools) if tools else ""
    for msg in messages:
        if msg.role == "assistant" and msg.tool_calls:
            names_by_id.update({c.id: c.name for c in msg.tool_calls})
            out.append({"role": "assistant", "content": fmt.render_calls(msg.content, msg.tool_calls)})
        elif msg.role == "tool":
            name = msg.name or names_by_id.get(msg.tool_call_id or "", "tool")
            role, text = fmt.render_tool_result(name, msg.content)
            out.append({"role": role, "content": text})
        else:
            out.append({"role": msg.role, "content": msg.content})
    if block:
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{block}".strip()}
        else:
            out.insert(0, {"role": "system", "content": block})
    # Consecutive same-role turns (several tool results) merge: many small templates expect alternation.
    merged: list[dict[str, Any]] = []
    for item in out:
        if merged and merged[-1]["role"] == item["role"] == "user":
            merged[-1] = {"role": "user", "content": f"{merged[-1]['content']}\n\n{item['content']}"}
        else:
            merged.append(item)
    return merged


def tools_digest(tools: Sequence[ToolSpec]) -> str:
    """A stable key for a tool set (mask caches are keyed by it)."""
    return json.dumps([t.to_openai() for t in tools], sort_keys=True)
