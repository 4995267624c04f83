"""Engine-neutral types and the ``Engine`` Protocol every backend implements.

An engine turns prompt token ids into a stream of ``Token`` events ending in one
``Done``. It is synchronous and single-context: the scheduler guarantees that
one engine instance runs one generation at a time, on a worker thread.

Layer 0 reaches every engine one way: the caller describes the output with an engine-neutral
``OutputSpec`` (:mod:`tether.grammar.spec`), the engine compiles it (``compile``) into whatever it
applies — a logits processor in process, GBNF or a structural tag on a remote server — and the
compiled ``Constraint`` goes back into ``generate``. What a compiled constraint can tell afterwards
is a capability Protocol (``Decides``), checked with ``isinstance``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from tether.caches import CacheFill
from tether.engine.llama_options import LlamaOptions

if TYPE_CHECKING:
    from tether.grammar.local import LocalCompiler
    from tether.grammar.spec import OutputSpec
    from tether.grammar.steering import Decision

__all__ = [
    "Constraint",
    "ContextEngine",
    "Decides",
    "Done",
    "Engine",
    "EngineBase",
    "EngineInfo",
    "FinishReason",
    "Generation",
    "GenerationEvent",
    "LogitsProcessor",
    "Prefill",
    "ReportsBatch",
    "ReportsPrefill",
    "ReportsPrefixCache",
    "SamplingParams",
    "Token",
    "TokenChoice",
    "TokenLogprob",
    "common_prefix_len",
]

FinishReason = Literal["stop", "length", "cancelled"]

# A plain callable, as in mlx-lm and llama-cpp-python: (ids so far, logits) -> logits.
# ``ids`` holds the prompt and the generated tokens; processors may modify logits in place.
LogitsProcessor = Callable[[npt.NDArray[np.intc], npt.NDArray[np.single]], npt.NDArray[np.single]]


def common_prefix_len(held: Iterable[int], prompt: Iterable[int]) -> int:
    """How many leading ids ``held`` and ``prompt`` share (an engine's ``cached_prefix_len``).

    Runs per slot on every request (and per step for a batched request waiting on a shared prefix):
    slices are compared in C, 256 ids at a time, and only the chunk that differs is walked."""
    a, b = _ids(held), _ids(prompt)
    n = min(len(a), len(b))
    i = 0
    while i < n:
        j = min(i + 256, n)
        if a[i:j] != b[i:j]:
            while a[i] == b[i]:
                i += 1
            return i
        i = j
    return n


def _ids(seq: Iterable[int]) -> list[int]:
    if isinstance(seq, list):
        return seq
    if isinstance(seq, np.ndarray):  # llama-cpp-python's input ids
        return list(seq.tolist())
    return list(seq)


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings for one generation. ``temperature == 0`` means greedy."""

    max_tokens: int = 256
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    seed: int | None = None
    # Applied as logits processors (tether.engine.processors), the same on every engine.
    logit_bias: tuple[tuple[int, float], ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    # None: no log-probabilities (no per-token work); N: each token's, with the N most likely (0..20).
    logprobs: int | None = None


@dataclass(frozen=True)
class EngineInfo:
    """What the proxy needs to know about a loaded model."""

    model_id: str
    n_ctx: int
    chat_template: str | None
    bos_token: str
    eos_token: str
    eos_token_ids: frozenset[int]
    n_vocab: int
    path: str = ""
    control_token_ids: frozenset[int] = frozenset()
    metadata: dict[str, str] = field(default_factory=dict)
    # What llama.cpp loaded the model with, as in effect (None: another engine); the KV budget reads it.
    llama_options: LlamaOptions | None = None
    backend: str = "embedded"  # embedded | llama-server | ... (reported in /v1/models and /health)
    # Which of tether's layers this engine gets (docs/backends.md has the table per backend).
    layers: tuple[str, ...] = (
        "layer0_names",
        "layer0_strict",
        "layer0_grounded",
        "layer0_decision",
        "repick",
        "repair",
        "prefix_reuse",
        "streaming",
    )


@dataclass(frozen=True)
class TokenChoice:
    """One vocabulary entry, its raw bytes and its log-probability."""

    id: int
    piece: bytes
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    """A sampled token's log-probability and the most likely tokens at its step, most likely first
    (:mod:`tether.engine.logprobs` says which distribution)."""

    chosen: TokenChoice
    top: tuple[TokenChoice, ...]


@dataclass(frozen=True)
class Token:
    """One sampled token and the text it completes (``""`` while a UTF-8 sequence is split);
    ``logprob`` only when ``SamplingParams.logprobs`` asked for it. ``batched``: another token handed
    over with this one follows at once (a stream window gathered them), so a consumer may hold what
    it makes of this one and send it with the next."""

    id: int
    text: str
    logprob: TokenLogprob | None = None
    batched: bool = False


@dataclass(frozen=True)
class Done:
    """End of a generation with its accounting."""

    finish_reason: FinishReason
    prompt_tokens: int
    prompt_tokens_evaluated: int
    completion_tokens: int


GenerationEvent = Token | Done


@runtime_checkable
class Constraint(Protocol):
    """An ``OutputSpec`` compiled by one engine for one generation; only that engine applies it."""

    @property
    def spec(self) -> OutputSpec: ...


@runtime_checkable
class Decides(Protocol):
    """A compiled constraint that steers the call-or-answer point and tells how it went."""

    @property
    def decision(self) -> Decision | None: ...


@dataclass(frozen=True)
class Prefill:
    """How far the prompt of a slot's current generation has been evaluated: ``done`` of the
    ``total`` tokens it has to evaluate (the reused prefix not counted), in ``seconds`` so far."""

    done: int
    total: int
    seconds: float

    @property
    def rate(self) -> float:
        """Tokens evaluated per second so far (0 before the first chunk is done)."""
        return self.done / self.seconds if self.seconds > 0 else 0.0


@runtime_checkable
class ReportsPrefill(Protocol):
    """An engine that can say how far its current generation's prompt has been evaluated (the
    dashboard shows it while a long prompt prefills)."""

    def prefill_progress(self) -> Prefill | None:
        """None when no prompt is being evaluated."""
        ...


@runtime_checkable
class ReportsBatch(Protocol):
    """An engine whose slots share one batched runner, with counters to show (``/health``)."""

    def batch_stats(self) -> dict[str, float | int]: ...


@runtime_checkable
class ReportsPrefixCache(Protocol):
    """An engine with a prefix KV cache (``/health`` and ``/metrics`` show its tiers)."""

    def prefix_cache_stats(self) -> dict[str, Any] | None:
        """None when the cache is off."""
        ...


@runtime_checkable
class Engine(Protocol):
    """A loaded model with one inference context."""

    @property
    def info(self) -> EngineInfo: ...

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        """Token ids for ``text``; ``special`` parses special-token text (``<|im_start|>``)."""
        ...

    def detokenize(self, ids: Sequence[int]) -> str: ...

    def token_pieces(self) -> list[bytes]:
        """The raw bytes of every vocabulary entry, indexed by token id (for grammar masks)."""
        ...

    def cached_prefix_len(self, prompt: Sequence[int]) -> int:
        """How many leading tokens of ``prompt`` the context already holds (prefix reuse)."""
        ...

    def compile(self, spec: OutputSpec, *, prompt_len: int) -> Constraint:
        """``spec`` as this engine applies it, for a generation after a prompt of ``prompt_len`` ids."""
        ...

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        *,
        constraint: Constraint | None = None,
        cancel: threading.Event | None = None,
        logits_processor: LogitsProcessor | None = None,
    ) -> Iterator[GenerationEvent]:
        """Stream tokens for ``prompt``; always ends with exactly one ``Done``.

        ``constraint``: one this engine compiled; ``logits_processor``: an extra processor (in-process
        engines only), applied after the request's sampling processors and before the constraint."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Generation:
    """One generation's inputs, as an engine's ``_generate`` receives them."""

    prompt: list[int]
    params: SamplingParams
    logits_processor: LogitsProcessor | None = None
    cancel: threading.Event | None = None
    constraint: Constraint | None = None


class EngineBase:
    """What every engine's ``generate`` shares: the call, and one generation at a time (overlapping use
    is a scheduler bug). A subclass says what it can apply (``_admit``, which raises for the rest)
    and runs the admitted generation (``_run``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        *,
        constraint: Constraint | None = None,
        cancel: threading.Event | None = None,
        logits_processor: LogitsProcessor | None = None,
    ) -> Iterator[GenerationEvent]:
        from tether.errors import EngineError

        run = self._admit(Generation(list(prompt), params, logits_processor, cancel, constraint))
        if not self._lock.acquire(blocking=False):
            raise EngineError("engine slot is busy: the scheduler must not run two generations on one slot")
        try:
            yield from self._run(run)
        finally:
            self._lock.release()

    def _admit(self, run: Generation) -> Generation:
        raise NotImplementedError

    def _run(self, run: Generation) -> Iterator[GenerationEvent]:
        raise NotImplementedError


