"""Which offered tools the prompt shows in full, when all of them would crowd a small model's window.

A user's agent may offer dozens of tools with long descriptions (opencode sends ~7,600 tokens of
them; a BFCL ``live_multiple`` item ~1,000). A small model reads them all and loses the request.
When the tools' text would take more than ``share`` of the window, the tools most relevant to the
request (lexically and, with an embedding model, in meaning: :func:`tether.selection.decision.relevance`)
are shown in full, at least ``keep`` of them and as many as fit the share, and the rest as their
name, the first sentence of their description and their parameters' names. Only the prompt
changes: layer 0 still allows every offered name with its full schema, and the guard checks
calls against the full tools.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.chat import Message
from tether.grammar.formats.base import ToolSpec
from tether.selection.decision import DecisionModel, relevance
from tether.selection.semantic import SemanticRelevance

__all__ = ["ToolView", "brief"]

CHARS_PER_TOKEN = 4  # a rough size is enough to decide whether the tools crowd the window
_SENTENCE = re.compile(r"(?<=[.!?])\s")
_BRIEF_CHARS = 120


def _size(tool: ToolSpec) -> int:
    """About how many tokens ``tool`` takes in a prompt."""
    return len(json.dumps(tool.to_openai(), ensure_ascii=False)) // CHARS_PER_TOKEN


def brief(tool: ToolSpec) -> ToolSpec:
    """``tool`` as one line: its name, its description's first sentence, its parameters' names and types."""
    first = _SENTENCE.split(tool.description.strip(), maxsplit=1)[0][:_BRIEF_CHARS]
    props: Mapping[str, Any] = tool.parameters.get("properties") or {}
    shown = {
        key: {"type": spec["type"]} if isinstance(spec, Mapping) and "type" in spec else {}
        for key, spec in props.items()
    }
    params: dict[str, Any] = {"type": "object", "properties": shown}
    if tool.parameters.get("required"):
        params["required"] = list(tool.parameters["required"])
    return ToolSpec(tool.name, first, params)


@dataclass(frozen=True)
class ToolView:
    """How the prompt shows the offered tools; ``share`` 0 shows every tool in full."""

    share: float = 0.25
    keep: int = 3
    semantic: SemanticRelevance | None = None
    model: DecisionModel = field(default_factory=DecisionModel)

    def shown(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], n_ctx: int
    ) -> tuple[ToolSpec, ...]:
        sizes = [_size(t) for t in tools]
        budget = self.share * n_ctx
        if self.share <= 0 or len(tools) <= self.keep or sum(sizes) <= budget:
            return tuple(tools)
        ranked = relevance(messages, tools, self.semantic)
        order = sorted(range(len(tools)), key=lambda i: -self.model.name_score(ranked[i]))
        briefs = [_size(brief(t)) for t in tools]
        used = sum(briefs)
        full: set[int] = set()
        for i in order:
            grown = used - briefs[i] + sizes[i]
            if len(full) >= self.keep and grown > budget:
                break
            full.add(i)
            used = grown
        return tuple(t if i in full else brief(t) for i, t in enumerate(tools))
