"""A cached prefix (its token ids and the KV state of their cells) and the index that finds it.

Both tiers index their entries the same way: every block hash of an entry's chain points at the
entries that contain it, so the entries sharing the most whole blocks with a prompt are found in
one walk along the prompt's chain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ChainIndex", "Entry"]


@dataclass(frozen=True, eq=False)
class Entry:
    """``state`` is llama.cpp's serialized sequence: the cells of ``tokens``, in order from position 0."""

    tokens: npt.NDArray[np.int32]
    state: bytearray

    @property
    def nbytes(self) -> int:
        return len(self.state) + int(self.tokens.nbytes)


class ChainIndex:
    """Entry names by the block hashes of their chains."""

    def __init__(self) -> None:
        self._by_block: dict[bytes, set[str]] = {}
        self._chains: dict[str, list[bytes]] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._chains

    def __len__(self) -> int:
        return len(self._chains)

    def names(self) -> list[str]:
        return list(self._chains)

    def add(self, name: str, chain: list[bytes]) -> None:
        self.remove(name)
        self._chains[name] = chain
        for h in chain:
            self._by_block.setdefault(h, set()).add(name)

    def remove(self, name: str) -> None:
        for h in self._chains.pop(name, ()):
            names = self._by_block.get(h)
            if names is not None:
                names.discard(name)
                if not names:
                    del self._by_block[h]

    def longest(self, chain: list[bytes]) -> tuple[int, str] | None:
        """How many leading blocks of ``chain`` an entry holds at most, and one such entry."""
        best: tuple[int, str] | None = None
        for k, h in enumerate(chain):
            names = self._by_block.get(h)
            if not names:
                break
            best = (k + 1, min(names))  # any of them holds the k + 1 blocks; min: deterministic
        return best
