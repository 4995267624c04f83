"""The in-process llama.cpp engine on ``llama-cpp-python``.

One instance owns one ``Llama`` context. Prefix reuse is the live context's:
a prompt that shares a prefix with what the context holds only evaluates the
new tail (``Llama.generate`` trims the KV cache to the common prefix). A tail longer than one
batch is evaluated here first, a whole batch at a time, so its progress can be shown
(:class:`~tether.engine.base.ReportsPrefill`) and a cancel stops it between batches; the batches are
the ones ``Llama.generate`` would have made, so the logits are the same.

A GGUF without a chat template is prompted with tether's ChatML fallback; where its end-of-turn
marker is plain text to the model, every generation stops at the fallback's markers
(``LlamaText.model_stops``, applied by :func:`tether.engine.stops.stop_at`).
"""

from __future__ import annotations

import os
import re
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import structlog

from tether.engine.base import (
    ContextEngine,
    Done,
    EngineInfo,
    Generation,
    GenerationEvent,
    LogitsProcessor,
    Prefill,
    common_prefix_len,
)
from tether.engine.llama_options import LlamaOptions, llama_kwargs
from tether.engine.loop import token_loop
from tether.engine.prefix import PrefixCache, keep_seq, load_seq, save_seq
from tether.engine.stops import stop_at
from tether.engine.template import fallback_stops
from tether.errors import ConfigError, EngineError

__all__ = ["LlamaCppEngine", "LlamaText", "describe_llama", "model_id_for", "open_llama"]

log = structlog.get_logger(__name__)


def model_id_for(path: Path, metadata: dict[str, str]) -> str:
    """A short, stable model id from the file name (``SmolLM2-135M-Instruct.Q4_1.gguf`` -> ``smollm2-135m-instruct``)."""
    name = path.stem.split(".")[0] or metadata.get("general.name", "model")
    return re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-") or path.stem


def open_llama(
    path: str | Path,
    *,
    n_ctx: int,
    n_threads: int | None = None,
    n_batch: int = 512,
    options: LlamaOptions | None = None,
) -> tuple[Any, LlamaOptions, int]:
    """Load a GGUF model into ``llama_cpp.Llama``: the model, the options as in effect, the threads.

    Shared by the serial engine (which decodes in the ``Llama``'s own context) and the batched one
    (which only borrows its model and tokenizer)."""
    try:
        import llama_cpp
    except ImportError as exc:  # pragma: no cover - exercised only on broken installs
        raise ConfigError("llama-cpp-python is not installed: run `make setup`") from exc
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"model file not found: {path}")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ConfigError(
            f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF'): the llama.cpp engine loads "
            "GGUF models; convert one with llama.cpp's convert_hf_to_gguf.py, or serve an MLX model "
            "directory with --engine mlx"
        )
    threads = n_threads or os.cpu_count() or 1
    options = options or LlamaOptions()
    if options.gpu_layers != 0 and not llama_cpp.llama_supports_gpu_offload():
        # Not an error: one tether.toml may serve machines with and without a GPU build.
        log.warning(
            "gpu_offload_unavailable",
            gpu_layers=options.describe()["gpu_layers"],
            hint="this llama-cpp-python is a CPU build; rebuild with TETHER_GPU=cuda make setup (docs/gpu.md)",
        )
        options = replace(options, gpu_layers=0)
    try:
        llm = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_threads=threads,
            n_threads_batch=threads,
            n_batch=n_batch,
            verbose=False,
            **llama_kwargs(options),
        )
    except ValueError as exc:
        raise ConfigError(f"llama.cpp could not load {path}: {exc}{_load_hint(options)}") from exc
    return llm, options, threads


def describe_llama(llm: Any, path: str | Path, options: LlamaOptions, n_ctx: int) -> EngineInfo:
    """The ``EngineInfo`` of a loaded ``Llama`` whose requests get ``n_ctx`` tokens each."""
    import llama_cpp

    path = Path(path)
    meta = {str(k): str(v) for k, v in llm.metadata.items()}
    model = llm._model
    eos = {int(model.token_eos())}
    n_vocab = llm.n_vocab()
    eos |= {i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(model.vocab, i)}
    control = frozenset(i for i in range(n_vocab) if llama_cpp.llama_vocab_is_control(model.vocab, i))
    bos = int(model.token_bos())
    return EngineInfo(
        model_id=model_id_for(path, meta),
        n_ctx=n_ctx,
        chat_template=meta.get("tokenizer.chat_template"),
        bos_token=_piece_text(llm, bos) if bos >= 0 else "",
        eos_token=_piece_text(llm, int(model.token_eos())),
        eos_token_ids=frozenset(eos),
        n_vocab=n_vocab,
        path=str(path),
        control_token_ids=control,
        metadata={k: v for k, v in meta.items() if k != "tokenizer.chat_template"},
        llama_options=options,
    )


