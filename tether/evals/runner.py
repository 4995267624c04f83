"""Driving a run: items × runs × presets, resumable stores, bounded concurrency, live progress.

Work is ordered item-major: for one item (and run) every preset is evaluated back
to back, so the server's prefix cache holds the item's prompt when the next preset
asks (on one slot, only the tail after the shared prefix is evaluated again). The
preset that goes first rotates from item to item, so no preset always pays the
uncached prompt (latency and ``cached_tokens`` stay comparable). Up to
``concurrency`` items are in flight. Each finished (item, run, preset) is appended
to that preset's JSONL store at once; keys already in a store are skipped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tether.evals.client import ChatClient
from tether.evals.records import ItemRecord, ResultStore
from tether.evals.suites import EvalItem, RunOptions

__all__ = ["Progress", "RunPlan", "run_plan"]


@dataclass
class Progress:
    """Counters the progress display reads; ``on_record`` is called after every record."""

    total: int = 0
    done: int = 0
    correct: dict[str, int] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)
    on_record: Callable[[Progress, ItemRecord], None] | None = None

    def add(self, record: ItemRecord) -> None:
        self.done += 1
        self.seen[record.preset] = self.seen.get(record.preset, 0) + 1
        self.correct[record.preset] = self.correct.get(record.preset, 0) + int(record.correct)
        if self.on_record is not None:
            self.on_record(self, record)

    def accuracy_line(self) -> str:
        parts = [f"{p} {self.correct.get(p, 0) / n:.1%}" for p, n in self.seen.items() if n]
        return " | ".join(parts)


@dataclass(frozen=True)
class RunPlan:
    items: Sequence[EvalItem]
    presets: Sequence[str]
    stores: Mapping[str, ResultStore]
    runs: int = 1
    seed: int = 0
    concurrency: int = 1
    options: RunOptions = field(default_factory=RunOptions)


async def _one(client: ChatClient, item: EvalItem, preset: str, run: int, plan: RunPlan) -> ItemRecord:
    seed = plan.seed + run
    started = time.monotonic()
    try:
        record = await item.evaluate(client, preset, seed, plan.options)
    except Exception as exc:  # one broken item must not end the run; it is recorded as failed
        record = ItemRecord(
            suite=item.suite,
            category=item.category,
            item_id=item.item_id,
            preset=preset,
            error=f"{type(exc).__name__}: {exc}"[:1000],
            error_type="harness_error",
        )
    record.run, record.seed = run, seed
    record.latency_s = round(time.monotonic() - started, 3)
    record.model, record.server = client.model, client.kind
    return record


async def run_plan(client: ChatClient, plan: RunPlan, progress: Progress | None = None) -> None:
    """Evaluate everything in ``plan`` that its stores do not hold yet."""
    progress = progress or Progress()
    progress.total = len(plan.items) * plan.runs * len(plan.presets)
    units: list[tuple[EvalItem, int]] = []
    for item in plan.items:
        for run in range(plan.runs):
            pending = False
            for preset in plan.presets:
                done = plan.stores[preset].done((item.category, item.item_id, preset, run))
                if done is not None:
                    progress.add(done)
                else:
                    pending = True
            if pending:
                units.append((item, run))
    gate = asyncio.Semaphore(max(1, plan.concurrency))

    async def unit(index: int, item: EvalItem, run: int) -> None:
        shift = index % len(plan.presets)  # rotate who goes first: the prefix cache favours the later ones
        order = [*plan.presets[shift:], *plan.presets[:shift]]
        async with gate:
            for preset in order:
                store = plan.stores[preset]
                if store.done((item.category, item.item_id, preset, run)) is not None:
                    continue
                record = await _one(client, item, preset, run, plan)
                store.add(record)
                progress.add(record)

    await asyncio.gather(*(unit(i, item, run) for i, (item, run) in enumerate(units)))