class ContextEngine(EngineBase):
    """Base for engines that own one inference context: ``compile`` turns specs into logits processors
    over the model's vocabulary; a generation chains the request's sampling processors, the caller's
    processor and the constraint (last, so no bias re-opens a masked token), and runs the subclass's
    ``_generate``, which ends in ``token_loop``. Asked for log-probabilities, it chains the one
    recorder after them, for every engine."""

    _compiler: LocalCompiler | None = None

    @property
    def info(self) -> EngineInfo:
        raise NotImplementedError

    @property
    def compiler(self) -> LocalCompiler:
        """The spec compiler for this engine's vocabulary (built on first use; slots of one model share it)."""
        if self._compiler is None:
            from tether.grammar.local import LocalCompiler

            self._compiler = LocalCompiler(self)
        return self._compiler

    def compile(self, spec: OutputSpec, *, prompt_len: int) -> Constraint:
        return self.compiler.compile(spec, prompt_len=prompt_len)

    def cache_fill(self) -> dict[str, CacheFill]:
        """The constraint plans and masks kept for this vocabulary (``tether.caches``)."""
        return self.compiler.provider.cache_fill()

    def _admit(self, run: Generation) -> Generation:
        from tether.engine.processors import chain, sampling_processors
        from tether.errors import EngineError
        from tether.grammar.local import LocalConstraint

        constraint = run.constraint
        if constraint is not None and not isinstance(constraint, LocalConstraint):
            raise EngineError(
                f"an in-process engine cannot apply {type(constraint).__name__}: compile it here"
            )
        own = sampling_processors(run.params, len(run.prompt))
        return replace(run, logits_processor=chain([*own, run.logits_processor, constraint]))

    def _run(self, run: Generation) -> Iterator[GenerationEvent]:
        if run.params.logprobs is None:
            return self._generate(run)
        from tether.engine.logprobs import recorded

        return recorded(run, self._generate, self.token_pieces())

    def token_pieces(self) -> list[bytes]:
        raise NotImplementedError

    def _generate(self, run: Generation) -> Iterator[GenerationEvent]:
        raise NotImplementedError
