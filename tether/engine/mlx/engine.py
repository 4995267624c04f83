"""The MLX engine: an ``Engine`` on ``mlx-lm`` for MLX model directories.

Tokens come from ``mlx_lm.generate.generate_step``; tether's numpy logits processor (layer 0) is
attached as an mlx-lm logits processor through ``NumpyProcessor``, which keeps the ids in one
preallocated buffer and copies one logits row each way per step. The KV cache (mlx-lm's prompt
cache) lives across generations together with the ids it holds: a prompt that shares a prefix with
them is trimmed to the common prefix and only the tail is evaluated.

``MlxEngine.sibling()`` gives another engine (its own cache, one per scheduler slot) on the same
weights, so ``--slots N`` loads the model once.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from tether.engine.base import (
    ContextEngine,
    Done,
    EngineInfo,
    Generation,
    GenerationEvent,
    LogitsProcessor,
    SamplingParams,
    common_prefix_len,
)
from tether.engine.loop import token_loop
from tether.engine.mlx import is_mlx_model_dir
from tether.engine.mlx.runtime import blas_in_use, preload_blas
from tether.engine.mlx.vocab import TokenizerFiles
from tether.errors import ConfigError, EngineError

preload_blas()  # before the first ``import mlx.core`` (see runtime.py)

import mlx.core as mx  # noqa: E402

__all__ = ["MlxEngine", "NumpyProcessor"]

log = structlog.get_logger(__name__)

MlxProcessor = Callable[[mx.array, mx.array], mx.array]
REPEAT_LAST_N = 64  # llama.cpp's default window for repeat_penalty


class NumpyProcessor:
    """Adapts tether's ``(ids: np.intc[n], logits: np.float32[vocab])`` processor to mlx-lm's
    ``(tokens: mx.array, logits: mx.array[1, vocab])`` one.

    mlx-lm passes only the tokens it was given (the prompt tail after cache reuse) plus the sampled
    ones; the full prompt is placed in the id buffer up front and only new tokens are copied in.
    """

    def __init__(self, fn: LogitsProcessor, prompt: Sequence[int], fed: int, capacity: int) -> None:
        self.fn = fn
        self.ids = np.empty(max(capacity, len(prompt) + 1), dtype=np.intc)
        self.ids[: len(prompt)] = prompt
        self.n = len(prompt)
        self.base = len(prompt) - fed  # prompt tokens already in the cache, never shown to mlx-lm

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        total = self.base + tokens.size
        if total > self.n:
            fresh = np.array(tokens[self.n - total :], dtype=np.intc)
            if total > len(self.ids):
                self.ids = np.resize(self.ids, 2 * total)
            self.ids[self.n : total] = fresh
            self.n = total
        row = np.array(logits[0].astype(mx.float32))  # the one copy in (writable: processors edit in place)
        out = self.fn(self.ids[: self.n], row)
        return mx.array(out)[None]  # and the one copy out


def _sampler(params: SamplingParams) -> Callable[[mx.array], mx.array] | None:
    """``None`` (mlx-lm's argmax) for temperature 0; else top-k, top-p, min-p, then temperature, with a
    per-generation key so a seed reproduces regardless of other slots drawing numbers."""
    if params.temperature <= 0:
        return None
    from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

    key = mx.random.key(params.seed if params.seed is not None else secrets.randbits(31))
    inv_temp = 1.0 / params.temperature

    def sample(logprobs: mx.array) -> mx.array:
        nonlocal key
        key, sub = mx.random.split(key)
        if params.top_k > 0:
            logprobs = apply_top_k(logprobs, params.top_k)
        if 0.0 < params.top_p < 1.0:
            logprobs = apply_top_p(logprobs, params.top_p)
        if params.min_p > 0.0:
            logprobs = apply_min_p(logprobs, params.min_p)
        return mx.random.categorical(logprobs * inv_temp, key=sub)

    return sample


def _dir_model_id(path: Path) -> str:
    """A model id from a directory name (``Qwen2.5-0.5B-Instruct-4bit`` -> ``qwen2.5-0.5b-instruct-4bit``)."""
    return re.sub(r"[^a-z0-9.]+", "-", path.resolve().name.lower()).strip("-") or "mlx-model"


@dataclass(frozen=True)
class _Loaded:
    """What sibling engines share: weights, tokenizer, info."""

    model: Any
    vocab: TokenizerFiles
    info: EngineInfo


def _load(path: Path, n_ctx: int | None) -> _Loaded:
    from mlx_lm.utils import load_model

    if not is_mlx_model_dir(path):
        raise ConfigError(f"not an MLX model directory (config.json + *.safetensors): {path}")
    try:
        model, config = load_model(path)
    except (ValueError, FileNotFoundError) as exc:
        raise ConfigError(f"mlx-lm could not load {path}: {exc}") from exc
    n_vocab = int(config.get("vocab_size") or model.args.vocab_size)
    vocab = TokenizerFiles.load(path, n_vocab=n_vocab)
    tether_meta = config.get("tether") or {}
    limit = int(config.get("max_position_embeddings") or 4096)
    info = EngineInfo(
        model_id=str(tether_meta.get("model_id") or _dir_model_id(path)),
        n_ctx=min(n_ctx, limit) if n_ctx else limit,
        chat_template=vocab.chat_template,
        bos_token=vocab.bos_token,
        eos_token=vocab.eos_token,
        eos_token_ids=vocab.eos_ids,
        n_vocab=n_vocab,
        path=str(path),
        control_token_ids=vocab.control_ids,
        metadata={
            "engine": "mlx",
            "mlx.device": str(mx.default_device()),
            "mlx.blas": blas_in_use(),
            "general.architecture": str(config.get("model_type", "")),
        },
    )
    log.info("model_loaded", path=str(path), n_ctx=info.n_ctx, engine="mlx", device=str(mx.default_device()))
    return _Loaded(model, vocab, info)


class MlxEngine(ContextEngine):
    """An MLX model directory with one KV cache."""

    def __init__(
        self,
        path: str | Path,
        *,
        n_ctx: int | None = 8192,
        prefill_step_size: int = 512,
        _shared: _Loaded | None = None,
    ) -> None:
        super().__init__()
        self._loaded = _shared if _shared is not None else _load(Path(path), n_ctx)
        self._model = self._loaded.model
        self._vocab = self._loaded.vocab
        self._info = self._loaded.info
        self.prefill_step_size = prefill_step_size
        self._cache: list[Any] = []
        self._held: list[int] = []

    def sibling(self) -> MlxEngine:
        """Another engine on the same weights with its own (empty) cache: one per scheduler slot."""
        return MlxEngine(self._info.path, prefill_step_size=self.prefill_step_size, _shared=self._loaded)

    @property
    def info(self) -> EngineInfo:
        return self._info

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        tok = self._vocab.tokenizer if special else self._vocab.plain
        bos = self._info.bos_token
        add_special = not (bos and text.startswith(bos))
        return list(tok.encode(text, add_special_tokens=add_special).ids)

    def detokenize(self, ids: Sequence[int]) -> str:
        pieces = self._vocab.pieces
        return b"".join(pieces[i] for i in ids if 0 <= i < len(pieces)).decode("utf-8", errors="replace")

    def token_pieces(self) -> list[bytes]:
        return self._vocab.pieces

    def cached_prefix_len(self, prompt: Sequence[int]) -> int:
        return common_prefix_len(self._held, prompt)

    def _reuse(self, prompt: list[int]) -> int:
        """Trim the cache to the longest reusable prefix (at least one prompt token is always evaluated)."""
        from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

        reuse = min(self.cached_prefix_len(prompt), len(prompt) - 1)
        if reuse <= 0 or not self._cache or not can_trim_prompt_cache(self._cache):
            self._cache = make_prompt_cache(self._model)
            self._held = []
            return 0
        trim_prompt_cache(self._cache, self._cache[0].offset - reuse)
        self._held = self._held[:reuse]
        return reuse

    def _generate(self, run: Generation) -> Iterator[GenerationEvent]:
        prompt, params, logits_processor, cancel = run.prompt, run.params, run.logits_processor, run.cancel
        from mlx_lm.generate import generate_step
        from mlx_lm.sample_utils import make_repetition_penalty

        if not prompt:
            raise EngineError("cannot generate from an empty prompt")
        budget = min(params.max_tokens, self._info.n_ctx - len(prompt))
        if budget <= 0:
            yield Done("length", len(prompt), 0, 0)
            return
        reuse = self._reuse(prompt)
        processors: list[MlxProcessor] = []
        if params.repeat_penalty != 1.0:
            processors.append(make_repetition_penalty(params.repeat_penalty, REPEAT_LAST_N))
        if logits_processor is not None:
            capacity = len(prompt) + budget + 2
            processors.append(NumpyProcessor(logits_processor, prompt, len(prompt) - reuse, capacity))
        pieces, eos = self._vocab.pieces, self._info.eos_token_ids
        fed = list(prompt)  # every id mlx-lm has been handed, in cache order
        steps = generate_step(
            mx.array(prompt[reuse:], dtype=mx.uint32),
            self._model,
            max_tokens=budget,
            sampler=_sampler(params),
            logits_processors=processors or None,
            prompt_cache=self._cache,
            prefill_step_size=self.prefill_step_size,
        )

        def sampled() -> Iterator[int]:
            for token, _logprobs in steps:
                fed.append(int(token))
                yield int(token)

        clean = False
        try:
            yield from token_loop(
                sampled(),
                piece=lambda t: pieces[t] if 0 <= t < len(pieces) else b"",
                eos=eos,
                max_tokens=budget,
                cancel=cancel,
                prompt_tokens=len(prompt),
                evaluated=len(prompt) - reuse,
            )
            clean = True
        except GeneratorExit:
            clean = True  # the consumer stopped between tokens: the cache is consistent
            raise
        finally:
            steps.close()
            self._settle(fed, clean)

    def _settle(self, fed: list[int], clean: bool) -> None:
        """Record which ids the cache now holds (mlx-lm evaluates one token ahead of what it yields)."""
        from mlx_lm.models.cache import trim_prompt_cache

        if not clean or not self._cache:
            self._cache, self._held = [], []
            return
        offset = int(self._cache[0].offset)
        if offset > len(fed):
            trim_prompt_cache(self._cache, offset - len(fed))
            offset = len(fed)
        self._held = fed[:offset]

    def close(self) -> None:
        self._cache, self._held = [], []
