"""Allowed-token sets per automaton state, computed once and cached.

A state's candidates come from the cheapest source that is exact: the Index's
own token set inside a schema part; for a self-looping state, every token made
only of loop bytes is allowed wholesale (numpy over precomputed runs) and only
the rest is stepped; otherwise only tokens whose first byte can be accepted are
stepped. Nothing scans the whole vocabulary in Python on a hot path.

Where the grammar forces text (``{"`` before the ``tool_calls``/``response``
branch, a lone tool's name), only tokens that cover the longest vocabulary
prefix of that text stay allowed: a model walked through ``{`` + ``"`` instead of
its usual ``{"`` is off its training distribution and decides differently.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from tether.grammar.automata import Automaton, Choice, State, run_bytes
from tether.grammar.vocab import TokenVocab

__all__ = ["Mask", "MaskCache", "forced_text"]

_Split = tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]] | None
_H = TypeVar("_H")

_FORCED_LIMIT = 64  # bytes of forced text looked at; longer runs are rare and tokens are shorter
_SMALL_SET = 512  # forced text is only looked for where few tokens are allowed


@dataclass(frozen=True)
class Mask:
    """Either the allowed ids (small sets) or the blocked ids (large sets), whichever is shorter.

    Applying a large allowed set by blocking its complement in place touches a few
    hundred logits instead of copying the whole row.
    """

    allowed: npt.NDArray[np.int32] | None
    blocked: npt.NDArray[np.int32] | None

    def apply(self, logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        if self.blocked is not None:
            logits[self.blocked] = -np.inf
            return logits
        assert self.allowed is not None
        out = np.full_like(logits, -np.inf)
        out[self.allowed] = logits[self.allowed]
        return out

    @property
    def empty(self) -> bool:
        return self.allowed is not None and self.allowed.size == 0


def _size(held: object) -> int:
    """Bytes of the arrays one cached entry holds (0 for none)."""
    if isinstance(held, Mask):
        return sum(a.nbytes for a in (held.allowed, held.blocked) if a is not None)
    if isinstance(held, tuple):
        return sum(a.nbytes for a in held if isinstance(a, np.ndarray))
    return held.nbytes if isinstance(held, np.ndarray) else 0


def forced_text(automaton: Automaton, state: State, limit: int = _FORCED_LIMIT) -> bytes:
    """The bytes every continuation from ``state`` starts with (empty at a branch or a final state)."""
    out = bytearray()
    while len(out) < limit and not automaton.is_final(state):
        first = automaton.first_bytes(state)
        nexts = [
            (b, t)
            for b in (range(256) if first is None else first)
            if (t := automaton.step(state, b)) is not None
        ]
        if len(nexts) != 1:
            break
        byte, state = nexts[0]
        out.append(byte)
    return bytes(out)


class MaskCache:
    """Masks for one automaton over one vocabulary, keyed by state (LRU-bounded).

    ``canonical`` (default on) keeps forced text on the model's own tokenization (see the module doc).
    """

    def __init__(
        self,
        automaton: Automaton,
        vocab: TokenVocab,
        *,
        max_states: int = 4096,
        max_bytes: int = 2**62,
        canonical: bool = True,
        on_grow: Callable[[], None] | None = None,
    ) -> None:
        self.automaton = automaton
        self.vocab = vocab
        self.max_states = max_states
        self.canonical = canonical
        self.max_bytes = max_bytes
        self.on_grow = on_grow
        self._cache: OrderedDict[State, npt.NDArray[np.int32]] = OrderedDict()
        self.computed = 0
        self._lock = threading.Lock()
        self._masks: OrderedDict[State, Mask] = OrderedDict()
        self._splits: OrderedDict[State, _Split] = OrderedDict()
        self._bytes = 0  # of every array the three maps hold, kept as they change

    def allowed(self, state: State) -> npt.NDArray[np.int32]:
        """Token ids allowed from ``state`` (EOS included when the automaton may end here)."""
        with self._lock:
            hit = self._cache.get(state)
            if hit is not None:
                self._cache.move_to_end(state)
                return hit
        ids = self._compute(state)
        with self._lock:
            self.computed += 1
        self._put(self._cache, state, ids)
        return ids

    def _put(self, table: OrderedDict[State, _H], state: State, value: _H) -> None:
        """Keep ``value``; the oldest entries of ``table`` go past ``max_states`` or ``max_bytes``."""
        with self._lock:
            self._bytes += _size(value) - _size(table.get(state))
            table[state] = value
            while len(table) > self.max_states or (self._bytes > self.max_bytes and len(table) > 1):
                self._bytes -= _size(table.popitem(last=False)[1])
        if self.on_grow is not None:
            self.on_grow()

    def states(self) -> int:
        """States held, at most ``max_states`` in each of the three maps."""
        with self._lock:
            return max(len(self._cache), len(self._masks), len(self._splits))

    def nbytes(self) -> int:
        """Bytes held by the cached id arrays of the three maps."""
        with self._lock:
            return self._bytes

    def _compute(self, state: State) -> npt.NDArray[np.int32]:
        a, vocab = self.automaton, self.vocab
        sure, check, offsets = a.candidates(state, vocab)
        pieces = vocab.pieces
        keep: list[int] = []
        offs = offsets.tolist() if offsets is not None else None
        for k, tid in enumerate(check.tolist()):
            data = pieces[tid][offs[k] :] if offs is not None else pieces[tid]
            if run_bytes(a, state, data) is not None:
                keep.append(tid)
        parts = [sure, np.asarray(keep, dtype=np.int32)]
        if a.is_final(state):
            parts.append(np.asarray(sorted(vocab.eos_ids), dtype=np.int32))
        ids = np.unique(np.concatenate(parts))
        if self.canonical and 1 < ids.size <= _SMALL_SET:
            ids = self._longest_cover(state, ids)
        return ids

    def _longest_cover(self, state: State, ids: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
        """Drop tokens that stop inside the forced text short of the longest token that fits it."""
        forced = forced_text(self.automaton, state)
        if not forced:
            return ids
        lengths = self.vocab.lengths[ids]
        pieces = self.vocab.pieces
        inside = [
            n
            for tid, n in zip(ids.tolist(), lengths.tolist(), strict=True)
            if n <= len(forced) and forced.startswith(pieces[tid])
        ]
        if not inside:
            return ids
        kept: npt.NDArray[np.int32] = ids[lengths >= max(inside)]
        return kept

    def split(self, state: State) -> _Split:
        """At a top-level choice between a tool call (option 0) and a text answer (option 1): the allowed
        tokens that commit to each; None where no token commits either way yet."""
        with self._lock:
            if state in self._splits:
                return self._splits[state]
        choice = self.automaton if isinstance(self.automaton, Choice) else None
        found: tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]] | None = None
        if choice is not None and len(choice.branches(state)) > 1:
            call: list[int] = []
            answer: list[int] = []
            for tid in self.allowed(state).tolist():
                nxt = run_bytes(self.automaton, state, self.vocab.pieces[tid])
                alive = choice.branches(nxt) if nxt is not None else frozenset()
                if alive == {0}:
                    call.append(tid)
                elif alive == {1}:
                    answer.append(tid)
            if call and answer:
                found = (np.asarray(call, dtype=np.int32), np.asarray(answer, dtype=np.int32))
        self._put(self._splits, state, found)
        return found

    def mask(self, state: State) -> Mask:
        """The allowed set in its cheapest-to-apply form (see ``Mask``)."""
        with self._lock:
            hit = self._masks.get(state)
        if hit is not None:
            return hit
        allowed = self.allowed(state)
        if allowed.size * 2 > self.vocab.size:
            hit = Mask(
                blocked=np.setdiff1d(np.arange(self.vocab.size, dtype=np.int32), allowed), allowed=None
            )
        else:
            hit = Mask(blocked=None, allowed=allowed)
        self._put(self._masks, state, hit)
        return hit
