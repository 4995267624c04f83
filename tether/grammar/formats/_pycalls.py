"""Reading pythonic call lists (``[f(a=1), g("x")]``) into plain values with a lark grammar.

Used by the ``pythonic`` format and by ``llama3_json`` for Llama's built-in
``brave_search.call(query=...)``. Nothing is evaluated: the grammar accepts only
calls, keyword/positional arguments and literals (strings, numbers, Python and
JSON constants, lists, tuples, dicts, bare identifiers read as strings).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import LarkError

from tether.calls import ToolCall
from tether.grammar.formats._shared import dumps
from tether.grammar.formats.base import ToolSpec
from tether.grammar.rescue import find_tool, make_call

__all__ = ["parse_pythonic", "py_literal"]

_GRAMMAR = r"""
start: "[" [call ("," call)*] [","] "]"      -> listed
     | call (("," | ";") call)*               -> bare
call: NAME "(" [arg ("," arg)*] [","] ")"
arg: NAME "=" value                           -> kwarg
   | value                                    -> posarg
?value: STRING                                -> string
      | NUMBER                                -> number
      | "-" NUMBER                            -> negative
      | NAME                                  -> word
      | "[" [value ("," value)*] [","] "]"    -> list
      | "(" [value ("," value)*] [","] ")"    -> tuple
      | "{" [pair ("," pair)*] [","] "}"      -> dict
pair: value ":" value
NAME: /[A-Za-z_][A-Za-z0-9_.\-]*/
STRING: /"(?:[^"\\]|\\.)*"/ | /'(?:[^'\\]|\\.)*'/
NUMBER: /(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?/
%ignore /\s+/
"""
_WORDS: dict[str, Any] = {
    "True": True,
    "true": True,
    "False": False,
    "false": False,
    "None": None,
    "null": None,
}
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|.)", re.S)
_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", "'": "'", '"': '"', "b": "\b", "f": "\f"}
_CLOSE = {"(": ")", "[": "]", "{": "}"}


@cache
def _parser() -> Lark:
    return Lark(_GRAMMAR, parser="lalr", maybe_placeholders=False)


def _unescape(m: re.Match[str]) -> str:
    code = m.group(1)
    if code[0] in "ux" and len(code) > 1:
        return chr(int(code[1:], 16))
    return _SIMPLE.get(code, "\\" + code)


class _Reader:
    """Turns the parse tree into Python values, noting repairs."""

    def __init__(self) -> None:
        self.repairs: list[str] = []

    def value(self, node: Tree[Token]) -> Any:
        kind = str(node.data)
        kids = node.children
        if kind == "string":
            return _ESCAPE.sub(_unescape, str(kids[0])[1:-1])
        if kind in ("number", "negative"):
            text = str(kids[0])
            number = float(text) if any(c in text for c in ".eE") else int(text)
            return -number if kind == "negative" else number
        if kind == "word":
            word = str(kids[0])
            if word in _WORDS:
                return _WORDS[word]
            self.repairs.append("bare_identifier")
            return word
        if kind in ("list", "tuple"):
            return [self.value(k) for k in kids if isinstance(k, Tree)]
        pairs = [k for k in kids if isinstance(k, Tree)]
        return {str(self.value(p.children[0])): self.value(p.children[1]) for p in pairs}  # type: ignore[arg-type]


def _closers(text: str) -> str:
    stack: list[str] = []
    quote = ""
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in _CLOSE:
            stack.append(_CLOSE[c])
        elif c in ")]}" and stack:
            stack.pop()
        i += 1
    return quote + "".join(reversed(stack))


def _tree(text: str) -> tuple[Tree[Token], tuple[str, ...]] | None:
    attempts: list[tuple[str, tuple[str, ...]]] = [(text, ())]
    if (closing := _closers(text)) != "":
        attempts.append((text + closing, ("truncated_closed",)))
        cut = text[: text.rfind(",")] if "," in text else ""
        if cut:
            attempts.append((cut + _closers(cut), ("truncated_closed",)))
    for candidate, repairs in attempts:
        try:
            return _parser().parse(candidate), repairs
        except LarkError:
            continue
    return None


def _call(
    node: Tree[Token], tools: Sequence[ToolSpec], raw: str, repairs: tuple[str, ...]
) -> ToolCall | None:
    reader = _Reader()
    name = str(node.children[0])
    if name.endswith(".call"):  # Llama 3.1 built-ins: brave_search.call(query=...)
        name = name[: -len(".call")]
    tool = find_tool(tools, name)
    order = list((tool.parameters.get("properties") or {}) if tool else ())
    args: dict[str, Any] = {}
    positional = 0
    for arg in node.children[1:]:
        if not isinstance(arg, Tree):
            continue
        if str(arg.data) == "kwarg":
            args[str(arg.children[0])] = reader.value(arg.children[1])  # type: ignore[arg-type]
            continue
        key = order[positional] if positional < len(order) else f"arg{positional}"
        positional += 1
        reader.repairs.append("positional_arguments")
        args[key] = reader.value(arg.children[0])  # type: ignore[arg-type]
    return make_call(name, args, tools, raw=raw, repairs=(*repairs, *reader.repairs))


def parse_pythonic(text: str, tools: Sequence[ToolSpec]) -> tuple[ToolCall, ...] | None:
    """The calls in ``text`` (a ``[f(a=1), g()]`` list or bare ``f(a=1)``), or None."""
    parsed = _tree(text.strip())
    if parsed is None:
        return None
    tree, repairs = parsed
    found = [_call(n, tools, text.strip(), repairs) for n in tree.children if isinstance(n, Tree)]
    calls = tuple(c for c in found if c is not None)
    return calls or None


def py_literal(value: Any) -> str:
    """A value as a Python literal (strings JSON-quoted, which Python also reads)."""
    if isinstance(value, bool) or value is None:
        return {True: "True", False: "False", None: "None"}[value]
    if isinstance(value, list):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py_literal(str(k))}: {py_literal(v)}" for k, v in value.items()) + "}"
    return dumps(value)
