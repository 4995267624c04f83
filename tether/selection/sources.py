"""Where a value nobody said comes from: the offered tool that gives it.

"Cancel my lamp order" with ``cancel_order(order_id)`` and ``find_orders(item)`` offered: the
conversation does not say the order id, and a small model guesses one. The id is not the user's to
say — ``find_orders`` gives it, and its call is what the request needs first. The source of an
unsaid parameter is the one other offered tool that the called tool's description names ("use
find_orders to get it"), else the one whose description speaks of the parameter's words ("returns
product ids" for ``product_id``) and does not take it itself.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tether.grammar.formats.base import ToolSpec
from tether.schema_kinds import extractive_kind, names_a_file
from tether.selection.clauses import file_mentions
from tether.selection.grounded import request_spans
from tether.selection.relevance import content_words, stem

__all__ = ["narrowed_source", "source_tool"]


def _says(description: str, key: str) -> bool:
    """Does ``description`` speak of every word of parameter ``key`` (a plural counts)?"""
    said = set(content_words(description))
    words = content_words(key)
    return bool(words) and all(w in said or f"{w}s" in said or f"{w}es" in said for w in words)


def _params(tool: ToolSpec) -> set[str]:
    props = tool.parameters.get("properties")
    return set(props) if isinstance(props, dict) else set()


def _names(description: str, name: str) -> bool:
    """Does ``description`` name tool ``name``? An identifier (``find_orders``) where it stands; a
    plain word (``read``, ``write``) only quoted or as "the read tool": "never write new files"
    speaks of writing, not of the write tool."""
    if re.fullmatch(r"[a-z]+", name) is None:
        return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", description) is not None
    word = re.escape(name)
    return re.search(rf"[`'\"]{word}[`'\"]|\b{word}\s+tool\b", description, re.IGNORECASE) is not None


def source_tool(tool: ToolSpec, unsaid: Sequence[str], tools: Sequence[ToolSpec]) -> ToolSpec | None:
    """The offered tool that gives ``tool``'s ``unsaid`` values (see the module doc), or None."""
    others = [t for t in tools if t.name != tool.name]
    named = [t for t in others if _names(tool.description, t.name)]
    if len(named) == 1:
        return named[0]
    for key in unsaid:
        # A tool that takes the value as its own parameter needs it too: it gives something else.
        speaking = [t for t in others if _says(t.description, key) and key not in _params(t)]
        if len(speaking) == 1:
            return speaking[0]
    return None


def narrowed_source(source: ToolSpec, called: ToolSpec, request: str) -> ToolSpec:
    """``source`` as its call is asked for: its required strings limited to the request's own words
    (:func:`tether.selection.grounded.request_spans`; a file parameter to the files it names), less
    the two tools' name words ("lamp", not
    "order", for ``find_orders`` asked instead of ``cancel_order``); only its required values."""
    props = source.parameters.get("properties") or {}
    required = [k for k in source.parameters.get("required") or () if isinstance(k, str)]
    taken = {stem(w) for w in (*content_words(source.name), *content_words(called.name))}
    spans = [s for s in request_spans(request) if not {stem(w) for w in content_words(s)} & taken]
    narrowed: dict[str, object] = {}
    files = file_mentions(request)
    for key in required:
        spec = props.get(key)
        strings = extractive_kind(spec, key) == "string" and spans
        # A file parameter takes a file the request names: a name is copied whole, never in part.
        choices = files if files and names_a_file(key) else spans
        narrowed[key] = {"type": "string", "enum": choices} if strings else (spec or {})
    parameters = {
        "type": "object",
        "properties": narrowed,
        "required": required,
        "additionalProperties": False,
    }
    return ToolSpec(source.name, source.description, parameters)
