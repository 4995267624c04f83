"""JSON-aware scanning and lenient JSON decoding, for rescue parsing and coercion.

Small models write almost-JSON: Python literals, single quotes, trailing commas,
raw newlines inside strings, or a reply cut off by ``max_tokens``. This module finds
where a JSON value ends without being fooled by brackets or quotes inside strings,
and decodes almost-JSON into Python values, naming every repair it made. It knows
nothing about tool calls (see :mod:`tether.grammar.rescue.calls`) and imports nothing
from tether, so the bottom modules (:mod:`tether.coercion`) can use it too.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from typing import Any

__all__ = [
    "JsonSpan",
    "find_json_values",
    "loads_lenient",
    "scan_value_end",
    "string_end",
]

_STRUCT = re.compile(r"[{}\[\]\"']")
_DQ_BODY = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SQ_BODY = re.compile(r"[^'\\]*(?:\\.[^'\\]*)*'", re.S)
_OPENERS = re.compile(r"[{\[]")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_KEY_AFTER = re.compile(r"\s*:")
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_JSON_LITERALS = {"true", "false", "null"}
_CLOSER = {"{": "}", "[": "]"}


def string_end(text: str, body_start: int, quote: str) -> int | None:
    """Index just past the quote closing the string whose body starts at ``body_start``.

    Backslash escapes are honoured, so ``\\"`` does not close a string. None when the
    string is not closed within ``text``.
    """
    m = (_DQ_BODY if quote == '"' else _SQ_BODY).match(text, body_start)
    return m.end() if m else None


# Resume points for scan_value_end: a streamed region is rescanned after every token,
# so the scan state at the end of the previous (shorter) text is remembered and reused
# when the new text starts with that same prefix. Pure memoization: results are the
# same with or without it.
_RESUME: dict[tuple[int, str], tuple[str, int, tuple[str, ...], str]] = {}
_RESUME_MAX = 128


_RESUME_LOCK = threading.Lock()


def _remember(key: tuple[int, str], text: str, pos: int, stack: list[str], quote: str) -> None:
    entry = (text[:pos], pos, tuple(stack), quote)
    with _RESUME_LOCK:
        if len(_RESUME) >= _RESUME_MAX:
            _RESUME.pop(next(iter(_RESUME)), None)
        _RESUME[key] = entry


def scan_value_end(text: str, start: int = 0, *, resume: bool = True) -> int | None:
    """End (exclusive) of the object or array that opens at ``text[start]``.

    Strings in either quote style are skipped whole, so ``}`` or ``"`` inside a
    string value never ends the value; a closer that does not match the innermost
    open bracket (``[{"a": 1}}]``) is skipped as a stray. None when not closed yet.
    ``resume``: continue from where a scan of a prefix of ``text`` stopped (streaming).
    """
    key = (start, text[start : start + 32])
    saved = _RESUME.get(key) if resume else None
    if saved is not None and text.startswith(saved[0]):
        _, i, frozen, quote = saved
        stack = list(frozen)
    else:
        i, stack, quote = start, [], ""
    while True:
        if quote:  # inside a string; i is a position not in the middle of an escape
            m = (_DQ_BODY if quote == '"' else _SQ_BODY).match(text, i)
            if m is None:
                body_end = len(text) - (len(text) - len(text.rstrip("\\"))) % 2
                if resume:
                    _remember(key, text, max(body_end, i), stack, quote)
                return None
            i = m.end()
            quote = ""
            continue
        found = _STRUCT.search(text, i)
        if found is None:
            if resume:
                _remember(key, text, len(text), stack, "")
            return None
        c = found.group()
        j = found.start()
        i = j + 1
        if c in "\"'":
            quote = c
        elif c in "{[":
            stack.append(_CLOSER[c])
        elif stack and c == stack[-1]:  # a mismatched closer is a stray: skipped
            stack.pop()
            if not stack:
                return j + 1


def _dq_string(body: str, quote: str) -> str:
    """Re-encode a string body (escapes kept) as a strict double-quoted JSON string."""
    out: list[str] = []
    i = 0
    n = len(body)
    while i < n:
        c = body[i]
        if c == "\\" and i + 1 < n:
            nxt = body[i + 1]
            if nxt == "'":
                out.append("'")
            elif nxt in '"\\/bfnrtu':
                out.append(c + nxt)
            else:  # an escape JSON does not know: keep the backslash literally
                out.append("\\\\" + nxt)
            i += 2
            continue
        if c == "\\":
            out.append("\\\\")
        elif c == '"':
            out.append('\\"')
        elif ord(c) < 0x20:
            out.append(json.dumps(c)[1:-1])
        else:
            out.append(c)
        i += 1
    return '"' + "".join(out) + '"'


class _Normalizer:
    """One pass that rewrites almost-JSON into strict JSON, closing a truncated tail."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.out: list[str] = []
        self.stack: list[str] = []
        self.repairs: list[str] = []
        self.truncated = False
        self.safe: tuple[int, tuple[str, ...]] = (0, ())

    def _repair(self, name: str) -> None:
        if name not in self.repairs:
            self.repairs.append(name)

    def _last(self) -> str:
        for tok in reversed(self.out):
            if tok.strip():
                return tok[-1]
        return ""

    def _expects_key(self) -> bool:
        return bool(self.stack) and self.stack[-1] == "{" and self._last() in "{,"

    def _value_done(self) -> None:
        self.safe = (len(self.out), tuple(self.stack))

    def run(self) -> str:
        text = self.text
        n = len(text)
        i = 0
        while i < n:
            c = text[i]
            if c.isspace():
                self.out.append(c)
                i += 1
            elif c in "\"'":
                is_key = self._expects_key()
                end = string_end(text, i + 1, c)
                if c == "'":
                    self._repair("single_quotes")
                if end is None:
                    self.truncated = True
                    if is_key:
                        break
                    self.out.append(_dq_string(text[i + 1 :], c))
                    self._value_done()
                    break
                body = text[i + 1 : end - 1]
                if c == '"' and any(ord(ch) < 0x20 for ch in body):
                    self._repair("control_characters_escaped")
                self.out.append(_dq_string(body, c))
                i = end
                if not is_key:
                    self._value_done()
            elif c in "{[":
                self.stack.append(c)
                self.out.append(c)
                self._value_done()
                i += 1
            elif c in "}]":
                self._closer(c)
                i += 1
            elif (m := _WORD.match(text, i)) is not None:
                i = self._word(m.group(), m.end())
            elif (m := _NUMBER.match(text, i)) is not None:
                self.out.append(m.group())
                i = m.end()
                self._value_done()
            else:
                self.out.append(c)
                i += 1
        if self.stack:
            self.truncated = True
        return self._closed("".join(self.out), self.stack)

    def _closer(self, c: str) -> None:
        opener = "{" if c == "}" else "["
        if opener not in self.stack:  # nothing to close: a stray bracket
            self._repair("stray_brackets")
            return
        while self.stack[-1] != opener:  # close what was left open inside, e.g. {"a": [1}
            self._repair("brackets_closed")
            self.out.append(_CLOSER[self.stack.pop()])
        if self._last() == ",":
            self._drop_trailing_comma()
        self.stack.pop()
        self.out.append(c)
        self._value_done()

    def _drop_trailing_comma(self) -> None:
        while self.out and not self.out[-1].strip():
            self.out.pop()
        if self.out and self.out[-1] == ",":
            self.out.pop()
            self._repair("trailing_commas")

    def _word(self, word: str, end: int) -> int:
        if word in _PY_LITERALS:
            self.out.append(_PY_LITERALS[word])
            self._repair("python_literals")
            self._value_done()
        elif word in _JSON_LITERALS:
            self.out.append(word)
            self._value_done()
        elif self._expects_key() and _KEY_AFTER.match(self.text, end):
            self.out.append(json.dumps(word))
            self._repair("unquoted_keys")
        else:
            self.out.append(word)
        return end

    def safe_variant(self) -> str:
        """The output cut back to the last complete value, then closed."""
        length, stack = self.safe
        head = "".join(self.out[:length]).rstrip()
        if head.endswith(","):
            head = head[:-1]
        return self._closed(head, list(stack))

    @staticmethod
    def _closed(head: str, stack: list[str]) -> str:
        return head + "".join(_CLOSER[b] for b in reversed(stack))


