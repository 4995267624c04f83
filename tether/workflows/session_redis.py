"""Workflow sessions in Redis, so several tether replicas behind one load balancer enforce one session.

``tether serve --session-store redis://host:6379/0``. Each session is one JSON string
(``Session.to_dict``) at ``tether:session:{id}`` whose key expiry is the sliding TTL: every load
(``GETEX … PX ttl``) and every save (``SET … PX ttl``) starts it again, so Redis itself forgets
idle sessions and no replica sweeps. There is no ``max_sessions`` cap here (that is the memory
store's LRU); bound Redis with its own ``maxmemory`` and ``maxmemory-policy volatile-lru``.

Concurrency: a request loads its session, folds its history in (or checks the reply's calls)
and saves it; two replicas may do that for one session at the same moment. Each such
read-modify-write therefore runs under a per-session lock: ``SET tether:session-lock:{id}
TOKEN NX PX lock_ttl``, released by a Lua script that deletes the key only while it still holds
this request's random token (redis-py's ``Lock``), so a late release never frees someone else's
lock. A lock rather than WATCH/MULTI optimistic retries because the critical section is Python
work between the read and the write (decoding the record, folding a long history, rebuilding an
inline workflow): under contention an optimistic transaction redoes all of it and can starve,
while lock waiters just poll one key for the few milliseconds it is held. The lock covers only
those steps, never a generation, so requests of one session still generate in parallel. Its
expiry frees the session of a replica that died holding it; a waiter gives up after
``lock_wait_s`` with a 503 (``SessionStoreUnavailableError``), as does every Redis failure during
a request: a reply is never sent without its workflow enforced. Unreachable at start-up:
``ConfigError``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import structlog

from tether.errors import ConfigError, SessionStoreUnavailableError
from tether.workflows.session_backends import Session
from tether.workflows.spec import Workflow

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["LOCK_PREFIX", "PREFIX", "RedisSessionBackend", "redacted_url"]

log = structlog.get_logger(__name__)

PREFIX = "tether:session:"
LOCK_PREFIX = "tether:session-lock:"
_T = TypeVar("_T")
_INSTALL = "pip install 'tether[redis]'"


def redacted_url(url: str) -> str:
    """``redis://host:port/db`` without user or password, for messages and logs."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "redis://(unparsable URL)"
    return f"{parts.scheme}://{host}{port}{parts.path}"


class RedisSessionBackend:
    """Sessions as JSON strings in Redis with a sliding key expiry; see the module docstring."""

    clock = staticmethod(time.time)  # the replicas share wall-clock time, not a monotonic clock

    def __init__(
        self,
        client: Redis,
        *,
        ttl_s: float,
        label: str = "redis",
        lock_ttl_s: float = 10.0,
        lock_wait_s: float = 5.0,
    ) -> None:
        self._client = client
        self._ttl_ms = max(1, round(ttl_s * 1000))
        self.label = label
        self.lock_ttl_s = lock_ttl_s
        self.lock_wait_s = lock_wait_s

    @classmethod
    def connect(cls, url: str, *, ttl_s: float, **options: Any) -> RedisSessionBackend:
        """Check that Redis at ``url`` answers (a blocking PING: start-up only), then build the
        async client. ``ConfigError`` when the package is missing or Redis does not answer."""
        label = redacted_url(url)
        try:
            import redis
            import redis.asyncio
            from redis.asyncio.retry import Retry as AsyncRetry
            from redis.backoff import ExponentialBackoff
            from redis.retry import Retry
        except ImportError:
            raise ConfigError(f"--session-store {label} needs the redis package: {_INSTALL}") from None
        # A blip is retried twice within ~0.1 s; Redis down is a 503 at once, not after seconds of
        # redis-py's default backoff.
        backoff = ExponentialBackoff(cap=0.2, base=0.02)
        try:
            probe = redis.Redis.from_url(
                url, socket_connect_timeout=3.0, socket_timeout=3.0, retry=Retry(backoff, 2)
            )
            try:
                probe.ping()
            finally:
                probe.close()
        except ValueError as exc:
            raise ConfigError(f"--session-store {label}: invalid Redis URL ({exc})") from None
        except redis.RedisError as exc:
            raise ConfigError(f"--session-store {label}: Redis does not answer ({exc})") from None
        client = redis.asyncio.Redis.from_url(
            url, socket_connect_timeout=3.0, socket_timeout=3.0, retry=AsyncRetry(backoff, 2)
        )
        log.info("session_store_connected", store=label)
        return cls(client, ttl_s=ttl_s, label=label, **options)

    async def _call(self, pending: Awaitable[_T]) -> _T:
        from redis import RedisError

        try:
            return await pending
        except RedisError as exc:
            log.warning("session_store_failed", store=self.label, error=str(exc))
            raise SessionStoreUnavailableError(
                f"the workflow session store ({self.label}) failed: {exc}"
            ) from None

    @asynccontextmanager
    async def lock(self, session_id: str) -> AsyncIterator[None]:
        from redis import RedisError

        held = self._client.lock(
            LOCK_PREFIX + session_id,
            timeout=self.lock_ttl_s,
            sleep=0.005,
            blocking_timeout=self.lock_wait_s,
            thread_local=False,
        )
        if not await self._call(held.acquire()):
            raise SessionStoreUnavailableError(
                f"session {session_id!r} stayed locked by another request for {self.lock_wait_s:g} s"
            )
        try:
            yield
        finally:
            try:
                await held.release()
            except RedisError as exc:  # expired meanwhile (LockNotOwnedError) or Redis went away
                log.warning("session_lock_release_failed", session=session_id, error=str(exc))

    async def load(self, session_id: str, workflows: Mapping[str, Workflow]) -> Session | None:
        raw = await self._call(self._client.getex(PREFIX + session_id, px=self._ttl_ms))
        if raw is None:
            return None
        try:
            session = Session.from_dict(json.loads(raw), workflows)
        except (ValueError, KeyError, TypeError, ConfigError) as exc:
            # Unreadable (another version, a workflow whose steps changed): as good as expired.
            log.warning("session_record_invalid", session=session_id, error=str(exc))
            return None
        session.last_used = self.clock()
        return session

    async def save(self, session: Session, workflows: Mapping[str, Workflow]) -> None:
        text = json.dumps(session.to_dict(workflows), separators=(",", ":"), ensure_ascii=False)
        await self._call(self._client.set(PREFIX + session.id, text, px=self._ttl_ms))

    async def delete(self, session_id: str) -> bool:
        return bool(await self._call(self._client.delete(PREFIX + session_id)))

    async def count(self) -> int:
        """Live sessions: a SCAN over the session keys, O(keys in the database)."""

        async def scan() -> int:
            return sum([1 async for _ in self._client.scan_iter(match=PREFIX + "*", count=500)])

        return await self._call(scan())

    async def close(self) -> None:
        await self._client.aclose()
