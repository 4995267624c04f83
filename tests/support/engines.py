"""Scripted engines with timing and faults, for testing the proxy's connection handling."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

from tether.engine.base import GenerationEvent, LogitsProcessor, SamplingParams, Token
from tether.engine.scripted import Reply, ScriptedEngine

__all__ = ["FaultyEngine", "SlowEngine"]


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
        logits_processor: LogitsProcessor | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[GenerationEvent]:
        self.running.set()
        late = 0
        try:
            for ev in super().generate(prompt, params, logits_processor=logits_processor, cancel=cancel):
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
        logits_processor: LogitsProcessor | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[GenerationEvent]:
        n = 0
        failing = self.faults > 0
        self.faults -= 1
        for ev in super().generate(prompt, params, logits_processor=logits_processor, cancel=cancel):
            if failing and isinstance(ev, Token):
                n += 1
                if n > self.fail_after:
                    raise RuntimeError("injected engine fault")
            yield ev
