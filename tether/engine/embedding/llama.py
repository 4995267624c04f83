"""Sentence embeddings on llama.cpp (``llama-cpp-python``): a BERT-family GGUF in one embedding context.

One ``Llama`` context in embedding mode with mean pooling (the pooling sentence-transformers trained
all-MiniLM-L6-v2 with); several inputs share a decode, each its own sequence. Vectors are
L2-normalized float32. Texts' vectors are kept in a bounded LRU cache (tool descriptions repeat on
every request). A lock makes the embedder safe to share between the HTTP route and other threads.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import structlog

from tether.caches import CacheFill
from tether.engine.embedding.base import EmbeddingInput, Embeddings, LruCache
from tether.errors import ConfigError, EngineError, InvalidRequestError

__all__ = ["SHARED_THREADS", "LlamaEmbedder"]

log = structlog.get_logger(__name__)

# Tokens packed into one decode. Packed sequences are masked from each other, but the attention is
# still computed over every token of the decode: packing 40 short texts into 480 tokens made each
# ~1.4x slower than one at a time; up to ~128 tokens a decode was the fastest (2 cores, MiniLM).
_PACK_TOKENS = 128

# Threads for an embedder that shares its process with a llama.cpp chat engine. Each thread that runs
# a multi-threaded llama.cpp graph keeps its own OpenMP team; once the process holds more OpenMP
# threads than there are cores, libgomp throttles its spin-wait for every team, and the chat engine's
# decode steps wait on sleeping threads: a 2-thread embedder beside a 2-thread engine made every
# decode step ~4x slower on 2 cores (`python -m benchmarks.bench_engine --embedder-threads 0 1 2`).
# One thread starts no team; a short text embeds in ~6 ms instead of ~4.
SHARED_THREADS = 1


@dataclass(frozen=True)
class _Cached:
    vector: npt.NDArray[np.float32]
    tokens: int
    truncated: bool


class LlamaEmbedder:
    """A GGUF embedding model (``bert`` and the other non-causal encoders llama.cpp runs).

    ``n_ctx``: the longest input in tokens (capped at the model's trained context, 512 for MiniLM);
    also the tokens one decode takes. ``n_threads``: default 1 (see :data:`SHARED_THREADS`).
    ``cache_size``: texts whose vectors are kept (384 float32 each: 4,096 entries are 6 MB).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        n_ctx: int = 512,
        n_threads: int | None = None,
        cache_size: int = 4096,
    ) -> None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"embedding model file not found: {path}")
        try:
            import llama_cpp
        except ImportError as exc:  # pragma: no cover - exercised only on broken installs
            raise ConfigError("llama-cpp-python is not installed: run `make setup`") from exc
        self.threads = n_threads or SHARED_THREADS
        try:
            self._llm: Any = llama_cpp.Llama(
                model_path=str(path),
                embedding=True,
                pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN,
                n_ctx=n_ctx,
                n_batch=n_ctx,
                n_ubatch=n_ctx,  # a non-causal model takes each sequence whole in one micro-batch
                n_threads=self.threads,
                n_threads_batch=self.threads,
                verbose=False,
            )
        except ValueError as exc:
            raise ConfigError(f"llama.cpp could not load the embedding model {path}: {exc}") from exc
        meta = {str(k): str(v) for k, v in self._llm.metadata.items()}
        arch = meta.get("general.architecture", "")
        if meta.get(f"{arch}.attention.causal", "true").lower() != "false":
            self._llm.close()
            raise ConfigError(
                f"{path} is a causal ({arch}) model, not a sentence-embedding encoder such as all-MiniLM-L6-v2"
            )
        model = self._llm._model
        self.path = path
        self._dimensions = int(self._llm.n_embd())
        self._max_tokens = min(int(self._llm.n_ctx()), int(model.n_ctx_train()))
        self._pack_tokens = min(_PACK_TOKENS, int(self._llm.n_batch))
        self._n_seq_max = int(self._llm.context_params.n_seq_max)
        self._n_vocab = int(self._llm.n_vocab())
        self._cls = int(model.token_bos())
        self._sep = int(llama_cpp.llama_vocab_sep(model.vocab))
        display = meta.get("general.name") or path.stem
        self._model_id = re.sub(r"[^a-z0-9.]+", "-", display.lower()).strip("-") or path.stem
        self._names = tuple(dict.fromkeys([self._model_id, display, path.name]))
        self._lock = threading.Lock()
        self._closed = False
        self._cache: LruCache[str, _Cached] = LruCache(cache_size)
        log.info(
            "embedding_model_loaded",
            path=str(path),
            model=self._model_id,
            dimensions=self._dimensions,
            max_tokens=self._max_tokens,
            threads=self.threads,
        )

    # -- the Embedder protocol ---------------------------------------------------------------------

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    @property
    def dimensions(self) -> int:
        return self._dimensions

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """``(len(texts), dimensions)`` float32, each row L2-normalized; a dot product is the cosine."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts; wrap one text in a list")
        return self.embed_inputs(texts).vectors

    def embed_inputs(self, inputs: Sequence[EmbeddingInput]) -> Embeddings:
        """Texts (cached) and token-id lists of this model's vocabulary, in one or more decodes.

        An input over ``max_tokens`` is cut to its first ``max_tokens - 1`` tokens plus ``[SEP]``.
        ``InvalidRequestError`` for a token id outside the vocabulary."""
        with self._lock:
            self._check_open()
            found: list[_Cached | None] = []
            todo: dict[str | int, tuple[list[int], bool]] = {}  # text (or position) -> ids, truncated
            for i, item in enumerate(inputs):
                if isinstance(item, str):
                    hit = self._cache.get(item)
                    found.append(hit)
                    if hit is None and item not in todo:
                        todo[item] = self._text_ids(item)
                else:
                    found.append(None)
                    todo[i] = self._token_ids(item, i)
            keys = list(todo)
            vectors = self._decode([todo[k][0] for k in keys])
            fresh: dict[str | int, _Cached] = {}
            for key, vector in zip(keys, vectors, strict=True):
                ids, truncated = todo[key]
                vector.flags.writeable = False
                fresh[key] = entry = _Cached(vector, len(ids), truncated)
                if isinstance(key, str):
                    self._cache.put(key, entry)
        entries = [
            hit if hit is not None else fresh[item if isinstance(item, str) else i]
            for i, (item, hit) in enumerate(zip(inputs, found, strict=True))
        ]
        matrix = np.empty((len(entries), self._dimensions), dtype=np.float32)
        for row, entry in enumerate(entries):
            matrix[row] = entry.vector
        return Embeddings(matrix, tuple(e.tokens for e in entries), tuple(e.truncated for e in entries))

    def tokenize(self, text: str) -> list[int]:
        """``[CLS]`` + the text's WordPiece ids + ``[SEP]``, untruncated."""
        self._check_open()
        return list(self._llm.tokenize(text.encode("utf-8", errors="replace"), add_bos=True, special=False))

    def cache_info(self) -> dict[str, int]:
        return {"size": len(self._cache), "hits": self._cache.hits, "misses": self._cache.misses}

    def cache_fill(self) -> dict[str, CacheFill]:
        # No lock: an embedding holds it for its whole run, and a length read is atomic.
        return {"embeddings": CacheFill(len(self._cache), self._cache.capacity)}

    def close(self) -> None:
        """Free the model and its context; later calls raise ``EngineError``. Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._llm.close()

    def _check_open(self) -> None:
        if self._closed:
            raise EngineError("the embedding model has been closed (the server is shutting down)")

    # -- internals ---------------------------------------------------------------------------------

    def _text_ids(self, text: str) -> tuple[list[int], bool]:
        ids = self.tokenize(text)
        if len(ids) <= self._max_tokens:
            return ids, False
        return [*ids[: self._max_tokens - 1], self._sep], True

    def _token_ids(self, item: Sequence[int], index: int) -> tuple[list[int], bool]:
        ids = list(item)
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, int | np.integer) or not 0 <= t < self._n_vocab:
                raise InvalidRequestError(
                    f"input[{index}] holds token id {t!r}, outside this model's vocabulary "
                    f"(0..{self._n_vocab - 1})",
                    param="input",
                )
        body = ids[1 if ids[:1] == [self._cls] else 0 : len(ids) - 1 if ids[-1:] == [self._sep] else len(ids)]
        truncated = len(body) > self._max_tokens - 2
        return [self._cls, *body[: self._max_tokens - 2], self._sep], truncated

    def _decode(self, sequences: list[list[int]]) -> list[npt.NDArray[np.float32]]:
        """Pooled, normalized vectors of ``sequences``, packed into decodes of up to ``_PACK_TOKENS``
        tokens (a longer sequence, up to ``max_tokens``, goes alone)."""
        import llama_cpp

        if not sequences:
            return []
        out = np.empty((len(sequences), self._dimensions), dtype=np.float32)
        ctx = self._llm._ctx
        batch = self._llm._batch
        pending: list[int] = []
        used = 0

        def flush() -> None:
            ctx.kv_cache_clear()
            try:
                ctx.decode(batch)
            except RuntimeError as exc:
                raise EngineError(f"the embedding model failed: {exc}") from exc
            finally:
                batch.reset()
            for seq, row in enumerate(pending):
                ptr = llama_cpp.llama_get_embeddings_seq(ctx.ctx, seq)
                if not ptr:
                    raise EngineError("the embedding model returned no pooled vector")
                out[row] = np.ctypeslib.as_array(ptr, shape=(self._dimensions,))

        batch.reset()
        for row, ids in enumerate(sequences):
            if pending and (used + len(ids) > self._pack_tokens or len(pending) >= self._n_seq_max):
                flush()
                pending, used = [], 0
            batch.add_sequence(ids, len(pending), True)  # every token an output: pooling reads them all
            pending.append(row)
            used += len(ids)
        flush()
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out /= np.maximum(norms, np.float32(1e-12))
        return list(out)
