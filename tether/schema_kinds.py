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
* A *shaped* one (:func:`wanted_shape`) asks for its value in a given form: an ISO date, a
  two-letter state, "City, Country" (the guard reshapes a value to it, layer 0's grounding begins
  a date parameter's value where the text writes a date).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tether.coercion import schema_types

__all__ = [
    "PLACE_PREPOSITIONS",
    "asks_free_text",
    "composed",
    "counted_nouns",
    "described_default",
    "examples",
    "extractive_kind",
    "identifier_words",
    "name_parts",
    "name_words",
    "names_a_file",
    "names_a_place",
    "names_a_url",
    "reads_as_url",
    "wanted_shape",
]

_NAME_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def name_parts(name: str) -> tuple[str, ...]:
    """A schema name's words and numbers, lowercased, in order (``oldString`` → ``("old", "string")``,
    ``address_line2`` → ``("address", "line", "2")``)."""
    return tuple(w.lower() for w in _NAME_PART.findall(name))


def _letters(name: str) -> list[str]:
    return [w for w in name_parts(name) if not w.isdigit()]


# Words that mark a coding agent's composed parameters (opencode, Continue, aider, Claude Code tools).
_COMPOSED = frozenset(
    {
        *("content", "contents", "command", "commands", "cmd", "code", "script"),
        *("patch", "diff", "body", "pattern", "regex", "replacement"),
    }
)


_PROGRAM = frozenset({"source", "snippet", "program", "function", "python", "js", "javascript", "sql"})
# What a bare ``code`` holds when its description names the kind of code: an identifier ("Error code,
# e.g. E1234", "the airport code"), unless the kind is a language ("Python code to run").
_KIND_OF_CODE = re.compile(
    r"\b(?!(?:the|a|an|this|that|your|some|of|source|program|python|javascript|typescript|js|java|sql|"
    r"shell|bash|html|css|c|cpp|go|rust|ruby|php)\b)[a-z]+ code\b",
    re.IGNORECASE,
)


def composed(name: str, description: str = "") -> bool:
    """Whether a parameter named ``name`` holds text the model writes rather than names: a file's
    content, a shell command, code, a patch, a pattern (``content``, ``newCommand``, ``regex``). A
    code of some kind is a name, not a program: ``country_code``, or ``code`` described as an
    "error code"."""
    words = _letters(name)
    others = set(words) - {"code"}
    named = "code" in words and not others & (_COMPOSED | _PROGRAM)
    if named and (others or _KIND_OF_CODE.search(description)):
        return False
    return any(w in _COMPOSED for w in words)


_FILE_WORDS = frozenset({"path", "file", "filename", "filepath", "files", "paths"})


def names_a_file(name: str) -> bool:
    """Whether a parameter named ``name`` takes a file's name or path (``path``, ``filePath``,
    ``file_name``, ``target_file``): a value the conversation writes as a file name, whole."""
    return any(w in _FILE_WORDS for w in _letters(name))


_PLACE_WORDS = frozenset(
    {"location", "city", "state", "county", "country", "region", "place", "address", "area", "town"}
)
PLACE_PREPOSITIONS = frozenset({"in", "at", "near", "around", "from", "to"})  # "in Paris", "from Rome"


def names_a_place(name: str) -> bool:
    """Whether a parameter named ``name`` takes a place (``city``, ``location``, ``home_country``)."""
    return any(w in _PLACE_WORDS for w in _letters(name))


_URL_WORDS = frozenset({"url", "uri", "endpoint"})
# something an address is written with: a scheme, a path, a host's dot or port ("users/list",
# "example.com?page=2", "localhost"); "eth1" and "n 12" have none
_URL = re.compile(r"\S*[/.:]\S*|localhost", re.I)


def names_a_url(name: str) -> bool:
    """Whether a parameter named ``name`` takes a URL (``url``, ``endpoint``, ``base_uri``)."""
    return any(w in _URL_WORDS for w in _letters(name))


def reads_as_url(value: str) -> bool:
    """Whether ``value`` is written as a URL, a path or a host could be ("eth1" is none of them)."""
    return _URL.fullmatch(value.strip()) is not None


_FREE_TEXT = frozenset({"query", "q", "search", "text", "prompt", "message", "question", "keywords", "terms"})


def asks_free_text(name: str) -> bool:
    """Whether a parameter named ``name`` takes the request in its own words (``query``,
    ``search_text``): places, names and all."""
    return any(w in _FREE_TEXT for w in _letters(name))


def name_words(name: str) -> frozenset[str]:
    """The words of a parameter's name of three letters or more (``{"total"}``, ``{"max", "results"}``)."""
    return frozenset(w for w in _letters(name) if len(w) >= 3)


_COUNT_WORDS = frozenset({"number", "num", "count", "quantity", "qty", "total", "no"})


def counted_nouns(name: str) -> frozenset[str] | None:
    """For a parameter that counts something, what it counts: ``number_of_adults`` → ``{"adult"}``,
    ``num_games`` → ``{"game"}``, ``nights`` → ``{"night"}``; None for any other (``point1`` is a
    point, not a count of points)."""
    words = _letters(name)
    if any(w in _COUNT_WORDS for w in words):
        nouns = frozenset(w.removesuffix("s") for w in words if w not in _COUNT_WORDS and len(w) >= 3)
        return nouns - {"of"} or None
    last = words[-1] if words else ""
    if len(last) > 3 and last.endswith("s") and not last.endswith("ss"):
        return frozenset({last.removesuffix("s")})
    return None


def identifier_words(name: str) -> frozenset[str] | None:
    """For a parameter that takes an identifier (``id``, ``order_id``, ``eventId``), the other words
    of its name (``{"order"}``); None for any other parameter."""
    words = _letters(name)
    if "id" not in words and "ids" not in words:
        return None
    return frozenset(w for w in words if w not in ("id", "ids"))


_EXAMPLE = re.compile(
    r"\b(?:e\.g\.|for example|for instance|such as|example:)[,:]?\s+['\"`]?([^\s'\"`,;()]+)", re.I
)


def examples(schema: Any) -> list[str]:
    """The example values a parameter's schema gives (``examples``, ``example``, and in its description
    "e.g. E1234", "such as 'CA'"): what the schema illustrates, never what a user said."""
    if not isinstance(schema, Mapping):
        return []
    out = [str(v) for v in schema.get("examples") or [] if isinstance(v, (str, int, float))]
    if isinstance(schema.get("example"), (str, int, float)):
        out.append(str(schema["example"]))
    out += _EXAMPLE.findall(str(schema.get("description") or ""))
    return [v.rstrip(".") for v in out if v.rstrip(".")]


# "Default is 52.", "defaults to 'c'", "(default: 10)": one quoted value, number or word that ends its
# clause ("Default is the current time." names no value).
_DESCRIBED_DEFAULT = re.compile(
    r"\bdefaults?(?:\s+(?:is|to|value\s+is|of))?\s*[:=]?\s*"
    r"(?:'([^'\n]{1,40})'|\"([^\"\n]{1,40})\"|`([^`\n]{1,40})`|([-+]?\d+(?:\.\d+)?|[A-Za-z_]\w*))"
    r"(?=\s*(?:[.,;)]|$))",
    re.I,
)


def described_default(schema: Any) -> str | None:
    """The default a parameter's description states ("The size of the deck. Default is 52." → ``"52"``)
    when its schema has no ``default`` of its own: what the tool does with nothing said."""
    if not isinstance(schema, Mapping) or "default" in schema:
        return None
    m = _DESCRIBED_DEFAULT.search(str(schema.get("description") or ""))
    return next((g for g in m.groups() if g is not None), None) if m else None


def extractive_kind(schema: Any, name: str = "") -> str | None:
    """``"string"`` or ``"number"`` for a value the conversation should supply; None otherwise.

    ``name`` is the parameter's name: a :func:`composed` string is the model's to write.
    """
    if not isinstance(schema, Mapping) or any(k in schema for k in ("enum", "const", "default")):
        return None
    types = schema_types(schema)
    if "string" in types:
        return None if composed(name, str(schema.get("description") or "")) else "string"
    if "integer" in types or "number" in types:
        return "number"
    if "array" in types:
        return extractive_kind(schema.get("items"), name)
    return None


_STATE_CODE = re.compile(
    r"two[- ]letter|abbreviat|state code|postal code of the state|e\.g\.,?\s*'?\"?[A-Z]{2}\b'?\"?", re.I
)


_CITY_STATE = re.compile(r"city,\s*state|'[A-Z][a-z]+(?: [A-Z][a-z]+)*, [A-Z]{2}'", re.I)
_CITY_STATE_EXAMPLE = re.compile(r"[A-Z][a-z]+(?: [A-Z][a-z]+)*, [A-Z]{2}\b")
_CITY_COUNTRY = re.compile(r"city,\s*country", re.I)


_COUNTRY_CODE = re.compile(r"ISO[ -]?3166|alpha-2|(?:two|2)[- ]letter country|country code", re.I)


def wanted_shape(spec: Mapping[str, Any]) -> str | None:
    """The shape a string parameter asks for: ``date`` (ISO), ``date-time`` (ISO, ``date-time-z`` in
    UTC), ``us-date``, ``time`` (24-hour ``HH:MM``; ``time-s`` with seconds), ``state-code``, ``country-code`` (ISO 3166
    alpha-2), ``city-state``, ``city-country``, or None."""
    if spec.get("format") in ("date", "date-time", "time"):
        return str(spec["format"])
    text = str(spec.get("description") or "")
    if m := re.search(r"YYYY-MM-DD[T ]HH:MM(?::SS)?(Z)?", text):
        return "date-time-z" if m.group(1) else "date-time"
    if _CITY_COUNTRY.search(text):
        return "city-country"
    if _CITY_STATE.search(text) or (re.search(r"\bcity\b", text, re.I) and _CITY_STATE_EXAMPLE.search(text)):
        return "city-state"
    if re.search(r"YYYY-MM-DD", text, re.I) and not re.search(r"YYYY-MM-DD[T ]HH", text, re.I):
        return "date"
    if re.search(r"MM/DD/YYYY", text, re.I):
        return "us-date"
    if "HH:MM" in text and "YYYY" not in text:
        return "time-s" if "HH:MM:SS" in text else "time"
    if _COUNTRY_CODE.search(text):
        return "country-code"
    if re.search(r"\bstate\b", text, re.I) and _STATE_CODE.search(text):
        return "state-code"
    return None
