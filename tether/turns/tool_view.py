"""Which offered tools the prompt shows in full, when all of them would crowd a small model's window.

A user's agent may offer dozens of tools with long descriptions (opencode sends ~7,600 tokens of
them; a BFCL ``live_multiple`` item ~1,000). A small model reads them all and loses the request.
When the tools' text would take more than ``share`` of the window, the tools most relevant to the
request (lexically and, with an embedding model, in meaning: :func:`tether.selection.decision.relevance`)
are shown in full, at least ``keep`` of them and as many as fit the share, and the rest as their
name, the first sentence of their description and their parameters' names. Only the prompt
changes: layer 0 still allows every offered name with its full schema, and the guard checks
calls against the full tools.

The choice is kept per tool set and reused while the request's most relevant tool is among the
ones it shows in full: an agent's next task then renders the same tools block, so the prompt's
prefix (system prompt and tools, thousands of tokens) stays in the slot's context and the prefix
cache instead of being evaluated again from the first tool that changed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tether.caches import CacheFill
from tether.chat import Message
from tether.grammar.formats.base import ToolSpec
from tether.selection.decision import DecisionModel, relevance
from tether.selection.semantic import SemanticRelevance

__all__ = ["ToolView", "brief"]

CHARS_PER_TOKEN = 4  # a rough size is enough to decide whether the tools crowd the window
_SENTENCE = re.compile(r"(?<=[.!?])\s")
_BRIEF_CHARS = 120
_REMEMBERED = 64  # tool sets whose last choice is kept


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
    return replace(tool, description=first, parameters=params)


@dataclass(frozen=True)
class ToolView:
    """How the prompt shows the offered tools; ``share`` 0 shows every tool in full."""

    share: float = 0.25
    keep: int = 3
    semantic: SemanticRelevance | None = None
    model: DecisionModel = field(default_factory=DecisionModel)
    # The last choice per tool set (a digest of the tools): which of them were shown in full.
    _chosen: OrderedDict[bytes, frozenset[int]] = field(
        default_factory=OrderedDict, init=False, repr=False, compare=False
    )

    def cache_fill(self) -> dict[str, CacheFill]:
        return {"tool_view_choices": CacheFill(len(self._chosen), _REMEMBERED)}

    def shown(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], n_ctx: int
    ) -> tuple[ToolSpec, ...]:
        texts = [json.dumps(t.to_openai(), ensure_ascii=False) for t in tools]
        sizes = [len(text) // CHARS_PER_TOKEN for text in texts]
        budget = self.share * n_ctx
        if self.share <= 0 or len(tools) <= self.keep or sum(sizes) <= budget:
            return tuple(tools)
        ranked = relevance(messages, tools, self.semantic)
        order = sorted(range(len(tools)), key=lambda i: -self.model.name_score(ranked[i]))
        key = hashlib.blake2b("\n".join(texts).encode(), digest_size=16).digest()
        full = self._chosen.get(key)
        if full is None or order[0] not in full:
            full = self._choose(tools, sizes, order, budget)
        self._chosen[key] = full
        self._chosen.move_to_end(key)
        while len(self._chosen) > _REMEMBERED:
            self._chosen.popitem(last=False)
        return tuple(t if i in full else brief(t) for i, t in enumerate(tools))

    def _choose(
        self, tools: Sequence[ToolSpec], sizes: list[int], order: list[int], budget: float
    ) -> frozenset[int]:
        """The tools to show in full: in ``order``, at least ``keep``, as many as fit ``budget``."""
        briefs = [_size(brief(t)) for t in tools]
        used = sum(briefs)
        full: set[int] = set()
        for i in order:
            grown = used - briefs[i] + sizes[i]
            if len(full) >= self.keep and grown > budget:
                break
            full.add(i)
            used = grown
        return frozenset(full)
