"""The prefix cache: KV states of long prompts kept in RAM and on disk, shared by every slot.

An engine asks :meth:`PrefixCache.lookup` before evaluating a prompt: the entry holding the most
whole blocks of it (when that beats what the engine's own sequence holds by a block at least)
comes back loaded, and the engine restores it into its sequence and evaluates only the rest.
After a generation the engine offers what its sequence holds (:meth:`wants`, then :meth:`put`):
the RAM tier takes it at once (LRU, bounded in bytes); the disk tier writes it on a thread of
its own, so the request that produced it never waits for the disk. A write the disk refuses
(full, read-only) turns disk writes off with one warning; the RAM tier goes on.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import structlog

from tether.engine.prefix.disk import SUFFIX, DiskTier
from tether.engine.prefix.entries import ChainIndex, Entry
from tether.engine.prefix.keys import BLOCK, CacheTag, block_chain

__all__ = ["Hit", "PrefixCache", "PrefixCacheStats"]

log = structlog.get_logger(__name__)

Tier = Literal["ram", "disk"]

_MAX_PENDING = 2 << 30  # bytes of states queued for the disk at most


@dataclass(frozen=True)
class Hit:
    entry: Entry
    tier: Tier
    load_s: float  # reading (and checking) it; restoring it into a sequence is the engine's


@dataclass
class PrefixCacheStats:
    hits: dict[Tier, int] = field(default_factory=lambda: {"ram": 0, "disk": 0})
    misses: int = 0
    stored: int = 0
    save_s: float = 0.0  # copying states out of the engine (the only part a request waits for)
    restored_tokens: int = 0
    restore_s: float = 0.0
    restore_failed: int = 0
    disk_writes: int = 0
    disk_write_s: float = 0.0
    disk_errors: int = 0


class PrefixCache:
    """Cached prefixes of one :class:`CacheTag`: ``ram_bytes`` in memory, ``disk_bytes`` under ``disk_dir``."""

    def __init__(
        self,
        tag: CacheTag,
        *,
        ram_bytes: int,
        disk_dir: Path | None = None,
        disk_bytes: int = 0,
        min_tokens: int = 2 * BLOCK,
    ) -> None:
        self.tag = tag
        self.salt = tag.digest()
        self.ram_limit = ram_bytes
        self.min_tokens = max(min_tokens, BLOCK)
        self.stats = PrefixCacheStats()
        self._lock = threading.Lock()  # the RAM tier, the stats
        self._disk_lock = threading.Lock()  # the disk tier (the writer thread and lookups)
        self._ram: OrderedDict[str, Entry] = OrderedDict()
        self._ram_index = ChainIndex()
        self._ram_used = 0
        self.disk = (
            DiskTier(disk_dir, limit=disk_bytes, salt=self.salt) if disk_dir and disk_bytes > 0 else None
        )
        self._disk_writable = self.disk is not None
        self._pending: queue.SimpleQueue[tuple[str, Entry, list[bytes]] | None] = queue.SimpleQueue()
        self._pending_bytes = 0
        self._writer: threading.Thread | None = None

    # -- lookups ----------------------------------------------------------------------------------

    def lookup(self, prompt: Sequence[int], *, have: int) -> Hit | None:
        """The entry sharing the most whole blocks with ``prompt``, loaded, if it covers at least a
        block more than the ``have`` tokens the engine's sequence already holds; else None."""
        if len(prompt) < self.min_tokens:
            return None
        chain = block_chain(prompt[: len(prompt) - 1], self.salt)  # the last token is always evaluated
        if have >= len(chain) * BLOCK:
            return None  # the sequence holds every whole block already: nothing to look for
        need = -(-(have + BLOCK) // BLOCK)  # whole blocks covering a block more than it has
        started = time.perf_counter()
        with self._lock:
            ram = self._ram_index.longest(chain)
            if ram is not None and ram[0] >= need:
                self._ram.move_to_end(ram[1])
                self.stats.hits["ram"] += 1
                return Hit(self._ram[ram[1]], "ram", time.perf_counter() - started)
        entry = self._disk_lookup(chain, need)
        with self._lock:
            if entry is None:
                self.stats.misses += 1
                return None
            self.stats.hits["disk"] += 1
            own = block_chain(entry.tokens, self.salt)
            self._ram_insert(own[-1].hex() + SUFFIX, entry, own)
        return Hit(entry, "disk", time.perf_counter() - started)

    def _disk_lookup(self, chain: list[bytes], need: int) -> Entry | None:
        if self.disk is None:
            return None
        with self._disk_lock:
            found = self.disk.longest(chain)
            if found is None or found[0] < need:
                return None
            return self.disk.load(found[1])

    def restored(self, tokens: int, seconds: float) -> None:
        """An engine restored ``tokens`` of a hit in ``seconds`` (loading included)."""
        with self._lock:
            self.stats.restored_tokens += tokens
            self.stats.restore_s += seconds

    def restore_failed(self) -> None:
        with self._lock:
            self.stats.restore_failed += 1

    # -- storing ----------------------------------------------------------------------------------

    def wants(self, tokens: Sequence[int] | np.ndarray) -> list[bytes] | None:
        """The chain to store ``tokens`` under when they are long enough and no tier has all their
        whole blocks yet; else None (the caller then skips copying the state)."""
        if len(tokens) < self.min_tokens:
            return None
        chain = block_chain(tokens, self.salt)
        with self._lock:
            ram = self._ram_index.longest(chain)
            if ram is not None and ram[0] == len(chain):
                return None
        if self._disk_writable and self.disk is not None:
            with self._disk_lock:
                disk = self.disk.index.longest(chain)
            if disk is not None and disk[0] == len(chain):
                return None
        return chain

    def put(
        self, tokens: Sequence[int] | np.ndarray, state: bytearray, chain: list[bytes], *, save_s: float = 0.0
    ) -> None:
        """Keep ``state`` (the cells of ``tokens``, copied out in ``save_s``) in RAM and queue it for the disk."""
        entry = Entry(np.array(tokens, dtype=np.int32), state)
        name = chain[-1].hex() + SUFFIX
        with self._lock:
            self.stats.stored += 1
            self.stats.save_s += save_s
            self._ram_insert(name, entry, chain)
            if not self._disk_writable or entry.nbytes > self._disk_limit:
                return
            if self._pending_bytes and self._pending_bytes + entry.nbytes > _MAX_PENDING:
                return  # the disk is behind: this one stays in RAM only
            self._pending_bytes += entry.nbytes
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_loop, name="tether-prefix-cache", daemon=True
                )
                self._writer.start()
        self._pending.put((name, entry, chain))

    @property
    def _disk_limit(self) -> int:
        return self.disk.limit if self.disk is not None else 0

    def _ram_insert(self, name: str, entry: Entry, chain: list[bytes]) -> None:
        if entry.nbytes > self.ram_limit:
            return
        old = self._ram.pop(name, None)
        if old is not None:
            self._ram_used -= old.nbytes
        self._ram[name] = entry
        self._ram_index.add(name, chain)
        self._ram_used += entry.nbytes
        while self._ram_used > self.ram_limit:
            gone, dropped = self._ram.popitem(last=False)
            self._ram_index.remove(gone)
            self._ram_used -= dropped.nbytes

    def _write_loop(self) -> None:
        while (item := self._pending.get()) is not None:
            name, entry, chain = item
            started = time.perf_counter()
            try:
                if self._disk_writable and self.disk is not None:
                    with self._disk_lock:
                        self.disk.store(name, entry, chain)
                    with self._lock:
                        self.stats.disk_writes += 1
                        self.stats.disk_write_s += time.perf_counter() - started
            except OSError as exc:
                with self._lock:
                    self.stats.disk_errors += 1
                    first = self._disk_writable
                    self._disk_writable = False
                if first:
                    log.warning(
                        "prefix_cache_disk_disabled",
                        dir=str(self.disk.root) if self.disk else None,
                        error=str(exc),
                        hint="the RAM tier goes on; free space or fix the directory and restart",
                    )
            finally:
                with self._lock:
                    self._pending_bytes -= entry.nbytes

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every queued disk write is done (tests, shutdown); False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._pending_bytes <= 0:
                    return True
            time.sleep(0.01)
        return False

    def close(self, timeout: float = 10.0) -> None:
        """Finish the queued disk writes (bounded) and stop the writer."""
        self.flush(timeout)
        if self._writer is not None:
            self._pending.put(None)
            self._writer.join(timeout=1.0)
            self._writer = None

    # -- reporting --------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """What ``/health`` and ``/metrics`` show."""
        with self._lock:
            s = self.stats
            body: dict[str, Any] = {
                "block_tokens": BLOCK,
                "ram": {
                    "entries": len(self._ram),
                    "bytes": self._ram_used,
                    "limit_bytes": self.ram_limit,
                    "hits": s.hits["ram"],
                },
                "misses": s.misses,
                "stored": s.stored,
                "save_s": round(s.save_s, 4),
                "restored_tokens": s.restored_tokens,
                "restore_s": round(s.restore_s, 4),
                "restore_failed": s.restore_failed,
            }
            disk_hits = s.hits["disk"]
            writes, write_s, errors = s.disk_writes, s.disk_write_s, s.disk_errors
        if self.disk is not None:
            with self._disk_lock:
                entries, used = len(self.disk.index), self.disk.used
            body["disk"] = {
                "dir": str(self.disk.root),
                "entries": entries,
                "bytes": used,
                "limit_bytes": self.disk.limit,
                "hits": disk_hits,
                "writes": writes,
                "write_s": round(write_s, 4),
                "errors": errors,
                "writable": self._disk_writable,
            }
        return body