def _piece_text(llm: Any, token: int) -> str:
    return str(llm.detokenize([token], special=True).decode("utf-8", errors="replace"))


class LlamaText:
    """Tokenizing, detokenizing and the vocabulary's pieces of a loaded ``Llama``: the same for the
    serial engine and the batched one. Subclasses set ``_llm`` and ``_text_info`` before use."""

    _llm: Any
    _text_info: EngineInfo
    _pieces: list[bytes] | None = None
    _model_stops: tuple[str, ...] | None = None

    @property
    def model_stops(self) -> tuple[str, ...]:
        """Stop strings of every generation on this model: the fallback template's turn markers
        where the model has no template and the end-of-turn marker is not its own end token."""
        if self._model_stops is None:
            info = self._text_info
            self._model_stops = fallback_stops(
                info.chat_template, lambda text: self.tokenize(text, special=True), info.eos_token_ids
            )
            if self._model_stops:
                log.info("fallback_template_stops", model=info.model_id, stops=list(self._model_stops))
        return self._model_stops

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        bos = self._text_info.bos_token
        add_bos = not (bos and text.startswith(bos))  # the text may already start with it
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special))

    def detokenize(self, ids: Sequence[int]) -> str:
        return str(self._llm.detokenize(list(ids), special=True).decode("utf-8", errors="replace"))

    def token_pieces(self) -> list[bytes]:
        """The raw bytes of every vocabulary entry, indexed by token id (computed once)."""
        if self._pieces is None:
            import ctypes

            import llama_cpp

            vocab = self._llm._model.vocab
            buf = ctypes.create_string_buffer(256)
            pieces: list[bytes] = []
            for i in range(self._text_info.n_vocab):
                n = llama_cpp.llama_token_to_piece(vocab, i, buf, len(buf), 0, True)
                pieces.append(buf.raw[: max(n, 0)])
            self._pieces = pieces
        return self._pieces


