"""run_plan: item-major order, resume from the stores, failures recorded not raised."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tether.evals.client import ChatClient
from tether.evals.records import ItemRecord, ResultStore
from tether.evals.runner import Progress, RunPlan, run_plan
from tether.evals.suites import RunOptions, load_items


@dataclass
class FakeItem:
    item_id: str
    log: list[tuple[str, str, int]] = field(default_factory=list)
    suite: str = "fake"
    category: str = "cat"
    boom: bool = False

    async def evaluate(self, client: ChatClient, preset: str, seed: int, options: RunOptions) -> ItemRecord:
        self.log.append((self.item_id, preset, seed))
        if self.boom:
            raise RuntimeError("backend exploded")
        return ItemRecord(self.suite, self.category, self.item_id, preset, correct=preset == "full")


def _client() -> ChatClient:
    http = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(500)))
    return ChatClient(http, "m", "tether")


def _stores(tmp_path: Path) -> dict[str, ResultStore]:
    return {p: ResultStore(tmp_path / f"{p}.jsonl") for p in ("bare", "full")}


async def test_item_major_order_resume_and_progress(tmp_path: Path) -> None:
    log: list[Any] = []
    items = [FakeItem("a", log), FakeItem("b", log)]
    progress = Progress()
    seen: list[str] = []
    progress.on_record = lambda p, r: seen.append(p.accuracy_line())
    plan = RunPlan(items, ["bare", "full"], _stores(tmp_path), runs=2, seed=10)
    await run_plan(_client(), plan, progress)
    # Item-major; the preset that goes first rotates from unit to unit.
    assert log == [
        ("a", "bare", 10), ("a", "full", 10), ("a", "full", 11), ("a", "bare", 11),
        ("b", "bare", 10), ("b", "full", 10), ("b", "full", 11), ("b", "bare", 11),
    ]  # fmt: skip
    assert progress.done == progress.total == 8
    assert seen[-1] == "bare 0.0% | full 100.0%"
    log.clear()
    again = Progress()
    await run_plan(_client(), RunPlan(items, ["bare", "full"], _stores(tmp_path), runs=2, seed=10), again)
    assert log == [] and again.done == 8  # everything was already in the stores
    records = _stores(tmp_path)["full"].records
    assert {(r.item_id, r.run, r.seed) for r in records} == {
        ("a", 0, 10),
        ("a", 1, 11),
        ("b", 0, 10),
        ("b", 1, 11),
    }
    assert all(r.model == "m" and r.server == "tether" for r in records)


async def test_a_crashing_item_is_recorded_as_failed(tmp_path: Path) -> None:
    items = [FakeItem("a", boom=True), FakeItem("b")]
    stores = _stores(tmp_path)
    await run_plan(_client(), RunPlan(items, ["bare", "full"], stores, concurrency=2))
    bad = stores["full"].done(("cat", "a", "full", 0))
    assert bad is not None and not bad.correct and bad.error_type == "harness_error"
    assert "backend exploded" in bad.error
    assert stores["full"].done(("cat", "b", "full", 0)) is not None


def test_scenario_items_interleave_tiers_and_subset() -> None:
    items = load_items("scenarios:plumbing,recovery", limit=2, seed=1)
    assert [i.category for i in items] == ["plumbing", "recovery", "plumbing", "recovery"]
    assert [i.item_id for i in items] == [
        i.item_id for i in load_items("scenarios:plumbing,recovery", limit=2, seed=1)
    ]
    assert len(load_items("scenarios")) >= 30
