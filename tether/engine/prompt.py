"""Turning a conversation and offered tools into prompt text for one model.

When the chat template understands tools they are passed to it as-is; otherwise (or
when the format says its prompt owns the tools, as the generic format does) the active
tool-call format renders the tool block into the system prompt and rewrites past tool
calls and tool results into turns the template can hold.

``prompt_ids`` is where the turns become token ids: tether renders them with the template it
holds, or, for a remote engine whose server keeps the chat template to itself
(``RendersChat``: vLLM without its tokenizer info exposed), that server renders the same turns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from tether.chat import Message
from tether.engine.base import Engine
from tether.engine.template import ChatTemplate
from tether.grammar.formats.base import ToolCallFormat, ToolSpec

__all__ = ["RendersChat", "build_prompt", "fold_tools", "prompt_ids", "prompt_turns"]


def build_prompt(
    template: ChatTemplate,
    fmt: ToolCallFormat,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
) -> str:
    """Prompt text ending with the assistant generation prefix."""
    turns, offered = prompt_turns(template.supports_tools, fmt, messages, tools)
    return template.render(turns, tools=offered)


def prompt_turns(
    template_reads_tools: bool,
    fmt: ToolCallFormat,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The turns and tools a chat template gets: the tools as they are where it reads them and the
    format does not own them, else folded into the turns by the format."""
    if template_reads_tools and not fmt.prompt_owns_tools:
        return [m.to_template() for m in messages], [t.to_openai() for t in tools] if tools else None
    return fold_tools(fmt, messages, tools), None


@runtime_checkable
class RendersChat(Protocol):
    """A remote engine whose server renders turns with the model's chat template into token ids."""

    @property
    def chat_template_tools(self) -> bool:
        """Whether the server's template reads the ``tools`` it is given."""
        ...

    def render_chat(self, turns: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """The prompt ids for ``turns``, ending with the assistant generation prefix."""
        ...


def prompt_ids(
    engine: Engine,
    template: ChatTemplate,
    fmt: ToolCallFormat,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
) -> list[int]:
    """The prompt as token ids. Tether renders with ``template`` unless it holds no chat template of
    the model (``info.chat_template`` None) and the engine's server renders (``RendersChat``)."""
    if engine.info.chat_template is None and isinstance(engine, RendersChat):
        turns, offered = prompt_turns(engine.chat_template_tools, fmt, messages, tools)
        return engine.render_chat(turns, offered)
    return engine.tokenize(build_prompt(template, fmt, messages, tools), special=True)


def fold_tools(
    fmt: ToolCallFormat, messages: Sequence[Message], tools: Sequence[ToolSpec]
) -> list[dict[str, Any]]:
    """Plain ``{role, content}`` turns: the tool block in the system prompt, past calls and results in
    the format's own text (for a template, or a chat API's model, without tool support)."""
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
