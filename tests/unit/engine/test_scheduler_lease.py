"""``Scheduler.lease``: a slot held by work on the event loop (a chat backend's request), queued,
limited, timed out and counted exactly as ``generate`` is."""

from __future__ import annotations

import asyncio

import pytest

from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.errors import QueueFullError, QueueTimeoutError, ShuttingDownError


async def test_a_second_lease_waits_for_the_first_and_both_are_counted() -> None:
    scheduler = Scheduler([ScriptedEngine()])
    order: list[str] = []

    async def hold(name: str, release: asyncio.Event) -> None:
        async with scheduler.lease() as lease:
            order.append(f"{name}@{lease.slot}")
            await release.wait()

    first_done, second_done = asyncio.Event(), asyncio.Event()
    first = asyncio.create_task(hold("first", first_done))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(hold("second", second_done))
    await asyncio.sleep(0.01)
    assert order == ["first@0"] and scheduler.snapshot()["queue_depth"] == 1
    first_done.set()
    second_done.set()
    await asyncio.gather(first, second)
    snap = scheduler.snapshot()
    assert order == ["first@0", "second@0"]
    assert (snap["started"], snap["completed"], snap["cancelled"], snap["busy_slots"]) == (2, 2, 0, 0)


async def test_a_full_queue_and_the_queue_timeout_refuse_as_generate_does() -> None:
    scheduler = Scheduler([ScriptedEngine()], queue_limit=0)
    async with scheduler.lease():
        with pytest.raises(QueueFullError):
            async with scheduler.lease():
                pass
    timed = Scheduler([ScriptedEngine()], queue_timeout_s=0.05)
    async with timed.lease():
        with pytest.raises(QueueTimeoutError):
            async with timed.lease():
                pass
    assert scheduler.snapshot()["rejected"] == 1 and timed.snapshot()["timed_out"] == 1


async def test_leaving_by_an_error_frees_the_slot_and_counts_as_cancelled() -> None:
    scheduler = Scheduler([ScriptedEngine()])
    with pytest.raises(RuntimeError):
        async with scheduler.lease():
            raise RuntimeError("the backend failed")
    snap = scheduler.snapshot()
    assert (snap["busy_slots"], snap["cancelled"], snap["completed"]) == (0, 1, 1)
    async with scheduler.lease() as again:
        assert again.slot == 0


async def test_shutdown_flags_a_running_lease_and_refuses_new_ones() -> None:
    scheduler = Scheduler([ScriptedEngine()])
    async with scheduler.lease() as lease:
        scheduler.shutdown()
        assert lease.cancel.is_set()
    with pytest.raises(ShuttingDownError):
        async with scheduler.lease():
            pass
