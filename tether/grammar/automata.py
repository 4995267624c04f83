"""Byte-level automata with hashable states, composed into tool-call grammars (leaves: :mod:`.atoms`).

Every automaton steps one byte at a time, so a token that crosses from one part
into the next (``",`` closing a name and starting the arguments) is checked
exactly. States are hashable so the constraint caches one mask per state.
Schema-constrained parts delegate to an outlines-core ``Index`` (see ``regex``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tether.grammar.vocab import TokenVocab

__all__ = ["Automaton", "Choice", "NameSwitch", "Seq", "Star", "run_bytes"]

State = Any
Candidates = tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32] | None]
_EMPTY: npt.NDArray[np.int32] = np.zeros(0, dtype=np.int32)


class Automaton:
    """Base class. ``None`` from ``step`` means the byte is rejected."""

    def start(self) -> State:
        raise NotImplementedError

    def step(self, state: State, byte: int) -> State | None:
        raise NotImplementedError

    def is_final(self, state: State) -> bool:
        return False

    def loop_class(self, state: State) -> str | None:
        """A byte class (see ``vocab.BYTE_CLASSES``) whose bytes leave ``state`` unchanged."""
        return None

    def first_bytes(self, state: State) -> Iterable[int] | None:
        """Bytes ``step`` may accept from ``state``; ``None`` when not cheaply known."""
        return None

    def exact_tokens(self, state: State) -> Sequence[int] | None:
        """Token ids valid from ``state`` without stepping (an Index knows them); ``None`` if unknown."""
        return None

    def candidates(self, state: State, vocab: TokenVocab) -> Candidates:
        """(sure ids, ids to check by stepping, byte offset to start each check at or None)."""
        return _candidates_default(self, state, vocab)

    def name_slot(self, state: State) -> tuple[NameSwitch, bytes] | None:
        """The name switch whose name is being written from ``state``, with the name so far."""
        return None

    def leaf(self, state: State) -> tuple[Automaton, State]:
        """The innermost part ``state`` is in, with its own state (the part that consumed the last
        byte); a composite whose input has not decided between its parts yet is its own leaf."""
        return self, state


def _candidates_default(a: Automaton, state: State, vocab: TokenVocab) -> Candidates:
    exact = a.exact_tokens(state)
    if exact is not None:
        return np.asarray(exact, dtype=np.int32), _EMPTY, None
    cls = a.loop_class(state)
    if cls is not None:
        runs = vocab.class_runs(cls)
        usable = vocab.usable_ids
        whole = runs[usable] == vocab.lengths[usable]
        rest = usable[~whole]
        return usable[whole], rest, runs[rest]
    first = a.first_bytes(state)
    return _EMPTY, (vocab.usable_ids if first is None else vocab.ids_starting_with(first)), None


def merge_candidates(first: Candidates, others: Sequence[Candidates]) -> Candidates:
    """Union where only ``first``'s sure tokens stay sure; everything else must be stepped from the start."""
    sure, check, offsets = first
    if not others:
        return first
    checks = [check]
    offs = [offsets if offsets is not None else np.zeros(len(check), dtype=np.int32)]
    for s2, c2, _ in others:
        for arr in (s2, c2):
            checks.append(arr)
            offs.append(np.zeros(len(arr), dtype=np.int32))
    return sure, np.concatenate(checks), np.concatenate(offs)


def run_bytes(automaton: Automaton, state: State, data: bytes) -> State | None:
    for b in data:
        state = automaton.step(state, b)
        if state is None:
            return None
    return state


