"""JSON values and JSON Schema as GBNF rules (llama.cpp's grammar language).

The semantics follow layer 0's strict mode (:func:`tether.grammar.regex.schema_regex`):
properties in declared order, required ones present, optional ones skippable, at most one
space around separators, a parameterless object as ``{}``. Keywords GBNF cannot say
cheaply (``pattern``, ``format``, numeric bounds) narrow nothing here; the guard's schema
validation still checks them after the fact, as it does for the embedded engine.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["GbnfBuilder", "literal"]

# A JSON value, written the way layer 0 admits it (one optional space around separators).
_JSON_RULES: dict[str, str] = {
    "ws": '" "?',
    "gap": r"[ \t\r\n]{0,8}",  # around a call inside its markers (formats put newlines there)
    "char": r'[^"\\\x00-\x1F\x7F-\x9F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "string": r'"\"" char* "\""',
    "integer": '"-"? ("0" | [1-9] [0-9]*)',
    "number": '"-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?',
    "boolean": '"true" | "false"',
    "null": '"null"',
    "value": "object | array | string | number | boolean | null",
    "object": '"{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* )? ws "}"',
    "array": '"[" ws ( value ( ws "," ws value )* )? ws "]"',
}
_MAX_DEPTH = 12  # $ref chains deeper than this admit any JSON value there


def literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _alt(options: list[str]) -> str:
    unique = list(dict.fromkeys(options))
    return unique[0] if len(unique) == 1 else "(" + " | ".join(unique) + ")"


class GbnfBuilder:
    """Collects named rules (identical bodies share one name) and writes the grammar text."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = dict(_JSON_RULES)
        self._names: dict[str, str] = {body: name for name, body in _JSON_RULES.items()}

    def rule(self, hint: str, body: str) -> str:
        """The name of a rule with ``body``: an existing one, or a new one named after ``hint``."""
        if body in self._names:
            return self._names[body]
        base = re.sub(r"[^a-zA-Z0-9-]+", "-", hint).strip("-").lower() or "r"
        name, n = base, 1
        while name in self.rules:
            n += 1
            name = f"{base}-{n}"
        self.rules[name] = body
        self._names[body] = name
        return name

    def text(self, root: str) -> str:
        """The grammar with ``root`` as its start rule."""
        lines = [f"root ::= {root}"]
        lines += [f"{name} ::= {body}" for name, body in self.rules.items()]
        return "\n".join(lines) + "\n"

    # -- JSON Schema -------------------------------------------------------------------

    def arguments(self, schema: Mapping[str, Any], hint: str) -> str:
        """A tool's arguments object under its parameters schema (strict mode)."""
        if not schema.get("properties") and schema.get("type", "object") == "object":
            return literal("{") + " ws " + literal("}")  # as layer 0: no parameters, no members
        return self.schema(schema, hint, defs=_defs(schema))

    def schema(self, schema: Any, hint: str, *, defs: Mapping[str, Any], depth: int = 0) -> str:
        """A GBNF expression for values valid under ``schema``."""
        if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
            return "value"
        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = defs.get(ref.rsplit("/", 1)[-1]) if ref.startswith("#/") else None
            return self.schema(target, hint, defs=defs, depth=depth + 1)
        if "const" in schema:
            return literal(json.dumps(schema["const"]))
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return _alt([literal(json.dumps(v)) for v in schema["enum"]])
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                rest = {k: v for k, v in schema.items() if k != key}
                parts = [self.schema({**rest, **o}, hint, defs=defs, depth=depth + 1) for o in options]
                return _alt(parts)
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1:
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            return self.schema({**rest, **all_of[0]}, hint, defs=defs, depth=depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            return _alt([self.schema({**schema, "type": t}, hint, defs=defs, depth=depth) for t in kind])
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else None
        if kind == "string":
            return self._string(schema)
        if kind in ("integer", "number", "boolean", "null"):
            return str(kind)
        if kind == "array":
            return self._array(schema, hint, defs, depth)
        if kind == "object":
            return self._object(schema, hint, defs, depth)
        return "value"

    def _string(self, schema: Mapping[str, Any]) -> str:
        low, high = schema.get("minLength"), schema.get("maxLength")
        if not isinstance(low, int) and not isinstance(high, int):
            return "string"
        low = low if isinstance(low, int) else 0
        count = f"{{{low},{high}}}" if isinstance(high, int) else f"{{{low},}}"
        return self.rule("string-len", literal('"') + f" char{count} " + literal('"'))

    def _array(self, schema: Mapping[str, Any], hint: str, defs: Mapping[str, Any], depth: int) -> str:
        item = self.schema(schema.get("items"), f"{hint}-item", defs=defs, depth=depth + 1)
        low_v, high_v = schema.get("minItems"), schema.get("maxItems")
        low: int = low_v if isinstance(low_v, int) else 0
        high: int | None = high_v if isinstance(high_v, int) else None
        sep = f"ws {literal(',')} ws {item}"
        if low == 0 and high is None:
            body = f"{literal('[')} ws ( {item} ( {sep} )* )? ws {literal(']')}"
        elif high == 0:
            body = f"{literal('[')} ws {literal(']')}"
        else:
            first = max(low, 1)
            more = f"{{{first - 1},{'' if high is None else high - 1}}}"
            items = f"{item} ( {sep} ){more}"
            body = f"{literal('[')} ws {items if low else f'( {items} )?'} ws {literal(']')}"
        return self.rule(f"{hint}-array", body)

    def _object(self, schema: Mapping[str, Any], hint: str, defs: Mapping[str, Any], depth: int) -> str:
        props = schema.get("properties")
        if not isinstance(props, Mapping) or not props:
            return "object"
        required = set(schema.get("required") or ())
        keys = list(props)
        members = [
            literal(json.dumps(k))
            + " ws "
            + literal(":")
            + " ws "
            + self.schema(props[k], f"{hint}-{k}", defs=defs, depth=depth + 1)
            for k in keys
        ]

        def after(i: int) -> str:  # members i.. once one has been written: each behind a comma
            parts = [
                f"ws {literal(',')} ws {members[j]}"
                if keys[j] in required
                else f"( ws {literal(',')} ws {members[j]} )?"
                for j in range(i, len(keys))
            ]
            return " ".join(parts)

        def first(i: int) -> str:  # members i.. when none has been written yet
            if i == len(keys):
                return ""
            head = f"{members[i]} {after(i + 1)}".strip()
            if keys[i] in required:
                return head
            rest = first(i + 1)
            return f"( {head} | {self.rule(f'{hint}-from-{keys[i + 1]}', rest)} )" if rest else f"( {head} )?"

        body = f"{literal('{')} ws {first(0)} ws {literal('}')}"
        return self.rule(f"{hint}-object", body)


def _defs(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    found: dict[str, Any] = {}
    for key in ("definitions", "$defs"):
        value = schema.get(key)
        if isinstance(value, Mapping):
            found.update(value)
    return found
