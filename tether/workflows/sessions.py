"""Workflow sessions: the state that lets the proxy enforce a workflow across stateless requests.

A client attaches a workflow to a session, either with ``POST /v1/tether/sessions``
(a registered workflow by name, or an inline definition) or lazily by sending the
headers ``X-Tether-Session: <id>`` and ``X-Tether-Workflow: <registered name>``.
Each request then carries ``X-Tether-Session``; the turn pipeline's ``SessionStage``
(:mod:`tether.workflows.stage`) folds the request's history (assistant tool calls + their
results) into the session's ``WorkflowState`` once, steers, and checks the model's new calls.

``SessionStore`` is the one place these rules live. Where sessions are kept is its backend
(:mod:`tether.workflows.session_backends`): in this process by default (sliding TTL,
``max_sessions`` LRU cap), or in Redis (``--session-store redis://…``,
:mod:`tether.workflows.session_redis`) so several replicas enforce the same session. The store's
methods that touch the backend are async; each read-modify-write (observe, check, create) runs
under the backend's per-session lock.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog

from tether.calls import ToolCall
from tether.chat import Message
from tether.errors import ConfigError, InvalidRequestError
from tether.guardrails.interventions import Intervention
from tether.turns.events import ChatJob
from tether.workflows.enforcement import Enforcement, check_calls, observe
from tether.workflows.session_backends import MemorySessionBackend, Session, SessionBackend, SessionSteer
from tether.workflows.spec import Workflow
from tether.workflows.state import WorkflowState

__all__ = [
    "REDIS_URL_SCHEMES",
    "SESSION_HEADER",
    "WORKFLOW_HEADER",
    "Session",
    "SessionNotFoundError",
    "SessionRef",
    "SessionSteer",
    "SessionStore",
    "open_session_store",
]

log = structlog.get_logger(__name__)

SESSION_HEADER = "X-Tether-Session"
REDIS_URL_SCHEMES = ("redis://", "rediss://", "unix://")  # --session-store values besides "memory"
WORKFLOW_HEADER = "X-Tether-Workflow"


class SessionNotFoundError(InvalidRequestError):
    """The session id is unknown or expired, and no workflow was named to start it."""

    status = 404
    code = "session_not_found"


@dataclass(frozen=True)
class SessionRef:
    """What a request's headers say: the session id and, to start it lazily, a registered workflow."""

    id: str
    workflow: str | None = None


