"""A deterministic stand-in for :class:`~tether.engine.batch.context.BatchContext`: the "model" the
batch runner's unit tests drive, as the scripted engine is for the proxy.

It keeps, per sequence, the token ids in its cache by position, and checks what llama.cpp checks:
a decode's tokens of one sequence must sit at consecutive positions right after what that
sequence holds (checked when :meth:`ScriptedContext.decode` runs, as ``llama_decode`` does, so a
bad batch fails like a real one: dropped, with an ``EngineError``), a batch holds at most
``n_batch`` tokens, and logits exist only at rows asked for in the last decode. Every breach is
also recorded in ``violations`` (a runner bug), and every decode's batch in ``batches``.

The logits at a row depend only on that sequence's cached ids up to and including the row's
token: ``rule(ids)`` names the next token (modulo ``n_vocab``), the row's one clear maximum.

Below it, what the runner's tests use to drive one: :func:`job`, :func:`drain` (a consumer that
cannot hang a test), :func:`settle` and :func:`at_decode` (the runner's pace), :class:`Grammar`
(a toy layer 0 that forces tokens and answers the draft question) and :class:`Rig`, which starts
runners and, at the end, closes them and checks that no context saw a breach.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pytest

from tether.engine.base import LogitsProcessor, SamplingParams
from tether.engine.batch.context import BatchContext
from tether.engine.batch.runner import BatchOptions, BatchRunner, Job
from tether.errors import EngineError

__all__ = [
    "WAIT",
    "Cell",
    "Grammar",
    "Outcome",
    "Rig",
    "Rule",
    "ScriptedContext",
    "at_decode",
    "cells_of",
    "count_up",
    "digest",
    "drain",
    "job",
    "settle",
    "submit_all",
    "tokens",
    "wait_until",
]

Rule = Callable[[Sequence[int]], int]


class Cell(NamedTuple):
    """One token of a decode's batch."""

    seq: int
    pos: int
    token: int
    logits: bool


def cells_of(batch: list[Cell], seq: int) -> list[Cell]:
    return [c for c in batch if c.seq == seq]


def count_up(ids: Sequence[int]) -> int:
    """The default model: each token is followed by the next id."""
    return ids[-1] + 1


def digest(ids: Sequence[int]) -> int:
    """A model whose next token depends on every cached id and its position."""
    return sum((i + 1) * t for i, t in enumerate(ids))


