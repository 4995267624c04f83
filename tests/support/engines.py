"""Scripted engines with timing and faults, for testing the proxy's connection handling;
:func:`generated`, one generation of any engine run to its end; and :func:`bundled_batched`, the
bundled model as the batched engine."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from tether.engine.base import (
    Constraint,
    Done,
    Engine,
    GenerationEvent,
    LogitsProcessor,
    Prefill,
    SamplingParams,
    Token,
)
from tether.engine.batch import BatchedLlama
from tether.engine.locate import bundled_model_path
from tether.engine.scripted import Reply, ScriptedEngine
from tether.grammar.local import LocalConstraint
from tether.grammar.spec import OutputSpec

__all__ = [
    "BrokenConstraint",
    "FaultyEngine",
    "PrefillingEngine",
    "SlowEngine",
    "break_layer0",
    "bundled_batched",
    "generated",
]


@contextmanager
def bundled_batched(n_seq: int, n_ctx: int) -> Iterator[BatchedLlama]:
    """The bundled model as ``n_seq`` batched sequences of ``n_ctx`` tokens, closed on exit."""
    engine = BatchedLlama(bundled_model_path(), n_seq=n_seq, n_ctx=n_ctx)
    try:
        yield engine
    finally:
        for slot in engine.slots():
            slot.close()


def generated(
    engine: Engine, ids: Sequence[int], params: SamplingParams, **kw: Any
) -> tuple[list[int], Done]:
    """The token ids and the ``Done`` of one generation, run to its end."""
    tokens: list[int] = []
    done: Done | None = None
    for event in engine.generate(ids, params, **kw):
        if isinstance(event, Token):
            tokens.append(event.id)
        else:
            assert isinstance(event, Done)
            done = event
    assert done is not None
    return tokens, done


class SlowEngine(ScriptedEngine):
    """A scripted engine that takes ``delay`` seconds per token and records what happens after a cancel.

    ``after_cancel`` counts tokens produced once the cancel flag was already set (the proxy's promise
    is at most one), the most of any one generation; ``cancels`` counts generations that ended cancelled.
    """

    def __init__(self, replies: Sequence[Reply] = ("x" * 400,), *, delay: float = 0.01, **kw: object) -> None:
        super().__init__(replies, **kw)  # type: ignore[arg-type]
        self.delay = delay
        self.after_cancel = 0
        self.cancels = 0
        self.running = threading.Event()

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        *,
        constraint: Constraint | None = None,
        cancel: threading.Event | None = None,
        logits_processor: LogitsProcessor | None = None,
    ) -> Iterator[GenerationEvent]:
        self.running.set()
        late = 0
        try:
            for ev in super().generate(
                prompt, params, constraint=constraint, cancel=cancel, logits_processor=logits_processor
            ):
                if isinstance(ev, Token):
                    time.sleep(self.delay)
                    if cancel is not None and cancel.is_set():
                        late += 1
                        self.after_cancel = max(self.after_cancel, late)
                elif cancel is not None and cancel.is_set():
                    self.cancels += 1
                yield ev
        finally:
            self.running.clear()


class PrefillingEngine(ScriptedEngine):
    """A scripted engine whose prompt takes ``chunks`` steps of ``delay`` seconds to "evaluate",
    reported as llama.cpp's engines report it (``ReportsPrefill``)."""

    def __init__(self, replies: Sequence[Reply], *, chunks: int = 20, delay: float = 0.05) -> None:
        super().__init__(replies)
        self.chunks, self.delay = chunks, delay
        self._progress: Prefill | None = None

    def prefill_progress(self) -> Prefill | None:
        return self._progress

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        *,
        constraint: Constraint | None = None,
        cancel: threading.Event | None = None,
        logits_processor: LogitsProcessor | None = None,
    ) -> Iterator[GenerationEvent]:
        began, step = time.monotonic(), max(1, len(prompt) // self.chunks)
        try:
            for k in range(self.chunks):
                self._progress = Prefill(k * step, self.chunks * step, time.monotonic() - began)
                time.sleep(self.delay)
        finally:
            self._progress = None
        yield from super().generate(
            prompt, params, constraint=constraint, cancel=cancel, logits_processor=logits_processor
        )


class FaultyEngine(ScriptedEngine):
    """Raises ``RuntimeError`` after ``fail_after`` tokens of the first ``faults`` generations."""

    def __init__(self, replies: Sequence[Reply], *, fail_after: int = 3, faults: int = 1) -> None:
        super().__init__(replies)
        self.fail_after = fail_after
        self.faults = faults

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        *,
        constraint: Constraint | None = None,
        cancel: threading.Event | None = None,
        logits_processor: LogitsProcessor | None = None,
    ) -> Iterator[GenerationEvent]:
        n = 0
        failing = self.faults > 0
        self.faults -= 1
        for ev in super().generate(
            prompt, params, constraint=constraint, cancel=cancel, logits_processor=logits_processor
        ):
            if failing and isinstance(ev, Token):
                n += 1
                if n > self.fail_after:
                    raise RuntimeError("injected engine fault")
            yield ev


class BrokenConstraint(LocalConstraint):
    """Layer 0 as the engine compiled it, raising ``ValueError`` on its ``at``-th step; before that it
    applies the real constraint, or (``inner`` None) lets every token through."""

    def __init__(self, inner: LocalConstraint | None, spec: OutputSpec, at: int) -> None:
        if inner is not None:
            super().__init__(inner.spec, inner.constraint, inner.grounding)
        self.spec = spec
        self.inner = inner
        self.at = at
        self.steps = 0

    def __call__(self, ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        self.steps += 1
        if self.steps == self.at:
            raise ValueError("injected constraint fault")
        return self.inner(ids, logits) if self.inner is not None else logits

    @property
    def decision(self) -> Any:
        return self.inner.decision if self.inner is not None else None


def break_layer0(monkeypatch: pytest.MonkeyPatch, engine: Any, *, at: int, real: bool = False) -> None:
    """Make ``engine`` compile every spec into a :class:`BrokenConstraint` (over the real one with ``real``)."""
    compile_real = engine.compile

    def compile(spec: OutputSpec, *, prompt_len: int) -> BrokenConstraint:
        inner = compile_real(spec, prompt_len=prompt_len) if real else None
        return BrokenConstraint(inner, spec, at)

    monkeypatch.setattr(engine, "compile", compile)
