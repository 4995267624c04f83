"""Structured replies: a client's JSON Schema for the whole reply, held to what the sampler enforces.

OpenAI's ``response_format``, the Responses API's ``text.format`` and Ollama's ``format`` become one
:class:`ReplyFormat`. :func:`reply_format` checks a schema once, when the request arrives: a valid
JSON Schema whose every keyword is one the constraint enforces (or an annotation, which constrains
nothing) and small enough to compile. A keyword outside that set is an error naming it and where it
is (a JSON pointer), never a silent ignore: a reply under an ignored ``minimum`` could fail the
schema its client parses it with. :func:`check_reply` says whether a finished reply holds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator

from tether.caches import CacheFill, lru_fill
from tether.errors import InvalidRequestError
from tether.grammar.regex import schema_regex
from tether.grammar.spec import JsonSpec
from tether.schema_check import schema_problem

__all__ = [
    "ANNOTATIONS",
    "ENFORCED",
    "FORMATS",
    "MAX_GRAMMAR_CHARS",
    "ReplyFormat",
    "UnsupportedSchemaError",
    "check_reply",
    "reply_format",
]

# What the constraint holds a value to (outlines-core's schema compiler, as for strict arguments).
ENFORCED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "$ref",
        "$defs",
        "definitions",
        "minLength",
        "maxLength",
        "pattern",
        "format",
    }
)
# Keywords that describe and constrain nothing.
ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "$anchor",
        "deprecated",
        "readOnly",
        "writeOnly",
        "discriminator",  # pydantic's OpenAPI hint beside oneOf; JSON Schema validation ignores it
    }
)
FORMATS = frozenset({"date-time", "date", "time", "uuid", "email", "uri"})
# The compiled pattern's size past which a schema is refused: building its automaton over a
# vocabulary would take longer than the reply.
MAX_GRAMMAR_CHARS = 50_000
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems")
_SUBSCHEMAS = ("items", "additionalProperties")


class UnsupportedSchemaError(InvalidRequestError):
    """A reply schema uses a keyword the sampler cannot enforce, or is too large to compile."""

    code = "unsupported_schema"


@dataclass(frozen=True)
class ReplyFormat:
    """A structured reply: one JSON value valid for ``schema`` (None: any JSON object); ``name`` as
    the client called it."""

    schema: Mapping[str, Any] | None
    name: str = "response"

    def spec(self, budget: int | None = None) -> JsonSpec:
        """The reply's output spec, closing within ``budget`` tokens."""
        return JsonSpec(self.schema, self.name, budget)

    def instruction(self, *, tools: bool = False) -> str:
        """What the prompt tells the model (the grammar holds it anyway; a model that knows the shape
        writes better values into it). Beside ``tools`` it is only what an answer looks like: told
        to reply with the value, a small model stops calling the tools."""
        lead = "When you answer without calling a tool, answer with" if tools else "Reply with"
        if self.schema is None:
            return f"{lead} one valid JSON object and nothing else."
        shown = json.dumps(self.schema, ensure_ascii=False, separators=(",", ":"))
        return f"{lead} one JSON value that follows this JSON Schema, and nothing else:\n{shown}"


def _pointer(path: tuple[str | int, ...]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path) or "/"


def _unsupported(schema: Any, path: tuple[str | int, ...]) -> tuple[str, tuple[str | int, ...]] | None:
    """The first keyword of ``schema`` outside what is enforced, with where it is; None if none."""
    if not isinstance(schema, Mapping):
        return None  # true / false
    for key, value in schema.items():
        if key not in ENFORCED and key not in ANNOTATIONS:
            return key, path
        if key == "format" and value not in FORMATS:
            return f"format {value!r}", path
    for key in _SUBSCHEMA_MAPS:
        for name, sub in (schema.get(key) or {}).items():
            if (found := _unsupported(sub, (*path, key, name))) is not None:
                return found
    for key in _SUBSCHEMA_LISTS:
        for i, sub in enumerate(schema.get(key) or ()):
            if (found := _unsupported(sub, (*path, key, i))) is not None:
                return found
    for key in _SUBSCHEMAS:
        if (found := _unsupported(schema.get(key), (*path, key))) is not None:
            return found
    return None


def reply_format(schema: Any, *, param: str, name: str = "response") -> ReplyFormat:
    """The checked :class:`ReplyFormat` for a client's ``schema`` (None: any JSON object); errors name
    ``param`` and, inside the schema, the keyword's JSON pointer."""
    if schema is None:
        return ReplyFormat(None, name)
    if not isinstance(schema, Mapping):
        raise InvalidRequestError("the reply schema must be a JSON object", param=param)
    problem = schema_problem(schema)
    if problem is not None:
        where = _pointer(problem.path)
        raise InvalidRequestError(f"invalid JSON Schema at {where}: {problem.message}", param=param)
    found = _unsupported(schema, ())
    if found is not None:
        keyword, path = found
        raise UnsupportedSchemaError(
            f"the reply schema's {keyword} at {_pointer(path)} is not supported: the sampler cannot "
            f"enforce it (supported: {', '.join(sorted(ENFORCED))}; formats: {', '.join(sorted(FORMATS))})",
            param=param,
        )
    shaping = set(schema) - ANNOTATIONS - {"type", "$defs", "definitions"}
    if schema.get("type", "object") == "object" and not shaping:
        # ``{}`` or ``{"type": "object"}``: any object, as json_object
        return ReplyFormat(None, name)
    size = _grammar_size(json.dumps(schema, sort_keys=True))
    if isinstance(size, str):
        raise UnsupportedSchemaError(f"the reply schema cannot be compiled: {size}", param=param)
    if size > MAX_GRAMMAR_CHARS:
        raise UnsupportedSchemaError(
            f"the reply schema is too large: its grammar has {size} characters, the limit is "
            f"{MAX_GRAMMAR_CHARS}",
            param=param,
        )
    return ReplyFormat(schema, name)


def cache_fill() -> dict[str, CacheFill]:
    return {"structured_grammars": lru_fill(_grammar_size)}


@lru_cache(maxsize=256)
def _grammar_size(canonical: str) -> int | str:
    """The compiled pattern's length, or why it does not compile."""
    try:
        return len(schema_regex(json.loads(canonical)))
    except ValueError as exc:  # outlines-core's message names the structure it refused
        return str(exc).splitlines()[0]


def check_reply(text: str, fmt: ReplyFormat) -> str | None:
    """Why ``text`` is not a reply of ``fmt`` (not JSON, or not valid for the schema); None if it is."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"the reply is not JSON: {exc}"
    if fmt.schema is None:
        return None if isinstance(value, dict) else "the reply is not a JSON object"
    error = next(iter(Draft202012Validator(fmt.schema).iter_errors(value)), None)
    return None if error is None else f"{error.message} (at {_pointer(tuple(error.absolute_path))})"