class ScriptedContext(BatchContext):
    """``n_seq`` sequences of ``n_ctx // n_seq`` cells each; at most ``n_batch`` tokens per decode.

    ``on_decode(batch)`` runs at the start of every non-empty decode (raise there to make the
    decode fail, or block to pause the runner); ``on_keep(seq, n)`` before every trim."""

    def __init__(
        self,
        *,
        n_seq: int = 2,
        n_batch: int = 64,
        n_ctx: int = 2048,
        n_vocab: int = 50,
        rule: Rule = count_up,
    ) -> None:
        # Not BatchContext.__init__: that one loads llama.cpp. The same public attributes, set here.
        self.n_seq = n_seq
        self.n_batch = n_batch
        self.n_ctx = n_ctx
        self.n_vocab = n_vocab
        self.size = 0
        self.rule = rule
        self.on_decode: Callable[[list[Cell]], None] | None = None
        self.on_keep: Callable[[int, int], None] | None = None
        self.cells: list[list[int]] = [[] for _ in range(n_seq)]
        self.batches: list[list[Cell]] = []  # every decode that ran, in order
        self.shares: list[tuple[int, int, int]] = []  # (src, dst, n) of every share
        self.violations: list[str] = []
        self.unsorted: list[list[int]] = []  # the sequence order of every decode not sorted by sequence
        self.closed = False
        self._queue: list[Cell] = []
        self._rows: dict[int, npt.NDArray[np.single]] = {}

    def add(self, token: int, pos: int, seq: int, *, logits: bool) -> int:
        if self.size >= self.n_batch:
            raise self._breach(f"token {token} of sequence {seq} added to a full batch of {self.n_batch}")
        del self._queue[self.size :]  # as in llama_batch, rows past ``size`` are not part of it
        self._queue.append(Cell(seq, pos, token, logits))
        self.size = len(self._queue)
        return self.size - 1

    def decode(self) -> None:
        if self.size == 0:
            return
        batch, self._queue, self.size, self._rows = self._queue[: self.size], [], 0, {}
        if self.on_decode is not None:
            self.on_decode(batch)
        problem = self._check(batch)
        if problem is not None:
            raise self._breach(problem)
        order = [c.seq for c in batch]
        if order != sorted(order):  # llama.cpp would split it into more passes over the weights
            self.unsorted.append(order)
        counts = {seq: sum(1 for c in batch if c.seq == seq) for seq in {c.seq for c in batch}}
        if any(len(self.cells[seq]) + n > self.n_ctx // self.n_seq for seq, n in counts.items()):
            raise EngineError("the batched decode failed: no room left in the KV cache")
        for row, cell in enumerate(batch):
            held = self.cells[cell.seq]
            held.append(cell.token)
            if cell.logits:
                self._rows[row] = self._logits_after(held)
        self.batches.append(batch)

    def logits(self, row: int, *, copy: bool = True) -> npt.NDArray[np.single]:
        if row not in self._rows:
            raise self._breach(f"logits read at row {row}, which the last decode did not compute")
        if copy:
            return self._rows[row].copy()
        view = self._rows[row].view()
        view.flags.writeable = False  # as llama.cpp's buffer must be: a write here is a runner bug
        return view

    def keep(self, seq: int, n: int) -> None:
        if not 0 <= seq < self.n_seq:
            raise self._breach(f"keep on sequence {seq} of {self.n_seq}")
        if self.on_keep is not None:
            self.on_keep(seq, n)
        del self.cells[seq][max(n, 0) :]  # llama_memory_seq_rm: a negative start means from 0

    def share(self, src: int, dst: int, n: int) -> None:
        if not (0 <= src < self.n_seq and 0 <= dst < self.n_seq):
            raise self._breach(f"share from sequence {src} to {dst} of {self.n_seq}")
        self.shares.append((src, dst, n))
        self.cells[dst] = list(self.cells[src])  # as BatchContext.share: copy whole, then trim
        self.keep(dst, n)

    def close(self) -> None:
        self.closed = True

    def _check(self, batch: list[Cell]) -> str | None:
        """What llama.cpp would refuse in ``batch``, or None."""
        ahead: dict[int, int] = {}
        for row, (seq, pos, token, _) in enumerate(batch):
            if not 0 <= seq < self.n_seq:
                return f"row {row}: no sequence {seq}"
            if not 0 <= token < self.n_vocab:
                return f"row {row}: token {token} outside the vocabulary of {self.n_vocab}"
            want = len(self.cells[seq]) + ahead.get(seq, 0)
            if pos != want:
                return f"row {row}: sequence {seq} at position {pos}, but its next position is {want}"
            ahead[seq] = ahead.get(seq, 0) + 1
        return None

    def _logits_after(self, ids: Sequence[int]) -> npt.NDArray[np.single]:
        row = np.zeros(self.n_vocab, dtype=np.single)
        row[self.rule(ids) % self.n_vocab] = 10.0
        return row

    def _breach(self, problem: str) -> EngineError:
        self.violations.append(problem)
        return EngineError(f"the batched decode failed: {problem}")


# Driving a runner over it: jobs, their consumers, and the runner's pace.

WAIT = 5.0  # seconds any wait may take before the test fails instead of hanging


def job(
    seq: int,
    prompt: Iterable[int],
    max_tokens: int = 8,
    *,
    processor: LogitsProcessor | None = None,
    cancel: threading.Event | None = None,
    temperature: float = 0.0,
) -> Job:
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=1)
    return Job(seq, list(prompt), params, processor, cancel)


@dataclass
class Outcome:
    tokens: list[int]
    error: BaseException | None = None