class SessionStore:
    """Workflow sessions: registered workflows by name, and the rules (resolve, observe, steer,
    check) over a ``backend`` that keeps the sessions (in memory unless one is given)."""

    def __init__(
        self,
        workflows: Iterable[Workflow] = (),
        *,
        ttl_s: float = 3600.0,
        max_sessions: int = 1024,
        clock: Callable[[], float] = time.monotonic,
        backend: SessionBackend | None = None,
    ) -> None:
        if ttl_s <= 0 or max_sessions < 1:
            raise ConfigError("sessions: ttl_s must be > 0 and max_sessions >= 1")
        self.workflows: dict[str, Workflow] = {}
        for wf in workflows:
            self.register_workflow(wf)
        self.ttl_s = ttl_s
        self.backend: SessionBackend = backend or MemorySessionBackend(
            ttl_s=ttl_s, max_sessions=max_sessions, clock=clock
        )

    async def count(self) -> int:
        """Live sessions (the Redis backend scans its keys: for tests and diagnostics)."""
        return await self.backend.count()

    async def close(self) -> None:
        await self.backend.close()

    def register_workflow(self, workflow: Workflow) -> None:
        """Make ``workflow`` attachable by name (config or start-up code)."""
        self.workflows[workflow.name] = workflow

    def _registered(self, name: str) -> Workflow:
        found = self.workflows.get(name)
        if found is None:
            known = ", ".join(sorted(self.workflows)) or "none"
            raise InvalidRequestError(f"unknown workflow {name!r}; registered: {known}", param="workflow")
        return found

    def _new(self, workflow: Workflow, session_id: str, steer: SessionSteer) -> Session:
        now = self.backend.clock()
        return Session(session_id, workflow, WorkflowState(workflow), now, now, steer=steer)

    async def create(
        self, workflow: str | Workflow, session_id: str | None = None, *, steer: SessionSteer = "off"
    ) -> Session:
        """Attach ``workflow`` (a registered name or a ``Workflow``) to a new or reset session."""
        if isinstance(workflow, str):
            workflow = self._registered(workflow)
        sid = session_id or secrets.token_urlsafe(16)
        session = self._new(workflow, sid, steer)
        async with self.backend.lock(sid):
            await self.backend.save(session, self.workflows)
        log.info("session_created", session=sid, workflow=workflow.name, steer=steer)
        return session

    async def get(self, session_id: str) -> Session | None:
        """The live session (touching it), or None when unknown or expired."""
        return await self.backend.load(session_id, self.workflows)

    async def resolve(self, session_id: str, workflow: str | None = None) -> Session:
        """The session for a request's headers: existing, or created from ``X-Tether-Workflow``."""
        async with self.backend.lock(session_id):
            return await self._resolve(session_id, workflow)

    async def _resolve(self, session_id: str, workflow: str | None) -> Session:
        session = await self.backend.load(session_id, self.workflows)
        if session is not None:
            if workflow and workflow != session.workflow.name:
                raise InvalidRequestError(
                    f"session {session_id!r} runs workflow {session.workflow.name!r}, not {workflow!r}",
                    param=WORKFLOW_HEADER,
                )
            return session
        if workflow:
            session = self._new(self._registered(workflow), session_id, "off")
            await self.backend.save(session, self.workflows)
            log.info("session_created", session=session_id, workflow=workflow, steer="off")
            return session
        raise SessionNotFoundError(
            f"unknown or expired session {session_id!r}; create it with POST /v1/tether/sessions "
            f"or send {WORKFLOW_HEADER}",
            param=SESSION_HEADER,
        )

    async def drop(self, session_id: str) -> bool:
        return await self.backend.delete(session_id)

    async def observe(
        self, session_id: str, messages: Sequence[Message], *, workflow: str | None = None
    ) -> Session:
        """Resolve the session (``workflow``: the ``X-Tether-Workflow`` header) and fold the request's
        history into its state, each call id once; one atomic update.

        The turn pipeline calls this once per request; ``steer`` and ``check`` then use the session.
        """
        async with self.backend.lock(session_id):
            session = await self._resolve(session_id, workflow)
            new = observe(session.state, messages, session.seen)
            if new:
                await self.backend.save(session, self.workflows)
        if new:
            log.info("session_observed", session=session_id, new_results=new)
        return session

    def steer(self, session: Session, job: ChatJob) -> tuple[ChatJob, Intervention | None]:
        """``job`` with ``tool_choice`` narrowed to the session's next tool when the session steers,
        the client left the choice open (``auto``/``required``) and offered that tool."""
        if session.steer != "next_step" or job.tool_choice not in ("auto", "required"):
            return job, None
        step = session.state.next_step()
        terminal = session.workflow.terminal
        tool = step.tool if step is not None else (terminal[0] if len(terminal) == 1 else None)
        if tool is None or not any(t.name == tool for t in job.tools):
            return job, None
        log.info("session_steered", session=session.id, tool=tool)
        note = Intervention("workflow_steered", f"tool_choice {job.tool_choice!r} -> {tool!r}", tool)
        return replace(job, tool_choice=tool), note

    async def check(self, session: Session, calls: Sequence[ToolCall]) -> Enforcement:
        """Split ``calls`` (the model's new reply) into allowed and blocked; blocked ones carry the
        reason and the tool-role error text.

        Checked against the session as stored now (another replica may have advanced it during the
        generation) and saved with the escalated tiers; ``session`` is refreshed in place. A session
        deleted or expired meanwhile is checked as it was, and not brought back.
        """
        async with self.backend.lock(session.id):
            fresh = await self.backend.load(session.id, self.workflows)
            if fresh is not None:
                session.adopt(fresh)
            verdict = check_calls(session.state, calls)
            if fresh is not None and verdict.blocked:
                await self.backend.save(session, self.workflows)
        for b in verdict.blocked:
            log.info("session_call_blocked", session=session.id, reason=b.reason, tier=b.tier)
        return verdict

    @staticmethod
    def may_regenerate(session: Session) -> bool:
        """Regeneration is allowed while the session stays within ``budgets.max_violations``."""
        return session.state.violations <= session.workflow.budgets.max_violations

    async def describe(self, session_id: str) -> dict[str, Any]:
        session = await self.get(session_id)
        if session is None:
            raise SessionNotFoundError(f"unknown or expired session {session_id!r}", param="session_id")
        return session.describe(self.ttl_s, self.backend.clock())


def open_session_store(
    setting: str, workflows: Iterable[Workflow] = (), *, ttl_s: float = 3600.0, max_sessions: int = 1024
) -> SessionStore:
    """The store ``--session-store`` names: ``memory``, or a Redis URL (checked to answer now:
    ``ConfigError`` when Redis is unreachable or the ``redis`` package is missing)."""
    if setting == "memory":
        return SessionStore(workflows, ttl_s=ttl_s, max_sessions=max_sessions)
    if setting.startswith(REDIS_URL_SCHEMES):
        from tether.workflows.session_redis import RedisSessionBackend

        backend = RedisSessionBackend.connect(setting, ttl_s=ttl_s)
        return SessionStore(workflows, ttl_s=ttl_s, max_sessions=max_sessions, backend=backend)
    raise ConfigError(
        f"--session-store: {setting!r} is neither 'memory' nor a Redis URL (redis://host:port/db)"
    )