def loads_lenient(text: str, *, allow_truncated: bool = False) -> tuple[Any, tuple[str, ...]]:
    """Decode almost-JSON; returns ``(value, repairs)``.

    Repairs (in order found): ``single_quotes``, ``python_literals``,
    ``trailing_commas``, ``unquoted_keys``, ``control_characters_escaped``,
    ``stray_brackets``, ``brackets_closed``, ``truncated_closed`` (only when
    ``allow_truncated``: missing quotes and brackets appended, a dangling key cut).
    Raises ``ValueError`` when the text cannot be read as JSON.
    """
    try:
        return json.loads(text), ()
    except ValueError:
        pass
    norm = _Normalizer(text.strip())
    candidate = norm.run()
    if norm.truncated and not allow_truncated:
        raise ValueError("truncated JSON")
    repairs = norm.repairs + (["truncated_closed"] if norm.truncated else [])
    try:
        return json.loads(candidate, strict=False), tuple(repairs)
    except ValueError:
        if not norm.truncated:
            raise
    return json.loads(norm.safe_variant(), strict=False), tuple(repairs)


class JsonSpan:
    """A JSON value found inside text: ``text[start:end]`` decodes to ``value``."""

    __slots__ = ("end", "repairs", "start", "value")

    def __init__(self, start: int, end: int, value: Any, repairs: tuple[str, ...]) -> None:
        self.start = start
        self.end = end
        self.value = value
        self.repairs = repairs


def find_json_values(text: str, start: int = 0) -> Iterator[JsonSpan]:
    """Every top-level object or array in ``text``, left to right, prose skipped.

    A value still open at the end of ``text`` is closed (repair ``truncated_closed``);
    callers accept such a value only after checking it against a schema.
    """
    pos = start
    while (m := _OPENERS.search(text, pos)) is not None:
        i = m.start()
        end = scan_value_end(text, i)
        if end is None:
            try:
                value, repairs = loads_lenient(text[i:], allow_truncated=True)
            except ValueError:
                value, repairs = None, ()
            if not (isinstance(value, dict | list) and value):
                pos = i + 1  # an opener in prose ("[it's"), not a cut-off value
                continue
            if "truncated_closed" not in repairs:
                repairs = (*repairs, "truncated_closed")
            yield JsonSpan(i, len(text), value, repairs)
            return
        try:
            value, repairs = loads_lenient(text[i:end])
        except ValueError:
            pos = i + 1
            continue
        yield JsonSpan(i, end, value, repairs)
        pos = end
