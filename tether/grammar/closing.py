"""Ending a value inside its token budget: a structured reply still parses when ``max_tokens`` is near.

An engine cut at ``max_tokens`` leaves half a JSON value, which no client can parse. Where the
generation has a budget, the constraint asks :class:`Closer` once the tokens left are about what the
shortest way out of the current state needs (:func:`closing_bytes`: a breadth-first search over the
automaton's bytes); from then on only tokens that spell the beginning of that way out are allowed,
so the value closes as briefly as its schema lets it (a string ends, required members get their
shortest values) and the reply ends with ``stop``.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from tether.caches import CacheFill, lru_fill
from tether.grammar.automata import Automaton, State
from tether.grammar.jsonvalue import JsonValue
from tether.grammar.regex import RegexCompiler
from tether.grammar.vocab import TokenVocab

__all__ = ["Closer", "closing_bytes", "closing_suffix"]

# Bytes tried first, so the shortest way out prefers closing punctuation, then short values.
_ORDER = b'"}]0,:ntf ' + bytes(b for b in range(32, 127) if b not in b'"}]0,:ntf ')
_MAX_NODES = 4000


def closing_bytes(automaton: Automaton, state: State, *, max_nodes: int = _MAX_NODES) -> bytes | None:
    """The shortest printable bytes that take ``state`` to a final state (b"" when it is final);
    None when none is found within ``max_nodes`` states."""
    if automaton.is_final(state):
        return b""
    seen: dict[State, tuple[State, int] | None] = {state: None}
    queue: deque[State] = deque([state])
    while queue and len(seen) < max_nodes:
        current = queue.popleft()
        for b in _ORDER:
            nxt = automaton.step(current, b)
            if nxt is None or nxt in seen:
                continue
            seen[nxt] = (current, b)
            if automaton.is_final(nxt):
                out = bytearray()
                at: State = nxt
                while (back := seen[at]) is not None:
                    at, byte = back
                    out.append(byte)
                return bytes(reversed(out))
            queue.append(nxt)
    return None


class Closer:
    """Per generation: the tokens that head out of the value when the budget runs short."""

    def __init__(self, automaton: Automaton, vocab: TokenVocab, budget: int) -> None:
        self.automaton = automaton
        self.vocab = vocab
        self.budget = budget
        self._ways: dict[State, bytes | None] = {}

    def allowed(self, state: State, written: int) -> npt.NDArray[np.int32] | None:
        """The only tokens to allow after ``written`` tokens, or None while the budget is not short
        (or no way out is known)."""
        left = self.budget - written
        if left > 64:  # a way out longer than this is not looked for
            return None
        if state not in self._ways:
            self._ways[state] = closing_bytes(self.automaton, state)
        way = self._ways[state]
        if way is None or left > len(way) + 1:
            return None
        if not way:
            return np.asarray(sorted(self.vocab.eos_ids), dtype=np.int32)
        ids = [i for k in range(len(way), 0, -1) for i in self.vocab.ids_for(way[:k])]
        return np.asarray(ids, dtype=np.int32) if ids else None


@lru_cache(maxsize=1)
def _byte_regexes() -> RegexCompiler:
    """Schema automata over single bytes, for text no local vocabulary wrote (a remote engine's)."""
    return RegexCompiler(TokenVocab.from_pieces([bytes([b]) for b in range(256)], ()))


def cache_fill() -> dict[str, CacheFill]:
    return {"closing_automata": lru_fill(_value_automaton)}


@lru_cache(maxsize=64)
def _value_automaton(canonical: str) -> Automaton:
    schema = json.loads(canonical)
    return JsonValue(object_only=True) if schema is None else _byte_regexes().schema_part(schema)


def closing_suffix(text: str, schema: Mapping[str, Any] | None) -> str | None:
    """What closes ``text``, a JSON value cut short (at ``max_tokens``, or by the repetition stop) under
    ``schema`` (None: any object), as briefly as the schema allows; None when ``text`` is no beginning
    of such a value. Where no budget reached the sampler (a remote engine), the reply still parses."""
    auto = _value_automaton(json.dumps(schema))  # in its own order: properties are written in it
    state: State | None = auto.start()
    for b in text.encode():
        state = auto.step(state, b) if state is not None else None
    if state is None:
        return None
    way = closing_bytes(auto, state)
    return None if way is None else way.decode()
