"""The model's vocabulary as byte strings, indexed for fast allowed-token computation.

Built once per loaded model. Control tokens (``<|im_start|>``…) are kept out of
every mask except through the explicit EOS ids. For each byte class used by a
self-looping automaton state (JSON string interior, "anything"), the length of
each token's leading run of class bytes is precomputed with numpy, so a state
like "inside a string" is masked without stepping through most tokens.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BYTE_CLASSES", "TokenVocab"]


def _class(predicate: Any) -> frozenset[int]:
    return frozenset(b for b in range(256) if predicate(b))


# Bytes that keep a JSON string open: anything but the quote, the backslash and control characters.
BYTE_CLASSES: dict[str, frozenset[int]] = {
    "jstr": _class(lambda b: b >= 0x20 and b not in (0x22, 0x5C)),
    "any": frozenset(range(256)),
    "ws": frozenset(b" \n\t\r"),
    "digit": frozenset(b"0123456789"),
}


@dataclass
class TokenVocab:
    """Token id -> bytes, with lookups by exact piece, by prefix range and by first byte."""

    pieces: list[bytes]
    eos_ids: frozenset[int]
    excluded: frozenset[int] = frozenset()
    _sorted: list[bytes] = field(init=False, repr=False)
    _sorted_ids: list[int] = field(init=False, repr=False)
    _by_piece: dict[bytes, list[int]] = field(init=False, repr=False)
    _by_first: dict[int, npt.NDArray[np.int32]] = field(init=False, repr=False)
    _lengths: npt.NDArray[np.int32] = field(init=False, repr=False)
    _runs: dict[str, npt.NDArray[np.int32]] = field(init=False, repr=False)
    _closers: tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]] | None = field(
        init=False, repr=False, default=None
    )
    _folded: dict[bytes, list[int]] | None = field(init=False, repr=False, default=None)
    _true: npt.NDArray[np.int32] | None = field(init=False, repr=False, default=None)
    _ends: npt.NDArray[np.int32] | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        usable = [
            (p, i)
            for i, p in enumerate(self.pieces)
            if p and i not in self.excluded and i not in self.eos_ids
        ]
        usable.sort()
        self._sorted = [p for p, _ in usable]
        self._sorted_ids = [i for _, i in usable]
        self._by_piece = {}
        first: dict[int, list[int]] = {}
        for p, i in usable:
            self._by_piece.setdefault(p, []).append(i)
            first.setdefault(p[0], []).append(i)
        self._by_first = {b: np.asarray(ids, dtype=np.int32) for b, ids in first.items()}
        self._lengths = np.asarray([len(p) for p in self.pieces], dtype=np.int32)
        self._usable = np.asarray(sorted(i for _, i in usable), dtype=np.int32)
        self._runs = {}

    @property
    def size(self) -> int:
        return len(self.pieces)

    @property
    def usable_ids(self) -> npt.NDArray[np.int32]:
        return self._usable

    @property
    def lengths(self) -> npt.NDArray[np.int32]:
        return self._lengths

    def length(self, token: int) -> int:
        return int(self._lengths[token])

    def ids_for(self, piece: bytes) -> list[int]:
        return self._by_piece.get(piece, [])

    def ids_with_prefix(self, prefix: bytes) -> list[int]:
        """Every usable token whose bytes start with ``prefix`` (a contiguous range of the sorted pieces)."""
        lo = bisect.bisect_left(self._sorted, prefix)
        hi = bisect.bisect_left(self._sorted, prefix + b"\xff\xff\xff\xff\xff\xff\xff\xff")
        out = self._sorted_ids[lo:hi]
        # The sentinel above bounds the range; pieces longer than it with 0xff bytes are vanishingly rare.
        return [i for i in out if self.pieces[i].startswith(prefix)]

    def ids_starting_with(self, first_bytes: Iterable[int]) -> npt.NDArray[np.int32]:
        parts = [self._by_first[b] for b in first_bytes if b in self._by_first]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)

    def ids_folded(self, piece: bytes) -> list[int]:
        """Every usable token equal to ``piece`` in ASCII case-insensitive comparison (``read``,
        ``READ``, ``Read`` for ``read``); the index is built once per vocabulary."""
        if self._folded is None:
            self._folded = {}
            for p, ids in self._by_piece.items():
                self._folded.setdefault(p.lower(), []).extend(ids)
        return self._folded.get(piece.lower(), [])

    def true_starts(self) -> npt.NDArray[np.int32]:
        """Tokens that begin ``true`` (after optional spaces), or write it whole before ``,`` / ``}``."""
        if self._true is None:
            ok = frozenset(b" ,}]\n")
            ids = []
            for t, piece in enumerate(self.pieces):
                q = piece.lstrip(b" ")
                if q and (b"true".startswith(q) or (q.startswith(b"true") and all(c in ok for c in q[4:]))):
                    ids.append(t)
            self._true = np.asarray(ids, dtype=np.int32)
        return self._true

    def json_ends(self) -> npt.NDArray[np.int32]:
        """Tokens of JSON structure only (``,``, ``}``, ``]``, spaces, a quote): what ends a number."""
        if self._ends is None:
            ok = frozenset(b' ,}]\n"')
            first = self.ids_starting_with(b",}]").tolist()
            self._ends = np.asarray(
                [t for t in first if all(c in ok for c in self.pieces[t])], dtype=np.int32
            )
        return self._ends

    def closing_brackets(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
        """The tokens holding a ``}``, and how many ``}`` and ``]`` each holds (once per vocabulary: a
        walk over every piece, which a constraint per request must not repeat)."""
        if self._closers is None:
            ids = [i for i, p in enumerate(self.pieces) if b"}" in p]
            counts = [self.pieces[i].count(b"}") + self.pieces[i].count(b"]") for i in ids]
            self._closers = (np.asarray(ids, dtype=np.int32), np.asarray(counts, dtype=np.int32))
        return self._closers

    def class_runs(self, name: str) -> npt.NDArray[np.int32]:
        """For each token, how many of its leading bytes are in byte class ``name``."""
        runs = self._runs.get(name)
        if runs is None:
            allowed = BYTE_CLASSES[name]
            runs = np.zeros(len(self.pieces), dtype=np.int32)
            for i, p in enumerate(self.pieces):
                n = 0
                for b in p:
                    if b not in allowed:
                        break
                    n += 1
                runs[i] = n
            self._runs[name] = runs
        return runs

    @classmethod
    def from_pieces(
        cls, pieces: Sequence[bytes], eos_ids: Iterable[int], excluded: Iterable[int] = ()
    ) -> TokenVocab:
        return cls(list(pieces), frozenset(eos_ids), frozenset(excluded))
