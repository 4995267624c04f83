"""Pieces of a JSON text the streaming detector reads as it arrives: an answer's envelope prefix
(``{"response": "``, whitespace anywhere JSON allows it) and a string's escapes, decoded even when a
piece ends inside one."""

from __future__ import annotations

import re

from tether.grammar.formats.base import JsonTextEnvelope

__all__ = ["STRING_STOP", "Envelope", "decode_escape"]


class Envelope:
    """Tolerant matcher for a text envelope prefix such as ``{"response": "``."""

    _GAP = ""

    def __init__(self, envelope: JsonTextEnvelope) -> None:
        tokens: list[str] = []
        for ch in envelope.prefix:
            if ch.isspace() or ch in "{}[]:,":
                if not tokens or tokens[-1] != self._GAP:
                    tokens.append(self._GAP)
                if ch.isspace():
                    continue
                tokens.extend((ch, self._GAP))
            elif tokens and tokens[-1] != self._GAP and tokens[-1] not in "{}[]:,":
                tokens[-1] += ch
            else:
                tokens.append(ch)
        self.tokens = tokens

    def match(self, text: str) -> int | None:
        """Length of the matched prefix; 0: cannot match; None: undecided."""
        i = 0
        for tok in self.tokens:
            if tok == self._GAP:
                while i < len(text) and text[i].isspace():
                    i += 1
                if i == len(text):
                    return None
                continue
            piece = text[i : i + len(tok)]
            if not tok.startswith(piece):
                return 0
            if len(piece) < len(tok):
                return None
            i += len(tok)
        return i


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", '"': '"', "\\": "\\", "/": "/"}
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_LOW_PREFIX = re.compile(r"\\(?:u(?:[dD](?:[c-fC-F][0-9a-fA-F]{0,2})?)?)?")
STRING_STOP = re.compile(r'["\\]')


def decode_escape(buf: str, j: int, final: bool) -> tuple[str, int] | None:
    """Decode the JSON escape at ``buf[j]`` (a backslash): (text, next index), None if cut off."""
    n = len(buf)
    if j + 1 >= n:
        return None if not final else (buf[j:], n)
    c = buf[j + 1]
    if c in _ESCAPES:
        return _ESCAPES[c], j + 2
    if c != "u":
        return buf[j : j + 2], j + 2
    digits = buf[j + 2 : j + 6]
    if len(digits) < 4 and re.fullmatch(r"[0-9a-fA-F]*", digits):
        return None if not final else (buf[j:], n)
    if not _HEX4.fullmatch(digits):
        return buf[j : j + 2], j + 2
    cp = int(digits, 16)
    if 0xD800 <= cp < 0xDC00:
        rest = buf[j + 6 : j + 12]
        if len(rest) < 6 and not final and (not rest or _LOW_PREFIX.fullmatch(rest)):
            return None
        if len(rest) == 6 and rest[:2] == "\\u" and _HEX4.fullmatch(rest[2:]):
            low = int(rest[2:], 16)
            if 0xDC00 <= low < 0xE000:
                return chr(0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)), j + 12
        return "\ufffd", j + 6
    if 0xDC00 <= cp < 0xE000:
        return "\ufffd", j + 6
    return chr(cp), j + 6
