"""How full each bounded cache is: ``/metrics`` shows every cache beside its limit.

A leak of a few kilobytes per request is invisible for minutes and fatal in a week; the soak
benchmark (``benchmarks/bench_soak.py``, docs/reliability.md) watches these figures over hours.
Objects that hold a cache implement :class:`ReportsCaches`; the module-level ``lru_cache``
functions are read with :func:`lru_fill`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, runtime_checkable

__all__ = ["CacheFill", "ReportsCaches", "lru_fill"]


class CacheFill(NamedTuple):
    entries: int
    capacity: int  # the documented bound the entries may never pass


@runtime_checkable
class ReportsCaches(Protocol):
    def cache_fill(self) -> dict[str, CacheFill]:
        """Each cache this object holds, by name."""
        ...


def lru_fill(function: Callable[..., Any]) -> CacheFill:
    """A ``functools.lru_cache`` function's fill."""
    info = function.cache_info()  # type: ignore[attr-defined]
    return CacheFill(int(info.currsize), int(info.maxsize or 0))
