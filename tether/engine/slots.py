"""The records the scheduler keeps per waiting request, per running engine thread and per lease.

Kept apart from :mod:`tether.engine.scheduler`, which holds the policy (priorities, prefix-aware
slot choice, preemption, leases); these are only its bookkeeping types.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field

from tether.engine.base import Engine, GenerationEvent

__all__ = ["PREEMPTED", "SENTINEL_ERROR", "Lease", "Run", "Waiter", "close_generation"]


@dataclass(order=True)
class Waiter:
    priority: int
    seq: int
    prompt: Sequence[int] = field(compare=False)
    future: asyncio.Future[int] = field(compare=False)


@dataclass(eq=False)
class Run:
    """One engine thread on one slot. ``preempt`` asks it to stop at a token boundary; ``cancel`` to
    stop at once. The thread hands the slot back itself when its consumer has gone (``orphaned``),
    so a consumer that is cancelled or never closed cannot keep a slot."""

    slot: int
    priority: int
    seq: int
    preempt: threading.Event = field(default_factory=threading.Event)
    cancel: threading.Event = field(default_factory=threading.Event)
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    orphaned: bool = False
    thread: threading.Thread | None = None
    request_id: str = ""  # the request it serves (structlog's bound ``request_id``), for the dashboard


@dataclass(frozen=True)
class Lease:
    """A slot held by work its caller runs itself (``Scheduler.lease``); ``cancel`` is set at shutdown."""

    slot: int
    engine: Engine
    cancel: threading.Event


SENTINEL_ERROR = object()  # (SENTINEL_ERROR, exc): the engine thread failed
PREEMPTED = object()  # the engine thread stopped for a preemption


def close_generation(gen: Iterator[GenerationEvent]) -> None:
    """Close an engine's generator (a plain iterator has nothing to close)."""
    if isinstance(gen, Generator):
        gen.close()
