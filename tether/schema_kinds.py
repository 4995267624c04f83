"""What kind of value a parameter's schema asks for: one the conversation supplies, or the model writes.

A bottom module (the standard library and :mod:`tether.coercion` only): layer 0's grounding
processor (:mod:`tether.grammar.grounding`), the guard's checks of unsaid values
(:mod:`tether.selection.grounded`, :mod:`tether.guardrails.values`) and the call-or-answer
decision (:mod:`tether.selection.decision`) all classify parameters the same way here.

* An *extractive* parameter (:func:`extractive_kind`) is a string or a number without ``enum``,
  ``const`` or ``default`` (an array of them too): its value is a span of the request, such as a
  name, a place or a number.
* A *composed* one (:func:`composed`) is text the model writes rather than copies: a file's
  ``content``, a shell ``command``, code, a patch, a pattern. It is never extractive.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tether.coercion import schema_types

__all__ = ["composed", "extractive_kind", "identifier_words", "names_a_file"]

_NAME_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
# Words that mark a coding agent's composed parameters (opencode, Continue, aider, Claude Code tools).
_COMPOSED = frozenset(
    {
        *("content", "contents", "command", "commands", "cmd", "code", "script"),
        *("patch", "diff", "body", "pattern", "regex", "replacement"),
    }
)


def composed(name: str) -> bool:
    """Whether a parameter named ``name`` holds text the model writes rather than names: a file's
    content, a shell command, code, a patch, a pattern (``content``, ``newCommand``, ``regex``)."""
    return any(w.lower() in _COMPOSED for w in _NAME_WORD.findall(name))


_FILE_WORDS = frozenset({"path", "file", "filename", "filepath", "files", "paths"})


def names_a_file(name: str) -> bool:
    """Whether a parameter named ``name`` takes a file's name or path (``path``, ``filePath``,
    ``file_name``, ``target_file``): a value the conversation writes as a file name, whole."""
    return any(w.lower() in _FILE_WORDS for w in _NAME_WORD.findall(name))


def identifier_words(name: str) -> frozenset[str] | None:
    """For a parameter that takes an identifier (``id``, ``order_id``, ``eventId``), the other words
    of its name (``{"order"}``); None for any other parameter."""
    words = [w.lower() for w in _NAME_WORD.findall(name)]
    if "id" not in words and "ids" not in words:
        return None
    return frozenset(w for w in words if w not in ("id", "ids"))


def extractive_kind(schema: Any, name: str = "") -> str | None:
    """``"string"`` or ``"number"`` for a value the conversation should supply; None otherwise.

    ``name`` is the parameter's name: a :func:`composed` string is the model's to write.
    """
    if not isinstance(schema, Mapping) or any(k in schema for k in ("enum", "const", "default")):
        return None
    types = schema_types(schema)
    if "string" in types:
        return None if composed(name) else "string"
    if "integer" in types or "number" in types:
        return "number"
    if "array" in types:
        return extractive_kind(schema.get("items"), name)
    return None
