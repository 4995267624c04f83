"""How close each offered tool is to the request in meaning: sentence embeddings, where words differ.

The lexical signal (:mod:`tether.selection.relevance`) cannot see that "75 Euros in British
pounds" asks for ``convert_currency``; a sentence-embedding model can. A tool is embedded as one
sentence made of its name's words, its description and its parameters' names; the request as the
user's last words. The score is the cosine of the two (the vectors are unit length), in [-1, 1].

The model is anything that satisfies :class:`Embedder` (tether's is llama.cpp running
all-MiniLM-L6-v2, :mod:`tether.engine.embedding`). Tool sets repeat from request to request (an
agent sends the same tools every turn), so their embeddings are cached per set.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from tether.caches import CacheFill
from tether.grammar.formats.base import ToolSpec
from tether.selection.relevance import content_words

__all__ = ["Embedder", "SemanticRelevance", "readable", "tool_sentence"]

_DESCRIPTION_CHARS = 400  # a tool's description past this says little about what it is for


class Embedder(Protocol):
    """Unit-length sentence vectors, one row per text."""

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...


def tool_sentence(tool: ToolSpec) -> str:
    """One sentence that says what ``tool`` is for: ``get current weather: Get the weather… (location, unit)``."""
    name = " ".join(content_words(tool.name)) or tool.name
    props: Mapping[str, Any] = tool.parameters.get("properties") or {}
    params = ", ".join(" ".join(content_words(key)) or key for key in props)
    text = f"{name}: {tool.description.strip()[:_DESCRIPTION_CHARS]}".rstrip(": ")
    return f"{text} ({params})" if params else text


def readable(text: str) -> bool:
    """Whether an English sentence-embedding model can read ``text``: most of its letters are Latin."""
    letters = [c for c in text if c.isalpha()]
    return not letters or sum(c.isascii() for c in letters) >= 0.5 * len(letters)


class SemanticRelevance:
    """Cosine similarity between a request and each offered tool, tool vectors cached per tool set.

    A turn asks about one request several times (the decision's prior, then the answer checks), so
    the last ``max_requests`` requests' vectors are kept as well.
    """

    def __init__(self, embedder: Embedder, *, max_sets: int = 128, max_requests: int = 64) -> None:
        self.embedder = embedder
        self.max_sets = max_sets
        self.max_requests = max_requests
        self._sets: OrderedDict[tuple[str, ...], npt.NDArray[np.float32]] = OrderedDict()
        self._requests: OrderedDict[tuple[str, ...], npt.NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()

    def _embedded(
        self, cache: OrderedDict[tuple[str, ...], npt.NDArray[np.float32]], key: tuple[str, ...], bound: int
    ) -> npt.NDArray[np.float32]:
        with self._lock:
            hit = cache.get(key)
            if hit is not None:
                cache.move_to_end(key)
                return hit
        vectors = self.embedder.embed(list(key))
        with self._lock:
            cache[key] = vectors
            while len(cache) > bound:
                cache.popitem(last=False)
        return vectors

    def cache_fill(self) -> dict[str, CacheFill]:
        with self._lock:
            return {
                "semantic_tool_sets": CacheFill(len(self._sets), self.max_sets),
                "semantic_requests": CacheFill(len(self._requests), self.max_requests),
            }

    def part_scores(self, parts: Sequence[str], tools: Sequence[ToolSpec]) -> npt.NDArray[np.float32]:
        """Each part's similarity to each tool: one row per part (the parts of one request)."""
        if not parts or not tools:
            return np.zeros((len(parts), len(tools)), dtype=np.float32)
        queries = self._embedded(self._requests, tuple(parts), self.max_requests)
        vectors = self._embedded(self._sets, tuple(tool_sentence(t) for t in tools), self.max_sets)
        return np.asarray(queries @ vectors.T, dtype=np.float32)

    def scores(self, request: str, tools: Sequence[ToolSpec]) -> list[float]:
        """Each tool's similarity to ``request``, in the order of ``tools`` (all 0 with no request)."""
        if not tools or not request.strip():
            return [0.0] * len(tools)
        query = self._embedded(self._requests, (request,), self.max_requests)[0]
        vectors = self._embedded(self._sets, tuple(tool_sentence(t) for t in tools), self.max_sets)
        return [float(v) for v in vectors @ query]
