"""A byte automaton for any JSON value (names mode: arguments are free but must still be JSON).

The state is ``(stack, lex)``: ``stack`` holds the open containers (depth is
bounded so the state space stays finite) and ``lex`` the lexical position.
Whitespace is allowed wherever JSON allows it.
"""

from __future__ import annotations

from collections.abc import Iterable

from tether.grammar.automata import Automaton, State

__all__ = ["JsonValue"]

_WS = frozenset(b" \n\t\r")
_DIGITS = frozenset(b"0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ESC = frozenset(b'"\\/bfnrt')
_VALUE_START = frozenset(b'"{[-0123456789tfn') | _WS
_WORDS = {ord("t"): b"true", ord("f"): b"false", ord("n"): b"null"}
# Number states that may end the number.
_NUM_END = frozenset({"n0", "nint", "nfrac", "nexp"})


class JsonValue(Automaton):
    """Any JSON value; ``object_only`` requires the top level to be an object."""

    def __init__(self, *, object_only: bool = True, max_depth: int = 8) -> None:
        self.object_only = object_only
        self.max_depth = max_depth

    def start(self) -> State:
        return ((), "value")

    def is_final(self, state: State) -> bool:
        stack, lex = state
        return not stack and (lex == "end" or lex in _NUM_END)

    def loop_class(self, state: State) -> str | None:
        return "jstr" if state[1] in ("str", "key") else None

    def first_bytes(self, state: State) -> Iterable[int] | None:
        stack, lex = state
        if lex == "value":
            return b"{" if self.object_only and not stack else _VALUE_START
        if lex == "first_key":
            return b'"}' + bytes(_WS)
        if lex == "key_start":
            return b'"' + bytes(_WS)
        if lex == "colon":
            return b":" + bytes(_WS)
        if lex == "first_value":
            return bytes(_VALUE_START) + b"]"
        if lex == "after":
            return b",}]" + bytes(_WS)
        if lex == "end":
            return ()
        if isinstance(lex, tuple):
            if isinstance(lex[0], bytes):
                return (lex[0][lex[1]],)
            return _HEX
        if lex in ("str_esc", "key_esc"):
            return bytes(_ESC) + b"u"
        if lex in _NUMBER_LEX:
            follow = b"" if lex not in _NUM_END else (b",}]" + bytes(_WS) if stack else b"")
            return bytes(_DIGITS) + b".eE+-" + follow
        return None

    def step(self, state: State, byte: int) -> State | None:
        stack, lex = state
        if isinstance(lex, tuple) and isinstance(lex[0], bytes):  # inside true/false/null
            word, i = lex
            if word[i] != byte:
                return None
            return self._after_value(stack) if i + 1 == len(word) else (stack, (word, i + 1))
        if isinstance(lex, tuple):
            return self._hex_step(stack, lex, byte)
        if lex in ("str", "key"):
            if byte == 0x22:
                return (stack, "colon") if lex == "key" else self._after_value(stack)
            if byte == 0x5C:
                return (stack, lex + "_esc")
            return state if byte >= 0x20 else None
        if lex in ("str_esc", "key_esc"):
            base = lex[:3]
            if byte == ord("u"):
                return (stack, (base, 4))
            return (stack, base) if byte in _ESC else None
        if lex in _NUMBER_LEX:
            nxt = _number_step(lex, byte)
            if nxt is not None:
                return (stack, nxt)
            if lex not in _NUM_END:
                return None
            after = self._after_value(stack)
            return self.step(after, byte)
        if lex == "value" or lex == "first_value":
            if byte in _WS:
                return state
            if lex == "first_value" and byte == ord("]"):
                return self._close(stack, "[")
            return self._open_value(stack, byte)
        if lex == "first_key" or lex == "key_start":
            if byte in _WS:
                return state
            if byte == 0x22:
                return (stack, "key")
            if lex == "first_key" and byte == ord("}"):
                return self._close(stack, "{")
            return None
        if lex == "colon":
            if byte in _WS:
                return state
            return (stack, "value") if byte == ord(":") else None
        if lex == "after":
            if byte in _WS:
                return state
            if byte == ord(","):
                return (stack, "key_start" if stack[-1] == "{" else "value")
            if byte in (ord("}"), ord("]")):
                return self._close(stack, "{" if byte == ord("}") else "[")
            return None
        return None

    def _hex_step(self, stack: tuple[str, ...], lex: tuple[str, int], byte: int) -> State | None:
        base, n = lex
        if byte not in _HEX:
            return None
        return (stack, base) if n == 1 else (stack, (base, n - 1))

    def _open_value(self, stack: tuple[str, ...], byte: int) -> State | None:
        if self.object_only and not stack and byte != ord("{"):
            return None
        if byte == ord("{") or byte == ord("["):
            if len(stack) >= self.max_depth:
                return None
            return ((*stack, chr(byte)), "first_key" if byte == ord("{") else "first_value")
        if byte == 0x22:
            return (stack, "str")
        if byte in _WORDS:
            return (stack, (_WORDS[byte], 1))
        nxt = _number_step("nstart", byte)
        return None if nxt is None else (stack, nxt)

    def _close(self, stack: tuple[str, ...], kind: str) -> State | None:
        if not stack or stack[-1] != kind:
            return None
        return self._after_value(stack[:-1])

    @staticmethod
    def _after_value(stack: tuple[str, ...]) -> State:
        return (stack, "after") if stack else (stack, "end")


_NUMBER_LEX = frozenset({"n-", "n0", "nint", "ndot", "nfrac", "ne", "nesign", "nexp"})


def _number_step(lex: str, byte: int) -> str | None:
    digit = byte in _DIGITS
    if lex == "nstart":
        if byte == ord("-"):
            return "n-"
        return ("n0" if byte == ord("0") else "nint") if digit else None
    if lex == "n-":
        return ("n0" if byte == ord("0") else "nint") if digit else None
    if lex in ("n0", "nint"):
        if lex == "nint" and digit:
            return "nint"
        if byte == ord("."):
            return "ndot"
        return "ne" if byte in (ord("e"), ord("E")) else None
    if lex in ("ndot", "nfrac"):
        if digit:
            return "nfrac"
        return "ne" if lex == "nfrac" and byte in (ord("e"), ord("E")) else None
    if lex == "ne":
        if byte in (ord("+"), ord("-")):
            return "nesign"
        return "nexp" if digit else None
    if lex in ("nesign", "nexp"):
        return "nexp" if digit else None
    return None
