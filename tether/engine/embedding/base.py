"""What an embedder offers (``Embedder``), what it returns (``Embeddings``), and its text cache."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

__all__ = ["Embedder", "EmbeddingInput", "Embeddings", "LruCache"]

EmbeddingInput = str | Sequence[int]
"""A text, or token ids of the model's own vocabulary (``[CLS]``/``[SEP]`` are added when missing)."""


@dataclass(frozen=True)
class Embeddings:
    """The vectors of a batch of inputs, in input order, and what each cost."""

    vectors: npt.NDArray[np.float32]  # (len(inputs), dimensions); every row has L2 norm 1
    tokens: tuple[int, ...]  # tokens each input was embedded from, [CLS] and [SEP] included
    truncated: tuple[bool, ...]  # whether the input was cut to the model's max_tokens

    @property
    def prompt_tokens(self) -> int:
        return sum(self.tokens)


class Embedder(Protocol):
    """A sentence-embedding model. Thread-safe: calls from several threads take turns on one context."""

    @property
    def model_id(self) -> str:
        """The id clients name it by (``all-minilm-l6-v2``)."""
        ...

    @property
    def names(self) -> tuple[str, ...]:
        """Every name a request may use for it, ``model_id`` first."""
        ...

    @property
    def dimensions(self) -> int: ...

    @property
    def max_tokens(self) -> int:
        """Longest input in tokens ([CLS] and [SEP] included); longer ones are cut to it."""
        ...

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """``(len(texts), dimensions)`` float32, rows L2-normalized (a dot product is the cosine)."""
        ...

    def embed_inputs(self, inputs: Sequence[EmbeddingInput]) -> Embeddings:
        """Texts and/or token-id lists, with token counts and truncation flags."""
        ...

    def close(self) -> None: ...


K = TypeVar("K")
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """A bounded least-recently-used map (not locked: its owner holds a lock around it)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, capacity)
        self._items: OrderedDict[K, V] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is None:
            self.misses += 1
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: K, value: V) -> None:
        if self.capacity == 0:
            return
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