class NameSwitch(Automaton):
    """One of ``names`` (as raw bytes), then the continuation registered for that name.

    The name region only ever holds a prefix of an offered name, so a
    non-offered name cannot be written; the continuation (``", "arguments": …``)
    decides where the name ends.
    """

    def __init__(self, continuations: Mapping[str, Automaton]) -> None:
        self.conts = {name.encode(): cont for name, cont in continuations.items()}
        self.names = tuple(sorted(self.conts))

    def start(self) -> State:
        return (b"", None, None)

    def step(self, state: State, byte: int) -> State | None:
        prefix, chosen, sub = state
        if chosen is not None:
            nxt = self.conts[chosen].step(sub, byte)
            return None if nxt is None else (prefix, chosen, nxt)
        extended = prefix + bytes((byte,))
        if any(n.startswith(extended) for n in self.names):
            return (extended, None, None)
        if prefix in self.conts:
            cont = self.conts[prefix]
            nxt = cont.step(cont.start(), byte)
            if nxt is not None:
                return (prefix, prefix, nxt)
        return None

    def is_final(self, state: State) -> bool:
        _, chosen, sub = state
        return chosen is not None and self.conts[chosen].is_final(sub)

    def loop_class(self, state: State) -> str | None:
        _, chosen, sub = state
        return None if chosen is None else self.conts[chosen].loop_class(sub)

    def first_bytes(self, state: State) -> Iterable[int] | None:
        prefix, chosen, sub = state
        if chosen is not None:
            return self.conts[chosen].first_bytes(sub)
        out = {n[len(prefix)] for n in self.names if n.startswith(prefix) and len(n) > len(prefix)}
        if prefix in self.conts:
            first = self.conts[prefix].first_bytes(self.conts[prefix].start())
            if first is None:
                return None
            out.update(first)
        return out

    def exact_tokens(self, state: State) -> Sequence[int] | None:
        _, chosen, sub = state
        return None if chosen is None else self.conts[chosen].exact_tokens(sub)

    def candidates(self, state: State, vocab: TokenVocab) -> Candidates:
        prefix, chosen, sub = state
        if chosen is not None:
            return self.conts[chosen].candidates(sub, vocab)
        # Walk the offered names, not the vocabulary: tokens that are prefixes of a name's remaining
        # suffix, or that finish the name and run on into its continuation.
        ids: list[int] = []
        for name in self.names:
            if not name.startswith(prefix):
                continue
            suffix = name[len(prefix) :]
            for k in range(1, len(suffix)):
                ids.extend(vocab.ids_for(suffix[:k]))
            if suffix:
                ids.extend(vocab.ids_with_prefix(suffix))
        if prefix in self.conts:
            cont = self.conts[prefix]
            s2, c2, _ = cont.candidates(cont.start(), vocab)
            ids.extend(s2.tolist())
            ids.extend(c2.tolist())
        return _EMPTY, np.unique(np.asarray(ids, dtype=np.int32)), None

    def name_of(self, state: State) -> str | None:
        _, chosen, _ = state
        return chosen.decode() if chosen is not None else None

    def name_slot(self, state: State) -> tuple[NameSwitch, bytes] | None:
        prefix, chosen, sub = state
        if chosen is None:
            return self, prefix
        return self.conts[chosen].name_slot(sub)

    def leaf(self, state: State) -> tuple[Automaton, State]:
        _, chosen, sub = state
        return (self, state) if chosen is None else self.conts[chosen].leaf(sub)


class Seq(Automaton):
    """Parts in order. A part that may end and rejects the next byte hands it to the next part."""

    def __init__(self, *parts: Automaton) -> None:
        self.parts = parts

    def start(self) -> State:
        return (0, self.parts[0].start())

    def _advance(self, i: int, sub: State, byte: int) -> State | None:
        while True:
            nxt = self.parts[i].step(sub, byte)
            if nxt is not None:
                return (i, nxt)
            if not self.parts[i].is_final(sub) or i + 1 >= len(self.parts):
                return None
            i += 1
            sub = self.parts[i].start()

    def step(self, state: State, byte: int) -> State | None:
        return self._advance(state[0], state[1], byte)

    def is_final(self, state: State) -> bool:
        i, sub = state
        if not self.parts[i].is_final(sub):
            return False
        return all(p.is_final(p.start()) for p in self.parts[i + 1 :])

    def loop_class(self, state: State) -> str | None:
        part: Automaton = self.parts[state[0]]
        return part.loop_class(state[1])

    def _frontier(self, state: State) -> list[tuple[Automaton, State]]:
        i, sub = state
        out = [(self.parts[i], sub)]
        while self.parts[i].is_final(sub) and i + 1 < len(self.parts):
            i += 1
            sub = self.parts[i].start()
            out.append((self.parts[i], sub))
        return out

    def first_bytes(self, state: State) -> Iterable[int] | None:
        out: set[int] = set()
        for part, sub in self._frontier(state):
            first = part.first_bytes(sub)
            if first is None:
                return None
            out.update(first)
        return out

    def exact_tokens(self, state: State) -> Sequence[int] | None:
        frontier = self._frontier(state)
        if len(frontier) != 1:
            return None
        return frontier[0][0].exact_tokens(frontier[0][1])

    def candidates(self, state: State, vocab: TokenVocab) -> Candidates:
        frontier = self._frontier(state)
        head = frontier[0][0].candidates(frontier[0][1], vocab)
        return merge_candidates(head, [p.candidates(sub, vocab) for p, sub in frontier[1:]])

    def part_index(self, state: State) -> int:
        return int(state[0])

    def name_slot(self, state: State) -> tuple[NameSwitch, bytes] | None:
        for part, sub in self._frontier(state):
            found = part.name_slot(sub)
            if found is not None:
                return found
        return None

    def leaf(self, state: State) -> tuple[Automaton, State]:
        part: Automaton = self.parts[state[0]]
        return part.leaf(state[1])


