"""The leaf automata tool-call grammars are built from: literal text, JSON strings, whitespace, anything.

Composites (sequences, choices, repetition, the name switch) are in :mod:`tether.grammar.automata`.
"""

from __future__ import annotations

from collections.abc import Iterable

from tether.grammar.automata import Automaton, State

__all__ = ["AnyTail", "JsonString", "Literal", "Ws"]

_WS = frozenset(b" \n\t\r")


class Literal(Automaton):
    """Exactly ``text``."""

    def __init__(self, text: str | bytes) -> None:
        self.text = text.encode() if isinstance(text, str) else text

    def start(self) -> State:
        return 0

    def step(self, state: State, byte: int) -> State | None:
        return state + 1 if state < len(self.text) and self.text[state] == byte else None

    def is_final(self, state: State) -> bool:
        return bool(state == len(self.text))

    def first_bytes(self, state: State) -> Iterable[int] | None:
        return (self.text[state],) if state < len(self.text) else ()


class AnyTail(Automaton):
    """Anything at all: marks the end of a constrained region (the constraint disarms on entry)."""

    def start(self) -> State:
        return "tail"

    def step(self, state: State, byte: int) -> State | None:
        return "tail"

    def is_final(self, state: State) -> bool:
        return True

    def loop_class(self, state: State) -> str | None:
        return "any"


class JsonString(Automaton):
    """A JSON string literal, quotes included; ``nonempty``: it starts with a visible character
    (a text answer that is ``""`` or only spaces would be an empty reply)."""

    _ESC = frozenset(b'"\\/bfnrt')
    _HEX = frozenset(b"0123456789abcdefABCDEF")

    def __init__(self, *, nonempty: bool = False) -> None:
        self.nonempty = nonempty

    def start(self) -> State:
        return "open"

    def step(self, state: State, byte: int) -> State | None:
        if state == "open":
            return ("first" if self.nonempty else "in") if byte == 0x22 else None
        if state == "first":
            return None if byte in _WS or byte in (0x22, 0x5C) else self.step("in", byte)
        if state == "in":
            if byte == 0x22:
                return "done"
            if byte == 0x5C:
                return "esc"
            return "in" if byte >= 0x20 else None
        if state == "esc":
            if byte == ord("u"):
                return 4
            return "in" if byte in self._ESC else None
        if isinstance(state, int):
            if byte not in self._HEX:
                return None
            return "in" if state == 1 else state - 1
        return None

    def is_final(self, state: State) -> bool:
        return bool(state == "done")

    def loop_class(self, state: State) -> str | None:
        return "jstr" if state == "in" else None

    def first_bytes(self, state: State) -> Iterable[int] | None:
        if state == "open":
            return (0x22,)
        if state == "done":
            return ()
        return None


class Ws(Automaton):
    """Optional whitespace (at most ``limit`` bytes)."""

    def __init__(self, limit: int = 4) -> None:
        self.limit = limit

    def start(self) -> State:
        return 0

    def step(self, state: State, byte: int) -> State | None:
        return state + 1 if byte in _WS and state < self.limit else None

    def is_final(self, state: State) -> bool:
        return True

    def first_bytes(self, state: State) -> Iterable[int] | None:
        return _WS if state < self.limit else ()
