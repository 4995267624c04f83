"""The Redis session backend against a real, throwaway redis-server: round trips between two stores
(two replicas), lock contention, the sliding TTL as key expiry, and its errors."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from workflow_support import edit_workflow

from tests.support.redis_server import redis_server
from tests.support.socket_server import free_port
from tether.calls import ToolCall
from tether.chat import Message
from tether.config import Settings
from tether.config_file import resolve
from tether.errors import ConfigError, SessionStoreUnavailableError
from tether.workflows.session_redis import LOCK_PREFIX, PREFIX, RedisSessionBackend, redacted_url
from tether.workflows.sessions import SessionNotFoundError, SessionStore, open_session_store

WF = edit_workflow()
USER = Message("user", "Fix a.txt")


def done(name: str, cid: str, **args: Any) -> list[Message]:
    return [
        Message("assistant", "", (ToolCall(name, args, cid),)),
        Message("tool", "ok", tool_call_id=cid, name=name),
    ]


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with redis_server(tmp_path / "redis") as url:
        yield url


@pytest.fixture
async def replicas(redis_url: str) -> AsyncIterator[tuple[SessionStore, SessionStore]]:
    """Two stores on one Redis, each with its own connection pool, like two tether processes."""
    stores = tuple(open_session_store(redis_url, [WF], ttl_s=60) for _ in range(2))
    yield stores[0], stores[1]
    for store in stores:
        await store.close()


async def test_progress_made_through_one_store_is_enforced_by_the_other(
    replicas: tuple[SessionStore, SessionStore], redis_url: str
) -> None:
    a, b = replicas
    await a.create("fix_bug", "s1", steer="next_step")
    early = await b.check(await b.observe("s1", [USER]), [ToolCall("submit", {"summary": "x"}, "c9")])
    assert early.blocked[0].tier == 1
    await a.observe("s1", [USER, *done("run_tests", "c1")])
    on_b = await b.observe("s1", [USER])  # the client trimmed its history: progress is in Redis
    assert on_b.state.pending_steps() == () and on_b.steer == "next_step"
    assert (await b.check(on_b, [ToolCall("submit", {"summary": "x"}, "c2")])).ok
    blocked = await a.check(
        await a.observe("s1", [USER]), [ToolCall("edit_file", {"path": "a.txt", "text": "x"}, "c3")]
    )
    assert blocked.blocked[0].tier == 1 and (await b.get("s1")).state.violations == 2  # type: ignore[union-attr]
    described = await b.describe("s1")
    assert described["state"]["calls"] == 1 and 59 < described["expires_in_s"] <= 60
    assert await b.count() == 1 and await a.drop("s1") and await b.get("s1") is None
    with pytest.raises(SessionNotFoundError):
        await b.observe("s1", [USER])
    lazy = await b.observe("s2", [USER], workflow="fix_bug")  # X-Tether-Workflow starts it
    assert (await a.get("s2")).workflow is WF and lazy.id == "s2"  # type: ignore[union-attr]
    raw = redis.Redis.from_url(redis_url)
    try:
        assert b'"workflow":"fix_bug"' in raw.get(PREFIX + "s2") and not raw.keys(LOCK_PREFIX + "*")
    finally:
        raw.close()


async def test_concurrent_updates_of_one_session_from_two_stores_all_land(
    replicas: tuple[SessionStore, SessionStore],
) -> None:
    a, b = replicas
    await a.create("fix_bug", "s1")
    # Each request brings one new tool result; without the lock, interleaved load/save pairs would
    # overwrite each other and lose most of them.
    updates = [
        (a if i % 2 else b).observe("s1", [USER, *done("read_file", f"c{i}", path=f"{i}.txt")])
        for i in range(24)
    ]
    await asyncio.gather(*updates)
    state = (await a.get("s1")).state  # type: ignore[union-attr]
    assert state.calls == 24 and len(state.succeeded_with("read_file")) == 24


async def test_a_session_locked_too_long_is_a_503(redis_url: str) -> None:
    backend = RedisSessionBackend.connect(redis_url, ttl_s=60, lock_wait_s=0.2)
    store = SessionStore([WF], backend=backend)
    try:
        await store.create("fix_bug", "s1")
        async with backend.lock("s1"):  # another request holds it
            with pytest.raises(SessionStoreUnavailableError, match="stayed locked") as err:
                await store.observe("s1", [USER])
        assert err.value.status == 503 and err.value.retryable
        await store.observe("s1", [USER])  # released: fine again
    finally:
        await store.close()


async def test_sessions_expire_by_key_expiry_and_each_use_slides_it(redis_url: str) -> None:
    store = open_session_store(redis_url, [WF], ttl_s=0.6)
    raw = redis.Redis.from_url(redis_url)
    try:
        await store.create("fix_bug", "s1")
        assert 0 < raw.pttl(PREFIX + "s1") <= 600
        for _ in range(3):  # 1.2 s in all, longer than the TTL, but never idle for 0.6 s
            await asyncio.sleep(0.4)
            assert await store.get("s1") is not None
        await asyncio.sleep(0.8)
        assert await store.get("s1") is None and raw.exists(PREFIX + "s1") == 0
    finally:
        raw.close()
        await store.close()


async def test_an_unreadable_record_counts_as_expired(
    replicas: tuple[SessionStore, SessionStore], redis_url: str
) -> None:
    a, _ = replicas
    await a.create("fix_bug", "s1")
    raw = redis.Redis.from_url(redis_url)
    try:
        raw.set(PREFIX + "s1", '{"v": 99}')  # a record written by another version
    finally:
        raw.close()
    assert await a.get("s1") is None


def test_unreachable_redis_at_start_up_is_a_config_error() -> None:
    url = f"redis://:secret@127.0.0.1:{free_port()}/0"
    with pytest.raises(
        ConfigError, match=r"--session-store redis://127\.0\.0\.1:\d+/0: Redis does not answer"
    ):
        open_session_store(url, [WF])
    assert redacted_url(url).endswith("/0") and "secret" not in redacted_url(url)


async def test_redis_going_away_during_a_request_is_a_503(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis") as url:
        store = open_session_store(url, [WF])
        await store.create("fix_bug", "s1")
    try:  # the server is gone now
        with pytest.raises(
            SessionStoreUnavailableError, match=r"session store \(redis://127\.0\.0\.1:\d+/0\) failed"
        ) as err:
            await store.observe("s1", [USER])
        assert err.value.status == 503 and err.value.code == "session_store_unavailable"
    finally:
        await store.close()


def test_missing_redis_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # import redis -> ImportError
    with pytest.raises(ConfigError, match=r"pip install 'tether\[redis\]'"):
        open_session_store("redis://127.0.0.1:1/0", [WF])


def test_session_store_setting_is_memory_or_a_redis_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert Settings().to_config().session_store == "memory"
    assert Settings(session_store="redis://r:6379/1").to_config().session_store == "redis://r:6379/1"
    monkeypatch.setenv("TETHER_SESSION_STORE", "rediss://r:6380/0")
    assert Settings().to_config().session_store == "rediss://r:6380/0"
    with pytest.raises(ValueError, match="must be 'memory' or a Redis URL"):
        Settings(session_store="memcached://m")
    monkeypatch.delenv("TETHER_SESSION_STORE")
    toml = tmp_path / "tether.toml"
    toml.write_text('session-store = "redis://cache:6379/2"\n')
    resolved = resolve({}, config_file=toml)
    assert resolved.settings.to_config().session_store == "redis://cache:6379/2"
    assert resolved.sources["session_store"] == f"file:{toml}"