class LlamaCppEngine(LlamaText, ContextEngine):
    """A GGUF model with one llama.cpp context."""

    def __init__(
        self,
        path: str | Path,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        n_batch: int = 512,
        options: LlamaOptions | None = None,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        super().__init__()
        self._cache = prefix_cache
        self._llm, options, threads = open_llama(
            path, n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch, options=options
        )
        self._info = self._text_info = describe_llama(self._llm, path, options, self._llm.n_ctx())
        log.info(
            "model_loaded",
            path=str(path),
            n_ctx=self._info.n_ctx,
            threads=threads,
            **options.describe("serial"),
        )
        _ = self.model_stops  # decided once, at load
        self._prefill: Prefill | None = None

    @property
    def info(self) -> EngineInfo:
        return self._info

    def prefill_progress(self) -> Prefill | None:
        return self._prefill

    def cached_prefix_len(self, prompt: Sequence[int]) -> int:
        return common_prefix_len(self._llm._input_ids, prompt)

    def prefix_cache_stats(self) -> dict[str, Any] | None:
        return self._cache.snapshot() if self._cache is not None else None

    def _evaluated(self, prompt: Sequence[int]) -> int:
        """How many prompt tokens ``Llama.generate`` will evaluate (mirrors its reuse rule)."""
        if self._llm.n_tokens == 0:
            return len(prompt)
        common = self.cached_prefix_len(prompt)
        consumed = common == len(prompt)
        if consumed and self._llm.n_tokens == len(prompt) and not getattr(self._llm, "_requires_eval", True):
            return 0
        reuse = common - 1 if consumed else common
        return len(prompt) - reuse if reuse > 0 else len(prompt)

    def _generate(self, run: Generation) -> Iterator[GenerationEvent]:
        prompt, params, logits_processor, cancel = run.prompt, run.params, run.logits_processor, run.cancel
        llm = self._llm
        if self._cache is not None:
            self._restore(self._cache, prompt)
        evaluated = self._evaluated(prompt)
        if not self._prefilled(prompt, evaluated, run.cancel):
            yield Done("cancelled", len(prompt), evaluated, 0)
            return
        llm.set_seed(params.seed if params.seed is not None else secrets.randbits(31))
        eos = self._info.eos_token_ids
        guarded = _GuardedProcessor(logits_processor, eos) if logits_processor else None
        processors: Any = [guarded] if guarded else None
        tokens = llm.generate(
            list(prompt),
            top_k=params.top_k,
            top_p=params.top_p,
            min_p=params.min_p,
            temp=params.temperature,
            repeat_penalty=params.repeat_penalty,
            logits_processor=processors,
        )
        try:
            events = token_loop(
                _checked(tokens, guarded),
                piece=lambda t: llm.detokenize([t], special=True),
                eos=eos,
                max_tokens=params.max_tokens,
                cancel=cancel,
                prompt_tokens=len(prompt),
                evaluated=evaluated,
            )
            stops = self.model_stops
            if stops:
                events = stop_at(events, stops, prompt_tokens=len(prompt), evaluated=evaluated)
            yield from events
        finally:
            tokens.close()
            if self._cache is not None:
                self._save(self._cache)

    def _restore(self, cache: PrefixCache, prompt: Sequence[int]) -> None:
        """Put the longest cached prefix of ``prompt`` into the context when it beats what the
        context holds (another conversation ran here since, or the server restarted)."""
        have = self.cached_prefix_len(prompt)
        hit = cache.lookup(prompt, have=have)
        if hit is None:
            return
        keep = min(common_prefix_len(hit.entry.tokens, prompt), len(prompt) - 1)
        if keep <= have:
            return
        started = time.perf_counter()
        llm = self._llm
        if not load_seq(llm._ctx.ctx, 0, hit.entry.state):
            keep_seq(llm._ctx.ctx, 0, 0)
            llm.n_tokens = 0
            cache.restore_failed()
            log.warning("prefix_cache_restore_failed", tokens=len(hit.entry.tokens))
            return
        keep_seq(llm._ctx.ctx, 0, keep)
        llm.input_ids[:keep] = prompt[:keep]
        llm.n_tokens = keep
        llm._requires_eval = True  # the logits are not the restored prefix's: one token is replayed
        cache.restored(keep, hit.load_s + time.perf_counter() - started)

    def _save(self, cache: PrefixCache) -> None:
        """Offer what the context now holds to the cache (a copy of its cells when it wants them)."""
        llm = self._llm
        tokens = llm.input_ids[: llm.n_tokens]
        try:
            chain = cache.wants(tokens)
            if chain is not None:
                started = time.perf_counter()
                state = save_seq(llm._ctx.ctx, 0)
                cache.put(tokens, state, chain, save_s=time.perf_counter() - started)
        except Exception as exc:  # the cache is an optimization: a failure never fails the request
            log.warning("prefix_cache_save_failed", error=repr(exc))

    def _prefilled(self, prompt: Sequence[int], evaluated: int, cancel: threading.Event | None) -> bool:
        """Evaluate the whole batches of the prompt's new tail but the last (see the module doc);
        False when ``cancel`` was set on the way."""
        llm = self._llm
        start, batch = len(prompt) - evaluated, llm.n_batch
        whole = (evaluated - 1) // batch  # at least one token is left for generate to evaluate
        if whole < 1:
            return True
        began = time.monotonic()
        llm.n_tokens = start  # eval drops the cache past it, as generate would
        try:
            for k in range(whole):
                self._prefill = Prefill(k * batch, evaluated, time.monotonic() - began)
                if cancel is not None and cancel.is_set():
                    return False
                llm.eval(prompt[start + k * batch : start + (k + 1) * batch])
        finally:
            self._prefill = None
        return True

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()  # its queued disk writes finish first (bounded)
        self._llm.close()


def _load_hint(options: LlamaOptions) -> str:
    """What to try when llama.cpp refuses a context the non-default options asked for."""
    if (options.cache_type_k, options.cache_type_v) != ("f16", "f16"):
        return (
            f" (with --cache-type-k {options.cache_type_k} / --cache-type-v {options.cache_type_v}: a quantized "
            "cache needs the model's head size to be a multiple of 32; try f16)"
        )
    if options.gpu_layers != 0:
        return " (with --gpu-layers: is there enough free GPU memory? try fewer layers)"
    return ""


def _checked(tokens: Iterator[int], guarded: _GuardedProcessor | None) -> Iterator[int]:
    """The sampled ids, stopping with the processor's failure as soon as it is known."""
    for token in tokens:
        if guarded is not None and guarded.failure is not None:
            raise EngineError(f"the logits processor failed: {guarded.failure!r}") from guarded.failure
        yield int(token)


class _GuardedProcessor:
    """The processor as llama-cpp-python calls it: from a ctypes sampler callback, where an exception
    is printed and ignored and sampling goes on unconstrained. A failure is kept instead, only EOS
    stays allowed, and the generate loop raises it: a broken constraint never fails open.

    The logits handed in are a strided view of the candidates (no copy is made here: the processor
    may edit it in place or return a new array, which is written back)."""

    def __init__(self, fn: LogitsProcessor, eos: frozenset[int]) -> None:
        self.fn = fn
        self.eos = np.asarray(sorted(eos), dtype=np.intp)
        self.failure: BaseException | None = None

    def __call__(self, ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        if self.failure is None:
            try:
                return self.fn(ids, logits)
            except Exception as exc:
                self.failure = exc
        logits[:] = -np.inf
        logits[self.eos] = 0.0
        return logits