class Choice(Automaton):
    """Any one of ``options``; runs them side by side until the input decides."""

    def __init__(self, *options: Automaton) -> None:
        self.options = options

    def start(self) -> State:
        return tuple((k, o.start()) for k, o in enumerate(self.options))

    def step(self, state: State, byte: int) -> State | None:
        alive = []
        for k, sub in state:
            nxt = self.options[k].step(sub, byte)
            if nxt is not None:
                alive.append((k, nxt))
        return tuple(alive) or None

    def is_final(self, state: State) -> bool:
        return any(self.options[k].is_final(sub) for k, sub in state)

    def loop_class(self, state: State) -> str | None:
        return self.options[state[0][0]].loop_class(state[0][1]) if len(state) == 1 else None

    def first_bytes(self, state: State) -> Iterable[int] | None:
        out: set[int] = set()
        for k, sub in state:
            first = self.options[k].first_bytes(sub)
            if first is None:
                return None
            out.update(first)
        return out

    def exact_tokens(self, state: State) -> Sequence[int] | None:
        return self.options[state[0][0]].exact_tokens(state[0][1]) if len(state) == 1 else None

    def candidates(self, state: State, vocab: TokenVocab) -> Candidates:
        parts: list[Candidates] = [self.options[k].candidates(sub, vocab) for k, sub in state]
        if len(parts) == 1:
            return parts[0]
        return merge_candidates((_EMPTY, _EMPTY, None), parts)

    def name_slot(self, state: State) -> tuple[NameSwitch, bytes] | None:
        return self.options[state[0][0]].name_slot(state[0][1]) if len(state) == 1 else None

    def leaf(self, state: State) -> tuple[Automaton, State]:
        return self.options[state[0][0]].leaf(state[0][1]) if len(state) == 1 else (self, state)

    def branches(self, state: State) -> frozenset[int]:
        """The options still alive in ``state``."""
        return frozenset(k for k, _ in state)


class Star(Automaton):
    """Zero or more ``item``s (``max_items`` bounds the count)."""

    def __init__(self, item: Automaton, max_items: int = 64) -> None:
        self.item = item
        self.max_items = max_items

    def start(self) -> State:
        return (0, None)

    def step(self, state: State, byte: int) -> State | None:
        count, sub = state
        if sub is not None:
            nxt = self.item.step(sub, byte)
            if nxt is not None:
                return (count, nxt)
            if not self.item.is_final(sub):
                return None
        if count >= self.max_items:
            return None
        nxt = self.item.step(self.item.start(), byte)
        return None if nxt is None else (count + 1, nxt)

    def is_final(self, state: State) -> bool:
        _, sub = state
        return sub is None or self.item.is_final(sub)

    def loop_class(self, state: State) -> str | None:
        return None if state[1] is None else self.item.loop_class(state[1])

    def first_bytes(self, state: State) -> Iterable[int] | None:
        count, sub = state
        out: set[int] = set()
        if sub is not None:
            first = self.item.first_bytes(sub)
            if first is None:
                return None
            out.update(first)
            if not self.item.is_final(sub):
                return out
        if count < self.max_items:
            first = self.item.first_bytes(self.item.start())
            if first is None:
                return None
            out.update(first)
        return out

    def candidates(self, state: State, vocab: TokenVocab) -> Candidates:
        count, sub = state
        heads: list[Candidates] = []
        if sub is not None:
            heads.append(self.item.candidates(sub, vocab))
            if not self.item.is_final(sub):
                return heads[0]
        if count < self.max_items:
            heads.append(self.item.candidates(self.item.start(), vocab))
        if not heads:
            return _EMPTY, _EMPTY, None
        return (
            merge_candidates(heads[0], heads[1:])
            if sub is not None
            else merge_candidates((_EMPTY, _EMPTY, None), heads)
        )

    def name_slot(self, state: State) -> tuple[NameSwitch, bytes] | None:
        count, sub = state
        if sub is not None:
            found = self.item.name_slot(sub)
            if found is not None or not self.item.is_final(sub):
                return found
        return self.item.name_slot(self.item.start()) if count < self.max_items else None

    def leaf(self, state: State) -> tuple[Automaton, State]:
        _, sub = state
        return (self, state) if sub is None else self.item.leaf(sub)