def drain(j: Job, timeout: float = WAIT) -> Outcome:
    """Everything ``j.tokens()`` yields, read in a thread so a runner bug fails the test, not hangs it."""
    out = Outcome([])

    def read() -> None:
        try:
            out.tokens.extend(j.tokens())
        except BaseException as exc:
            out.error = exc

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        pytest.fail(f"job.tokens() did not end within {timeout}s (it gave {out.tokens})")
    return out


def tokens(j: Job) -> list[int]:
    out = drain(j)
    assert out.error is None, repr(out.error)
    return out.tokens


def wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.002)


def idle(runner: BatchRunner) -> bool:
    """No job left: no step is in flight, so the runner's state and the context's can be compared."""
    with runner._cv:
        return not runner._jobs and not runner._inbox


def settle(runner: BatchRunner) -> None:
    wait_until(lambda: idle(runner), "the runner to go idle")


def submit_all(runner: BatchRunner, *jobs: Job) -> None:
    """Submit under the runner's lock, so that one step picks all of them up."""
    with runner._cv:
        for j in jobs:
            runner.submit(j)


def at_decode(ctx: ScriptedContext, n: int, action: Callable[[], None]) -> None:
    """Run ``action`` inside the ``n``-th decode (counting from 1), once; it may raise to fail it."""
    fired = False

    def hook(_: list[Cell]) -> None:
        nonlocal fired
        if not fired and len(ctx.batches) == n - 1:
            fired = True
            action()

    ctx.on_decode = hook


class Grammar:
    """A toy layer 0 (the runner's ``Forcing``): after ``trigger`` only ``span`` may follow, one
    token at a time, and its mask says the same; ``copying`` answers the draft question."""

    def __init__(self, trigger: int = -1, span: Sequence[int] = (), *, copying: bool = False) -> None:
        self.trigger, self.span, self._copying = trigger, list(span), copying
        self.calls = 0  # masks applied: one per sampling step

    def allowed(self, ids: npt.NDArray[np.intc]) -> int | None:
        seen = ids.tolist()
        for k, token in enumerate(self.span):
            want = [self.trigger, *self.span[:k]]
            if seen[-len(want) :] == want:
                return token
        return None

    def copying(self, ids: npt.NDArray[np.intc]) -> bool:
        return self._copying

    def forced_next(self, ids: npt.NDArray[np.intc]) -> int | None:
        return self.allowed(ids)

    def __call__(self, ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        self.calls += 1
        only = self.allowed(ids)
        if only is None:
            return logits
        masked = np.full_like(logits, -np.inf)
        masked[only] = logits[only]
        return masked


def toy_pieces(size: int = 64) -> list[bytes]:
    """A toy vocabulary: token ``i`` reads ``<i>``."""
    return [f"<{i}>".encode() for i in range(size)]


def toy_tokenize(data: bytes) -> list[int]:
    """The toy vocabulary's tokenizer: every whole ``<i>``; a cut-off one at the end is dropped."""
    return [int(m) for m in re.findall(rb"<(\d+)>", data)]


class Rig:
    """Starts runners over scripted contexts; :meth:`close_all` closes them and checks they ran clean."""

    def __init__(self) -> None:
        self.started: list[tuple[BatchRunner, ScriptedContext]] = []

    def __call__(
        self,
        ctx: ScriptedContext | None = None,
        *,
        eos: Iterable[int] = (),
        options: BatchOptions | None = None,
        text: bool = False,
    ) -> tuple[BatchRunner, ScriptedContext]:
        """``text``: the runner also gets the toy vocabulary (:func:`toy_pieces`) for text drafts."""
        ctx = ctx or ScriptedContext()
        vocab = {"pieces": toy_pieces(), "tokenize": toy_tokenize} if text else {}
        runner = BatchRunner(
            ctx, n_seq=ctx.n_seq, eos=frozenset(eos), options=options or BatchOptions(), **vocab
        )
        self.started.append((runner, ctx))
        return runner, ctx

    def close_all(self) -> None:
        for runner, _ in self.started:
            runner.close()
        for runner, ctx in self.started:
            assert not runner._thread.is_alive()
            assert ctx.violations == []
            assert ctx.unsorted == [], "a decode's rows were not sorted by sequence"
