"""What a workflow session is, and where it is kept: the backend interface and the in-memory backend.

A ``Session`` is one client conversation under a workflow: the workflow, its ``WorkflowState``,
the tool-call ids already folded in, the steering mode and two timestamps. ``SessionStore``
(:mod:`tether.workflows.sessions`) holds every rule about sessions; a ``SessionBackend`` only
keeps them: ``load`` (which slides the TTL), ``save``, ``delete``, ``count`` and a per-session
``lock`` around each read-modify-write. Two backends implement it: ``MemorySessionBackend``
here (the default: live objects in this process, sliding TTL, LRU cap) and
:class:`tether.workflows.session_redis.RedisSessionBackend` (shared by several replicas).

``Session.to_dict`` / ``Session.from_dict`` are the explicit JSON form a shared backend stores:
a registered workflow by name, any other one (an inline definition) in full.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import structlog

from tether.caches import CacheFill
from tether.errors import SessionStoreUnavailableError
from tether.workflows.loader import workflow_from_mapping
from tether.workflows.spec import Workflow
from tether.workflows.state import WorkflowState

__all__ = ["RECORD_VERSION", "MemorySessionBackend", "Session", "SessionBackend", "SessionSteer"]

log = structlog.get_logger(__name__)

SessionSteer = Literal["off", "next_step"]
RECORD_VERSION = 1


@dataclass
class Session:
    """One client conversation under a workflow."""

    id: str
    workflow: Workflow
    state: WorkflowState
    created: float
    last_used: float
    seen: OrderedDict[str, None] = field(default_factory=OrderedDict)
    steer: SessionSteer = "off"

    def describe(self, ttl_s: float, now: float) -> dict[str, Any]:
        return {
            "session_id": self.id,
            "workflow": self.workflow.name,
            "steer": self.steer,
            "expires_in_s": max(0.0, round(self.last_used + ttl_s - now, 3)),
            "state": self.state.snapshot(),
        }

    def adopt(self, other: Session) -> None:
        """Take ``other``'s contents (a fresher copy of this session loaded from the backend)."""
        if other is not self:
            self.__dict__.update(other.__dict__)

    def to_dict(self, registered: Mapping[str, Workflow]) -> dict[str, Any]:
        """JSON-ready; the workflow by name when ``registered`` holds this very workflow, else in full."""
        out: dict[str, Any] = {
            "v": RECORD_VERSION,
            "id": self.id,
            "workflow": self.workflow.name,
            "state": self.state.to_dict(),
            "created": self.created,
            "last_used": self.last_used,
            "seen": list(self.seen),
            "steer": self.steer,
        }
        known = registered.get(self.workflow.name)
        if known is not self.workflow and known != self.workflow:
            out["definition"] = self.workflow.to_dict()
        return out

    @staticmethod
    def from_dict(data: Mapping[str, Any], registered: Mapping[str, Workflow]) -> Session:
        """The inverse of ``to_dict``. ``ValueError`` (or ``KeyError``/``TypeError``) for a record this
        version cannot read; ``SessionStoreUnavailableError`` when it names a workflow this process
        does not have registered (replicas must share their ``--workflow`` files)."""
        if data.get("v") != RECORD_VERSION:
            raise ValueError(f"session record version {data.get('v')!r}, expected {RECORD_VERSION}")
        name = str(data["workflow"])
        definition = data.get("definition")
        if definition is not None:
            workflow = _workflow_from_json(json.dumps(definition, sort_keys=True))
        else:
            found = registered.get(name)
            if found is None:
                raise SessionStoreUnavailableError(
                    f"session {data['id']!r} runs the registered workflow {name!r}, which this replica does "
                    "not have; start every replica with the same --workflow files"
                )
            workflow = found
        steer = data["steer"]
        if steer not in ("off", "next_step"):
            raise ValueError(f"unknown steer {steer!r}")
        return Session(
            id=str(data["id"]),
            workflow=workflow,
            state=WorkflowState.from_dict(workflow, data["state"]),
            created=float(data["created"]),
            last_used=float(data["last_used"]),
            seen=OrderedDict.fromkeys(str(s) for s in data["seen"]),
            steer=steer,
        )


@functools.lru_cache(maxsize=256)
def _workflow_from_json(text: str) -> Workflow:
    # Inline workflows are validated (pydantic, JSON Schema) once per definition, not once per request.
    return workflow_from_mapping(json.loads(text), source="stored workflow")


class SessionBackend(Protocol):
    """Where sessions are kept. ``clock`` is the time base of ``Session.created``/``last_used``."""

    clock: Callable[[], float]

    def lock(self, session_id: str) -> AbstractAsyncContextManager[None]:
        """Held around each load-update-save of one session (never across a generation)."""
        ...

    async def load(self, session_id: str, workflows: Mapping[str, Workflow]) -> Session | None:
        """The live session, its TTL slid and ``last_used`` set to now; None when unknown or expired."""
        ...

    async def save(self, session: Session, workflows: Mapping[str, Workflow]) -> None:
        """Create or overwrite ``session``; its TTL starts again."""
        ...

    async def delete(self, session_id: str) -> bool: ...

    async def count(self) -> int: ...

    async def close(self) -> None: ...


class MemorySessionBackend:
    """Sessions as live objects in this process: sliding TTL, at most ``max_sessions`` (LRU out first).

    Every method runs on the event loop without suspending, so a load-update-save never interleaves
    with another request's and ``lock`` can be a no-op.
    """

    def __init__(
        self, *, ttl_s: float, max_sessions: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def lock(self, session_id: str) -> AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()

    def cache_fill(self) -> dict[str, CacheFill]:
        return {"sessions": CacheFill(len(self._sessions), self.max_sessions)}

    def _expire(self) -> None:
        now = self.clock()
        for sid in [s.id for s in self._sessions.values() if now - s.last_used > self.ttl_s]:
            del self._sessions[sid]
            log.info("session_expired", session=sid)

    async def load(self, session_id: str, workflows: Mapping[str, Workflow]) -> Session | None:
        self._expire()
        session = self._sessions.get(session_id)
        if session is not None:
            session.last_used = self.clock()
            self._sessions.move_to_end(session_id)
        return session

    async def save(self, session: Session, workflows: Mapping[str, Workflow]) -> None:
        self._expire()
        self._sessions.pop(session.id, None)
        self._sessions[session.id] = session
        while len(self._sessions) > self.max_sessions:
            old, _ = self._sessions.popitem(last=False)
            log.info("session_evicted", session=old)

    async def delete(self, session_id: str) -> bool:
        return self._sessions.pop(session_id, None) is not None

    async def count(self) -> int:
        self._expire()
        return len(self._sessions)

    async def close(self) -> None:
        return None
